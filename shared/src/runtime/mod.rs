//! The split runtime: what a model implements to run split, and the host-side values the
//! server and the tools move between its halves, without naming any model.
//!
//! A model describes itself in a [`ModelSpec`] (its wire id, name, and named boundaries with
//! the shape of one item at each) and implements [`SplitModel`]: run from the boundary its
//! [`Activations`] are at to a later one, turn a features frame into activations (f32 unless
//! the model brings a codec), and, for a model whose input is a picture, turn image bytes into
//! its input. The server's request path, its batching queue and result cache work through this
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

use crate::codec::{Setting, StreamDecoder};
use crate::protocol::{Encoding, FeaturesFrame};

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

    /// The activations a features frame carries, checked against the spec. The default takes
    /// the encodings that need no calibration (f32 and ranged, [`decode_plain`]); a model with
    /// a codec of its own decodes its encodings here, `streams` being the sending session's
    /// stream references.
    ///
    /// # Errors
    /// [`RuntimeError::NoCodec`] for a calibrated encoding, else as [`decode_plain`].
    fn decode_features(
        &self,
        frame: &FeaturesFrame,
        streams: &mut StreamDecoder,
    ) -> crate::Result<Activations> {
        let _ = streams;
        decode_plain(self.spec(), frame)
    }

    /// The codec setting clients should send features in (`/api/info` lists it per model):
    /// f32 unless the model brings a codec.
    fn default_codec(&self) -> Setting {
        Setting::F32
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

/// The activations of a features frame in an encoding that needs no calibration (f32, or
/// ranged: [`crate::codec::ranged`]) for the model `spec` describes.
///
/// # Errors
/// [`RuntimeError::NoCodec`] for a calibrated encoding, what the ranged codec refuses, else as
/// [`Activations::new`].
pub fn decode_plain(spec: &ModelSpec, frame: &FeaturesFrame) -> crate::Result<Activations> {
    let dims: Vec<usize> = frame.shape.iter().map(|d| *d as usize).collect();
    // The shape first: a ranged payload's length follows from it.
    spec.check(frame.boundary, &dims, spec.max_batch)?;
    let values = match &frame.encoding {
        Encoding::F32 => frame.f32_values(),
        Encoding::Ranged(params) => crate::codec::decode_ranged(&dims, *params, &frame.payload)?,
        Encoding::Coded(_) | Encoding::Allocated(_) => {
            return Err(RuntimeError::NoCodec { model: spec.name.clone() }.into());
        }
    };
    Ok(Activations::new(spec, frame.boundary, &dims, values)?)
}

/// A features frame of `x` in an encoding that needs no calibration: f32 (`bits` `None`), or
/// ranged at `bits` bits a value. What an edge running a model without a codec sends.
///
/// # Errors
/// [`crate::codec::CodecError::UnsupportedBits`].
pub fn encode_plain(x: &Activations, bits: Option<u8>) -> crate::Result<FeaturesFrame> {
    let (encoding, payload) = match bits {
        None => (Encoding::F32, x.values().iter().flat_map(|v| v.to_le_bytes()).collect()),
        Some(bits) => {
            let (params, payload) = crate::codec::encode_ranged(x.dims(), x.values(), bits)?;
            (Encoding::Ranged(params), payload)
        }
    };
    let shape = x.dims().iter().map(|d| *d as u32).collect();
    Ok(FeaturesFrame { boundary: x.boundary(), encoding, shape, payload })
}
