//! A split chat through a member of the group: the device with the text (the asker) keeps the
//! language model's embedding, its first blocks and the head, and sends its `/llm` frames
//! ([`crate::protocol::LlmFrame`], unchanged) to a member in the relay envelope; the member runs
//! the next blocks on a KV cache of its own and either passes the rows on to the server's `/llm`
//! for the rest of the blocks or runs the rest itself; the replies come back the same way.
//!
//! Just before a conversation's `open`, the asker tells the member where its stage ends, as a
//! `signal`:
//!
//! ```json
//! { "llmStage": { "to": 20 } }
//! ```
//!
//! The member then runs from the open's first block up to block `to` (exclusive), and the
//! server `to..end`; `to` equal to the open's end leaves the server out. Without the signal the
//! member runs the whole range. A member keeps one conversation per asker: a second `open`
//! from the same asker (a reconnect, a new chat) replaces the first. The machine that serves
//! the frames is [`crate::runtime::MemberStage`].

use serde::{Deserialize, Serialize};

/// Where a member's stage of an asker's next conversation ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LlmStage {
    /// One past the last block the member runs.
    pub to: u16,
}

impl LlmStage {
    /// The stage a signal's `llmStage` value describes.
    ///
    /// # Errors
    /// A message saying what is wrong with it.
    pub fn from_json(value: serde_json::Value) -> Result<Self, String> {
        serde_json::from_value(value).map_err(|e| format!("llmStage: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stage_reads_from_its_signal_and_refuses_anything_else() {
        let stage = LlmStage::from_json(serde_json::json!({ "to": 20 })).unwrap();
        assert_eq!(stage, LlmStage { to: 20 });
        assert_eq!(serde_json::to_value(stage).unwrap(), serde_json::json!({ "to": 20 }));
        for bad in [
            serde_json::json!({}),
            serde_json::json!({ "to": -1 }),
            serde_json::json!({ "to": 70000 }),
            serde_json::json!({ "to": 4, "from": 2 }),
            serde_json::json!("20"),
        ] {
            assert!(LlmStage::from_json(bad.clone()).is_err(), "{bad}");
        }
    }
}
