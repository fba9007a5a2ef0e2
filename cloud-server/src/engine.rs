//! A model behind a handle: worker threads share one hosted model ([`SplitModel`], whichever
//! it is) and take jobs from one bounded queue, so the async runtime never blocks on compute
//! and a full queue turns into a `busy` reply instead of unbounded memory.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use split_shared::labels::{Prediction, TOP_K, top_k};
use split_shared::protocol::{ServerLoad, ServerTimings};
use split_shared::runtime::{Activations, RuntimeError, SplitModel};
use tokio::sync::{mpsc, oneshot};

use crate::error::ServeError;
use crate::metrics::Metrics;

/// A served request.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// Index of the boundary the server started from.
    pub from: u8,
    /// Top-5, best first.
    pub top: Vec<Prediction>,
    /// Where the time went.
    pub timings: ServerTimings,
}

/// What a worker computes: decoded activations, or a whole image.
#[derive(Clone, Debug, PartialEq)]
pub enum Work {
    /// One item's activations (batch 1) at the boundary where the client stopped.
    Features(Activations),
    /// JPEG or PNG bytes: run everything.
    Image(Vec<u8>),
    /// A JPEG or PNG of the 224x224 model input: decode without cropping, run everything.
    Input(Vec<u8>),
}

struct Job {
    work: Work,
    enqueued: Instant,
    reply: oneshot::Sender<Result<Outcome, ServeError>>,
}

/// Handle to the model workers; cheap to clone.
#[derive(Clone)]
pub struct Engine {
    model: Arc<dyn SplitModel>,
    queue: mpsc::Sender<Job>,
    capacity: usize,
    workers: usize,
    shared: Arc<Shared>,
    /// Worker threads running now (each leaves only when the queue closes, or by a panic
    /// outside a request).
    alive: Arc<AtomicUsize>,
}

/// Counts a worker thread among the living while it runs, however it ends.
struct Alive(Arc<AtomicUsize>);

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What the workers share besides the queue.
struct Shared {
    max_batch: usize,
    batch_delay: Duration,
    /// Compute time per request (a pass's time over its batch), moving average, µs.
    recent_us: AtomicU32,
    /// Requests a worker has taken from the queue and not yet answered.
    in_hand: AtomicUsize,
    passes: AtomicU64,
    abandoned: AtomicU64,
    metrics: Arc<Metrics>,
}

fn micros(since: Instant) -> u32 {
    since.elapsed().as_micros().min(u128::from(u32::MAX)) as u32
}

/// A job whose input is decoded and ready to run: its activations, and who waits for them.
struct Ready {
    x: Activations,
    waiting: Waiting,
}

/// A decoded job's timings so far and where its answer goes.
struct Waiting {
    decode_us: u32,
    queue_us: u32,
    reply: oneshot::Sender<Result<Outcome, ServeError>>,
}

/// A job's input as activations at its boundary.
fn decode(work: Work, model: &dyn SplitModel) -> Result<Activations, ServeError> {
    Ok(match work {
        Work::Features(x) => x,
        Work::Image(payload) => model.image_input(&payload, false)?,
        Work::Input(payload) => model.image_input(&payload, true)?,
    })
}

/// One forward pass over requests that start at the same boundary, to the model's answer;
/// each request's scores.
fn forward_batch(
    model: &dyn SplitModel,
    xs: Vec<Activations>,
) -> Result<Vec<Vec<f32>>, ServeError> {
    let x = Activations::stack(xs)?;
    let scores = model.forward_range(x, model.spec().output())?;
    Ok(scores.items().map(<[f32]>::to_vec).collect())
}

/// Take the next job (waiting for it), then whatever else is queued, up to `max`, waiting at
/// most `delay` after the first for more to arrive (Triton's `max_queue_delay`): a batch of
/// several costs less per image than the same images one by one, so a short wait can pay when
/// requests arrive spread out. Each job taken is counted in `in_hand` at once: while the
/// worker waits for more it is still ahead of a new request.
fn take_jobs(
    jobs: &Mutex<mpsc::Receiver<Job>>,
    max: usize,
    delay: Duration,
    in_hand: &AtomicUsize,
) -> Option<Vec<Job>> {
    let mut rx = jobs.lock().ok()?;
    let mut out = vec![rx.blocking_recv()?];
    in_hand.fetch_add(1, Ordering::Relaxed);
    let deadline = Instant::now() + delay;
    while out.len() < max {
        match rx.try_recv() {
            Ok(job) => {
                in_hand.fetch_add(1, Ordering::Relaxed);
                out.push(job);
            }
            Err(mpsc::error::TryRecvError::Empty) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_micros(50));
            }
            Err(_) => break,
        }
    }
    Some(out)
}

fn worker(
    model: Arc<dyn SplitModel>,
    jobs: Arc<Mutex<mpsc::Receiver<Job>>>,
    shared: Arc<Shared>,
    _alive: Alive,
) {
    let Shared { max_batch, batch_delay, recent_us, in_hand, passes, abandoned, metrics } =
        &*shared;
    while let Some(taken) = take_jobs(&jobs, *max_batch, *batch_delay, in_hand) {
        // Decode each on its own: a bad image costs its own request only.
        let mut ready: Vec<Ready> = Vec::with_capacity(taken.len());
        for Job { work, enqueued, reply } in taken {
            // Nobody waits for this answer any more (the client disconnected or gave up):
            // computing it would only delay the requests behind it.
            if reply.is_closed() {
                abandoned.fetch_add(1, Ordering::Relaxed);
                in_hand.fetch_sub(1, Ordering::Relaxed);
                continue;
            }
            let queue_us = micros(enqueued);
            let start = Instant::now();
            let decoded = std::panic::catch_unwind(AssertUnwindSafe(|| decode(work, &*model)))
                .unwrap_or_else(|_| Err(ServeError::Internal("decoding panicked".into())));
            match decoded {
                Ok(x) => ready.push(Ready {
                    x,
                    waiting: Waiting { decode_us: micros(start), queue_us, reply },
                }),
                Err(e) => {
                    in_hand.fetch_sub(1, Ordering::Relaxed);
                    drop(reply.send(Err(e)));
                }
            }
        }
        // Requests from the same boundary share one forward pass of batch n.
        while let Some(first) = ready.first().map(|r| r.x.boundary()) {
            let (group, rest): (Vec<Ready>, Vec<Ready>) =
                ready.into_iter().partition(|r| r.x.boundary() == first);
            ready = rest;
            let start = Instant::now();
            let (xs, group): (Vec<Activations>, Vec<Waiting>) =
                group.into_iter().map(|r| (r.x, r.waiting)).unzip();
            // A panic inside the backend must cost these requests, not the worker.
            let result = std::panic::catch_unwind(AssertUnwindSafe(|| forward_batch(&*model, xs)))
                .unwrap_or_else(|_| {
                    Err(ServeError::Internal("the model panicked on this input".into()))
                });
            let compute_us = micros(start);
            // Answered from here on: a reply's load no longer counts its own pass.
            in_hand.fetch_sub(group.len(), Ordering::Relaxed);
            passes.fetch_add(1, Ordering::Relaxed);
            metrics.forward_pass(group.len(), f64::from(compute_us) * 1e-6);
            match result {
                Ok(scores) => {
                    // Per request, moving average over roughly the last eight passes.
                    let per_request = compute_us / group.len().max(1) as u32;
                    let old = recent_us.load(Ordering::Relaxed);
                    let new = if old == 0 { per_request } else { (old * 7 + per_request) / 8 };
                    recent_us.store(new, Ordering::Relaxed);
                    for (r, scores) in group.into_iter().zip(scores) {
                        let outcome = Outcome {
                            from: first,
                            top: top_k(&scores, TOP_K),
                            timings: ServerTimings {
                                queue_us: r.queue_us,
                                decode_us: r.decode_us,
                                compute_us,
                                cached: false,
                            },
                        };
                        let _ = r.reply.send(Ok(outcome));
                    }
                }
                Err(e) => {
                    // The first request gets the error itself, the others its message.
                    let message = e.to_string();
                    let mut error = Some(e);
                    for r in group {
                        let e =
                            error.take().unwrap_or_else(|| ServeError::Internal(message.clone()));
                        let _ = r.reply.send(Err(e));
                    }
                }
            }
        }
    }
}

impl Engine {
    /// Start `workers` threads sharing `model`, behind a queue of `capacity`. A worker that
    /// finds several requests waiting runs up to `max_batch` of them (those starting at the
    /// same boundary; at most the model's own limit) as one forward pass; 1 turns batching
    /// off. Each pass and its size are counted in `metrics`.
    pub fn start(
        model: Arc<dyn SplitModel>,
        workers: usize,
        capacity: usize,
        max_batch: usize,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self::start_with_delay(model, workers, capacity, max_batch, Duration::ZERO, metrics)
    }

    /// [`Self::start`], a worker waiting up to `batch_delay` after a request for others to
    /// batch with it (`--batch-delay-us`).
    pub fn start_with_delay(
        model: Arc<dyn SplitModel>,
        workers: usize,
        capacity: usize,
        max_batch: usize,
        batch_delay: Duration,
        metrics: Arc<Metrics>,
    ) -> Self {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let rx = Arc::new(Mutex::new(rx));
        let shared = Arc::new(Shared {
            max_batch: max_batch.clamp(1, model.spec().max_batch),
            batch_delay,
            recent_us: AtomicU32::new(0),
            in_hand: AtomicUsize::new(0),
            passes: AtomicU64::new(0),
            abandoned: AtomicU64::new(0),
            metrics,
        });
        let workers = workers.max(1);
        let alive = Arc::new(AtomicUsize::new(0));
        for i in 0..workers {
            let (model, rx, shared) = (model.clone(), rx.clone(), shared.clone());
            alive.fetch_add(1, Ordering::Relaxed);
            let guard = Alive(alive.clone());
            std::thread::Builder::new()
                .name(format!("model-worker-{i}"))
                .spawn(move || worker(model, rx, shared, guard))
                .expect("spawning a model worker");
        }
        Self { model, queue: tx, capacity: capacity.max(1), workers, shared, alive }
    }

    /// The model its workers run.
    pub fn model(&self) -> &Arc<dyn SplitModel> {
        &self.model
    }

    /// Worker threads running now; fewer than [`Self::workers`] means one died.
    pub fn workers_alive(&self) -> usize {
        self.alive.load(Ordering::Relaxed)
    }

    /// Worker threads started.
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// Requests waiting for a worker now.
    pub fn queued(&self) -> usize {
        self.capacity.saturating_sub(self.queue.capacity())
    }

    /// Queued requests skipped because nobody waited for their answer any more.
    pub fn abandoned(&self) -> u64 {
        self.shared.abandoned.load(Ordering::Relaxed)
    }

    /// Forward passes run so far (a batch of several requests is one).
    pub fn forward_passes(&self) -> u64 {
        self.shared.passes.load(Ordering::Relaxed)
    }

    /// The load reported in replies and pongs: the requests ahead of a new one (queued, and
    /// taken by a worker but not yet answered), workers, recent compute time per request.
    ///
    /// A worker takes everything queued into its batch, so the queue alone reads 0 while a
    /// whole batch is still to be computed: a client forecasting from it would see no wait.
    pub fn load(&self) -> ServerLoad {
        let queued = self.queued() + self.shared.in_hand.load(Ordering::Relaxed);
        ServerLoad {
            queued: queued.min(usize::from(u16::MAX)) as u16,
            workers: self.workers.min(usize::from(u16::MAX)) as u16,
            recent_us: self.shared.recent_us.load(Ordering::Relaxed),
            // The server's price is set where replies are made ([`crate::AppState::priced`]).
            price_milli: 1_000,
        }
    }

    /// Run a request. Batches are refused before queueing so bad input never waits for a worker
    /// (the shape itself was checked when the [`Activations`] were made).
    ///
    /// # Errors
    /// [`ServeError::Model`] for a shape that does not match its boundary or an undecodable
    /// image, [`ServeError::Busy`] when the queue is full, [`ServeError::Internal`] otherwise.
    pub async fn submit(&self, work: Work) -> Result<Outcome, ServeError> {
        // One image per frame: the reply carries one top-5.
        if let Work::Features(x) = &work
            && x.batch() != 1
        {
            let spec = self.model.spec();
            let boundary = spec.boundary(x.boundary())?;
            Err(RuntimeError::ShapeMismatch {
                model: spec.name.clone(),
                boundary: boundary.name.clone(),
                expected: boundary.shape.clone(),
                got: x.dims().to_vec(),
                max_batch: 1,
            })?;
        }
        let (reply, answer) = oneshot::channel();
        self.queue.try_send(Job { work, enqueued: Instant::now(), reply }).map_err(
            |e| match e {
                mpsc::error::TrySendError::Full(_) => ServeError::Busy(self.capacity),
                mpsc::error::TrySendError::Closed(_) => {
                    ServeError::Internal("the model workers stopped".into())
                }
            },
        )?;
        answer.await.map_err(|_| ServeError::Internal("a model worker stopped".into()))?
    }
}
