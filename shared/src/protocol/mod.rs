//! The binary frames that cross the WebSocket, one frame per WebSocket binary message.
//!
//! Every frame starts with the same 16-byte header (little-endian):
//!
//! ```text
//! 0  magic    "SPLT"
//! 4  version  u16   PROTOCOL_VERSION
//! 6  kind     u8    1 features, 2 image, 3 ping, 4 input (client -> server);
//!                   0x81 result, 0x82 error, 0x83 pong (server -> client)
//! 7  model    u8    the model addressed (1 = EfficientNet-Lite0; a server lists its models
//!                   and their ids in /api/info); echoed in the reply
//! 8  id       u64   request id chosen by the client, echoed in the reply
//! ```
//!
//! Decoding a frame does not judge its model byte: the server looks it up among the models it
//! hosts ([`crate::runtime::Registry`]) and answers `unknown_model` for one it does not, and the
//! model checks the boundary index and the shape ([`crate::runtime::SplitModel`]).
//!
//! followed by the kind's body (see [`Request`] and [`Reply`]). The language model's split
//! speaks frames of its own on `/llm` ([`LlmFrame`], magic `"SPLM"`), the encrypted classifier
//! on `/encrypted` ([`EncryptedFrame`], magic `"SPLE"`). Decoders check every length
//! before reading it and reject trailing bytes, so a frame is either fully understood or
//! answered with a typed [`WireError`].

mod encrypted;
mod error;
mod features;
mod llm;
mod reply;
mod request;
mod samples;

pub use encrypted::{
    ENCRYPTED_MAGIC, ENCRYPTED_PROTOCOL_VERSION, EncryptedErrorCode, EncryptedFrame,
    EncryptedWireError, MAX_CIPHERTEXT_BYTES, MAX_ENCRYPTED_FRAME_BYTES, MAX_KEY_BYTES, MAX_PARTS,
    PARAMETERS_ID, peek_encrypted_id,
};
pub use error::{ErrorCode, WireError};
pub use features::{FeatureView, FeaturesFrame};
pub use llm::{
    Finish, HeadSampling, LLM_MAGIC, LLM_PROTOCOL_VERSION, LlmErrorCode, LlmFrame, LlmWireError,
    MAX_HIDDEN_ROWS, MAX_HIDDEN_WIDTH, MAX_LLM_FRAME_BYTES, MODEL_SMOLLM2, peek_llm_id,
};
pub use reply::{NO_GAP, Reply, ServerLoad, ServerTimings};
pub use request::{Encoding, Request};
pub use samples::{sample_frames, synthetic_activations};

use crate::container::Cursor;

/// First four bytes of every frame.
pub const MAGIC: [u8; 4] = *b"SPLT";
/// Version this build speaks. A peer with another version gets [`ErrorCode::UnsupportedVersion`].
pub const PROTOCOL_VERSION: u16 = 4;
/// Bytes of the common header.
pub const HEADER_LEN: usize = 16;
/// EfficientNet-Lite0's model byte, which [`Request::encode`] and [`Reply::to_bytes`] write
/// ([`Request::encode_for`] and [`Reply::to_bytes_for`] address another model).
pub const MODEL_EFFICIENTNET_LITE0: u8 = 1;
/// Largest payload (features or image bytes) in one frame: the largest f32 activation (the stem
/// output, 1.6 MB per image) for a full batch fits; anything larger is refused before it is
/// buffered.
pub const MAX_PAYLOAD_BYTES: usize = 8 << 20;
/// Largest whole frame: payload plus header and shape.
pub const MAX_FRAME_BYTES: usize = MAX_PAYLOAD_BYTES + 64;
/// Longest error message carried in a reply.
pub const MAX_MESSAGE_BYTES: usize = 1024;
/// Most predictions in a result reply.
pub const MAX_TOP_K: usize = 10;

const _: () = assert!(MAX_FRAME_BYTES > MAX_PAYLOAD_BYTES + HEADER_LEN + 4 + 4 * 4 + 20 + 4);
const _: () = assert!(crate::model::MAX_BATCH * 32 * 112 * 112 * 4 <= MAX_PAYLOAD_BYTES);

/// Frame kinds (byte 6 of the header).
pub(crate) mod kind {
    pub const FEATURES: u8 = 1;
    pub const IMAGE: u8 = 2;
    pub const PING: u8 = 3;
    pub const INPUT: u8 = 4;
    pub const RESULT: u8 = 0x81;
    pub const ERROR: u8 = 0x82;
    pub const PONG: u8 = 0x83;
}

/// The parsed common header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub kind: u8,
    pub id: u64,
}

pub(crate) fn write_header(out: &mut Vec<u8>, kind: u8, model: u8, id: u64) {
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    out.push(kind);
    out.push(model);
    out.extend_from_slice(&id.to_le_bytes());
}

pub(crate) fn read_header(c: &mut Cursor<'_>) -> Result<Header, WireError> {
    if c.remaining() < HEADER_LEN {
        return Err(WireError::Truncated { needed: HEADER_LEN, got: c.remaining() });
    }
    if c.take(4)? != MAGIC {
        return Err(WireError::BadMagic);
    }
    let version = c.u16()?;
    if version != PROTOCOL_VERSION {
        return Err(WireError::UnsupportedVersion { got: version, supported: PROTOCOL_VERSION });
    }
    let kind = c.u8()?;
    let _model = c.u8()?; // judged by whoever hosts models: [`peek_model`]
    let id = c.u64()?;
    Ok(Header { kind, id })
}

/// The end of a frame body: nothing may follow it.
pub(crate) fn finish(c: Cursor<'_>) -> Result<(), WireError> {
    match c.rest().len() {
        0 => Ok(()),
        extra => Err(WireError::TrailingBytes { extra }),
    }
}

/// The model a frame addresses, if its header is readable.
pub fn peek_model(frame: &[u8]) -> Option<u8> {
    (frame.len() >= HEADER_LEN && frame[..4] == MAGIC).then(|| frame[7])
}

/// Whether a frame's header names a ping (its body unread): a server answers pings at once,
/// even while the connection's request before it is being computed, so that a pong times the
/// link and not the server's work.
pub fn peek_is_ping(frame: &[u8]) -> bool {
    frame.len() >= HEADER_LEN && frame[..4] == MAGIC && frame[6] == kind::PING
}

/// The request id of a frame, if its header is readable: lets a server address an error reply
/// to the request that caused it even when the body is malformed.
pub fn peek_request_id(frame: &[u8]) -> Option<u64> {
    (frame.len() >= HEADER_LEN && frame[..4] == MAGIC)
        .then(|| u64::from_le_bytes(frame[8..16].try_into().expect("8 bytes")))
}

/// The header of the `/llm` and `/encrypted` frames: `magic | version u16 | kind u8 | byte u8 |
/// id u64` (the byte: the rows' encoding, or the parameter set).
pub(crate) fn write_socket_header(
    out: &mut Vec<u8>,
    magic: [u8; 4],
    version: u16,
    kind: u8,
    byte: u8,
    id: u64,
) {
    out.extend_from_slice(&magic);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&[kind, byte]);
    out.extend_from_slice(&id.to_le_bytes());
}

/// The body of the `/llm` and `/encrypted` error frames: `code u16 | length u16 | message`, the
/// message cut to [`MAX_MESSAGE_BYTES`] at a character boundary.
pub(crate) fn write_error_body(out: &mut Vec<u8>, code: u16, message: &str) {
    let mut end = message.len().min(MAX_MESSAGE_BYTES);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    out.extend_from_slice(&code.to_le_bytes());
    out.extend_from_slice(&(end as u16).to_le_bytes());
    out.extend_from_slice(&message.as_bytes()[..end]);
}

/// An error body's code and message; `None` when the message is cut short or not UTF-8.
pub(crate) fn read_error_body(c: &mut Cursor<'_>) -> Option<(u16, String)> {
    let code = c.u16().ok()?;
    let len = usize::from(c.u16().ok()?);
    let message = std::str::from_utf8(c.take(len).ok()?).ok()?;
    Some((code, message.to_string()))
}
