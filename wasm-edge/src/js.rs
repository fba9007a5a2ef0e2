//! Conversions from Rust values to plain JavaScript objects.

use js_sys::{Array, Object, Reflect, Uint8Array};
use split_shared::labels::{Prediction, short_name};
use split_shared::model::boundary_table;
use split_shared::protocol::{NO_GAP, Reply, ServerLoad};
use wasm_bindgen::JsValue;

use crate::edge::EdgeOutput;

pub(crate) fn set(obj: &Object, key: &str, value: impl Into<JsValue>) {
    // Setting a property on a fresh plain object cannot fail.
    let _ = Reflect::set(obj, &JsValue::from_str(key), &value.into());
}

pub fn predictions(top: &[Prediction]) -> Array {
    top.iter()
        .map(|p| {
            let o = Object::new();
            set(&o, "class", p.class);
            set(&o, "name", short_name(p.class as usize));
            set(&o, "prob", p.prob);
            JsValue::from(o)
        })
        .collect()
}

pub fn edge_output(out: &EdgeOutput, stages_ms: f64) -> JsValue {
    let o = Object::new();
    match out {
        EdgeOutput::Local { top, reduced } => {
            set(&o, "top", predictions(top));
            set(&o, "quality", if *reduced { "reduced" } else { "full" });
            set(&o, "stagesMs", stages_ms);
        }
        EdgeOutput::Cached { top } => {
            set(&o, "top", predictions(top));
            set(&o, "cached", true);
        }
        EdgeOutput::Remote { frame, delta } => {
            set(&o, "frame", Uint8Array::from(frame.as_slice()));
            set(&o, "delta", *delta);
            set(&o, "stagesMs", stages_ms);
        }
    }
    o.into()
}

/// `{ top, quality, from }` of an answer finished on the edge.
pub fn local_answer(a: &crate::edge::LocalAnswer) -> JsValue {
    let o = Object::new();
    set(&o, "top", predictions(&a.top));
    set(&o, "quality", if a.reduced { "reduced" } else { "full" });
    set(&o, "from", a.from.name());
    set(&o, "inputSize", a.input_size as u32);
    o.into()
}

fn load_object(load: &ServerLoad) -> Object {
    let l = Object::new();
    set(&l, "queued", load.queued);
    set(&l, "workers", load.workers);
    set(&l, "recentMs", f64::from(load.recent_us) / 1e3);
    set(&l, "price", load.price());
    set(&l, "waitMs", load.expected_wait_ms());
    l
}

pub fn reply(r: &Reply) -> JsValue {
    let o = Object::new();
    set(&o, "id", r.id() as f64);
    match r {
        Reply::Result { from, top, timings, load, .. } => {
            set(&o, "kind", "result");
            // This client speaks EfficientNet-Lite0: the index names one of its boundaries.
            match split_shared::Boundary::from_index(*from) {
                Ok(b) => set(&o, "from", b.name()),
                Err(_) => set(&o, "from", f64::from(*from)),
            }
            set(&o, "top", predictions(top));
            let t = Object::new();
            set(&t, "queueMs", f64::from(timings.queue_us) / 1e3);
            set(&t, "decodeMs", f64::from(timings.decode_us) / 1e3);
            set(&t, "computeMs", f64::from(timings.compute_us) / 1e3);
            set(&t, "cached", timings.cached);
            set(&o, "timings", t);
            set(&o, "load", load_object(load));
        }
        Reply::Pong { received, gap_us, load, .. } => {
            set(&o, "kind", "pong");
            set(&o, "received", *received);
            // Since the frame before the ping reached the server, on its clock (null: none).
            let gap = (*gap_us != NO_GAP).then(|| f64::from(*gap_us) / 1e3);
            set(&o, "gapMs", gap.map_or(JsValue::NULL, JsValue::from));
            set(&o, "load", load_object(load));
        }
        Reply::Error { code, message, .. } => {
            set(&o, "kind", "error");
            set(&o, "code", code.name());
            set(&o, "message", message.as_str());
        }
    }
    o.into()
}

/// `performance.now()` where there is one (window or worker), for codec benchmarks.
pub fn now_ms() -> f64 {
    let performance = Reflect::get(&js_sys::global(), &JsValue::from_str("performance"))
        .unwrap_or(JsValue::UNDEFINED);
    let now = Reflect::get(&performance, &JsValue::from_str("now"))
        .ok()
        .and_then(|f| wasm_bindgen::JsCast::dyn_into::<js_sys::Function>(f).ok());
    match now {
        Some(f) => f.call0(&performance).ok().and_then(|v| v.as_f64()).unwrap_or(0.0),
        None => js_sys::Date::now(),
    }
}

/// `{ names, ms }` for every boundary.
pub fn edge_profile(ms: &[f64]) -> JsValue {
    let o = Object::new();
    let names = boundary_table().iter().take(ms.len()).map(|b| JsValue::from_str(b.name));
    set(&o, "names", names.collect::<Array>());
    set(&o, "ms", ms.iter().map(|m| JsValue::from_f64(*m)).collect::<Array>());
    o.into()
}

/// `{ bytes, encodeMs, decodeMs }`.
pub fn codec_bench(bytes: usize, encode_ms: f64, decode_ms: f64) -> JsValue {
    let o = Object::new();
    set(&o, "bytes", bytes as u32);
    set(&o, "encodeMs", encode_ms);
    set(&o, "decodeMs", decode_ms);
    o.into()
}

pub fn boundaries() -> JsValue {
    boundary_table()
        .iter()
        .map(|b| {
            let o = Object::new();
            set(&o, "name", b.name);
            set(&o, "shape", b.shape.iter().map(|d| JsValue::from(*d as u32)).collect::<Array>());
            set(&o, "cumulativeMacs", b.cumulative_macs as f64);
            set(&o, "bytesF32", (b.numel() * 4) as u32);
            JsValue::from(o)
        })
        .collect::<Array>()
        .into()
}

#[cfg(all(target_family = "wasm", feature = "webgpu"))]
pub fn has_webgpu() -> bool {
    let navigator = Reflect::get(&js_sys::global(), &JsValue::from_str("navigator"))
        .unwrap_or(JsValue::UNDEFINED);
    Reflect::get(&navigator, &JsValue::from_str("gpu"))
        .map(|g| !g.is_undefined() && !g.is_null())
        .unwrap_or(false)
}

pub fn warn(message: &str) {
    #[cfg(target_family = "wasm")]
    web_console("warn", message);
    #[cfg(not(target_family = "wasm"))]
    eprintln!("{message}");
}

/// `console.error(message)` in a browser, stderr elsewhere.
pub fn error_log(message: &str) {
    #[cfg(target_family = "wasm")]
    web_console("error", message);
    #[cfg(not(target_family = "wasm"))]
    eprintln!("{message}");
}

#[cfg(target_family = "wasm")]
fn web_console(level: &str, message: &str) {
    use wasm_bindgen::JsCast;
    let console = Reflect::get(&js_sys::global(), &JsValue::from_str("console"))
        .unwrap_or(JsValue::UNDEFINED);
    if let Ok(f) = Reflect::get(&console, &JsValue::from_str(level))
        && let Ok(f) = f.dyn_into::<js_sys::Function>()
    {
        let _ = f.call1(&console, &JsValue::from_str(message));
    }
}

/// A plain object (or array, number, …) from any serializable value: serde's JSON, parsed by
/// the engine. Callers get objects, not strings to parse again.
pub fn to_object<T: serde::Serialize>(value: &T) -> JsValue {
    serde_json::to_string(value)
        .ok()
        .and_then(|s| js_sys::JSON::parse(&s).ok())
        .unwrap_or(JsValue::NULL)
}

/// A value from a plain object; a `SplitError` with `code` when it does not fit.
pub fn from_object<T: serde::de::DeserializeOwned>(
    value: &JsValue,
    code: &str,
) -> Result<T, JsValue> {
    let text: String =
        js_sys::JSON::stringify(value).map_err(|_| error(code, "not a plain object"))?.into();
    serde_json::from_str(&text).map_err(|e| error(code, e))
}

/// An `Error` named `SplitError` with a stable `code`, as `web/split-client.js` documents every
/// failure to be (the client turns it into its own `SplitError` class).
pub fn error(code: &str, message: impl std::fmt::Display) -> JsValue {
    let e = js_sys::Error::new(&message.to_string());
    e.set_name("SplitError");
    let _ = Reflect::set(&e, &JsValue::from_str("code"), &JsValue::from_str(code));
    e.into()
}

/// The code of a failure from the shared crate: the wire's error code where one applies (so
/// a bad image is `bad_image` whether the browser or the server found it), with names of their
/// own for the failures only the edge has.
pub fn shared_error(e: &split_shared::Error) -> JsValue {
    use split_shared::model::ModelError;
    let code = match e {
        split_shared::Error::Model(ModelError::BadWeights(_) | ModelError::Unreadable { .. }) => {
            "bad_weights"
        }
        split_shared::Error::Model(ModelError::Backend(_)) => "backend",
        split_shared::Error::Model(
            ModelError::UnknownPrecision(_) | ModelError::InputSize { .. },
        ) => "bad_option",
        split_shared::Error::Model(ModelError::StageNotLoaded { .. }) => "weights_missing",
        split_shared::Error::Codec(split_shared::codec::CodecError::BadCalibration(_)) => {
            "bad_calibration"
        }
        other => split_shared::protocol::ErrorCode::of(other).name(),
    };
    error(code, e)
}
