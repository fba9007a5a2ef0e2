//! What the model refuses: unknown boundaries, ranges that run backwards, activations of the
//! wrong shape, weights that do not fit the architecture.

use super::Boundary;
use crate::container::ContainerError;

/// Errors from loading the weights and running the network.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
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
    /// Activations whose shape does not match the boundary they claim to be at.
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
    /// An input for [`super::EfficientNetLite0::forward_at`] that is not a square image of a
    /// size it runs.
    #[error(
        "shape {got:?} is not an input the network runs at another size: expected [n, 3, s, s] with 1 <= n <= {max_batch} and {min} <= s <= {max}"
    )]
    InputSize {
        /// The shape received.
        got: Vec<usize>,
        /// Smallest side.
        min: usize,
        /// Largest side.
        max: usize,
        /// Largest batch accepted.
        max_batch: usize,
    },
    /// Values and shape disagree in length.
    #[error("{values} values do not fill shape {dims:?}")]
    LengthMismatch {
        /// The shape.
        dims: Vec<usize>,
        /// The number of values.
        values: usize,
    },
    /// The weights file is malformed, truncated, for another model, or misses a tensor.
    #[error("weights file is invalid: {0}; run `./run.sh setup` to fetch and convert it again")]
    BadWeights(#[from] ContainerError),
    /// A light model's precision this build does not know.
    #[error("unknown light-model precision {0:?}; expected int8 or int4-g<group> (e.g. int4-g32)")]
    UnknownPrecision(String),
    /// The weights file could not be read.
    #[error("cannot read the weights {path}: {reason}; run `./run.sh setup` to create it")]
    Unreadable {
        /// The path tried.
        path: String,
        /// The I/O error.
        reason: String,
    },
    /// A range runs through a stage whose weights were not loaded (the edge loads only the
    /// stages its split needs).
    #[error(
        "cannot run from {from} to {to}: the weights of the stage ending at {stage} are not loaded"
    )]
    StageNotLoaded {
        /// The first stage missing, named by the boundary it ends at.
        stage: Boundary,
        /// Start boundary.
        from: Boundary,
        /// End boundary.
        to: Boundary,
    },
    /// A backend failed to produce tensor data.
    #[error("backend error: {0}")]
    Backend(String),
}

/// Result with [`ModelError`].
pub type Result<T, E = ModelError> = std::result::Result<T, E>;
