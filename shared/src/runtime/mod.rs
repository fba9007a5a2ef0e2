//! The split runtime: what a model implements to run split, and the host-side values the
//! server and the tools move between its halves, without naming any model.
//!
//! A model describes itself in a [`ModelSpec`] (its wire id, name, and named boundaries with
//! the shape of one item at each) and implements [`SplitModel`]: run from the boundary its
//! [`Activations`] are at to a later one, turn a features frame into activations (f32 unless
//! the model brings a codec), and, for a model whose input is a picture, turn image bytes into
//! its input. The server's request path, its batching queue and result cache work through this
//! trait only; a [`Registry`] holds the models one process hosts, by the id every frame
//! carries. `docs/models.md` shows a model plugged in.
//!
//! Stateful models (a language model's KV cache) keep their own per-conversation protocol on
//! `/llm` for now ([`crate::models::smollm2`]).

mod activations;
mod error;
mod registry;
mod spec;

pub use activations::Activations;
pub use error::RuntimeError;
pub use registry::Registry;
pub use spec::{BoundarySpec, MAX_ITEM_RANK, ModelSpec};

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
    /// f32 payloads only; a model with a codec decodes its coded encodings here, `streams`
    /// being the sending session's stream references.
    ///
    /// # Errors
    /// [`RuntimeError::F32Only`] for a coded frame, else as [`Activations::new`].
    fn decode_features(
        &self,
        frame: &FeaturesFrame,
        streams: &mut StreamDecoder,
    ) -> crate::Result<Activations> {
        let _ = streams;
        decode_f32(self.spec(), frame)
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

/// The activations of an f32 features frame for the model `spec` describes.
///
/// # Errors
/// [`RuntimeError::F32Only`] for any other encoding, else as [`Activations::new`].
pub fn decode_f32(spec: &ModelSpec, frame: &FeaturesFrame) -> crate::Result<Activations> {
    if frame.encoding != Encoding::F32 {
        return Err(RuntimeError::F32Only { model: spec.name.clone() }.into());
    }
    let dims: Vec<usize> = frame.shape.iter().map(|d| *d as usize).collect();
    Ok(Activations::new(spec, frame.boundary, &dims, frame.f32_values())?)
}
