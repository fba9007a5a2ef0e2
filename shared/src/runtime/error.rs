//! What the runtime refuses, whatever the model: boundaries it does not have, activations of
//! the wrong shape, inputs it cannot take, a registry with two models under one id.

/// Errors of the model-agnostic runtime. Each names the model, so a server hosting several
/// says whose rule was broken.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// A boundary index past the model's last.
    #[error("{model} has no boundary {index}: it has {count} (0..{count})")]
    UnknownBoundary {
        /// The model's name.
        model: String,
        /// The index asked for.
        index: u8,
        /// Its number of boundaries.
        count: usize,
    },
    /// A boundary name the model does not have.
    #[error("{model} has no boundary named {name:?}")]
    UnknownBoundaryName {
        /// The model's name.
        model: String,
        /// The name asked for.
        name: String,
    },
    /// Activations whose shape is not a batch at the boundary they claim.
    #[error(
        "shape {got:?} does not match {model}'s boundary {boundary}: expected [n, {expected:?}] with 1 <= n <= {max_batch}"
    )]
    ShapeMismatch {
        /// The model's name.
        model: String,
        /// The boundary's name.
        boundary: String,
        /// One item's shape there.
        expected: Vec<usize>,
        /// The shape received.
        got: Vec<usize>,
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
    /// A NaN or an infinity among activations: no network makes them, so the sender is broken.
    #[error("non-finite value in {model}'s activations")]
    NonFinite {
        /// The model's name.
        model: String,
    },
    /// A range asked to run backwards.
    #[error("{model} cannot run from boundary {from} to {to}: the range must go forward")]
    BackwardRange {
        /// The model's name.
        model: String,
        /// Start index.
        from: u8,
        /// End index.
        to: u8,
    },
    /// An image sent to a model whose input is not an image.
    #[error("{model} does not take images: send its input as features at boundary 0")]
    NoImageInput {
        /// The model's name.
        model: String,
    },
    /// A frame in a calibrated encoding for a model that has no codec of its own.
    #[error("{model} has no calibrated codec: send f32 or ranged features")]
    NoCodec {
        /// The model's name.
        model: String,
    },
    /// Stacking activations from different models or boundaries.
    #[error("cannot stack activations of different models or boundaries")]
    MixedStack,
    /// A model description that cannot be served (no boundaries, a repeated name, a shape of
    /// rank over 3).
    #[error("model description invalid: {0}")]
    BadSpec(String),
    /// A profile that cannot be measured (no inputs, a setting that needs a calibration).
    #[error("cannot profile {0}")]
    BadProfile(String),
    /// A second model registered under an id or a name already taken.
    #[error("a model with id {id} or name {name:?} is already registered")]
    Duplicate {
        /// The id.
        id: u8,
        /// The name.
        name: String,
    },
}
