//! One error type for the crate; every variant says what went wrong in terms a caller can act on.

use crate::model::Boundary;

/// Errors from model loading, preprocessing and frame decoding.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A boundary index or name that does not exist.
    #[error(
        "unknown boundary {0:?}; expected one of input, stem, block0..block15, head, pool, logits"
    )]
    UnknownBoundary(String),
    /// `forward_range` asked to run backwards.
    #[error("cannot run from {from} to {to}: the range must go forward")]
    BackwardRange {
        /// Start boundary.
        from: Boundary,
        /// End boundary.
        to: Boundary,
    },
    /// A tensor's shape does not match the boundary it claims to be at.
    #[error(
        "shape {got:?} does not match boundary {boundary}: expected [n, {expected:?}] with 1 <= n <= {max_batch}"
    )]
    ShapeMismatch {
        /// The boundary the tensor claims to be at.
        boundary: Boundary,
        /// Expected `[C, H, W]`.
        expected: [usize; 3],
        /// The shape received.
        got: Vec<usize>,
        /// Largest batch accepted.
        max_batch: usize,
    },
    /// The weights file is malformed, truncated or for another model.
    #[error("weights file is invalid: {0}")]
    BadWeights(String),
    /// The image bytes could not be decoded.
    #[error("could not decode image: {0}")]
    ImageDecode(String),
    /// A frame failed to decode; see [`crate::protocol::WireError`].
    #[error(transparent)]
    Wire(#[from] crate::protocol::WireError),
    /// Features failed to encode or decode; see [`crate::codec::CodecError`].
    #[error(transparent)]
    Codec(#[from] crate::codec::CodecError),
    /// A backend failed to produce tensor data.
    #[error("backend error: {0}")]
    Backend(String),
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
