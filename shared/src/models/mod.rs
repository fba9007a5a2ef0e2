//! Models beside EfficientNet-Lite0 (which still lives in [`crate::model`]).
//!
//! - [`smollm2`]: SmolLM2-135M-Instruct, a Llama-architecture language model read from its
//!   GGUF file, with its tokenizer and chat format.

pub mod smollm2;
