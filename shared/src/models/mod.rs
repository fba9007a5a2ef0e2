//! The models, each in a folder of its own and hosted through the runtime
//! ([`crate::runtime::SplitModel`]).
//!
//! - [`efficientnet_lite0`]: the image classifier split at 21 named boundaries, with its weights
//!   format, light model and the adapter the server hosts (`Lite0Split`). The crate re-exports it
//!   as [`crate::model`], the path every crate uses; the codec, the cost table and the planner
//!   are still built on its `Boundary`.
//! - [`smollm2`]: SmolLM2-135M-Instruct, a Llama-architecture language model read from its
//!   GGUF file, with its tokenizer and chat format.

pub mod efficientnet_lite0;
pub mod smollm2;
