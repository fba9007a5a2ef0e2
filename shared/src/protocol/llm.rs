//! Frames of the language model's split (`/llm`). The placement is the conversation's block
//! range and whether the server also runs the head (the final norm, the output projection and
//! the sampler):
//!
//! - **U-shaped split** (`first > 0`, no head): the client keeps the embedding, the first blocks
//!   and the head, sends hidden states, and the server answers with the last position's hidden
//!   state after its blocks (the one the head needs: a prompt's prefill sends its rows up and
//!   gets one back). Token ids and text never cross.
//! - **Plain split** (`first > 0`, head): the server answers a hidden frame with the next token;
//!   it sees the answer's tokens, never the prompt's.
//! - **Cloud-only** (`first = 0`, head): the client sends the prompt's token ids and how many to
//!   generate; the server streams the answer token by token (one `token` frame each, then
//!   `done`) without waiting for the client between tokens; `stop` ends it early. The
//!   server's cache then holds every token sent but the last: the conversation's next
//!   `tokens` frame starts with that one, at its position.
//!
//! One WebSocket is one conversation. Every frame has a 16-byte header laid out as the image
//! frames' (little-endian): magic `"SPLM"`, version u16 [`LLM_PROTOCOL_VERSION`], kind u8,
//! encoding u8 (in hidden frames the [`HiddenCodec`] of the rows, 0 in the others), request id
//! u64 (echoed in the reply). Bodies:
//!
//! ```text
//! 1    open     model u8 (2 = SmolLM2-135M-Instruct), flags u8 (bit 0: the server runs the
//!               head), 2 zero bytes, first block u16, end block u16 (exclusive), positions
//!               u32 (the most the conversation reaches); with the head bit: temperature f32 (0 is
//!               greedy), top-p f32, seed u64
//! 2    hidden   position u32 (of the first row), rows u32, width u32, then rows coded each
//!               on its own in the header's encoding (f32: rows × width f32)
//! 3    tokens   position u32, generate u32 (tokens to answer with; 0: only fill the cache),
//!               count u32, then count token ids u32 (cloud-only conversations)
//! 4    stop     (no body) end the generation under way; nothing else is answered
//! 0x81 opened   first block u16, end block u16, positions u32, width u32, flags u8
//! 0x82 hidden   as the request, one row: the last position's state after the server's blocks
//!               (position: that row's), in the request's encoding
//! 0x83 error    code u16, message length u16, message (UTF-8)
//! 0x84 token    position u32 (where the token goes in the conversation), token id u32
//! 0x85 done     tokens generated u32, why the generation ended u8 ([`Finish`])
//! ```
//!
//! Every length is checked against [`MAX_HIDDEN_ROWS`], [`MAX_HIDDEN_WIDTH`] and the bytes
//! present before anything is allocated; unknown flag bits and trailing bytes are refused.

use super::{read_error_body, write_error_body, write_socket_header};
use crate::codec::{HiddenCodec, HiddenCodecError};
use crate::container::Cursor;

/// First four bytes of every frame of the `/llm` socket.
pub const LLM_MAGIC: [u8; 4] = *b"SPLM";
/// Version this build speaks (2: hidden rows coded, the header's encoding byte; 3: the server's
/// head, token and generation frames; 4: a hidden reply holds the last position only).
pub const LLM_PROTOCOL_VERSION: u16 = 4;
/// The model id of SmolLM2-135M-Instruct (1 is EfficientNet-Lite0 on `/ws`).
pub const MODEL_SMOLLM2: u8 = 2;
/// Most positions in one hidden frame (a prompt's prefill; longer prompts go in several).
pub const MAX_HIDDEN_ROWS: u32 = 1024;
/// Widest hidden state accepted.
pub const MAX_HIDDEN_WIDTH: u32 = 8192;
/// Largest frame: header, hidden header, and the values of the largest allowed frame of the
/// served model's width (SmolLM2: 1024 × 576 × 4 bytes = 2.4 MB).
pub const MAX_LLM_FRAME_BYTES: usize = 16 + 12 + (MAX_HIDDEN_ROWS as usize) * 576 * 4;
/// The open frame's flag: the server runs the head and answers with tokens.
const FLAG_HEAD: u8 = 1;

mod kind {
    pub const OPEN: u8 = 1;
    pub const HIDDEN: u8 = 2;
    pub const TOKENS: u8 = 3;
    pub const STOP: u8 = 4;
    pub const OPENED: u8 = 0x81;
    pub const HIDDEN_REPLY: u8 = 0x82;
    pub const ERROR: u8 = 0x83;
    pub const TOKEN: u8 = 0x84;
    pub const DONE: u8 = 0x85;
}

/// How the server chooses tokens when it runs the head: greedy at temperature 0, otherwise
/// temperature and top-p from a seeded generator (the model's sampler; values out of range are
/// refused by the server, not the decoder).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HeadSampling {
    /// 0: greedy.
    pub temperature: f32,
    /// Nucleus mass, in (0, 1].
    pub top_p: f32,
    /// The generator's seed.
    pub seed: u64,
}

impl HeadSampling {
    /// The most likely token each time.
    pub const GREEDY: HeadSampling = HeadSampling { temperature: 0.0, top_p: 1.0, seed: 0 };
}

/// Why a generation ended (the `done` frame).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Finish {
    /// The model wrote its end token (the last `token` frame carries it).
    EndToken = 1,
    /// As many tokens as asked.
    Count = 2,
    /// The client's `stop`.
    Stopped = 3,
    /// The positions the conversation reserved are full.
    Positions = 4,
}

impl Finish {
    fn from_u8(v: u8) -> Option<Self> {
        use Finish::*;
        [EndToken, Count, Stopped, Positions].into_iter().find(|f| *f as u8 == v)
    }

    /// The reason's name, as the client reports it.
    pub fn name(self) -> &'static str {
        match self {
            Finish::EndToken => "end",
            Finish::Count => "count",
            Finish::Stopped => "stopped",
            Finish::Positions => "positions",
        }
    }
}

/// Why the server refused a frame (the `code` of an error frame).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum LlmErrorCode {
    /// The frame does not decode.
    BadFrame = 1,
    /// A model this server does not host.
    UnknownModel = 2,
    /// Hidden states before `open`, or `open` twice.
    NotOpen = 3,
    /// A block range outside the model, or empty.
    BadLayers = 4,
    /// Hidden states whose position is not the next one the server's cache expects.
    Position = 5,
    /// The KV cache asked for (or grown into) is over the session's or the server's budget.
    KvBudget = 6,
    /// Hidden states of the wrong width, or holding NaN or infinity.
    BadValues = 7,
    /// The server failed while running the blocks.
    Internal = 8,
    /// More frames per second from this address than the server takes (`--rate-limit`).
    RateLimited = 9,
    /// A frame the conversation's placement does not take (token ids where the server does not
    /// hold the embedding, a generation without the head, anything but `stop` while a
    /// generation is under way).
    Placement = 10,
    /// The server took the conversation's KV cache back for a new conversation while this one
    /// sat idle (`--llm-evict-after`); the socket closes after it. Open again and send the
    /// kept hidden states again to go on.
    Evicted = 11,
}

impl LlmErrorCode {
    fn from_u16(v: u16) -> Option<Self> {
        use LlmErrorCode::*;
        [
            BadFrame,
            UnknownModel,
            NotOpen,
            BadLayers,
            Position,
            KvBudget,
            BadValues,
            Internal,
            RateLimited,
            Placement,
            Evicted,
        ]
        .into_iter()
        .find(|c| *c as u16 == v)
    }

    /// Whether trying again later (after other conversations end, or a second) may succeed.
    pub fn is_transient(self) -> bool {
        matches!(self, LlmErrorCode::KvBudget | LlmErrorCode::RateLimited | LlmErrorCode::Evicted)
    }

    /// The code's name, as the docs and the server's metrics spell it.
    pub fn name(self) -> &'static str {
        match self {
            LlmErrorCode::BadFrame => "bad_frame",
            LlmErrorCode::UnknownModel => "unknown_model",
            LlmErrorCode::NotOpen => "not_open",
            LlmErrorCode::BadLayers => "bad_layers",
            LlmErrorCode::Position => "position",
            LlmErrorCode::KvBudget => "kv_budget",
            LlmErrorCode::BadValues => "bad_values",
            LlmErrorCode::Internal => "internal",
            LlmErrorCode::RateLimited => "rate_limited",
            LlmErrorCode::Placement => "placement",
            LlmErrorCode::Evicted => "evicted",
        }
    }
}

/// A frame of the `/llm` socket.
#[derive(Clone, Debug, PartialEq)]
pub enum LlmFrame {
    /// Client: start a conversation on blocks `first..end` with `positions` of cache.
    Open {
        /// Request id.
        id: u64,
        /// [`MODEL_SMOLLM2`].
        model: u8,
        /// First block the server runs.
        first: u16,
        /// One past the last block the server runs.
        end: u16,
        /// Most positions the conversation will reach (the server reserves KV cache as they fill).
        positions: u32,
        /// Whether the server runs the head, and how it samples.
        head: Option<HeadSampling>,
    },
    /// Client: token ids for the server to embed and run, in a cloud-only conversation (block 0
    /// and the head on the server); it answers with up to `generate` tokens, streamed, then
    /// `done` (with 0, only `done`: the tokens are in its cache).
    Tokens {
        /// Request id (every `token` and the `done` of the generation echo it).
        id: u64,
        /// Position of the first token in the conversation.
        position: u32,
        /// Tokens to generate.
        generate: u32,
        /// The token ids.
        tokens: Vec<u32>,
    },
    /// Client: end the generation under way.
    Stop {
        /// Request id.
        id: u64,
    },
    /// Server: a token the head chose.
    Token {
        /// Request id of the hidden or tokens frame it answers.
        id: u64,
        /// Where the token goes in the conversation.
        position: u32,
        /// The token id.
        token: u32,
    },
    /// Server: a generation ended.
    Done {
        /// Request id of the tokens frame.
        id: u64,
        /// Tokens sent.
        generated: u32,
        /// Why it ended.
        finish: Finish,
    },
    /// Client: rows to run through the server's blocks; server: the rows after them.
    Hidden {
        /// Request id.
        id: u64,
        /// Whether the server sent it.
        reply: bool,
        /// Position of the first row in the conversation.
        position: u32,
        /// Values per row.
        width: u32,
        /// How the rows cross (a reply uses its request's).
        codec: HiddenCodec,
        /// `rows × width` values (as decoded, for a frame received).
        values: Vec<f32>,
    },
    /// Server: the conversation is open.
    Opened {
        /// Request id of the open.
        id: u64,
        /// First block.
        first: u16,
        /// One past the last block.
        end: u16,
        /// Positions reserved.
        positions: u32,
        /// Width of the hidden states it takes.
        width: u32,
        /// Whether the server runs the head.
        head: bool,
    },
    /// Server: a refused frame.
    Error {
        /// Request id of the refused frame (0 when unreadable).
        id: u64,
        /// Why.
        code: LlmErrorCode,
        /// For people.
        message: String,
    },
}

/// A frame that does not decode.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LlmWireError {
    /// Too short for what it announced.
    #[error("frame truncated: {0}")]
    Truncated(#[from] crate::container::Truncated),
    /// Not `SPLM`.
    #[error("not a language-model frame (bad magic)")]
    BadMagic,
    /// Another protocol version.
    #[error("protocol version {0} is not supported; this side speaks {LLM_PROTOCOL_VERSION}")]
    Version(u16),
    /// An unknown kind byte.
    #[error("unknown frame kind {0:#04x}")]
    Kind(u8),
    /// Rows or width past the limits, or values that do not fill them.
    #[error("{0}")]
    Shape(String),
    /// Rows in an encoding this side does not know, or that do not decode.
    #[error("hidden rows: {0}")]
    Codec(#[from] HiddenCodecError),
    /// An error frame with an unknown code or a message that is not UTF-8.
    #[error("malformed error frame")]
    ErrorFrame,
    /// Bytes after the body.
    #[error("{0} unexpected bytes after the frame body")]
    Trailing(usize),
    /// Flag bits this side does not know, or a `done` with an unknown reason.
    #[error("{0}")]
    Field(String),
}

impl LlmFrame {
    /// The request id.
    pub fn id(&self) -> u64 {
        match self {
            LlmFrame::Open { id, .. }
            | LlmFrame::Hidden { id, .. }
            | LlmFrame::Tokens { id, .. }
            | LlmFrame::Stop { id }
            | LlmFrame::Opened { id, .. }
            | LlmFrame::Error { id, .. }
            | LlmFrame::Token { id, .. }
            | LlmFrame::Done { id, .. } => *id,
        }
    }

    /// The frame's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let header = |out: &mut Vec<u8>, kind: u8, encoding: u8, id: u64| {
            write_socket_header(out, LLM_MAGIC, LLM_PROTOCOL_VERSION, kind, encoding, id)
        };
        match self {
            LlmFrame::Open { id, model, first, end, positions, head } => {
                header(&mut out, kind::OPEN, 0, *id);
                let flags = if head.is_some() { FLAG_HEAD } else { 0 };
                out.extend_from_slice(&[*model, flags, 0, 0]);
                out.extend_from_slice(&first.to_le_bytes());
                out.extend_from_slice(&end.to_le_bytes());
                out.extend_from_slice(&positions.to_le_bytes());
                if let Some(s) = head {
                    out.extend_from_slice(&s.temperature.to_le_bytes());
                    out.extend_from_slice(&s.top_p.to_le_bytes());
                    out.extend_from_slice(&s.seed.to_le_bytes());
                }
            }
            LlmFrame::Tokens { id, position, generate, tokens } => {
                header(&mut out, kind::TOKENS, 0, *id);
                out.extend_from_slice(&position.to_le_bytes());
                out.extend_from_slice(&generate.to_le_bytes());
                out.extend_from_slice(&(tokens.len() as u32).to_le_bytes());
                for t in tokens {
                    out.extend_from_slice(&t.to_le_bytes());
                }
            }
            LlmFrame::Stop { id } => header(&mut out, kind::STOP, 0, *id),
            LlmFrame::Token { id, position, token } => {
                header(&mut out, kind::TOKEN, 0, *id);
                out.extend_from_slice(&position.to_le_bytes());
                out.extend_from_slice(&token.to_le_bytes());
            }
            LlmFrame::Done { id, generated, finish } => {
                header(&mut out, kind::DONE, 0, *id);
                out.extend_from_slice(&generated.to_le_bytes());
                out.push(*finish as u8);
            }
            LlmFrame::Hidden { id, reply, position, width, codec, values } => {
                let kind = if *reply { kind::HIDDEN_REPLY } else { kind::HIDDEN };
                header(&mut out, kind, codec.id(), *id);
                let rows = if *width == 0 { 0 } else { values.len() / *width as usize };
                out.extend_from_slice(&position.to_le_bytes());
                out.extend_from_slice(&(rows as u32).to_le_bytes());
                out.extend_from_slice(&width.to_le_bytes());
                codec.encode(&values[..rows * *width as usize], *width as usize, &mut out);
            }
            LlmFrame::Opened { id, first, end, positions, width, head } => {
                header(&mut out, kind::OPENED, 0, *id);
                out.extend_from_slice(&first.to_le_bytes());
                out.extend_from_slice(&end.to_le_bytes());
                out.extend_from_slice(&positions.to_le_bytes());
                out.extend_from_slice(&width.to_le_bytes());
                out.push(if *head { FLAG_HEAD } else { 0 });
            }
            LlmFrame::Error { id, code, message } => {
                header(&mut out, kind::ERROR, 0, *id);
                write_error_body(&mut out, *code as u16, message);
            }
        }
        out
    }

    /// Decode one frame.
    pub fn decode(bytes: &[u8]) -> Result<Self, LlmWireError> {
        let mut c = Cursor::new(bytes);
        if c.take(4)? != LLM_MAGIC {
            return Err(LlmWireError::BadMagic);
        }
        let version = c.u16()?;
        if version != LLM_PROTOCOL_VERSION {
            return Err(LlmWireError::Version(version));
        }
        let kind = c.u8()?;
        let encoding = c.u8()?;
        let id = c.u64()?;
        let frame = match kind {
            kind::OPEN => {
                let model = c.u8()?;
                let flags = flags(c.u8()?)?;
                c.take(2)?;
                let (first, end, positions) = (c.u16()?, c.u16()?, c.u32()?);
                let head = if flags & FLAG_HEAD != 0 {
                    let temperature = f32::from_le_bytes(c.take(4)?.try_into().expect("4 bytes"));
                    let top_p = f32::from_le_bytes(c.take(4)?.try_into().expect("4 bytes"));
                    Some(HeadSampling { temperature, top_p, seed: c.u64()? })
                } else {
                    None
                };
                LlmFrame::Open { id, model, first, end, positions, head }
            }
            kind::TOKENS => {
                let (position, generate, count) = (c.u32()?, c.u32()?, c.u32()?);
                if count > MAX_HIDDEN_ROWS {
                    return Err(LlmWireError::Shape(format!(
                        "{count} tokens in one frame: at most {MAX_HIDDEN_ROWS}"
                    )));
                }
                if c.remaining() != count as usize * 4 {
                    return Err(LlmWireError::Shape(format!(
                        "{count} tokens need {} bytes, the frame has {}",
                        count * 4,
                        c.remaining()
                    )));
                }
                let tokens = (0..count).map(|_| c.u32()).collect::<Result<_, _>>()?;
                LlmFrame::Tokens { id, position, generate, tokens }
            }
            kind::STOP => LlmFrame::Stop { id },
            kind::TOKEN => LlmFrame::Token { id, position: c.u32()?, token: c.u32()? },
            kind::DONE => {
                let generated = c.u32()?;
                let reason = c.u8()?;
                let finish = Finish::from_u8(reason).ok_or_else(|| {
                    LlmWireError::Field(format!("unknown end of generation {reason}"))
                })?;
                LlmFrame::Done { id, generated, finish }
            }
            kind::HIDDEN | kind::HIDDEN_REPLY => {
                let (position, rows, width) = (c.u32()?, c.u32()?, c.u32()?);
                if rows > MAX_HIDDEN_ROWS || width > MAX_HIDDEN_WIDTH {
                    return Err(LlmWireError::Shape(format!(
                        "{rows} rows of {width} values: at most {MAX_HIDDEN_ROWS} rows of {MAX_HIDDEN_WIDTH}"
                    )));
                }
                let codec = HiddenCodec::from_id(encoding)?;
                // Within the limits above, rows × row bytes fits any usize of 32 bits or more.
                let n = rows as usize * codec.row_bytes(width as usize);
                if c.remaining() != n {
                    return Err(LlmWireError::Shape(format!(
                        "{rows} rows of {width} values in {codec} need {n} bytes, the frame has {}",
                        c.remaining()
                    )));
                }
                let values = codec.decode(c.take(n)?, rows as usize, width as usize)?;
                let reply = kind == kind::HIDDEN_REPLY;
                LlmFrame::Hidden { id, reply, position, width, codec, values }
            }
            kind::OPENED => {
                let (first, end, positions, width) = (c.u16()?, c.u16()?, c.u32()?, c.u32()?);
                let head = flags(c.u8()?)? & FLAG_HEAD != 0;
                LlmFrame::Opened { id, first, end, positions, width, head }
            }
            kind::ERROR => {
                let (code, message) = read_error_body(&mut c).ok_or(LlmWireError::ErrorFrame)?;
                let code = LlmErrorCode::from_u16(code).ok_or(LlmWireError::ErrorFrame)?;
                LlmFrame::Error { id, code, message }
            }
            other => return Err(LlmWireError::Kind(other)),
        };
        match c.rest().len() {
            0 => Ok(frame),
            extra => Err(LlmWireError::Trailing(extra)),
        }
    }
}

/// Flag bits, unknown ones refused.
fn flags(bits: u8) -> Result<u8, LlmWireError> {
    match bits & !FLAG_HEAD {
        0 => Ok(bits),
        unknown => Err(LlmWireError::Field(format!("unknown flags {unknown:#04x}"))),
    }
}

/// The request id of a frame whose header is readable.
pub fn peek_llm_id(frame: &[u8]) -> Option<u64> {
    (frame.len() >= 16 && frame[..4] == LLM_MAGIC)
        .then(|| u64::from_le_bytes(frame[8..16].try_into().expect("8 bytes")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::MAX_MESSAGE_BYTES;

    fn frames() -> Vec<LlmFrame> {
        vec![
            LlmFrame::Open {
                id: 1,
                model: MODEL_SMOLLM2,
                first: 4,
                end: 30,
                positions: 512,
                head: None,
            },
            LlmFrame::Open {
                id: 1,
                model: MODEL_SMOLLM2,
                first: 0,
                end: 30,
                positions: 64,
                head: Some(HeadSampling { temperature: 0.7, top_p: 0.9, seed: u64::MAX }),
            },
            LlmFrame::Tokens { id: 6, position: 0, generate: 64, tokens: vec![1, 49151, 0] },
            LlmFrame::Tokens { id: 7, position: 3, generate: 0, tokens: vec![] },
            LlmFrame::Stop { id: 8 },
            LlmFrame::Token { id: 6, position: 3, token: 2 },
            LlmFrame::Done { id: 6, generated: 1, finish: Finish::EndToken },
            LlmFrame::Hidden {
                id: 2,
                reply: false,
                position: 7,
                width: 3,
                codec: HiddenCodec::F32,
                values: vec![1.0, -2.5, 3.0, 0.0, 1e-9, 7.0],
            },
            LlmFrame::Hidden {
                id: 3,
                reply: true,
                position: 0,
                width: 2,
                codec: HiddenCodec::F32,
                values: vec![],
            },
            // Values each of these encodings holds exactly, so the round trip is equality.
            LlmFrame::Hidden {
                id: 4,
                reply: false,
                position: 1,
                width: 2,
                codec: HiddenCodec::F16,
                values: vec![0.5, -3.0, 1024.0, 0.0],
            },
            LlmFrame::Hidden {
                id: 5,
                reply: true,
                position: 2,
                width: 12,
                codec: HiddenCodec::Q8Outliers,
                values: (0..12).map(|i| if i < 8 { 100.0 * i as f32 } else { 0.0 }).collect(),
            },
            LlmFrame::Opened { id: 1, first: 4, end: 30, positions: 512, width: 576, head: false },
            LlmFrame::Opened { id: 1, first: 0, end: 30, positions: 64, width: 576, head: true },
            LlmFrame::Error {
                id: 9,
                code: LlmErrorCode::KvBudget,
                message: "full — try later".into(),
            },
        ]
    }

    #[test]
    fn every_frame_round_trips() {
        for f in frames() {
            assert_eq!(LlmFrame::decode(&f.encode()).unwrap(), f);
            assert_eq!(peek_llm_id(&f.encode()), Some(f.id()));
        }
    }

    #[test]
    fn every_truncation_and_extension_is_refused() {
        for f in frames() {
            let bytes = f.encode();
            for len in 0..bytes.len() {
                assert!(LlmFrame::decode(&bytes[..len]).is_err(), "{f:?} cut at {len}");
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert!(LlmFrame::decode(&longer).is_err());
        }
    }

    #[test]
    fn crafted_headers_are_refused() {
        let hidden = frames().into_iter().position(|f| matches!(f, LlmFrame::Hidden { .. }));
        let mut bytes = frames()[hidden.unwrap()].encode();
        // rows = u32::MAX: refused before any allocation.
        bytes[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(LlmFrame::decode(&bytes), Err(LlmWireError::Shape(_))));
        let mut version = frames()[0].encode();
        version[4] = 9;
        assert_eq!(LlmFrame::decode(&version), Err(LlmWireError::Version(9)));
        let mut kind = frames()[0].encode();
        kind[6] = 0x7f;
        assert_eq!(LlmFrame::decode(&kind), Err(LlmWireError::Kind(0x7f)));
        let mut encoding = bytes.clone();
        encoding[20..24].copy_from_slice(&2u32.to_le_bytes());
        encoding[7] = 0x7f;
        assert_eq!(
            LlmFrame::decode(&encoding),
            Err(LlmWireError::Codec(HiddenCodecError::Unknown(0x7f)))
        );
        // The same rows announced in another encoding do not fill the frame.
        encoding[7] = HiddenCodec::F16.id();
        assert!(matches!(LlmFrame::decode(&encoding), Err(LlmWireError::Shape(_))));
        // Unknown flags, an unknown end of generation, a token count past the limit.
        let mut open = frames()[0].encode();
        open[17] = 0x02;
        assert!(matches!(LlmFrame::decode(&open), Err(LlmWireError::Field(_))));
        let mut done = LlmFrame::Done { id: 1, generated: 0, finish: Finish::Count }.encode();
        *done.last_mut().unwrap() = 9;
        assert!(matches!(LlmFrame::decode(&done), Err(LlmWireError::Field(_))));
        let mut tokens = LlmFrame::Tokens { id: 1, position: 0, generate: 1, tokens: vec![5] };
        let mut many = tokens.encode();
        many[24..28].copy_from_slice(&(MAX_HIDDEN_ROWS + 1).to_le_bytes());
        assert!(matches!(LlmFrame::decode(&many), Err(LlmWireError::Shape(_))));
        if let LlmFrame::Tokens { tokens, .. } = &mut tokens {
            tokens.push(6);
        }
        let mut short = tokens.encode();
        short[24..28].copy_from_slice(&1u32.to_le_bytes());
        assert!(matches!(LlmFrame::decode(&short), Err(LlmWireError::Shape(_))));
        let long =
            LlmFrame::Error { id: 0, code: LlmErrorCode::Internal, message: "é".repeat(600) };
        match LlmFrame::decode(&long.encode()).unwrap() {
            LlmFrame::Error { message, .. } => {
                assert!(message.len() <= MAX_MESSAGE_BYTES && message.chars().all(|c| c == 'é'))
            }
            other => panic!("{other:?}"),
        }
    }
}
