//! A native member of a device group: a TV box or a desktop without a browser joins a group
//! through the server's `/group` socket and answers the requests other members relay to it,
//! with the same model definition and codec as the browser and the server.
//!
//! What it answers is the protocol's own: a relayed [`Request::Image`] or [`Request::Input`]
//! runs the whole network, a relayed [`Request::Features`] the rest of it from the frame's
//! boundary, and the answer is a [`Reply`] frame, relayed back to whoever asked. As a
//! pipeline's middle stage (a `route` signal before the frame names the stages after it) it
//! runs its blocks and passes the features on, and the last stage answers the asker. No WebRTC: a
//! maintained Rust WebRTC stack would double this crate's build; the relay carries the same
//! frames.

use std::time::Instant;

use anyhow::{Context, Result};
use burn::tensor::{Device, Tensor};
use split_shared::codec::{Calibration, DecodeContext};
use split_shared::labels::{Prediction, top_k};
use split_shared::model::{Boundary, EfficientNetLite0};
use split_shared::protocol::{ErrorCode, Reply, Request, ServerLoad, ServerTimings};

mod socket;

pub use socket::{AgentOptions, OnJoined, run};

/// A request's id, where the network started, its answer, and the decoding time in µs.
type Computed = (u64, Boundary, Vec<Prediction>, u32);

/// Most predictions in an answer.
const TOP_K: usize = 5;

/// The model, the codec calibration, and the device they run on.
pub struct Agent {
    model: EfficientNetLite0,
    calibration: Option<Calibration>,
    device: Device,
}

impl Agent {
    /// Load the weights (and the calibration, which coded feature frames need).
    ///
    /// # Errors
    /// A missing or invalid file, with its path.
    pub fn load(weights: &std::path::Path, calibration: Option<&std::path::Path>) -> Result<Self> {
        let device = Device::flex();
        let model = EfficientNetLite0::load(weights, &device)
            .with_context(|| format!("loading the weights {}", weights.display()))?;
        let calibration = calibration
            .map(|p| {
                Calibration::load(p)
                    .with_context(|| format!("loading the calibration {}", p.display()))
            })
            .transpose()?;
        Ok(Self { model, calibration, device })
    }

    /// Milliseconds for the whole network on one image, the second of two runs (the first
    /// warms caches): the speed this device reports to its group.
    ///
    /// # Errors
    /// When the model fails to run.
    pub fn measure(&self) -> Result<f64> {
        let x = Tensor::<4>::zeros([1, 3, 224, 224], &self.device);
        let mut ms = 0.0;
        for _ in 0..2 {
            let start = Instant::now();
            drop(
                self.model.forward_range(x.clone(), Boundary::INPUT, Boundary::LOGITS)?.into_data(),
            );
            ms = start.elapsed().as_secs_f64() * 1e3;
        }
        Ok(ms)
    }

    /// Answer one request frame as the server would: a result, or a typed error.
    pub fn answer(&self, frame: &[u8]) -> Reply {
        let id = split_shared::protocol::peek_request_id(frame).unwrap_or(0);
        let start = Instant::now();
        match self.compute(frame) {
            Ok((id, from, top, decode_us)) => Reply::Result {
                id,
                from: from.index(),
                top,
                timings: ServerTimings {
                    queue_us: 0,
                    decode_us,
                    compute_us: micros(start.elapsed()).saturating_sub(decode_us),
                    cached: false,
                },
                load: ServerLoad { queued: 0, workers: 1, recent_us: micros(start.elapsed()) },
            },
            Err((code, message)) => Reply::error(id, code, message),
        }
    }

    /// A pipeline's middle stage: decode a features request frame, run on to `to`, and code
    /// the result with `setting` as the next request frame (same id).
    ///
    /// # Errors
    /// A frame that is not features, does not decode, or a range that does not go forward.
    pub fn continue_request(
        &self,
        frame: &[u8],
        to: Boundary,
        setting: split_shared::codec::Setting,
    ) -> Result<Vec<u8>> {
        let Request::Features { id, frame } = Request::decode(frame)? else {
            anyhow::bail!("a pipeline stage takes a features frame");
        };
        let features = frame.decode(DecodeContext::new(self.calibration.as_ref()))?;
        let from = features.boundary();
        let x = self.model.forward_range(features.to_tensor(&self.device), from, to)?;
        let features = split_shared::Features::from_tensor(to, x)?;
        let next = split_shared::protocol::FeaturesFrame::encode(
            &features,
            setting,
            split_shared::codec::EncodeContext::new(self.calibration.as_ref()),
        )?;
        Ok(Request::Features { id, frame: next }.to_bytes())
    }

    fn compute(&self, frame: &[u8]) -> Result<Computed, (ErrorCode, String)> {
        let request = Request::decode(frame).map_err(|e| (e.code(), e.to_string()))?;
        let start = Instant::now();
        let (id, from, x) = match request {
            Request::Image { id, payload } | Request::Input { id, payload } => {
                let img = split_shared::image::preprocess(&payload)
                    .map_err(|e| (ErrorCode::of(&e), e.to_string()))?;
                (id, Boundary::INPUT, split_shared::image::to_input_tensor(&img, &self.device))
            }
            Request::Features { id, frame } => {
                let features = frame
                    .decode(DecodeContext::new(self.calibration.as_ref()))
                    .map_err(|e| (ErrorCode::of(&e), e.to_string()))?;
                (id, features.boundary(), features.to_tensor(&self.device))
            }
            Request::Ping { .. } => {
                return Err((
                    ErrorCode::UnsupportedMessage,
                    "a device answers requests, not pings".into(),
                ));
            }
        };
        let decode_us = micros(start.elapsed());
        let logits = self
            .model
            .forward_range(x, from, Boundary::LOGITS)
            .map_err(|e| (ErrorCode::Internal, e.to_string()))?;
        let values: Vec<f32> = logits
            .into_data()
            .try_to_vec::<f32>()
            .map_err(|e| (ErrorCode::Internal, format!("{e:?}")))?;
        Ok((id, from, top_k(&values, TOP_K), decode_us))
    }
}

fn micros(d: std::time::Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}
