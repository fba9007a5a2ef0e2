//! The envelope of a binary message between two members of a group, sent through the server
//! when they have no direct channel (and over a direct channel too, so both paths carry the
//! same bytes):
//!
//! ```text
//! 0  magic    "SPLG"
//! 4  version  u16   RELAY_VERSION
//! 6  reserved u16   0
//! 8  peer     u32   to the server: the member it is for; from the server: who sent it
//! 12 payload        a protocol frame (crate::protocol): a request, or the reply to one
//! ```
//!
//! The server reads the 12 bytes, swaps the recipient for the sender (so nobody can claim to
//! be another member) and passes the payload on unread.

use crate::protocol::MAX_FRAME_BYTES;

/// First four bytes of a relayed message.
pub const RELAY_MAGIC: [u8; 4] = *b"SPLG";
/// Version of the envelope.
pub const RELAY_VERSION: u16 = 1;
/// Bytes before the payload.
pub const RELAY_HEADER_LEN: usize = 12;
/// Largest relayed message: one protocol frame in its envelope.
pub const MAX_RELAY_BYTES: usize = MAX_FRAME_BYTES + RELAY_HEADER_LEN;

/// Why an envelope could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RelayError {
    /// Shorter than the header.
    #[error("a relayed message of {0} bytes is shorter than its {RELAY_HEADER_LEN}-byte header")]
    Truncated(usize),
    /// Not "SPLG".
    #[error("not a relayed message (bad magic)")]
    BadMagic,
    /// Another envelope version.
    #[error("relay envelope version {0} is not supported (this side speaks {RELAY_VERSION})")]
    UnsupportedVersion(u16),
    /// Over [`MAX_RELAY_BYTES`].
    #[error("a relayed message of {0} bytes is over the limit of {MAX_RELAY_BYTES} bytes")]
    TooLarge(usize),
}

/// A relayed message: who it is for (or from), and the frame it carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelayFrame<'a> {
    /// The other member's peer number.
    pub peer: u32,
    /// The frame, unread.
    pub payload: &'a [u8],
}

impl<'a> RelayFrame<'a> {
    /// Read an envelope.
    ///
    /// # Errors
    /// A [`RelayError`] for a short, foreign, newer or oversized message.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, RelayError> {
        if bytes.len() > MAX_RELAY_BYTES {
            return Err(RelayError::TooLarge(bytes.len()));
        }
        if bytes.len() < RELAY_HEADER_LEN {
            return Err(RelayError::Truncated(bytes.len()));
        }
        if bytes[..4] != RELAY_MAGIC {
            return Err(RelayError::BadMagic);
        }
        let version = u16::from_le_bytes([bytes[4], bytes[5]]);
        if version != RELAY_VERSION {
            return Err(RelayError::UnsupportedVersion(version));
        }
        let peer = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
        Ok(Self { peer, payload: &bytes[RELAY_HEADER_LEN..] })
    }

    /// The envelope and payload as bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(RELAY_HEADER_LEN + self.payload.len());
        out.extend_from_slice(&RELAY_MAGIC);
        out.extend_from_slice(&RELAY_VERSION.to_le_bytes());
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&self.peer.to_le_bytes());
        out.extend_from_slice(self.payload);
        out
    }

    /// The same message readdressed: what the server sends on, naming the sender.
    pub fn readdressed(bytes: &[u8], from: u32) -> Vec<u8> {
        let mut out = bytes.to_vec();
        out[8..12].copy_from_slice(&from.to_le_bytes());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_round_trip_and_are_readdressed() {
        let bytes = RelayFrame { peer: 7, payload: b"SPLT..." }.to_bytes();
        assert_eq!(bytes.len(), RELAY_HEADER_LEN + 7);
        let frame = RelayFrame::parse(&bytes).unwrap();
        assert_eq!((frame.peer, frame.payload), (7, &b"SPLT..."[..]));
        let on = RelayFrame::readdressed(&bytes, 2);
        assert_eq!(RelayFrame::parse(&on).unwrap(), RelayFrame { peer: 2, payload: b"SPLT..." });
    }

    #[test]
    fn bad_envelopes_are_typed_errors() {
        let good = RelayFrame { peer: 1, payload: &[] }.to_bytes();
        assert_eq!(RelayFrame::parse(&good[..11]), Err(RelayError::Truncated(11)));
        let mut foreign = good.clone();
        foreign[0] = b'X';
        assert_eq!(RelayFrame::parse(&foreign), Err(RelayError::BadMagic));
        let mut newer = good.clone();
        newer[4] = 9;
        assert_eq!(RelayFrame::parse(&newer), Err(RelayError::UnsupportedVersion(9)));
        let huge = vec![0u8; MAX_RELAY_BYTES + 1];
        assert_eq!(RelayFrame::parse(&huge), Err(RelayError::TooLarge(MAX_RELAY_BYTES + 1)));
    }
}
