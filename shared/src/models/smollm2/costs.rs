//! What this side's compute costs for the placement planner ([`crate::plan::LlmSideCosts`]):
//! a prefill and decode steps through the blocks this side holds, and the head, timed on the
//! real weights with a clock passed in (`Instant` natively, `performance.now()` in a browser,
//! where `std::time` has no clock).

use super::{KvCache, LlmError, Smollm2, argmax};
use crate::plan::LlmSideCosts;

/// Positions of the timed prefill: about a chat prompt's, so that the decode steps after it
/// attend over as many positions as an answer's do.
const PREFILL_POSITIONS: usize = 32;
/// Decode steps timed after it.
const DECODE_STEPS: usize = 8;
/// Blocks timed at most (the cost is per block; more only takes longer).
const TIMED_BLOCKS: usize = 2;

/// Rounds timed; each figure is the median of them, after an untimed warm-up: what this side's
/// compute costs with its weights warm, not what a passing load (the server's own start, a page
/// still loading) or a cold cache added to one round. One round without a warm-up read the head
/// at 2.5× and a block at 1.7× their steady cost at the server's start (3.83 against 1.5 ms,
/// 0.32 against 0.19 a block, the same machine, 2026-12-05).
const ROUNDS: usize = 3;

/// Time a prefill of [`PREFILL_POSITIONS`] and [`DECODE_STEPS`] decode steps through the
/// model's first blocks (at most [`TIMED_BLOCKS`]), and the head, [`ROUNDS`] times after an
/// untimed warm-up, keeping the median of each; `now` reads a clock in milliseconds. About
/// 41–44 ms natively for SmolLM2 (2-core Zen 4, dev profile, 2026-12-05). A share without blocks has no block cost: its block figures
/// are `NaN`.
///
/// # Errors
/// What the forward pass returns (it should not, on hidden states made here).
pub fn measure_costs(model: &Smollm2, now: &dyn Fn() -> f64) -> Result<LlmSideCosts, LlmError> {
    let held = model.blocks();
    let blocks = held.start..held.end.min(held.start + TIMED_BLOCKS);
    let dim = model.config.dim;
    // Hidden states of real tokens (the embedding of ids spread over the vocabulary).
    let ids: Vec<u32> = (0..PREFILL_POSITIONS + DECODE_STEPS)
        .map(|i| ((i * 7919 + 13) % model.config.vocab) as u32)
        .collect();
    let hidden = model.embed(&ids)?;
    let per_block = |ms: f64, positions: usize| {
        if blocks.is_empty() { f64::NAN } else { ms / (blocks.len() * positions) as f64 }
    };
    // Warm-up, untimed: a decode step in a cache of its own and a head (first touches of the
    // weights; the head reads the whole embedding table).
    if !blocks.is_empty() {
        let mut warm = KvCache::new(&model.config, blocks.clone(), 1);
        model.forward_layers(blocks.clone(), &mut hidden[..dim].to_vec(), &mut warm)?;
    }
    std::hint::black_box(argmax(&model.logits(&hidden[..dim])?));
    let (mut prefill_ms, mut token_ms, mut head_ms) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        if !blocks.is_empty() {
            let mut cache =
                KvCache::new(&model.config, blocks.clone(), PREFILL_POSITIONS + DECODE_STEPS);
            let mut prompt = hidden[..PREFILL_POSITIONS * dim].to_vec();
            let t = now();
            model.forward_layers(blocks.clone(), &mut prompt, &mut cache)?;
            prefill_ms.push(now() - t);
            let t = now();
            for step in hidden[PREFILL_POSITIONS * dim..].chunks_exact(dim) {
                model.forward_layers(blocks.clone(), &mut step.to_vec(), &mut cache)?;
            }
            token_ms.push(now() - t);
        }
        let t = now();
        std::hint::black_box(argmax(&model.logits(&hidden[dim..2 * dim])?));
        head_ms.push(now() - t);
    }
    Ok(LlmSideCosts {
        block_token_ms: per_block(median(token_ms), DECODE_STEPS),
        block_prefill_ms: per_block(median(prefill_ms), PREFILL_POSITIONS),
        head_ms: median(head_ms),
    })
}

/// The middle value of `v` (NaN when empty: a share without blocks times none).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}
