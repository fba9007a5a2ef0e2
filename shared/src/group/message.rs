//! Control messages of a device group: JSON text messages on the `/group` WebSocket, one
//! object per message, its kind in `"type"`.
//!
//! A device first sends `create` or `join` (with a [`DeviceInfo`]); the server answers
//! `joined` with the device's peer number and the member list, and sends `members` to everyone
//! whenever the list changes (a join, a leave, a status). `status` is the heartbeat; `signal`
//! carries WebRTC offers, answers and ICE candidates to one other member, opaque to the server.
//! Anything the server refuses comes back as `error` with a [`GroupErrorCode`] and leaves the
//! connection, the group and every other group as they were.

use serde::{Deserialize, Serialize};

use super::{MAX_DEVICE_ID_BYTES, MAX_NAME_CHARS};

/// What a device computes with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// A browser on WebGPU.
    Webgpu,
    /// A browser on its CPU (wasm).
    Cpu,
    /// The native device agent (burn flex).
    Native,
}

/// Power as the platform reports it (the Battery Status API in Chromium).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum PowerState {
    /// On mains power.
    Charging,
    /// On battery, with its level from 0 to 1.
    Battery {
        /// Charge left, 0 to 1.
        level: f64,
    },
    /// The platform does not say.
    #[default]
    Unknown,
}

impl PowerState {
    /// Whether a device should be spared: on battery below `threshold` (0 to 1).
    pub fn low(&self, threshold: f64) -> bool {
        matches!(self, Self::Battery { level } if *level < threshold)
    }
}

/// What a device says of itself when it joins.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceInfo {
    /// A stable id the device chose (kept across reconnects), `[A-Za-z0-9_-]`, at most
    /// [`MAX_DEVICE_ID_BYTES`]; unique in its group.
    pub id: String,
    /// A name for people ("Anna's phone"), at most [`MAX_NAME_CHARS`] characters.
    pub name: String,
    /// What it computes with.
    pub backend: Backend,
    /// Measured milliseconds for the whole network on one image (a warm-up run or the
    /// profiler's edge timings): the planner's notion of its speed.
    pub ms_per_image: f64,
    /// Memory it may spend on weights and activations, in MB, if it knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u32>,
    /// Its power state.
    #[serde(default)]
    pub power: PowerState,
    /// Whether it runs a language model's middle blocks for the group's split chats
    /// ([`super::llm_stage`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub llm: bool,
}

impl DeviceInfo {
    /// Check every field a client controls.
    ///
    /// # Errors
    /// A message saying which field is wrong.
    pub fn check(&self) -> Result<(), String> {
        let id_ok = !self.id.is_empty()
            && self.id.len() <= MAX_DEVICE_ID_BYTES
            && self.id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !id_ok {
            return Err(format!(
                "device id must be 1 to {MAX_DEVICE_ID_BYTES} characters of A-Z, a-z, 0-9, - and _"
            ));
        }
        let chars = self.name.chars().count();
        if chars == 0 || chars > MAX_NAME_CHARS || self.name.chars().any(char::is_control) {
            return Err(format!("device name must be 1 to {MAX_NAME_CHARS} printable characters"));
        }
        if !(self.ms_per_image.is_finite() && self.ms_per_image > 0.0 && self.ms_per_image < 1e7) {
            return Err("msPerImage must be a positive number of milliseconds".into());
        }
        if let PowerState::Battery { level } = self.power
            && !(0.0..=1.0).contains(&level)
        {
            return Err("battery level must be between 0 and 1".into());
        }
        Ok(())
    }
}

/// A member as every member sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Member {
    /// The number the server gave it in this group: what `signal` and relayed frames address.
    pub peer: u32,
    /// What it said of itself (its latest status applied).
    #[serde(flatten)]
    pub device: DeviceInfo,
    /// Its load as it last reported: requests it is working on.
    pub load: u32,
    /// Milliseconds since the server last heard from it.
    pub last_seen_ms: u64,
}

/// From a device to the server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", rename_all_fields = "camelCase")]
pub enum ClientMessage {
    /// Start a new group and join it; the server picks its join code.
    Create {
        /// This device.
        device: DeviceInfo,
    },
    /// Join the group with this code.
    Join {
        /// The join code (upper case; see [`super::valid_code`]).
        code: String,
        /// This device.
        device: DeviceInfo,
    },
    /// Heartbeat with what changed: load, power, a re-measured speed.
    Status {
        /// Requests in progress.
        load: u32,
        /// Power now.
        #[serde(default)]
        power: PowerState,
        /// A new speed measurement, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ms_per_image: Option<f64>,
    },
    /// Signalling for a direct channel to member `to` (offer, answer or ICE candidate),
    /// passed on as it is.
    Signal {
        /// The member it is for.
        to: u32,
        /// Anything JSON; the server does not look inside.
        data: serde_json::Value,
    },
    /// Leave the group (closing the socket does the same).
    Leave,
}

/// Why the server refused a control message or a relayed frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupErrorCode {
    /// Not JSON, not a known message, or a field out of range.
    BadMessage,
    /// Over [`super::MAX_CONTROL_BYTES`] (or a relayed frame over its limit).
    TooLarge,
    /// No group has this code.
    UnknownGroup,
    /// The code is past [`super::CODE_TTL_S`]: ask a member for the group's new code.
    ExpiredCode,
    /// The group has [`super::MAX_DEVICES_PER_GROUP`] members.
    GroupFull,
    /// The server holds as many groups as it allows.
    TooManyGroups,
    /// Another live member of the group uses this device id.
    IdInUse,
    /// This connection is in no group yet (or is already in one, for `create`/`join`).
    NotJoined,
    /// Already a member: leave first.
    AlreadyJoined,
    /// No member with that peer number.
    UnknownPeer,
    /// That member is not reading its messages (its queue on the server is full).
    PeerBusy,
    /// Too many joins or messages from this address; retry later.
    RateLimited,
}

impl GroupErrorCode {
    /// The code's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::BadMessage => "bad_message",
            Self::TooLarge => "too_large",
            Self::UnknownGroup => "unknown_group",
            Self::ExpiredCode => "expired_code",
            Self::GroupFull => "group_full",
            Self::TooManyGroups => "too_many_groups",
            Self::IdInUse => "id_in_use",
            Self::NotJoined => "not_joined",
            Self::AlreadyJoined => "already_joined",
            Self::UnknownPeer => "unknown_peer",
            Self::PeerBusy => "peer_busy",
            Self::RateLimited => "rate_limited",
        }
    }
}

/// From the server to a device.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", rename_all_fields = "camelCase")]
pub enum ServerMessage {
    /// This device is in the group.
    Joined {
        /// The group's join code.
        code: String,
        /// Seconds the code still admits new members.
        code_expires_s: u64,
        /// This device's peer number.
        you: u32,
        /// Everyone in the group, this device included.
        members: Vec<Member>,
    },
    /// The member list changed.
    Members {
        /// Everyone in the group.
        members: Vec<Member>,
    },
    /// Signalling from member `from`.
    Signal {
        /// Who sent it.
        from: u32,
        /// As it was sent.
        data: serde_json::Value,
    },
    /// A refusal; the connection stays open.
    Error {
        /// Why, for programs.
        code: GroupErrorCode,
        /// Why, for people.
        message: String,
    },
}

impl ServerMessage {
    /// An error message.
    pub fn error(code: GroupErrorCode, message: impl Into<String>) -> Self {
        Self::Error { code, message: message.into() }
    }

    /// The JSON text.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("server messages serialize")
    }
}

impl ClientMessage {
    /// Parse a control message, checking its size and its device fields.
    ///
    /// # Errors
    /// [`GroupErrorCode::TooLarge`] or [`GroupErrorCode::BadMessage`] with a reason.
    pub fn parse(text: &str) -> Result<Self, (GroupErrorCode, String)> {
        if text.len() > super::MAX_CONTROL_BYTES {
            return Err((
                GroupErrorCode::TooLarge,
                format!(
                    "a {}-byte control message is over the limit of {} bytes",
                    text.len(),
                    super::MAX_CONTROL_BYTES
                ),
            ));
        }
        let message: Self = serde_json::from_str(text)
            .map_err(|e| (GroupErrorCode::BadMessage, format!("not a control message: {e}")))?;
        let device = match &message {
            Self::Create { device } | Self::Join { device, .. } => Some(device),
            _ => None,
        };
        if let Some(device) = device {
            device.check().map_err(|e| (GroupErrorCode::BadMessage, e))?;
        }
        if let Self::Status { ms_per_image: Some(ms), .. } = message
            && !(ms.is_finite() && ms > 0.0 && ms < 1e7)
        {
            return Err((GroupErrorCode::BadMessage, "msPerImage must be positive".into()));
        }
        if let Self::Status { power: PowerState::Battery { level }, .. } = message
            && !(0.0..=1.0).contains(&level)
        {
            return Err((
                GroupErrorCode::BadMessage,
                "battery level must be between 0 and 1".into(),
            ));
        }
        Ok(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device() -> DeviceInfo {
        DeviceInfo {
            id: "phone-1".into(),
            name: "Anna's phone".into(),
            backend: Backend::Webgpu,
            ms_per_image: 42.0,
            memory_mb: Some(512),
            power: PowerState::Battery { level: 0.8 },
            llm: false,
        }
    }

    #[test]
    fn messages_round_trip_as_tagged_json() {
        let join = ClientMessage::Join { code: "ABCDEF".into(), device: device() };
        let text = serde_json::to_string(&join).unwrap();
        assert!(text.contains(r#""type":"join""#), "{text}");
        assert!(text.contains(r#""power":{"state":"battery","level":0.8}"#), "{text}");
        assert_eq!(ClientMessage::parse(&text).unwrap(), join);
        let members = ServerMessage::Members {
            members: vec![Member { peer: 3, device: device(), load: 1, last_seen_ms: 20 }],
        };
        let text = members.to_json();
        assert!(
            text.contains(r#""peer":3"#) && text.contains(r#""name":"Anna's phone""#),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<ServerMessage>(&text).unwrap(), members);
        let error = ServerMessage::error(GroupErrorCode::ExpiredCode, "old code").to_json();
        assert!(error.contains(r#""code":"expired_code""#), "{error}");
    }

    #[test]
    fn a_browser_may_leave_out_what_it_does_not_know() {
        let text = r#"{"type":"create","device":{"id":"a","name":"tv","backend":"native","msPerImage":80}}"#;
        let ClientMessage::Create { device } = ClientMessage::parse(text).unwrap() else {
            panic!("a create")
        };
        assert_eq!((device.memory_mb, device.power), (None, PowerState::Unknown));
        let status = ClientMessage::parse(r#"{"type":"status","load":2}"#).unwrap();
        assert_eq!(
            status,
            ClientMessage::Status { load: 2, power: PowerState::Unknown, ms_per_image: None }
        );
    }

    #[test]
    fn bad_messages_say_what_is_wrong() {
        let code = |t: &str| ClientMessage::parse(t).unwrap_err().0;
        assert_eq!(code("not json"), GroupErrorCode::BadMessage);
        assert_eq!(code(r#"{"type":"teleport"}"#), GroupErrorCode::BadMessage);
        let big = format!(r#"{{"type":"signal","to":1,"data":"{}"}}"#, "x".repeat(20_000));
        assert_eq!(code(&big), GroupErrorCode::TooLarge);
        for bad in [
            DeviceInfo { id: "has space".into(), ..device() },
            DeviceInfo { id: String::new(), ..device() },
            DeviceInfo { id: "x".repeat(65), ..device() },
            DeviceInfo { name: "n".repeat(41), ..device() },
            DeviceInfo { name: "bell\u{7}".into(), ..device() },
            DeviceInfo { ms_per_image: 0.0, ..device() },
            DeviceInfo { ms_per_image: f64::INFINITY, ..device() },
            DeviceInfo { power: PowerState::Battery { level: 1.5 }, ..device() },
        ] {
            let text =
                serde_json::to_string(&ClientMessage::Create { device: bad.clone() }).unwrap();
            assert_eq!(code(&text), GroupErrorCode::BadMessage, "{bad:?}");
        }
        assert_eq!(
            code(r#"{"type":"status","load":1,"msPerImage":-3}"#),
            GroupErrorCode::BadMessage
        );
    }

    #[test]
    fn low_power_is_battery_below_the_threshold() {
        assert!(PowerState::Battery { level: 0.1 }.low(0.2));
        assert!(!PowerState::Battery { level: 0.5 }.low(0.2));
        assert!(!PowerState::Charging.low(0.2));
        assert!(!PowerState::Unknown.low(0.2));
    }
}
