//! The stateful models `/llm` serves, found by the model byte of a conversation's `open` frame.
//!
//! `/llm` names no model: each hosted [`SequenceModel`] is kept behind [`Served`], which hides
//! its state type (SmolLM2's KV cache, another model's own) in a [`State`] box, so one socket
//! handler opens, checks and runs conversations of any of them. Each model has its own batching
//! threads (`--llm-batch`); all share one KV budget (`--llm-kv-mib`) and one cap on a
//! conversation's positions (`--llm-positions`, lowered to a model's context).

use std::any::Any;
use std::ops::Range;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use split_shared::runtime::{SequenceModel, SequenceSpec, SequenceState};

use crate::llm_batch::{Batcher, Done, Job, Open};
use crate::llm_budget::KvBudget;
use crate::metrics::LlmBatchCounters;

/// One conversation's state, whichever model it belongs to.
pub type State = Box<dyn AnyState>;

/// A model's state, seen by the server without its type.
pub trait AnyState: SequenceState {
    /// The state as [`Any`], to be taken back as its model's own type.
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send>;
}

impl<T: SequenceState + 'static> AnyState for T {
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }
}

impl SequenceState for State {
    fn len(&self) -> usize {
        (**self).len()
    }
    fn capacity(&self) -> usize {
        (**self).capacity()
    }
    fn blocks(&self) -> Range<usize> {
        (**self).blocks()
    }
    fn bytes(&self) -> usize {
        (**self).bytes()
    }
    fn truncate(&mut self, len: usize) {
        (**self).truncate(len);
    }
}

/// A hosted model as `/llm` drives it.
pub trait Served: Send + Sync {
    /// What the model is.
    fn spec(&self) -> &SequenceSpec;
    /// The token that ends a generated answer, when the model has one.
    fn end_token(&self) -> Option<u32>;
    /// An empty state of `blocks` for at most `capacity` positions.
    fn new_state(&self, blocks: Range<usize>, capacity: usize) -> State;
    /// Count a conversation among those its batches wait for, while the value lives (`None`
    /// without batching).
    fn open(&self) -> Option<Open>;
    /// Run `job` (in the next batch, or alone on the blocking pool); `None` when the
    /// computation panicked (its state is lost with it).
    fn compute(self: Arc<Self>, job: Job<State>) -> BoxFuture<'static, Option<Done<State>>>;
}

/// A [`SequenceModel`] and its batching threads.
struct Hosted<M: SequenceModel> {
    model: Arc<M>,
    batcher: Option<Batcher<M::State>>,
    end_token: Option<u32>,
}

impl<M: SequenceModel + 'static> Served for Hosted<M> {
    fn spec(&self) -> &SequenceSpec {
        self.model.sequence_spec()
    }

    fn end_token(&self) -> Option<u32> {
        self.end_token
    }

    fn new_state(&self, blocks: Range<usize>, capacity: usize) -> State {
        Box::new(self.model.new_state(blocks, capacity))
    }

    fn open(&self) -> Option<Open> {
        self.batcher.as_ref().map(Batcher::open)
    }

    fn compute(self: Arc<Self>, job: Job<State>) -> BoxFuture<'static, Option<Done<State>>> {
        Box::pin(async move {
            let Job { layers, input, cache, sampler } = job;
            // Every state a conversation holds was made by its model's `new_state`.
            let cache = *cache.into_any().downcast::<M::State>().ok()?;
            let job = Job { layers, input, cache, sampler };
            let done = match &self.batcher {
                Some(batcher) => batcher.run(job).await?,
                None => {
                    let model = self.model.clone();
                    actix_web::web::block(move || crate::llm_batch::run_alone(&*model, job))
                        .await
                        .ok()?
                }
            };
            let Done { outcome, cache, sampler } = done;
            Some(Done { outcome, cache: Box::new(cache) as State, sampler })
        })
    }
}

/// How newly hosted models are served: batched or not, and with what.
#[derive(Clone)]
pub struct BatchSettings {
    /// Whether steps are batched across conversations (`--llm-batch`).
    pub batch: bool,
    /// Rows of a prompt per batch (`--llm-prefill-chunk`).
    pub prefill_chunk: usize,
    /// Where the batches are counted (`/metrics`).
    pub counters: LlmBatchCounters,
}

/// The models `/llm` serves and what their conversations may hold.
#[derive(Clone)]
pub struct SequenceModels {
    models: Vec<Arc<dyn Served>>,
    /// The KV cache all conversations of every model may reserve.
    pub budget: Arc<KvBudget>,
    /// Positions one conversation may reserve, before a model's own context
    /// ([`Self::max_positions`]).
    max_positions: u32,
    settings: BatchSettings,
}

impl SequenceModels {
    /// No model yet, with the server's budget, position cap and batching.
    pub fn new(budget: Arc<KvBudget>, max_positions: u32, settings: BatchSettings) -> Self {
        Self { models: Vec::new(), budget, max_positions, settings }
    }

    /// Serve `model` too; `end_token` ends the answers the server generates for it.
    ///
    /// # Errors
    /// Its id or name is another hosted model's, or its batching threads did not start.
    pub fn host<M: SequenceModel + 'static>(
        &mut self,
        model: Arc<M>,
        end_token: Option<u32>,
    ) -> anyhow::Result<()> {
        let spec = model.sequence_spec();
        if let Some(taken) =
            self.models.iter().find(|m| m.spec().id == spec.id || m.spec().name == spec.name)
        {
            let taken = taken.spec();
            anyhow::bail!(
                "{} (model byte {}) is hosted already as {} (model byte {})",
                spec.name,
                spec.id,
                taken.name,
                taken.id
            );
        }
        let batcher = if self.settings.batch {
            let threads = split_kernels::max_threads();
            log::info!("{}: steps batched across conversations, {threads} threads", spec.name);
            Some(Batcher::start(
                model.clone(),
                threads,
                self.settings.prefill_chunk,
                self.settings.counters.clone(),
            )?)
        } else {
            None
        };
        self.models.push(Arc::new(Hosted { model, batcher, end_token }));
        Ok(())
    }

    /// The model whose byte is `id`.
    pub fn get(&self, id: u8) -> Option<&Arc<dyn Served>> {
        self.models.iter().find(|m| m.spec().id == id)
    }

    /// Every hosted model, in the order hosted.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn Served>> {
        self.models.iter()
    }

    /// Whether no model is hosted.
    pub fn is_empty(&self) -> bool {
        self.models.is_empty()
    }

    /// The hosted models, as a refusal names them: `"1 (efficientnet…), …"`.
    pub fn names(&self) -> String {
        let named: Vec<String> =
            self.models.iter().map(|m| format!("{} ({})", m.spec().id, m.spec().name)).collect();
        named.join(", ")
    }

    /// Positions a conversation of `spec`'s model may reserve.
    pub fn max_positions(&self, spec: &SequenceSpec) -> u32 {
        self.max_positions.min(u32::try_from(spec.context).unwrap_or(u32::MAX))
    }
}
