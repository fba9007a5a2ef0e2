//! The browser's side of the language model's U-shaped split: the tokenizer, the embedding,
//! the first blocks with their KV cache, the final norm, the tied output projection and the
//! sampler. The server runs the blocks between (`/llm`); only hidden states cross, so the text
//! and the token ids stay here. The socket stays in JavaScript (`web/client/chat-worker.js`),
//! as the image path's does: this only computes and frames.
//!
//! ```js
//! const edge = LlmEdge.load(shareBytes, 512);      // the GGUF share from /llm/edge/<blocks>
//! socket.send(edge.openFrame());                   // server: blocks edge.blocks()..edge.layers()
//! edge.acceptOpened(reply);
//! socket.send(edge.send(edge.chatTokens(JSON.stringify([{ role: "user", content: "Hi" }]))));
//! let token = edge.acceptReply(reply);             // the next token; send([token]) for the one after
//! ```
//!
//! Hidden states cross coded ([`HiddenCodec`], [`DEFAULT_HIDDEN_CODEC`] unless `setCodec` says
//! otherwise; the server answers in the encoding it was sent). With `setServerHead(true)` the
//! split is plain: the server also runs the final norm, the output projection and the sampler
//! and answers each frame with the next token (it then sees the answer's tokens, not the
//! prompt's); cloud-only is [`crate::llm_cloud::LlmCloud`]. The edge keeps the hidden states
//! it sent, as the server decoded them: when the socket drops mid-answer, `reopenFrame` opens a
//! new conversation and `resendFrame` sends them again (in frames of at most
//! [`MAX_HIDDEN_ROWS`] positions), so the server rebuilds its blocks' cache and the answer goes
//! on where it stopped.

use std::collections::VecDeque;

use split_shared::codec::{DEFAULT_HIDDEN_CODEC, HiddenCodec};
use split_shared::models::smollm2::{
    ChatTemplate, KvCache, LlmError, Message, Sampler, Sampling, Smollm2, Tokenizer,
};
use split_shared::protocol::{HeadSampling, LlmFrame, MAX_HIDDEN_ROWS, MODEL_SMOLLM2};
use split_shared::runtime::SequenceError;
use wasm_bindgen::prelude::*;

use crate::js;

/// Blocks the chat keeps in the browser when asked for a privacy floor without a number, and
/// by default: the fewest after which no measured attack names more than 5% of a prompt's
/// tokens from what the server receives (docs/privacy.md).
#[wasm_bindgen(js_name = defaultChatPrivacyFloor)]
pub fn default_chat_privacy_floor() -> u32 {
    split_shared::models::smollm2::DEFAULT_CHAT_PRIVACY_FLOOR as u32
}

/// The refusal a browser member of a device group that did not join with `llm: true` answers
/// a split chat's request frame with, or `undefined` for anything else, a reply included
/// (refusing a refusal would never end).
#[wasm_bindgen(js_name = llmRefusal)]
pub fn llm_refusal(frame: &[u8]) -> Option<Vec<u8>> {
    let id = split_shared::protocol::peek_llm_id(frame)?;
    let request = matches!(
        LlmFrame::decode(frame),
        Ok(LlmFrame::Open { .. }
            | LlmFrame::Hidden { reply: false, .. }
            | LlmFrame::Tokens { .. }
            | LlmFrame::Stop { .. })
    );
    let message = "this member runs no language model blocks (it joined without llm: true)";
    request.then(|| {
        let code = split_shared::protocol::LlmErrorCode::UnknownModel;
        LlmFrame::Error { id, code, message: message.into() }.encode()
    })
}

/// The chat's placement planner ([`split_shared::plan::plan_llm`]) for `chat-worker.js`:
/// `request` is `{ shape, edge, server, link, work, limits, blocks }` (each as
/// `split_shared::plan` names its fields, snake_case as `/api/info` writes them; `blocks`: the
/// edge blocks each split may keep). Returns `{ chosen, ranked, refused }`, estimates in
/// camelCase; `no_placement` when the privacy floor and the memory budget leave nothing.
#[wasm_bindgen(js_name = planChat)]
pub fn plan_chat(request: JsValue) -> Result<JsValue, JsValue> {
    use split_shared::plan::{
        LlmLimits, LlmLink, LlmShape, LlmSideCosts, LlmWorkload, llm_candidates, plan_llm,
    };
    #[derive(serde::Deserialize)]
    struct Request {
        shape: LlmShape,
        edge: LlmSideCosts,
        server: LlmSideCosts,
        link: LlmLink,
        work: LlmWorkload,
        limits: LlmLimits,
        blocks: Vec<usize>,
    }
    let r: Request = js::from_object(&request, "bad_option")?;
    let candidates = llm_candidates(&r.blocks);
    plan_llm(&r.shape, &r.edge, &r.server, &r.link, &r.work, &r.limits, &candidates)
        .map(|plan| js::to_object(&plan))
        .map_err(|e| js::error("no_placement", e))
}

/// Bytes of one hidden state of `width` values in the codec named (the module's default when
/// none): what each position costs on the wire each way.
#[wasm_bindgen(js_name = hiddenRowBytes)]
pub fn hidden_row_bytes(codec: Option<String>, width: u32) -> Result<u32, JsValue> {
    let codec = match codec {
        Some(name) => name.parse::<HiddenCodec>().map_err(|e| js::error("bad_option", e))?,
        None => DEFAULT_HIDDEN_CODEC,
    };
    Ok(codec.row_bytes(width as usize) as u32)
}

/// A failure of the language model as a coded `SplitError`.
pub(crate) fn llm_error(e: LlmError) -> JsValue {
    let code = match e {
        LlmError::Gguf(_)
        | LlmError::Missing(_)
        | LlmError::Metadata { .. }
        | LlmError::Tensor { .. } => "bad_weights",
        LlmError::Step(SequenceError::Context { .. }) => "context",
        LlmError::Step(_) | LlmError::Shape(_) => "bad_frame",
    };
    js::error(code, e)
}

/// The model's chat format: its tokenizer and chat template, on both kinds of client.
pub(crate) struct ChatFormat {
    pub(crate) tokenizer: Tokenizer,
    template: ChatTemplate,
}

impl ChatFormat {
    pub(crate) fn new(
        tokenizer: Tokenizer,
        g: &split_shared::container::Gguf,
    ) -> Result<Self, JsValue> {
        Ok(ChatFormat { tokenizer, template: ChatTemplate::from_gguf(g).map_err(llm_error)? })
    }

    /// The token ids of a conversation (a JSON array of `{ role, content }`) and the opening
    /// of the assistant's answer.
    pub(crate) fn chat_tokens(&self, messages_json: &str) -> Result<Vec<u32>, JsValue> {
        #[derive(serde::Deserialize)]
        struct In {
            role: String,
            content: String,
        }
        let messages: Vec<In> = serde_json::from_str(messages_json)
            .map_err(|e| js::error("bad_option", format!("messages: {e}")))?;
        if let Some(m) =
            messages.iter().find(|m| !["system", "user", "assistant"].contains(&m.role.as_str()))
        {
            return Err(js::error("bad_option", format!("unknown role {:?}", m.role)));
        }
        let messages: Vec<Message> =
            messages.into_iter().map(|m| Message { role: m.role, content: m.content }).collect();
        self.template.encode(&self.tokenizer, &messages).map_err(llm_error)
    }

    pub(crate) fn decode(&self, tokens: &[u32]) -> Result<String, JsValue> {
        self.tokenizer.decode(tokens).map_err(llm_error)
    }
}

/// How a client asks the server to sample: `temperature` 0 is greedy.
pub(crate) fn sampling(temperature: f32, top_p: f32, seed: u32) -> (Sampling, HeadSampling) {
    if temperature <= 0.0 || !temperature.is_finite() {
        (Sampling::Greedy, HeadSampling::GREEDY)
    } else {
        let seed = u64::from(seed);
        (Sampling::TopP { temperature, top_p, seed }, HeadSampling { temperature, top_p, seed })
    }
}

/// A reply the edge waits for from the server.
#[derive(Clone, Copy, Debug)]
enum Awaiting {
    /// The `opened` reply.
    Opened { id: u64 },
    /// The hidden states of `rows` positions from `position` on (`last`: the reply whose last
    /// row gives the next token; a resent frame before the last is only checked).
    Hidden { id: u64, position: u32, rows: u32, last: bool },
}

/// One conversation's edge: the model's share in this browser and the cache of its blocks.
#[wasm_bindgen]
pub struct LlmEdge {
    model: Smollm2,
    chat: ChatFormat,
    cache: KvCache,
    positions: u32,
    sampler: Sampler,
    /// What the server is asked for when it runs the head.
    head_sampling: HeadSampling,
    /// Whether the server runs the head (plain split): its replies are tokens.
    server_head: bool,
    next_id: u64,
    /// The replies awaited, oldest first: one at a time, except for a prompt sent in parts.
    awaiting: VecDeque<Awaiting>,
    opened: bool,
    /// How hidden states cross.
    codec: HiddenCodec,
    /// The hidden states sent to the server, every position of the conversation
    /// (`[positions, width]`) as the server decoded them, to send again after a reconnect.
    sent: Vec<f32>,
    /// Positions of `sent` already sent again since [`Self::reopen_frame`].
    resent: usize,
    /// Most positions a resent frame holds (a direct channel to a group member takes smaller
    /// messages than the server's socket).
    resend_rows: usize,
    /// Whether a resend is under way (from `reopenFrame` until its last reply).
    resending: bool,
    /// Whether the last frame sent ended its input (its reply gives a token): a resend ends as
    /// it did.
    sent_last: bool,
}

#[wasm_bindgen]
impl LlmEdge {
    /// The model's share from a GGUF file (`/llm/edge/<blocks>`, or the whole file), with a
    /// conversation of at most `positions` tokens. `bad_weights` when the file is not a model
    /// this reads.
    pub fn load(bytes: &[u8], positions: u32) -> Result<LlmEdge, JsValue> {
        let g = split_shared::container::Gguf::parse(bytes).map_err(|e| llm_error(e.into()))?;
        let (model, tokenizer) = Smollm2::load_parsed(&g).map_err(llm_error)?;
        let chat = ChatFormat::new(tokenizer, &g)?;
        let held = model.blocks();
        if held.start != 0 {
            return Err(js::error(
                "bad_weights",
                format!("the edge runs the first blocks; this file holds blocks {held:?}"),
            ));
        }
        let positions = positions.clamp(1, model.config.context as u32);
        let cache = KvCache::new(&model.config, held, positions as usize);
        Ok(LlmEdge {
            model,
            chat,
            cache,
            positions,
            sampler: Sampler::new(Sampling::Greedy),
            head_sampling: HeadSampling::GREEDY,
            server_head: false,
            next_id: 1,
            awaiting: VecDeque::new(),
            opened: false,
            codec: DEFAULT_HIDDEN_CODEC,
            sent: Vec::new(),
            resent: 0,
            resend_rows: MAX_HIDDEN_ROWS as usize,
            resending: false,
            sent_last: true,
        })
    }

    /// Blocks this edge runs (`0..blocks`).
    pub fn blocks(&self) -> u32 {
        self.model.blocks().end as u32
    }

    /// Blocks in the model (the server runs `blocks()..layers()`).
    pub fn layers(&self) -> u32 {
        self.model.config.layers as u32
    }

    /// Whether this edge holds every block (edge-only: [`Self::run_local`], no server).
    #[wasm_bindgen(js_name = isWhole)]
    pub fn is_whole(&self) -> bool {
        self.model.blocks().end == self.model.config.layers
    }

    /// What a block and the head cost this browser (`{ block_token_ms, block_prefill_ms,
    /// head_ms }`, timed on the share's own weights: about a tenth of a second), for the
    /// placement planner's next choice.
    #[wasm_bindgen(js_name = measureCosts)]
    pub fn measure_costs(&self) -> Result<JsValue, JsValue> {
        split_shared::models::smollm2::measure_costs(&self.model, &js::now_ms)
            .map(|costs| js::to_object(&costs))
            .map_err(llm_error)
    }

    /// Bytes the weights hold in memory (quantized as in the file).
    #[wasm_bindgen(js_name = weightBytes)]
    pub fn weight_bytes(&self) -> f64 {
        self.model.weight_bytes() as f64
    }

    /// Values per hidden state.
    pub fn width(&self) -> u32 {
        self.model.config.dim as u32
    }

    /// How hidden states cross: `f32`, `f16`, `bf16`, `q8` or `q8o` (docs/llm.md).
    pub fn codec(&self) -> String {
        self.codec.name().into()
    }

    /// Send the kept hidden states again in frames of at most `rows` positions (1 to
    /// [`MAX_HIDDEN_ROWS`], the default): what a direct channel's messages hold.
    #[wasm_bindgen(js_name = setResendRows)]
    pub fn set_resend_rows(&mut self, rows: u32) {
        self.resend_rows = rows.clamp(1, MAX_HIDDEN_ROWS) as usize;
    }

    /// Code hidden states with `name` from the next conversation on (`bad_option` for an
    /// unknown name, or while a conversation is open: its kept states are in the old one).
    #[wasm_bindgen(js_name = setCodec)]
    pub fn set_codec(&mut self, name: &str) -> Result<(), JsValue> {
        let codec = name.parse().map_err(|e| js::error("bad_option", e))?;
        if self.opened && codec != self.codec {
            return Err(js::error("bad_option", "the conversation is open: reset it first"));
        }
        self.codec = codec;
        Ok(())
    }

    /// Bytes one position's hidden state takes on the wire, each way.
    #[wasm_bindgen(js_name = rowBytes)]
    pub fn row_bytes(&self) -> u32 {
        self.codec.row_bytes(self.width() as usize) as u32
    }

    /// Positions held (the prompt and the tokens generated so far).
    pub fn position(&self) -> u32 {
        self.cache.len() as u32
    }

    /// The id of the token that ends an answer.
    #[wasm_bindgen(js_name = endToken)]
    pub fn end_token(&self) -> u32 {
        self.chat.tokenizer.eos
    }

    /// Greedy when `temperature` is 0, otherwise temperature and top-p sampling from `seed`
    /// (on the server with its head: from the next conversation on).
    #[wasm_bindgen(js_name = setSampling)]
    pub fn set_sampling(&mut self, temperature: f32, top_p: f32, seed: u32) {
        let (here, there) = sampling(temperature, top_p, seed);
        self.sampler = Sampler::new(here);
        self.head_sampling = there;
    }

    /// Whether the server runs the head and samples (plain split; it then learns the answer's
    /// tokens) from the next conversation on. `bad_option` while one is open.
    #[wasm_bindgen(js_name = setServerHead)]
    pub fn set_server_head(&mut self, on: bool) -> Result<(), JsValue> {
        if self.opened && on != self.server_head {
            return Err(js::error("bad_option", "the conversation is open: reset it first"));
        }
        self.server_head = on;
        Ok(())
    }

    /// Whether the server runs the head ([`Self::set_server_head`]).
    #[wasm_bindgen(js_name = serverHead)]
    pub fn server_head(&self) -> bool {
        self.server_head
    }

    /// The token ids of a conversation (a JSON array of `{ role, content }`) and the opening of
    /// the assistant's answer, in the model's chat format.
    #[wasm_bindgen(js_name = chatTokens)]
    pub fn chat_tokens(&self, messages_json: &str) -> Result<Vec<u32>, JsValue> {
        self.chat.chat_tokens(messages_json)
    }

    /// The text of token ids (UTF-8 split across tokens is completed by later ones: decode
    /// the whole answer so far, not token by token).
    pub fn decode(&self, tokens: &[u32]) -> Result<String, JsValue> {
        self.chat.decode(tokens)
    }

    /// The frame that opens the conversation on the server: blocks `blocks()..layers()`, the
    /// positions of this edge's cache.
    #[wasm_bindgen(js_name = openFrame)]
    pub fn open_frame(&mut self) -> Result<Vec<u8>, JsValue> {
        if self.opened || !self.awaiting.is_empty() {
            return Err(js::error("bad_option", "this conversation is already open"));
        }
        if self.is_whole() {
            return Err(js::error("bad_option", "this edge holds the whole model: runLocal"));
        }
        let id = self.take_id();
        self.awaiting.push_back(Awaiting::Opened { id });
        Ok(LlmFrame::Open {
            id,
            model: MODEL_SMOLLM2,
            first: self.blocks() as u16,
            end: self.layers() as u16,
            positions: self.positions,
            head: self.server_head.then_some(self.head_sampling),
        }
        .encode())
    }

    /// The server's answer to [`Self::open_frame`]; its error as a `SplitError` with the
    /// server's code.
    #[wasm_bindgen(js_name = acceptOpened)]
    pub fn accept_opened(&mut self, frame: &[u8]) -> Result<(), JsValue> {
        let Some(&Awaiting::Opened { id }) = self.awaiting.front() else {
            return Err(js::error("bad_frame", "no conversation is being opened"));
        };
        match decode(frame, id)? {
            LlmFrame::Opened { first, end, width, head, .. }
                if u32::from(first) == self.blocks()
                    && u32::from(end) == self.layers()
                    && width == self.width()
                    && head == self.server_head =>
            {
                self.awaiting.pop_front();
                self.opened = true;
                Ok(())
            }
            other => {
                Err(js::error("bad_frame", format!("not the conversation asked for: {other:?}")))
            }
        }
    }

    /// Embed `tokens` (the prompt, or the last token generated), run this edge's blocks on
    /// them, and frame the hidden states for the server.
    pub fn send(&mut self, tokens: &[u32]) -> Result<Vec<u8>, JsValue> {
        if !self.opened || !self.awaiting.is_empty() {
            return Err(js::error("bad_option", "open the conversation, and wait for each reply"));
        }
        self.hidden_frame(tokens, true)
    }

    /// A prompt in parts, each framed as soon as this edge has run its blocks on it, so that
    /// the server's blocks work on one part while these compute the next: [`Self::send`]
    /// without waiting for the replies of the parts before. Only the `last` part's reply gives
    /// the next token ([`Self::accept_reply`] takes the replies in order). The U-shaped split
    /// only: a server that runs the head would sample after every part.
    #[wasm_bindgen(js_name = sendPart)]
    pub fn send_part(&mut self, tokens: &[u32], last: bool) -> Result<Vec<u8>, JsValue> {
        if self.server_head {
            return Err(js::error(
                "bad_option",
                "a prompt in parts needs the output layer here (the U-shaped split)",
            ));
        }
        let after_last = self
            .awaiting
            .iter()
            .any(|a| matches!(a, Awaiting::Opened { .. } | Awaiting::Hidden { last: true, .. }));
        if !self.opened || after_last {
            return Err(js::error(
                "bad_option",
                "open the conversation; after a last part, wait for its reply",
            ));
        }
        self.hidden_frame(tokens, last)
    }

    /// After the socket dropped: the frame that opens the conversation again on a new one.
    /// Then [`Self::accept_opened`], then [`Self::resend_frame`] until it returns nothing.
    #[wasm_bindgen(js_name = reopenFrame)]
    pub fn reopen_frame(&mut self) -> Result<Vec<u8>, JsValue> {
        if self.sent.is_empty() {
            return Err(js::error("bad_option", "nothing was sent: open the conversation instead"));
        }
        self.opened = false;
        self.awaiting.clear();
        self.resent = 0;
        self.resending = true;
        self.open_frame()
    }

    /// The next frame of kept hidden states for the reopened conversation, or nothing when all
    /// are sent again. Each reply goes to [`Self::accept_reply`]; the last one's gives the
    /// next token, as the lost reply would have.
    #[wasm_bindgen(js_name = resendFrame)]
    pub fn resend_frame(&mut self) -> Result<Option<Vec<u8>>, JsValue> {
        if !self.resending || !self.opened || !self.awaiting.is_empty() {
            return Ok(None);
        }
        let width = self.width() as usize;
        let total = self.sent.len() / width;
        let rows = (total - self.resent).min(self.resend_rows);
        let position = self.resent as u32;
        let values = self.sent[self.resent * width..(self.resent + rows) * width].to_vec();
        self.resent += rows;
        let id = self.take_id();
        let last = self.resent == total && self.sent_last;
        self.awaiting.push_back(Awaiting::Hidden { id, position, rows: rows as u32, last });
        let (width, codec) = (width as u32, self.codec);
        Ok(Some(LlmFrame::Hidden { id, reply: false, position, width, codec, values }.encode()))
    }

    /// The server's reply to the oldest frame not answered yet ([`Self::send`],
    /// [`Self::send_part`], [`Self::resend_frame`]): the next token, chosen here from the
    /// hidden states' last position, or by the server with its head; nothing for a part or a
    /// resent frame before the last.
    #[wasm_bindgen(js_name = acceptReply)]
    pub fn accept_reply(&mut self, frame: &[u8]) -> Result<Option<u32>, JsValue> {
        let Some(&Awaiting::Hidden { id, position: sent, rows, last }) = self.awaiting.front()
        else {
            return Err(js::error("bad_frame", "no reply is awaited"));
        };
        let width = self.width();
        let next = match decode(frame, id)? {
            LlmFrame::Hidden { reply: true, position, width: w, codec, values, .. }
                if codec == self.codec && !self.server_head =>
            {
                // One row back: the state of the last position sent.
                if position != sent + rows - 1 || w != width || values.len() != width as usize {
                    return Err(js::error(
                        "bad_frame",
                        format!(
                            "{} values at position {position}, width {w}: not the last of the {rows} rows sent at {sent}",
                            values.len()
                        ),
                    ));
                }
                Next::Hidden(values)
            }
            LlmFrame::Token { position, token, .. } if self.server_head => {
                if position != sent + rows {
                    return Err(js::error(
                        "bad_frame",
                        format!(
                            "a token for position {position}, after {rows} rows sent at {sent}"
                        ),
                    ));
                }
                Next::Token(token)
            }
            other => {
                return Err(js::error("bad_frame", format!("not the reply awaited: {other:?}")));
            }
        };
        self.awaiting.pop_front();
        if self.resending
            && self.awaiting.is_empty()
            && self.resent * width as usize == self.sent.len()
        {
            self.resending = false;
        }
        if !last {
            return Ok(None);
        }
        match next {
            Next::Hidden(values) => self.next_token(&values).map(Some),
            Next::Token(token) => Ok(Some(token)),
        }
    }

    /// Forget the conversation (this edge's cache, the server's side of it): the next one
    /// starts at position 0, with [`Self::open_frame`] on a new socket when split.
    pub fn reset(&mut self) {
        self.cache.truncate(0);
        self.awaiting.clear();
        self.opened = false;
        self.sent.clear();
        self.resending = false;
        self.sent_last = true;
    }

    /// Edge-only: run every block here on `tokens` and return the next token.
    #[wasm_bindgen(js_name = runLocal)]
    pub fn run_local(&mut self, tokens: &[u32]) -> Result<u32, JsValue> {
        if !self.is_whole() {
            return Err(js::error(
                "bad_option",
                format!(
                    "this edge holds blocks 0..{} of {}: send to the server",
                    self.blocks(),
                    self.layers()
                ),
            ));
        }
        let hidden = self.run_edge_blocks(tokens)?;
        self.next_token(&hidden)
    }
}

/// What a reply gives: hidden states to finish here, or the server's token.
enum Next {
    Hidden(Vec<f32>),
    Token(u32),
}

impl LlmEdge {
    /// Run this edge's blocks on `tokens` and frame their hidden states; the reply awaited
    /// after those already awaited.
    fn hidden_frame(&mut self, tokens: &[u32], last: bool) -> Result<Vec<u8>, JsValue> {
        if self.resending {
            return Err(js::error("bad_option", "a resend is under way: resendFrame"));
        }
        if tokens.len() > MAX_HIDDEN_ROWS as usize {
            return Err(js::error(
                "context",
                format!("{} tokens in one frame; at most {MAX_HIDDEN_ROWS}", tokens.len()),
            ));
        }
        let position = self.cache.len() as u32;
        let hidden = self.run_edge_blocks(tokens)?;
        let id = self.take_id();
        let rows = tokens.len() as u32;
        let (width, codec) = (self.width(), self.codec);
        let frame = LlmFrame::Hidden { id, reply: false, position, width, codec, values: hidden };
        let bytes = frame.encode();
        // Kept as the server will decode them, so that a resend gives it the same rows.
        match LlmFrame::decode(&bytes) {
            Ok(LlmFrame::Hidden { values, .. }) => self.sent.extend_from_slice(&values),
            other => return Err(js::error("bad_frame", format!("own frame: {other:?}"))),
        }
        self.awaiting.push_back(Awaiting::Hidden { id, position, rows, last });
        self.sent_last = last;
        Ok(bytes)
    }

    fn take_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    fn run_edge_blocks(&mut self, tokens: &[u32]) -> Result<Vec<f32>, JsValue> {
        if tokens.is_empty() {
            return Err(js::error("bad_option", "no tokens"));
        }
        let mut hidden = self.model.embed(tokens).map_err(llm_error)?;
        self.model
            .forward_layers(self.model.blocks(), &mut hidden, &mut self.cache)
            .map_err(llm_error)?;
        Ok(hidden)
    }

    fn next_token(&mut self, hidden: &[f32]) -> Result<u32, JsValue> {
        let last = hidden.len().saturating_sub(self.model.config.dim);
        let logits = self.model.logits(&hidden[last..]).map_err(llm_error)?;
        Ok(self.sampler.next(&logits))
    }
}

/// A server frame: its error as a `SplitError` with the server's code, and the id checked.
pub(crate) fn decode(frame: &[u8], id: u64) -> Result<LlmFrame, JsValue> {
    let f = LlmFrame::decode(frame).map_err(|e| js::error("bad_frame", e))?;
    if let LlmFrame::Error { code, message, .. } = &f {
        return Err(js::error(code.name(), message));
    }
    if f.id() != id {
        return Err(js::error("bad_frame", format!("reply {} to request {id}", f.id())));
    }
    Ok(f)
}
