//! WebAssembly module for the browser half of split inference.
//!
//! The WebSocket stays in JavaScript (`web/split-client.js`): the page owns I/O and timing, and
//! this module only computes and frames, so no Rust closures have to outlive a call. From JS:
//!
//! ```js
//! import init, { EdgeSession, encodeImageRequest, decodeReply } from "./pkg/wasm_edge.js";
//! await init();
//! const edge = await EdgeSession.create("auto");                 // "auto" | "webgpu" | "cpu"
//! edge.loadWeights(weightsBytes);                  // or edge.loadStage("block5", shardBytes)…
//! await edge.warmUp();
//! edge.setCalibration(calibrationBytes);                          // enables the q* codecs
//! const out = await edge.run(imageBytes, "block5", 1, "q4");      // { frame } or { top }
//! socket.send(out.frame);
//! const reply = edge.acceptReply(new Uint8Array(event.data));     // { kind: "result", top, ... }
//! ```

mod edge;
#[cfg(feature = "encrypted")]
mod encrypted;
mod js;
mod llm;
mod llm_cloud;
mod llm_member;
mod panic;
mod planner;

use std::rc::Rc;

use burn::tensor::Device;
use split_shared::model::{Boundary, Features};
use split_shared::protocol::{ErrorCode, Reply, Request};
use wasm_bindgen::prelude::*;

pub use edge::{EdgeOutput, EdgeRunner, ImageSource, RunOptions};
#[cfg(feature = "encrypted")]
pub use encrypted::EncryptedClient;
pub use llm::LlmEdge;
pub use llm_cloud::LlmCloud;
pub use planner::AdaptivePlanner;
use split_shared::codec::{DecodeContext, EncodeContext, Setting};

/// The model loaded on the best device this browser offers.
#[wasm_bindgen]
pub struct EdgeSession {
    runner: Rc<EdgeRunner>,
    backend: &'static str,
}

/// A failure of the shared crate as a coded `SplitError`.
fn js_error(e: impl Into<split_shared::Error>) -> JsValue {
    js::shared_error(&e.into())
}

/// Parse a boundary name and a codec setting name; `bad_option` when either is unknown.
fn split_and_codec(split: &str, codec: &str) -> Result<(Boundary, Setting), JsValue> {
    let split: Boundary = split.parse().map_err(|e| js::error("bad_option", e))?;
    let setting: Setting = codec.parse().map_err(|e| js::error("bad_option", e))?;
    Ok((split, setting))
}

async fn pick_device(backend: &str) -> Result<(Device, &'static str), JsValue> {
    match backend {
        "cpu" => Ok((Device::flex(), "cpu")),
        "webgpu" | "auto" => match webgpu_device().await {
            Ok(device) => Ok((device, "webgpu")),
            Err(e) if backend == "auto" => {
                js::warn(&format!("WebGPU unavailable ({e}); using the CPU backend"));
                Ok((Device::flex(), "cpu"))
            }
            Err(e) => Err(js::error(
                "webgpu_unavailable",
                format!("WebGPU was requested but is unavailable: {e}"),
            )),
        },
        other => Err(js::error(
            "bad_option",
            format!("unknown backend {other:?}; use \"auto\", \"webgpu\" or \"cpu\""),
        )),
    }
}

#[cfg(all(target_family = "wasm", feature = "webgpu"))]
async fn webgpu_device() -> Result<Device, String> {
    if !js::has_webgpu() {
        return Err(
            "navigator.gpu is missing (browser without WebGPU, or not a secure context)".into()
        );
    }
    Device::wgpu_options().init_async().await.map_err(|e| format!("{e:?}"))
}

#[cfg(not(all(target_family = "wasm", feature = "webgpu")))]
async fn webgpu_device() -> Result<Device, String> {
    Err("this module was built without WebGPU (the CPU-only build; load web/pkg for WebGPU)".into())
}

/// Runs when the module is instantiated (on every thread of the threaded build): panics keep
/// their message for the client ([`panic`]).
#[wasm_bindgen(start)]
pub fn on_start() {
    panic::install();
}

/// Which build this is: `"webgpu"` (WebGPU and CPU), `"cpu"` (simd128), `"cpu-relaxed"`
/// (simd128 + relaxed SIMD's fused multiply-add), `"cpu-threads"` (relaxed SIMD and Web Worker
/// threads) or `"cpu-threads-simd128"` (threads on simd128, for engines without relaxed SIMD).
#[wasm_bindgen(js_name = buildKind)]
pub fn build_kind() -> String {
    if cfg!(feature = "webgpu") {
        "webgpu".into()
    } else if cfg!(all(feature = "threads", feature = "relaxed-simd")) {
        "cpu-threads".into()
    } else if cfg!(feature = "threads") {
        "cpu-threads-simd128".into()
    } else if cfg!(feature = "relaxed-simd") {
        "cpu-relaxed".into()
    } else {
        "cpu".into()
    }
}

/// Start `helpers` Web Workers sharing this module's memory (resolves once they run); the
/// threaded build only. Call it once, from a worker (the page's thread may not block), before
/// [`EdgeSession::create`]: the kernels then split large calls across the caller and them.
#[cfg(feature = "threads")]
#[wasm_bindgen(js_name = startThreads)]
pub async fn start_threads(helpers: usize) -> Result<(), JsValue> {
    let helpers = helpers.max(1);
    wasm_bindgen_futures::JsFuture::from(wasm_bindgen_rayon::init_thread_pool(helpers)).await?;
    split_kernels::use_worker_pool(helpers);
    Ok(())
}

#[wasm_bindgen]
impl EdgeSession {
    /// A session on `backend` with no weights yet: `"auto"` tries WebGPU and falls back to
    /// the CPU, `"webgpu"` fails without it, `"cpu"` never touches the GPU. Load the whole
    /// weights with `loadWeights`, or the stages a split needs with `loadStage`.
    pub async fn create(backend: String) -> Result<EdgeSession, JsValue> {
        let (device, backend) = pick_device(&backend).await?;
        Ok(EdgeSession { runner: Rc::new(EdgeRunner::empty(device)), backend })
    }

    /// Load every stage from the whole weights file (`/weights/efficientnet-lite0.splw`).
    #[wasm_bindgen(js_name = loadWeights)]
    pub fn load_weights(&self, bytes: &[u8]) -> Result<(), JsValue> {
        self.runner.load_weights(bytes).map_err(js_error)
    }

    /// Load the stage ending at boundary `end` (`"stem"`, `"block0"`…`"block15"`, `"head"`,
    /// `"logits"`) from its weight shard (`/api/info`'s `weights_shards`); `bad_weights` when
    /// the bytes are not that stage's weights.
    #[wasm_bindgen(js_name = loadStage)]
    pub fn load_stage(&self, end: String, bytes: &[u8]) -> Result<(), JsValue> {
        let end: Boundary = end.parse().map_err(|e| js::error("bad_option", e))?;
        self.runner.load_stage(end, bytes).map_err(js_error)
    }

    /// Load the stage ending at `end` from the light model's shard (`/api/info`'s
    /// `light_model.shards`), unless its full weights are loaded; returns whether it was.
    /// Answers through a light stage say `quality: "reduced"`.
    #[wasm_bindgen(js_name = loadLightStage)]
    pub fn load_light_stage(&self, end: String, bytes: &[u8]) -> Result<bool, JsValue> {
        let end: Boundary = end.parse().map_err(|e| js::error("bad_option", e))?;
        self.runner.load_light_stage(end, bytes).map_err(js_error)
    }

    /// The deepest boundary the full weights reach from the input (`"input"` with none,
    /// `"logits"` with all); light stages do not count.
    #[wasm_bindgen(getter, js_name = loadedThrough)]
    pub fn loaded_through(&self) -> String {
        self.runner.loaded_through().name().to_string()
    }

    /// The deepest boundary the loaded stages reach, the light model's included.
    #[wasm_bindgen(getter, js_name = reachableThrough)]
    pub fn reachable_through(&self) -> String {
        self.runner.reachable_through().name().to_string()
    }

    /// Finish a features request frame here (what `run` returned, not a stream residual):
    /// decode its features and run the loaded stages to the logits. Resolves to
    /// `{ top, quality: "full" | "reduced", from }`; the frame can still be sent later.
    #[wasm_bindgen(js_name = finishLocally)]
    pub fn finish_locally(&self, frame: Vec<u8>) -> js_sys::Promise {
        let runner = Rc::clone(&self.runner);
        wasm_bindgen_futures::future_to_promise(async move {
            let Request::Features { frame, .. } = Request::decode(&frame).map_err(js_error)? else {
                return Err(js::error(
                    "bad_option",
                    "not a features frame: only features finish on the edge",
                ));
            };
            let answer = runner.finish_locally(&frame).await.map_err(js_error)?;
            Ok(js::local_answer(&answer))
        })
    }

    /// Answer `image` (JPEG or PNG bytes) here on a smaller square input, `size` pixels a side
    /// (32 to 224), with the stages loaded, full or light: a third of the compute at 128, and
    /// an answer that agrees with the whole network's less often (docs/training.md). With
    /// `model_input` true the image is the 224x224 model input (`encodeUploadJpeg`'s), resized
    /// but not cropped again. Resolves to `{ top, quality, from: "input", inputSize, stagesMs }`;
    /// `quality` is `"reduced"` below 224. `bad_option` for a size out of range,
    /// `weights_missing` while a stage is missing, `bad_image` for a model input of another
    /// size.
    #[wasm_bindgen(js_name = answerAt)]
    pub fn answer_at(
        &self,
        image: Vec<u8>,
        size: u32,
        model_input: Option<bool>,
    ) -> js_sys::Promise {
        let runner = Rc::clone(&self.runner);
        let source =
            if model_input == Some(true) { ImageSource::ModelInput } else { ImageSource::Photo };
        wasm_bindgen_futures::future_to_promise(async move {
            let (answer, stages_ms) = runner
                .answer_at(&image, source, size as usize, js::now_ms)
                .await
                .map_err(js_error)?;
            let out = js::local_answer(&answer);
            js_sys::Reflect::set(&out, &"stagesMs".into(), &stages_ms.into())?;
            Ok(out)
        })
    }

    /// Answer a request frame another device relayed here (a device group's task or the
    /// last stage of a pipeline), as the server would: resolves to the reply frame's bytes, a
    /// result or a typed error.
    #[wasm_bindgen(js_name = answerRequest)]
    pub fn answer_request(&self, frame: Vec<u8>) -> js_sys::Promise {
        let runner = Rc::clone(&self.runner);
        wasm_bindgen_futures::future_to_promise(async move {
            let reply = runner.answer_request(&frame, js::now_ms).await;
            Ok(js_sys::Uint8Array::from(reply.as_slice()).into())
        })
    }

    /// A middle stage of a pipeline: run a relayed features frame on from its boundary to
    /// `to` and code the result with `codec` for the next device. Resolves to the new
    /// request frame (same request id).
    #[wasm_bindgen(js_name = continueRequest)]
    pub fn continue_request(&self, frame: Vec<u8>, to: String, codec: String) -> js_sys::Promise {
        let runner = Rc::clone(&self.runner);
        wasm_bindgen_futures::future_to_promise(async move {
            let (to, setting) = split_and_codec(&to, &codec)?;
            let Request::Features { id, frame } = Request::decode(&frame).map_err(js_error)? else {
                return Err(js::error(
                    "bad_option",
                    "not a features frame: a pipeline stage takes features",
                ));
            };
            let next = runner.continue_features(&frame, to, setting).await.map_err(js_error)?;
            let bytes = Request::Features { id, frame: next }.to_bytes();
            Ok(js_sys::Uint8Array::from(bytes.as_slice()).into())
        })
    }

    /// Run a blank image through the loaded stages once, so shader compilation and buffer
    /// allocation do not land on the user's first request.
    #[wasm_bindgen(js_name = warmUp)]
    pub fn warm_up(&self) -> js_sys::Promise {
        let runner = Rc::clone(&self.runner);
        wasm_bindgen_futures::future_to_promise(async move {
            runner.warm_up().await.map_err(js_error)?;
            Ok(JsValue::UNDEFINED)
        })
    }

    /// `"webgpu"` or `"cpu"`: the backend actually in use.
    #[wasm_bindgen(getter)]
    pub fn backend(&self) -> String {
        self.backend.to_string()
    }

    /// Load the codec calibration (bytes of the server's `/calibration/...` file), which the
    /// `q*` codec settings need. Returns its id as 16 hex digits.
    #[wasm_bindgen(js_name = setCalibration)]
    pub fn set_calibration(&self, bytes: &[u8]) -> Result<String, JsValue> {
        self.runner.set_calibration(bytes).map(|id| format!("{id:016x}")).map_err(js_error)
    }

    /// Run `image` (JPEG or PNG bytes) up to `split` (a boundary name such as `"block5"`;
    /// `"logits"` runs everything locally), coding the features with `codec` (`"f32"`, the
    /// default, or e.g. `"q4"`, `"q2-r16"`); with `stream` true, as the next frame of this
    /// session's camera stream (residuals against the previous frame). With `noise`
    /// (`"gauss:<scale>"` or `"laplace:<scale>"`), that noise is added to the features before
    /// they are coded, drawn from `seed` (pick one at random per request). Resolves to
    /// `{ frame: Uint8Array, delta, stagesMs }` to send, `{ top, stagesMs }` when the split is
    /// `"logits"`, or `{ top, cached: true }` for content already classified with the same
    /// options; `stagesMs` is how long the network's stages took of the run (the rest decoded
    /// the photo and coded the features).
    #[allow(clippy::too_many_arguments)] // the positional arguments of the JS call
    pub fn run(
        &self,
        image: Vec<u8>,
        split: String,
        request_id: f64,
        codec: Option<String>,
        stream: Option<bool>,
        noise: Option<String>,
        seed: Option<f64>,
    ) -> js_sys::Promise {
        let runner = Rc::clone(&self.runner);
        wasm_bindgen_futures::future_to_promise(async move {
            let (split, setting) = split_and_codec(&split, codec.as_deref().unwrap_or("f32"))?;
            let noise = noise
                .map(|n| {
                    n.parse::<split_shared::codec::Noise>().map_err(|e| js::error("bad_option", e))
                })
                .transpose()?
                .map(|n| (n, seed.unwrap_or(0.0) as u64));
            let options = RunOptions { split, setting, stream: stream.unwrap_or(false), noise };
            let (out, stages_ms) = runner
                .run_timed(&image, options, request_id as u64, js::now_ms)
                .await
                .map_err(js_error)?;
            Ok(js::edge_output(&out, stages_ms))
        })
    }

    /// Decode a reply frame like [`decode_reply`], and let the session learn from it: results
    /// fill the content cache, `keyframe_required` restarts the stream with a keyframe.
    #[wasm_bindgen(js_name = acceptReply)]
    pub fn accept_reply(&self, frame: &[u8]) -> Result<JsValue, JsValue> {
        self.runner.accept_reply(frame).map(|r| js::reply(&r)).map_err(js_error)
    }

    /// Add a part of the codec calibration (`/api/info`'s `calibration.parts`: one boundary's
    /// tables); parts of the same calibration accumulate. Returns its id as 16 hex digits.
    #[wasm_bindgen(js_name = addCalibration)]
    pub fn add_calibration(&self, bytes: &[u8]) -> Result<String, JsValue> {
        self.runner.add_calibration(bytes).map(|id| format!("{id:016x}")).map_err(js_error)
    }

    /// Resize the content cache of results (default 256 entries; 0 turns it off).
    #[wasm_bindgen(js_name = setCacheEntries)]
    pub fn set_cache_entries(&self, entries: u32) {
        self.runner.set_cache_entries(entries as usize);
    }

    /// Call `pause()` between the stages of every run from now on and await the Promise it
    /// returns (anything else: no pause that time), or run from end to end again (`null`).
    /// The client pauses runs for a turn of the event loop while a ping is out, so that its
    /// pong is timed within a stage or so of its arrival rather than after the whole run.
    #[wasm_bindgen(js_name = setPause)]
    pub fn set_pause(&self, pause: Option<js_sys::Function>) {
        self.runner.set_pause(pause.map(|f| -> edge::Pause {
            Box::new(move || {
                // A function that throws or returns no promise pauses for nothing.
                let promise: Option<js_sys::Promise> =
                    f.call0(&JsValue::NULL).ok().and_then(|v| v.dyn_into().ok());
                Box::pin(async move {
                    if let Some(p) = promise {
                        let _ = wasm_bindgen_futures::JsFuture::from(p).await;
                    }
                })
            })
        }));
    }

    /// Time this device's edge compute: the network stage by stage on a blank image, `repeats`
    /// times; resolves to `{ names, ms }` with the median cumulative ms from the input to each
    /// boundary (what `AdaptivePlanner.setEdgeTimes` takes).
    #[wasm_bindgen(js_name = profileEdge)]
    pub fn profile_edge(&self, repeats: u32) -> js_sys::Promise {
        let runner = Rc::clone(&self.runner);
        wasm_bindgen_futures::future_to_promise(async move {
            let ms = runner.profile(repeats.max(1) as usize, js::now_ms).await.map_err(js_error)?;
            Ok(js::edge_profile(&ms))
        })
    }

    /// The photo's pooled features (1280 values, the network run to `pool` here): what
    /// `EncryptedClient.classifyFrame` encrypts.
    pub fn pooled(&self, image: Vec<u8>) -> js_sys::Promise {
        let runner = Rc::clone(&self.runner);
        wasm_bindgen_futures::future_to_promise(async move {
            let f = runner.features(&image, Boundary::POOL).await.map_err(js_error)?;
            Ok(js_sys::Float32Array::from(f.values()).into())
        })
    }

    /// Make the stream's next frame a keyframe (call after reconnecting).
    #[wasm_bindgen(js_name = forceKeyframe)]
    pub fn force_keyframe(&self) {
        self.runner.force_keyframe();
    }

    /// Time the codec alone in this browser: run `image` to `split` once, then encode and decode
    /// its features with `codec` `repeats` times. Resolves to `{ bytes, encodeMs, decodeMs }`
    /// (per run).
    #[wasm_bindgen(js_name = benchCodec)]
    pub fn bench_codec(
        &self,
        image: Vec<u8>,
        split: String,
        codec: String,
        repeats: u32,
    ) -> js_sys::Promise {
        let runner = Rc::clone(&self.runner);
        wasm_bindgen_futures::future_to_promise(async move {
            let (split, setting) = split_and_codec(&split, &codec)?;
            let features = runner.features(&image, split).await.map_err(js_error)?;
            let repeats = repeats.max(1);
            runner.with_calibration(|calibration| {
                let mut frame = Vec::new();
                let start = js::now_ms();
                for i in 0..repeats {
                    let f = features
                        .to_frame(setting, EncodeContext::new(calibration))
                        .map_err(js_error)?;
                    frame = Request::Features { id: u64::from(i), frame: f }.to_bytes();
                }
                let encode_ms = (js::now_ms() - start) / f64::from(repeats);
                let start = js::now_ms();
                for _ in 0..repeats {
                    let Ok(Request::Features { frame: f, .. }) = Request::decode(&frame) else {
                        return Err(js::error("internal", "the encoded frame does not decode"));
                    };
                    Features::from_frame(&f, DecodeContext::new(calibration)).map_err(js_error)?;
                }
                let decode_ms = (js::now_ms() - start) / f64::from(repeats);
                Ok(js::codec_bench(frame.len(), encode_ms, decode_ms))
            })
        })
    }
}

/// A cloud-only request: the encoded image goes to the server as-is.
#[wasm_bindgen(js_name = encodeImageRequest)]
pub fn encode_image_request(request_id: f64, image: Vec<u8>) -> Vec<u8> {
    Request::Image { id: request_id as u64, payload: image }.to_bytes()
}

/// A cloud-only request for an image that is already the 224x224 model input (as
/// `encodeUploadJpeg` makes it): the server does not crop it again.
#[wasm_bindgen(js_name = encodeInputRequest)]
pub fn encode_input_request(request_id: f64, image: Vec<u8>) -> Vec<u8> {
    Request::Input { id: request_id as u64, payload: image }.to_bytes()
}

/// The image as a plain app would upload it: decoded, centre-cropped and resized to 224x224 like
/// the model's input, then JPEG-encoded at `quality` (1-100). Adaptive mode sends this for
/// cloud-only requests: what the cost table priced, and no more pixels than the model uses.
#[wasm_bindgen(js_name = encodeUploadJpeg)]
pub fn encode_upload_jpeg(image: &[u8], quality: u8) -> Result<Vec<u8>, JsValue> {
    let img = split_shared::image::preprocess(image).map_err(js_error)?;
    split_shared::image::encode_jpeg(&img, quality).map_err(js_error)
}

/// The same request frame with another id (a request kept across a reload or an outage is
/// sent under a fresh id of the connection it finally goes out on).
#[wasm_bindgen(js_name = withRequestId)]
pub fn with_request_id(frame: &[u8], request_id: f64) -> Result<Vec<u8>, JsValue> {
    let id = request_id as u64;
    let request = match Request::decode(frame).map_err(js_error)? {
        Request::Features { frame, .. } => Request::Features { id, frame },
        Request::Image { payload, .. } => Request::Image { id, payload },
        Request::Input { payload, .. } => Request::Input { id, payload },
        Request::Ping { payload, .. } => Request::Ping { id, payload },
    };
    Ok(request.to_bytes())
}

/// A ping carrying `probe_bytes` of padding (0 for a pure round-trip measurement).
#[wasm_bindgen(js_name = encodePing)]
pub fn encode_ping(request_id: f64, probe_bytes: u32) -> Vec<u8> {
    Request::Ping { id: request_id as u64, payload: vec![0; probe_bytes as usize] }.to_bytes()
}

/// Decode a reply frame to `{ kind: "result", id, from, top, timings }` or
/// `{ kind: "error", id, code, message }`.
#[wasm_bindgen(js_name = decodeReply)]
pub fn decode_reply(frame: &[u8]) -> Result<JsValue, JsValue> {
    Reply::decode(frame).map(|r| js::reply(&r)).map_err(js_error)
}

/// Whether a request refused with the server's error `code` (its name, as `SplitError.code`
/// carries it) may succeed if sent again later (`ErrorCode::is_transient`: busy, rate_limited,
/// internal); false for names not on the wire. The client's retry and fallback rules ask this
/// rather than keep lists of their own.
#[wasm_bindgen(js_name = isTransientError)]
pub fn is_transient_error(code: &str) -> bool {
    ErrorCode::from_name(code).is_some_and(ErrorCode::is_transient)
}

/// Whether sending the same request again can never succeed (`ErrorCode::is_permanent`);
/// false for names not on the wire.
#[wasm_bindgen(js_name = isPermanentError)]
pub fn is_permanent_error(code: &str) -> bool {
    ErrorCode::from_name(code).is_some_and(ErrorCode::is_permanent)
}

/// Check a device group's pipeline route (`shared::group::route`: the stages a request still
/// has to run and who gets the answer), as received from a member or about to be sent: the
/// route as a plain object, or `bad_route` saying what is wrong. The native agent reads routes
/// with the same definition.
#[wasm_bindgen(js_name = parseRoute)]
pub fn parse_route(route: JsValue) -> Result<JsValue, JsValue> {
    let value: serde_json::Value = js::from_object(&route, "bad_route")?;
    let route =
        split_shared::group::Route::from_json(value).map_err(|e| js::error("bad_route", e))?;
    Ok(js::to_object(&route))
}

/// Names of every split boundary in forward order, with shape and cumulative MACs.
#[wasm_bindgen]
pub fn boundaries() -> JsValue {
    js::boundaries()
}

/// The boundary `privacy_floor: "default"` means: the earliest whose features a white-box
/// attacker could not reconstruct into a recognisable photo (docs/privacy.md).
#[wasm_bindgen(js_name = defaultPrivacyFloor)]
pub fn default_privacy_floor() -> String {
    split_shared::model::PRIVACY_FLOOR.name().to_string()
}

/// Share `count` items over a device group's members in proportion to their speed
/// (`shared::group::tasks`): `msPerItem[i]` and `transferMs[i]` describe member i; returns
/// the member index of each item.
#[wasm_bindgen(js_name = planTasks)]
pub fn plan_tasks(count: u32, ms_per_item: Vec<f64>, transfer_ms: Vec<f64>) -> Vec<u32> {
    let workers: Vec<_> = ms_per_item
        .iter()
        .zip(transfer_ms.iter().chain(std::iter::repeat(&0.0)))
        .map(|(ms, t)| split_shared::group::tasks::Worker { ms_per_item: *ms, transfer_ms: *t })
        .collect();
    let (plan, _) = split_shared::group::tasks::assign(count as usize, &workers);
    plan.into_iter().map(|w| w as u32).collect()
}

/// Plan a pipeline across devices (`shared::group::chain`) from the cost table's JSON, the
/// edge profile that gives each stage's share of compute (`"browser-wasm-cpu"`), the codec
/// features travel in, and the devices as JSON: `{ asker, others, privacyFloor, goal }` with
/// each device `{ peer, msPerImage, memoryBytes?, lowPower?, mbps, latencyMs }` and goal
/// `"latency"` or `"throughput"`. Returns `{ stages: [{ peer, from, to, computeMs, sendBytes,
/// sendMs }], latencyMs, periodMs }` with boundary names.
#[wasm_bindgen(js_name = planChain)]
pub fn plan_chain(
    cost_table: &str,
    profile: &str,
    codec: &str,
    request: JsValue,
) -> Result<JsValue, JsValue> {
    planner::plan_chain(cost_table, profile, codec, request)
}

/// Fuse several devices' top lists about one object (`shared::group::fusion`): `views` is an
/// array of `[{ class, prob }]` lists, `rule` `"mean"` or `"confidence"`; returns the fused
/// top 5.
#[wasm_bindgen(js_name = fuseViews)]
pub fn fuse_views(views: JsValue, rule: &str) -> Result<JsValue, JsValue> {
    #[derive(serde::Deserialize)]
    struct Entry {
        class: u16,
        prob: f32,
    }
    let rule: split_shared::group::fusion::Rule =
        rule.parse().map_err(|e: String| js::error("bad_option", e))?;
    let views: Vec<Vec<Entry>> = js::from_object(&views, "bad_option")?;
    let views: Vec<Vec<split_shared::labels::Prediction>> = views
        .into_iter()
        .map(|v| {
            v.into_iter()
                .map(|e| split_shared::labels::Prediction { class: e.class, prob: e.prob })
                .collect()
        })
        .collect();
    let fused = split_shared::group::fusion::fuse(&views, rule, split_shared::labels::TOP_K);
    Ok(js::predictions(&fused).into())
}
