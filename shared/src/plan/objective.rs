//! What the planner minimizes beyond latency: the device's energy, the bytes of the user's data
//! plan and the server's compute, weighed by the user's goal ([`Mode`]), and the real-time class
//! whose deadline a placement must meet ([`RealTime`]).
//!
//! Energy per request, in millijoules (watts × milliseconds):
//!
//! - compute: the edge's milliseconds × [`Objective::device_watts`];
//! - radio, for a request that leaves the device (Huang et al., "A Close Examination of
//!   Performance and Power Characteristics of 4G LTE Networks", MobiSys 2012, whose power model
//!   for LTE, 3G and Wi-Fi is [`RadioProfile`]): the upload at `α_u × uplink + β` for its
//!   milliseconds, the wait for the answer (round trip, queue, the server's compute) at `β`, and
//!   the radio's tail after the answer (`tail power × tail time`, or × the time to the next
//!   request when requests come closer together; then the promotion before a request is paid
//!   only by the first). The downlink's few hundred bytes of answer are not counted.
//!
//! None of it is measured here: the radio's figures are the paper's, the device's power a
//! figure the caller gives (by default the seed design table's 2.3 W for a phone running the
//! whole model).

use serde::{Deserialize, Serialize};

/// The device's power while it computes, watts, when the caller gives none: the design table's
/// figure for a phone running the whole model (2.3 W; its split row draws 1.1 W).
pub const DEFAULT_DEVICE_WATTS: f64 = 2.3;

/// The link the device's radio is on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Radio {
    /// Wi-Fi.
    #[default]
    Wifi,
    /// LTE (4G).
    Lte,
    /// 3G (UMTS/HSPA).
    #[serde(rename = "3g")]
    ThreeG,
}

/// A radio's power model: `P = α_u × uplink Mbit/s + β` while sending, `β` while waiting for
/// the answer, then the tail; a request after the radio went idle pays the promotion first.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RadioProfile {
    /// Power per Mbit/s of uplink throughput, mW.
    pub alpha_up_mw_per_mbps: f64,
    /// Power of the active radio, mW.
    pub beta_mw: f64,
    /// Power of the promotion from idle, mW.
    pub promotion_mw: f64,
    /// Duration of the promotion, ms.
    pub promotion_ms: f64,
    /// Power of the tail after the last packet, mW.
    pub tail_mw: f64,
    /// Duration of the tail, ms.
    pub tail_ms: f64,
}

impl Radio {
    /// The power model of Huang et al. (MobiSys 2012), Tables 3 and 4.
    pub fn profile(self) -> RadioProfile {
        match self {
            Radio::Lte => RadioProfile {
                alpha_up_mw_per_mbps: 438.39,
                beta_mw: 1288.04,
                promotion_mw: 1210.7,
                promotion_ms: 260.1,
                tail_mw: 1060.0,
                tail_ms: 11_576.0,
            },
            Radio::ThreeG => RadioProfile {
                alpha_up_mw_per_mbps: 868.98,
                beta_mw: 817.88,
                promotion_mw: 659.4,
                promotion_ms: 582.1,
                tail_mw: 803.9,
                tail_ms: 8_088.2,
            },
            Radio::Wifi => RadioProfile {
                alpha_up_mw_per_mbps: 283.17,
                beta_mw: 132.86,
                promotion_mw: 124.4,
                promotion_ms: 79.1,
                tail_mw: 119.3,
                tail_ms: 238.1,
            },
        }
    }
}

/// What the user wants most.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// The fastest answer (the planner before modes).
    #[default]
    Latency,
    /// The least energy on the device; latency breaks ties.
    Battery,
    /// The fewest bytes sent; latency breaks ties.
    Data,
    /// Latency, energy, bytes and the server's cost together ([`Weights::BALANCED`]).
    Balanced,
}

/// How much each term of a candidate's cost weighs: its score is
/// `per_ms × latency + per_mj × energy + per_kb × kB sent + per_server × server cost`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Weights {
    /// Per millisecond of predicted latency.
    pub per_ms: f64,
    /// Per millijoule of the device's energy.
    pub per_mj: f64,
    /// Per kilobyte (1,000 bytes) sent.
    pub per_kb: f64,
    /// Per unit of server cost (its milliseconds × [`Objective::server_price`]).
    pub per_server: f64,
}

impl Weights {
    /// `latency`.
    pub const LATENCY: Weights = Weights { per_ms: 1.0, per_mj: 0.0, per_kb: 0.0, per_server: 0.0 };
    /// `battery`: a millijoule outweighs a hundred milliseconds.
    pub const BATTERY: Weights =
        Weights { per_ms: 0.01, per_mj: 1.0, per_kb: 0.0, per_server: 0.0 };
    /// `data`: a kilobyte outweighs a hundred milliseconds.
    pub const DATA: Weights = Weights { per_ms: 0.01, per_mj: 0.0, per_kb: 1.0, per_server: 0.0 };
    /// `balanced`: a millisecond of waiting, two millijoules (a millisecond of a 2 W device's
    /// compute), a kilobyte (a megabyte is worth a second) and two units of server cost weigh
    /// the same.
    pub const BALANCED: Weights =
        Weights { per_ms: 1.0, per_mj: 0.5, per_kb: 1.0, per_server: 0.5 };

    /// Whether every weight is finite, none negative and one above 0.
    pub fn valid(&self) -> bool {
        let all = [self.per_ms, self.per_mj, self.per_kb, self.per_server];
        all.iter().all(|w| w.is_finite() && *w >= 0.0) && all.iter().any(|w| *w > 0.0)
    }
}

impl Mode {
    /// Its name, as JSON has it.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Latency => "latency",
            Mode::Battery => "battery",
            Mode::Data => "data",
            Mode::Balanced => "balanced",
        }
    }

    /// This goal's weights.
    pub fn weights(self) -> Weights {
        match self {
            Mode::Latency => Weights::LATENCY,
            Mode::Battery => Weights::BATTERY,
            Mode::Data => Weights::DATA,
            Mode::Balanced => Weights::BALANCED,
        }
    }
}

/// The goal and what the energy and server terms are computed with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Objective {
    /// The goal.
    pub mode: Mode,
    /// Weights of one's own, instead of the mode's.
    pub weights: Option<Weights>,
    /// The device's power while it computes, W.
    pub device_watts: f64,
    /// The link the radio is on.
    pub radio: Radio,
    /// Time between requests, ms, when they come regularly (a camera stream): the radio's tail
    /// is then shared; `None` (one request now and then) pays the promotion and the whole tail.
    pub request_interval_ms: Option<f64>,
    /// What a millisecond of the server's compute costs, in the server's units (1 unless the
    /// server publishes a price).
    pub server_price: f64,
}

impl Default for Objective {
    fn default() -> Self {
        Self {
            mode: Mode::Latency,
            weights: None,
            device_watts: DEFAULT_DEVICE_WATTS,
            radio: Radio::Wifi,
            request_interval_ms: None,
            server_price: 1.0,
        }
    }
}

/// A request that leaves the device, as the radio and the server see it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Trip {
    /// Upload, ms.
    pub transfer_ms: f64,
    /// The uplink it goes at, bytes per ms.
    pub uplink_bytes_per_ms: f64,
    /// The wait for the answer after it (round trip, queue, the server's compute), ms.
    pub wait_ms: f64,
    /// The server's compute, ms.
    pub cloud_ms: f64,
}

/// A candidate's terms besides latency, and its score.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Terms {
    /// Energy of the device's compute, mJ.
    pub compute_mj: f64,
    /// Energy of the device's radio, mJ.
    pub radio_mj: f64,
    /// The server's cost.
    pub server_cost: f64,
}

impl Objective {
    /// The weights in force: one's own, else the mode's.
    pub fn weights(&self) -> Weights {
        self.weights.unwrap_or_else(|| self.mode.weights())
    }

    /// Why this objective cannot be used, if it cannot.
    ///
    /// # Errors
    /// A message naming the field.
    pub fn check(&self) -> Result<(), String> {
        if !(self.device_watts.is_finite() && self.device_watts >= 0.0) {
            return Err(format!("deviceWatts {}: 0 or more", self.device_watts));
        }
        if !(self.server_price.is_finite() && self.server_price >= 0.0) {
            return Err(format!("serverPrice {}: 0 or more", self.server_price));
        }
        if self.request_interval_ms.is_some_and(|i| !(i.is_finite() && i > 0.0)) {
            return Err("requestIntervalMs: above 0".into());
        }
        if self.weights.is_some_and(|w| !w.valid()) {
            return Err("weights: finite, none negative, one above 0".into());
        }
        Ok(())
    }

    /// The energy and server terms of a request whose edge computes `edge_ms` and, unless it
    /// stays on the device, makes `trip`, the server's time priced at its published
    /// `congestion_price` (1 without one) times [`Self::server_price`].
    pub fn terms(&self, edge_ms: f64, trip: Option<Trip>, congestion_price: f64) -> Terms {
        let compute_mj = edge_ms * self.device_watts;
        let Some(Trip { transfer_ms, uplink_bytes_per_ms, wait_ms, cloud_ms }) = trip else {
            return Terms { compute_mj, radio_mj: 0.0, server_cost: 0.0 };
        };
        let r = self.radio.profile();
        // bytes/ms × 8 = kbit/s... × 1000 / 1e6: Mbit/s = bytes/ms × 0.008.
        let mbps = uplink_bytes_per_ms * 0.008;
        let send_mw = r.alpha_up_mw_per_mbps * mbps + r.beta_mw;
        let (tail_ms, promotion_ms) = match self.request_interval_ms {
            Some(gap) if gap < r.tail_ms => (gap, 0.0),
            _ => (r.tail_ms, r.promotion_ms),
        };
        // mW × ms = µJ: / 1000 for mJ.
        let radio_mj = (send_mw * transfer_ms
            + r.beta_mw * wait_ms
            + r.tail_mw * tail_ms
            + r.promotion_mw * promotion_ms)
            / 1000.0;
        Terms { compute_mj, radio_mj, server_cost: cloud_ms * self.server_price * congestion_price }
    }

    /// The score of a candidate with these terms, `latency_ms` and `bytes` sent: lower is
    /// better. A weight of 0 ignores its term even where the term is infinite (no link).
    pub fn score(&self, latency_ms: f64, bytes: f64, terms: &Terms) -> f64 {
        let w = self.weights();
        let part = |weight: f64, value: f64| if weight == 0.0 { 0.0 } else { weight * value };
        part(w.per_ms, latency_ms)
            + part(w.per_mj, terms.compute_mj + terms.radio_mj)
            + part(w.per_kb, bytes / 1000.0)
            + part(w.per_server, terms.server_cost)
    }
}

/// The real-time classes of the design: how a deadline binds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// Hard real-time (industrial control): a placement predicted past the deadline is never
    /// chosen; when none meets it, there is no plan.
    Hard,
    /// Soft real-time (a video call): placements that meet the deadline first; when none
    /// does, the fastest.
    Soft,
    /// Near real-time (a voice assistant): as soft, with a longer deadline by default.
    Near,
    /// Offline batch (sorting a photo album): no deadline, and latency weighs nothing beyond
    /// breaking ties.
    Batch,
}

impl Class {
    /// The deadline a class has when none is given, ms: hard 100 (the design's example of a
    /// brake system), soft 300, near 1,000; batch none.
    pub fn default_deadline_ms(self) -> Option<f64> {
        match self {
            Class::Hard => Some(100.0),
            Class::Soft => Some(300.0),
            Class::Near => Some(1000.0),
            Class::Batch => None,
        }
    }
}

/// A real-time class and its deadline.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RealTime {
    /// The class.
    pub class: Class,
    /// The deadline, ms; `None`: the class's default.
    #[serde(default)]
    pub deadline_ms: Option<f64>,
}

impl RealTime {
    /// The deadline in force, ms.
    pub fn deadline(&self) -> Option<f64> {
        match self.class {
            Class::Batch => None,
            _ => self.deadline_ms.or_else(|| self.class.default_deadline_ms()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 20 ms of upload at 1,250 bytes/ms (10 Mbit/s), 80 ms of waiting, 10 of them the
    /// server's.
    const TRIP: Trip =
        Trip { transfer_ms: 20.0, uplink_bytes_per_ms: 1250.0, wait_ms: 80.0, cloud_ms: 10.0 };

    #[test]
    fn radio_energy_follows_the_power_model() {
        let lte = Objective { radio: Radio::Lte, ..Objective::default() };
        let t = lte.terms(50.0, Some(TRIP), 1.0);
        assert!((t.compute_mj - 115.0).abs() < 1e-9, "50 ms at 2.3 W");
        let send = (438.39 * 10.0 + 1288.04) * 20.0;
        let want = (send + 1288.04 * 80.0 + 1060.0 * 11_576.0 + 1210.7 * 260.1) / 1000.0;
        assert!((t.radio_mj - want).abs() < 1e-6, "{} vs {want}", t.radio_mj);
        assert_eq!(t.server_cost, 10.0);
        // Requests a second apart share the tail and skip the promotion.
        let stream = Objective { request_interval_ms: Some(1000.0), ..lte.clone() };
        let s = stream.terms(50.0, Some(TRIP), 1.0);
        let want = (send + 1288.04 * 80.0 + 1060.0 * 1000.0) / 1000.0;
        assert!((s.radio_mj - want).abs() < 1e-6);
        // Nothing leaves the device: no radio, no server.
        let local = lte.terms(150.0, None, 3.0);
        assert_eq!((local.radio_mj, local.server_cost), (0.0, 0.0));
        // Wi-Fi's tail is a fortieth of LTE's energy.
        let wifi = Objective::default().terms(50.0, Some(TRIP), 1.0);
        assert!(wifi.radio_mj * 40.0 < t.radio_mj);
        // A busy server's price scales its cost, and the user's own price on top.
        let busy = Objective { server_price: 2.0, ..lte.clone() };
        assert_eq!(busy.terms(50.0, Some(TRIP), 1.5).server_cost, 30.0);
    }

    #[test]
    fn modes_weigh_their_terms_and_zero_weights_ignore_infinities() {
        let t = Terms { compute_mj: 100.0, radio_mj: 20.0, server_cost: 8.0 };
        let o = |mode| Objective { mode, ..Objective::default() };
        assert_eq!(o(Mode::Latency).score(150.0, 4000.0, &t), 150.0);
        assert_eq!(o(Mode::Battery).score(150.0, 4000.0, &t), 1.5 + 120.0);
        assert_eq!(o(Mode::Data).score(150.0, 4000.0, &t), 1.5 + 4.0);
        assert_eq!(o(Mode::Balanced).score(150.0, 4000.0, &t), 150.0 + 60.0 + 4.0 + 4.0);
        let inf = Terms { radio_mj: f64::INFINITY, ..t };
        assert_eq!(o(Mode::Data).score(150.0, 0.0, &inf), 1.5);
        assert!(o(Mode::Battery).score(150.0, 0.0, &inf).is_infinite());
        let own = Weights { per_ms: 0.0, per_mj: 0.0, per_kb: 0.0, per_server: 1.0 };
        let custom = Objective { weights: Some(own), ..Objective::default() };
        assert_eq!(custom.score(150.0, 4000.0, &t), 8.0);
        assert!(custom.check().is_ok());
        let none = Weights { per_server: 0.0, ..own };
        assert!(Objective { weights: Some(none), ..Objective::default() }.check().is_err());
        assert!(Objective { device_watts: f64::NAN, ..Objective::default() }.check().is_err());
    }

    #[test]
    fn objectives_and_classes_read_from_the_clients_json() {
        let o: Objective =
            serde_json::from_str(r#"{"mode":"battery","radio":"3g","requestIntervalMs":500}"#)
                .unwrap();
        assert_eq!(
            (o.mode, o.radio, o.request_interval_ms),
            (Mode::Battery, Radio::ThreeG, Some(500.0))
        );
        assert_eq!(o.device_watts, DEFAULT_DEVICE_WATTS);
        assert!(serde_json::from_str::<Objective>(r#"{"mode":"fastest"}"#).is_err());
        let r: RealTime = serde_json::from_str(r#"{"class":"soft"}"#).unwrap();
        assert_eq!(r.deadline(), Some(300.0));
        let r: RealTime = serde_json::from_str(r#"{"class":"hard","deadlineMs":40}"#).unwrap();
        assert_eq!(r.deadline(), Some(40.0));
        let r: RealTime = serde_json::from_str(r#"{"class":"batch","deadlineMs":40}"#).unwrap();
        assert_eq!(r.deadline(), None);
    }
}
