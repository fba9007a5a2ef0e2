//! What this side's compute costs for the placement planner ([`crate::plan::LlmSideCosts`]):
//! a prefill and decode steps through the blocks this side holds, and the head, timed on the
//! real weights with a clock passed in (`Instant` natively, `performance.now()` in a browser,
//! where `std::time` has no clock).

use super::{KvCache, LlmError, Smollm2, argmax};
use crate::plan::LlmSideCosts;

/// Positions of the timed prefill.
const PREFILL_POSITIONS: usize = 16;
/// Decode steps timed after it.
const DECODE_STEPS: usize = 8;
/// Blocks timed at most (the cost is per block; more only takes longer).
const TIMED_BLOCKS: usize = 2;

/// Time a prefill of [`PREFILL_POSITIONS`] and [`DECODE_STEPS`] decode steps through the
/// model's first blocks (at most [`TIMED_BLOCKS`]), and the head a few times; `now` reads a
/// clock in milliseconds. About 40 ms natively for SmolLM2. A share without blocks has no block
/// cost: its block figures are `NaN`.
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
    let mut prefill_ms = f64::NAN;
    let mut token_ms = f64::NAN;
    if !blocks.is_empty() {
        // One warm-up decode step in a cache of its own (first touches of the weights).
        let mut warm = KvCache::new(&model.config, blocks.clone(), 1);
        model.forward_layers(blocks.clone(), &mut hidden[..dim].to_vec(), &mut warm)?;
        let mut cache =
            KvCache::new(&model.config, blocks.clone(), PREFILL_POSITIONS + DECODE_STEPS);
        let mut prompt = hidden[..PREFILL_POSITIONS * dim].to_vec();
        let t = now();
        model.forward_layers(blocks.clone(), &mut prompt, &mut cache)?;
        prefill_ms = now() - t;
        let t = now();
        for step in hidden[PREFILL_POSITIONS * dim..].chunks_exact(dim) {
            model.forward_layers(blocks.clone(), &mut step.to_vec(), &mut cache)?;
        }
        token_ms = now() - t;
    }
    let heads = 3;
    let t = now();
    for row in hidden.chunks_exact(dim).take(heads) {
        std::hint::black_box(argmax(&model.logits(row)?));
    }
    let head_ms = (now() - t) / heads as f64;
    Ok(LlmSideCosts {
        block_token_ms: per_block(token_ms, DECODE_STEPS),
        block_prefill_ms: per_block(prefill_ms, PREFILL_POSITIONS),
        head_ms,
    })
}
