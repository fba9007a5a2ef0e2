//! A browser as a member of a device group that runs the middle blocks of other members' split
//! chats (docs/llm.md, "Through a device group"): the shared crate's [`MemberStage`], one per
//! asker, on a share of the model (`/llm/edge/<n>`: blocks `0..n`, enough for the stages it
//! takes). The group's code in JavaScript (`web/client/group.js`) carries the frames: the
//! askers' in, the replies back, and the rows on to the server's `/llm` over sockets it opens.
//!
//! ```js
//! const member = LlmMember.load(shareBytes, 1024);
//! const a = member.handle(asker, frame, to);   // { kind: "reply" | "open" | "forward" | "nothing", frame, opened }
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use js_sys::{Object, Uint8Array};
use split_shared::models::smollm2::Smollm2;
use split_shared::protocol::{LlmErrorCode, LlmFrame};
use split_shared::runtime::{MemberStage, StageAction};
use wasm_bindgen::prelude::*;

use crate::js;

/// The share's model and the askers' conversations on it.
#[wasm_bindgen]
pub struct LlmMember {
    model: Arc<Smollm2>,
    positions: u32,
    stages: HashMap<u32, MemberStage<Smollm2>>,
}

fn bytes(f: &LlmFrame) -> Uint8Array {
    Uint8Array::from(f.encode().as_slice())
}

#[wasm_bindgen]
impl LlmMember {
    /// The share (a GGUF file holding blocks `0..n`), each asker's conversation at most
    /// `positions` long. `bad_weights` when the file is not a model this reads.
    pub fn load(share: &[u8], positions: u32) -> Result<LlmMember, JsValue> {
        let (model, _) =
            Smollm2::load(share).map_err(|e| js::error("bad_weights", e.to_string()))?;
        Ok(LlmMember { model: Arc::new(model), positions, stages: HashMap::new() })
    }

    /// Blocks the share holds (`0..blocks`): a stage ends there at the latest.
    pub fn blocks(&self) -> u32 {
        self.model.blocks().end as u32
    }

    /// Serve one frame from member `asker`; `to` is where its last `llmStage` signal ended this
    /// member's stage (taken by an open). What to do: `{ kind: "reply", frame }` (to the
    /// asker), `{ kind: "open", frame, opened }` (open the server's part with `frame`, then
    /// answer the asker `opened`, or with the server's refusal), `{ kind: "forward", frame }`
    /// (to the server; its reply goes to the asker as it is), `{ kind: "nothing" }`.
    pub fn handle(&mut self, asker: u32, frame: &[u8], to: Option<u16>) -> JsValue {
        let (model, positions) = (&self.model, self.positions);
        let stage =
            self.stages.entry(asker).or_insert_with(|| MemberStage::new(model.clone(), positions));
        let o = Object::new();
        match stage.handle(frame, to) {
            StageAction::Reply(f) => {
                js::set(&o, "kind", "reply");
                js::set(&o, "frame", bytes(&f));
            }
            StageAction::OpenUpstream { upstream, opened } => {
                js::set(&o, "kind", "open");
                js::set(&o, "frame", bytes(&upstream));
                js::set(&o, "opened", bytes(&opened));
            }
            StageAction::Forward(f) => {
                js::set(&o, "kind", "forward");
                js::set(&o, "frame", bytes(&f));
            }
            StageAction::Nothing => js::set(&o, "kind", "nothing"),
        }
        o.into()
    }

    /// End `asker`'s conversation (it left, or the server's part was lost).
    pub fn forget(&mut self, asker: u32) {
        self.stages.remove(&asker);
    }

    /// The refusal an asker gets when the server's part of its conversation is lost: open
    /// again and send the kept hidden states again (the agent's too).
    #[wasm_bindgen(js_name = lostFrame)]
    pub fn lost_frame() -> Uint8Array {
        let message = "the server's part of this conversation was lost; open it again and send \
                       the kept hidden states again";
        bytes(&LlmFrame::Error { id: 0, code: LlmErrorCode::Evicted, message: message.into() })
    }
}
