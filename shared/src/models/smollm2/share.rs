//! The share of the model one side of a split needs, as a GGUF file of its own: the client of a
//! U-shaped split runs the embedding, the first blocks, the final norm and the (tied) output
//! projection, and tokenizes, so it needs those tensors and the metadata — not the blocks the
//! server runs. For SmolLM2 the embedding alone is 30 of the file's 98 MB; each block 2.2 MB.

use super::config::block_of;
use super::{Config, LlmError};
use crate::container::{Gguf, GgufValue};

/// Metadata key the share carries: the blocks it holds are `0..` its value.
pub const SHARE_BLOCKS_KEY: &str = "split.edge_blocks";

/// A GGUF file with every metadata entry of `file`, its embedding and final norm, and blocks
/// `0..blocks` (all of them when `blocks` is the model's block count: the whole model).
///
/// # Errors
/// `file` is not a model this crate loads, or `blocks` is past its block count.
pub fn edge_share(file: &[u8], blocks: usize) -> Result<Vec<u8>, LlmError> {
    let g = Gguf::parse(file)?;
    let config = Config::from_gguf(&g)?;
    if blocks > config.layers {
        return Err(LlmError::Shape(format!(
            "{blocks} edge blocks asked of a model of {}",
            config.layers
        )));
    }
    let keep = |name: &str| block_of(name).is_none_or(|i| i < blocks);
    Ok(g.write_subset(keep, &share_metadata(blocks))?)
}

/// The metadata a share adds: the blocks it holds.
fn share_metadata(blocks: usize) -> [(&'static str, GgufValue); 1] {
    [(SHARE_BLOCKS_KEY, GgufValue::U32(blocks as u32))]
}

/// The length of [`edge_share`] for every number of blocks from 0 to the model's (what the
/// placement planner weighs a share's download by), without making any.
///
/// # Errors
/// `file` is not a model this crate loads.
pub fn share_sizes(file: &[u8]) -> Result<Vec<usize>, LlmError> {
    let g = Gguf::parse(file)?;
    let config = Config::from_gguf(&g)?;
    (0..=config.layers)
        .map(|blocks| -> Result<usize, LlmError> {
            let keep = |name: &str| block_of(name).is_none_or(|i| i < blocks);
            Ok(g.subset_len(keep, &share_metadata(blocks))?)
        })
        .collect()
}

/// A GGUF file with every metadata entry of `file` and no tensors: the tokenizer and the chat
/// format, all a client needs when the server runs the whole model (cloud-only).
///
/// # Errors
/// `file` is not a model this crate loads.
pub fn tokenizer_share(file: &[u8]) -> Result<Vec<u8>, LlmError> {
    let g = Gguf::parse(file)?;
    Config::from_gguf(&g)?;
    Ok(g.write_subset(|_| false, &[])?)
}
