//! The model behind a handle: worker threads own copies of the network and take jobs from one
//! bounded queue, so the async runtime never blocks on compute and a full queue turns into a
//! `busy` reply instead of unbounded memory.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use burn::tensor::Device;
use split_shared::labels::{Prediction, top_k};
use split_shared::model::{Boundary, EfficientNetLite0, check_shape, features_tensor};
use split_shared::protocol::{ServerLoad, ServerTimings};
use tokio::sync::{mpsc, oneshot};

use crate::error::ServeError;

/// Predictions returned per request.
pub const TOP_K: usize = 5;

/// A served request.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// Boundary the server started from.
    pub from: Boundary,
    /// Top-5, best first.
    pub top: Vec<Prediction>,
    /// Where the time went.
    pub timings: ServerTimings,
}

/// What a worker computes: decoded activations, or a whole image.
#[derive(Clone, Debug, PartialEq)]
pub enum Work {
    /// Activations at `boundary`, `dims = [1, C, H, W]`.
    Features {
        /// Where the client stopped.
        boundary: Boundary,
        /// Their shape.
        dims: Vec<usize>,
        /// Their values, C order.
        values: Vec<f32>,
    },
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
    queue: mpsc::Sender<Job>,
    capacity: usize,
    workers: usize,
    recent_us: Arc<AtomicU32>,
}

fn micros(since: Instant) -> u32 {
    since.elapsed().as_micros().min(u128::from(u32::MAX)) as u32
}

fn serve(
    model: &EfficientNetLite0,
    device: &Device,
    work: Work,
) -> Result<(Boundary, Vec<f32>, u32, u32), ServeError> {
    let start = Instant::now();
    let (from, x) = match work {
        Work::Features { boundary, dims, values } => {
            (boundary, features_tensor(&dims, values, device))
        }
        Work::Image(payload) => {
            let img = split_shared::image::preprocess(&payload)?;
            (Boundary::INPUT, split_shared::image::to_input_tensor(&img, device))
        }
        Work::Input(payload) => {
            let img = split_shared::image::decode_input(&payload)?;
            (Boundary::INPUT, split_shared::image::to_input_tensor(&img, device))
        }
    };
    let decode_us = micros(start);
    let start = Instant::now();
    let logits = model.forward_range(x, from, Boundary::LOGITS)?;
    let logits = logits
        .into_data()
        .try_to_vec::<f32>()
        .map_err(|e| ServeError::Internal(format!("{e:?}")))?;
    Ok((from, logits, decode_us, micros(start)))
}

fn worker(
    model: EfficientNetLite0,
    device: Device,
    jobs: Arc<Mutex<mpsc::Receiver<Job>>>,
    recent_us: Arc<AtomicU32>,
) {
    loop {
        let job = match jobs.lock() {
            Ok(mut rx) => rx.blocking_recv(),
            Err(_) => return,
        };
        let Some(Job { work, enqueued, reply }) = job else { return };
        let queue_us = micros(enqueued);
        // A panic inside the backend must cost one request, not the worker.
        let result = std::panic::catch_unwind(AssertUnwindSafe(|| serve(&model, &device, work)))
            .unwrap_or_else(|_| {
                Err(ServeError::Internal("the model panicked on this input".into()))
            })
            .map(|(from, logits, decode_us, compute_us)| {
                let start = Instant::now();
                let top = top_k(&logits[..split_shared::model::NUM_CLASSES], TOP_K);
                Outcome {
                    from,
                    top,
                    timings: ServerTimings {
                        queue_us,
                        decode_us,
                        compute_us: compute_us + micros(start),
                        cached: false,
                    },
                }
            });
        if let Ok(o) = &result {
            // Moving average over roughly the last eight requests.
            let old = recent_us.load(Ordering::Relaxed);
            let new =
                if old == 0 { o.timings.compute_us } else { (old * 7 + o.timings.compute_us) / 8 };
            recent_us.store(new, Ordering::Relaxed);
        }
        let _ = reply.send(result);
    }
}

impl Engine {
    /// Start `workers` threads, each with its own handle on `model`, behind a queue of `capacity`.
    pub fn start(
        model: EfficientNetLite0,
        device: Device,
        workers: usize,
        capacity: usize,
    ) -> Self {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let rx = Arc::new(Mutex::new(rx));
        let recent_us = Arc::new(AtomicU32::new(0));
        for i in 0..workers.max(1) {
            let (model, device, rx, recent) =
                (model.clone(), device.clone(), rx.clone(), recent_us.clone());
            std::thread::Builder::new()
                .name(format!("model-worker-{i}"))
                .spawn(move || worker(model, device, rx, recent))
                .expect("spawning a model worker");
        }
        Self { queue: tx, capacity: capacity.max(1), workers: workers.max(1), recent_us }
    }

    /// The load reported in replies: queue depth, workers, recent compute time.
    pub fn load(&self) -> ServerLoad {
        let queued = self.capacity.saturating_sub(self.queue.capacity());
        ServerLoad {
            queued: queued.min(usize::from(u16::MAX)) as u16,
            workers: self.workers.min(usize::from(u16::MAX)) as u16,
            recent_us: self.recent_us.load(Ordering::Relaxed),
        }
    }

    /// Run a request. Shapes are checked before queueing so bad input never waits for a worker.
    ///
    /// # Errors
    /// [`ServeError::Model`] for a shape that does not match its boundary or an undecodable
    /// image, [`ServeError::Busy`] when the queue is full, [`ServeError::Internal`] otherwise.
    pub async fn submit(&self, work: Work) -> Result<Outcome, ServeError> {
        if let Work::Features { boundary, dims, values } = &work {
            check_shape(*boundary, dims)?;
            if values.len() != dims.iter().product::<usize>() {
                return Err(ServeError::Internal("features and their shape disagree".into()));
            }
            // One image per frame: the reply carries one top-5.
            if dims[0] != 1 {
                let expected = boundary.info().shape;
                Err(split_shared::Error::ShapeMismatch {
                    boundary: *boundary,
                    expected,
                    got: dims.clone(),
                    max_batch: 1,
                })?;
            }
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
