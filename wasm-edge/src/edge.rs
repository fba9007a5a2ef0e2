//! The edge half as plain Rust: platform-independent, so it is tested natively and the wasm
//! exports in `lib.rs` only convert types.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;

use burn::tensor::{Device, Tensor};
use split_shared::cache::{ContentKey, LruCache};
use split_shared::codec::{
    Calibration, DEFAULT_KEYFRAME_INTERVAL, DecodeContext, EncodeContext, Noise, Setting,
    StreamEncoder,
};
use split_shared::image::RgbImage;
use split_shared::labels::{Prediction, TOP_K, top_k};
use split_shared::model::{
    Boundary, EfficientNetLite0, Features, INPUT_SIZE, MAX_BATCH, MIN_INPUT_SIZE, ModelError,
    NUM_CLASSES,
};
use split_shared::protocol::{Encoding, ErrorCode, FeaturesFrame, Reply, Request};

/// Results the edge remembers by content.
pub const CACHE_ENTRIES: usize = 256;
/// Requests awaiting a reply whose results will be cached; older ones are forgotten beyond it.
const MAX_PENDING: usize = 256;
/// Dead zone (in quantization levels) of stream residuals: small changes are not resent.
pub const STREAM_DEADZONE: u8 = 1;
/// Id of the session's one camera stream.
const STREAM_ID: u32 = 1;

/// What the edge produced for one image.
#[derive(Clone, Debug, PartialEq)]
pub enum EdgeOutput {
    /// The split was `logits`: the whole network ran here.
    Local {
        /// Top-5, best first.
        top: Vec<Prediction>,
        /// Whether a stage of the light model took part (a reduced answer, not cached).
        reduced: bool,
    },
    /// The same content was classified before: no compute, nothing to send.
    Cached {
        /// Top-5, best first.
        top: Vec<Prediction>,
    },
    /// A features frame to send to the server.
    Remote {
        /// The encoded request frame.
        frame: Vec<u8>,
        /// Whether it is a stream residual rather than a standalone or key frame.
        delta: bool,
    },
}

/// How to run one image.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RunOptions {
    /// Where to stop; `logits` runs everything here.
    pub split: Boundary,
    /// How to code the features.
    pub setting: Setting,
    /// Code against the previous frame of this session's stream (camera frames).
    pub stream: bool,
    /// Noise added to the features before they are coded, and the seed of its draw.
    pub noise: Option<(Noise, u64)>,
}

struct EdgeState {
    calibration: Option<Calibration>,
    stream: StreamEncoder,
    cache: LruCache<Vec<Prediction>>,
    pending: HashMap<u64, ContentKey>,
}

/// What image bytes given to the edge hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageSource {
    /// A photo: centre-cropped and resized to the network's input here.
    Photo,
    /// The network's 224x224 input itself, already cropped (the cloud-only upload
    /// `encodeUploadJpeg` makes, sent as `Request::Input`): never cropped again.
    ModelInput,
}

impl ImageSource {
    /// Decode `bytes` to the network's input at `size` x `size` pixels: a photo centre-cropped
    /// and resized, a model input (224x224, else [`split_shared::Error::ImageDecode`]) resized.
    fn pixels(self, bytes: &[u8], size: usize) -> split_shared::Result<RgbImage> {
        use split_shared::image::{center_crop_resize, decode, decode_input, resize_bicubic};
        Ok(match self {
            Self::Photo => center_crop_resize(&decode(bytes)?, size),
            Self::ModelInput => {
                let img = decode_input(bytes)?;
                if size == INPUT_SIZE { img } else { resize_bicubic(&img, size, size) }
            }
        })
    }
}

/// A run finished on this device from a features frame ([`EdgeRunner::finish_locally`]).
#[derive(Clone, Debug, PartialEq)]
pub struct LocalAnswer {
    /// Top-5, best first.
    pub top: Vec<Prediction>,
    /// Whether a stage of the light model took part.
    pub reduced: bool,
    /// The boundary the frame's features were at (`input` for [`EdgeRunner::answer_at`]).
    pub from: Boundary,
    /// The side of the square input the network ran on: [`INPUT_SIZE`], or a smaller one for
    /// the reduced-input answer.
    pub input_size: usize,
}

/// What a run awaits between stages while it is set ([`EdgeRunner::set_pause`]): in the
/// browser, a turn of the event loop.
pub type Pause = Box<dyn Fn() -> Pin<Box<dyn Future<Output = ()>>>>;

/// The model on the edge device, with the codec state of one client. Its stages arrive one
/// weight shard at a time ([`EdgeRunner::load_stage`]), so the model is behind a `RefCell`;
/// no borrow is held across an `await`.
pub struct EdgeRunner {
    model: RefCell<EfficientNetLite0>,
    /// Awaited between stages while set: on the CPU a run holds its thread from the input
    /// to the split, and anything the thread's event loop has to do (a pong to time) waits for
    /// it; pausing between stages bounds that wait by one stage.
    pause: RefCell<Option<Pause>>,
    /// Bit `k` set: the stage ending at boundary `k` holds the light model's weights.
    light: RefCell<u32>,
    device: Device,
    state: RefCell<EdgeState>,
}

/// Wait for a tensor's data; asynchronous because WebGPU results arrive through a callback.
async fn read_data(t: Tensor<4>) -> Result<burn::tensor::TensorData, ModelError> {
    t.into_data_async().await.map_err(|e| ModelError::Backend(format!("{e:?}")))
}

/// Read activations back.
async fn read_features(boundary: Boundary, t: Tensor<4>) -> Result<Features, ModelError> {
    Features::from_data(boundary, read_data(t).await?)
}

impl EdgeRunner {
    /// Load the whole weights file onto `device`.
    ///
    /// # Errors
    /// When the file is not a valid weights file for this model.
    pub fn new(weights: &[u8], device: Device) -> split_shared::Result<Self> {
        let runner = Self::empty(device);
        runner.load_weights(weights)?;
        Ok(runner)
    }

    /// Load (or replace) every stage from the whole weights file.
    ///
    /// # Errors
    /// When the file is not a valid weights file for this model.
    pub fn load_weights(&self, weights: &[u8]) -> split_shared::Result<()> {
        *self.model.borrow_mut() = EfficientNetLite0::from_weight_bytes(weights, &self.device)?;
        Ok(())
    }

    /// A runner with no stage loaded yet: load them with [`Self::load_stage`].
    pub fn empty(device: Device) -> Self {
        let state = EdgeState {
            calibration: None,
            stream: StreamEncoder::new(STREAM_ID, DEFAULT_KEYFRAME_INTERVAL, STREAM_DEADZONE),
            cache: LruCache::new(CACHE_ENTRIES, CACHE_ENTRIES * 256),
            pending: HashMap::new(),
        };
        Self {
            model: RefCell::new(EfficientNetLite0::empty()),
            pause: RefCell::new(None),
            light: RefCell::new(0),
            device,
            state: RefCell::new(state),
        }
    }

    /// Pause between stages (`Some`) or run from end to end (`None`, the default). The answer
    /// is the same either way.
    pub fn set_pause(&self, pause: Option<Pause>) {
        *self.pause.borrow_mut() = pause;
    }

    /// The network from `from` to `to`, stage by stage with the pause between them while one
    /// is set.
    async fn forward(
        &self,
        x: Tensor<4>,
        from: Boundary,
        to: Boundary,
    ) -> Result<Tensor<4>, ModelError> {
        if self.pause.borrow().is_none() {
            return self.model.borrow().forward_range(x, from, to);
        }
        let mut steps = self.model.borrow().steps(x, from, to)?;
        while self.model.borrow().step(&mut steps) {
            if steps.done() {
                break;
            }
            let pause = self.pause.borrow().as_ref().map(|p| p());
            if let Some(pause) = pause {
                pause.await;
            }
        }
        Ok(steps.finish())
    }

    /// Load the stage ending at `end` from a weights shard (or the whole weights file); it
    /// replaces the light model's weights of that stage, if loaded.
    ///
    /// # Errors
    /// When the bytes are not a weights file holding that stage.
    pub fn load_stage(&self, end: Boundary, bytes: &[u8]) -> split_shared::Result<()> {
        self.model.borrow_mut().load_stage_bytes(end, bytes, &self.device)?;
        *self.light.borrow_mut() &= !(1 << end.index());
        Ok(())
    }

    /// Load the stage ending at `end` from the light model's shard, unless its full weights
    /// are loaded (a light stage never replaces a full one). Returns whether it was loaded.
    ///
    /// # Errors
    /// When the bytes are not a light shard holding that stage.
    pub fn load_light_stage(&self, end: Boundary, bytes: &[u8]) -> split_shared::Result<bool> {
        let full =
            self.model.borrow().has_stage(end) && *self.light.borrow() & (1 << end.index()) == 0;
        if full {
            return Ok(false);
        }
        self.model.borrow_mut().load_light_stage_bytes(end, bytes, &self.device)?;
        *self.light.borrow_mut() |= 1 << end.index();
        Ok(true)
    }

    /// The deepest boundary the full weights reach from the input (light stages not counted).
    pub fn loaded_through(&self) -> Boundary {
        let light = *self.light.borrow();
        let model = self.model.borrow();
        Boundary::all()
            .skip(1)
            .take_while(|b| model.has_stage(*b) && light & (1 << b.index()) == 0)
            .last()
            .unwrap_or(Boundary::INPUT)
    }

    /// The deepest boundary the loaded stages reach from the input, light ones included.
    pub fn reachable_through(&self) -> Boundary {
        self.model.borrow().loaded_through()
    }

    /// Whether a stage after `from`, up to `to`, holds the light model's weights.
    fn light_between(&self, from: Boundary, to: Boundary) -> bool {
        let light = *self.light.borrow();
        (from.index() + 1..=to.index()).any(|k| light & (1 << k) != 0)
    }

    /// Load the codec calibration (the server's `/calibration/...` file); returns its id.
    ///
    /// # Errors
    /// When the bytes are not a valid calibration file.
    pub fn set_calibration(&self, bytes: &[u8]) -> split_shared::Result<u64> {
        let calibration = Calibration::from_bytes(bytes)?;
        let id = calibration.id();
        let mut state = self.state.borrow_mut();
        state.calibration = Some(calibration);
        state.stream.force_keyframe();
        Ok(id)
    }

    /// Add a part of the codec calibration (`/calibration/parts/{boundary}.splc`): its
    /// boundary's tables join those loaded, which must be parts of the same calibration (a
    /// part of another one replaces them). Returns the calibration's id.
    ///
    /// # Errors
    /// When the bytes are not a valid calibration file.
    pub fn add_calibration(&self, bytes: &[u8]) -> split_shared::Result<u64> {
        let part = Calibration::from_bytes(bytes)?;
        part.check_spec(&split_shared::model::lite0_spec())?;
        let id = part.id();
        let mut guard = self.state.borrow_mut();
        let state = &mut *guard;
        match &mut state.calibration {
            Some(c) if c.id() == id => c.merge(part)?,
            other => {
                *other = Some(part);
                state.stream.force_keyframe();
            }
        }
        Ok(id)
    }

    /// Resize the content cache (0 turns it off: benchmarks want every request computed).
    pub fn set_cache_entries(&self, entries: usize) {
        self.state.borrow_mut().cache = LruCache::new(entries, entries * 256);
    }

    /// Make the stream's next frame a keyframe (after a reconnect).
    pub fn force_keyframe(&self) {
        self.state.borrow_mut().stream.force_keyframe();
    }

    fn key(&self, image: &[u8], options: RunOptions) -> ContentKey {
        let calibration = self.state.borrow().calibration.as_ref().map_or(0, Calibration::id);
        ContentKey::of(&[
            b"edge",
            image,
            &[options.split.index()],
            options.setting.to_string().as_bytes(),
            &[u8::from(options.stream)],
            &calibration.to_le_bytes(),
            // The noise's kind and scale, not its seed: an answer to noisy features stands for
            // the content at that noise level.
            options.noise.map(|(n, _)| n.to_string()).unwrap_or_default().as_bytes(),
        ])
    }

    /// Preprocess an encoded image and run the network up to the split; a repeat of content
    /// already classified with the same options is answered from the cache.
    ///
    /// # Errors
    /// When the image does not decode, the codec setting is not calibrated, or the backend fails.
    pub async fn run(
        &self,
        image: &[u8],
        options: RunOptions,
        id: u64,
    ) -> split_shared::Result<EdgeOutput> {
        self.run_timed(image, options, id, || 0.0).await.map(|(out, _)| out)
    }

    /// [`Self::run`], and how long of it the network's stages took by the clock `now` (ms; 0
    /// for an answer from the cache): the rest of the run (decoding the photo, coding the
    /// features) does not scale with the stages, and the planner prices it apart.
    ///
    /// # Errors
    /// As [`Self::run`].
    pub async fn run_timed(
        &self,
        image: &[u8],
        options: RunOptions,
        id: u64,
        now: fn() -> f64,
    ) -> split_shared::Result<(EdgeOutput, f64)> {
        let key = self.key(image, options);
        if let Some(top) = self.state.borrow_mut().cache.get(&key) {
            return Ok((EdgeOutput::Cached { top }, 0.0));
        }
        let img = split_shared::image::preprocess(image)?;
        let (out, stages_ms) = self.run_pixels_timed(&img, options, id, now).await?;
        let mut state = self.state.borrow_mut();
        match &out {
            // A reduced answer is not remembered: the same image later deserves the full one.
            EdgeOutput::Local { reduced: true, .. } => {}
            EdgeOutput::Local { top, reduced: false } => state.cache.insert(key, top.clone(), 256),
            EdgeOutput::Remote { .. } => {
                if state.pending.len() >= MAX_PENDING {
                    state.pending.clear();
                }
                state.pending.insert(id, key);
            }
            EdgeOutput::Cached { .. } => {}
        }
        Ok((out, stages_ms))
    }

    /// Run already-preprocessed pixels (224x224 RGB) up to the split, without the cache.
    ///
    /// # Errors
    /// When the codec setting is not calibrated, or the backend fails.
    pub async fn run_pixels(
        &self,
        img: &split_shared::image::RgbImage,
        options: RunOptions,
        id: u64,
    ) -> split_shared::Result<EdgeOutput> {
        self.run_pixels_timed(img, options, id, || 0.0).await.map(|(out, _)| out)
    }

    async fn run_pixels_timed(
        &self,
        img: &split_shared::image::RgbImage,
        options: RunOptions,
        id: u64,
        now: fn() -> f64,
    ) -> split_shared::Result<(EdgeOutput, f64)> {
        let started = now();
        let x = split_shared::image::to_input_tensor(img, &self.device);
        let x = self.forward(x, Boundary::INPUT, options.split).await?;
        // Reading the features back waits for the last stage (WebGPU is asynchronous).
        let features = read_features(options.split, x).await?;
        let stages_ms = now() - started;
        if options.split == Boundary::LOGITS {
            let reduced = self.light_between(Boundary::INPUT, Boundary::LOGITS);
            let top = top_k(&features.values()[..NUM_CLASSES], TOP_K);
            return Ok((EdgeOutput::Local { top, reduced }, stages_ms));
        }
        let mut state = self.state.borrow_mut();
        let EdgeState { calibration, stream, .. } = &mut *state;
        let features = match (options.noise, calibration.as_ref()) {
            (None, _) => features,
            (Some((noise, seed)), Some(c)) => features.with_noise(noise, c, seed)?,
            (Some(_), None) => return Err(split_shared::codec::CodecError::NoCalibration.into()),
        };
        let ctx =
            EncodeContext::new(calibration.as_ref()).with_stream(options.stream.then_some(stream));
        let frame = features.to_frame(options.setting, ctx)?;
        let delta = matches!(frame.encoding, Encoding::Coded(p) if p.pos.delta);
        let frame = Request::Features { id, frame }.to_bytes();
        Ok((EdgeOutput::Remote { frame, delta }, stages_ms))
    }

    /// Finish a request on this device: decode the features of `frame` (a standalone or key
    /// frame, as the server would) and run the loaded stages from its boundary to the logits.
    /// What answers while the server cannot; the frame stays the request's to send when the
    /// link returns.
    ///
    /// # Errors
    /// When the frame is a stream residual (its reference is the server's), its codec is not
    /// calibrated here, or a stage after it is not loaded.
    pub async fn finish_locally(&self, frame: &FeaturesFrame) -> split_shared::Result<LocalAnswer> {
        let features = {
            let state = self.state.borrow();
            Features::from_frame(frame, DecodeContext::new(state.calibration.as_ref()))?
        };
        let from = features.boundary();
        let x = features.to_tensor(&self.device);
        let x = self.forward(x, from, Boundary::LOGITS).await?;
        let logits = read_features(Boundary::LOGITS, x).await?;
        Ok(LocalAnswer {
            top: top_k(&logits.values()[..NUM_CLASSES], TOP_K),
            reduced: self.light_between(from, Boundary::LOGITS),
            from,
            input_size: INPUT_SIZE,
        })
    }

    /// Answer `image` here from the input on a smaller square input of side `size` (from
    /// `MIN_INPUT_SIZE` to [`INPUT_SIZE`]): the stages loaded (full or light) run on it at a
    /// cost in proportion to its area (`macs_at`); what an outage answers with when the page
    /// trades agreement for speed. Below [`INPUT_SIZE`] the answer is reduced (the whole
    /// network's answer is the one at full size). A photo is centre-cropped first, as every
    /// run crops it; a [`ImageSource::ModelInput`] is only resized, as the server reads it.
    /// Also returns how long the stages took by the clock `now` (ms). Not cached: the same
    /// image deserves the full answer later.
    ///
    /// # Errors
    /// When the image does not decode (or a model input is not 224x224), `size` is out of
    /// range, a stage is not loaded, or the backend fails.
    pub async fn answer_at(
        &self,
        image: &[u8],
        source: ImageSource,
        size: usize,
        now: fn() -> f64,
    ) -> split_shared::Result<(LocalAnswer, f64)> {
        // Checked before the resize, which would allocate whatever size it is asked for.
        if !(MIN_INPUT_SIZE..=INPUT_SIZE).contains(&size) {
            return Err(ModelError::InputSize {
                got: vec![1, 3, size, size],
                min: MIN_INPUT_SIZE,
                max: INPUT_SIZE,
                max_batch: MAX_BATCH,
            }
            .into());
        }
        let img = source.pixels(image, size)?;
        let started = now();
        let x = split_shared::image::to_input_tensor(&img, &self.device);
        let x = self.model.borrow().forward_at(x)?;
        let logits = read_features(Boundary::LOGITS, x).await?;
        let answer = LocalAnswer {
            top: top_k(&logits.values()[..NUM_CLASSES], TOP_K),
            reduced: size != INPUT_SIZE || self.light_between(Boundary::INPUT, Boundary::LOGITS),
            from: Boundary::INPUT,
            input_size: size,
        };
        Ok((answer, now() - started))
    }

    /// Answer a request another member of a device group relayed here, as the server would:
    /// an image or model input runs the whole network, a features frame the rest of it from
    /// its boundary. The reply frame: a result, or a typed error (never a panic, whatever the
    /// bytes). `now` is a clock in ms, for the timings the reply carries.
    pub async fn answer_request(&self, frame: &[u8], now: fn() -> f64) -> Vec<u8> {
        let id = split_shared::protocol::peek_request_id(frame).unwrap_or(0);
        let start = now();
        let reply = match self.compute_request(frame).await {
            Ok((id, from, top)) => {
                let us = ((now() - start) * 1e3).clamp(0.0, f64::from(u32::MAX)) as u32;
                Reply::Result {
                    id,
                    from: from.index(),
                    top,
                    timings: split_shared::protocol::ServerTimings {
                        compute_us: us,
                        ..Default::default()
                    },
                    load: split_shared::protocol::ServerLoad {
                        queued: 0,
                        workers: 1,
                        recent_us: us,
                        price_milli: 1_000,
                    },
                }
            }
            Err((code, message)) => Reply::error(id, code, message),
        };
        reply.to_bytes()
    }

    async fn compute_request(
        &self,
        frame: &[u8],
    ) -> Result<(u64, Boundary, Vec<Prediction>), (ErrorCode, String)> {
        let fail = |e: split_shared::Error| (ErrorCode::of(&e), e.to_string());
        match Request::decode(frame).map_err(|e| (e.code(), e.to_string()))? {
            request @ (Request::Image { .. } | Request::Input { .. }) => {
                let (id, img) = match request {
                    Request::Input { id, payload } => {
                        (id, ImageSource::ModelInput.pixels(&payload, INPUT_SIZE))
                    }
                    Request::Image { id, payload } => {
                        (id, ImageSource::Photo.pixels(&payload, INPUT_SIZE))
                    }
                    _ => unreachable!("matched above"),
                };
                let img = img.map_err(fail)?;
                let options = RunOptions {
                    split: Boundary::LOGITS,
                    setting: split_shared::codec::Setting::F32,
                    stream: false,
                    noise: None,
                };
                match self.run_pixels(&img, options, id).await.map_err(fail)? {
                    EdgeOutput::Local { top, .. } => Ok((id, Boundary::INPUT, top)),
                    _ => Err((ErrorCode::Internal, "the whole network did not run here".into())),
                }
            }
            Request::Features { id, frame } => {
                let answer = self.finish_locally(&frame).await.map_err(fail)?;
                Ok((id, answer.from, answer.top))
            }
            Request::Ping { .. } => {
                Err((ErrorCode::UnsupportedMessage, "a device answers requests, not pings".into()))
            }
        }
    }

    /// A middle stage of a pipeline across devices: decode `frame`'s features, run the
    /// loaded stages from its boundary to `to`, and code the result with `setting` for the
    /// next device.
    ///
    /// # Errors
    /// When the frame does not decode here, `to` is not after its boundary, a stage is not
    /// loaded, or the setting is not calibrated at `to`.
    pub async fn continue_features(
        &self,
        frame: &FeaturesFrame,
        to: Boundary,
        setting: split_shared::codec::Setting,
    ) -> split_shared::Result<FeaturesFrame> {
        let features = {
            let state = self.state.borrow();
            Features::from_frame(frame, DecodeContext::new(state.calibration.as_ref()))?
        };
        let from = features.boundary();
        if to <= from {
            return Err(ModelError::BackwardRange { from, to }.into());
        }
        let x = features.to_tensor(&self.device);
        let x = self.forward(x, from, to).await?;
        let features = read_features(to, x).await?;
        let state = self.state.borrow();
        Ok(features.to_frame(setting, EncodeContext::new(state.calibration.as_ref()))?)
    }

    /// Decode a reply frame; a result for a request this runner sent fills the cache, and a
    /// `keyframe_required` error makes the stream's next frame a keyframe.
    ///
    /// # Errors
    /// When the frame is not a valid reply.
    pub fn accept_reply(&self, frame: &[u8]) -> split_shared::Result<Reply> {
        let reply = Reply::decode(frame)?;
        let mut state = self.state.borrow_mut();
        let key = state.pending.remove(&reply.id());
        match &reply {
            Reply::Result { top, .. } => {
                if let Some(key) = key {
                    state.cache.insert(key, top.clone(), 256);
                }
            }
            Reply::Error { code: ErrorCode::KeyframeRequired, .. } => state.stream.force_keyframe(),
            Reply::Error { .. } | Reply::Pong { .. } => {}
        }
        Ok(reply)
    }

    /// Activations of `image` at `split` with their shape: input for codec benchmarks.
    ///
    /// # Errors
    /// When the image does not decode or the backend fails.
    pub async fn features(&self, image: &[u8], split: Boundary) -> split_shared::Result<Features> {
        let img = split_shared::image::preprocess(image)?;
        let x = split_shared::image::to_input_tensor(&img, &self.device);
        let x = self.forward(x, Boundary::INPUT, split).await?;
        Ok(read_features(split, x).await?)
    }

    /// The loaded calibration, if any, for codec benchmarks.
    pub fn with_calibration<R>(&self, f: impl FnOnce(Option<&Calibration>) -> R) -> R {
        f(self.state.borrow().calibration.as_ref())
    }

    /// Median cumulative ms from the input to every boundary the loaded stages reach (0 for
    /// `input`) over `repeats` passes of a blank image, stage by stage, timed with `now` (ms).
    ///
    /// # Errors
    /// When the backend fails.
    pub async fn profile(
        &self,
        repeats: usize,
        now: fn() -> f64,
    ) -> split_shared::Result<Vec<f64>> {
        let through = self.loaded_through();
        let n = usize::from(through.index()) + 1;
        let mut runs: Vec<Vec<f64>> = vec![Vec::new(); n];
        for _ in 0..repeats {
            let mut x = Tensor::<4>::zeros([1, 3, 224, 224], &self.device);
            let mut at = Boundary::INPUT;
            let mut total = 0.0;
            for b in Boundary::all().skip(1).take(n - 1) {
                let t = now();
                x = self.model.borrow().forward_range(x, at, b)?;
                // Reading back one value waits for the stage to finish (WebGPU is asynchronous).
                let probe = x.clone().slice([0..1, 0..1, 0..1, 0..1]);
                read_data(probe).await?;
                total += now() - t;
                runs[usize::from(b.index())].push(total);
                at = b;
            }
        }
        Ok(runs
            .into_iter()
            .map(|mut v| {
                v.sort_by(f64::total_cmp);
                v.get(v.len() / 2).copied().unwrap_or(0.0)
            })
            .collect())
    }

    /// Run a dummy image through the loaded stages once, so shader compilation and buffer
    /// allocation do not land on the user's first request (nothing to do with no stage).
    ///
    /// # Errors
    /// When the backend fails.
    pub async fn warm_up(&self) -> split_shared::Result<()> {
        let through = self.loaded_through();
        if through == Boundary::INPUT {
            return Ok(());
        }
        let x = Tensor::<4>::zeros([1, 3, 224, 224], &self.device);
        let y = self.model.borrow().forward_range(x, Boundary::INPUT, through)?;
        read_data(y).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
