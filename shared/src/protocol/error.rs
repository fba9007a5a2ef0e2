//! Why a frame was refused, as a typed error on the decoding side and a numeric code on the wire.

use crate::codec::CodecError;
use crate::model::ModelError;
use crate::runtime::RuntimeError;

/// A frame that could not be decoded. Each variant maps to an [`ErrorCode`] sent back to the peer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The frame ended before a field it announced.
    #[error("frame truncated: needed {needed} bytes, got {got}")]
    Truncated {
        /// Bytes needed to read the next field.
        needed: usize,
        /// Bytes present.
        got: usize,
    },
    /// The first four bytes are not "SPLT".
    #[error("not a split-inference frame (bad magic)")]
    BadMagic,
    /// The peer speaks another protocol version.
    #[error("protocol version {got} is not supported; this side speaks {supported}")]
    UnsupportedVersion {
        /// Version in the frame.
        got: u16,
        /// Version this side speaks.
        supported: u16,
    },
    /// A frame kind this side does not know.
    #[error("unknown frame kind {kind:#04x}")]
    UnknownKind {
        /// Request id from the header.
        id: u64,
        /// Kind byte.
        kind: u8,
    },
    /// A model id this side does not serve.
    #[error("unknown model id {model}")]
    UnknownModel {
        /// Request id from the header.
        id: u64,
        /// Model byte.
        model: u8,
    },
    /// A payload encoding this side cannot decode.
    #[error("unsupported payload encoding {0}")]
    UnsupportedEncoding(u8),
    /// Codec flags this side does not know.
    #[error("unknown codec flags {0:#04x}")]
    UnknownFlags(u8),
    /// More dimensions than any activation has.
    #[error("{0} dimensions; at most 4 are allowed")]
    TooManyDims(u8),
    /// Payload over [`super::MAX_PAYLOAD_BYTES`].
    #[error("payload of {len} bytes exceeds the limit of {max}")]
    PayloadTooLarge {
        /// Announced length.
        len: usize,
        /// Limit.
        max: usize,
    },
    /// The payload length disagrees with the shape and dtype.
    #[error("payload is {got} bytes but shape {shape:?} needs {expected}")]
    LengthMismatch {
        /// Announced shape.
        shape: Vec<u32>,
        /// Bytes the shape needs.
        expected: usize,
        /// Bytes announced.
        got: usize,
    },
    /// Bytes after the end of the body.
    #[error("{extra} unexpected bytes after the frame body")]
    TrailingBytes {
        /// How many.
        extra: usize,
    },
    /// A reply string that is not UTF-8 or too long.
    #[error("invalid message text")]
    BadText,
}

impl From<crate::container::Truncated> for WireError {
    fn from(e: crate::container::Truncated) -> Self {
        Self::Truncated { needed: e.needed, got: e.got }
    }
}

impl WireError {
    /// The code sent back for this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::UnsupportedVersion { .. } => ErrorCode::UnsupportedVersion,
            Self::PayloadTooLarge { .. } => ErrorCode::TooLarge,
            Self::UnknownModel { .. } => ErrorCode::UnknownModel,
            // A codec from a newer client: say so rather than call the frame garbage.
            Self::UnsupportedEncoding(_) => ErrorCode::UnsupportedCodec,
            _ => ErrorCode::Malformed,
        }
    }
}

/// Error codes carried in error replies. Stable on the wire: never renumber, only add.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[repr(u16)]
#[non_exhaustive]
pub enum ErrorCode {
    /// The frame could not be parsed.
    Malformed = 1,
    /// The frame's protocol version is not spoken here.
    UnsupportedVersion = 2,
    /// The frame or payload is over a limit.
    TooLarge = 3,
    /// The model id is not served here.
    UnknownModel = 4,
    /// The tensor's shape does not match its boundary.
    ShapeMismatch = 5,
    /// The uploaded image could not be decoded.
    BadImage = 6,
    /// The server's queue is full; retry later.
    Busy = 7,
    /// Text frames or other message types this endpoint does not take.
    UnsupportedMessage = 8,
    /// The server failed; the request may be retried.
    Internal = 9,
    /// Features coded with a calibration file other than the server's.
    CalibrationMismatch = 10,
    /// A delta frame could not be applied; the client must send a keyframe.
    KeyframeRequired = 11,
    /// A codec setting the server has no calibration for.
    UnsupportedCodec = 12,
    /// The client sent more requests than the server's per-client rate allows; retry later.
    RateLimited = 13,
    /// A code from a newer peer.
    Unknown = 0xffff,
}

impl ErrorCode {
    /// From the wire value; unknown values map to [`ErrorCode::Unknown`].
    pub fn from_u16(v: u16) -> Self {
        match v {
            1 => Self::Malformed,
            2 => Self::UnsupportedVersion,
            3 => Self::TooLarge,
            4 => Self::UnknownModel,
            5 => Self::ShapeMismatch,
            6 => Self::BadImage,
            7 => Self::Busy,
            8 => Self::UnsupportedMessage,
            9 => Self::Internal,
            10 => Self::CalibrationMismatch,
            11 => Self::KeyframeRequired,
            12 => Self::UnsupportedCodec,
            13 => Self::RateLimited,
            _ => Self::Unknown,
        }
    }

    /// Stable lower-case name, for logs and JavaScript.
    pub fn name(self) -> &'static str {
        match self {
            Self::Malformed => "malformed",
            Self::UnsupportedVersion => "unsupported_version",
            Self::TooLarge => "too_large",
            Self::UnknownModel => "unknown_model",
            Self::ShapeMismatch => "shape_mismatch",
            Self::BadImage => "bad_image",
            Self::Busy => "busy",
            Self::UnsupportedMessage => "unsupported_message",
            Self::Internal => "internal",
            Self::CalibrationMismatch => "calibration_mismatch",
            Self::KeyframeRequired => "keyframe_required",
            Self::UnsupportedCodec => "unsupported_codec",
            Self::RateLimited => "rate_limited",
            Self::Unknown => "unknown",
        }
    }
}

impl ErrorCode {
    /// Every code a peer of this version sends, in wire order.
    pub const ALL: [ErrorCode; 13] = [
        Self::Malformed,
        Self::UnsupportedVersion,
        Self::TooLarge,
        Self::UnknownModel,
        Self::ShapeMismatch,
        Self::BadImage,
        Self::Busy,
        Self::UnsupportedMessage,
        Self::Internal,
        Self::CalibrationMismatch,
        Self::KeyframeRequired,
        Self::UnsupportedCodec,
        Self::RateLimited,
    ];

    /// The code whose [`name`](Self::name) this is; `None` for a name not on the wire.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.name() == name)
    }

    /// Whether the same request may succeed if sent again later, unchanged: the server was
    /// busy, over a client's rate, or failed on its side. Clients retry these (or answer
    /// locally meanwhile); every other refusal is the request's own.
    pub fn is_transient(self) -> bool {
        matches!(self, Self::Busy | Self::RateLimited | Self::Internal)
    }

    /// Whether sending the same request again can never succeed: every code but the
    /// transient ones, `keyframe_required` (send a keyframe instead) and a code from a newer
    /// peer (whose meaning is not known here).
    pub fn is_permanent(self) -> bool {
        !self.is_transient() && !matches!(self, Self::KeyframeRequired | Self::Unknown)
    }
}

impl ErrorCode {
    /// The code a reply carries for a request that failed with `e`: every layer's errors map
    /// here, in the protocol, so the codec and the model need not know the wire.
    pub fn of(e: &crate::Error) -> Self {
        match e {
            crate::Error::Model(m) => Self::of_model(m),
            crate::Error::ImageDecode(_) => Self::BadImage,
            crate::Error::Wire(w) => w.code(),
            crate::Error::Codec(c) => Self::of_codec(c),
            crate::Error::Runtime(r) => Self::of_runtime(r),
        }
    }

    /// The code for a model-agnostic refusal.
    pub fn of_runtime(e: &RuntimeError) -> Self {
        match e {
            RuntimeError::ShapeMismatch { .. } | RuntimeError::LengthMismatch { .. } => {
                Self::ShapeMismatch
            }
            RuntimeError::NoCodec { .. } => Self::UnsupportedCodec,
            RuntimeError::UnknownBoundary { .. }
            | RuntimeError::UnknownBoundaryName { .. }
            | RuntimeError::NonFinite { .. }
            | RuntimeError::NoImageInput { .. } => Self::Malformed,
            RuntimeError::BackwardRange { .. }
            | RuntimeError::MixedStack
            | RuntimeError::BadSpec(_)
            | RuntimeError::BadProfile(_)
            | RuntimeError::Duplicate { .. } => Self::Internal,
        }
    }

    /// The code for a codec failure.
    pub fn of_codec(e: &CodecError) -> Self {
        match e {
            CodecError::KeyframeRequired { .. } => Self::KeyframeRequired,
            CodecError::CalibrationMismatch { .. } => Self::CalibrationMismatch,
            CodecError::NoCalibration
            | CodecError::UnsupportedBits(_)
            | CodecError::UnsupportedLevel(_)
            | CodecError::UnsupportedModel(..)
            | CodecError::NotCalibrated { .. }
            | CodecError::RankTooLarge { .. } => Self::UnsupportedCodec,
            CodecError::BatchNotOne(_) | CodecError::ChannelMismatch { .. } => Self::ShapeMismatch,
            CodecError::BadSetting(_)
            | CodecError::BadNoise(_)
            | CodecError::BadCalibration(_)
            | CodecError::BadPayload(_) => Self::Malformed,
        }
    }

    /// The code for a model failure.
    pub fn of_model(e: &ModelError) -> Self {
        match e {
            ModelError::ShapeMismatch { .. }
            | ModelError::LengthMismatch { .. }
            | ModelError::InputSize { .. } => Self::ShapeMismatch,
            ModelError::UnknownBoundary(_) | ModelError::UnknownPrecision(_) => Self::Malformed,
            ModelError::BackwardRange { .. }
            | ModelError::BadWeights(_)
            | ModelError::Unreadable { .. }
            | ModelError::StageNotLoaded { .. }
            | ModelError::Backend(_) => Self::Internal,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers_go_both_ways() {
        for code in ErrorCode::ALL {
            assert_eq!(ErrorCode::from_u16(code as u16), code);
            assert_eq!(ErrorCode::from_name(code.name()), Some(code));
        }
        assert_eq!(ErrorCode::from_u16(14), ErrorCode::Unknown);
        assert_eq!(ErrorCode::from_name("network"), None, "a client-side code is not on the wire");
    }

    #[test]
    fn every_code_is_transient_permanent_or_neither_for_a_reason() {
        let transient: Vec<_> = ErrorCode::ALL.into_iter().filter(|c| c.is_transient()).collect();
        assert_eq!(transient, [ErrorCode::Busy, ErrorCode::Internal, ErrorCode::RateLimited]);
        let neither: Vec<_> =
            ErrorCode::ALL.into_iter().filter(|c| !c.is_transient() && !c.is_permanent()).collect();
        assert_eq!(neither, [ErrorCode::KeyframeRequired]);
        assert!(!ErrorCode::Unknown.is_transient() && !ErrorCode::Unknown.is_permanent());
    }
}
