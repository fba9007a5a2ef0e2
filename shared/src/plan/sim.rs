//! Trace-driven simulation of the monitor and controller: no network, just a function from
//! time to the true conditions. Used by the tests and by `./run.sh plan-sim`.

use serde::Serialize;

use super::{
    AdaptivePolicy, Candidate, Conditions, Constraints, ControllerConfig, PingObservation,
    Placement, RequestObservation, estimate,
};

/// A named trace: true conditions at each time, and whether the link is up.
pub struct Trace {
    /// Name for reports.
    pub name: &'static str,
    /// Length, ms.
    pub duration_ms: f64,
    /// Conditions at `t` ms; an uplink of 0 means the link is down.
    pub at: Box<dyn Fn(f64) -> Conditions>,
}

/// What happened on one trace.
#[derive(Clone, Debug, Serialize)]
pub struct SimResult {
    /// Trace name.
    pub trace: String,
    /// Per request: time, placement, latency, and the best latency possible at that time.
    pub requests: Vec<(f64, Placement, f64, f64)>,
    /// Placement changes.
    pub switches: usize,
    /// Sum of latencies of the adaptive policy.
    pub adaptive_ms: f64,
    /// Sum of the per-request best (a clairvoyant policy that may switch every request).
    pub oracle_ms: f64,
    /// The best single placement in hindsight, and its sum.
    pub best_fixed: (Placement, f64),
    /// Sum for edge-only, if allowed.
    pub edge_only_ms: Option<f64>,
    /// Sum for cloud-only, if allowed.
    pub cloud_only_ms: Option<f64>,
}

/// Latency of a request placed at `c` under the true conditions: a remote placement on a dead
/// link costs a detection timeout and then the local run.
fn latency(c: &Candidate, truth: &Conditions, local: f64, timeout_ms: f64) -> f64 {
    let e = estimate(c, truth).total_ms;
    if e.is_finite() { e } else { timeout_ms + local }
}

/// Requests every `interval_ms` through `trace`, with idle probes every `probe_ms` when the
/// placement sends nothing (so bandwidth stays known while running locally).
pub fn simulate(
    trace: &Trace,
    candidates: &[Candidate],
    constraints: &Constraints,
    config: ControllerConfig,
    interval_ms: f64,
) -> SimResult {
    const TIMEOUT_MS: f64 = 1_000.0;
    let allowed: Vec<&Candidate> =
        candidates.iter().filter(|c| super::planner::allowed(c, constraints)).collect();
    let edge_only = candidates.iter().find(|c| c.placement == Placement::EdgeOnly);
    let local = edge_only.map_or(f64::INFINITY, |c| c.edge_ms);
    // The client's own policy: the same probing, deadlines and observations as the browser.
    let mut policy = AdaptivePolicy::new(candidates.to_vec());
    policy.set_config(config);
    policy.set_constraints(constraints.clone());
    let mut requests = Vec::new();
    let mut fixed = vec![0.0; allowed.len()];
    let mut t = 0.0;
    while t < trace.duration_ms {
        let truth = (trace.at)(t);
        let up = truth.uplink_bytes_per_ms > 0.0;
        if policy.probe_due(t) {
            let padding = policy.start_probe(t);
            if up {
                let ping = |probe_bytes: u32| PingObservation {
                    probe_bytes,
                    ms: truth.rtt_ms + f64::from(probe_bytes) / truth.uplink_bytes_per_ms,
                    queue_wait_ms: truth.queue_ms,
                    skewed: false,
                    server_gap_ms: None,
                };
                policy.observe_ping(t, ping(0));
                if padding > 0 {
                    policy.observe_ping(t, ping(padding));
                }
            } else {
                policy.observe_failure(t);
            }
        }
        let _ = policy.tick(t);
        let chosen = policy.current();
        let c = candidates.iter().find(|c| c.placement == chosen).expect("chosen from candidates");
        let lat = latency(c, &truth, local, TIMEOUT_MS);
        let best = allowed
            .iter()
            .map(|c| latency(c, &truth, local, TIMEOUT_MS))
            .fold(f64::INFINITY, f64::min);
        for (sum, c) in fixed.iter_mut().zip(&allowed) {
            *sum += latency(c, &truth, local, TIMEOUT_MS);
        }
        requests.push((t, chosen.clone(), lat, best));
        // What the client observes from this request: its edge part's time, as the browser
        // reports it (the truth's edge factor, which the policy starts without)...
        if matches!(chosen, Placement::EdgeOnly | Placement::Split { .. }) {
            policy.observe_edge(t, c.depth, c.edge_ms * truth.edge_factor, None);
        }
        // ...and what the server's side took.
        if chosen != Placement::EdgeOnly {
            if up {
                let server_ms = truth.queue_ms + c.cloud_ms;
                let round_trip_ms = truth.rtt_ms + c.bytes / truth.uplink_bytes_per_ms + server_ms;
                policy.observe_request(
                    t,
                    RequestObservation {
                        bytes_sent: c.bytes,
                        round_trip_ms,
                        server_ms,
                        queue_wait_ms: Some(truth.queue_ms),
                        waited_ms: Some(truth.queue_ms),
                    },
                );
            } else {
                policy.observe_failure(t);
            }
        }
        t += interval_ms;
    }
    let sum = |p: &Placement| allowed.iter().position(|c| c.placement == *p).map(|i| fixed[i]);
    let (bi, bsum) = fixed
        .iter()
        .enumerate()
        .fold((0, f64::INFINITY), |a, (i, s)| if *s < a.1 { (i, *s) } else { a });
    SimResult {
        trace: trace.name.to_string(),
        switches: policy.switch_count().saturating_sub(1),
        adaptive_ms: requests.iter().map(|r| r.2).sum(),
        oracle_ms: requests.iter().map(|r| r.3).sum(),
        best_fixed: (allowed[bi].placement.clone(), bsum),
        edge_only_ms: sum(&Placement::EdgeOnly),
        cloud_only_ms: sum(&Placement::CloudOnly),
        requests,
    }
}

/// The traces the tests and the report use, around a base RTT of 40 ms.
pub fn standard_traces() -> Vec<Trace> {
    let c = |rtt: f64, up: f64| Conditions {
        rtt_ms: rtt,
        uplink_bytes_per_ms: up,
        ..Conditions::default()
    };
    vec![
        Trace {
            name: "step-down",
            duration_ms: 60_000.0,
            at: Box::new(move |t| c(40.0, if t < 30_000.0 { 2_000.0 } else { 40.0 })),
        },
        Trace {
            name: "step-up",
            duration_ms: 60_000.0,
            at: Box::new(move |t| c(40.0, if t < 30_000.0 { 40.0 } else { 2_000.0 })),
        },
        Trace {
            name: "slow-ramp",
            duration_ms: 90_000.0,
            at: Box::new(move |t| c(40.0, 2_000.0 * (0.01f64).powf((t / 90_000.0).min(1.0)))),
        },
        Trace {
            name: "oscillation",
            duration_ms: 60_000.0,
            at: Box::new(move |t| {
                c(40.0, if ((t / 3_000.0) as u64).is_multiple_of(2) { 150.0 } else { 600.0 })
            }),
        },
        Trace {
            name: "outage",
            duration_ms: 60_000.0,
            at: Box::new(move |t| {
                c(40.0, if (20_000.0..35_000.0).contains(&t) { 0.0 } else { 1_000.0 })
            }),
        },
        Trace {
            name: "rtt-spike",
            duration_ms: 60_000.0,
            at: Box::new(move |t| {
                c(if (20_000.0..40_000.0).contains(&t) { 400.0 } else { 40.0 }, 1_000.0)
            }),
        },
    ]
}

/// One client of the shared server in [`simulate_shared`].
#[derive(Clone, Copy, Debug)]
pub struct SharedClient {
    /// Its edge speed relative to the cost table's profile (2.0 = twice as slow).
    pub edge_factor: f64,
    /// Its link: RTT ms and uplink bytes per ms.
    pub rtt_ms: f64,
    /// Uplink, bytes per ms.
    pub uplink_bytes_per_ms: f64,
}

/// Many clients on one server, sampled over time.
#[derive(Clone, Debug, Serialize)]
pub struct SharedResult {
    /// Every second: time ms, clients whose placement sends work to the server, server queue
    /// wait ms.
    pub timeline: Vec<(f64, usize, f64)>,
    /// Latency of every request, ms, with the time it was made.
    pub latencies: Vec<(f64, f64)>,
    /// Placement changes per client (the first plan not counted).
    pub switches: Vec<usize>,
    /// Requests sent to the server per second, over the whole run.
    pub server_rps: f64,
}

impl SharedResult {
    /// The `q`-quantile of the latencies of requests made at or after `from_ms`.
    pub fn latency_quantile(&self, from_ms: f64, q: f64) -> f64 {
        let mut v: Vec<f64> =
            self.latencies.iter().filter(|(t, _)| *t >= from_ms).map(|(_, l)| *l).collect();
        v.sort_by(f64::total_cmp);
        if v.is_empty() {
            return f64::NAN;
        }
        v[((v.len() - 1) as f64 * q).round() as usize]
    }

    /// Fewest and most clients sending work to the server at the samples from `from_ms`.
    pub fn remote_range(&self, from_ms: f64) -> (usize, usize) {
        let remote = self.timeline.iter().filter(|s| s.0 >= from_ms).map(|s| s.1);
        (remote.clone().min().unwrap_or(0), remote.max().unwrap_or(0))
    }
}

/// `clients` sharing one server of `workers` model workers, each sending a request every
/// `interval_ms` (a camera, an album) for `duration_ms`, each with its own
/// [`AdaptivePolicy`] (seeded by its index) — or all pinned to `fixed`.
///
/// The server is a fluid queue: a request adds its cloud compute to the backlog and waits for
/// the backlog ahead of it divided among the workers; the workers take `workers` ms of work per
/// ms. A client learns the wait the way the browser does — from its replies (when they arrive,
/// a latency later) and from its pings while it runs locally.
pub fn simulate_shared(
    clients: &[SharedClient],
    candidates: &[Candidate],
    config: ControllerConfig,
    workers: usize,
    interval_ms: f64,
    duration_ms: f64,
    fixed: Option<&Placement>,
) -> SharedResult {
    const DT: f64 = 10.0;
    let workers = workers.max(1) as f64;
    let mut policies: Vec<AdaptivePolicy> = clients
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut p = AdaptivePolicy::new(candidates.to_vec());
            p.set_config(config);
            p.set_seed(0x5EED_0000 + i as u64 * 0x9E37_79B9);
            p.set_edge_factor(c.edge_factor);
            if let Some(f) = fixed {
                p.set_placement(0.0, f.clone());
            }
            p
        })
        .collect();
    // Observations in flight back to each client: (arrives at, what).
    let mut inbox: Vec<Vec<(f64, RequestObservation)>> = vec![Vec::new(); clients.len()];
    // Stagger the clients' first requests over one interval.
    let mut next: Vec<f64> =
        (0..clients.len()).map(|i| interval_ms * i as f64 / clients.len() as f64).collect();
    let (mut backlog_ms, mut served, mut t) = (0.0f64, 0usize, 0.0);
    let mut result = SharedResult {
        timeline: Vec::new(),
        latencies: Vec::new(),
        switches: Vec::new(),
        server_rps: 0.0,
    };
    let mut next_sample = 0.0;
    while t < duration_ms {
        let wait_ms = backlog_ms / workers;
        for (i, (policy, client)) in policies.iter_mut().zip(clients).enumerate() {
            let arrived: Vec<RequestObservation> = {
                let (now, later): (Vec<_>, Vec<_>) =
                    inbox[i].drain(..).partition(|(at, _)| *at <= t);
                inbox[i] = later;
                now.into_iter().map(|(_, o)| o).collect()
            };
            for o in arrived {
                policy.observe_request(t, o);
            }
            if policy.probe_due(t) {
                let padding = policy.start_probe(t);
                for probe_bytes in [0, padding] {
                    policy.observe_ping(
                        t,
                        PingObservation {
                            probe_bytes,
                            ms: client.rtt_ms + f64::from(probe_bytes) / client.uplink_bytes_per_ms,
                            queue_wait_ms: wait_ms,
                            skewed: false,
                            server_gap_ms: None,
                        },
                    );
                }
            }
            if fixed.is_none() {
                let _ = policy.tick(t);
            }
            if t < next[i] {
                continue;
            }
            next[i] += interval_ms;
            let chosen = policy.current();
            let c = candidates.iter().find(|c| c.placement == chosen).expect("a candidate");
            let edge_ms = c.edge_ms * client.edge_factor;
            policy.observe_edge(t, c.depth, edge_ms, None);
            if chosen == Placement::EdgeOnly {
                result.latencies.push((t, edge_ms));
                continue;
            }
            let transfer = c.bytes / client.uplink_bytes_per_ms;
            let server_ms = wait_ms + c.cloud_ms;
            backlog_ms += c.cloud_ms;
            served += 1;
            let latency = edge_ms + client.rtt_ms + transfer + server_ms;
            result.latencies.push((t, latency));
            inbox[i].push((
                t + latency,
                RequestObservation {
                    bytes_sent: c.bytes,
                    round_trip_ms: client.rtt_ms + transfer + server_ms,
                    server_ms,
                    queue_wait_ms: Some(wait_ms),
                    waited_ms: Some(wait_ms),
                },
            ));
        }
        backlog_ms = (backlog_ms - workers * DT).max(0.0);
        if t >= next_sample {
            let remote = policies.iter().filter(|p| p.current() != Placement::EdgeOnly).count();
            result.timeline.push((t, remote, backlog_ms / workers));
            next_sample += 1_000.0;
        }
        t += DT;
    }
    result.switches = policies.iter().map(|p| p.switch_count().saturating_sub(1)).collect();
    result.server_rps = served as f64 / (duration_ms / 1e3);
    result
}
