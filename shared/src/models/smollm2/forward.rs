//! The forward pass in three parts a split can cut between: [`Smollm2::embed`] (token ids →
//! hidden states), [`Smollm2::forward_layers`] (any range of transformer blocks, with the KV
//! cache of those blocks), [`Smollm2::logits`] (final norm and the tied output projection).
//!
//! A block: `x += Wo · attention(rope(Wq · norm(x)), rope(Wk · norm(x)), Wv · norm(x))`, then
//! `x += Wdown · (silu(Wgate · norm(x)) ⊙ Wup · norm(x))`; RMSNorm with a learned scale, RoPE on
//! adjacent pairs of each head (the GGUF file's Q and K rows are ordered for it), grouped-query
//! attention with a causal mask. Hidden states are `[tokens, dim]`, row-major.
//!
//! [`Smollm2::forward_batch`] runs several conversations' steps at once (a server's continuous
//! batching): each block's matrix products take every step's rows in one pass over the
//! weights, and each step's result is bit for bit what it gets alone
//! ([`split_kernels::quant_matmul_groups`]; attention and everything else is per step).

use std::ops::Range;

use split_kernels::{Isa, quant_matmul, quant_matmul_groups, quant_matmul_q8};

use super::weights::{LayerWeights, QuantWeight, Weights};
use super::{Config, LlmError, Tokenizer};
use crate::container::Gguf;
use crate::runtime::SequenceError;

/// SmolLM2 (or any Llama-architecture GGUF with tied embeddings in Q4_1/Q8_0).
#[derive(Debug)]
pub struct Smollm2 {
    /// The architecture's numbers.
    pub config: Config,
    weights: Weights,
    /// RoPE's inverse frequencies, one per pair of a head.
    inv_freq: Vec<f64>,
    isa: Isa,
    /// Steps of fewer than [`Q8_BELOW`] positions multiply with 8-bit activations
    /// ([`Smollm2::with_q8_activations`]).
    q8_activations: bool,
    /// What the runtime sees of it ([`crate::runtime::SequenceModel`]).
    pub(super) spec: crate::runtime::SequenceSpec,
}

/// Positions a step must have fewer of to take 8-bit activations when they are on: from four
/// on, the exact kernel unpacks each weight block once for all of them and is the faster.
const Q8_BELOW: usize = 4;

/// One conversation's part of a batched step ([`Smollm2::forward_batch`]): the runtime's
/// step with SmolLM2's cache as its state (its blocks, its hidden states `[tokens, dim]`
/// replaced by the states after the blocks, and the cache of those blocks).
pub type Step<'a> = crate::runtime::SequenceStep<'a, KvCache>;

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

    /// The blocks it holds the keys and values of.
    pub fn blocks(&self) -> Range<usize> {
        self.layers.clone()
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
        let spec = crate::runtime::SequenceSpec {
            id: crate::protocol::MODEL_SMOLLM2,
            name: super::SMOLLM2_NAME.into(),
            blocks: config.layers,
            width: config.dim,
            vocab: config.vocab,
            context: config.context,
            // Keys and values, f32.
            state_bytes_per_position: config.kv_dim() * 2 * 4,
        };
        Ok(Smollm2 { config, weights, inv_freq, isa: Isa::detect(), q8_activations: false, spec })
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

    /// Multiply decode steps (fewer than four positions; a prompt stays exact) with activations
    /// quantized to 8 bits per value, as llama.cpp does ([`split_kernels::quant_matmul_q8`]):
    /// faster on one core, and answers that may part from the reference's after a few tokens.
    /// Off by default; each step's result still does not depend on the steps batched with it.
    pub fn with_q8_activations(mut self, on: bool) -> Self {
        self.q8_activations = on;
        self
    }

    /// Whether decode steps multiply with 8-bit activations.
    pub fn q8_activations(&self) -> bool {
        self.q8_activations
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
                return Err(SequenceError::Token { id, vocab: self.config.vocab }.into());
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
        let mut steps = [Step { blocks: layers, hidden, state: cache }];
        self.forward_batch(&mut steps).pop().unwrap_or(Ok(()))
    }

    /// [`Self::forward_layers`] for several steps (of different conversations) at once, each
    /// with its own blocks, rows and cache; one result per step, in order. A step that is
    /// refused (its blocks, its rows, its cache's room) changes nothing and does not stop the
    /// others; each step's hidden states and cache end bit for bit as [`Self::forward_layers`]
    /// would leave them.
    pub fn forward_batch(&self, steps: &mut [Step<'_>]) -> Vec<Result<(), LlmError>> {
        let checked: Vec<Result<usize, LlmError>> =
            steps.iter().map(|s| self.check_step(s)).collect();
        let held = self.blocks();
        let dim = self.config.dim;
        let runs = |s: &Step<'_>, layer: usize| s.blocks.contains(&layer);
        for layer in held {
            let active: Vec<usize> = (0..steps.len())
                .filter(|&i| checked[i].is_ok() && runs(&steps[i], layer))
                .collect();
            if active.is_empty() {
                continue;
            }
            let rows: Vec<usize> = active.iter().map(|&i| steps[i].hidden.len() / dim).collect();
            let mut x: Vec<f32> =
                active.iter().flat_map(|&i| steps[i].hidden.iter().copied()).collect();
            let mut parts: Vec<(usize, &mut KvCache, usize)> = steps
                .iter_mut()
                .enumerate()
                .filter(|(i, _)| active.contains(i))
                .map(|(_, s)| (s.hidden.len() / dim, &mut *s.state, layer - s.blocks.start))
                .collect();
            let w = &self.weights.layers[layer - self.weights.first_block];
            if let Err(e) = self.block(w, &mut x, &rows, &mut parts) {
                // Shapes were checked: an error here is the model's own, for every step.
                return steps.iter().map(|_| Err(LlmError::Shape(e.to_string()))).collect();
            }
            let mut at = 0;
            for &i in &active {
                let n = steps[i].hidden.len();
                steps[i].hidden.copy_from_slice(&x[at..at + n]);
                at += n;
            }
        }
        steps
            .iter_mut()
            .zip(checked)
            .map(|(s, c)| {
                s.state.len += c?;
                Ok(())
            })
            .collect()
    }

    /// The rows of a step, or why it cannot run.
    fn check_step(&self, s: &Step<'_>) -> Result<usize, LlmError> {
        let held = self.blocks();
        let (layers, cache) = (&s.blocks, &s.state);
        if *layers != cache.layers || layers.start < held.start || layers.end > held.end {
            return Err(LlmError::Shape(format!(
                "blocks {layers:?} with a cache of blocks {:?} (this file holds blocks {held:?})",
                cache.layers
            )));
        }
        let n = self.rows(&*s.hidden)?;
        if cache.len + n > cache.capacity {
            let (needed, limit) = (cache.len + n, cache.capacity);
            return Err(SequenceError::Context { needed, limit }.into());
        }
        if let Some(bad) = s.hidden.iter().find(|v| !v.is_finite()) {
            return Err(LlmError::Shape(format!("a hidden state holds {bad}")));
        }
        Ok(n)
    }

    /// Logits `[tokens, vocab]` of final hidden states `[tokens, dim]`.
    pub fn logits(&self, hidden: &[f32]) -> Result<Vec<f32>, LlmError> {
        let (n, normed) = self.final_norm(hidden)?;
        self.matmul(&self.weights.embedding, &normed, n)
    }

    /// [`Self::logits`] of each row on its own (`[rows, vocab]`): the heads of several
    /// conversations' steps in one pass over the output projection, each row's logits bit for
    /// bit what [`Self::logits`] gives it alone.
    pub fn logits_each(&self, hidden: &[f32]) -> Result<Vec<f32>, LlmError> {
        let (n, normed) = self.final_norm(hidden)?;
        self.matmul_groups(&self.weights.embedding, &normed, &vec![1; n])
    }

    /// The rows of final hidden states, and the states through the final norm.
    fn final_norm(&self, hidden: &[f32]) -> Result<(usize, Vec<f32>), LlmError> {
        let c = &self.config;
        let n = self.rows(hidden)?;
        let mut normed = hidden.to_vec();
        for row in normed.chunks_exact_mut(c.dim) {
            rms_norm(row, &self.weights.output_norm, c.norm_eps);
        }
        Ok((n, normed))
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
        self.matmul_groups(w, x, &[tokens])
    }

    /// The product of several steps' rows, each group summed as it would be alone.
    fn matmul_groups(
        &self,
        w: &QuantWeight,
        x: &[f32],
        groups: &[usize],
    ) -> Result<Vec<f32>, LlmError> {
        let m = w.matrix();
        let total: usize = groups.iter().sum();
        let (cols, rows) = (m.cols, m.rows);
        let mut out = vec![0.0; total * rows];
        let shape = |e: split_kernels::QuantShapeError| LlmError::Shape(e.to_string());
        // The exact kernel also reports wrong lengths (which the split below must not meet).
        if !self.q8_activations || x.len() != total * cols {
            quant_matmul_groups(self.isa, &m, x, groups, &mut out).map_err(shape)?;
            return Ok(out);
        }
        // Each group on its own, so that its result is what it gets alone either way.
        let (mut xs, mut outs) = (x, &mut out[..]);
        for &g in groups {
            let (xg, rest_x) = xs.split_at(g * cols);
            let (og, rest_out) = outs.split_at_mut(g * rows);
            if g < Q8_BELOW {
                quant_matmul_q8(self.isa, &m, xg, g, og).map_err(shape)?;
            } else {
                quant_matmul(self.isa, &m, xg, g, og).map_err(shape)?;
            }
            (xs, outs) = (rest_x, rest_out);
        }
        Ok(out)
    }

    /// One block over the rows of several steps (`x`: their rows one after the other, `rows`
    /// per step); `parts` holds each step's rows, cache, and the block's place in that cache.
    fn block(
        &self,
        w: &LayerWeights,
        x: &mut [f32],
        rows: &[usize],
        parts: &mut [(usize, &mut KvCache, usize)],
    ) -> Result<(), LlmError> {
        let c = &self.config;
        let (dim, kv_dim) = (c.dim, c.kv_dim());
        let mut h = x.to_vec();
        for row in h.chunks_exact_mut(dim) {
            rms_norm(row, &w.attn_norm, c.norm_eps);
        }
        let mut q = self.matmul_groups(&w.q, &h, rows)?;
        let mut keys = self.matmul_groups(&w.k, &h, rows)?;
        let values = self.matmul_groups(&w.v, &h, rows)?;
        let mut attended = vec![0.0f32; x.len()];
        let mut at = 0;
        for (n, cache, k) in parts.iter_mut() {
            let (n, k) = (*n, *k);
            let start = cache.len;
            let q = &mut q[at * dim..(at + n) * dim];
            let keys = &mut keys[at * kv_dim..(at + n) * kv_dim];
            for t in 0..n {
                self.rope(&mut q[t * dim..(t + 1) * dim], start + t);
                self.rope(&mut keys[t * kv_dim..(t + 1) * kv_dim], start + t);
            }
            cache.keys[k].extend_from_slice(keys);
            cache.values[k].extend_from_slice(&values[at * kv_dim..(at + n) * kv_dim]);
            self.attend(
                q,
                &cache.keys[k],
                &cache.values[k],
                start,
                &mut attended[at * dim..(at + n) * dim],
            );
            at += n;
        }
        let projected = self.matmul_groups(&w.o, &attended, rows)?;
        for (x, p) in x.iter_mut().zip(&projected) {
            *x += p;
        }
        h.copy_from_slice(x);
        for row in h.chunks_exact_mut(dim) {
            rms_norm(row, &w.ffn_norm, c.norm_eps);
        }
        let mut gate = self.matmul_groups(&w.gate, &h, rows)?;
        let up = self.matmul_groups(&w.up, &h, rows)?;
        for (g, u) in gate.iter_mut().zip(&up) {
            *g = *g / (1.0 + (-*g).exp()) * u;
        }
        let down = self.matmul_groups(&w.down, &gate, rows)?;
        for (x, d) in x.iter_mut().zip(&down) {
            *x += d;
        }
        Ok(())
    }

    /// Causal grouped-query attention of one step's queries (`[n, dim]`, at positions
    /// `start..start + n`) over a cache's keys and values (`[start + n, kv_dim]` each).
    fn attend(&self, q: &[f32], all_k: &[f32], all_v: &[f32], start: usize, out: &mut [f32]) {
        let c = &self.config;
        let (dim, hd, kv_dim) = (c.dim, c.head_dim, c.kv_dim());
        let n = q.len() / dim;
        let group = c.heads / c.kv_heads;
        let scale = 1.0 / (hd as f32).sqrt();
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
                let out = &mut out[t * dim + head * hd..][..hd];
                for (j, &p) in s.iter().enumerate() {
                    let vj = &all_v[j * kv_dim + kvh * hd..][..hd];
                    let p = p / total;
                    for (o, v) in out.iter_mut().zip(vj) {
                        *o += p * v;
                    }
                }
            }
        }
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
