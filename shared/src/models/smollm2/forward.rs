//! The forward pass in three parts a split can cut between: [`Smollm2::embed`] (token ids →
//! hidden states), [`Smollm2::forward_layers`] (any range of transformer blocks, with the KV
//! cache of those blocks), [`Smollm2::logits`] (final norm and the tied output projection).
//!
//! A block: `x += Wo · attention(rope(Wq · norm(x)), rope(Wk · norm(x)), Wv · norm(x))`, then
//! `x += Wdown · (silu(Wgate · norm(x)) ⊙ Wup · norm(x))`; RMSNorm with a learned scale, RoPE on
//! adjacent pairs of each head (the GGUF file's Q and K rows are ordered for it), grouped-query
//! attention with a causal mask. Hidden states are `[tokens, dim]`, row-major.

use std::ops::Range;

use split_kernels::{Isa, quant_matmul};

use super::weights::{LayerWeights, QuantWeight, Weights};
use super::{Config, LlmError, Tokenizer};
use crate::container::Gguf;

/// SmolLM2 (or any Llama-architecture GGUF with tied embeddings in Q4_1/Q8_0).
#[derive(Debug)]
pub struct Smollm2 {
    /// The architecture's numbers.
    pub config: Config,
    weights: Weights,
    /// RoPE's inverse frequencies, one per pair of a head.
    inv_freq: Vec<f64>,
    isa: Isa,
}

/// The keys and values a range of blocks has seen, one row per position.
#[derive(Clone, Debug)]
pub struct KvCache {
    layers: Range<usize>,
    keys: Vec<Vec<f32>>,
    values: Vec<Vec<f32>>,
    kv_dim: usize,
    len: usize,
    capacity: usize,
}

impl KvCache {
    /// An empty cache for `layers` holding at most `capacity` positions.
    pub fn new(config: &Config, layers: Range<usize>, capacity: usize) -> Self {
        let n = layers.len();
        KvCache {
            layers,
            keys: vec![Vec::new(); n],
            values: vec![Vec::new(); n],
            kv_dim: config.kv_dim(),
            len: 0,
            capacity: capacity.min(config.context),
        }
    }

    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no position is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Positions it may hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.keys.iter().chain(&self.values).map(|v| v.len() * 4).sum()
    }

    /// Forget every position from `len` on (to rewind a conversation).
    pub fn truncate(&mut self, len: usize) {
        if len < self.len {
            self.len = len;
            for v in self.keys.iter_mut().chain(self.values.iter_mut()) {
                v.truncate(len * self.kv_dim);
            }
        }
    }
}

impl Smollm2 {
    /// The model in a parsed GGUF file.
    pub fn from_gguf(g: &Gguf) -> Result<Self, LlmError> {
        let config = Config::from_gguf(g)?;
        let weights = Weights::from_gguf(g, &config)?;
        let half = config.head_dim / 2;
        let inv_freq = (0..half)
            .map(|i| f64::from(config.rope_base).powf(-(2.0 * i as f64) / config.head_dim as f64))
            .collect();
        Ok(Smollm2 { config, weights, inv_freq, isa: Isa::detect() })
    }

    /// The model and its tokenizer from a GGUF file's bytes.
    pub fn load(bytes: &[u8]) -> Result<(Self, Tokenizer), LlmError> {
        Self::load_parsed(&Gguf::parse(bytes)?)
    }

    /// [`Self::load`] from a file already parsed (a caller that reads more of its metadata).
    pub fn load_parsed(g: &Gguf) -> Result<(Self, Tokenizer), LlmError> {
        let tokenizer = Tokenizer::from_gguf(g)?;
        let model = Smollm2::from_gguf(g)?;
        if tokenizer.vocab() != model.config.vocab {
            return Err(LlmError::Shape(
                "the tokenizer and the embedding differ in vocabulary".into(),
            ));
        }
        Ok((model, tokenizer))
    }

    /// Run on the given instruction set instead of the best one (tests and benchmarks).
    pub fn with_isa(mut self, isa: Isa) -> Self {
        self.isa = isa;
        self
    }

    /// The blocks whose weights are loaded: every block (`0..config.layers`), or the share of
    /// a split a file made by [`Gguf::write_subset`] holds.
    pub fn blocks(&self) -> Range<usize> {
        let first = self.weights.first_block;
        first..first + self.weights.layers.len()
    }

    /// Bytes the weights hold in memory.
    pub fn weight_bytes(&self) -> usize {
        self.weights.bytes()
    }

    /// Hidden states `[tokens, dim]` of token ids.
    pub fn embed(&self, tokens: &[u32]) -> Result<Vec<f32>, LlmError> {
        let dim = self.config.dim;
        let mut out = vec![0.0; tokens.len() * dim];
        let table = self.weights.embedding.matrix();
        for (&id, row) in tokens.iter().zip(out.chunks_exact_mut(dim)) {
            if id as usize >= self.config.vocab {
                return Err(LlmError::Token { id, vocab: self.config.vocab });
            }
            table.dequantize_row(id as usize, row).map_err(|e| LlmError::Shape(e.to_string()))?;
        }
        Ok(out)
    }

    /// Run blocks `layers` over `hidden` (`[tokens, dim]`, in place) at the positions after
    /// those `cache` holds, and append their keys and values to it.
    pub fn forward_layers(
        &self,
        layers: Range<usize>,
        hidden: &mut [f32],
        cache: &mut KvCache,
    ) -> Result<(), LlmError> {
        let held = self.blocks();
        if layers != cache.layers || layers.start < held.start || layers.end > held.end {
            return Err(LlmError::Shape(format!(
                "blocks {layers:?} with a cache of blocks {:?} (this file holds blocks {held:?})",
                cache.layers
            )));
        }
        let n = self.rows(hidden)?;
        if cache.len + n > cache.capacity {
            return Err(LlmError::Context { needed: cache.len + n, limit: cache.capacity });
        }
        if let Some(bad) = hidden.iter().find(|v| !v.is_finite()) {
            return Err(LlmError::Shape(format!("a hidden state holds {bad}")));
        }
        for (k, layer) in layers.clone().enumerate() {
            let w = &self.weights.layers[layer - held.start];
            self.block(w, hidden, n, cache, k)?;
        }
        cache.len += n;
        Ok(())
    }

    /// Logits `[tokens, vocab]` of final hidden states `[tokens, dim]`.
    pub fn logits(&self, hidden: &[f32]) -> Result<Vec<f32>, LlmError> {
        let c = &self.config;
        let n = self.rows(hidden)?;
        let mut normed = hidden.to_vec();
        for row in normed.chunks_exact_mut(c.dim) {
            rms_norm(row, &self.weights.output_norm, c.norm_eps);
        }
        self.matmul(&self.weights.embedding, &normed, n)
    }

    /// Every block over `tokens` appended to `cache` (all blocks), and the logits of the last.
    pub fn forward(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Vec<f32>, LlmError> {
        let dim = self.config.dim;
        let mut hidden = self.embed(tokens)?;
        self.forward_layers(0..self.config.layers, &mut hidden, cache)?;
        let last = hidden.len().saturating_sub(dim);
        self.logits(&hidden[last..])
    }

    /// Rows of a hidden-state buffer `[tokens, dim]`.
    fn rows(&self, hidden: &[f32]) -> Result<usize, LlmError> {
        let dim = self.config.dim;
        if !hidden.len().is_multiple_of(dim) {
            return Err(LlmError::Shape(format!("{} values are not rows of {dim}", hidden.len())));
        }
        Ok(hidden.len() / dim)
    }

    fn matmul(&self, w: &QuantWeight, x: &[f32], tokens: usize) -> Result<Vec<f32>, LlmError> {
        let mut out = vec![0.0; tokens * w.rows()];
        quant_matmul(self.isa, &w.matrix(), x, tokens, &mut out)
            .map_err(|e| LlmError::Shape(e.to_string()))?;
        Ok(out)
    }

    fn block(
        &self,
        w: &LayerWeights,
        x: &mut [f32],
        n: usize,
        cache: &mut KvCache,
        k: usize,
    ) -> Result<(), LlmError> {
        let c = &self.config;
        let (dim, hd, kv_dim) = (c.dim, c.head_dim, c.kv_dim());
        let start = cache.len;
        let mut h = x.to_vec();
        for row in h.chunks_exact_mut(dim) {
            rms_norm(row, &w.attn_norm, c.norm_eps);
        }
        let mut q = self.matmul(&w.q, &h, n)?;
        let mut keys = self.matmul(&w.k, &h, n)?;
        let values = self.matmul(&w.v, &h, n)?;
        for t in 0..n {
            self.rope(&mut q[t * dim..(t + 1) * dim], start + t);
            self.rope(&mut keys[t * kv_dim..(t + 1) * kv_dim], start + t);
        }
        cache.keys[k].extend_from_slice(&keys);
        cache.values[k].extend_from_slice(&values);
        let (all_k, all_v) = (&cache.keys[k], &cache.values[k]);
        let group = c.heads / c.kv_heads;
        let scale = 1.0 / (hd as f32).sqrt();
        let mut attended = vec![0.0f32; n * dim];
        let mut scores = vec![0.0f32; start + n];
        for t in 0..n {
            let visible = start + t + 1;
            for head in 0..c.heads {
                let kvh = head / group;
                let qh = &q[t * dim + head * hd..][..hd];
                let s = &mut scores[..visible];
                for (j, s) in s.iter_mut().enumerate() {
                    let kj = &all_k[j * kv_dim + kvh * hd..][..hd];
                    *s = qh.iter().zip(kj).map(|(a, b)| a * b).sum::<f32>() * scale;
                }
                let max = s.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let mut total = 0.0;
                for v in s.iter_mut() {
                    *v = (*v - max).exp();
                    total += *v;
                }
                let out = &mut attended[t * dim + head * hd..][..hd];
                for (j, &p) in s.iter().enumerate() {
                    let vj = &all_v[j * kv_dim + kvh * hd..][..hd];
                    let p = p / total;
                    for (o, v) in out.iter_mut().zip(vj) {
                        *o += p * v;
                    }
                }
            }
        }
        let projected = self.matmul(&w.o, &attended, n)?;
        for (x, p) in x.iter_mut().zip(&projected) {
            *x += p;
        }
        h.copy_from_slice(x);
        for row in h.chunks_exact_mut(dim) {
            rms_norm(row, &w.ffn_norm, c.norm_eps);
        }
        let mut gate = self.matmul(&w.gate, &h, n)?;
        let up = self.matmul(&w.up, &h, n)?;
        for (g, u) in gate.iter_mut().zip(&up) {
            *g = *g / (1.0 + (-*g).exp()) * u;
        }
        let down = self.matmul(&w.down, &gate, n)?;
        for (x, d) in x.iter_mut().zip(&down) {
            *x += d;
        }
        Ok(())
    }

    /// Rotate each head's adjacent pairs by `pos · inv_freq[i]`.
    fn rope(&self, v: &mut [f32], pos: usize) {
        let hd = self.config.head_dim;
        for head in v.chunks_exact_mut(hd) {
            for (pair, &f) in head.chunks_exact_mut(2).zip(&self.inv_freq) {
                let (sin, cos) = (pos as f64 * f).sin_cos();
                let (sin, cos) = (sin as f32, cos as f32);
                let (a, b) = (pair[0], pair[1]);
                pair[0] = a * cos - b * sin;
                pair[1] = a * sin + b * cos;
            }
        }
    }
}

/// `x / sqrt(mean(x²) + eps) · weight`, in place.
fn rms_norm(x: &mut [f32], weight: &[f32], eps: f32) {
    let mean = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
    let inv = 1.0 / (mean + eps).sqrt();
    for (v, w) in x.iter_mut().zip(weight) {
        *v *= inv * w;
    }
}
