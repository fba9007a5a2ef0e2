//! The device-group registry: groups by join code, their members, and the queues that carry
//! control messages and relayed frames to each member's socket.
//!
//! Bounded everywhere: [`GroupLimits::max_groups`] groups, [`MAX_DEVICES_PER_GROUP`] members
//! each, [`OUTBOX`] messages waiting per member (a member that stops reading gets nothing more,
//! and a sender to it is told, instead of the server buffering without end).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use split_shared::group::{
    CODE_LEN, DeviceInfo, GroupErrorCode, MAX_DEVICES_PER_GROUP, Member, PowerState, ServerMessage,
    code_from, valid_code,
};
use tokio::sync::mpsc;

/// Messages waiting for one member's socket.
pub const OUTBOX: usize = 64;

/// What goes out on a member's socket.
#[derive(Debug)]
pub enum Outbound {
    /// A control message (JSON).
    Text(String),
    /// A relayed frame, already readdressed.
    Binary(Vec<u8>),
}

/// Limits an operator sets.
#[derive(Clone, Copy, Debug)]
pub struct GroupLimits {
    /// Groups held at once.
    pub max_groups: usize,
    /// How long a join code admits new members.
    pub code_ttl: Duration,
}

/// A refusal: the code and what to tell the client.
pub type Refusal = (GroupErrorCode, String);

struct Entry {
    device: DeviceInfo,
    load: u32,
    last_seen: Instant,
    outbox: mpsc::Sender<Outbound>,
}

struct Group {
    created: Instant,
    next_peer: u32,
    members: BTreeMap<u32, Entry>,
}

impl Group {
    fn snapshot(&self, now: Instant) -> Vec<Member> {
        self.members
            .iter()
            .map(|(peer, e)| Member {
                peer: *peer,
                device: e.device.clone(),
                load: e.load,
                last_seen_ms: now.duration_since(e.last_seen).as_millis() as u64,
            })
            .collect()
    }

    /// Send the member list to everyone (a member whose outbox is full misses this one; the
    /// next change brings it up to date).
    fn broadcast_members(&self, now: Instant) {
        let text = ServerMessage::Members { members: self.snapshot(now) }.to_json();
        for e in self.members.values() {
            let _ = e.outbox.try_send(Outbound::Text(text.clone()));
        }
    }
}

/// Where a connection is: its group's code and its peer number there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seat {
    /// The group's join code.
    pub code: String,
    /// This member's number.
    pub peer: u32,
}

/// Every group on this server.
pub struct Groups {
    limits: GroupLimits,
    groups: Mutex<HashMap<String, Group>>,
}

impl Groups {
    /// An empty registry.
    pub fn new(limits: GroupLimits) -> Self {
        Self { limits, groups: Mutex::new(HashMap::new()) }
    }

    /// Groups held now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Group>> {
        // A panic while holding the lock leaves plain data behind: keep serving it.
        self.groups.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Start a group with `device` in it; its seat and the `joined` message.
    ///
    /// # Errors
    /// [`GroupErrorCode::TooManyGroups`] at the limit.
    pub fn create(
        &self,
        device: DeviceInfo,
        outbox: mpsc::Sender<Outbound>,
        now: Instant,
    ) -> Result<(Seat, ServerMessage), Refusal> {
        let mut groups = self.lock();
        if groups.len() >= self.limits.max_groups {
            return Err((
                GroupErrorCode::TooManyGroups,
                format!("this server holds {} groups, its limit; try later", groups.len()),
            ));
        }
        let code = loop {
            let code = random_code();
            if !groups.contains_key(&code) {
                break code;
            }
        };
        let mut group = Group { created: now, next_peer: 1, members: BTreeMap::new() };
        group.members.insert(1, Entry { device, load: 0, last_seen: now, outbox });
        group.next_peer = 2;
        let joined = ServerMessage::Joined {
            code: code.clone(),
            code_expires_s: self.limits.code_ttl.as_secs(),
            you: 1,
            members: group.snapshot(now),
        };
        groups.insert(code.clone(), group);
        Ok((Seat { code, peer: 1 }, joined))
    }

    /// Join the group `code`; the seat and the `joined` message (the others get `members`).
    ///
    /// # Errors
    /// `unknown_group`, `expired_code`, `group_full` or `id_in_use`.
    pub fn join(
        &self,
        code: &str,
        device: DeviceInfo,
        outbox: mpsc::Sender<Outbound>,
        now: Instant,
    ) -> Result<(Seat, ServerMessage), Refusal> {
        let mut groups = self.lock();
        let unknown = || {
            (
                GroupErrorCode::UnknownGroup,
                format!("no group has the code {code:?}: check it, or create a group"),
            )
        };
        if !valid_code(code) {
            return Err(unknown());
        }
        let group = groups.get_mut(code).ok_or_else(unknown)?;
        let age = now.duration_since(group.created);
        if age > self.limits.code_ttl {
            return Err((
                GroupErrorCode::ExpiredCode,
                format!(
                    "the code {code} stopped admitting new devices {} s after the group started; ask a member to start a new group",
                    self.limits.code_ttl.as_secs()
                ),
            ));
        }
        if group.members.len() >= MAX_DEVICES_PER_GROUP {
            return Err((
                GroupErrorCode::GroupFull,
                format!("the group has {MAX_DEVICES_PER_GROUP} devices, its limit"),
            ));
        }
        if group.members.values().any(|e| e.device.id == device.id) {
            return Err((
                GroupErrorCode::IdInUse,
                format!("another device in this group has the id {:?}", device.id),
            ));
        }
        let peer = group.next_peer;
        group.next_peer += 1;
        group.members.insert(peer, Entry { device, load: 0, last_seen: now, outbox });
        let joined = ServerMessage::Joined {
            code: code.to_string(),
            code_expires_s: self.limits.code_ttl.saturating_sub(age).as_secs(),
            you: peer,
            members: group.snapshot(now),
        };
        // The others hear of it; the new member has the list in its `joined`.
        let text = ServerMessage::Members { members: group.snapshot(now) }.to_json();
        for (_, e) in group.members.iter().filter(|(p, _)| **p != peer) {
            let _ = e.outbox.try_send(Outbound::Text(text.clone()));
        }
        Ok((Seat { code: code.to_string(), peer }, joined))
    }

    /// A member's heartbeat: what it reports now; everyone gets the new list.
    pub fn status(
        &self,
        seat: &Seat,
        load: u32,
        power: PowerState,
        ms_per_image: Option<f64>,
        now: Instant,
    ) {
        let mut groups = self.lock();
        let Some(group) = groups.get_mut(&seat.code) else { return };
        if let Some(e) = group.members.get_mut(&seat.peer) {
            e.load = load;
            e.device.power = power;
            if let Some(ms) = ms_per_image {
                e.device.ms_per_image = ms;
            }
            e.last_seen = now;
        }
        group.broadcast_members(now);
    }

    /// Note that a member was heard from (any message).
    pub fn seen(&self, seat: &Seat, now: Instant) {
        if let Some(e) = self.lock().get_mut(&seat.code).and_then(|g| g.members.get_mut(&seat.peer))
        {
            e.last_seen = now;
        }
    }

    /// Pass `message` to member `to` of the seat's group.
    ///
    /// # Errors
    /// `unknown_peer` when there is no such member (or it is the sender), `peer_busy` when
    /// its outbox is full.
    pub fn send_to(&self, seat: &Seat, to: u32, message: Outbound) -> Result<(), Refusal> {
        let groups = self.lock();
        let target = groups
            .get(&seat.code)
            .and_then(|g| g.members.get(&to))
            .filter(|_| to != seat.peer)
            .ok_or_else(|| {
                (GroupErrorCode::UnknownPeer, format!("no other member of this group is peer {to}"))
            })?;
        target.outbox.try_send(message).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => (
                GroupErrorCode::PeerBusy,
                format!("peer {to} is not reading its messages; try later or pick another"),
            ),
            mpsc::error::TrySendError::Closed(_) => {
                (GroupErrorCode::UnknownPeer, format!("peer {to} just left"))
            }
        })
    }

    /// Remove a member (it left, closed, or timed out); the rest get the new list, and an
    /// empty group is gone.
    pub fn leave(&self, seat: &Seat, now: Instant) {
        let mut groups = self.lock();
        let Some(group) = groups.get_mut(&seat.code) else { return };
        group.members.remove(&seat.peer);
        if group.members.is_empty() {
            groups.remove(&seat.code);
        } else {
            group.broadcast_members(now);
        }
    }
}

/// A join code from the operating system's random source.
fn random_code() -> String {
    let mut bytes = [0u8; 4 * CODE_LEN];
    getrandom::fill(&mut bytes).expect("the operating system's random source");
    let mut random = [0u32; CODE_LEN];
    for (r, b) in random.iter_mut().zip(bytes.chunks_exact(4)) {
        *r = u32::from_le_bytes(b.try_into().expect("4 bytes"));
    }
    code_from(random)
}

#[cfg(test)]
mod tests {
    use super::*;
    use split_shared::group::Backend;

    fn device(id: &str) -> DeviceInfo {
        DeviceInfo {
            id: id.into(),
            name: id.into(),
            backend: Backend::Cpu,
            ms_per_image: 50.0,
            memory_mb: None,
            power: PowerState::Unknown,
            llm: false,
        }
    }

    fn groups(max_groups: usize) -> Groups {
        Groups::new(GroupLimits { max_groups, code_ttl: Duration::from_secs(60) })
    }

    fn outbox() -> (mpsc::Sender<Outbound>, mpsc::Receiver<Outbound>) {
        mpsc::channel(OUTBOX)
    }

    #[test]
    fn members_join_see_each_other_and_leave() {
        let g = groups(4);
        let now = Instant::now();
        let (tx1, mut rx1) = outbox();
        let (seat1, _) = g.create(device("a"), tx1, now).unwrap();
        assert!(valid_code(&seat1.code));
        let (tx2, _rx2) = outbox();
        let (seat2, joined) = g.join(&seat1.code, device("b"), tx2, now).unwrap();
        let ServerMessage::Joined { you, members, .. } = joined else { panic!("joined") };
        assert_eq!((you, members.len()), (2, 2));
        let Some(Outbound::Text(t)) = rx1.try_recv().ok() else { panic!("a members update") };
        assert!(t.contains(r#""type":"members""#) && t.contains(r#""id":"b""#), "{t}");
        g.send_to(&seat2, 1, Outbound::Binary(vec![1, 2])).unwrap();
        assert!(matches!(rx1.try_recv(), Ok(Outbound::Binary(b)) if b == [1, 2]));
        assert_eq!(
            g.send_to(&seat2, 2, Outbound::Binary(vec![])).unwrap_err().0,
            GroupErrorCode::UnknownPeer
        );
        g.leave(&seat2, now);
        assert_eq!(
            g.send_to(&seat1, 2, Outbound::Binary(vec![])).unwrap_err().0,
            GroupErrorCode::UnknownPeer
        );
        g.leave(&seat1, now);
        assert!(g.is_empty(), "an empty group is gone");
    }

    #[test]
    fn bad_joins_are_refused_with_their_reason() {
        let g = groups(1);
        let now = Instant::now();
        let (seat, _) = g.create(device("a"), outbox().0, now).unwrap();
        let join = |code: &str, id: &str, at: Instant| {
            g.join(code, device(id), outbox().0, at).unwrap_err().0
        };
        assert_eq!(join("ZZZZZZ", "b", now), GroupErrorCode::UnknownGroup);
        assert_eq!(join("nope", "b", now), GroupErrorCode::UnknownGroup);
        assert_eq!(join(&seat.code, "a", now), GroupErrorCode::IdInUse);
        assert_eq!(
            join(&seat.code, "b", now + Duration::from_secs(61)),
            GroupErrorCode::ExpiredCode
        );
        assert_eq!(
            g.create(device("c"), outbox().0, now).unwrap_err().0,
            GroupErrorCode::TooManyGroups
        );
        for i in 1..MAX_DEVICES_PER_GROUP {
            g.join(&seat.code, device(&format!("d{i}")), outbox().0, now).unwrap();
        }
        assert_eq!(join(&seat.code, "late", now), GroupErrorCode::GroupFull);
    }

    #[test]
    fn a_member_that_stops_reading_is_reported_busy() {
        let g = groups(2);
        let now = Instant::now();
        let (seat1, _) = g.create(device("a"), outbox().0, now).unwrap();
        let (tx2, _rx2) = mpsc::channel(2);
        let (_seat2, _) = g.join(&seat1.code, device("b"), tx2, now).unwrap();
        let mut refused = None;
        for _ in 0..4 {
            if let Err(e) = g.send_to(&seat1, 2, Outbound::Binary(vec![0])) {
                refused = Some(e.0);
            }
        }
        assert_eq!(refused, Some(GroupErrorCode::PeerBusy));
    }
}
