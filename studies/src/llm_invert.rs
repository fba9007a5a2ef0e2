//! `split-studies llm-invert` (`./run.sh llm-invert`): what the server of the chat's U-shaped
//! split could read back from the hidden states it receives.
//!
//! The browser keeps the embedding, blocks `0..k`, the final norm and the output layer; per
//! position of the prompt (and of the answer) it sends the hidden state after block `k − 1`, 576
//! floats coded as the chat codes them (`--codec`, f16 by default; `protocol::llm`). A server
//! that knows the public weights tries to name the token at each position from what it decodes,
//! three ways:
//!
//! - **nearest**: the token whose embedding row is closest in angle (cosine) to the state: the
//!   residual stream starts as the embedding, and blocks add to it;
//! - **lens**: the model's own final norm and output layer applied to the state (the "logit
//!   lens"), its top token taken for the token at that position;
//! - **learned**: a linear map from states at this boundary to embedding rows, fitted by ridge
//!   regression on random token sequences the attacker runs through the public blocks itself
//!   (no text of the user's), then nearest as above.
//!
//! Scored on the user's words only (not the chat markup, which is public), over the prompts of
//! `reports/llm-privacy/prompts.txt`, written for this study and never used to fit anything.
//! Chance is one in the vocabulary (49,152).

use std::ops::Range;
use std::path::PathBuf;

use anyhow::{Context, Result};
use nalgebra::DMatrix;
use serde::Serialize;
use split_kernels::{Activation, Isa, PointwiseShape};
use split_shared::codec::{DEFAULT_HIDDEN_CODEC, HiddenCodec};
use split_shared::models::smollm2::{KvCache, Message, Smollm2, Tokenizer, argmax};
use split_shared::rng::SplitMix64;

use crate::llm::{Chat, command_line, read_prompts, write_report};

/// Recover the prompt's tokens from the hidden states a chat split sends.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The GGUF file (default: the one `./run.sh setup` fetched).
    #[arg(long)]
    model: Option<PathBuf>,
    /// The boundaries: blocks kept in the browser (the server receives the states after them).
    #[arg(long, value_delimiter = ',', default_value = "1,2,3,4,6,8,12,16,20,24,29")]
    blocks: Vec<usize>,
    /// The prompts attacked, one per line.
    #[arg(long, default_value = "reports/llm-privacy/prompts.txt")]
    prompts: PathBuf,
    /// Random token sequences the learned attack is fitted on.
    #[arg(long, default_value_t = 96)]
    train_sequences: usize,
    /// Tokens per training sequence.
    #[arg(long, default_value_t = 32)]
    train_len: usize,
    /// Seed of the training sequences.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// How the states cross (the attack sees them decoded, as the server does).
    #[arg(long, default_value_t = DEFAULT_HIDDEN_CODEC)]
    codec: HiddenCodec,
    /// Where the results go (JSON).
    #[arg(long, default_value = "reports/llm-privacy/data.json")]
    out: PathBuf,
}

/// One boundary's recovery rates (fractions of the scored positions).
#[derive(Serialize, Debug)]
struct BoundaryResult {
    /// Blocks kept in the browser.
    blocks: usize,
    nearest: f64,
    lens: f64,
    learned: f64,
}

#[derive(Serialize, Debug)]
struct Report {
    command: String,
    model: String,
    prompts: usize,
    /// Positions scored (the user's words).
    positions: usize,
    /// Rows the learned attack was fitted on.
    train_rows: usize,
    chance: f64,
    /// The encoding the attacked states crossed in.
    codec: HiddenCodec,
    boundaries: Vec<BoundaryResult>,
}

/// Run the study, print a table and write the JSON report.
pub fn run(a: Args) -> Result<()> {
    let chat = Chat::load(a.model.as_deref())?;
    let (model, tok, template) = (&chat.model, &chat.tokenizer, &chat.template);
    let (dim, vocab) = (model.config.dim, model.config.vocab);
    let mut blocks = a.blocks.clone();
    blocks.sort_unstable();
    blocks.dedup();
    chat.check_blocks(&blocks)?;

    // The states the server would receive for the user's words, per boundary.
    let prompts = read_prompts(&a.prompts)?;
    let mut targets = Vec::new();
    let mut states = vec![Vec::new(); blocks.len()];
    for prompt in &prompts {
        let message = Message { role: "user".into(), content: prompt.clone() };
        let tokens = template.encode(tok, &[message])?;
        let words = content_span(&tokens, tok, prompt)?;
        let mut after = states_after(model, &tokens, &blocks)?;
        // What the server decodes, not what the browser computed.
        for states in &mut after {
            *states = a.codec.round_trip(states, dim);
        }
        for (kept, all) in states.iter_mut().zip(&after) {
            kept.extend_from_slice(&all[words.start * dim..words.end * dim]);
        }
        targets.extend_from_slice(&tokens[words]);
    }

    // The attacker's own data: random token sequences through the public blocks.
    let mut rng = SplitMix64::new(a.seed);
    let mut train_tokens = Vec::new();
    let mut train = vec![Vec::new(); blocks.len()];
    for _ in 0..a.train_sequences {
        let seq: Vec<u32> =
            (0..a.train_len).map(|_| (rng.next_u64() % vocab as u64) as u32).collect();
        for (kept, all) in train.iter_mut().zip(states_after(model, &seq, &blocks)?) {
            kept.extend(all);
        }
        train_tokens.extend(seq);
    }

    let all_ids: Vec<u32> = (0..vocab as u32).collect();
    let table = model.embed(&all_ids)?;
    let nearest = Nearest::new(&table, dim);
    let train_targets = model.embed(&train_tokens)?;
    let score = |guesses: &[u32]| {
        guesses.iter().zip(&targets).filter(|(g, t)| g == t).count() as f64 / targets.len() as f64
    };
    let mut results = Vec::new();
    println!("| blocks in the browser | nearest embedding | logit lens | learned linear map |");
    println!("| ---: | ---: | ---: | ---: |");
    for (i, &b) in blocks.iter().enumerate() {
        let lens = lens_guesses(model, &states[i])?;
        let map = fit_linear_map(&train[i], &train_targets, dim);
        let mapped = apply(&states[i], &map, dim);
        let r = BoundaryResult {
            blocks: b,
            nearest: score(&nearest.guesses(&states[i])),
            lens: score(&lens),
            learned: score(&nearest.guesses(&mapped)),
        };
        println!(
            "| {b} | {:.1}% | {:.1}% | {:.1}% |",
            100.0 * r.nearest,
            100.0 * r.lens,
            100.0 * r.learned
        );
        results.push(r);
    }
    let report = Report {
        command: command_line(),
        model: chat.file.clone(),
        prompts: prompts.len(),
        positions: targets.len(),
        train_rows: train_tokens.len(),
        chance: 1.0 / vocab as f64,
        codec: a.codec,
        boundaries: results,
    };
    eprintln!(
        "llm-invert: {} prompts, {} positions scored, learned map fitted on {} rows; chance {:.1e}",
        report.prompts, report.positions, report.train_rows, report.chance
    );
    write_report(&a.out, &report)?;
    eprintln!("llm-invert: wrote {}", a.out.display());
    Ok(())
}

/// Where the user's words lie in a chat's tokens: the prompt's own tokens, found as a run.
fn content_span(tokens: &[u32], tok: &Tokenizer, prompt: &str) -> Result<Range<usize>> {
    let words = tok.encode(prompt);
    let at = tokens
        .windows(words.len())
        .position(|w| w == words.as_slice())
        .with_context(|| format!("the tokens of {prompt:?} are not a run of its chat's tokens"))?;
    Ok(at..at + words.len())
}

/// The hidden states `[tokens, dim]` after each boundary of `blocks` (sorted): block by block,
/// each with a cache of its own, as the two sides of a split run them.
fn states_after(model: &Smollm2, tokens: &[u32], blocks: &[usize]) -> Result<Vec<Vec<f32>>> {
    let mut hidden = model.embed(tokens)?;
    let mut out = Vec::with_capacity(blocks.len());
    for k in 0..blocks.last().copied().unwrap_or(0) {
        let mut cache = KvCache::new(&model.config, k..k + 1, tokens.len());
        model.forward_layers(k..k + 1, &mut hidden, &mut cache)?;
        if blocks.contains(&(k + 1)) {
            out.push(hidden.clone());
        }
    }
    Ok(out)
}

/// Rows scored against the model's output at once (bounds the logits buffer).
const CHUNK: usize = 64;

/// The logit lens: each state's top token under the final norm and the output layer.
fn lens_guesses(model: &Smollm2, states: &[f32]) -> Result<Vec<u32>> {
    let (dim, vocab) = (model.config.dim, model.config.vocab);
    let mut out = Vec::new();
    for rows in states.chunks(CHUNK * dim) {
        let logits = model.logits(rows)?;
        out.extend(logits.chunks_exact(vocab).map(argmax));
    }
    Ok(out)
}

/// Cosine nearest-neighbour search over the embedding table: the rows scaled to unit length,
/// packed as a 1x1 convolution's weight so that the scores of a chunk of states are one call
/// of the kernels' GEMM.
struct Nearest {
    isa: Isa,
    packed: Vec<f32>,
    zeros: Vec<f32>,
    dim: usize,
    vocab: usize,
}

impl Nearest {
    fn new(table: &[f32], dim: usize) -> Self {
        let vocab = table.len() / dim;
        // Row-major [dim, vocab]: the transposed table of unit rows.
        let mut t = vec![0.0; table.len()];
        for (v, row) in table.chunks_exact(dim).enumerate() {
            let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt().max(f32::MIN_POSITIVE);
            for (i, x) in row.iter().enumerate() {
                t[i * vocab + v] = x / norm;
            }
        }
        let shape = PointwiseShape { pixels: 1, c_in: dim, c_out: vocab };
        Nearest {
            isa: Isa::detect(),
            packed: shape.pack_weight(&t),
            zeros: vec![0.0; vocab],
            dim,
            vocab,
        }
    }

    /// The nearest row (by angle) to each of `states` (`[n, dim]`).
    fn guesses(&self, states: &[f32]) -> Vec<u32> {
        let mut out = Vec::new();
        let mut scores = Vec::new();
        for rows in states.chunks(CHUNK * self.dim) {
            let s =
                PointwiseShape { pixels: rows.len() / self.dim, c_in: self.dim, c_out: self.vocab };
            scores.resize(s.output_len(), 0.0);
            split_kernels::pointwise(
                self.isa,
                s,
                rows,
                &self.packed,
                &self.zeros,
                Activation::Linear,
                None,
                &mut scores,
            );
            out.extend(scores.chunks_exact(self.vocab).map(argmax));
        }
        out
    }
}

/// The ridge-regression map `W` (`[dim, dim]`) minimising `|X W − Y|² + λ|W|²`, with λ a
/// thousandth of `XᵀX`'s mean diagonal: states `X` to embedding rows `Y`.
fn fit_linear_map(x: &[f32], y: &[f32], dim: usize) -> DMatrix<f64> {
    let rows = x.len() / dim;
    let x = DMatrix::from_row_iterator(rows, dim, x.iter().map(|&v| f64::from(v)));
    let y = DMatrix::from_row_iterator(rows, dim, y.iter().map(|&v| f64::from(v)));
    let mut xtx = x.transpose() * &x;
    let lambda = 1e-3 * xtx.trace() / dim as f64;
    for i in 0..dim {
        xtx[(i, i)] += lambda;
    }
    let xty = x.transpose() * y;
    // XᵀX + λI is symmetric positive definite for λ > 0.
    xtx.cholesky().expect("XᵀX + λI is positive definite").solve(&xty)
}

/// `states · W`, row by row.
fn apply(states: &[f32], w: &DMatrix<f64>, dim: usize) -> Vec<f32> {
    let rows = states.len() / dim;
    let x = DMatrix::from_row_iterator(rows, dim, states.iter().map(|&v| f64::from(v)));
    // nalgebra is column-major: the transpose's storage is the product's rows in order.
    (x * w).transpose().iter().map(|&v| v as f32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ridge_map_recovers_a_linear_relation() {
        // y = x · M exactly: the fitted map sends x to y (the ridge term is small).
        let dim = 4;
        let m = [2.0, 0.0, 0.0, 1.0, 0.0, -1.0, 0.5, 0.0, 0.0, 0.0, 3.0, 0.0, 1.0, 0.0, 0.0, 0.5];
        let mut rng = SplitMix64::new(7);
        let x: Vec<f32> =
            (0..64 * dim).map(|_| (rng.next_u64() % 1000) as f32 / 500.0 - 1.0).collect();
        let y: Vec<f32> = x
            .chunks_exact(dim)
            .flat_map(|r| (0..dim).map(move |c| (0..dim).map(|i| r[i] * m[i * dim + c]).sum()))
            .collect();
        let w = fit_linear_map(&x, &y, dim);
        for (got, want) in apply(&x, &w, dim).iter().zip(&y) {
            assert!((got - want).abs() < 0.02, "{got} against {want}");
        }
    }

    #[test]
    fn nearest_finds_rows_by_angle_not_length() {
        // Three unit-ish rows of dim 8; a state scaled 10× along row 2 is row 2's.
        let dim = 8;
        let mut table = vec![0.0; 3 * dim];
        table[0] = 1.0;
        table[dim + 1] = 5.0;
        table[2 * dim + 2] = 0.1;
        table[2 * dim + 3] = 0.1;
        let n = Nearest::new(&table, dim);
        let mut state = vec![0.0; 2 * dim];
        state[2] = 1.0;
        state[3] = 1.2;
        state[dim] = 0.3;
        state[dim + 1] = 0.2;
        assert_eq!(n.guesses(&state), [2, 0]);
    }
}

#[cfg(test)]
mod floor {
    use split_shared::codec::DEFAULT_HIDDEN_CODEC;
    use split_shared::models::smollm2::{DEFAULT_CHAT_PRIVACY_FLOOR, RECOVERY_CEILING};
    use xtask::paths;

    /// The chat's default floor must be what the committed measurement says, measured on what a
    /// browser sends by default: every boundary from the floor on keeps every attack at or below
    /// the ceiling, and the last one measured before it does not (or the floor would be later
    /// than the data says, or earlier than it allows).
    #[test]
    fn the_default_chat_floor_is_what_the_measurements_say() {
        let path = paths::repo_root().join("reports/llm-privacy/data.json");
        let report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        assert_eq!(report["codec"], DEFAULT_HIDDEN_CODEC.name(), "re-run ./run.sh llm-invert");
        let worst = |b: &serde_json::Value| {
            ["nearest", "lens", "learned"]
                .iter()
                .map(|k| b[k].as_f64().unwrap())
                .fold(0.0, f64::max)
        };
        let boundaries = report["boundaries"].as_array().unwrap();
        let blocks = |b: &serde_json::Value| b["blocks"].as_u64().unwrap() as usize;
        assert!(boundaries.iter().any(|b| blocks(b) == DEFAULT_CHAT_PRIVACY_FLOOR), "measured");
        for b in boundaries.iter().filter(|b| blocks(b) >= DEFAULT_CHAT_PRIVACY_FLOOR) {
            assert!(worst(b) <= RECOVERY_CEILING, "{} blocks: {}", blocks(b), worst(b));
        }
        let before = boundaries.iter().rev().find(|b| blocks(b) < DEFAULT_CHAT_PRIVACY_FLOOR);
        assert!(before.is_some_and(|b| worst(b) > RECOVERY_CEILING), "the floor could be earlier");
    }
}
