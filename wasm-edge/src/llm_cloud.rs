//! The browser's side of the language model run wholly on the server (cloud-only): the
//! tokenizer and the chat format, and the frames. The server embeds the prompt's token ids,
//! runs every block and the head, and streams the answer token by token (`/llm`, a
//! conversation opened with block 0 and the head); it sees the whole conversation. The
//! tokenizer file (`/llm/tokenizer`) holds the model's metadata and no weights.
//!
//! ```js
//! const cloud = LlmCloud.load(tokenizerBytes, 1024);
//! socket.send(cloud.openFrame());  cloud.acceptOpened(reply);
//! socket.send(cloud.askFrame(0, cloud.chatTokens(JSON.stringify(messages)), 64));
//! // every message: cloud.accept(frame) is a token, or undefined when the answer ended
//! // (cloud.finish() says why); socket.send(cloud.stopFrame()) ends it early.
//! ```

use split_shared::models::smollm2::Config;
use split_shared::protocol::{HeadSampling, LlmFrame, MAX_HIDDEN_ROWS, MODEL_SMOLLM2};
use wasm_bindgen::prelude::*;

use crate::js;
use crate::llm::{ChatFormat, decode, llm_error, sampling};

/// What the client waits for.
#[derive(Clone, Copy, Debug)]
enum Awaiting {
    Nothing,
    Opened {
        id: u64,
    },
    /// The tokens of the generation asked for by request `id`, the next at `position`.
    Tokens {
        id: u64,
        position: u32,
    },
}

/// One cloud-only conversation's client: no weights, only the chat format and the frames.
#[wasm_bindgen]
pub struct LlmCloud {
    chat: ChatFormat,
    layers: u16,
    positions: u32,
    head: HeadSampling,
    next_id: u64,
    awaiting: Awaiting,
    opened: bool,
    finish: Option<&'static str>,
}

#[wasm_bindgen]
impl LlmCloud {
    /// The chat format from a file of the model (`/llm/tokenizer`: its metadata only; any
    /// share or the whole file also does), for conversations of at most `positions` tokens.
    pub fn load(bytes: &[u8], positions: u32) -> Result<LlmCloud, JsValue> {
        let g = split_shared::container::Gguf::parse(bytes).map_err(|e| llm_error(e.into()))?;
        let config = Config::from_gguf(&g).map_err(llm_error)?;
        let tokenizer =
            split_shared::models::smollm2::Tokenizer::from_gguf(&g).map_err(llm_error)?;
        Ok(LlmCloud {
            chat: ChatFormat::new(tokenizer, &g)?,
            layers: config.layers as u16,
            positions: positions.clamp(1, config.context as u32),
            head: HeadSampling::GREEDY,
            next_id: 1,
            awaiting: Awaiting::Nothing,
            opened: false,
            finish: None,
        })
    }

    /// The id of the token that ends an answer.
    #[wasm_bindgen(js_name = endToken)]
    pub fn end_token(&self) -> u32 {
        self.chat.tokenizer.eos
    }

    /// How the server samples, from the next conversation on: greedy when `temperature` is
    /// 0, otherwise temperature and top-p from `seed`.
    #[wasm_bindgen(js_name = setSampling)]
    pub fn set_sampling(&mut self, temperature: f32, top_p: f32, seed: u32) {
        self.head = sampling(temperature, top_p, seed).1;
    }

    /// The token ids of a conversation (a JSON array of `{ role, content }`) and the opening of
    /// the assistant's answer, in the model's chat format.
    #[wasm_bindgen(js_name = chatTokens)]
    pub fn chat_tokens(&self, messages_json: &str) -> Result<Vec<u32>, JsValue> {
        self.chat.chat_tokens(messages_json)
    }

    /// The text of token ids (decode the whole answer so far, not token by token).
    pub fn decode(&self, tokens: &[u32]) -> Result<String, JsValue> {
        self.chat.decode(tokens)
    }

    /// Forget the conversation: the next one opens on a new socket.
    pub fn reset(&mut self) {
        self.awaiting = Awaiting::Nothing;
        self.opened = false;
        self.finish = None;
    }

    /// The frame that opens a conversation with every block and the head on the server.
    #[wasm_bindgen(js_name = openFrame)]
    pub fn open_frame(&mut self) -> Result<Vec<u8>, JsValue> {
        if self.opened || !matches!(self.awaiting, Awaiting::Nothing) {
            return Err(js::error("bad_option", "this conversation is already open"));
        }
        let id = self.take_id();
        self.awaiting = Awaiting::Opened { id };
        let (end, positions, head) = (self.layers, self.positions, Some(self.head));
        Ok(LlmFrame::Open { id, model: MODEL_SMOLLM2, first: 0, end, positions, head }.encode())
    }

    /// The server's answer to [`Self::open_frame`].
    #[wasm_bindgen(js_name = acceptOpened)]
    pub fn accept_opened(&mut self, frame: &[u8]) -> Result<(), JsValue> {
        let Awaiting::Opened { id } = self.awaiting else {
            return Err(js::error("bad_frame", "no conversation is being opened"));
        };
        match decode(frame, id)? {
            LlmFrame::Opened { first: 0, end, head: true, .. } if end == self.layers => {
                self.awaiting = Awaiting::Nothing;
                self.opened = true;
                Ok(())
            }
            other => {
                Err(js::error("bad_frame", format!("not the conversation asked for: {other:?}")))
            }
        }
    }

    /// Ask for an answer of at most `generate` tokens after `tokens` (the prompt, or after a
    /// lost socket the prompt and the answer so far), which start at `position` of the
    /// conversation. Then [`Self::accept`] for every frame until it returns nothing.
    #[wasm_bindgen(js_name = askFrame)]
    pub fn ask_frame(
        &mut self,
        position: u32,
        tokens: &[u32],
        generate: u32,
    ) -> Result<Vec<u8>, JsValue> {
        if !self.opened || !matches!(self.awaiting, Awaiting::Nothing) {
            return Err(js::error("bad_option", "open the conversation, and wait for each answer"));
        }
        if tokens.is_empty() || tokens.len() > MAX_HIDDEN_ROWS as usize {
            return Err(js::error(
                "context",
                format!("{} tokens in one frame; 1 to {MAX_HIDDEN_ROWS}", tokens.len()),
            ));
        }
        let id = self.take_id();
        let next = position + tokens.len() as u32;
        self.awaiting = Awaiting::Tokens { id, position: next };
        self.finish = None;
        Ok(LlmFrame::Tokens { id, position, generate, tokens: tokens.to_vec() }.encode())
    }

    /// The frame that ends the answer being written (its `done` follows the token in hand).
    #[wasm_bindgen(js_name = stopFrame)]
    pub fn stop_frame(&mut self) -> Vec<u8> {
        let id = self.take_id();
        LlmFrame::Stop { id }.encode()
    }

    /// A frame of the answer: its token, or nothing when the answer ended ([`Self::finish`]
    /// says why). The server's errors as `SplitError`s with its codes.
    pub fn accept(&mut self, frame: &[u8]) -> Result<Option<u32>, JsValue> {
        let Awaiting::Tokens { id, position } = self.awaiting else {
            return Err(js::error("bad_frame", "no answer is awaited"));
        };
        match decode(frame, id)? {
            LlmFrame::Token { position: p, token, .. } if p == position => {
                self.awaiting = Awaiting::Tokens { id, position: position + 1 };
                Ok(Some(token))
            }
            LlmFrame::Done { finish, .. } => {
                self.awaiting = Awaiting::Nothing;
                self.finish = Some(finish.name());
                Ok(None)
            }
            other => Err(js::error("bad_frame", format!("not the answer awaited: {other:?}"))),
        }
    }

    /// Why the last answer ended: "end" (the model's end token), "count" (as many as asked),
    /// "stopped" or "positions"; nothing while it is written.
    pub fn finish(&self) -> Option<String> {
        self.finish.map(String::from)
    }
}

impl LlmCloud {
    fn take_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }
}
