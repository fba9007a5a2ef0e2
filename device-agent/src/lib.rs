//! A native member of a device group: a TV box or a desktop without a browser joins a group
//! through the server's `/group` socket and answers the requests other members relay to it,
//! with the same model definition and codec as the browser and the server.
//!
//! What it answers is the protocol's own, through the same runtime adapter the server hosts
//! ([`Lite0Split`]): a relayed [`Request::Image`] runs the whole network on the cropped photo,
//! [`Request::Input`] on the picture as sent, a relayed [`Request::Features`] the rest of it from
//! the frame's boundary, and the answer is a [`Reply`] frame, relayed back to whoever asked. As a
//! pipeline's middle stage (a `route` signal before the frame names the stages after it) it
//! runs its blocks and passes the features on, and the last stage answers the asker. With the
//! language model loaded ([`LlmMember`]) it also runs the middle blocks of the group's split
//! chats ([`split_shared::group::llm_stage`]): the asker's `/llm` frames in, the rows on to the
//! server's `/llm`, the replies back. No WebRTC: a maintained Rust WebRTC stack would double
//! this crate's build; the relay carries the same frames.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use burn::tensor::{Device, Tensor};
use split_shared::codec::{Calibration, StreamDecoder};
use split_shared::labels::{Prediction, top_k};
use split_shared::model::{Boundary, EfficientNetLite0, Lite0Split};
use split_shared::protocol::{
    ErrorCode, MODEL_EFFICIENTNET_LITE0, Reply, Request, ServerLoad, ServerTimings, WireError,
    peek_model,
};
use split_shared::runtime::{Activations, SplitModel};

mod llm;
mod socket;

pub use llm::{LlmMember, MAX_WAITING_PER_ASKER};
pub use socket::{AgentOptions, OnJoined, run};

/// A request's id, the index of the boundary the network started from, its answer, and the
/// decoding time in µs.
type Computed = (u64, u8, Vec<Prediction>, u32);

/// Most predictions in an answer.
const TOP_K: usize = 5;

/// The model as the server hosts it ([`Lite0Split`]: the network, its device and the codec
/// calibration), so a relayed frame is decoded and run exactly as `/ws` would.
pub struct Agent {
    model: Lite0Split,
    llm: Option<Arc<LlmMember>>,
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
            .transpose()?
            .map(Arc::new);
        let model = Lite0Split::new(model, device, calibration)
            .context("the calibration is not EfficientNet-Lite0's")?;
        Ok(Self { model, llm: None })
    }

    /// Also run the language model's middle blocks for split chats.
    pub fn with_llm(mut self, llm: LlmMember) -> Self {
        self.llm = Some(Arc::new(llm));
        self
    }

    /// The language model, when this agent runs split chats' blocks.
    pub fn llm(&self) -> Option<&Arc<LlmMember>> {
        self.llm.as_ref()
    }

    /// Milliseconds for the whole network on one image, the second of two runs (the first
    /// warms caches): the speed this device reports to its group.
    ///
    /// # Errors
    /// When the model fails to run.
    pub fn measure(&self) -> Result<f64> {
        let (network, device) = (self.model.network(), self.model.device());
        let x = Tensor::<4>::zeros([1, 3, 224, 224], device);
        let mut ms = 0.0;
        for _ in 0..2 {
            let start = Instant::now();
            drop(network.forward_range(x.clone(), Boundary::INPUT, Boundary::LOGITS)?.into_data());
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
                from,
                top,
                timings: ServerTimings {
                    queue_us: 0,
                    decode_us,
                    compute_us: micros(start.elapsed()).saturating_sub(decode_us),
                    cached: false,
                },
                load: ServerLoad {
                    queued: 0,
                    workers: 1,
                    recent_us: micros(start.elapsed()),
                    price_milli: 1_000,
                },
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
        let x = self.model.decode_features(&frame, &mut StreamDecoder::new())?;
        let y = self.model.forward_range(x, to.index())?;
        let ctx = split_shared::codec::EncodeContext::new(self.model.calibration());
        let next = split_shared::runtime::encode_frame(self.model.spec(), &y, setting, ctx)?;
        Ok(Request::Features { id, frame: next }.to_bytes())
    }

    fn compute(&self, frame: &[u8]) -> Result<Computed, (ErrorCode, String)> {
        let refused = |e: split_shared::Error| (ErrorCode::of(&e), e.to_string());
        let request = Request::decode(frame).map_err(|e| (e.code(), e.to_string()))?;
        let model = peek_model(frame).unwrap_or(MODEL_EFFICIENTNET_LITE0);
        if model != MODEL_EFFICIENTNET_LITE0 {
            let e = WireError::UnknownModel { id: request.id(), model };
            return Err((e.code(), e.to_string()));
        }
        let start = Instant::now();
        // Each relayed frame decodes alone: delta frames of a camera stream need the keyframe
        // the server keeps per session, which a relay between members does not carry.
        let (id, x): (u64, split_shared::Result<Activations>) = match request {
            Request::Image { id, payload } => (id, self.model.image_input(&payload, false)),
            Request::Input { id, payload } => (id, self.model.image_input(&payload, true)),
            Request::Features { id, frame } => {
                (id, self.model.decode_features(&frame, &mut StreamDecoder::new()))
            }
            Request::Ping { .. } => {
                return Err((
                    ErrorCode::UnsupportedMessage,
                    "a device answers requests, not pings".into(),
                ));
            }
        };
        let x = x.map_err(refused)?;
        let (from, decode_us) = (x.boundary(), micros(start.elapsed()));
        let scores = self.model.forward_range(x, self.model.spec().output()).map_err(refused)?;
        Ok((id, from, top_k(scores.values(), TOP_K), decode_us))
    }
}

fn micros(d: std::time::Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}
