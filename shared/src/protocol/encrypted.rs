//! Frames of the encrypted classifier (`/encrypted`, [`crate::encrypted`]). One WebSocket is
//! one session: the client sends its evaluation key once, then any number of photos' pooled
//! features encrypted, and gets each answer back encrypted under its own key.
//!
//! Every frame has a 16-byte header (little-endian): magic `"SPLE"`, version u16
//! [`ENCRYPTED_PROTOCOL_VERSION`], kind u8, parameters u8 (the parameter set and slot layout
//! both sides use: [`PARAMETERS_ID`]; 0 in error frames), request id u64 (echoed in the
//! reply). Bodies:
//!
//! ```text
//! 1    key       length u32, the evaluation key (fhe.rs's serialization)
//! 2    classify  parts u8 (the layout's baby steps), 3 zero bytes, then per part: length
//!                u32, one ciphertext
//! 0x81 key accepted  (no body)
//! 0x82 answer        queue µs u32 (the wait for the evaluator), server µs u32 (the
//!                    evaluation, the key's reading included), length u32, one ciphertext: the
//!                    1000 logits, under the client's key
//! 0x83 error         code u16, message length u16, message (UTF-8)
//! ```
//!
//! Lengths are checked against [`MAX_KEY_BYTES`], [`MAX_CIPHERTEXT_BYTES`], [`MAX_PARTS`] and
//! the bytes present before anything is allocated; trailing bytes are refused. What the
//! ciphertexts and the key hold is read by the scheme, which refuses what is not its own.

use super::{read_error_body, write_error_body, write_socket_header};
use crate::container::{Cursor, Truncated};

/// First four bytes of every frame of the `/encrypted` socket.
pub const ENCRYPTED_MAGIC: [u8; 4] = *b"SPLE";
/// Version this build speaks (2: the answer says how long it waited and took).
pub const ENCRYPTED_PROTOCOL_VERSION: u16 = 2;
/// The parameter set and layout of [`crate::encrypted`] (degree 4096, the three moduli, the
/// plaintext modulus, three lanes, 12 baby steps).
pub const PARAMETERS_ID: u8 = 1;
/// Largest evaluation key (the layout's two rotations take 335 kB).
pub const MAX_KEY_BYTES: usize = 1 << 20;
/// Largest ciphertext (a fresh one is 56 kB, one on all three moduli 112 kB).
pub const MAX_CIPHERTEXT_BYTES: usize = 128 << 10;
/// Most ciphertexts in one classify frame.
pub const MAX_PARTS: usize = 16;
/// Largest frame of the socket: a key frame or a classify frame of the most parts.
pub const MAX_ENCRYPTED_FRAME_BYTES: usize = {
    let key = 16 + 4 + MAX_KEY_BYTES;
    let classify = 16 + 4 + MAX_PARTS * (4 + MAX_CIPHERTEXT_BYTES);
    if key > classify { key } else { classify }
};

mod kind {
    pub const KEY: u8 = 1;
    pub const CLASSIFY: u8 = 2;
    pub const KEY_ACCEPTED: u8 = 0x81;
    pub const ANSWER: u8 = 0x82;
    pub const ERROR: u8 = 0x83;
}

/// Why the server refused a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum EncryptedErrorCode {
    /// The frame does not decode.
    BadFrame = 1,
    /// A parameter set this server does not use.
    Parameters = 2,
    /// Features before any evaluation key on this socket.
    NoKey = 3,
    /// The key does not fit the server's key budget, even after evicting idle sessions' keys.
    KeyBudget = 4,
    /// The server took this session's key back for another's while it sat idle: send it again.
    Evicted = 5,
    /// A key or a ciphertext the scheme does not read as its own (or a key without a rotation
    /// the evaluation needs).
    Malformed = 6,
    /// More evaluations waiting than the server queues.
    Busy = 7,
    /// More frames per second from this address than the server takes (`--rate-limit`).
    RateLimited = 8,
    /// The server failed while evaluating.
    Internal = 9,
}

impl EncryptedErrorCode {
    fn from_u16(v: u16) -> Option<Self> {
        use EncryptedErrorCode::*;
        [BadFrame, Parameters, NoKey, KeyBudget, Evicted, Malformed, Busy, RateLimited, Internal]
            .into_iter()
            .find(|c| *c as u16 == v)
    }

    /// The code's name, as the docs and the server's metrics spell it.
    pub fn name(self) -> &'static str {
        match self {
            EncryptedErrorCode::BadFrame => "bad_frame",
            EncryptedErrorCode::Parameters => "parameters",
            EncryptedErrorCode::NoKey => "no_key",
            EncryptedErrorCode::KeyBudget => "key_budget",
            EncryptedErrorCode::Evicted => "evicted",
            EncryptedErrorCode::Malformed => "malformed",
            EncryptedErrorCode::Busy => "busy",
            EncryptedErrorCode::RateLimited => "rate_limited",
            EncryptedErrorCode::Internal => "internal",
        }
    }
}

/// A frame that does not decode.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum EncryptedWireError {
    /// Not `"SPLE"`.
    #[error("not an encrypted-classifier frame (bad magic)")]
    BadMagic,
    /// Another protocol version.
    #[error("protocol version {0}, this server speaks {ENCRYPTED_PROTOCOL_VERSION}")]
    Version(u16),
    /// A kind this version does not know.
    #[error("unknown frame kind {0:#04x}")]
    Kind(u8),
    /// Fewer bytes than a length said.
    #[error("truncated frame")]
    Truncated,
    /// A length past its limit.
    #[error("{what} of {got} bytes: at most {limit}")]
    TooLong {
        /// What the length was of.
        what: &'static str,
        /// The length.
        got: usize,
        /// Its limit.
        limit: usize,
    },
    /// A classify frame with no part, or more than [`MAX_PARTS`].
    #[error("{0} ciphertexts in a classify frame: 1 to {MAX_PARTS}")]
    Parts(usize),
    /// Bytes after the body.
    #[error("{0} bytes after the frame's body")]
    Trailing(usize),
    /// An error frame with an unknown code or a message that is not UTF-8.
    #[error("malformed error frame")]
    ErrorFrame,
}

impl From<Truncated> for EncryptedWireError {
    fn from(_: Truncated) -> Self {
        EncryptedWireError::Truncated
    }
}

/// One frame of the `/encrypted` socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EncryptedFrame {
    /// The session's evaluation key (a new one replaces the last).
    Key {
        /// Request id.
        id: u64,
        /// The parameter set the key is for.
        parameters: u8,
        /// The key's bytes.
        key: Vec<u8>,
    },
    /// A photo's pooled features, encrypted (one ciphertext per baby step).
    Classify {
        /// Request id.
        id: u64,
        /// The parameter set the ciphertexts are for.
        parameters: u8,
        /// The ciphertexts.
        parts: Vec<Vec<u8>>,
    },
    /// The key is held for the session.
    KeyAccepted {
        /// The key frame's id.
        id: u64,
    },
    /// The logits, encrypted under the client's key.
    Answer {
        /// The classify frame's id.
        id: u64,
        /// How long the frame waited for the evaluator (one evaluation at a time), µs.
        queue_us: u32,
        /// How long the evaluation took, reading the session's key included, µs.
        server_us: u32,
        /// One ciphertext.
        ciphertext: Vec<u8>,
    },
    /// A refusal.
    Error {
        /// The refused frame's id (0 when unreadable).
        id: u64,
        /// Why.
        code: EncryptedErrorCode,
        /// For people.
        message: String,
    },
}

impl EncryptedFrame {
    /// The frame's request id.
    pub fn id(&self) -> u64 {
        match self {
            EncryptedFrame::Key { id, .. }
            | EncryptedFrame::Classify { id, .. }
            | EncryptedFrame::KeyAccepted { id }
            | EncryptedFrame::Answer { id, .. }
            | EncryptedFrame::Error { id, .. } => *id,
        }
    }

    /// The frame's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let header = |out: &mut Vec<u8>, kind: u8, parameters: u8, id: u64| {
            write_socket_header(
                out,
                ENCRYPTED_MAGIC,
                ENCRYPTED_PROTOCOL_VERSION,
                kind,
                parameters,
                id,
            )
        };
        let bytes = |out: &mut Vec<u8>, b: &[u8]| {
            out.extend_from_slice(&(b.len() as u32).to_le_bytes());
            out.extend_from_slice(b);
        };
        match self {
            EncryptedFrame::Key { id, parameters, key } => {
                header(&mut out, kind::KEY, *parameters, *id);
                bytes(&mut out, key);
            }
            EncryptedFrame::Classify { id, parameters, parts } => {
                header(&mut out, kind::CLASSIFY, *parameters, *id);
                out.extend_from_slice(&[parts.len() as u8, 0, 0, 0]);
                for p in parts {
                    bytes(&mut out, p);
                }
            }
            EncryptedFrame::KeyAccepted { id } => {
                header(&mut out, kind::KEY_ACCEPTED, PARAMETERS_ID, *id)
            }
            EncryptedFrame::Answer { id, queue_us, server_us, ciphertext } => {
                header(&mut out, kind::ANSWER, PARAMETERS_ID, *id);
                out.extend_from_slice(&queue_us.to_le_bytes());
                out.extend_from_slice(&server_us.to_le_bytes());
                bytes(&mut out, ciphertext);
            }
            EncryptedFrame::Error { id, code, message } => {
                header(&mut out, kind::ERROR, 0, *id);
                write_error_body(&mut out, *code as u16, message);
            }
        }
        out
    }

    /// Decode one frame, every length checked before it is used.
    ///
    /// # Errors
    /// An [`EncryptedWireError`] naming the first problem found.
    pub fn decode(frame: &[u8]) -> Result<Self, EncryptedWireError> {
        let mut c = Cursor::new(frame);
        if c.take(4)? != ENCRYPTED_MAGIC {
            return Err(EncryptedWireError::BadMagic);
        }
        let version = c.u16()?;
        if version != ENCRYPTED_PROTOCOL_VERSION {
            return Err(EncryptedWireError::Version(version));
        }
        let (kind, parameters, id) = (c.u8()?, c.u8()?, c.u64()?);
        let frame = match kind {
            kind::KEY => {
                let key = read_bytes(&mut c, "evaluation key", MAX_KEY_BYTES)?;
                EncryptedFrame::Key { id, parameters, key }
            }
            kind::CLASSIFY => {
                let n = usize::from(c.u8()?);
                c.take(3)?;
                if n == 0 || n > MAX_PARTS {
                    return Err(EncryptedWireError::Parts(n));
                }
                let parts = (0..n)
                    .map(|_| read_bytes(&mut c, "ciphertext", MAX_CIPHERTEXT_BYTES))
                    .collect::<Result<_, _>>()?;
                EncryptedFrame::Classify { id, parameters, parts }
            }
            kind::KEY_ACCEPTED => EncryptedFrame::KeyAccepted { id },
            kind::ANSWER => EncryptedFrame::Answer {
                id,
                queue_us: c.u32()?,
                server_us: c.u32()?,
                ciphertext: read_bytes(&mut c, "ciphertext", MAX_CIPHERTEXT_BYTES)?,
            },
            kind::ERROR => {
                let (code, message) =
                    read_error_body(&mut c).ok_or(EncryptedWireError::ErrorFrame)?;
                let code =
                    EncryptedErrorCode::from_u16(code).ok_or(EncryptedWireError::ErrorFrame)?;
                EncryptedFrame::Error { id, code, message }
            }
            other => return Err(EncryptedWireError::Kind(other)),
        };
        match c.rest().len() {
            0 => Ok(frame),
            extra => Err(EncryptedWireError::Trailing(extra)),
        }
    }
}

/// `length u32, bytes`, the length checked against `limit` and the bytes present.
fn read_bytes(
    c: &mut Cursor<'_>,
    what: &'static str,
    limit: usize,
) -> Result<Vec<u8>, EncryptedWireError> {
    let len = c.u32()? as usize;
    if len > limit {
        return Err(EncryptedWireError::TooLong { what, got: len, limit });
    }
    Ok(c.take(len)?.to_vec())
}

/// The request id of a frame whose header is readable.
pub fn peek_encrypted_id(frame: &[u8]) -> Option<u64> {
    (frame.len() >= 16 && frame[..4] == ENCRYPTED_MAGIC)
        .then(|| u64::from_le_bytes(frame[8..16].try_into().expect("8 bytes")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_kinds() -> Vec<EncryptedFrame> {
        vec![
            EncryptedFrame::Key { id: 1, parameters: PARAMETERS_ID, key: vec![7; 300] },
            EncryptedFrame::Classify {
                id: 2,
                parameters: PARAMETERS_ID,
                parts: vec![vec![1; 10], vec![], vec![3; 5]],
            },
            EncryptedFrame::KeyAccepted { id: 3 },
            EncryptedFrame::Answer {
                id: 4,
                queue_us: 17,
                server_us: 32_000,
                ciphertext: vec![9; 64],
            },
            EncryptedFrame::Error {
                id: 5,
                code: EncryptedErrorCode::Evicted,
                message: "send the key again".into(),
            },
        ]
    }

    #[test]
    fn every_kind_round_trips() {
        for f in all_kinds() {
            assert_eq!(EncryptedFrame::decode(&f.encode()).unwrap(), f);
            assert_eq!(peek_encrypted_id(&f.encode()), Some(f.id()));
        }
    }

    #[test]
    fn every_cut_and_every_excess_is_refused() {
        for f in all_kinds() {
            let bytes = f.encode();
            for cut in 0..bytes.len() {
                assert!(EncryptedFrame::decode(&bytes[..cut]).is_err(), "{f:?} cut at {cut}");
            }
            let mut long = bytes.clone();
            long.push(0);
            assert_eq!(EncryptedFrame::decode(&long), Err(EncryptedWireError::Trailing(1)));
        }
    }

    #[test]
    fn lengths_past_their_limits_are_refused_before_reading() {
        let mut key = EncryptedFrame::Key { id: 1, parameters: 1, key: vec![] }.encode();
        key[16..20].copy_from_slice(&(MAX_KEY_BYTES as u32 + 1).to_le_bytes());
        assert!(matches!(
            EncryptedFrame::decode(&key),
            Err(EncryptedWireError::TooLong { what: "evaluation key", .. })
        ));
        let mut classify =
            EncryptedFrame::Classify { id: 1, parameters: 1, parts: vec![vec![]] }.encode();
        classify[16] = (MAX_PARTS + 1) as u8;
        assert_eq!(
            EncryptedFrame::decode(&classify),
            Err(EncryptedWireError::Parts(MAX_PARTS + 1))
        );
        classify[16] = 0;
        assert_eq!(EncryptedFrame::decode(&classify), Err(EncryptedWireError::Parts(0)));
        let mut other = EncryptedFrame::KeyAccepted { id: 1 }.encode();
        other[4] = 9;
        assert_eq!(EncryptedFrame::decode(&other), Err(EncryptedWireError::Version(9)));
        other[4] = ENCRYPTED_PROTOCOL_VERSION as u8;
        other[6] = 0x44;
        assert_eq!(EncryptedFrame::decode(&other), Err(EncryptedWireError::Kind(0x44)));
        assert_eq!(EncryptedFrame::decode(b"SPLT0000000000000"), Err(EncryptedWireError::BadMagic));
    }
}
