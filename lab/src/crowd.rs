//! Many users on one server: native clients that behave like the browser client, for the
//! multi-client lab (`./run.sh lab --clients N`).
//!
//! Each client is a person's device pointing a camera at something: it wants an answer every
//! `interval` (a frame that comes while the previous one is still being answered is dropped, as
//! the demo's camera loop does), runs its share of the network on its own processor, sends the
//! rest to the server over its own emulated link, and waits. The device's compute is simulated
//! by its measured time (the cost table's browser profile times the device's slowdown): on a
//! two-core machine that also runs the server, real edge compute for dozens of clients would
//! take the server's processor away and measure the host instead of the scheme. What goes over
//! the network is real: the frames the browser would send (features computed and coded once
//! with the shared code, the image as a quality-90 JPEG of the model input) through the
//! server's real queue, batching and workers.
//!
//! In `auto` each client runs the browser's own policy ([`AdaptivePolicy`], the code the wasm
//! planner wraps): it re-plans on every request, probes with pings between requests when one is
//! due, gives up on the server after the policy's deadline and answers locally, and learns the
//! server's queue from replies and pongs.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use awc::ws::{Frame, Message};
use burn::tensor::Device;
use futures_util::{SinkExt, StreamExt};
use split_shared::codec::{Calibration, EncodeContext, Setting};
use split_shared::model::{Boundary, EfficientNetLite0, Features};
use split_shared::plan::{
    AdaptivePolicy, Candidate, Constraints, ControllerConfig, PingObservation, Placement,
    RequestObservation, Trip,
};
use split_shared::protocol::{Reply, Request};

use crate::loadgen::{Socket, connect, quantile};

/// What every client of a run does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Always this placement.
    Fixed(Placement),
    /// The adaptive policy chooses per request.
    Auto,
}

impl std::str::FromStr for Mode {
    type Err = anyhow::Error;

    /// `edge`, `cloud`, `auto` or `<boundary>:<codec>` (`block5:q6`).
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "auto" => Self::Auto,
            "edge" => Self::Fixed(Placement::EdgeOnly),
            "cloud" => Self::Fixed(Placement::CloudOnly),
            _ => {
                let (b, c) = s.split_once(':').with_context(|| {
                    format!("mode {s:?}: use edge, cloud, auto or <boundary>:<codec>")
                })?;
                let boundary: Boundary = b.parse()?;
                Self::Fixed(Placement::Split {
                    boundary: boundary.name().into(),
                    codec: c.parse()?,
                })
            }
        })
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Auto => f.write_str("auto"),
            Self::Fixed(Placement::EdgeOnly) => f.write_str("edge"),
            Self::Fixed(Placement::CloudOnly) => f.write_str("cloud"),
            Self::Fixed(Placement::Split { boundary, codec }) => write!(f, "{boundary}:{codec}"),
            Self::Fixed(p @ Placement::Encrypted { .. }) => write!(f, "{p}"),
        }
    }
}

/// The request frame of every placement, built once from one photo (ids are patched per
/// request).
#[derive(Clone, Debug, Default)]
pub struct Frames(HashMap<Placement, Vec<u8>>);

impl Frames {
    /// Frames for every remote placement among `placements`: the edge's part of the network
    /// runs once per boundary here (natively, `flex`), each codec codes its features.
    ///
    /// # Errors
    /// Missing weights or calibration, an undecodable image, an uncalibrated codec.
    pub fn build(image: &[u8], placements: &[Placement]) -> Result<Self> {
        let img = split_shared::image::preprocess(image)?;
        let mut frames = HashMap::new();
        let mut splits: Vec<(Boundary, Setting)> = Vec::new();
        for p in placements {
            match p {
                Placement::EdgeOnly => {}
                Placement::CloudOnly => {
                    let jpeg = split_shared::image::encode_jpeg(&img, 90)?;
                    frames.insert(p.clone(), Request::Input { id: 0, payload: jpeg }.to_bytes());
                }
                Placement::Split { boundary, codec } => splits.push((boundary.parse()?, *codec)),
                // Its socket is `/encrypted`, with a key per session: not the crowd's.
                Placement::Encrypted { .. } => {
                    bail!("the crowd does not run the encrypted placement")
                }
            }
        }
        if splits.is_empty() {
            return Ok(Self(frames));
        }
        splits.sort_by_key(|(b, _)| b.index());
        let device = Device::flex();
        let model = EfficientNetLite0::load(&split_paths::weights_file(), &device)?;
        let calibration = Calibration::load(&split_paths::calibration_file())
            .context("the codec's calibration (run `./run.sh setup`)")?;
        let mut x = split_shared::image::to_input_tensor(&img, &device);
        let mut at = Boundary::INPUT;
        for (boundary, codec) in splits {
            if boundary != at {
                x = model.forward_range(x, at, boundary)?;
                at = boundary;
            }
            let features = Features::from_tensor(boundary, x.clone())?;
            let calibration = (codec != Setting::F32).then_some(&calibration);
            let frame = features
                .to_frame(codec, EncodeContext::new(calibration))
                .with_context(|| format!("coding {boundary} with {codec}"))?;
            frames.insert(
                Placement::Split { boundary: boundary.name().into(), codec },
                Request::Features { id: 0, frame }.to_bytes(),
            );
        }
        Ok(Self(frames))
    }

    /// The frame for `placement`.
    pub fn get(&self, placement: &Placement) -> Option<&[u8]> {
        self.0.get(placement).map(Vec::as_slice)
    }
}

/// One run of a crowd.
#[derive(Clone, Debug)]
pub struct CrowdConfig {
    /// WebSocket URL every client connects to (a link emulator's, to give each its own link).
    pub url: String,
    /// What the clients do.
    pub mode: Mode,
    /// Each client's slowdown against the cost table's edge profile (one entry per client).
    pub edge_factors: Vec<f64>,
    /// The placements with their nominal costs (the cost table's browser profile).
    pub candidates: Vec<Candidate>,
    /// Request frames.
    pub frames: Frames,
    /// How often each client wants an answer.
    pub interval: Duration,
    /// How long the run lasts.
    pub duration: Duration,
    /// Longest wait for a reply before a request counts as failed (fixed modes) or runs
    /// locally (auto, which waits its policy's deadline, at most this).
    pub timeout: Duration,
    /// The adaptive controller's tuning (auto); the browser's default unless an experiment
    /// changes it.
    pub controller: ControllerConfig,
    /// The clients' constraints and goal (auto): latency unless an experiment changes it.
    pub constraints: Constraints,
    /// Whether the clients price the server's time with its published congestion price
    /// (`load.price` of replies and pongs), as the browser client does.
    pub use_price: bool,
    /// The emulated link's uplink, kbit/s (its profile's; `None` without one): what the report's
    /// radio energy prices an upload's time at.
    pub uplink_kbps: Option<f64>,
}

/// How a request was answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// On the device (edge-only).
    Local,
    /// By the server.
    Server,
    /// The server did not answer in time (or the connection failed): auto ran it locally.
    Fallback,
    /// No answer (a fixed remote mode whose request failed).
    Failed,
}

/// One request, as its client saw it.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Sample {
    /// When it was made, ms from the start of the run.
    pub t_ms: f64,
    /// Which client.
    pub client: usize,
    /// Where it ran (`edge only`, `cloud only`, `block5/q6`).
    pub placement: String,
    /// How it was answered.
    pub outcome: Outcome,
    /// From the frame to the answer, ms.
    pub latency_ms: f64,
    /// Device compute it cost, ms (the energy proxy).
    pub edge_ms: f64,
    /// Bytes sent.
    pub bytes: usize,
    /// Top-1 class of a server answer.
    pub top1: Option<u16>,
}

/// What a crowd run measured, over the requests made after the settling time.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct CrowdReport {
    /// The mode (`auto`, `edge`, `cloud`, `block5:q6`).
    pub mode: String,
    /// Clients.
    pub clients: usize,
    /// Seconds measured (the run less its settling time).
    pub window_s: f64,
    /// Requests made in the window.
    pub requests: usize,
    /// Answered by the server.
    pub server: usize,
    /// Answered on the device by design.
    pub local: usize,
    /// Answered on the device after the server did not answer in time.
    pub fallback: usize,
    /// Not answered.
    pub failed: usize,
    /// Latency percentiles over answered requests, ms.
    #[serde(deserialize_with = "crate::measure::null_as_nan")]
    pub p50_ms: f64,
    /// 95th percentile, ms.
    #[serde(deserialize_with = "crate::measure::null_as_nan")]
    pub p95_ms: f64,
    /// 99th percentile, ms.
    #[serde(deserialize_with = "crate::measure::null_as_nan")]
    pub p99_ms: f64,
    /// Server answers per second.
    #[serde(deserialize_with = "crate::measure::null_as_nan")]
    pub server_rps: f64,
    /// Answers per second, all of them.
    #[serde(deserialize_with = "crate::measure::null_as_nan")]
    pub answers_per_s: f64,
    /// Device compute per request, ms (the energy proxy).
    #[serde(deserialize_with = "crate::measure::null_as_nan")]
    pub edge_ms_per_request: f64,
    /// Bytes sent per request.
    #[serde(deserialize_with = "crate::measure::null_as_nan")]
    pub bytes_per_request: f64,
    /// Device energy per request, mJ: each request's measured device compute, upload and wait
    /// priced by the planner's energy model (`Objective::terms`: `deviceWatts`, the radio's
    /// power model; docs/adaptive.md) — a model of measured times, not a measured energy. NaN
    /// where a request crossed a link of unknown speed.
    #[serde(default = "crate::measure::nan", deserialize_with = "crate::measure::null_as_nan")]
    pub energy_mj_per_request: f64,
    /// Parameter bytes each device needs for its placements (the most any client needed).
    pub edge_param_bytes: u64,
    /// Requests per placement, most used first.
    pub placements: Vec<(String, usize)>,
    /// Placement changes, all clients (auto).
    pub switches: usize,
    /// Fewest and most clients whose requests went to the server, per second of the window.
    pub remote_clients: (usize, usize),
    /// Top-1 classes of server answers (all the same photo: they must agree).
    pub top1: Vec<u16>,
    /// The clients in four groups by device speed, fastest first: who sends work to the server.
    #[serde(default)]
    pub by_speed: Vec<SpeedGroup>,
}

/// A quarter of the crowd by device speed.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct SpeedGroup {
    /// Slowdowns against the profile, fastest and slowest in the group.
    pub edge_factor: (f64, f64),
    /// Share of the group's requests sent to the server.
    #[serde(deserialize_with = "crate::measure::null_as_nan")]
    pub remote_share: f64,
    /// The group's 95th percentile latency, ms.
    #[serde(deserialize_with = "crate::measure::null_as_nan")]
    pub p95_ms: f64,
}

/// The window's samples in four groups of clients by speed (clients are numbered fastest
/// first, as [`spread`] makes them).
fn by_speed(factors: &[f64], window: &[&Sample]) -> Vec<SpeedGroup> {
    let n = factors.len();
    let groups = n.min(4);
    (0..groups)
        .map(|g| {
            let (lo, hi) = (g * n / groups, (g + 1) * n / groups);
            let mine: Vec<&&Sample> =
                window.iter().filter(|s| (lo..hi).contains(&s.client)).collect();
            let mut latencies: Vec<f64> = mine
                .iter()
                .filter(|s| s.outcome != Outcome::Failed)
                .map(|s| s.latency_ms)
                .collect();
            latencies.sort_by(f64::total_cmp);
            SpeedGroup {
                edge_factor: (factors[lo], factors[hi - 1]),
                remote_share: mine.iter().filter(|s| s.bytes > 0).count() as f64
                    / mine.len().max(1) as f64,
                p95_ms: quantile(&latencies, 0.95),
            }
        })
        .collect()
}

/// The reply to `id` within `wait`: `Ok(None)` when the wait ran out on a working connection
/// (a late reply is skipped when it comes), `Err` when the connection failed or sent something
/// that is not a reply.
async fn await_reply(ws: &mut Socket, id: u64, wait: Duration) -> Result<Option<Reply>> {
    let reply = tokio::time::timeout(wait, async {
        loop {
            match ws.next().await {
                Some(Ok(Frame::Binary(b))) => {
                    let reply = Reply::decode(&b)?;
                    // A late answer to a request already answered locally: skip it.
                    if reply.id() == id {
                        return Ok(reply);
                    }
                }
                Some(Ok(Frame::Ping(_) | Frame::Pong(_))) => {}
                Some(Ok(Frame::Close(reason))) => bail!("closed: {reason:?}"),
                Some(Ok(other)) => bail!("unexpected frame {other:?}"),
                Some(Err(e)) => bail!("websocket: {e}"),
                None => bail!("connection closed"),
            }
        }
    })
    .await;
    reply.map_or(Ok(None), |r| r.map(Some))
}

/// One client's connection, opened when first needed and again after it fails.
struct Link<'a> {
    url: &'a str,
    ws: Option<Socket>,
}

impl Link<'_> {
    /// Send `frame` and wait up to `wait` for the reply to `id`. A request that runs out of time
    /// keeps the connection; a failed connection is dropped and opened again next time.
    /// Open the socket if it is not open: before a frame is timed, so that a round trip
    /// measures the frame's, not the connection's handshake besides (the browser client opens
    /// its socket before its first probe too).
    async fn connected(&mut self) -> Result<()> {
        if self.ws.is_none() {
            self.ws = Some(connect(self.url).await?);
        }
        Ok(())
    }

    async fn exchange(&mut self, frame: &[u8], id: u64, wait: Duration) -> Result<Reply> {
        self.connected().await?;
        let ws = self.ws.as_mut().expect("connected");
        let reply = match ws.send(Message::Binary(frame.to_vec().into())).await {
            Ok(()) => await_reply(ws, id, wait).await,
            Err(e) => Err(anyhow::anyhow!("sending: {e}")),
        };
        match reply {
            Ok(Some(reply)) => Ok(reply),
            Ok(None) => bail!("no reply to {id} within {} ms", wait.as_millis()),
            Err(e) => {
                self.ws = None;
                Err(e)
            }
        }
    }
}

fn with_id(frame: &[u8], id: u64) -> Vec<u8> {
    let mut f = frame.to_vec();
    f[8..16].copy_from_slice(&id.to_le_bytes());
    f
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One client for the whole run.
async fn client(cfg: &CrowdConfig, index: usize, start: Instant) -> (Vec<Sample>, usize) {
    let factor = cfg.edge_factors[index];
    let mut policy = AdaptivePolicy::new(cfg.candidates.clone());
    policy.set_config(cfg.controller);
    policy.set_constraints(cfg.constraints.clone());
    policy.set_seed(0xC20_D000 + index as u64 * 0x9E37_79B9);
    policy.set_edge_factor(factor);
    if let Mode::Fixed(p) = &cfg.mode {
        policy.set_placement(0.0, p.clone());
    }
    let edge_ms = |p: &Placement| {
        cfg.candidates.iter().find(|c| &c.placement == p).map_or(0.0, |c| c.edge_ms * factor)
    };
    let full_edge_ms = edge_ms(&Placement::EdgeOnly);
    let mut link = Link { url: &cfg.url, ws: None };
    let mut samples = Vec::new();
    let mut next_id = ((index as u64) << 32) + 1;
    let now_ms = || ms(start.elapsed());
    // The clients' first frames spread over one interval.
    let mut next = start + cfg.interval.mul_f64(index as f64 / cfg.edge_factors.len() as f64);
    let end = start + cfg.duration;
    loop {
        tokio::time::sleep_until(next.into()).await;
        if Instant::now() >= end {
            break;
        }
        if cfg.mode == Mode::Auto {
            if policy.probe_due(now_ms()) {
                probe(&mut policy, &mut link, &mut next_id, cfg.timeout, start, cfg.use_price)
                    .await;
            }
            let _ = policy.tick(now_ms());
        }
        let placement = policy.current();
        let made = Instant::now();
        let t_ms = now_ms();
        let edge = edge_ms(&placement);
        tokio::time::sleep(Duration::from_secs_f64(edge / 1e3)).await;
        let mut sample = Sample {
            t_ms,
            client: index,
            placement: placement.to_string(),
            outcome: Outcome::Local,
            latency_ms: 0.0,
            edge_ms: edge,
            bytes: 0,
            top1: None,
        };
        if let Some(frame) = cfg.frames.get(&placement) {
            let id = next_id;
            next_id += 1;
            let wait = match cfg.mode {
                Mode::Auto => policy.deadline_ms(ms(cfg.timeout)),
                Mode::Fixed(_) => ms(cfg.timeout),
            };
            sample.bytes = frame.len();
            // A failed connection is the exchange's to report, below.
            let _ = link.connected().await;
            let sent = Instant::now();
            match link.exchange(&with_id(frame, id), id, Duration::from_secs_f64(wait / 1e3)).await
            {
                Ok(Reply::Result { top, timings, load, .. }) => {
                    if cfg.use_price {
                        policy.observe_price(load.price());
                    }
                    let server_ms =
                        f64::from(timings.queue_us + timings.decode_us + timings.compute_us) / 1e3;
                    policy.observe_request(
                        now_ms(),
                        RequestObservation {
                            bytes_sent: frame.len() as f64,
                            round_trip_ms: ms(sent.elapsed()),
                            server_ms,
                            queue_wait_ms: Some(load.expected_wait_ms()),
                            waited_ms: Some(f64::from(timings.queue_us) / 1e3),
                        },
                    );
                    sample.outcome = Outcome::Server;
                    sample.top1 = top.first().map(|p| p.class);
                }
                Ok(_) | Err(_) if cfg.mode == Mode::Auto => {
                    // The policy's fallback: the whole network on the device.
                    policy.observe_failure(now_ms());
                    tokio::time::sleep(Duration::from_secs_f64(full_edge_ms / 1e3)).await;
                    sample.edge_ms += full_edge_ms;
                    sample.outcome = Outcome::Fallback;
                }
                Ok(_) | Err(_) => sample.outcome = Outcome::Failed,
            }
        }
        sample.latency_ms = ms(made.elapsed());
        samples.push(sample);
        // A camera frame that came while this one was being answered is dropped.
        next += cfg.interval;
        while next < Instant::now() {
            next += cfg.interval;
        }
    }
    if let Some(mut ws) = link.ws.take() {
        let _ = ws.close().await;
    }
    // The first plan is not a switch (a fixed mode's pinned placement is not logged at all).
    (samples, policy.switch_count().saturating_sub(1))
}

/// A bare ping, then the uplink probe the policy asks for, as the browser client probes.
async fn probe(
    policy: &mut AdaptivePolicy,
    link: &mut Link<'_>,
    next_id: &mut u64,
    timeout: Duration,
    start: Instant,
    use_price: bool,
) {
    let now_ms = || ms(start.elapsed());
    let padding = policy.start_probe(now_ms());
    let probes: &[u32] = if padding == 0 { &[0] } else { &[0, padding] };
    for &probe_bytes in probes {
        let id = *next_id;
        *next_id += 1;
        let frame = Request::Ping { id, payload: vec![0; probe_bytes as usize] }.to_bytes();
        let wait = policy.ping_timeout_ms(probe_bytes, ms(timeout));
        if link.connected().await.is_err() {
            policy.observe_failure(now_ms());
            return;
        }
        let sent = Instant::now();
        match link.exchange(&frame, id, Duration::from_secs_f64(wait / 1e3)).await {
            Ok(Reply::Pong { load, .. }) => {
                if use_price {
                    policy.observe_price(load.price());
                }
                policy.observe_ping(
                    now_ms(),
                    PingObservation {
                        probe_bytes,
                        ms: ms(sent.elapsed()),
                        queue_wait_ms: load.expected_wait_ms(),
                        skewed: false,
                        server_gap_ms: None,
                    },
                );
            }
            _ => {
                policy.observe_failure(now_ms());
                return;
            }
        }
    }
}

/// Run the crowd on the current actix runtime; the report covers requests made after
/// `settle` (the first seconds are the clients finding their placements).
pub async fn run(cfg: &CrowdConfig, settle: Duration) -> (CrowdReport, Vec<Sample>) {
    let start = Instant::now();
    let runs =
        futures_util::future::join_all((0..cfg.edge_factors.len()).map(|i| client(cfg, i, start)))
            .await;
    let switches = runs.iter().map(|r| r.1).sum();
    let samples: Vec<Sample> = runs.into_iter().flat_map(|r| r.0).collect();
    let mut report = summarize(cfg, &samples, ms(settle));
    report.switches = switches;
    (report, samples)
}

/// The report over the samples made at or after `from_ms`.
pub fn summarize(cfg: &CrowdConfig, samples: &[Sample], from_ms: f64) -> CrowdReport {
    let window: Vec<&Sample> = samples.iter().filter(|s| s.t_ms >= from_ms).collect();
    let window_s = ((ms(cfg.duration) - from_ms) / 1e3).max(1e-3);
    let count = |o: Outcome| window.iter().filter(|s| s.outcome == o).count();
    let mut latencies: Vec<f64> =
        window.iter().filter(|s| s.outcome != Outcome::Failed).map(|s| s.latency_ms).collect();
    latencies.sort_by(f64::total_cmp);
    let n = window.len().max(1) as f64;
    let mut placements: HashMap<&str, usize> = HashMap::new();
    for s in &window {
        *placements.entry(s.placement.as_str()).or_default() += 1;
    }
    let mut placements: Vec<(String, usize)> =
        placements.into_iter().map(|(p, n)| (p.to_string(), n)).collect();
    placements.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    // The parameters a device must hold: the deepest placement any request used, and the whole
    // network on a device that fell back to it.
    let edge_param_bytes = window
        .iter()
        .filter_map(|s| {
            let p = if s.outcome == Outcome::Fallback { "edge only" } else { s.placement.as_str() };
            cfg.candidates.iter().find(|c| c.placement.to_string() == p)
        })
        .map(|c| c.edge_param_bytes)
        .max()
        .unwrap_or(0);
    // Clients whose requests went to the server, per second.
    let seconds = window_s.ceil() as usize;
    let mut remote = vec![std::collections::HashSet::new(); seconds.max(1)];
    for s in window.iter().filter(|s| s.bytes > 0) {
        let i = (((s.t_ms - from_ms) / 1e3) as usize).min(remote.len() - 1);
        remote[i].insert(s.client);
    }
    let remote_counts = remote.iter().map(std::collections::HashSet::len);
    CrowdReport {
        mode: cfg.mode.to_string(),
        clients: cfg.edge_factors.len(),
        window_s,
        requests: window.len(),
        server: count(Outcome::Server),
        local: count(Outcome::Local),
        fallback: count(Outcome::Fallback),
        failed: count(Outcome::Failed),
        p50_ms: quantile(&latencies, 0.50),
        p95_ms: quantile(&latencies, 0.95),
        p99_ms: quantile(&latencies, 0.99),
        server_rps: count(Outcome::Server) as f64 / window_s,
        answers_per_s: latencies.len() as f64 / window_s,
        edge_ms_per_request: window.iter().map(|s| s.edge_ms).sum::<f64>() / n,
        bytes_per_request: window.iter().map(|s| s.bytes as f64).sum::<f64>() / n,
        energy_mj_per_request: window.iter().map(|s| energy_mj(cfg, s)).sum::<f64>() / n,
        edge_param_bytes,
        placements,
        switches: 0,
        remote_clients: (
            remote_counts.clone().min().unwrap_or(0),
            remote_counts.max().unwrap_or(0),
        ),
        top1: window.iter().filter_map(|s| s.top1).collect(),
        by_speed: by_speed(&cfg.edge_factors, &window),
    }
}

/// A request's device energy under the clients' objective: its compute, and for one that
/// crossed the link its upload (bytes at the link's uplink), then the wait for the answer, then
/// the radio's tail (shared with the next request when they come closer than it).
fn energy_mj(cfg: &CrowdConfig, s: &Sample) -> f64 {
    let objective = &cfg.constraints.objective;
    let trip = match (s.bytes, cfg.uplink_kbps) {
        (0, _) => None,
        (_, None) => return f64::NAN,
        (bytes, Some(kbps)) => {
            let uplink_bytes_per_ms = kbps / 8.0;
            let transfer_ms = bytes as f64 / uplink_bytes_per_ms;
            let wait_ms = (s.latency_ms - s.edge_ms - transfer_ms).max(0.0);
            Some(Trip { transfer_ms, uplink_bytes_per_ms, wait_ms, cloud_ms: 0.0 })
        }
    };
    let terms = objective.terms(s.edge_ms, trip, 1.0);
    terms.compute_mj + terms.radio_mj
}

/// `n` device slowdowns spread evenly over `lo..=hi` (a crowd of phones and laptops).
pub fn spread(n: usize, lo: f64, hi: f64) -> Vec<f64> {
    (0..n).map(|i| if n == 1 { lo } else { lo + (hi - lo) * i as f64 / (n - 1) as f64 }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_print_back() {
        for s in ["auto", "edge", "cloud", "block5:q6", "block11:f32"] {
            assert_eq!(s.parse::<Mode>().unwrap().to_string(), s);
        }
        assert!("block99:q6".parse::<Mode>().is_err());
        assert!("sideways".parse::<Mode>().unwrap_err().to_string().contains("auto"));
    }

    #[test]
    fn spreads_cover_the_range() {
        assert_eq!(spread(3, 2.0, 6.0), vec![2.0, 4.0, 6.0]);
        assert_eq!(spread(1, 2.0, 6.0), vec![2.0]);
    }

    #[test]
    fn summaries_count_only_the_window() {
        let cfg = CrowdConfig {
            url: String::new(),
            mode: Mode::Auto,
            edge_factors: vec![1.0, 1.0],
            candidates: Vec::new(),
            frames: Frames::default(),
            interval: Duration::from_millis(100),
            duration: Duration::from_secs(4),
            timeout: Duration::from_secs(1),
            controller: ControllerConfig::default(),
            constraints: Constraints::default(),
            use_price: true,
            uplink_kbps: Some(8_000.0),
        };
        let sample = |t_ms: f64, client, outcome, latency_ms, bytes| Sample {
            t_ms,
            client,
            placement: if bytes > 0 { "block5/q6".into() } else { "edge only".into() },
            outcome,
            latency_ms,
            edge_ms: 10.0,
            bytes,
            top1: (outcome == Outcome::Server).then_some(282),
        };
        let samples = vec![
            sample(500.0, 0, Outcome::Server, 999.0, 100),
            sample(2_100.0, 0, Outcome::Server, 50.0, 100),
            sample(2_200.0, 1, Outcome::Local, 30.0, 0),
            sample(3_500.0, 1, Outcome::Failed, 0.0, 100),
            sample(3_600.0, 0, Outcome::Server, 60.0, 100),
        ];
        let r = summarize(&cfg, &samples, 2_000.0);
        assert_eq!((r.requests, r.server, r.local, r.failed), (4, 2, 1, 1));
        assert_eq!(r.p95_ms, 60.0, "the settling request and the failure are not latencies");
        assert_eq!(r.server_rps, 1.0);
        assert_eq!(r.remote_clients, (1, 2));
        assert_eq!(r.placements[0], ("block5/q6".to_string(), 3));
        assert_eq!(r.top1, vec![282, 282]);
        assert_eq!(r.by_speed.len(), 2);
        assert_eq!(r.by_speed[0].remote_share, 1.0, "client 0 sent all three");
        assert_eq!(r.by_speed[1].remote_share, 0.5, "client 1 ran one locally, sent one");
        // Energy: a local answer is its compute alone (10 ms at the default 2.3 W); one that
        // crossed the link adds the radio's; without the link's speed there is no figure.
        let local = summarize(&cfg, &samples[2..3], 2_000.0);
        assert!((local.energy_mj_per_request - 23.0).abs() < 1e-9, "{local:?}");
        assert!(r.energy_mj_per_request > 23.0, "{r:?}");
        let unknown = CrowdConfig { uplink_kbps: None, ..cfg };
        assert!(summarize(&unknown, &samples, 2_000.0).energy_mj_per_request.is_nan());
    }
}
