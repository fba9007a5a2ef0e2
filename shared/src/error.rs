//! The crate's umbrella error: each layer has its own type ([`ModelError`],
//! [`crate::codec::CodecError`], [`crate::protocol::WireError`], [`crate::runtime::RuntimeError`]) and this one carries any of
//! them, for the functions that cross layers (decoding a frame into activations, an image into
//! a tensor). [`crate::protocol::ErrorCode::of`] maps it to the code a reply carries.

use crate::model::ModelError;

/// Errors from preprocessing, the model, the codec or a frame.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The model refused its input or its weights; see [`ModelError`].
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The image bytes could not be decoded.
    #[error("could not decode image: {0}")]
    ImageDecode(String),
    /// A frame failed to decode; see [`crate::protocol::WireError`].
    #[error(transparent)]
    Wire(#[from] crate::protocol::WireError),
    /// Features failed to encode or decode; see [`crate::codec::CodecError`].
    #[error(transparent)]
    Codec(#[from] crate::codec::CodecError),
    /// A model-agnostic rule was broken; see [`crate::runtime::RuntimeError`].
    #[error(transparent)]
    Runtime(#[from] crate::runtime::RuntimeError),
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
