//! What can go wrong encoding or decoding features.

/// A codec failure; [`crate::protocol::ErrorCode::of_codec`] is what the server answers with.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    /// A setting name that does not parse.
    #[error(
        "unknown codec setting {0:?}; use f32, q<bits>[-r<rank>][-packed], s<level 0-24>, ranged<bits> or learned<bits>, e.g. q4, q2-r16, s12, learned4"
    )]
    BadSetting(String),
    /// A noise option that does not parse.
    #[error("unknown noise {0:?}; use gauss:<scale> or laplace:<scale> with a scale in (0, 4]")]
    BadNoise(String),
    /// A quantized setting was used where no calibration is loaded.
    #[error("no codec calibration is loaded; run `cargo xtask setup` (or `calibrate`)")]
    NoCalibration,
    /// A bit depth without calibration tables.
    #[error("{0} bits per value is not supported; use 8, 6, 4, 3 or 2")]
    UnsupportedBits(u8),
    /// The calibration file is malformed.
    #[error("calibration file is invalid: {0}")]
    BadCalibration(String),
    /// The calibration has no tables for this boundary and setting.
    #[error("no calibration for {setting} at {boundary}")]
    NotCalibrated {
        /// Boundary asked for, by name.
        boundary: String,
        /// Setting asked for, as its name.
        setting: String,
    },
    /// A projection rank above what was calibrated.
    #[error("rank {rank} exceeds the {max} components calibrated at {boundary}")]
    RankTooLarge {
        /// Boundary asked for, by name.
        boundary: String,
        /// Rank asked for.
        rank: u16,
        /// Largest calibrated rank.
        max: usize,
    },
    /// The frame was coded with another calibration file than the one loaded here.
    #[error("frame uses calibration {got:016x}, this side has {expected:016x}; reload it")]
    CalibrationMismatch {
        /// Id of the calibration loaded here.
        expected: u64,
        /// Id in the frame.
        got: u64,
    },
    /// Activations whose channels are not those the calibration was made for at their
    /// boundary (a calibration of another model, or of another version of it).
    #[error("{got} channels at {boundary}; the calibration has {calibrated} there")]
    ChannelMismatch {
        /// Boundary, by name.
        boundary: String,
        /// Channels the calibration's tables cover.
        calibrated: usize,
        /// Channels the activations have.
        got: usize,
    },
    /// Coded features must be one image.
    #[error("coded features carry one image; got a batch of {0}")]
    BatchNotOne(usize),
    /// The payload does not decode.
    #[error("bad codec payload: {0}")]
    BadPayload(&'static str),
    /// An allocation level beyond [`super::alloc::MAX_LEVEL`].
    #[error("level {0} is not supported; use s0 to s24")]
    UnsupportedLevel(u8),
    /// A frame coded with a context model this build does not have.
    #[error("context model {0} is not supported; this build decodes model {1}")]
    UnsupportedModel(u8, u8),
    /// A delta frame the decoder cannot apply: lost, reordered, or without a keyframe.
    #[error("stream {stream}: {reason}; send a keyframe")]
    KeyframeRequired {
        /// Stream id.
        stream: u32,
        /// What was wrong.
        reason: String,
    },
}
