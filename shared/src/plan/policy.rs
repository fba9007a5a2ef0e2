//! The adaptive client's whole policy, beside the choice of placement: when to probe the
//! network and with what, how long to wait for the server before running locally, and what
//! each reply, ping and failure teaches the monitor. The browser runs it through the wasm
//! module; the trace simulator runs the same code, so what it measures is what ships.

use serde::{Deserialize, Serialize};

use super::fixed::FixedCosts;
use super::{
    Candidate, Constraints, Controller, ControllerConfig, Decision, Estimate, Forecast,
    NetworkMonitor, Placement, plan_candidates,
};

/// Probing and waiting rules.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProbeConfig {
    /// Probe the network this often while the adaptive mode is in use, ms.
    pub period_ms: f64,
    /// A bare ping unanswered this long counts as an outage (the detection time), ms.
    pub ping_timeout_ms: f64,
    /// Padding of the uplink probe, bytes.
    pub upload_probe_bytes: u32,
    /// Nothing sent for this long: add an uplink probe to the bare ping, ms.
    pub idle_ms: f64,
    /// A request waits for the server at least this long before running locally, ms...
    pub min_deadline_ms: f64,
    /// ...or this many times the predicted network-and-server part, whichever is longer.
    pub deadline_factor: f64,
    /// Weight of a new round trip in the smoothed base RTT that upload times are measured
    /// against.
    pub rtt_smoothing: f64,
    /// An upload timed shorter than this fraction of the base round trip (or 1 ms) is within a
    /// round trip's jitter: it counts as taking that long, so it teaches "at least this fast"
    /// rather than a rate without bound (a 16 kB upload timed at 0.05 ms is 320 MB/s).
    pub upload_resolution: f64,
    /// The round trip the planner uses is the shortest bare ping of this window, ms. A pong
    /// can come back late, never early: one that waited behind the page's own work (an edge
    /// run that started while it was out, a request queued before it at the server) reads
    /// long, and in the browser lab on 4G such pings read 80-170 ms on a 55-65 ms link.
    /// The window's minimum drops them; a lasting rise shows once the window has only new
    /// pings (about two probe periods).
    pub rtt_window_ms: f64,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        Self {
            period_ms: 2_000.0,
            ping_timeout_ms: 2_000.0,
            upload_probe_bytes: 16_384,
            idle_ms: 2_000.0,
            min_deadline_ms: 1_500.0,
            deadline_factor: 3.0,
            rtt_smoothing: 0.3,
            upload_resolution: 0.25,
            rtt_window_ms: 5_000.0,
        }
    }
}

/// A finished request, as the client saw it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestObservation {
    /// Bytes sent (0: it ran on the edge).
    pub bytes_sent: f64,
    /// From sending to the reply, ms.
    pub round_trip_ms: f64,
    /// What the server reported spending (queue + decode + compute), ms.
    pub server_ms: f64,
    /// The server's expected queue wait from the reply's load, ms, when there was a reply.
    pub queue_wait_ms: Option<f64>,
    /// How long this request itself waited in the server's queue (the reply's `queue_us`), ms.
    /// A worker takes everything queued into its batch, so under load a reply often leaves
    /// with the queue empty and `queue_wait_ms` 0 while every request waited a whole batch.
    pub waited_ms: Option<f64>,
}

/// An answered ping.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PingObservation {
    /// Padding it carried (0: a bare round-trip ping).
    pub probe_bytes: u32,
    /// Its round trip, ms.
    pub ms: f64,
    /// The server's expected queue wait from the pong, ms.
    pub queue_wait_ms: f64,
    /// An edge run overlapped it (the page's thread was busy), so `ms` is not the network's.
    pub skewed: bool,
    /// The server's time from reading the frame before this ping to reading this one, ms
    /// (the pong's `gap_us`; `None` when the server sent none). For an uplink probe sent right
    /// behind the probe's bare ping, its padding's upload time: timed on the server's clock, it
    /// holds however late the page read the pong, so the probe need not pause edge runs.
    pub server_gap_ms: Option<f64>,
}

/// What the page shows to explain the current choice.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// Conditions now and forecast.
    pub forecast: Forecast,
    /// The placement in force.
    pub current: Option<Placement>,
    /// Its predicted breakdown under the forecast.
    pub predicted: Option<Estimate>,
    /// The best allowed candidates under the forecast, best first.
    pub ranked: Vec<Estimate>,
    /// Why none is ranked (the constraints or a hard deadline exclude every candidate).
    pub refused: Option<String>,
    /// How long a request now waits for the server before running locally, ms.
    pub deadline_ms: f64,
    /// The newest changes of placement (at most [`super::SWITCH_LOG_CAP`]), oldest first.
    pub switches: Vec<super::Switch>,
}

/// The controller, the monitor and the probing state of one client.
#[derive(Clone, Debug)]
pub struct AdaptivePolicy {
    candidates: Vec<Candidate>,
    constraints: Constraints,
    config: ControllerConfig,
    probe: ProbeConfig,
    monitor: NetworkMonitor,
    controller: Controller,
    /// The controller's random seed (its load-driven coin flips and dwell jitter).
    seed: u64,
    base_rtt_ms: Option<f64>,
    last_bare_ping_ms: Option<f64>,
    /// The bare pings of the last [`ProbeConfig::rtt_window_ms`]: (when, ms).
    bare_pings: std::collections::VecDeque<(f64, f64)>,
    /// The device's measured work per request beside the stages.
    fixed: FixedCosts,
    last_sent_ms: f64,
    last_probe_ms: f64,
    /// When the latest attempt that got an answer (a reply or a pong) was sent.
    last_answered_sent_ms: f64,
}

impl AdaptivePolicy {
    /// A policy over `candidates` (from the cost table) with default tuning and no constraints.
    pub fn new(candidates: Vec<Candidate>) -> Self {
        let config = ControllerConfig::default();
        Self {
            candidates,
            constraints: Constraints::default(),
            config,
            probe: ProbeConfig::default(),
            monitor: NetworkMonitor::new(),
            controller: Controller::new(config),
            seed: 0x9E37_79B9_7F4A_7C15,
            base_rtt_ms: None,
            last_bare_ping_ms: None,
            bare_pings: std::collections::VecDeque::new(),
            fixed: FixedCosts::default(),
            last_sent_ms: f64::NEG_INFINITY,
            last_probe_ms: f64::NEG_INFINITY,
            last_answered_sent_ms: f64::NEG_INFINITY,
        }
    }

    /// Replace the controller's tuning (the placement history starts again).
    pub fn set_config(&mut self, config: ControllerConfig) {
        self.config = config;
        self.controller = Controller::with_seed(config, self.seed);
    }

    /// Seed the controller's coin (the placement history starts again). Clients of one server
    /// need different seeds, or their load-driven switches stay in step.
    pub fn set_seed(&mut self, seed: u64) {
        self.seed = seed;
        self.controller = Controller::with_seed(self.config, seed);
    }

    /// Replace the probing rules.
    pub fn set_probe_config(&mut self, probe: ProbeConfig) {
        self.probe = probe;
    }

    /// The probing rules in force.
    pub fn probe_config(&self) -> ProbeConfig {
        self.probe
    }

    /// Limit the candidates the controller may pick; the next tick re-plans under them (a
    /// placement they forbid is not used for another request).
    pub fn set_constraints(&mut self, constraints: Constraints) {
        self.constraints = constraints;
        self.controller.replan();
    }

    /// The candidates, for adjusting their nominal costs (e.g. the size of this image).
    pub fn candidates_mut(&mut self) -> &mut [Candidate] {
        &mut self.candidates
    }

    /// Scale the edge column by this device's speed relative to the profile's.
    pub fn set_edge_factor(&mut self, factor: f64) {
        self.monitor.set_edge_factor(factor);
    }

    /// At `now`, an edge run to the boundary at `depth` (in the model's forward order) took
    /// `ms` on this device, all of it (decoding the photo, the stages, coding the features),
    /// `stages_ms` of it in the network's stages when the caller timed them apart.
    ///
    /// With the stages timed, the edge factor follows their time against the table's (the
    /// warm-up's measure: bare stages), and the rest is the run's fixed cost at that depth
    /// ([`Candidate::edge_fixed_ms`]), so a shallow split's decoding does not inflate the
    /// price of the whole network. Without, the whole run's ratio to the stages is the
    /// factor's sample, from runs whose stages are at least a quarter of the whole network's
    /// (a shallow run's fixed costs would dominate its ratio). Either way the factor follows
    /// what requests cost rather than the warm-up alone: a device slows down (heat, another
    /// tab).
    pub fn observe_edge(&mut self, now: f64, depth: usize, ms: f64, stages_ms: Option<f64>) {
        let local =
            |c: &&Candidate| matches!(c.placement, Placement::EdgeOnly | Placement::Split { .. });
        let whole = self.candidates.iter().filter(local).map(|c| c.edge_ms).fold(0.0, f64::max);
        let Some(nominal) =
            self.candidates.iter().filter(local).find(|c| c.depth == depth).map(|c| c.edge_ms)
        else {
            return;
        };
        if !(nominal > 0.0 && ms.is_finite()) {
            return;
        }
        match stages_ms.filter(|s| s.is_finite() && *s > 0.0 && *s <= ms) {
            Some(stages) => {
                // A run of a stage or two is mostly the timer's and the first stage's noise.
                if nominal >= whole / 8.0 {
                    self.monitor.observe_edge_ratio(now, stages / nominal);
                }
                self.fixed.observe_local(depth, ms - stages);
                self.fixed.apply(&mut self.candidates);
            }
            None if nominal >= whole / 4.0 => self.monitor.observe_edge_ratio(now, ms / nominal),
            None => {}
        }
    }

    /// A cloud-only request's work on this device before anything was sent took `ms`: making
    /// the upload (the photo decoded, cropped to the model's input and encoded as JPEG). That
    /// is cloud-only's device time: in the browser lab on 4G (4x CPU throttle) it was 27 ms of
    /// a 122 ms answer, which a planner counting cloud-only's device time as 0 did not see.
    /// The median of the last few counts, as measured: a fixed cost, which the edge factor
    /// does not scale; before any local run, it also stands for a local run's (which decodes
    /// and crops the same photo).
    pub fn observe_upload_prep(&mut self, ms: f64) {
        self.fixed.observe_upload_prep(ms);
        self.fixed.apply(&mut self.candidates);
    }

    /// Conditions now and forecast over the controller's horizon.
    pub fn forecast(&self) -> Forecast {
        self.monitor.forecast(self.config.horizon_ms)
    }

    /// Re-plan if due.
    pub fn tick(&mut self, now: f64) -> Decision {
        self.monitor.forget_edge_before(now);
        let forecast = self.forecast();
        self.controller.tick(now, &self.candidates, &forecast, &self.constraints)
    }

    /// The placement in force; edge-only before the first tick.
    pub fn current(&self) -> Placement {
        self.controller.current().cloned().unwrap_or(Placement::EdgeOnly)
    }

    /// Pin a placement (manual override).
    pub fn set_placement(&mut self, now: f64, placement: Placement) {
        self.controller.set(now, placement);
    }

    /// The newest changes of placement (at most [`super::SWITCH_LOG_CAP`]), oldest first.
    pub fn switches(&self) -> &[super::Switch] {
        self.controller.log()
    }

    /// How many times the placement changed, the first choice included.
    pub fn switch_count(&self) -> usize {
        self.controller.switch_count()
    }

    /// How long a request placed now may wait for the server before it runs locally instead:
    /// `deadline_factor` times the predicted network and server part, at least
    /// `min_deadline_ms`, at most `timeout_ms`. A link that silently stops carrying bytes must
    /// not stall the caller for the whole timeout.
    pub fn deadline_ms(&self, timeout_ms: f64) -> f64 {
        let remote = self
            .controller
            .predicted(&self.candidates, &self.forecast().predicted, &self.constraints.objective)
            .map_or(f64::INFINITY, |p| p.transfer_ms + p.rtt_ms + p.queue_ms + p.cloud_ms);
        (self.probe.deadline_factor * remote).max(self.probe.min_deadline_ms).min(timeout_ms)
    }

    /// A request came back (or ran locally).
    pub fn observe_request(&mut self, now: f64, r: RequestObservation) {
        if r.bytes_sent > 0.0 {
            // The server answered it (a local answer sends nothing and says nothing of the link).
            self.answered(now - r.round_trip_ms);
            // A cloud-only request says what this client's inputs weigh (the table's figure is
            // a typical photo's JPEG): the next is priced at it.
            if self.current() == Placement::CloudOnly {
                for c in self.candidates.iter_mut().filter(|c| c.placement == Placement::CloudOnly)
                {
                    c.bytes = r.bytes_sent;
                }
            }
            self.last_sent_ms = now;
            let network = r.round_trip_ms - r.server_ms;
            let base = self.base_rtt_ms.unwrap_or(network);
            let upload = self.resolved_upload_ms(network - base);
            self.monitor.observe_network_time(r.bytes_sent, network);
            self.monitor.observe_upload(now, r.bytes_sent, upload);
        }
        // The wait a new request would see: the larger of what the server forecasts and what
        // this request just waited.
        let wait = match (r.queue_wait_ms, r.waited_ms) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        if let Some(wait) = wait {
            self.monitor.observe_queue(now, wait);
        }
    }

    /// A request or a ping failed: the link counts as down until something gets through.
    pub fn observe_failure(&mut self, now: f64) {
        self.observe_failure_of(now, now);
    }

    /// A request or a ping sent at `sent` failed at `now`. Something sent after it that got
    /// an answer is newer news of the link: the failure then says nothing (a ping that timed
    /// out late, sent while the link was down, would otherwise mark down a link a later pong
    /// had found up again).
    pub fn observe_failure_of(&mut self, now: f64, sent: f64) {
        if sent < self.last_answered_sent_ms {
            return;
        }
        self.monitor.observe_outage(now);
    }

    /// Something sent at `sent` was answered.
    fn answered(&mut self, sent: f64) {
        if sent.is_finite() {
            self.last_answered_sent_ms = self.last_answered_sent_ms.max(sent);
        }
    }

    /// Whether a probe is due at `now`. A periodic timer asks a little early (three quarters of
    /// the period) so that timer jitter does not skip a period.
    pub fn probe_due(&self, now: f64) -> bool {
        now - self.last_probe_ms > 0.75 * self.probe.period_ms
    }

    /// Start a probe at `now`: returns the padding of the uplink probe to send after the bare
    /// ping, or 0 when the link carried a request recently enough to measure the uplink.
    pub fn start_probe(&mut self, now: f64) -> u32 {
        self.last_probe_ms = now;
        // The uplink probe's round trip is rebuilt from this probe's own bare ping alone.
        self.last_bare_ping_ms = None;
        if now - self.last_sent_ms > self.probe.idle_ms { self.probe.upload_probe_bytes } else { 0 }
    }

    /// How long to wait for the pong of a ping with `probe_bytes` of padding: a padded probe
    /// needs time to serialize on a slow uplink, a bare one does not.
    pub fn ping_timeout_ms(&self, probe_bytes: u32, timeout_ms: f64) -> f64 {
        if probe_bytes == 0 {
            self.probe.ping_timeout_ms
        } else {
            (4.0 * self.probe.ping_timeout_ms).min(timeout_ms)
        }
    }

    /// A pong came back: the link is up; unless an edge run overlapped it, its round trip is
    /// the network's. An uplink probe's upload time is the server's gap when the pong has one
    /// (skewed or not), else its round trip less the bare ping's.
    pub fn observe_ping(&mut self, now: f64, p: PingObservation) {
        self.answered(now - p.ms);
        self.monitor.observe_queue(now, p.queue_wait_ms);
        self.monitor.observe_alive();
        if p.probe_bytes > 0
            && let Some(gap) = p.server_gap_ms
        {
            let bytes = f64::from(p.probe_bytes);
            // Its round trip, had the page read it on time: the bare ping's, which went the
            // same way just ahead of it, plus the upload. Without an unskewed bare ping in this
            // probe the slip learns nothing.
            if let Some(rtt) = self.last_bare_ping_ms {
                self.monitor.observe_network_time(bytes, rtt + gap);
            }
            self.monitor.observe_upload(now, bytes, self.resolved_upload_ms(gap));
            return;
        }
        if p.skewed {
            return;
        }
        if p.probe_bytes == 0 {
            let rtt = self.windowed_rtt(now, p.ms);
            let a = self.probe.rtt_smoothing;
            self.base_rtt_ms = Some(self.base_rtt_ms.map_or(rtt, |b| (1.0 - a) * b + a * rtt));
            // The padded probe follows this ping at once, under the same conditions: its
            // round trip is measured against this ping's own.
            self.last_bare_ping_ms = Some(p.ms);
            self.monitor.observe_rtt(now, rtt);
        } else if let Some(rtt) = self.last_bare_ping_ms {
            let upload = self.resolved_upload_ms(p.ms - rtt);
            self.monitor.observe_network_time(f64::from(p.probe_bytes), p.ms);
            self.monitor.observe_upload(now, f64::from(p.probe_bytes), upload);
        }
    }

    /// The shortest bare ping of the window ending with this one (`ms` at `now`).
    fn windowed_rtt(&mut self, now: f64, ms: f64) -> f64 {
        let window = self.probe.rtt_window_ms;
        while self.bare_pings.front().is_some_and(|(t, _)| now - t > window || *t > now) {
            self.bare_pings.pop_front();
        }
        self.bare_pings.push_back((now, ms));
        self.bare_pings.iter().map(|(_, ms)| *ms).fold(f64::INFINITY, f64::min)
    }

    /// The time an upload measured as `ms` beyond the round trip counts as: at least the
    /// resolution ([`ProbeConfig::upload_resolution`]).
    fn resolved_upload_ms(&self, ms: f64) -> f64 {
        let floor = self.base_rtt_ms.map_or(0.0, |b| b * self.probe.upload_resolution);
        ms.max(floor).max(1.0)
    }

    /// The server's congestion price, as a reply or a pong published it.
    pub fn observe_price(&mut self, price: f64) {
        self.monitor.observe_price(price);
    }

    /// Conditions, the current choice, the ranking and the deadline, for the page.
    pub fn explain(&self, timeout_ms: f64) -> Explanation {
        let forecast = self.forecast();
        let (ranked, refused) =
            match plan_candidates(&self.candidates, &forecast.predicted, &self.constraints) {
                Ok(all) => (all.into_iter().take(8).collect(), None),
                Err(e) => (Vec::new(), Some(e.to_string())),
            };
        Explanation {
            forecast,
            current: self.controller.current().cloned(),
            predicted: self.controller.predicted(
                &self.candidates,
                &forecast.predicted,
                &self.constraints.objective,
            ),
            ranked,
            refused,
            deadline_ms: self.deadline_ms(timeout_ms),
            switches: self.controller.log().to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Boundary;

    /// A bare ping's pong after `ms`, read on time.
    fn bare_ping(ms: f64) -> PingObservation {
        PingObservation {
            probe_bytes: 0,
            ms,
            queue_wait_ms: 0.0,
            skewed: false,
            server_gap_ms: None,
        }
    }

    fn candidates() -> Vec<Candidate> {
        let b = Boundary::block(5).unwrap();
        vec![
            Candidate {
                placement: Placement::EdgeOnly,
                depth: usize::from(Boundary::LOGITS.index()),
                edge_ms: 200.0,
                edge_fixed_ms: 0.0,
                bytes: 0.0,
                cloud_ms: 0.0,
                agreement: 1.0,
                edge_param_bytes: 0,
            },
            Candidate {
                placement: Placement::Split {
                    boundary: b.name().into(),
                    codec: "q6".parse().unwrap(),
                },
                depth: usize::from(b.index()),
                edge_ms: 50.0,
                edge_fixed_ms: 0.0,
                bytes: 10_000.0,
                cloud_ms: 30.0,
                agreement: 0.99,
                edge_param_bytes: 0,
            },
        ]
    }

    #[test]
    fn probes_follow_the_period_and_pad_only_when_idle() {
        let mut p = AdaptivePolicy::new(candidates());
        assert!(p.probe_due(0.0));
        assert_eq!(p.start_probe(0.0), ProbeConfig::default().upload_probe_bytes);
        assert!(!p.probe_due(1_000.0) && p.probe_due(1_600.0));
        let sent = RequestObservation {
            bytes_sent: 10_000.0,
            round_trip_ms: 150.0,
            server_ms: 40.0,
            queue_wait_ms: Some(5.0),
            waited_ms: Some(1.0),
        };
        p.observe_request(1_700.0, sent);
        assert_eq!(p.start_probe(2_000.0), 0, "the request measured the uplink");
        assert!(p.start_probe(4_000.0) > 0, "idle again");
    }

    #[test]
    fn pings_set_the_base_rtt_and_an_outage_shortens_nothing_but_the_link() {
        let mut p = AdaptivePolicy::new(candidates());
        let bare = bare_ping(40.0);
        p.observe_ping(0.0, bare);
        // 16 KiB in 164 ms - 40 ms of round trip: 132 bytes/ms.
        let padded = PingObservation { probe_bytes: 16_384, ms: 164.0, ..bare };
        p.observe_ping(0.0, padded);
        let f = p.forecast();
        assert!((f.now.rtt_ms - 40.0).abs() < 1e-9, "{f:?}");
        assert!((f.now.uplink_bytes_per_ms - 16_384.0 / 124.0).abs() < 1e-6, "{f:?}");
        // A skewed ping (an edge run overlapped it) teaches nothing about the round trip...
        p.observe_ping(1.0, PingObservation { ms: 900.0, skewed: true, ..bare });
        assert!((p.forecast().now.rtt_ms - 40.0).abs() < 1e-9);
        p.observe_failure(2.0);
        assert!(!p.forecast().link_up);
        // ...but that it came back at all says the link is up again.
        p.observe_ping(3.0, PingObservation { ms: 900.0, skewed: true, ..bare });
        assert!(p.forecast().link_up);
        assert!((p.forecast().now.rtt_ms - 40.0).abs() < 1e-9);
    }

    /// An uplink probe read late (an edge run held the page's thread) still times the uplink
    /// when the server says how long after the bare ping it arrived; without the gap it
    /// teaches nothing.
    #[test]
    fn a_late_uplink_probe_is_timed_by_the_servers_gap() {
        let bare = bare_ping(150.0);
        // 16 KiB at 30 bytes/ms (240 kbit/s) arrived 546 ms after the bare ping; the page
        // read its pong 170 ms late.
        let padded = PingObservation {
            probe_bytes: 16_384,
            ms: 150.0 + 546.0 + 170.0,
            skewed: true,
            server_gap_ms: Some(16_384.0 / 30.0),
            ..bare
        };
        let mut p = AdaptivePolicy::new(candidates());
        p.start_probe(0.0);
        p.observe_ping(150.0, bare);
        p.observe_ping(866.0, padded);
        let up = p.forecast().now.uplink_bytes_per_ms;
        assert!((up - 30.0).abs() < 1e-6, "{up}");
        let mut p = AdaptivePolicy::new(candidates());
        p.start_probe(0.0);
        p.observe_ping(150.0, bare);
        p.observe_ping(866.0, PingObservation { server_gap_ms: None, ..padded });
        assert_eq!(
            p.forecast().now.uplink_bytes_per_ms,
            AdaptivePolicy::new(candidates()).forecast().now.uplink_bytes_per_ms
        );
    }

    /// Pings overlap on a slow link (one every 2 s, each waiting up to 2 s): one sent while the
    /// link was down may time out after a later one found it up again.
    #[test]
    fn a_failure_older_than_an_answer_does_not_mark_the_link_down() {
        let mut p = AdaptivePolicy::new(candidates());
        let bare = bare_ping(40.0);
        p.observe_failure_of(1_000.0, 0.0);
        assert!(!p.forecast().link_up);
        // Sent at 1,500, answered at 1,540: up again.
        p.observe_ping(1_540.0, bare);
        assert!(p.forecast().link_up);
        // A ping sent at 1,000 times out at 3,000: older than the answer, it changes nothing.
        p.observe_failure_of(3_000.0, 1_000.0);
        assert!(p.forecast().link_up, "a stale failure marked the link down");
        // One sent after the answer did fail: down.
        p.observe_failure_of(4_000.0, 2_000.0);
        assert!(!p.forecast().link_up);
        // A request's reply counts as an answer from when it was sent.
        let reply = RequestObservation {
            bytes_sent: 10_000.0,
            round_trip_ms: 150.0,
            server_ms: 20.0,
            queue_wait_ms: None,
            waited_ms: None,
        };
        p.observe_request(5_150.0, reply);
        assert!(p.forecast().link_up);
        p.observe_failure_of(6_000.0, 4_500.0);
        assert!(p.forecast().link_up, "sent before the request that was answered");
        p.observe_failure(6_100.0);
        assert!(!p.forecast().link_up, "a failure with no send time is news");
    }

    #[test]
    fn a_request_that_waited_shows_the_queue_even_when_its_reply_reports_none() {
        // The engine batches whatever is queued, so under load a reply often leaves with the
        // queue empty (forecast 0) although the request waited a whole batch.
        let sent = |queue_wait_ms, waited_ms| RequestObservation {
            bytes_sent: 10_000.0,
            round_trip_ms: 150.0,
            server_ms: 120.0,
            queue_wait_ms,
            waited_ms,
        };
        let mut p = AdaptivePolicy::new(candidates());
        p.observe_request(0.0, sent(Some(0.0), Some(80.0)));
        let f = p.forecast();
        assert!(f.measured.queue && (f.now.queue_ms - 80.0).abs() < 1e-9, "{f:?}");
        let mut p = AdaptivePolicy::new(candidates());
        p.observe_request(0.0, sent(Some(30.0), Some(2.0)));
        assert!((p.forecast().now.queue_ms - 30.0).abs() < 1e-9, "the forecast when larger");
        let mut p = AdaptivePolicy::new(candidates());
        p.observe_request(0.0, sent(None, None));
        assert!(!p.forecast().measured.queue, "no reply, no queue observation");
    }

    #[test]
    fn the_deadline_scales_with_the_predicted_remote_part_within_bounds() {
        let mut p = AdaptivePolicy::new(candidates());
        p.set_placement(0.0, candidates()[1].placement.clone());
        let cfg = ProbeConfig::default();
        let d = p.deadline_ms(120_000.0);
        assert!(d >= cfg.min_deadline_ms && d <= 120_000.0, "{d}");
        assert_eq!(p.deadline_ms(100.0), 100.0, "never beyond the request timeout");
        p.set_placement(0.0, Placement::EdgeOnly);
        assert_eq!(p.deadline_ms(120_000.0), cfg.min_deadline_ms);
    }

    /// Encryption asked for between two ticks takes effect at the next, the period not
    /// awaited: the split in force is not used for another request; and when nothing is
    /// allowed, the forbidden placement is dropped (local) rather than kept.
    #[test]
    fn new_constraints_take_effect_at_the_next_tick() {
        let mut c = candidates();
        let sealed = Placement::Encrypted { boundary: "pool".into() };
        c.push(Candidate { placement: sealed.clone(), bytes: 600_000.0, ..c[1].clone() });
        let mut p = AdaptivePolicy::new(c);
        let _ = p.tick(0.0);
        assert!(matches!(p.current(), Placement::Split { .. }), "{}", p.current());
        p.set_constraints(Constraints { encrypted: true, ..Default::default() });
        assert!(matches!(p.tick(10.0), Decision::Switch(_)));
        assert!(p.current().server_reads_nothing(), "{}", p.current());
        // Back to plain: edge-only is still allowed, so the split returns as any switch does,
        // once the placement has dwelt.
        p.set_constraints(Constraints::default());
        let later = 10.0 + 2.0 * ControllerConfig::default().min_dwell_ms;
        let _ = p.tick(later);
        assert!(matches!(p.current(), Placement::Split { .. }), "{}", p.current());
        // A floor no candidate meets: nothing chosen, and the split is not kept.
        p.set_constraints(Constraints { privacy_floor: 99, ..Default::default() });
        assert_eq!(p.tick(later + 1.0), Decision::Keep);
        assert_eq!(p.current(), Placement::EdgeOnly);
    }

    /// A page open for hours keeps the newest switches to show, not every one: the log is
    /// bounded (every request's explanation carries it) while the count goes on.
    #[test]
    fn the_switch_log_keeps_the_newest_and_counts_them_all() {
        use crate::plan::SWITCH_LOG_CAP;
        let mut c = candidates();
        let sealed = Placement::Encrypted { boundary: "pool".into() };
        c.push(Candidate { placement: sealed, bytes: 600_000.0, ..c[1].clone() });
        let mut p = AdaptivePolicy::new(c);
        let dwell = 2.0 * ControllerConfig::default().min_dwell_ms;
        let rounds = SWITCH_LOG_CAP + 20;
        let mut last = None;
        for i in 0..rounds {
            // Encryption on and off: each tick must switch between the sealed placement and the
            // split.
            p.set_constraints(Constraints { encrypted: i % 2 == 0, ..Default::default() });
            match p.tick(i as f64 * dwell) {
                Decision::Switch(s) => last = Some(s),
                Decision::Keep => panic!("round {i} kept {}", p.current()),
            }
        }
        assert_eq!(p.switch_count(), rounds);
        assert_eq!(p.switches().len(), SWITCH_LOG_CAP);
        assert_eq!(p.switches().last(), last.as_ref());
        let first_kept = p.switches()[0].at_ms;
        assert_eq!(first_kept, (rounds - SWITCH_LOG_CAP) as f64 * dwell);
        assert_eq!(p.explain(1_000.0).switches.len(), SWITCH_LOG_CAP);
    }

    /// The warm-up said this device was twice the profile's speed; its requests say it is
    /// not: after three of them the planner prices the edge as they cost and moves the work.
    #[test]
    fn the_edge_factor_follows_what_requests_cost_here() {
        let mut p = AdaptivePolicy::new(candidates());
        p.set_edge_factor(0.5);
        let _ = p.tick(0.0);
        assert_eq!(p.current(), Placement::EdgeOnly, "100 ms here against 113 for the split");
        let logits = usize::from(Boundary::LOGITS.index());
        for i in 1..=3 {
            p.observe_edge(f64::from(i) * 10.0, logits, 200.0, None);
            let _ = p.tick(f64::from(i) * 10.0);
        }
        assert!((p.forecast().now.edge_factor - 1.0).abs() < 1e-9, "{:?}", p.forecast());
        let later = 2.0 * ControllerConfig::default().min_dwell_ms;
        let _ = p.tick(later);
        assert!(matches!(p.current(), Placement::Split { .. }), "{}", p.current());
        // A run too short to time the device (fixed costs dominate) teaches nothing; nor
        // does a depth no candidate has.
        let mut p = AdaptivePolicy::new(candidates());
        let shallow = Boundary::block(1).unwrap();
        p.candidates_mut()[1].depth = usize::from(shallow.index());
        p.candidates_mut()[1].edge_ms = 20.0;
        p.observe_edge(0.0, usize::from(shallow.index()), 1_000.0, None);
        p.observe_edge(0.0, 3, 1_000.0, None);
        assert!(!p.forecast().measured.edge_factor);
    }

    /// A shallow split's run is mostly work beside the stages (the photo's decoding, the
    /// features' coding). Timed apart, that work is the split's fixed cost and the stages alone
    /// move the edge factor: the whole network is not priced at the shallow run's ratio.
    #[test]
    fn a_shallow_splits_fixed_costs_do_not_inflate_the_whole_networks_price() {
        let mut p = AdaptivePolicy::new(candidates());
        p.set_edge_factor(1.0);
        let split = usize::from(Boundary::block(5).unwrap().index());
        let logits = usize::from(Boundary::LOGITS.index());
        let edge = |p: &AdaptivePolicy, depth: usize| {
            let f = p.forecast().now;
            let c = p.candidates.iter().find(|c| c.depth == depth).unwrap();
            super::super::estimate_for(c, &f, &Default::default()).edge_ms
        };
        for _ in 0..3 {
            p.observe_edge(0.0, split, 150.0, Some(55.0));
        }
        let factor = p.forecast().now.edge_factor;
        assert!((factor - 1.1).abs() < 1e-9, "the stages' ratio, not 150/50: {factor}");
        assert!((edge(&p, split) - 150.0).abs() < 1e-9, "the split as it ran: {}", edge(&p, split));
        // Edge-only, not run yet, borrows the split's fixed cost: 220 + 95, not 3 x 200.
        assert!((edge(&p, logits) - 315.0).abs() < 1e-9, "{}", edge(&p, logits));
        p.observe_edge(0.0, logits, 230.0, Some(220.0));
        assert!((edge(&p, logits) - 230.0).abs() < 1e-9, "its own once run: {}", edge(&p, logits));
        assert!((edge(&p, split) - 150.0).abs() < 1e-9, "{}", edge(&p, split));
        // A breakdown that does not add up is the old observation: the whole run's ratio.
        p.observe_edge(0.0, logits, 230.0, Some(500.0));
        p.observe_edge(0.0, logits, 230.0, Some(f64::NAN));
        assert!((edge(&p, logits) - 230.0).abs() < 1e-9, "{}", edge(&p, logits));
    }

    /// A pong that waited behind the page's own work reads long; the shortest ping of the
    /// window is the round trip planned on, until the window holds only longer ones.
    #[test]
    fn a_late_pong_does_not_lengthen_the_round_trip_until_it_lasts() {
        let mut p = AdaptivePolicy::new(candidates());
        let ping = bare_ping;
        p.observe_ping(0.0, ping(60.0));
        p.observe_ping(2_000.0, ping(140.0));
        p.observe_ping(4_000.0, ping(130.0));
        assert!((p.forecast().now.rtt_ms - 60.0).abs() < 1e-9, "{:?}", p.forecast().now);
        // The 60 ms ping leaves the window: the link's round trip did rise.
        p.observe_ping(6_000.0, ping(135.0));
        let rtt = p.forecast().now.rtt_ms;
        assert!(rtt > 75.0, "{rtt}");
        // A shorter one counts at once.
        p.observe_ping(8_000.0, ping(55.0));
        assert!(p.forecast().now.rtt_ms < rtt, "{:?}", p.forecast().now);
    }

    /// Cloud-only's work on this device (making the upload) is what was measured, whatever
    /// the edge factor does after.
    #[test]
    fn cloud_only_counts_the_uploads_preparation_as_measured() {
        let mut all = candidates();
        all.push(Candidate {
            placement: Placement::CloudOnly,
            depth: 0,
            edge_ms: 0.0,
            edge_fixed_ms: 0.0,
            bytes: 16_000.0,
            cloud_ms: 10.0,
            agreement: 1.0,
            edge_param_bytes: 0,
        });
        let mut p = AdaptivePolicy::new(all);
        let cloud = |p: &AdaptivePolicy| {
            let f = p.forecast().now;
            let c = p.candidates.iter().find(|c| c.placement == Placement::CloudOnly).unwrap();
            super::super::estimate_for(c, &f, &Default::default()).edge_ms
        };
        assert_eq!(cloud(&p), 0.0);
        p.set_edge_factor(2.0);
        for ms in [27.0, 25.0, 90.0] {
            p.observe_upload_prep(ms);
        }
        assert!((cloud(&p) - 27.0).abs() < 1e-9, "the median: {}", cloud(&p));
        let logits = usize::from(Boundary::LOGITS.index());
        for _ in 0..3 {
            p.observe_edge(0.0, logits, 800.0, None);
        }
        assert!(p.forecast().now.edge_factor > 3.0);
        assert!((cloud(&p) - 27.0).abs() < 1e-9, "{}", cloud(&p));
        p.observe_upload_prep(f64::NAN);
        assert!((cloud(&p) - 27.0).abs() < 1e-9);
    }

    /// On a fast link a small upload takes less time than the round trip's jitter: measured
    /// against the base RTT it can come out at nothing, which must not read as an unbounded
    /// uplink (in the browser lab on fast Wi-Fi that made a 194 kB stem split look free, and
    /// auto alternated between it, at 164 ms, and cloud-only, at 48).
    #[test]
    fn an_upload_within_the_round_trips_jitter_does_not_read_as_an_unbounded_uplink() {
        let mut p = AdaptivePolicy::new(candidates());
        let bare = bare_ping(10.0);
        p.observe_ping(0.0, bare);
        let sent = |round_trip_ms| RequestObservation {
            bytes_sent: 16_000.0,
            round_trip_ms,
            server_ms: 20.0,
            queue_wait_ms: Some(0.0),
            waited_ms: Some(0.0),
        };
        // Twice in a row (a new level for the monitor): 9.8 ms of network against a 10 ms base.
        p.observe_request(100.0, sent(29.8));
        p.observe_request(200.0, sent(29.8));
        let up = p.forecast().now.uplink_bytes_per_ms;
        assert!(up <= 16_000.0 / 2.5 + 1e-9, "at most 16 kB per quarter of the RTT: {up}");
        // The padded probe likewise.
        let mut p = AdaptivePolicy::new(candidates());
        p.observe_ping(0.0, bare);
        p.observe_ping(0.0, PingObservation { probe_bytes: 16_384, ms: 10.1, ..bare });
        let up = p.forecast().now.uplink_bytes_per_ms;
        assert!(up <= 16_384.0 / 2.5 + 1e-9, "{up}");
    }

    /// The table prices cloud-only at a typical photo's JPEG; this client's own uploads
    /// replace it once it has sent one.
    #[test]
    fn a_cloud_only_upload_prices_the_next() {
        let mut c = candidates();
        c.push(Candidate {
            placement: Placement::CloudOnly,
            depth: 0,
            edge_ms: 0.0,
            edge_fixed_ms: 0.0,
            bytes: 20_000.0,
            cloud_ms: 20.0,
            agreement: 1.0,
            edge_param_bytes: 0,
        });
        let mut p = AdaptivePolicy::new(c);
        p.set_placement(0.0, Placement::CloudOnly);
        let sent = RequestObservation {
            bytes_sent: 64_000.0,
            round_trip_ms: 150.0,
            server_ms: 20.0,
            queue_wait_ms: Some(0.0),
            waited_ms: Some(0.0),
        };
        p.observe_request(10.0, sent);
        let cloud = |p: &AdaptivePolicy| {
            p.candidates.iter().find(|c| c.placement == Placement::CloudOnly).unwrap().bytes
        };
        assert_eq!(cloud(&p), 64_000.0);
        // A split's upload says nothing about the photo's JPEG.
        p.set_placement(20.0, candidates()[1].placement.clone());
        p.observe_request(30.0, RequestObservation { bytes_sent: 9_000.0, ..sent });
        assert_eq!(cloud(&p), 64_000.0);
    }
}
