//! The browser lab's links without the browser: one client, requests back to back, over the
//! link emulator's own model of a profile or a trace ([`Schedule`], the code `netem` shapes
//! real sockets with), its device time drawn around a throttled page's. Every fixed mode and
//! `auto` (the shipped [`AdaptivePolicy`]: its probes, deadlines and fallbacks) run the same
//! minute, and the lab report's own statistics ([`stats::summarize_trace`]) rate them, so one
//! seed is one lab run of that link and a hundred seeds are the spread the lab's single runs
//! draw from.
//!
//! The truth differs from what the planner believes: the link moves window by window and
//! stalls (the planner sees averages of pings and replies), pings and requests queue behind
//! each other on the uplink, and every device time is drawn with jitter around the truth's
//! factor (the planner knows the warm-up's). Not modelled: the page's pauses for pings, the
//! server's own variance (its time is the cost table's), and the downlink's queue.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap};

use split_shared::plan::{
    AdaptivePolicy, Candidate, ControllerConfig, PingObservation, Placement, RequestObservation,
};
use split_shared::rng::SplitMix64;

use crate::lab::stats::{self, LinkRuns, Run, Sample};
use crate::netem::Schedule;

/// Bytes of a reply (top classes and timings) and of a bare ping's frame.
const REPLY_BYTES: f64 = 400.0;
const PING_BYTES: f64 = 64.0;
/// The server's time for a ping, ms.
const PONG_MS: f64 = 0.2;
/// How long a fixed mode waits for the server before it runs locally, ms (the client's default
/// timeout; `auto` waits for its policy's deadline).
const FIXED_TIMEOUT_MS: f64 = 30_000.0;

/// The simulated page's device.
#[derive(Clone, Copy, Debug)]
pub struct Device {
    /// Its network stages' time over the cost table's (the lab's 4× throttled page: 3.6).
    pub factor: f64,
    /// A local run's work beside the stages (decoding the photo, coding features), ms.
    pub local_fixed_ms: f64,
    /// Cloud-only's work before sending (the photo cropped and encoded as JPEG), ms.
    pub upload_prep_ms: f64,
    /// Standard deviation of a device time's log (0.1: about ±10%).
    pub jitter: f64,
    /// What an edge run's stages cost beyond themselves while a ping is out, as a fraction of
    /// the time they overlap it: the page's run yields to the event loop between stages then,
    /// to time the pong (`PAUSE_EVERY_MS` in `web/split-client.js`), and handles the pong and
    /// the probe that follows it on the same throttled thread.
    pub pause_cost: f64,
    /// How late, at most, a pong that comes during an edge run is read, ms (the pause
    /// interval and a stage): it is drawn evenly up to this.
    pub pong_lateness_ms: f64,
}

impl Default for Device {
    /// The lab's committed report (`reports/lab/data.json`, 4× throttle): edge-only's stages
    /// 133 ms (the table's 37.2 × 3.6), 33 ms beside them, each answer's spread about 8%
    /// (the log's standard deviation: 0.03-0.13 over its links); a JPEG upload made in 27 ms.
    /// The pauses for a ping as the client makes them (a turn at most every 32 ms): 4-6% on a
    /// run with a ping out (`web/tests/ping-bench.mjs`, two runs), a pong read up to the
    /// interval and a stage (about 8 ms) late. The setting before, every 8 ms, cost 8-17%:
    /// `--pause-cost 0.15 --pong-lateness-ms 16`.
    fn default() -> Self {
        Self {
            factor: 3.6,
            local_fixed_ms: 33.0,
            upload_prep_ms: 27.0,
            jitter: 0.08,
            pause_cost: 0.05,
            pong_lateness_ms: 40.0,
        }
    }
}

/// What runs: a fixed placement (as the lab's fixed modes, no probes) or the adaptive policy.
#[derive(Clone, Debug)]
pub enum Mode {
    /// The lab's name for it and the placement.
    Fixed(&'static str, Placement),
    /// `auto`, with this controller tuning.
    Auto(ControllerConfig),
}

/// A deterministic stream of draws.
struct Draws(SplitMix64);

impl Draws {
    fn unit(&mut self) -> f64 {
        self.0.unit_f64()
    }

    /// exp(N(0, sigma)) by Box–Muller.
    fn jitter(&mut self, sigma: f64) -> f64 {
        let (u, v) = (self.unit().max(1e-12), self.unit());
        (sigma * (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()).exp()
    }
}

/// The link as `netem` shapes it: each direction serializes at the schedule's rate of the
/// moment (waiting out a window without capacity), then the one-way delay.
struct Link<'a> {
    schedule: &'a Schedule,
    /// When the uplink has sent everything queued so far, s.
    up_free_s: f64,
    /// Until when a ping is out (its pong read or its loss noticed), ms.
    ping_out_until: f64,
    /// Until when the device runs the network's stages, ms.
    busy_until: f64,
    /// Until when the current request's own work holds the thread, ms: a pong of a ping that
    /// does not pause the runs (one sent while the link was down) is read after it.
    held_until: f64,
}

impl Link<'_> {
    /// `up` bytes sent at `t_ms`, `server_ms` there, `down` bytes back: when the answer is in,
    /// ms; `None` if the link never carries them.
    fn exchange(&mut self, t_ms: f64, up: f64, server_ms: f64, down: f64) -> Option<f64> {
        self.exchange_timed(t_ms, up, server_ms, down).map(|(_, back)| back)
    }

    /// As [`Link::exchange`], with when the server had the bytes: (arrived, answer in), ms.
    fn exchange_timed(
        &mut self,
        t_ms: f64,
        up: f64,
        server_ms: f64,
        down: f64,
    ) -> Option<(f64, f64)> {
        let s = self.schedule;
        let start = self.up_free_s.max(t_ms / 1e3);
        let sent = s.finish(start, up * 8.0, true)?;
        self.up_free_s = sent;
        let arrived = sent + s.one_way_s(sent);
        let back = s.finish(arrived + server_ms / 1e3, down * 8.0, false)?;
        Some((arrived * 1e3, (back + s.one_way_s(back)) * 1e3))
    }
}

#[derive(Debug)]
enum Event {
    /// A request starts (the page calls `classify`).
    Start,
    /// A remote request's frame is ready to send (the edge's part done).
    Send { c: usize, started: f64, edge: f64, stages: f64, paused: bool },
    /// Its reply came back.
    Reply { c: usize, started: f64, sent: f64, edge: f64, stages: f64, server: f64, paused: bool },
    /// Its deadline passed first: the rest runs locally.
    Fallback { c: usize, started: f64, sent: f64, edge: f64 },
    /// A local answer is ready.
    Local { started: f64, edge: f64, stages: f64, fallback: bool, paused: bool },
    /// The page's probe timer.
    Timer,
    /// A pong, for a ping of `bytes` sent at `sent`; `gap`: the server's time from the frame
    /// before it to it (an uplink probe's, behind its bare ping). `quiet`: runs did not pause
    /// for it (sent while the link was down, or an uplink probe).
    Pong { sent: f64, bytes: u32, gap: Option<f64>, skewed: bool, quiet: bool },
    /// A ping went unanswered for its timeout.
    PingLost { sent: f64 },
}

struct Scheduled(f64, u64, Event);

impl PartialEq for Scheduled {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Scheduled {
    /// Earliest first in a max-heap; ties in the order scheduled.
    fn cmp(&self, o: &Self) -> Ordering {
        o.0.total_cmp(&self.0).then(o.1.cmp(&self.1))
    }
}

/// One client over `schedule` for `duration_ms`: its samples, stamped with their start.
///
/// # Panics
/// Without edge-only among `candidates` (a request's fallback runs it), or with a fixed
/// placement that is none of them.
pub fn replay(
    schedule: &Schedule,
    candidates: &[Candidate],
    mode: &Mode,
    device: Device,
    seed: u64,
    duration_ms: f64,
) -> Run {
    let mut draws = Draws(SplitMix64::new(seed));
    let mut policy = AdaptivePolicy::new(candidates.to_vec());
    policy.set_seed(seed);
    policy.set_edge_factor(device.factor);
    let auto = match mode {
        Mode::Fixed(_, p) => {
            policy.set_placement(0.0, p.clone());
            false
        }
        Mode::Auto(config) => {
            policy.set_config(*config);
            true
        }
    };
    let name = match mode {
        Mode::Fixed(name, _) => *name,
        Mode::Auto(_) => "auto",
    };
    let full = candidates.iter().find(|c| c.placement == Placement::EdgeOnly).expect("edge-only");
    let mut link =
        Link { schedule, up_free_s: 0.0, ping_out_until: 0.0, busy_until: 0.0, held_until: 0.0 };
    let mut queue = BinaryHeap::new();
    let mut order = 0u64;
    let mut at = |q: &mut BinaryHeap<Scheduled>, t: f64, e: Event| {
        order += 1;
        q.push(Scheduled(t, order, e));
    };
    if auto {
        // `measureLink` before the first request: a bare ping and an uplink probe.
        let padding = policy.start_probe(0.0);
        probe(&mut link, &mut queue, &mut at, 0.0, padding, &policy);
        at(&mut queue, policy.probe_config().period_ms, Event::Timer);
    } else {
        at(&mut queue, 0.0, Event::Start);
    }
    let mut samples = Vec::new();
    let mut started_first = !auto;
    while let Some(Scheduled(t, _, event)) = queue.pop() {
        if t >= duration_ms && matches!(event, Event::Start) {
            break;
        }
        match event {
            Event::Start => {
                if auto {
                    let _ = policy.tick(t);
                }
                let placement = policy.current();
                let ci =
                    candidates.iter().position(|c| c.placement == placement).expect("candidate");
                let c = &candidates[ci];
                let mut stages = c.edge_ms * device.factor * draws.jitter(device.jitter);
                // A ping out when the stages run: they pause for it while it is.
                let overlap = stages.min(link.ping_out_until - t);
                let paused = overlap > 0.0 && stages > 0.0 && device.pause_cost > 0.0;
                if paused {
                    stages += overlap * device.pause_cost;
                }
                link.busy_until = t + stages;
                match placement {
                    Placement::EdgeOnly => {
                        let edge = stages + device.local_fixed_ms * draws.jitter(device.jitter);
                        link.held_until = t + edge;
                        at(
                            &mut queue,
                            t + edge,
                            Event::Local { started: t, edge, stages, fallback: false, paused },
                        );
                    }
                    Placement::CloudOnly => {
                        let edge = device.upload_prep_ms * draws.jitter(device.jitter);
                        link.held_until = t + edge;
                        at(
                            &mut queue,
                            t + edge,
                            Event::Send { c: ci, started: t, edge, stages: 0.0, paused: false },
                        );
                    }
                    _ => {
                        let edge = stages + device.local_fixed_ms * draws.jitter(device.jitter);
                        link.held_until = t + edge;
                        at(
                            &mut queue,
                            t + edge,
                            Event::Send { c: ci, started: t, edge, stages, paused },
                        );
                    }
                }
            }
            Event::Send { c: ci, started, edge, stages, paused } => {
                let c = &candidates[ci];
                let wait =
                    if auto { policy.deadline_ms(FIXED_TIMEOUT_MS) } else { FIXED_TIMEOUT_MS };
                let server = c.cloud_ms;
                match link.exchange(t, c.bytes, server, REPLY_BYTES) {
                    Some(back) if back - t <= wait => at(
                        &mut queue,
                        back,
                        Event::Reply { c: ci, started, sent: t, edge, stages, server, paused },
                    ),
                    _ => {
                        at(&mut queue, t + wait, Event::Fallback { c: ci, started, sent: t, edge })
                    }
                }
            }
            Event::Reply { c: ci, started, sent, edge, stages, server, paused } => {
                let c = &candidates[ci];
                policy.observe_request(
                    t,
                    RequestObservation {
                        bytes_sent: c.bytes,
                        round_trip_ms: t - sent,
                        server_ms: server,
                        queue_wait_ms: Some(0.0),
                        waited_ms: Some(0.0),
                    },
                );
                if c.placement == Placement::CloudOnly {
                    policy.observe_upload_prep(edge);
                } else if !paused {
                    // A run that paused for a ping says nothing of the device (as in
                    // `web/client/adaptive.js`).
                    policy.observe_edge(t, c.depth, edge, Some(stages));
                }
                samples.push(sample(started, t, c, edge, (false, paused)));
                at(&mut queue, t, Event::Start);
            }
            Event::Fallback { c: ci, started, sent, edge } => {
                policy.observe_failure_of(t, sent);
                let c = &candidates[ci];
                // The rest of the network on the device (all of it after cloud-only's upload).
                let rest = (full.edge_ms - c.edge_ms) * device.factor * draws.jitter(device.jitter)
                    + if c.placement == Placement::CloudOnly { device.local_fixed_ms } else { 0.0 };
                link.held_until = t + rest;
                at(
                    &mut queue,
                    t + rest,
                    Event::Local {
                        started,
                        edge: edge + rest,
                        stages: rest,
                        fallback: true,
                        paused: false,
                    },
                );
            }
            Event::Local { started, edge, stages, fallback, paused } => {
                if !fallback && !paused {
                    policy.observe_edge(t, full.depth, edge, Some(stages));
                }
                samples.push(sample(started, t, full, edge, (fallback, paused)));
                if auto && policy.probe_due(t) {
                    let padding = policy.start_probe(t);
                    probe(&mut link, &mut queue, &mut at, t, padding, &policy);
                }
                at(&mut queue, t, Event::Start);
            }
            Event::Timer => {
                if !started_first {
                    // The first request follows `measureLink` (its probes or its budget).
                    started_first = true;
                    at(&mut queue, t.min(1_000.0), Event::Start);
                }
                if policy.probe_due(t) {
                    let padding = policy.start_probe(t);
                    probe(&mut link, &mut queue, &mut at, t, padding, &policy);
                }
                at(&mut queue, t + policy.probe_config().period_ms, Event::Timer);
            }
            Event::Pong { sent, bytes, gap, quiet, .. } if quiet && t < link.held_until => {
                // No pauses for it: read once the request's work lets go of the thread, and
                // a run overlapped it.
                let pong = Event::Pong { sent, bytes, gap, skewed: true, quiet };
                at(&mut queue, link.held_until, pong);
            }
            Event::Pong { sent, bytes, gap, skewed, .. } => {
                // During an edge run the pong waits for the run's next turn of the event loop.
                let late =
                    if t < link.busy_until { draws.unit() * device.pong_lateness_ms } else { 0.0 };
                policy.observe_ping(
                    t,
                    PingObservation {
                        probe_bytes: bytes,
                        ms: t - sent + late,
                        queue_wait_ms: 0.0,
                        skewed,
                        server_gap_ms: gap,
                    },
                );
                // `measureLink` ends with the uplink probe's pong.
                if !started_first && bytes > 0 {
                    started_first = true;
                    at(&mut queue, t, Event::Start);
                }
            }
            Event::PingLost { sent } => {
                policy.observe_failure_of(t, sent);
                if !started_first {
                    started_first = true;
                    at(&mut queue, t, Event::Start);
                }
            }
        }
    }
    Run { repeat: 0, mode: name.to_string(), samples, duration_ms: Some(duration_ms), origin: None }
}

/// A probe at `t`, as `web/client/adaptive.js` sends it: a bare ping and, when the planner asks
/// for `padding` and the link is up, the uplink probe right behind it, whose pong carries the
/// server's time between the two arrivals. Runs pause for the bare ping unless the planner
/// holds the link for down (then it only asks whether it is back); never for the uplink probe.
fn probe(
    link: &mut Link<'_>,
    queue: &mut BinaryHeap<Scheduled>,
    at: &mut impl FnMut(&mut BinaryHeap<Scheduled>, f64, Event),
    t: f64,
    padding: u32,
    policy: &AdaptivePolicy,
) {
    let quiet = !policy.forecast().link_up;
    let timeout = policy.probe_config().ping_timeout_ms;
    let bare = ping(link, queue, at, t, 0, timeout, quiet, None);
    if padding > 0 && !quiet {
        let wait = policy.ping_timeout_ms(padding, FIXED_TIMEOUT_MS);
        ping(link, queue, at, t, padding, wait, true, bare);
    }
}

/// Send a ping at `t` with `bytes` of padding: its pong, or its loss after `wait` ms. A `quiet`
/// one does not make runs pause. `before`: when the frame ahead of it reached the server (its
/// pong's gap is measured from there). Returns when this one reached the server, if it did.
#[allow(clippy::too_many_arguments)]
fn ping(
    link: &mut Link<'_>,
    queue: &mut BinaryHeap<Scheduled>,
    at: &mut impl FnMut(&mut BinaryHeap<Scheduled>, f64, Event),
    t: f64,
    bytes: u32,
    wait: f64,
    quiet: bool,
    before: Option<f64>,
) -> Option<f64> {
    // Sent while a run holds the thread (one that started before it, so does not pause for
    // it): the client marks it skewed and learns no round trip from it.
    let skewed = t < link.busy_until;
    let exchange = link.exchange_timed(t, PING_BYTES + f64::from(bytes), PONG_MS, PING_BYTES);
    let done = match exchange {
        Some((arrived, back)) if back - t <= wait => {
            let gap = before.map(|b| arrived - b);
            at(queue, back, Event::Pong { sent: t, bytes, gap, skewed, quiet });
            back
        }
        _ => {
            at(queue, t + wait, Event::PingLost { sent: t });
            t + wait
        }
    };
    if !quiet {
        link.ping_out_until = link.ping_out_until.max(done);
    }
    exchange.map(|(arrived, _)| arrived)
}

fn sample(
    started: f64,
    t: f64,
    c: &Candidate,
    edge: f64,
    (fallback, paused): (bool, bool),
) -> Sample {
    let placement = if fallback {
        "fallback_edge".to_string()
    } else {
        match &c.placement {
            Placement::EdgeOnly => "edge_only".into(),
            Placement::CloudOnly => "cloud_only".into(),
            p => p.to_string(),
        }
    };
    Sample {
        total: t - started,
        bytes: if c.placement == Placement::EdgeOnly { 0.0 } else { c.bytes },
        edge,
        edge_stages: None,
        edge_paused: paused.then_some(true),
        placement: Some(placement),
        top1: 0,
        t: Some(started),
        start: None,
        planned: None,
    }
}

/// Every mode over one link with one seed, as the lab would record one run of it.
pub fn lab_run(
    schedule: &Schedule,
    candidates: &[Candidate],
    modes: &[Mode],
    device: Device,
    seed: u64,
    duration_ms: f64,
) -> LinkRuns {
    let runs = modes
        .iter()
        .enumerate()
        .map(|(i, m)| {
            replay(
                schedule,
                candidates,
                m,
                device,
                seed.wrapping_mul(31).wrapping_add(i as u64),
                duration_ms,
            )
        })
        .collect();
    LinkRuns {
        link: schedule.name.clone(),
        kind: "trace".into(),
        scale: None,
        interleaved: None,
        runs,
    }
}

/// The links of the browser lab, in its order: its four profiles, then its five traces.
pub const LAB_LINKS: [&str; 9] = [
    "fast-wifi",
    "4g",
    "3g",
    "congested-uplink",
    "degrading",
    "outage",
    "verizon-lte",
    "att-lte-driving",
    "tmobile-umts-driving",
];

/// The lab's modes over the table's candidates: edge-only, cloud-only, block5 and block11
/// with `q6`, and `auto`.
///
/// # Errors
/// The table lacks one of the fixed modes. ([`replay`] needs edge-only among the candidates,
/// for the fallback.)
pub fn lab_modes(candidates: &[Candidate]) -> anyhow::Result<Vec<Mode>> {
    let find = |name: &str| {
        candidates
            .iter()
            .find(|c| c.placement.to_string() == name)
            .map(|c| c.placement.clone())
            .ok_or_else(|| anyhow::anyhow!("the cost table has no {name}"))
    };
    for tier in [Placement::EdgeOnly, Placement::CloudOnly] {
        if !candidates.iter().any(|c| c.placement == tier) {
            anyhow::bail!("the cost table has no {tier}");
        }
    }
    Ok(vec![
        Mode::Fixed("edge", Placement::EdgeOnly),
        Mode::Fixed("cloud", Placement::CloudOnly),
        Mode::Fixed("block5", find("block5/q6")?),
        Mode::Fixed("block11", find("block11/q6")?),
        Mode::Auto(ControllerConfig::default()),
    ])
}

/// One link run with many seeds, as the lab report rates each run.
#[derive(Clone, Debug, Default)]
pub struct Rating {
    /// Auto's P95 over the oracle's, per seed.
    pub ratios: Vec<f64>,
    /// Per seed, P95 ms: auto's, the oracle's, edge-only's, cloud-only's.
    pub auto_p95: Vec<f64>,
    /// See `auto_p95`.
    pub oracle_p95: Vec<f64>,
    /// See `auto_p95`.
    pub edge_p95: Vec<f64>,
    /// See `auto_p95`.
    pub cloud_p95: Vec<f64>,
    /// Auto's answers by placement, as a share of all seeds' answers.
    pub placements: BTreeMap<String, f64>,
}

impl Rating {
    /// The `q`-quantile of the ratios (nearest rank).
    pub fn ratio_quantile(&self, q: f64) -> f64 {
        let mut v = self.ratios.clone();
        v.sort_by(f64::total_cmp);
        if v.is_empty() { f64::NAN } else { v[((v.len() - 1) as f64 * q).round() as usize] }
    }
}

/// `modes` over `schedule` with seeds `0..seeds`, each run rated as the lab report rates it:
/// a constant link's oracle is the best fixed mode's P95, a trace's is made window by window
/// (3 s); a profile runs 10 s a mode, a trace its length.
pub fn rate_link(
    schedule: &Schedule,
    candidates: &[Candidate],
    modes: &[Mode],
    device: Device,
    seeds: u64,
) -> Rating {
    let trace = schedule.duration_s.is_finite();
    let duration_ms = if trace { schedule.duration_s * 1e3 } else { 10_000.0 };
    let mut r = Rating::default();
    for seed in 0..seeds {
        let mut runs = lab_run(schedule, candidates, modes, device, seed, duration_ms);
        let summary = if trace {
            stats::summarize_trace(&runs, 3_000.0)
        } else {
            runs.kind = "profile".into();
            stats::summarize_profile(&runs)
        };
        r.ratios.push(summary.auto_vs_oracle);
        r.oracle_p95.push(summary.oracle_p95);
        for m in &summary.modes {
            match m.mode.as_str() {
                "auto" => {
                    r.auto_p95.push(m.p[1]);
                    for (p, share) in &m.placements {
                        *r.placements.entry(p.clone()).or_default() += share / seeds as f64;
                    }
                }
                "edge" => r.edge_p95.push(m.p[1]),
                "cloud" => r.cloud_p95.push(m.p[1]),
                _ => {}
            }
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use split_shared::model::Boundary;
    use split_shared::plan::ControllerConfig;

    use super::*;
    use crate::netem::{self, LinkProfile};

    fn candidates() -> Vec<Candidate> {
        let c = |placement, depth, edge_ms, bytes, cloud_ms| Candidate {
            placement,
            depth,
            edge_ms,
            edge_fixed_ms: 0.0,
            bytes,
            cloud_ms,
            agreement: 1.0,
            edge_param_bytes: 0,
        };
        let b = Boundary::block(5).unwrap();
        let split = Placement::Split { boundary: b.name().into(), codec: "q6".parse().unwrap() };
        vec![
            c(Placement::EdgeOnly, usize::from(Boundary::LOGITS.index()), 40.0, 0.0, 0.0),
            c(Placement::CloudOnly, 0, 0.0, 16_000.0, 15.0),
            c(split, usize::from(b.index()), 12.0, 10_000.0, 11.0),
        ]
    }

    const STEADY: Device = Device {
        factor: 4.0,
        local_fixed_ms: 30.0,
        upload_prep_ms: 25.0,
        jitter: 0.0,
        pause_cost: 0.0,
        pong_lateness_ms: 0.0,
    };

    fn totals(run: &Run) -> Vec<f64> {
        run.samples.iter().map(|s| s.total).collect()
    }

    /// On a constant link every answer costs what its parts add up to: the device's work,
    /// the upload at the link's rate, the one-way delays, the server, the reply.
    #[test]
    fn a_constant_link_costs_what_its_parts_add_up_to() {
        let link =
            LinkProfile { name: "test", up_kbps: 8_000.0, down_kbps: 16_000.0, rtt_ms: 40.0 };
        let schedule = Schedule::constant(link);
        let cs = candidates();
        let edge =
            replay(&schedule, &cs, &Mode::Fixed("edge", Placement::EdgeOnly), STEADY, 1, 2_000.0);
        assert!(edge.samples.len() > 5);
        for t in totals(&edge) {
            assert!((t - (40.0 * 4.0 + 30.0)).abs() < 1e-6, "{t}");
        }
        let cloud =
            replay(&schedule, &cs, &Mode::Fixed("cloud", Placement::CloudOnly), STEADY, 1, 2_000.0);
        // 16 kB at 8 Mbit/s (16 ms), 40 ms of delay, 15 ms of server, 400 B at 16 Mbit/s.
        let expected = 25.0 + 16.0 + 40.0 + 15.0 + 0.2;
        for t in totals(&cloud) {
            assert!((t - expected).abs() < 1e-6, "{t} against {expected}");
        }
        // Back to back: each request starts when the one before it is answered.
        let starts: Vec<f64> = cloud.samples.iter().filter_map(|s| s.t).collect();
        assert!((starts[1] - starts[0] - expected).abs() < 1e-6);
    }

    /// An outage holds a fixed remote mode for as long as it lasts, while `auto` gives up at its
    /// deadline, answers on the device and keeps answering there.
    #[test]
    fn an_outage_holds_a_fixed_mode_and_auto_answers_locally() {
        let schedule = netem::schedule("outage").unwrap(); // Wi-Fi, down from 20 s to 35 s.
        let cs = candidates();
        let cloud = replay(
            &schedule,
            &cs,
            &Mode::Fixed("cloud", Placement::CloudOnly),
            STEADY,
            1,
            60_000.0,
        );
        let longest = totals(&cloud).into_iter().fold(0.0, f64::max);
        assert!(longest > 10_000.0, "a request sent in the outage waits it out: {longest}");
        // Pauses that cost something, to see which runs take them.
        let device = Device { pause_cost: 0.05, ..STEADY };
        let auto =
            replay(&schedule, &cs, &Mode::Auto(ControllerConfig::default()), device, 1, 60_000.0);
        let during: Vec<&Sample> = auto
            .samples
            .iter()
            .filter(|s| s.t.is_some_and(|t| (21_000.0..34_000.0).contains(&t)))
            .collect();
        assert!(!during.is_empty());
        let placement = |s: &&Sample| s.placement.clone().unwrap_or_default();
        assert!(
            during.iter().all(|s| placement(s) == "edge_only" || placement(s) == "fallback_edge"),
            "{:?}",
            during.iter().map(placement).collect::<Vec<_>>()
        );
        // Once the link is down its pings only ask whether it is back: no run pauses for them.
        let paused: Vec<f64> =
            during.iter().filter(|s| s.edge_paused == Some(true)).filter_map(|s| s.t).collect();
        assert!(paused.len() < 4, "of {} answers in the outage: {paused:?}", during.len());
        let worst = auto.samples.iter().map(|s| s.total).fold(0.0, f64::max);
        assert!(worst < 3_000.0, "no answer waits out the outage: {worst}");
        // Before it and after it the server is the faster place to answer, and auto goes back.
        let after = auto.samples.iter().filter(|s| s.t.is_some_and(|t| t > 45_000.0));
        assert!(after.clone().any(|s| s.placement.as_deref() == Some("cloud_only")));
    }

    /// On a fast link `auto` sends the photo; on a slow one it answers on the device; in both
    /// the lab's statistics put it at the oracle.
    #[test]
    fn auto_takes_the_better_tier_of_a_constant_link() {
        let cs = candidates();
        let modes = [
            Mode::Fixed("edge", Placement::EdgeOnly),
            Mode::Fixed("cloud", Placement::CloudOnly),
            Mode::Auto(ControllerConfig::default()),
        ];
        let device = Device { jitter: 0.05, ..STEADY };
        for (name, placement) in [("fast-wifi", "cloud_only"), ("3g", "edge_only")] {
            let schedule = netem::schedule(name).unwrap();
            let runs = lab_run(&schedule, &cs, &modes, device, 7, 10_000.0);
            let summary = crate::lab::stats::summarize_profile(&runs);
            let auto = summary.modes.iter().find(|m| m.mode == "auto").unwrap();
            assert!(auto.placements.get(placement).is_some_and(|s| *s > 0.9), "{name}: {auto:?}");
            assert!(summary.auto_vs_oracle < 1.1, "{name}: {}", summary.auto_vs_oracle);
        }
    }

    /// One seed, one draw: the same seed replays the same run, another seed another one.
    #[test]
    fn a_seed_replays_its_run() {
        let schedule = netem::schedule("att-lte-driving").unwrap();
        let cs = candidates();
        let mode = Mode::Auto(ControllerConfig::default());
        let device = Device { jitter: 0.1, ..STEADY };
        let a = replay(&schedule, &cs, &mode, device, 3, 20_000.0);
        let b = replay(&schedule, &cs, &mode, device, 3, 20_000.0);
        let c = replay(&schedule, &cs, &mode, device, 4, 20_000.0);
        assert_eq!(totals(&a), totals(&b));
        assert_ne!(totals(&a), totals(&c));
    }

    /// The shipped policy with the project's cost table, checked against the emulator's model
    /// of every link of the lab rather than against its own estimates: with the page's own
    /// costs left out (a run with a ping out as fast as one without), its choices come within
    /// the 5% of the oracle's P95 on each, in the median of 20 runs.
    #[test]
    fn the_policy_is_within_five_percent_of_the_oracle_on_every_lab_link() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../profiles/cost-table.json");
        let table =
            split_shared::plan::CostTable::from_json(&std::fs::read_to_string(path).unwrap())
                .unwrap();
        let cs = table.candidates("browser-wasm-cpu").unwrap();
        let modes = lab_modes(&cs).unwrap();
        let device = Device { pause_cost: 0.0, pong_lateness_ms: 0.0, ..Device::default() };
        for name in LAB_LINKS {
            let r = rate_link(&netem::schedule(name).unwrap(), &cs, &modes, device, 20);
            let median = r.ratio_quantile(0.5);
            assert!(median <= 1.05, "{name}: auto / oracle {median:.3} ({:?})", r.placements);
        }
    }
}
