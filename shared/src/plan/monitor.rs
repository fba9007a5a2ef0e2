//! What the client knows about the network: an exponentially weighted average of each signal,
//! plus a least-squares trend over the last minute to forecast a few seconds ahead.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::planner::Conditions;

/// Samples older than this do not count toward the trend.
const WINDOW_MS: f64 = 60_000.0;
/// Weight of a new sample in the moving average.
const ALPHA: f64 = 0.3;
/// A forecast stays within this factor of the average: a trend is evidence, not a promise.
const MAX_TREND_FACTOR: f64 = 4.0;
/// Two samples in a row this far from the average are a new level: the average restarts there,
/// so a step is followed within two samples instead of fading in. A single one is ignored.
pub const LEVEL_SHIFT_FACTOR: f64 = 3.0;
/// How many of the latest remote network times the slip is the mean of
/// ([`NetworkMonitor::observe_network_time`]).
pub const SLIP_WINDOW: usize = 10;
/// How many of the latest edge-speed samples the edge factor is the median of: one slow run
/// (a download it waited for, a shader compiled) moves nothing, three in a row do.
pub const EDGE_WINDOW: usize = 5;
/// How long a request's edge-speed sample counts, ms: past it the device's speed is the
/// warm-up's again until a run says otherwise. A slowdown seen while running locally (heat,
/// another tab, the page's own bursts) would otherwise price the edge for as long as the
/// placement it drove away to lasts: in the browser lab on the AT&T trace, five slow runs in
/// a row (270-317 ms, factor 6) kept edge-only priced at 278 ms for the trace's last 29 s,
/// where edge-only ran in a median of 169.
pub const EDGE_MAX_AGE_MS: f64 = 15_000.0;

#[derive(Clone, Debug, Default)]
struct Series {
    samples: VecDeque<(f64, f64)>,
    ewma: Option<f64>,
    /// The previous sample, when it was beyond the shift factor: (above the average, value).
    outlier: Option<(bool, f64)>,
}

impl Series {
    fn observe(&mut self, t: f64, v: f64) {
        if !v.is_finite() || v < 0.0 {
            return;
        }
        if let Some(e) = self.ewma {
            let high = v > e * LEVEL_SHIFT_FACTOR;
            let low = v * LEVEL_SHIFT_FACTOR < e;
            if high || low {
                match self.outlier.take() {
                    // Second in a row on the same side: a new level; restart at the two's mean.
                    Some((was_high, first)) if was_high == high => {
                        let level = (first + v) / 2.0;
                        self.samples.clear();
                        self.samples.push_back((t, level));
                        self.ewma = Some(level);
                    }
                    // A first outlier is held back: alone, it is noise and never counts.
                    _ => self.outlier = Some((high, v)),
                }
                return;
            }
            self.outlier = None;
        }
        self.ewma = Some(self.ewma.map_or(v, |e| e + ALPHA * (v - e)));
        self.samples.push_back((t, v));
        while self.samples.front().is_some_and(|(s, _)| t - s > WINDOW_MS) {
            self.samples.pop_front();
        }
    }

    /// Least-squares slope per ms over the window; 0 with too little data.
    fn slope(&self) -> f64 {
        let n = self.samples.len() as f64;
        let span = match (self.samples.front(), self.samples.back()) {
            (Some(a), Some(b)) => b.0 - a.0,
            _ => 0.0,
        };
        if n < 4.0 || span < 2_000.0 {
            return 0.0;
        }
        let (mt, mv) =
            self.samples.iter().fold((0.0, 0.0), |(a, b), (t, v)| (a + t / n, b + v / n));
        let (num, den) = self.samples.iter().fold((0.0, 0.0), |(num, den), (t, v)| {
            (num + (t - mt) * (v - mv), den + (t - mt).powi(2))
        });
        if den > 0.0 { num / den } else { 0.0 }
    }

    fn forecast(&self, horizon_ms: f64) -> Option<f64> {
        let e = self.ewma?;
        let v = e + self.slope() * horizon_ms;
        Some(v.clamp(e / MAX_TREND_FACTOR, e * MAX_TREND_FACTOR).max(0.0))
    }
}

/// Current and forecast conditions.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Forecast {
    /// The moving averages now.
    pub now: Conditions,
    /// Extrapolated `horizon` ms ahead.
    pub predicted: Conditions,
    /// Whether the link is up (no failure since the last success).
    pub link_up: bool,
    /// Which of `now`'s values come from observations; the others are defaults
    /// ([`Conditions::default`]) that a page should not show as measured.
    pub measured: Measured,
}

/// The median of `values`, the lower of the middle two when their number is even (so that one
/// new sample beside one old cannot double it); `None` when there are none.
pub(crate) fn lower_median(values: impl Iterator<Item = f64>) -> Option<f64> {
    let mut sorted: Vec<f64> = values.collect();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len().saturating_sub(1) / 2).copied()
}

/// Whether each condition has been observed yet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Measured {
    /// Round trip (pings, replies).
    pub rtt: bool,
    /// Uplink throughput (transfers large enough to time).
    pub uplink: bool,
    /// Server queue wait (replies and pongs report it).
    pub queue: bool,
    /// This device's edge speed against the profile.
    pub edge_factor: bool,
}

/// Network and server-load estimator fed by real transfers, pings and replies.
#[derive(Clone, Debug, Default)]
pub struct NetworkMonitor {
    rtt: Series,
    uplink: Series,
    queue: Series,
    /// The warm-up's edge factor.
    edge_warmup: Option<f64>,
    /// The latest requests' edge-speed samples, oldest first: (when, ratio).
    edge_samples: VecDeque<(f64, f64)>,
    down_since: Option<f64>,
    /// The server's last published congestion price.
    price: Option<f64>,
    /// The latest network times' excess over what the averages predicted, ms.
    slip: VecDeque<f64>,
}

impl NetworkMonitor {
    /// Nothing observed yet: forecasts fall back to [`Conditions::default`].
    pub fn new() -> Self {
        Self::default()
    }

    /// A round trip (ping/pong, or a reply minus server time) of `ms` at time `t`.
    pub fn observe_rtt(&mut self, t: f64, ms: f64) {
        self.rtt.observe(t, ms);
        self.down_since = None;
    }

    /// `bytes` went up in `ms` (serialization time, without the round trip).
    pub fn observe_upload(&mut self, t: f64, bytes: f64, ms: f64) {
        if bytes > 0.0 && ms > 0.0 {
            self.uplink.observe(t, bytes / ms);
            self.down_since = None;
        }
    }

    /// `bytes` went up and the answer came back in `ms` of network time (a request's round
    /// trip less the server's part, or a padded probe's round trip). Before the averages learn
    /// from it (call this first), it is held against what they predict for it: the slip
    /// ([`Conditions::network_slip_ms`]) is the mean excess of the last [`SLIP_WINDOW`], each
    /// counted at most as long as its prediction (one stall does not stand for a whole window),
    /// and at least 0. A mean, not a median: the planner ranks expected times, and a link
    /// whose slow transfers are rare but long costs them. While the placement sends nothing,
    /// the idle uplink probes keep it current.
    pub fn observe_network_time(&mut self, bytes: f64, ms: f64) {
        let (Some(rtt), Some(uplink)) = (self.rtt.ewma, self.uplink.ewma) else { return };
        if !(ms.is_finite() && bytes >= 0.0 && uplink > 0.0) {
            return;
        }
        let predicted = rtt + bytes / uplink;
        if self.slip.len() == SLIP_WINDOW {
            self.slip.pop_front();
        }
        self.slip.push_back((ms - predicted).clamp(-predicted, predicted));
    }

    fn slip(&self) -> f64 {
        if self.slip.is_empty() {
            return 0.0;
        }
        (self.slip.iter().sum::<f64>() / self.slip.len() as f64).max(0.0)
    }

    /// The server's reported queue wait.
    pub fn observe_queue(&mut self, t: f64, ms: f64) {
        self.queue.observe(t, ms);
    }

    /// The server's congestion price, as it published it (already smoothed there); a price
    /// that is not finite and positive is ignored.
    pub fn observe_price(&mut self, price: f64) {
        if price.is_finite() && price > 0.0 {
            self.price = Some(price);
        }
    }

    /// The edge's measured compute relative to the profile (from the browser's warm-up): the
    /// samples start again from it.
    pub fn set_edge_factor(&mut self, factor: f64) {
        if factor.is_finite() && factor > 0.0 {
            self.edge_samples.clear();
            self.edge_warmup = Some(factor);
        }
    }

    /// One request's edge time over the profile's for the same stages: the edge factor is the
    /// median of the last [`EDGE_WINDOW`] samples (the lower of the middle two when their
    /// number is even, so that one sample after the warm-up cannot double it).
    /// The warm-up's factor counts as one of them until [`EDGE_WINDOW`] requests' have come;
    /// samples older than [`EDGE_MAX_AGE_MS`] go ([`Self::forget_edge_before`]).
    pub fn observe_edge_ratio(&mut self, t: f64, ratio: f64) {
        if ratio.is_finite() && ratio > 0.0 {
            if self.edge_samples.len() == EDGE_WINDOW {
                self.edge_samples.pop_front();
            }
            self.edge_samples.push_back((t, ratio));
        }
    }

    /// At `now`, the edge-speed samples older than [`EDGE_MAX_AGE_MS`] stop counting.
    pub fn forget_edge_before(&mut self, now: f64) {
        while self.edge_samples.front().is_some_and(|(t, _)| now - t > EDGE_MAX_AGE_MS) {
            self.edge_samples.pop_front();
        }
    }

    fn edge_factor(&self) -> Option<f64> {
        let warmup = (self.edge_samples.len() < EDGE_WINDOW).then_some(self.edge_warmup).flatten();
        lower_median(warmup.into_iter().chain(self.edge_samples.iter().map(|(_, r)| *r)))
    }

    /// Something came back from the server (a pong whose timing is not the network's): the link
    /// is up, whatever it says about the round trip.
    pub fn observe_alive(&mut self) {
        self.down_since = None;
    }

    /// A request or probe failed (closed socket, timeout).
    pub fn observe_outage(&mut self, t: f64) {
        self.down_since.get_or_insert(t);
    }

    /// Conditions now and `horizon_ms` ahead.
    pub fn forecast(&self, horizon_ms: f64) -> Forecast {
        let d = Conditions::default();
        let edge_factor = self.edge_factor().unwrap_or(1.0);
        let now = Conditions {
            rtt_ms: self.rtt.ewma.unwrap_or(d.rtt_ms),
            uplink_bytes_per_ms: self.uplink.ewma.unwrap_or(d.uplink_bytes_per_ms),
            queue_ms: self.queue.ewma.unwrap_or(0.0),
            edge_factor,
            cloud_factor: 1.0,
            server_price: self.price.unwrap_or(1.0),
            network_slip_ms: self.slip(),
        };
        let predicted = Conditions {
            rtt_ms: self.rtt.forecast(horizon_ms).unwrap_or(now.rtt_ms),
            uplink_bytes_per_ms: self
                .uplink
                .forecast(horizon_ms)
                .unwrap_or(now.uplink_bytes_per_ms),
            queue_ms: self.queue.forecast(horizon_ms).unwrap_or(now.queue_ms),
            ..now
        };
        let link_up = self.down_since.is_none();
        let down =
            |c: Conditions| if link_up { c } else { Conditions { uplink_bytes_per_ms: 0.0, ..c } };
        let measured = Measured {
            rtt: self.rtt.ewma.is_some(),
            uplink: self.uplink.ewma.is_some(),
            queue: self.queue.ewma.is_some(),
            edge_factor: self.edge_warmup.is_some() || !self.edge_samples.is_empty(),
        };
        Forecast { now: down(now), predicted: down(predicted), link_up, measured }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn averages_and_extrapolates_a_falling_bandwidth() {
        let mut m = NetworkMonitor::new();
        for i in 0..30 {
            let t = f64::from(i) * 1000.0;
            m.observe_upload(t, 1000.0 - 20.0 * f64::from(i), 1.0);
            m.observe_rtt(t, 40.0);
        }
        assert_eq!(NetworkMonitor::new().forecast(0.0).measured, Measured::default());
        let f = m.forecast(10_000.0);
        assert!(f.measured.rtt && f.measured.uplink && !f.measured.queue);
        assert!((f.now.rtt_ms - 40.0).abs() < 1e-9);
        assert!(f.predicted.uplink_bytes_per_ms < f.now.uplink_bytes_per_ms - 150.0, "{f:?}");
        assert!(f.link_up);
    }

    #[test]
    fn outages_zero_the_uplink_until_a_success() {
        let mut m = NetworkMonitor::new();
        m.observe_upload(0.0, 500.0, 1.0);
        m.observe_outage(1.0);
        assert_eq!(m.forecast(0.0).now.uplink_bytes_per_ms, 0.0);
        assert!(!m.forecast(0.0).link_up);
        m.observe_rtt(2.0, 30.0);
        assert!(m.forecast(0.0).link_up);
    }

    #[test]
    fn two_samples_at_a_new_level_restart_the_average() {
        let mut m = NetworkMonitor::new();
        for i in 0..10 {
            m.observe_rtt(f64::from(i) * 500.0, 40.0);
        }
        m.observe_rtt(5_000.0, 400.0);
        assert_eq!(m.forecast(0.0).now.rtt_ms, 40.0, "one spike alone is ignored");
        m.observe_rtt(5_500.0, 400.0);
        assert_eq!(m.forecast(0.0).now.rtt_ms, 400.0, "two are a new level");
    }

    #[test]
    fn a_trend_is_bounded() {
        let mut m = NetworkMonitor::new();
        for i in 0..10 {
            m.observe_rtt(f64::from(i) * 1000.0, 10.0 + 100.0 * f64::from(i));
        }
        let f = m.forecast(1e9);
        assert!(f.predicted.rtt_ms <= f.now.rtt_ms * MAX_TREND_FACTOR + 1e-9);
    }

    #[test]
    fn the_edge_factor_follows_requests_not_one_slow_run() {
        let mut m = NetworkMonitor::new();
        assert!(!m.forecast(0.0).measured.edge_factor);
        m.set_edge_factor(2.5);
        m.observe_edge_ratio(0.0, 80.0); // the first run compiled shaders
        assert_eq!(m.forecast(0.0).now.edge_factor, 2.5, "one slow run alone moves nothing");
        m.observe_edge_ratio(100.0, 3.2);
        m.observe_edge_ratio(200.0, 3.3);
        assert_eq!(m.forecast(0.0).now.edge_factor, 3.2, "requests outvote the warm-up");
        for i in 0..EDGE_WINDOW {
            // The device slowed down (heat, another tab).
            m.observe_edge_ratio(1_000.0 + 100.0 * i as f64, 6.0);
        }
        assert_eq!(m.forecast(0.0).now.edge_factor, 6.0);
        // No run for a while: the slowdown is no longer believed, the warm-up's figure is.
        m.forget_edge_before(1_000.0 + EDGE_MAX_AGE_MS);
        assert_eq!(m.forecast(0.0).now.edge_factor, 6.0, "the samples are not old yet");
        m.forget_edge_before(2_000.0 + EDGE_MAX_AGE_MS);
        assert_eq!(m.forecast(0.0).now.edge_factor, 2.5);
        m.set_edge_factor(2.0);
        assert_eq!(m.forecast(0.0).now.edge_factor, 2.0, "a new warm-up starts again");
        m.observe_edge_ratio(0.0, f64::NAN);
        m.observe_edge_ratio(0.0, -1.0);
        assert_eq!(m.forecast(0.0).now.edge_factor, 2.0);
    }

    /// On a link whose transfers vary, an average of throughputs misses the slow ones: the
    /// slip is what the network took beyond the averages' prediction, on average.
    #[test]
    fn the_slip_is_the_mean_excess_of_network_times_over_the_prediction() {
        let mut m = NetworkMonitor::new();
        m.observe_network_time(10_000.0, 500.0);
        assert_eq!(m.forecast(0.0).now.network_slip_ms, 0.0, "nothing to compare with yet");
        m.observe_rtt(0.0, 50.0);
        m.observe_upload(0.0, 10_000.0, 100.0); // 100 bytes/ms: 150 ms predicted
        for ms in [150.0, 190.0, 170.0] {
            m.observe_network_time(10_000.0, ms);
        }
        let forecast = |m: &NetworkMonitor| m.forecast(1_000.0);
        assert!((forecast(&m).now.network_slip_ms - 20.0).abs() < 1e-9, "{:?}", forecast(&m).now);
        assert_eq!(forecast(&m).predicted.network_slip_ms, forecast(&m).now.network_slip_ms);
        // A stall counts as at most its prediction.
        m.observe_network_time(10_000.0, 5_000.0);
        assert!((forecast(&m).now.network_slip_ms - 52.5).abs() < 1e-9, "{:?}", forecast(&m).now);
        // Faster than predicted, for a whole window: no slip (never a negative one).
        for _ in 0..SLIP_WINDOW {
            m.observe_network_time(10_000.0, 120.0);
        }
        assert_eq!(forecast(&m).now.network_slip_ms, 0.0);
        m.observe_network_time(10_000.0, f64::NAN);
        assert_eq!(forecast(&m).now.network_slip_ms, 0.0);
    }
}
