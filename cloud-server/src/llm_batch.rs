//! Continuous batching of the language model's steps across conversations.
//!
//! Every conversation's frame becomes a [`Job`] on one queue. One batching thread per core takes
//! turns at the queue: it takes the job at the head and the jobs of the other open conversations
//! not already in a batch as they come in (for at most [`GATHER_WINDOW`], up to
//! [`MAX_BATCH_ROWS`] rows), then runs them as one batch on its own core while the next thread
//! gathers, and answers each. A prompt runs `--llm-prefill-chunk` rows a batch, so the decode
//! steps of the other conversations do not wait for a whole prompt; its answer comes after its
//! last piece. In a batch each block's weight rows are read once for every job at that block
//! (and unpacked once for every four one-row jobs) ([`SequenceModel::forward_steps`]), and the heads of the jobs that sample share one pass
//! over the output projection ([`SequenceModel::head_each`]): on this project's 2-core machine a
//! decode step of 32 conversations costs 7.3 ms each batched against 9.9 alone on one thread
//! (docs/llm.md). Each job's answer is bit for bit what it would get alone, whoever it shares a
//! batch with.
//!
//! A job that is refused (a token past the vocabulary, a cache without room) gets its error and
//! the others in its batch are answered. A batch that panics closes the conversations in it
//! (their caches are lost) and the thread takes the next batch.
//!
//! Nothing here names a model: it batches any [`SequenceModel`]'s steps on its
//! [`SequenceModel::State`]s (SmolLM2's KV caches on the server).

use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use split_shared::models::smollm2::Sampler;
use split_shared::runtime::{SequenceError, SequenceModel, SequenceState, SequenceStep};
use tokio::sync::oneshot;

use crate::metrics::LlmBatchCounters;

/// Rows (hidden states) after which a batch takes no more jobs: a decode step is one row, a
/// prompt's piece up to `--llm-prefill-chunk`; the first job is always taken.
pub const MAX_BATCH_ROWS: usize = 256;

/// How long a batch waits, after its first job, for the other open conversations' jobs. Their
/// frames come in one by one as the last batch's answers reach them; a batch that started with
/// the first arrival would hold a few rows and the rest would wait a whole batch for the next
/// (without the window, batches held 8 steps on average with 32 conversations). A batch closes
/// early once every open conversation has a job in it, so one conversation alone never waits.
pub const GATHER_WINDOW: Duration = Duration::from_millis(5);

/// What a job's blocks take in: hidden states, or token ids the server embeds.
pub enum Input {
    /// Hidden states `[rows, dim]`.
    Hidden(Vec<f32>),
    /// Token ids (a cloud-only conversation).
    Tokens(Vec<u32>),
}

/// What a job gives back: the hidden states after its blocks, or the head's next token.
#[derive(Debug)]
pub enum Output {
    /// Hidden states `[rows, dim]`.
    Hidden(Vec<f32>),
    /// The sampled token.
    Token(u32),
}

/// One conversation's frame: its blocks over its input, on its cache (`S`, the model's
/// [`SequenceModel::State`]); with a sampler, the head too.
pub struct Job<S> {
    /// The blocks.
    pub layers: Range<usize>,
    /// Their input.
    pub input: Input,
    /// The conversation's cache of those blocks.
    pub cache: S,
    /// The conversation's sampler, when the server runs the head.
    pub sampler: Option<Sampler>,
}

/// A job's answer, with the cache and the sampler it took.
pub struct Done<S> {
    /// The blocks' output, or why the job was refused.
    pub outcome: Result<Output, SequenceError>,
    /// The cache, with the job's positions appended when it ran.
    pub cache: S,
    /// The sampler.
    pub sampler: Option<Sampler>,
}

/// A job and where its answer goes.
type Queued<S> = (Job<S>, oneshot::Sender<Done<S>>);

/// The queue in front of the batching thread.
pub struct Batcher<S> {
    queue: mpsc::Sender<Queued<S>>,
    open: Arc<AtomicUsize>,
}

/// What the batching threads share: the queue's far end, the open conversations, the jobs in
/// batches being run.
struct Shared<S> {
    jobs: std::sync::Mutex<mpsc::Receiver<Queued<S>>>,
    prefill_chunk: usize,
    open: Arc<AtomicUsize>,
    running: AtomicUsize,
    counters: LlmBatchCounters,
}

/// A conversation that may send jobs: counted while it lives, so that a batch knows how many
/// jobs to wait for ([`GATHER_WINDOW`]).
pub struct Open(Arc<AtomicUsize>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl<S: SequenceState + 'static> Batcher<S> {
    /// Start `threads` threads that run `model`'s batches, a prompt `prefill_chunk` rows (at
    /// least 4) a batch, counting them in `counters`; they end when the batcher is dropped.
    ///
    /// # Errors
    /// A thread could not be started.
    pub fn start<M: SequenceModel<State = S> + 'static>(
        model: Arc<M>,
        threads: usize,
        prefill_chunk: usize,
        counters: LlmBatchCounters,
    ) -> std::io::Result<Self> {
        let (queue, jobs) = mpsc::channel();
        let open = Arc::new(AtomicUsize::new(0));
        let shared = Arc::new(Shared {
            jobs: std::sync::Mutex::new(jobs),
            prefill_chunk: prefill_chunk.max(4),
            open: open.clone(),
            running: AtomicUsize::new(0),
            counters,
        });
        for i in 0..threads.max(1) {
            let (model, shared) = (model.clone(), shared.clone());
            std::thread::Builder::new()
                .name(format!("llm-batch-{i}"))
                .spawn(move || serve(&*model, &shared, threads > 1))?;
        }
        Ok(Batcher { queue, open })
    }

    /// Count a conversation as open until the value returned is dropped.
    pub fn open(&self) -> Open {
        self.open.fetch_add(1, Ordering::AcqRel);
        Open(self.open.clone())
    }

    /// Queue a job and wait for its answer; `None` when its batch panicked (the job's cache is
    /// gone with it).
    pub async fn run(&self, job: Job<S>) -> Option<Done<S>> {
        let (reply, answer) = oneshot::channel();
        self.queue.send((job, reply)).ok()?;
        answer.await.ok()
    }
}

fn serve<M: SequenceModel>(model: &M, shared: &Shared<M::State>, several: bool) {
    let dim = model.sequence_spec().width;
    // Jobs whose prompts are not through yet: their next piece goes in this thread's next batch.
    let mut carried: Vec<InBatch<M::State>> = Vec::new();
    loop {
        let mut batch = std::mem::take(&mut carried);
        let mut rows: usize = batch.iter().map(|j| j.piece(dim, shared.prefill_chunk).len()).sum();
        // Gather while holding the queue; the other threads meanwhile run their batches. A
        // thread with pieces of prompts to run does not wait for the queue: the thread holding
        // it may be waiting for a job that only those pieces' answers will bring.
        let queue = if batch.is_empty() {
            let Ok(queue) = shared.jobs.lock() else { return };
            Some(queue)
        } else {
            shared.jobs.try_lock().ok()
        };
        let mut fresh = 0;
        if let Some(jobs) = queue {
            if batch.is_empty() {
                let Ok((job, reply)) = jobs.recv() else { return };
                batch.push(InBatch::new(model, job, Some(reply)));
                rows += batch[0].piece(dim, shared.prefill_chunk).len();
                fresh += 1;
            }
            let until = Instant::now() + GATHER_WINDOW;
            while rows < MAX_BATCH_ROWS {
                let open = shared.open.load(Ordering::Acquire);
                let waiting = open.saturating_sub(shared.running.load(Ordering::Acquire));
                let next = if fresh < waiting {
                    jobs.recv_timeout(until.saturating_duration_since(Instant::now())).ok()
                } else {
                    jobs.try_recv().ok()
                };
                let Some((job, reply)) = next else { break };
                let job = InBatch::new(model, job, Some(reply));
                rows += job.piece(dim, shared.prefill_chunk).len();
                batch.push(job);
                fresh += 1;
            }
            shared.running.fetch_add(fresh, Ordering::AcqRel);
        }
        shared.counters.batches.inc();
        shared.counters.steps.inc_by(fresh as u64);
        shared.counters.rows.inc_by(rows as u64);
        // With several batching threads each has a core's worth of work when its batch holds
        // several jobs; a lone job (a prompt) may still use the other cores.
        split_kernels::set_thread_max_threads(if several && batch.len() > 1 { 1 } else { 0 });
        let in_batch = batch.len();
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            run_step(model, &mut batch, shared.prefill_chunk);
            batch
        }));
        let Ok(batch) = outcome else {
            // The jobs (and their replies) went with the panic: their conversations close.
            shared.running.fetch_sub(in_batch, Ordering::AcqRel);
            log::error!(
                "a batch of the language model panicked; its {in_batch} conversations are closed"
            );
            continue;
        };
        for mut job in batch {
            if !job.finished(dim) {
                carried.push(job);
                continue;
            }
            shared.running.fetch_sub(1, Ordering::AcqRel);
            if let Some(reply) = job.reply.take() {
                // A conversation that went away meanwhile no longer wants its answer.
                drop(reply.send(job.done()));
            }
        }
    }
}

/// One job on its own (the server without `--llm-batch`): every row at once, as a batch of one.
pub fn run_alone<M: SequenceModel>(model: &M, job: Job<M::State>) -> Done<M::State> {
    let mut batch = vec![InBatch::new(model, job, None)];
    run_step(model, &mut batch, usize::MAX);
    batch.pop().expect("one job").done()
}

/// A job in its batches: the hidden states it has so far (or why it stopped), the rows of them
/// already through the blocks, and where its answer goes.
struct InBatch<S> {
    layers: Range<usize>,
    hidden: Result<Vec<f32>, SequenceError>,
    cache: S,
    sampler: Option<Sampler>,
    token: Option<u32>,
    ran: usize,
    reply: Option<oneshot::Sender<Done<S>>>,
}

impl<S> InBatch<S> {
    fn new<M: SequenceModel<State = S>>(
        model: &M,
        job: Job<S>,
        reply: Option<oneshot::Sender<Done<S>>>,
    ) -> Self {
        let Job { layers, input, cache, sampler } = job;
        let hidden = match input {
            Input::Hidden(values) => Ok(values),
            Input::Tokens(tokens) => model.embed(&tokens),
        };
        InBatch { layers, hidden, cache, sampler, token: None, ran: 0, reply }
    }

    fn rows(&self, dim: usize) -> usize {
        self.hidden.as_ref().map_or(0, |h| h.len() / dim)
    }

    /// The rows the next batch runs: the rest, or `chunk` of them. A piece is never under four
    /// rows unless the whole job is: from four on, each row's products are summed in one way
    /// (`quant_matmul_groups`), so a prompt in pieces ends bit for bit as in one.
    fn piece(&self, dim: usize, chunk: usize) -> Range<usize> {
        let left = self.rows(dim) - self.ran;
        let take = if left <= chunk.saturating_add(3) { left } else { chunk };
        self.ran..self.ran + take
    }

    fn finished(&self, dim: usize) -> bool {
        self.hidden.is_err() || self.ran == self.rows(dim)
    }

    fn done(self) -> Done<S> {
        let InBatch { hidden, cache, sampler, token, .. } = self;
        let outcome = hidden.and_then(|h| match (&sampler, token) {
            (None, _) => Ok(Output::Hidden(h)),
            (Some(_), Some(t)) => Ok(Output::Token(t)),
            (Some(_), None) => {
                Err(SequenceError::Shape("no hidden state for the head to run on".into()))
            }
        });
        Done { outcome, cache, sampler }
    }
}

/// One batch: the next piece of each job's rows through its blocks, all of them together, then
/// the heads of the jobs that are through and sample, together.
fn run_step<M: SequenceModel>(model: &M, batch: &mut [InBatch<M::State>], chunk: usize) {
    let dim = model.sequence_spec().width;
    let mut steps = Vec::with_capacity(batch.len());
    let mut stepping = Vec::with_capacity(batch.len());
    for (i, job) in batch.iter_mut().enumerate() {
        let piece = job.piece(dim, chunk);
        if let Ok(hidden) = &mut job.hidden {
            let rows = &mut hidden[piece.start * dim..piece.end * dim];
            steps.push(SequenceStep {
                blocks: job.layers.clone(),
                hidden: rows,
                state: &mut job.cache,
            });
            stepping.push((i, piece.len()));
        }
    }
    let results = model.forward_steps(&mut steps);
    drop(steps);
    for ((i, rows), result) in stepping.into_iter().zip(results) {
        match result {
            Ok(()) => batch[i].ran += rows,
            Err(e) => batch[i].hidden = Err(e),
        }
    }
    let heads: Vec<usize> = (0..batch.len())
        .filter(|&i| {
            let job = &batch[i];
            job.sampler.is_some() && job.hidden.is_ok() && job.finished(dim) && job.rows(dim) > 0
        })
        .collect();
    let mut last_rows = Vec::with_capacity(heads.len() * dim);
    for &i in &heads {
        if let Ok(hidden) = &batch[i].hidden {
            last_rows.extend_from_slice(&hidden[hidden.len() - dim..]);
        }
    }
    if heads.is_empty() {
        return;
    }
    match model.head_each(&last_rows) {
        Ok(logits) => {
            for (&i, row) in heads.iter().zip(logits.chunks_exact(model.sequence_spec().vocab)) {
                let job = &mut batch[i];
                job.token = job.sampler.as_mut().map(|s| s.next(row));
            }
        }
        Err(e) => {
            for &i in &heads {
                batch[i].hidden = Err(e.clone());
            }
        }
    }
}
