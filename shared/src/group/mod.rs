//! Device groups: the devices one person owns (a phone, a laptop, a TV box) pooling their
//! compute for one inference, a batch of them, or one fused answer.
//!
//! What every member and the server must agree on lives here, without networking:
//!
//! - [`message`]: the control messages (JSON text on the server's `/group` WebSocket): create
//!   or join a group by its join code, the live member list, status heartbeats, and the
//!   signalling that sets up direct device-to-device channels;
//! - [`relay`]: the envelope of a binary message one member sends another through the server
//!   when no direct channel exists; what it carries is an ordinary protocol frame
//!   ([`crate::protocol`]), so a device answers a relayed request exactly as the server would;
//! - [`route`]: a pipeline's route, the stages a request still has to run and who gets the
//!   answer, sent ahead of its frame from member to member;
//! - [`tasks`]: how a batch is shared out over members in proportion to their measured speed;
//! - [`chain`]: where to cut the network across a chain of devices (and the cloud), for the
//!   fastest single answer or the highest stream throughput;
//! - [`fusion`]: several devices' answers about one object fused into one;
//! - [`llm_stage`]: a split chat's middle blocks on a member, between the asker and the server.
//!
//! The limits below bound what one group or one message may cost the server; each is named
//! so clients can stay under it and tests can aim at it.

pub mod chain;
pub mod fusion;
pub mod llm_stage;
pub mod message;
pub mod relay;
pub mod route;
pub mod tasks;

pub use llm_stage::LlmStage;
pub use message::{
    Backend, ClientMessage, DeviceInfo, GroupErrorCode, Member, PowerState, ServerMessage,
};
pub use relay::{RelayError, RelayFrame};
pub use route::{Hop, Route, RouteStage};

/// Characters of a join code: no 0/O, 1/I/L, so a code read aloud or off a screen is typed
/// right.
pub const CODE_ALPHABET: &[u8] = b"23456789ABCDEFGHJKMNPQRSTUVWXYZ";
/// Length of a join code: 31^6 ≈ 8.9·10^8 codes, against a join rate the server limits.
pub const CODE_LEN: usize = 6;
/// Most devices in one group.
pub const MAX_DEVICES_PER_GROUP: usize = 8;
/// Longest control message (JSON text), in bytes: a WebRTC offer with its ICE candidates fits
/// (a few KB), a flood of them does not grow the server's buffers.
pub const MAX_CONTROL_BYTES: usize = 16 * 1024;
/// Longest device name, in characters.
pub const MAX_NAME_CHARS: usize = 40;
/// Longest device id a client proposes, in bytes (`[A-Za-z0-9_-]`).
pub const MAX_DEVICE_ID_BYTES: usize = 64;
/// Seconds a join code admits new members after the group was created; members already in
/// keep the group alive as long as they stay.
pub const CODE_TTL_S: u64 = 600;
/// Seconds without any message (a status heartbeat at least) after which a member is dropped.
pub const HEARTBEAT_TIMEOUT_S: u64 = 15;
/// How often a member should send its status.
pub const HEARTBEAT_INTERVAL_S: u64 = 5;

/// Whether `code` has the shape of a join code (the server still has to know it).
pub fn valid_code(code: &str) -> bool {
    code.len() == CODE_LEN && code.bytes().all(|b| CODE_ALPHABET.contains(&b))
}

/// A join code from `CODE_LEN` random numbers (any values: each is reduced onto the alphabet).
pub fn code_from(random: [u32; CODE_LEN]) -> String {
    random.iter().map(|r| CODE_ALPHABET[*r as usize % CODE_ALPHABET.len()] as char).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_made_and_recognised() {
        let code = code_from([0, 1, 2, 30, 31, u32::MAX]);
        assert_eq!(code.len(), CODE_LEN);
        assert!(valid_code(&code), "{code}");
        assert!(!valid_code("ABC12"), "too short");
        assert!(!valid_code("ABCDE0"), "0 is not in the alphabet");
        assert!(!valid_code("abcdef"), "lower case is not a code");
        assert!(!valid_code("ÄBCDEF"));
    }
}
