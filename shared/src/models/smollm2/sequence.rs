//! SmolLM2 on the runtime's stateful contract ([`SequenceModel`]): its KV cache is the state of
//! a conversation's blocks, the tied output projection its head.

use std::ops::Range;

use super::{KvCache, LlmError, Smollm2};
use crate::runtime::{SequenceError, SequenceModel, SequenceSpec, SequenceState, SequenceStep};

impl From<LlmError> for SequenceError {
    fn from(e: LlmError) -> Self {
        match e {
            LlmError::Step(e) => e,
            other => SequenceError::Shape(other.to_string()),
        }
    }
}

impl SequenceState for KvCache {
    fn len(&self) -> usize {
        KvCache::len(self)
    }

    fn capacity(&self) -> usize {
        KvCache::capacity(self)
    }

    fn blocks(&self) -> Range<usize> {
        KvCache::blocks(self)
    }

    fn bytes(&self) -> usize {
        KvCache::bytes(self)
    }

    fn truncate(&mut self, len: usize) {
        KvCache::truncate(self, len);
    }
}

impl SequenceModel for Smollm2 {
    type State = KvCache;

    fn sequence_spec(&self) -> &SequenceSpec {
        &self.spec
    }

    fn held_blocks(&self) -> Range<usize> {
        self.blocks()
    }

    fn new_state(&self, blocks: Range<usize>, capacity: usize) -> KvCache {
        KvCache::new(&self.config, blocks, capacity)
    }

    fn embed(&self, tokens: &[u32]) -> Result<Vec<f32>, SequenceError> {
        Ok(Smollm2::embed(self, tokens)?)
    }

    fn forward_steps(
        &self,
        steps: &mut [SequenceStep<'_, KvCache>],
    ) -> Vec<Result<(), SequenceError>> {
        self.forward_batch(steps).into_iter().map(|r| r.map_err(SequenceError::from)).collect()
    }

    fn head_each(&self, hidden: &[f32]) -> Result<Vec<f32>, SequenceError> {
        Ok(self.logits_each(hidden)?)
    }
}
