//! What can go wrong loading or running the language model.

use crate::container::GgufError;
use crate::runtime::SequenceError;

/// An error of the language model: its file, its input, its state.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum LlmError {
    /// The GGUF file cannot be read.
    #[error(transparent)]
    Gguf(#[from] GgufError),
    /// A metadata key the model needs is absent.
    #[error("the model file has no {0:?}")]
    Missing(String),
    /// A metadata value of the wrong type or out of range.
    #[error("the model file's {key:?}: {why}")]
    Metadata {
        /// The key.
        key: String,
        /// What is wrong with its value.
        why: String,
    },
    /// A tensor of the wrong shape or type.
    #[error("tensor {name:?}: {why}")]
    Tensor {
        /// The tensor's name.
        name: String,
        /// What is wrong with it.
        why: String,
    },
    /// A step refused: a token outside the vocabulary, more positions than the context (or the
    /// cache's budget) holds, or blocks and rows that do not fit ([`SequenceError`]).
    #[error(transparent)]
    Step(#[from] SequenceError),
    /// A layer range outside the model, or a hidden state of the wrong width.
    #[error("{0}")]
    Shape(String),
}
