//! A userspace network emulator: a TCP proxy that adds one-way delay and serializes each
//! direction at a rate, for the link profiles the lab compares (this kernel has no `netem`).
//! Each direction is a FIFO of packets ([`SEGMENT_BYTES`] at most): a packet leaves after the link
//! finished sending the packets before it (`bytes / rate`) plus the one-way delay, like a router
//! queue with a propagation delay. Between two loopback endpoints it is the whole network.
//!
//! A link can change over time ([`Schedule`]): a list of segments of fixed conditions. Its clock
//! starts with the first connection, so a client that connects, warms up and then measures sees
//! the same trace every run. A segment with zero rate is an outage: bytes wait (as TCP
//! retransmissions would) until the link comes back.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// The most bytes the link serializes as one packet (a TCP segment's payload on a 1500-byte
/// MTU). One read from the socket can hold several messages: a small frame written just ahead
/// of a big one must arrive first, its own serialization time after it was read, as on a
/// router, not with the big one's last byte (the client's uplink probe is timed on that
/// difference, at the server).
pub const SEGMENT_BYTES: usize = 1448;

/// A link: rates in kbit/s and the round-trip time.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct LinkProfile {
    /// Name used in reports.
    pub name: &'static str,
    /// Client → server, kbit/s (0: no connectivity).
    pub up_kbps: f64,
    /// Server → client, kbit/s (0: no connectivity).
    pub down_kbps: f64,
    /// Round trip added by the link, ms (half each way).
    pub rtt_ms: f64,
}

/// The profiles of the lab: fast Wi-Fi, 4G, 3G-like and a congested uplink.
pub const PROFILES: [LinkProfile; 4] = [
    LinkProfile { name: "fast-wifi", up_kbps: 20_000.0, down_kbps: 50_000.0, rtt_ms: 10.0 },
    LinkProfile { name: "4g", up_kbps: 5_000.0, down_kbps: 20_000.0, rtt_ms: 50.0 },
    LinkProfile { name: "3g", up_kbps: 750.0, down_kbps: 1_600.0, rtt_ms: 150.0 },
    LinkProfile { name: "congested-uplink", up_kbps: 250.0, down_kbps: 10_000.0, rtt_ms: 80.0 },
];

/// No connectivity: bytes wait for the next segment.
pub const OUTAGE: LinkProfile =
    LinkProfile { name: "outage", up_kbps: 0.0, down_kbps: 0.0, rtt_ms: 0.0 };

/// Conditions that change over time: `(start_s, link)` segments in order, the first starting at
/// 0; the last one lasts forever.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Schedule {
    /// Name used in reports.
    pub name: String,
    /// Segments, by start time in seconds.
    pub segments: Vec<(f64, LinkProfile)>,
    /// How long a run over this schedule should last, s (the last segment's start + its length).
    pub duration_s: f64,
    /// Whether the schedule starts over after `duration_s` (a recording, as Mahimahi replays
    /// its traces), rather than keeping its last segment.
    pub looped: bool,
}

impl Schedule {
    /// A link that never changes.
    pub fn constant(link: LinkProfile) -> Self {
        Self {
            name: link.name.to_string(),
            segments: vec![(0.0, link)],
            duration_s: f64::INFINITY,
            looped: false,
        }
    }

    /// The same conditions on a time axis stretched by `factor` (0.1: a 60 s trace in 6 s).
    #[must_use]
    pub fn scaled(mut self, factor: f64) -> Self {
        for (start, _) in &mut self.segments {
            *start *= factor;
        }
        self.duration_s *= factor;
        self
    }

    /// Whether the schedule starts over (looped, with a length to start over after).
    fn loops(&self) -> bool {
        self.looped && self.duration_s.is_finite() && self.duration_s > 0.0
    }

    /// Where `t` seconds falls: the start of its round (a looped schedule's round `k` is its
    /// segments shifted by `k` durations; else 0) and the index of its segment.
    fn locate(&self, t: f64) -> (f64, usize) {
        let round =
            if self.loops() { (t / self.duration_s).floor() * self.duration_s } else { 0.0 };
        let i = self.segments.iter().rposition(|(start, _)| round + *start <= t).unwrap_or(0);
        (round, i)
    }

    /// When segment `i` of the round starting at `round` ends.
    fn end_of(&self, round: f64, i: usize) -> f64 {
        let last = if self.loops() { self.duration_s } else { f64::INFINITY };
        round + self.segments.get(i + 1).map_or(last, |(s, _)| *s)
    }

    /// The segment in force at `t` seconds, and when it ends.
    fn at(&self, t: f64) -> (LinkProfile, f64) {
        let (round, i) = self.locate(t);
        (self.segments[i].1, self.end_of(round, i))
    }

    /// When `bits` that start serializing at `t` (s) have left, given the rate of direction `up`
    /// or down in each segment; `None` if the link never carries them (an outage forever).
    pub fn finish(&self, mut t: f64, mut bits: f64, up: bool) -> Option<f64> {
        let carries = |l: &LinkProfile| (if up { l.up_kbps } else { l.down_kbps }) > 0.0;
        if self.looped && !self.segments.iter().any(|(_, l)| carries(l)) {
            return None;
        }
        // Segment by segment from where `t` falls (never located again from a time, whose
        // rounding could find the segment just left and make no progress).
        let (mut round, mut i) = self.locate(t);
        loop {
            let link = self.segments[i].1;
            let end = self.end_of(round, i);
            let rate = if up { link.up_kbps } else { link.down_kbps } * 1000.0;
            if rate > 0.0 {
                let done = t + bits / rate;
                if done <= end {
                    return Some(done);
                }
                bits -= rate * (end - t).max(0.0);
            }
            if end.is_infinite() {
                return None;
            }
            t = end;
            i += 1;
            if i == self.segments.len() {
                // Only a looped schedule's last segment ends.
                i = 0;
                round += self.duration_s;
            }
        }
    }

    /// The one-way delay at `t` seconds.
    pub fn one_way_s(&self, t: f64) -> f64 {
        self.at(t).0.rtt_ms / 2000.0
    }
}

/// The time-varying traces of the lab's adaptive runs, each 60 s:
/// - `degrading`: 4G, then the uplink congests, then 3G-like, then 4G again;
/// - `outage`: fast Wi-Fi with a 15 s loss of connectivity in the middle.
pub fn traces() -> Vec<Schedule> {
    let [wifi, g4, g3, congested] = PROFILES;
    vec![
        Schedule {
            name: "degrading".into(),
            segments: vec![(0.0, g4), (15.0, congested), (30.0, g3), (45.0, g4)],
            duration_s: 60.0,
            looped: false,
        },
        Schedule {
            name: "outage".into(),
            segments: vec![(0.0, wifi), (20.0, OUTAGE), (35.0, wifi)],
            duration_s: 60.0,
            looped: false,
        },
    ]
}

/// A profile by name, a trace by name (a recorded one too, [`crate::recorded`]), or
/// `rtt:<ms>`: delay only, no rate limit (for when the
/// kernel shapes the rate, `tc tbf` in a network namespace, and the proxy adds what tbf cannot).
///
/// # Errors
/// For an unknown name, listing the known ones.
pub fn schedule(name: &str) -> Result<Schedule> {
    if let Some(p) = PROFILES.iter().find(|p| p.name == name) {
        return Ok(Schedule::constant(*p));
    }
    if let Some(ms) = name.strip_prefix("rtt:") {
        let rtt_ms: f64 = ms.parse().with_context(|| format!("{name:?}: rtt:<ms>"))?;
        let link = LinkProfile {
            name: "delay-only",
            up_kbps: f64::INFINITY,
            down_kbps: f64::INFINITY,
            rtt_ms,
        };
        return Ok(Schedule::constant(link));
    }
    let recorded = crate::recorded::recorded();
    if let Some(t) = recorded.iter().find(|t| t.name == name) {
        return Ok(t.schedule());
    }
    match traces().into_iter().find(|t| t.name == name) {
        Some(t) => Ok(t),
        None => bail!(
            "unknown link {name:?}; profiles: {:?}, traces: {:?}, recorded traces: {:?}",
            PROFILES.map(|p| p.name),
            traces().iter().map(|t| t.name.clone()).collect::<Vec<_>>(),
            recorded.iter().map(|t| t.name.clone()).collect::<Vec<_>>()
        ),
    }
}

/// A profile by name.
///
/// # Errors
/// For an unknown name, listing the known ones.
pub fn profile(name: &str) -> Result<LinkProfile> {
    match PROFILES.iter().find(|p| p.name == name) {
        Some(p) => Ok(*p),
        None => bail!("unknown link profile {name:?}; known: {:?}", PROFILES.map(|p| p.name)),
    }
}

/// The schedule's clock: starts with the first connection through the proxy.
#[derive(Clone)]
struct Clock {
    schedule: Arc<Schedule>,
    origin: Arc<OnceLock<Instant>>,
}

impl Clock {
    fn seconds(&self, at: Instant) -> f64 {
        at.saturating_duration_since(*self.origin.get().expect("started on first connection"))
            .as_secs_f64()
    }

    fn instant(&self, s: f64) -> Instant {
        *self.origin.get().expect("started") + Duration::from_secs_f64(s)
    }
}

/// Move bytes from `from` to `to` through one direction of the link.
async fn direction(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    clock: Clock,
    up: bool,
) {
    let (tx, mut rx) = mpsc::channel::<(Instant, Vec<u8>)>(256);
    let reader = async move {
        let mut free_s = 0.0f64;
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let read_at = clock.seconds(Instant::now());
            for packet in buf[..n].chunks(SEGMENT_BYTES) {
                let start = free_s.max(read_at);
                let Some(done) = clock.schedule.finish(start, packet.len() as f64 * 8.0, up) else {
                    return;
                };
                free_s = done;
                let at = clock.instant(done + clock.schedule.one_way_s(done));
                if tx.send((at, packet.to_vec())).await.is_err() {
                    return;
                }
            }
        }
    };
    let writer = async move {
        while let Some((at, chunk)) = rx.recv().await {
            tokio::time::sleep_until(at).await;
            if to.write_all(&chunk).await.is_err() {
                break;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(reader, writer);
}

/// A running proxy; dropping it stops accepting new connections.
pub struct Proxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Proxy {
    /// Listen on a free loopback port and forward every connection to `upstream` through `link`.
    ///
    /// # Errors
    /// When no port can be bound.
    pub async fn start(upstream: SocketAddr, link: LinkProfile) -> Result<Self> {
        Self::with_schedule(upstream, Schedule::constant(link), |_| {}).await
    }

    /// Like [`Proxy::start`] over a schedule; `on_clock` runs once, when the first connection
    /// starts the schedule's clock.
    ///
    /// # Errors
    /// When no port can be bound.
    pub async fn with_schedule(
        upstream: SocketAddr,
        schedule: Schedule,
        on_clock: impl FnOnce(std::time::SystemTime) + Send + 'static,
    ) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await.context("binding the proxy")?;
        let addr = listener.local_addr()?;
        let clock = Clock { schedule: Arc::new(schedule), origin: Arc::new(OnceLock::new()) };
        let task = tokio::spawn(async move {
            let mut on_clock = Some(on_clock);
            while let Ok((client, _)) = listener.accept().await {
                if clock.origin.set(Instant::now()).is_ok()
                    && let Some(f) = on_clock.take()
                {
                    f(std::time::SystemTime::now());
                }
                let clock = clock.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(upstream).await else { return };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::join!(
                        direction(cr, sw, clock.clone(), true),
                        direction(sr, cw, clock, false)
                    );
                });
            }
        });
        Ok(Self { addr, task })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_drain_across_segments_and_wait_out_an_outage() {
        let fast = LinkProfile { name: "a", up_kbps: 8.0, down_kbps: 16.0, rtt_ms: 100.0 };
        let slow = LinkProfile { name: "b", up_kbps: 4.0, down_kbps: 4.0, rtt_ms: 300.0 };
        let s = Schedule {
            name: "t".into(),
            segments: vec![(0.0, fast), (1.0, OUTAGE), (3.0, slow)],
            duration_s: 10.0,
            looped: false,
        };
        // 8 kbit/s up: 4000 bits take 0.5 s.
        assert_eq!(s.finish(0.0, 4000.0, true), Some(0.5));
        // 8000 bits sent from 0.5: 4000 before the outage, the rest at 4 kbit/s after it.
        assert_eq!(s.finish(0.5, 8000.0, true), Some(4.0));
        // Down is twice as fast in the first segment.
        assert_eq!(s.finish(0.0, 4000.0, false), Some(0.25));
        assert_eq!(s.one_way_s(0.2), 0.05);
        assert_eq!(s.one_way_s(5.0), 0.15);
        let dead = Schedule {
            name: "d".into(),
            segments: vec![(0.0, OUTAGE)],
            duration_s: 1.0,
            looped: false,
        };
        assert_eq!(dead.finish(0.0, 1.0, true), None);
        // Looped, a schedule whose last segment is an outage comes back to its first.
        let looped = Schedule {
            segments: vec![(0.0, fast), (1.0, OUTAGE)],
            duration_s: 2.0,
            looped: true,
            ..dead
        };
        // 8 kbit/s: 4,000 bits before 1 s, nothing 1–2 s, the rest from 2 s.
        assert_eq!(looped.finish(0.5, 8000.0, true), Some(2.5));
        assert_eq!(looped.one_way_s(2.2), 0.05);
    }

    /// Two frames written at once leave one packet at a time: the small one ahead arrives a
    /// packet's serialization after it was sent, not with the big one's last byte.
    #[tokio::test]
    async fn a_small_frame_written_ahead_of_a_big_one_arrives_first() {
        let sink = TcpListener::bind("127.0.0.1:0").await.unwrap();
        // 240 kbit/s: a packet in 48 ms, 16 KiB in 546.
        let link = LinkProfile { name: "slow", up_kbps: 240.0, down_kbps: 240.0, rtt_ms: 0.0 };
        let proxy = Proxy::start(sink.local_addr().unwrap(), link).await.unwrap();
        let mut client = TcpStream::connect(proxy.addr).await.unwrap();
        let (mut server, _) = sink.accept().await.unwrap();
        let mut bytes = vec![1u8; 20];
        bytes.extend(vec![2u8; 16 * 1024]);
        let sent = Instant::now();
        client.write_all(&bytes).await.unwrap();
        let mut got = vec![0u8; bytes.len()];
        server.read_exact(&mut got[..20]).await.unwrap();
        let first = sent.elapsed();
        server.read_exact(&mut got[20..]).await.unwrap();
        let all = sent.elapsed();
        assert_eq!(got, bytes);
        assert!(first < Duration::from_millis(300), "{first:?}");
        assert!(all > Duration::from_millis(450), "{all:?}");
    }

    #[test]
    fn names_resolve_to_profiles_and_traces() {
        assert_eq!(schedule("3g").unwrap().segments, vec![(0.0, PROFILES[2])]);
        assert_eq!(schedule("outage").unwrap().duration_s, 60.0);
        let delay = schedule("rtt:50").unwrap();
        assert_eq!(delay.finish(1.0, 1e9, true), Some(1.0));
        assert_eq!(delay.one_way_s(0.0), 0.025);
        let err = schedule("5g").unwrap_err().to_string();
        assert!(err.contains("fast-wifi") && err.contains("degrading"), "{err}");
    }
}
