//! The encrypted classifier's device half (`/encrypted`, `split_shared::encrypted`): the keys
//! are made and kept here, a photo's pooled features encrypted here, the server's answer
//! decrypted here. The socket stays in JavaScript, as for the other frames.

use split_shared::encrypted::{DeviceKeys, EncryptedError, logits_of, quantize_features};
use split_shared::labels::{TOP_K, top_k};
use split_shared::protocol::{EncryptedFrame, PARAMETERS_ID};
use wasm_bindgen::prelude::*;

use crate::js;

fn scheme_error(e: EncryptedError) -> JsValue {
    let code = match e {
        EncryptedError::WrongLength { .. } => "bad_option",
        EncryptedError::Malformed { .. } => "malformed",
        _ => "internal",
    };
    js::error(code, e)
}

/// One session's keys (the secret one never leaves this object) and how to read its answers.
#[wasm_bindgen]
pub struct EncryptedClient {
    keys: DeviceKeys,
    weight_step: f32,
}

#[wasm_bindgen]
impl EncryptedClient {
    /// Fresh keys. `weightStep`: the classifier's weight step, as `/api/info`'s
    /// `encrypted.weight_step` publishes it (it scales the integer logits back to the
    /// network's, for the probabilities).
    #[wasm_bindgen(constructor)]
    pub fn new(weight_step: f32) -> EncryptedClient {
        EncryptedClient { keys: DeviceKeys::generate(&mut rand::rng()), weight_step }
    }

    /// The key frame, sent once per socket (335 kB).
    #[wasm_bindgen(js_name = keyFrame)]
    pub fn key_frame(&self, request_id: f64) -> Result<Vec<u8>, JsValue> {
        let key = self.keys.evaluation_key(&mut rand::rng()).map_err(scheme_error)?;
        Ok(EncryptedFrame::Key { id: request_id as u64, parameters: PARAMETERS_ID, key }.encode())
    }

    /// The classify frame of a photo's pooled features (1280 values, `EdgeSession.pooled`):
    /// quantized, then encrypted (670 kB).
    #[wasm_bindgen(js_name = classifyFrame)]
    pub fn classify_frame(&self, request_id: f64, pooled: &[f32]) -> Result<Vec<u8>, JsValue> {
        let parts = self
            .keys
            .encrypt(&quantize_features(pooled), &mut rand::rng())
            .map_err(scheme_error)?;
        Ok(EncryptedFrame::Classify { id: request_id as u64, parameters: PARAMETERS_ID, parts }
            .encode())
    }

    /// A reply of the socket: `{ kind: "accepted", id }` for the key, `{ kind: "answer", id,
    /// top, queueMs, serverMs }` (decrypted here; the server's wait and evaluation) for a photo; a refusal throws a `SplitError` with its code
    /// (`no_key`, `evicted`, `key_budget`, `busy`, …).
    #[wasm_bindgen(js_name = readReply)]
    pub fn read_reply(&self, frame: &[u8]) -> Result<JsValue, JsValue> {
        let frame = EncryptedFrame::decode(frame).map_err(|e| js::error("malformed", e))?;
        let o = js_sys::Object::new();
        js::set(&o, "id", frame.id() as f64);
        match frame {
            EncryptedFrame::KeyAccepted { .. } => js::set(&o, "kind", "accepted"),
            EncryptedFrame::Answer { ciphertext, queue_us, server_us, .. } => {
                let integer = self.keys.decrypt(&ciphertext).map_err(scheme_error)?;
                let logits = logits_of(&integer, self.weight_step);
                js::set(&o, "kind", "answer");
                js::set(&o, "top", js::predictions(&top_k(&logits, TOP_K)));
                js::set(&o, "queueMs", f64::from(queue_us) / 1e3);
                js::set(&o, "serverMs", f64::from(server_us) / 1e3);
            }
            EncryptedFrame::Error { code, message, .. } => {
                return Err(js::error(code.name(), message));
            }
            other => return Err(js::error("malformed", format!("a request frame: {other:?}"))),
        }
        Ok(o.into())
    }
}
