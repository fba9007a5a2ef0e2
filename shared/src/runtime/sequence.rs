//! Stateful models on the runtime: a model whose every step runs on what the conversation so far
//! left behind (a language model's KV cache), split along its blocks. Each side keeps the state
//! of its own blocks per conversation, and rows of hidden states (one per position) cross
//! between the sides; the side that holds the head turns a last row into scores over the
//! vocabulary.
//!
//! A model implements [`SequenceModel`]; the server's batching of many conversations' steps
//! (`cloud-server/src/llm_batch.rs`) and a group member's stage ([`super::MemberStage`]) work
//! through it. SmolLM2 is the first model on it;
//! `shared/tests/sequence_model.rs` runs a model defined in that file through both.

use std::ops::Range;

/// What a stateful model tells the runtime about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SequenceSpec {
    /// Its id: the model byte of the frame that opens a conversation.
    pub id: u8,
    /// Its name.
    pub name: String,
    /// Blocks, in forward order: a conversation opens a range of them.
    pub blocks: usize,
    /// Values per hidden state (one row per position).
    pub width: usize,
    /// Scores the head gives per row.
    pub vocab: usize,
    /// Most positions one conversation may reach.
    pub context: usize,
    /// Bytes one block's state grows by per position (a KV cache: one position's keys and
    /// values): what a server reserves from its budget for a conversation's state.
    pub state_bytes_per_position: usize,
}

impl SequenceSpec {
    /// Bytes the state of `blocks` blocks holding `positions` positions takes.
    pub fn state_bytes(&self, blocks: usize, positions: usize) -> usize {
        blocks.saturating_mul(self.state_bytes_per_position).saturating_mul(positions)
    }
}

/// One conversation's state over a range of blocks.
pub trait SequenceState: Send {
    /// Positions it holds.
    fn len(&self) -> usize;
    /// Whether it holds no position.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Positions it may hold.
    fn capacity(&self) -> usize;
    /// The blocks it is the state of.
    fn blocks(&self) -> Range<usize>;
    /// Bytes it holds now.
    fn bytes(&self) -> usize;
    /// Forget every position from `len` on (a conversation rewound).
    fn truncate(&mut self, len: usize);
}

/// One conversation's part of a batched step: its blocks, its rows (`[positions, width]`,
/// replaced by the rows after the blocks) and its state of those blocks, which the step's
/// positions are appended to.
#[derive(Debug)]
pub struct SequenceStep<'a, S> {
    /// The blocks to run.
    pub blocks: Range<usize>,
    /// The rows, in place.
    pub hidden: &'a mut [f32],
    /// The state of `blocks`.
    pub state: &'a mut S,
}

/// What a step is refused for; each costs its own step, never the others in a batch.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SequenceError {
    /// A token id outside the vocabulary.
    #[error("token {id} is outside the vocabulary of {vocab}")]
    Token {
        /// The id.
        id: u32,
        /// Tokens in the vocabulary.
        vocab: usize,
    },
    /// More positions than the state may hold.
    #[error("{needed} positions do not fit the context of {limit}")]
    Context {
        /// Positions the step would need.
        needed: usize,
        /// Positions there are.
        limit: usize,
    },
    /// Blocks the model (or this side's share of it) does not hold, a state of other blocks,
    /// rows of the wrong width, or a value that is not finite.
    #[error("{0}")]
    Shape(String),
}

/// A stateful model that runs split along its blocks: the runtime's contract with it.
/// Implementations hold their weights; every method may be called from several threads.
pub trait SequenceModel: Send + Sync {
    /// One conversation's state over a range of blocks.
    type State: SequenceState;

    /// What the model is.
    fn sequence_spec(&self) -> &SequenceSpec;

    /// The blocks this instance holds weights of (a share of the model holds some): all of
    /// them by default.
    fn held_blocks(&self) -> Range<usize> {
        0..self.sequence_spec().blocks
    }

    /// An empty state of `blocks` holding at most `capacity` positions (capped at the
    /// context).
    fn new_state(&self, blocks: Range<usize>, capacity: usize) -> Self::State;

    /// Rows (`[tokens, width]`) of token ids: what the first block takes.
    ///
    /// # Errors
    /// [`SequenceError::Token`] for an id outside the vocabulary.
    fn embed(&self, tokens: &[u32]) -> Result<Vec<f32>, SequenceError>;

    /// Several conversations' steps at once, each with its own blocks, rows and state; one
    /// result per step, in order. A refused step changes nothing and does not stop the others;
    /// each step must end exactly as it would alone, whoever shares its batch.
    fn forward_steps(
        &self,
        steps: &mut [SequenceStep<'_, Self::State>],
    ) -> Vec<Result<(), SequenceError>>;

    /// The head's scores (`[rows, vocab]`) of each row of `hidden` on its own, after the last
    /// block.
    ///
    /// # Errors
    /// [`SequenceError::Shape`] for rows of the wrong width.
    fn head_each(&self, hidden: &[f32]) -> Result<Vec<f32>, SequenceError>;

    /// [`Self::forward_steps`] for one step.
    ///
    /// # Errors
    /// Why the step was refused.
    fn forward_blocks(
        &self,
        blocks: Range<usize>,
        hidden: &mut [f32],
        state: &mut Self::State,
    ) -> Result<(), SequenceError> {
        let mut steps = [SequenceStep { blocks, hidden, state }];
        self.forward_steps(&mut steps).pop().unwrap_or(Ok(()))
    }
}
