//! The split runtime: what a model implements to run split, and the host-side values the
//! server and the tools move between its halves, without naming any model.
//!
//! A model describes itself in a [`ModelSpec`] (its wire id, name, and named boundaries with
//! the shape of one item at each) and implements [`SplitModel`]: run from the boundary its
//! [`Activations`] are at to a later one, name the codec calibration its frames may be coded
//! with (none: f32 and ranged only), and, for a model whose input is a picture, turn image
//! bytes into its input. [`encode_frame`] and [`decode_frame`] move any model's activations
//! through the feature codec, its tables found by the boundary's name. The server's request path, its batching queue and result cache work through this
//! trait only; a [`Registry`] holds the models one process hosts, by the id every frame
//! carries. [`ProfileSetup`] measures any model's cost table, which the planner
//! ([`crate::plan`]) chooses a split from. `docs/models.md` shows a model plugged in.
//!
//! Stateful models (a language model's KV cache) implement [`SequenceModel`] instead: each
//! side keeps the state of its own blocks per conversation ([`sequence`]); their frames are
//! the `/llm` protocol's ([`crate::protocol::LlmFrame`]).

mod activations;
mod error;
mod profile;
mod registry;
pub mod sequence;
mod spec;
mod stage;

pub use activations::Activations;
pub use error::RuntimeError;
pub use profile::ProfileSetup;
pub use registry::Registry;
pub use sequence::{SequenceError, SequenceModel, SequenceSpec, SequenceState, SequenceStep};
pub use spec::{BoundarySpec, MAX_ITEM_RANK, ModelSpec};
pub use stage::{MemberStage, Refusal, StageAction, check_hidden, check_position};

use crate::codec::{Calibration, DecodeContext, EncodeContext, Setting, StreamDecoder};
use crate::protocol::{Encoding, FeatureView, FeaturesFrame};

/// A model that runs split: the runtime's one contract with it. Implementations hold their
/// weights and device; every method may be called from several threads at once.
pub trait SplitModel: Send + Sync {
    /// What the model is: id, name, boundaries.
    fn spec(&self) -> &ModelSpec;

    /// Run from `x`'s boundary to boundary `to` (`to` equal to it returns `x`).
    ///
    /// # Errors
    /// [`RuntimeError::UnknownBoundary`] or [`RuntimeError::BackwardRange`] for a bad `to`; what
    /// the model's own computation reports.
    fn forward_range(&self, x: Activations, to: u8) -> crate::Result<Activations>;

    /// The codec calibration this model's coded frames use (its tables by boundary name, held
    /// to [`Self::spec`] by [`Calibration::check_spec`] when the model is made); `None`, the
    /// default: its features travel as f32 or ranged only.
    fn calibration(&self) -> Option<&Calibration> {
        None
    }

    /// The activations a features frame carries, checked against the spec: [`decode_frame`]
    /// with the model's calibration, `streams` being the sending session's stream references.
    /// A model with a codec of another kind decodes its encodings here.
    ///
    /// # Errors
    /// As [`decode_frame`].
    fn decode_features(
        &self,
        frame: &FeaturesFrame,
        streams: &mut StreamDecoder,
    ) -> crate::Result<Activations> {
        decode_frame(self.spec(), frame, self.calibration(), Some(streams))
    }

    /// The codec setting clients should send features in (`/api/info` lists it per model):
    /// the calibration's default ([`Calibration::default_setting`]), f32 without one.
    fn default_codec(&self) -> Setting {
        self.calibration().map_or(Setting::F32, Calibration::default_setting)
    }

    /// The model's input (boundary 0, batch of one) from image bytes: the whole photo to crop
    /// and resize, or (`exact`) a picture already of the input's size. The default refuses:
    /// a model whose input is not a picture is sent features at boundary 0 instead.
    ///
    /// # Errors
    /// [`RuntimeError::NoImageInput`] by default; an image model's decoding errors.
    fn image_input(&self, bytes: &[u8], exact: bool) -> crate::Result<Activations> {
        let _ = (bytes, exact);
        Err(RuntimeError::NoImageInput { model: self.spec().name.clone() }.into())
    }
}

/// The activations a features frame carries for the model `spec` describes: the shape checked
/// against the boundary first (a coded payload's length follows from it), then the payload
/// decoded, a calibrated encoding with `calibration`'s tables at the boundary's name and
/// `streams` (a session's stream references; `None` refuses residual frames).
///
/// # Errors
/// [`RuntimeError::NoCodec`] for a calibrated encoding without a calibration, what the codec
/// refuses ([`crate::codec::CodecError`]), else as [`Activations::new`].
pub fn decode_frame(
    spec: &ModelSpec,
    frame: &FeaturesFrame,
    calibration: Option<&Calibration>,
    streams: Option<&mut StreamDecoder>,
) -> crate::Result<Activations> {
    let dims = frame.dims();
    spec.check(frame.boundary, &dims, spec.max_batch)?;
    let calibrated = matches!(
        frame.encoding,
        Encoding::Coded(_) | Encoding::Allocated(_) | Encoding::Learned(_)
    );
    if calibrated && calibration.is_none() {
        return Err(RuntimeError::NoCodec { model: spec.name.clone() }.into());
    }
    let name = &spec.boundary(frame.boundary)?.name;
    let ctx = DecodeContext::new(calibration).with_streams(streams);
    let values = frame.decode_values(name, ctx)?;
    Ok(Activations::new(spec, frame.boundary, &dims, values)?)
}

/// The activations of a features frame in an encoding that needs no calibration (f32, or
/// ranged: [`crate::codec::ranged`]): [`decode_frame`] without a calibration.
///
/// # Errors
/// As [`decode_frame`].
pub fn decode_plain(spec: &ModelSpec, frame: &FeaturesFrame) -> crate::Result<Activations> {
    decode_frame(spec, frame, None, None)
}

/// A features frame of `x` (activations of the model `spec` describes) coded under `setting`,
/// a calibrated one with the tables `ctx` holds at the boundary's name.
///
/// # Errors
/// [`RuntimeError::UnknownBoundary`] when `x` is not at one of `spec`'s boundaries; what the
/// codec refuses.
pub fn encode_frame(
    spec: &ModelSpec,
    x: &Activations,
    setting: Setting,
    ctx: EncodeContext<'_>,
) -> crate::Result<FeaturesFrame> {
    let name = &spec.boundary(x.boundary())?.name;
    let view = FeatureView { index: x.boundary(), name, dims: x.dims(), values: x.values() };
    Ok(FeaturesFrame::encode(view, setting, ctx)?)
}

/// A features frame of `x` in an encoding that needs no calibration: f32 (`bits` `None`), or
/// ranged at `bits` bits a value. What an edge running a model without a codec sends.
///
/// # Errors
/// [`crate::codec::CodecError::UnsupportedBits`].
pub fn encode_plain(x: &Activations, bits: Option<u8>) -> crate::Result<FeaturesFrame> {
    let setting = bits.map_or(Setting::F32, Setting::Ranged);
    // Neither encoding looks a table up: the boundary's name is not needed.
    let view = FeatureView { index: x.boundary(), name: "", dims: x.dims(), values: x.values() };
    Ok(FeaturesFrame::encode(view, setting, EncodeContext::default())?)
}
