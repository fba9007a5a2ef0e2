//! Frames of the language model's split (`/llm`): a client that keeps the embedding, the first
//! blocks and the output projection sends hidden states; the server runs its range of blocks on
//! them with the KV cache of that range and sends the hidden states back. Token ids and text
//! never cross.
//!
//! One WebSocket is one conversation. Every frame has a 16-byte header laid out as the image
//! frames' (little-endian): magic `"SPLM"`, version u16 [`LLM_PROTOCOL_VERSION`], kind u8,
//! encoding u8 (in hidden frames the [`HiddenCodec`] of the rows, 0 in the others), request id
//! u64 (echoed in the reply). Bodies:
//!
//! ```text
//! 1    open     model u8 (2 = SmolLM2-135M-Instruct), 3 zero bytes, first block u16,
//!               end block u16 (exclusive), positions u32 (the KV cache to reserve)
//! 2    hidden   position u32 (of the first row), rows u32, width u32, then rows coded each
//!               on its own in the header's encoding (f32: rows × width f32)
//! 0x81 opened   first block u16, end block u16, positions u32, width u32
//! 0x82 hidden   as the request: the rows after the server's blocks, in the request's encoding
//! 0x83 error    code u16, message length u16, message (UTF-8)
//! ```
//!
//! Every length is checked against [`MAX_HIDDEN_ROWS`], [`MAX_HIDDEN_WIDTH`] and the bytes
//! present before anything is allocated; trailing bytes are refused.

use crate::codec::{HiddenCodec, HiddenCodecError};
use crate::container::Cursor;

/// First four bytes of every frame of the `/llm` socket.
pub const LLM_MAGIC: [u8; 4] = *b"SPLM";
/// Version this build speaks (2: hidden rows coded, the header's encoding byte).
pub const LLM_PROTOCOL_VERSION: u16 = 2;
/// The model id of SmolLM2-135M-Instruct (1 is EfficientNet-Lite0 on `/ws`).
pub const MODEL_SMOLLM2: u8 = 2;
/// Most positions in one hidden frame (a prompt's prefill; longer prompts go in several).
pub const MAX_HIDDEN_ROWS: u32 = 1024;
/// Widest hidden state accepted.
pub const MAX_HIDDEN_WIDTH: u32 = 8192;
/// Largest frame: header, hidden header, and the values of the largest allowed frame of the
/// served model's width (SmolLM2: 1024 × 576 × 4 bytes = 2.4 MB).
pub const MAX_LLM_FRAME_BYTES: usize = 16 + 12 + (MAX_HIDDEN_ROWS as usize) * 576 * 4;
/// Longest error message.
const MAX_MESSAGE_BYTES: usize = 1024;

mod kind {
    pub const OPEN: u8 = 1;
    pub const HIDDEN: u8 = 2;
    pub const OPENED: u8 = 0x81;
    pub const HIDDEN_REPLY: u8 = 0x82;
    pub const ERROR: u8 = 0x83;
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
        ]
        .into_iter()
        .find(|c| *c as u16 == v)
    }

    /// Whether trying again later (after other conversations end, or a second) may succeed.
    pub fn is_transient(self) -> bool {
        matches!(self, LlmErrorCode::KvBudget | LlmErrorCode::RateLimited)
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
        /// Positions of KV cache to reserve.
        positions: u32,
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
}

impl LlmFrame {
    /// The request id.
    pub fn id(&self) -> u64 {
        match self {
            LlmFrame::Open { id, .. }
            | LlmFrame::Hidden { id, .. }
            | LlmFrame::Opened { id, .. }
            | LlmFrame::Error { id, .. } => *id,
        }
    }

    /// The frame's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let header = |out: &mut Vec<u8>, kind: u8, encoding: u8, id: u64| {
            out.extend_from_slice(&LLM_MAGIC);
            out.extend_from_slice(&LLM_PROTOCOL_VERSION.to_le_bytes());
            out.extend_from_slice(&[kind, encoding]);
            out.extend_from_slice(&id.to_le_bytes());
        };
        match self {
            LlmFrame::Open { id, model, first, end, positions } => {
                header(&mut out, kind::OPEN, 0, *id);
                out.extend_from_slice(&[*model, 0, 0, 0]);
                out.extend_from_slice(&first.to_le_bytes());
                out.extend_from_slice(&end.to_le_bytes());
                out.extend_from_slice(&positions.to_le_bytes());
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
            LlmFrame::Opened { id, first, end, positions, width } => {
                header(&mut out, kind::OPENED, 0, *id);
                out.extend_from_slice(&first.to_le_bytes());
                out.extend_from_slice(&end.to_le_bytes());
                out.extend_from_slice(&positions.to_le_bytes());
                out.extend_from_slice(&width.to_le_bytes());
            }
            LlmFrame::Error { id, code, message } => {
                header(&mut out, kind::ERROR, 0, *id);
                let mut end = message.len().min(MAX_MESSAGE_BYTES);
                while !message.is_char_boundary(end) {
                    end -= 1;
                }
                out.extend_from_slice(&(*code as u16).to_le_bytes());
                out.extend_from_slice(&(end as u16).to_le_bytes());
                out.extend_from_slice(&message.as_bytes()[..end]);
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
                c.take(3)?;
                LlmFrame::Open { id, model, first: c.u16()?, end: c.u16()?, positions: c.u32()? }
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
            kind::OPENED => LlmFrame::Opened {
                id,
                first: c.u16()?,
                end: c.u16()?,
                positions: c.u32()?,
                width: c.u32()?,
            },
            kind::ERROR => {
                let code = LlmErrorCode::from_u16(c.u16()?).ok_or(LlmWireError::ErrorFrame)?;
                let len = usize::from(c.u16()?);
                let message = std::str::from_utf8(c.take(len)?)
                    .map_err(|_| LlmWireError::ErrorFrame)?
                    .to_string();
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

/// The request id of a frame whose header is readable.
pub fn peek_llm_id(frame: &[u8]) -> Option<u64> {
    (frame.len() >= 16 && frame[..4] == LLM_MAGIC)
        .then(|| u64::from_le_bytes(frame[8..16].try_into().expect("8 bytes")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames() -> Vec<LlmFrame> {
        vec![
            LlmFrame::Open { id: 1, model: MODEL_SMOLLM2, first: 4, end: 30, positions: 512 },
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
            LlmFrame::Opened { id: 1, first: 4, end: 30, positions: 512, width: 576 },
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
        let mut bytes = frames()[1].encode();
        // rows = u32::MAX: refused before any allocation.
        bytes[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(LlmFrame::decode(&bytes), Err(LlmWireError::Shape(_))));
        let mut version = frames()[0].encode();
        version[4] = 9;
        assert_eq!(LlmFrame::decode(&version), Err(LlmWireError::Version(9)));
        let mut kind = frames()[0].encode();
        kind[6] = 0x7f;
        assert_eq!(LlmFrame::decode(&kind), Err(LlmWireError::Kind(0x7f)));
        let mut encoding = frames()[1].encode();
        encoding[7] = 0x7f;
        assert_eq!(
            LlmFrame::decode(&encoding),
            Err(LlmWireError::Codec(HiddenCodecError::Unknown(0x7f)))
        );
        // The same rows announced in another encoding do not fill the frame.
        encoding[7] = HiddenCodec::F16.id();
        assert!(matches!(LlmFrame::decode(&encoding), Err(LlmWireError::Shape(_))));
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
