//! The architecture's numbers, read from the GGUF metadata and checked.

use super::LlmError;
use crate::container::{Gguf, GgufValue};

/// A Llama-architecture model's dimensions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Config {
    /// Transformer blocks.
    pub layers: usize,
    /// Width of the hidden state (the embedding).
    pub dim: usize,
    /// Width of the feed-forward layer.
    pub ffn: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (grouped-query attention: `heads / kv_heads` queries share one).
    pub kv_heads: usize,
    /// Values per head.
    pub head_dim: usize,
    /// Tokens in the vocabulary.
    pub vocab: usize,
    /// Positions the model was trained for.
    pub context: usize,
    /// RoPE's frequency base.
    pub rope_base: f32,
    /// RMSNorm's epsilon.
    pub norm_eps: f32,
}

impl Config {
    /// The numbers of a `llama` GGUF file.
    pub fn from_gguf(g: &Gguf) -> Result<Self, LlmError> {
        let arch = match g.get("general.architecture") {
            Some(GgufValue::Str(s)) => s.clone(),
            Some(_) => return Err(meta("general.architecture", "not a string")),
            None => return Err(LlmError::Missing("general.architecture".into())),
        };
        if arch != "llama" {
            return Err(meta(
                "general.architecture",
                &format!("{arch:?}; only \"llama\" is supported"),
            ));
        }
        let int = |key: &str| -> Result<usize, LlmError> {
            let v = g.get(key).ok_or_else(|| LlmError::Missing(key.into()))?;
            let n = v.as_u64().ok_or_else(|| meta(key, "not an unsigned integer"))?;
            // Bounds that keep every product below in range on 32-bit targets too.
            if n == 0 || n > 1 << 20 {
                return Err(meta(key, &format!("{n} is out of range")));
            }
            Ok(n as usize)
        };
        let float = |key: &str| -> Result<f32, LlmError> {
            match g.get(key) {
                Some(GgufValue::F32(v)) if v.is_finite() && *v > 0.0 => Ok(*v),
                Some(_) => Err(meta(key, "not a positive f32")),
                None => Err(LlmError::Missing(key.into())),
            }
        };
        let layers = int("llama.block_count")?;
        let dim = int("llama.embedding_length")?;
        let heads = int("llama.attention.head_count")?;
        let kv_heads = int("llama.attention.head_count_kv")?;
        if !dim.is_multiple_of(heads)
            || !heads.is_multiple_of(kv_heads)
            || !(dim / heads).is_multiple_of(2)
        {
            return Err(meta("llama.attention.head_count", "heads do not divide the width evenly"));
        }
        let vocab = match g.get("tokenizer.ggml.tokens") {
            Some(GgufValue::Array(t)) => t.len(),
            _ => return Err(LlmError::Missing("tokenizer.ggml.tokens".into())),
        };
        Ok(Config {
            layers,
            dim,
            ffn: int("llama.feed_forward_length")?,
            heads,
            kv_heads,
            head_dim: dim / heads,
            vocab,
            context: int("llama.context_length")?,
            rope_base: float("llama.rope.freq_base")?,
            norm_eps: float("llama.attention.layer_norm_rms_epsilon")?,
        })
    }

    /// Width of the keys (or values) one position adds to a layer's cache.
    pub fn kv_dim(&self) -> usize {
        self.kv_heads * self.head_dim
    }
}

fn meta(key: &str, why: &str) -> LlmError {
    LlmError::Metadata { key: key.into(), why: why.into() }
}

/// The block a tensor belongs to, from its name (`blk.7.attn_q.weight` → 7); `None` for the
/// tensors outside the blocks (embedding, final norm).
pub(crate) fn block_of(tensor: &str) -> Option<usize> {
    tensor.strip_prefix("blk.")?.split('.').next()?.parse().ok()
}
