//! WebAssembly module for the browser half of split inference.
//!
//! The WebSocket stays in JavaScript (`web/split-client.js`): the page owns I/O and timing, and
//! this module only computes and frames, so no Rust closures have to outlive a call. From JS:
//!
//! ```js
//! import init, { EdgeSession, encodeImageRequest, decodeReply } from "./pkg/wasm_edge.js";
//! await init();
//! const edge = await EdgeSession.create(weightsBytes, "auto");   // "auto" | "webgpu" | "cpu"
//! const out = await edge.run(imageBytes, "block5", 1);            // { frame } or { top }
//! socket.send(out.frame);
//! const reply = decodeReply(new Uint8Array(event.data));          // { kind: "result", top, ... }
//! ```

mod edge;
mod js;

use std::rc::Rc;

use burn::tensor::Device;
use split_shared::model::Boundary;
use split_shared::protocol::{Reply, Request};
use wasm_bindgen::prelude::*;

pub use edge::{EdgeOutput, EdgeRunner};

/// The model loaded on the best device this browser offers.
#[wasm_bindgen]
pub struct EdgeSession {
    runner: Rc<EdgeRunner>,
    backend: &'static str,
}

fn js_error(e: impl std::fmt::Display) -> JsError {
    JsError::new(&e.to_string())
}

async fn pick_device(backend: &str) -> Result<(Device, &'static str), JsError> {
    match backend {
        "cpu" => Ok((Device::flex(), "cpu")),
        "webgpu" | "auto" => match webgpu_device().await {
            Ok(device) => Ok((device, "webgpu")),
            Err(e) if backend == "auto" => {
                js::warn(&format!("WebGPU unavailable ({e}); using the CPU backend"));
                Ok((Device::flex(), "cpu"))
            }
            Err(e) => Err(JsError::new(&format!("WebGPU was requested but is unavailable: {e}"))),
        },
        other => Err(JsError::new(&format!(
            "unknown backend {other:?}; use \"auto\", \"webgpu\" or \"cpu\""
        ))),
    }
}

#[cfg(target_family = "wasm")]
async fn webgpu_device() -> Result<Device, String> {
    if !js::has_webgpu() {
        return Err(
            "navigator.gpu is missing (browser without WebGPU, or not a secure context)".into()
        );
    }
    Device::wgpu_options().init_async().await.map_err(|e| format!("{e:?}"))
}

#[cfg(not(target_family = "wasm"))]
async fn webgpu_device() -> Result<Device, String> {
    Err("WebGPU exists only in the browser build".into())
}

#[wasm_bindgen]
impl EdgeSession {
    /// Load the weights (the bytes of `/weights/efficientnet-lite0.splw`) on `backend`:
    /// `"auto"` tries WebGPU and falls back to the CPU, `"webgpu"` fails without it, `"cpu"`
    /// never touches the GPU. Runs one warm-up pass.
    pub async fn create(weights: Vec<u8>, backend: String) -> Result<EdgeSession, JsError> {
        let (device, backend) = pick_device(&backend).await?;
        let runner = EdgeRunner::new(&weights, device).map_err(js_error)?;
        runner.warm_up().await.map_err(js_error)?;
        Ok(EdgeSession { runner: Rc::new(runner), backend })
    }

    /// `"webgpu"` or `"cpu"`: the backend actually in use.
    #[wasm_bindgen(getter)]
    pub fn backend(&self) -> String {
        self.backend.to_string()
    }

    /// Run `image` (JPEG or PNG bytes) up to `split` (a boundary name such as `"block5"`;
    /// `"logits"` runs everything locally). Resolves to `{ frame: Uint8Array }` to send, or to
    /// `{ top: [{ class, name, prob }] }` when the split is `"logits"`.
    pub fn run(&self, image: Vec<u8>, split: String, request_id: f64) -> js_sys::Promise {
        let runner = Rc::clone(&self.runner);
        wasm_bindgen_futures::future_to_promise(async move {
            let split: Boundary = split.parse().map_err(|e| JsValue::from(js_error(e)))?;
            let out = runner
                .run(&image, split, request_id as u64)
                .await
                .map_err(|e| JsValue::from(js_error(e)))?;
            Ok(js::edge_output(&out))
        })
    }
}

/// A cloud-only request: the encoded image goes to the server as-is.
#[wasm_bindgen(js_name = encodeImageRequest)]
pub fn encode_image_request(request_id: f64, image: Vec<u8>) -> Vec<u8> {
    Request::Image { id: request_id as u64, payload: image }.to_bytes()
}

/// Decode a reply frame to `{ kind: "result", id, from, top, timings }` or
/// `{ kind: "error", id, code, message }`.
#[wasm_bindgen(js_name = decodeReply)]
pub fn decode_reply(frame: &[u8]) -> Result<JsValue, JsError> {
    Reply::decode(frame).map(|r| js::reply(&r)).map_err(js_error)
}

/// Names of every split boundary in forward order, with shape and cumulative MACs.
#[wasm_bindgen]
pub fn boundaries() -> JsValue {
    js::boundaries()
}
