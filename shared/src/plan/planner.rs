//! The planner: `edge(k) + rtt + bytes(k, codec) / uplink + queue + cloud(k)` over every
//! candidate, edge-only and cloud-only included, subject to constraints; with a goal other than
//! latency ([`super::Mode`]), the weighted sum of that latency, the device's energy, the bytes
//! sent and the server's cost ([`super::objective`]), within the real-time class's deadline.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::objective::{Class, Objective, RealTime, Terms, Trip};
use crate::codec::Setting;

/// Where the work runs.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum Placement {
    /// Everything in the browser; nothing is sent.
    EdgeOnly,
    /// The image is uploaded; everything runs on the server.
    CloudOnly,
    /// The edge runs to `boundary` and sends features coded with `codec`.
    Split {
        /// Where the edge stops: the boundary's name in the model's spec (`"block5"`).
        boundary: String,
        /// How the features are coded (JSON: its name, `"q6"`).
        codec: Setting,
    },
    /// The edge runs to `boundary` and uploads what it computed there encrypted; the server
    /// computes the rest on the ciphertext and answers encrypted, so it reads neither the
    /// features nor the answer (`crate::encrypted`: EfficientNet-Lite0's classifier after
    /// `pool`). Chosen only when the constraints ask for it ([`Constraints::encrypted`]).
    Encrypted {
        /// Where the edge stops (`"pool"`).
        boundary: String,
    },
}

impl Placement {
    /// Whether the server can read nothing of the request: edge-only sends nothing, the
    /// encrypted placement only ciphertext.
    pub fn server_reads_nothing(&self) -> bool {
        matches!(self, Self::EdgeOnly | Self::Encrypted { .. })
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::EdgeOnly => f.write_str("edge only"),
            Self::CloudOnly => f.write_str("cloud only"),
            Self::Split { boundary, codec } => write!(f, "{boundary}/{codec}"),
            Self::Encrypted { boundary } => write!(f, "{boundary}/encrypted"),
        }
    }
}

/// One option the planner weighs, with its costs at nominal conditions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Candidate {
    /// What it is.
    pub placement: Placement,
    /// Index of the split's boundary in the model's forward order (0 = nothing on the edge),
    /// for the privacy floor.
    pub depth: usize,
    /// Edge compute, ms, on the profiled edge: the network's stages, which the edge factor
    /// scales to this device.
    pub edge_ms: f64,
    /// The device's work per request that does not scale with the stages, ms, as measured
    /// here: decoding the photo and coding the features (or making cloud-only's upload). The
    /// table has none (0); the client's policy fills it in from its requests.
    #[serde(default)]
    pub edge_fixed_ms: f64,
    /// Bytes sent.
    pub bytes: f64,
    /// Cloud compute, ms.
    pub cloud_ms: f64,
    /// Top-1 agreement with the uncompressed model (1.0 = identical).
    pub agreement: f64,
    /// Parameter bytes the edge must hold.
    pub edge_param_bytes: u64,
}

/// Network and load conditions the plan is made for.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Conditions {
    /// Round trip, ms.
    pub rtt_ms: f64,
    /// Uplink throughput, bytes per ms (= kB/s); 0 means no link.
    pub uplink_bytes_per_ms: f64,
    /// Expected wait in the server's queue, ms.
    pub queue_ms: f64,
    /// Edge compute time relative to the profile (2.0 = this device is twice as slow).
    pub edge_factor: f64,
    /// Cloud compute time relative to the profile (load, another device).
    pub cloud_factor: f64,
    /// The server's congestion price: what a millisecond of its compute costs now, as it
    /// publishes it (1 when it publishes none); the objective's server cost scales with it.
    #[serde(default = "one")]
    pub server_price: f64,
    /// How much longer remote requests' network time has lately been than the round trip and
    /// uplink averages predict, ms (0 when they hold): on a varying link the averages miss the
    /// slow transfers and the round trip's jitter above its minimum. Added to every remote
    /// placement's transfer.
    #[serde(default)]
    pub network_slip_ms: f64,
}

fn one() -> f64 {
    1.0
}

impl Default for Conditions {
    fn default() -> Self {
        Self {
            rtt_ms: 50.0,
            uplink_bytes_per_ms: 1250.0,
            queue_ms: 0.0,
            edge_factor: 1.0,
            cloud_factor: 1.0,
            server_price: 1.0,
            network_slip_ms: 0.0,
        }
    }
}

/// The default accuracy floor: 98% top-1 agreement at 95% confidence. On the 500 photos the
/// cost table is measured on, even a setting that never disagreed is bounded at 99.2% (q6 at
/// block11, 497 of 500, at 98.3%): a 99% floor on the bound would leave f32 and three q8
/// settings.
pub const DEFAULT_MIN_AGREEMENT: f64 = 0.98;

/// Limits the user sets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Constraints {
    /// Candidates that stop the edge before this boundary index are never chosen; any value
    /// above 0 also forbids uploading the input (raw pixels or text never leave the device).
    /// EfficientNet-Lite0's measured floor is [`crate::model::PRIVACY_FLOOR`].
    pub privacy_floor: usize,
    /// Lowest acceptable top-1 agreement with the uncompressed model, held against each
    /// setting's measured agreement (the lower end of its 95% interval where the cost table
    /// has one: [`super::CodecCost::reliable_agreement`]).
    pub min_agreement: f64,
    /// Most parameter bytes the edge may hold (memory budget); `None`: no limit.
    pub max_edge_param_bytes: Option<u64>,
    /// What is minimized (JSON: its fields beside these, `mode`, `radio`, …): latency unless
    /// told otherwise.
    #[serde(flatten)]
    pub objective: Objective,
    /// The real-time class and its deadline; `None`: no deadline.
    #[serde(default)]
    pub realtime: Option<RealTime>,
    /// Only placements the server can read nothing of: the encrypted placement where the cost
    /// table prices one, or edge-only ([`Placement::server_reads_nothing`]). Without it the
    /// encrypted placement is never chosen: it costs more bytes and time than any split, and
    /// only the user may decide that is worth it.
    #[serde(default)]
    pub encrypted: bool,
}

impl Default for Constraints {
    fn default() -> Self {
        Self {
            privacy_floor: 0,
            min_agreement: DEFAULT_MIN_AGREEMENT,
            max_edge_param_bytes: None,
            objective: Objective::default(),
            realtime: None,
            encrypted: false,
        }
    }
}

impl Constraints {
    /// Why these constraints cannot be planned with, if they cannot.
    ///
    /// # Errors
    /// A message naming the field.
    pub fn check(&self) -> Result<(), String> {
        self.objective.check()?;
        match self.realtime.and_then(|r| r.deadline_ms) {
            Some(d) if !(d.is_finite() && d > 0.0) => Err(format!("deadlineMs {d}: above 0")),
            _ => Ok(()),
        }
    }

    /// The objective as the class bends it: a batch class's latency only breaks ties.
    fn effective_objective(&self) -> Objective {
        let mut objective = self.objective.clone();
        if self.realtime.is_some_and(|r| r.class == Class::Batch) {
            let mut w = objective.weights();
            w.per_ms *= 0.01;
            objective.weights = Some(w);
        }
        objective
    }
}

/// A candidate's predicted latency, broken down.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Estimate {
    /// The candidate.
    pub placement: Placement,
    /// Stages on the edge (the candidate's [`Candidate::depth`]).
    pub depth: usize,
    /// Edge compute, ms.
    pub edge_ms: f64,
    /// Serialization onto the uplink, ms.
    pub transfer_ms: f64,
    /// Network round trip, ms (0 for edge-only).
    pub rtt_ms: f64,
    /// Server queue, ms.
    pub queue_ms: f64,
    /// Cloud compute, ms.
    pub cloud_ms: f64,
    /// Sum of the above.
    pub total_ms: f64,
    /// Bytes sent.
    pub bytes: f64,
    /// Top-1 agreement with the uncompressed model.
    pub agreement: f64,
    /// The device's energy for its compute, mJ.
    #[serde(default)]
    pub compute_mj: f64,
    /// The device's energy for its radio, mJ (0 for edge-only).
    #[serde(default)]
    pub radio_mj: f64,
    /// The server's cost: its milliseconds × the price (0 for edge-only).
    #[serde(default)]
    pub server_cost: f64,
    /// What the planner ranks by, lower first: the latency in `latency` mode, else the
    /// objective's weighted sum ([`Objective::score`]).
    #[serde(default)]
    pub score: f64,
}

/// Why nothing could be chosen.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// Every candidate breaks a constraint.
    #[error("no placement satisfies the constraints (privacy floor, accuracy floor, edge memory)")]
    NoFeasible,
    /// A hard real-time deadline no allowed placement is predicted to meet.
    #[error(
        "no placement meets the hard deadline of {deadline_ms} ms (the fastest: {fastest_ms:.0} ms)"
    )]
    Deadline {
        /// The deadline, ms.
        deadline_ms: f64,
        /// The fastest allowed placement's predicted latency, ms.
        fastest_ms: f64,
    },
}

/// Cost of `c` under `conditions`, ranked by latency (the energy at the default objective's
/// figures).
pub fn estimate(c: &Candidate, conditions: &Conditions) -> Estimate {
    estimate_for(c, conditions, &Objective::default())
}

/// Cost of `c` under `conditions`, its energy and server terms and score by `objective`.
pub fn estimate_for(c: &Candidate, conditions: &Conditions, objective: &Objective) -> Estimate {
    let edge_ms = c.edge_ms * conditions.edge_factor + c.edge_fixed_ms;
    let remote = c.placement != Placement::EdgeOnly;
    let (transfer_ms, rtt_ms, queue_ms, cloud_ms) = if remote {
        let transfer = if conditions.uplink_bytes_per_ms > 0.0 {
            c.bytes / conditions.uplink_bytes_per_ms + conditions.network_slip_ms
        } else {
            f64::INFINITY
        };
        (transfer, conditions.rtt_ms, conditions.queue_ms, c.cloud_ms * conditions.cloud_factor)
    } else {
        (0.0, 0.0, 0.0, 0.0)
    };
    let total_ms = edge_ms + transfer_ms + rtt_ms + queue_ms + cloud_ms;
    let bytes = if remote { c.bytes } else { 0.0 };
    let wait_ms = rtt_ms + queue_ms + cloud_ms;
    let uplink_bytes_per_ms = conditions.uplink_bytes_per_ms;
    let trip = remote.then_some(Trip { transfer_ms, uplink_bytes_per_ms, wait_ms, cloud_ms });
    let Terms { compute_mj, radio_mj, server_cost } =
        objective.terms(edge_ms, trip, conditions.server_price);
    let score = objective.score(total_ms, bytes, &Terms { compute_mj, radio_mj, server_cost });
    Estimate {
        placement: c.placement.clone(),
        depth: c.depth,
        edge_ms,
        transfer_ms,
        rtt_ms,
        queue_ms,
        cloud_ms,
        total_ms,
        bytes,
        agreement: c.agreement,
        compute_mj,
        radio_mj,
        server_cost,
        score,
    }
}

/// Whether `c` satisfies the constraints `k`.
pub(crate) fn allowed(c: &Candidate, k: &Constraints) -> bool {
    let private = match c.placement {
        Placement::CloudOnly => k.privacy_floor == 0,
        // Ciphertext shows the server nothing to invert, whatever the floor.
        Placement::Encrypted { .. } => true,
        _ => c.depth >= k.privacy_floor,
    };
    // Encrypted when asked, and only then (edge-only sends nothing, so it is always allowed).
    let sealed = match c.placement {
        Placement::EdgeOnly => true,
        Placement::Encrypted { .. } => k.encrypted,
        _ => !k.encrypted,
    };
    private
        && sealed
        && c.agreement + 1e-12 >= k.min_agreement
        && k.max_edge_param_bytes.is_none_or(|max| c.edge_param_bytes <= max)
}

/// Every allowed candidate's estimate, best (lowest score) first; under a deadline, those that
/// meet it first.
///
/// # Errors
/// [`PlanError::NoFeasible`] when the constraints exclude every candidate;
/// [`PlanError::Deadline`] when a hard real-time deadline excludes every one left.
pub fn plan_candidates(
    candidates: &[Candidate],
    conditions: &Conditions,
    constraints: &Constraints,
) -> Result<Vec<Estimate>, PlanError> {
    let objective = constraints.effective_objective();
    let mut out: Vec<Estimate> = candidates
        .iter()
        .filter(|c| allowed(c, constraints))
        .map(|c| estimate_for(c, conditions, &objective))
        .collect();
    if out.is_empty() {
        return Err(PlanError::NoFeasible);
    }
    // Ties go to fewer bytes, then to the earlier candidate (stable sort).
    out.sort_by(|a, b| a.score.total_cmp(&b.score).then(a.bytes.total_cmp(&b.bytes)));
    let Some((class, deadline_ms)) =
        constraints.realtime.and_then(|r| Some((r.class, r.deadline()?)))
    else {
        return Ok(out);
    };
    let (mut meets, late): (Vec<Estimate>, Vec<Estimate>) =
        out.into_iter().partition(|e| e.total_ms <= deadline_ms);
    if meets.is_empty() {
        let mut late = late;
        // None meets it: a soft deadline takes the fastest, a hard one none.
        late.sort_by(|a, b| a.total_ms.total_cmp(&b.total_ms));
        if class == Class::Hard {
            return Err(PlanError::Deadline { deadline_ms, fastest_ms: late[0].total_ms });
        }
        return Ok(late);
    }
    if class != Class::Hard {
        meets.extend(late);
    }
    Ok(meets)
}

/// The best placement for a cost table: [`plan_candidates`] over
/// [`super::CostTable::candidates`] for the given edge profile.
///
/// # Errors
/// As [`plan_candidates`], or [`PlanError::NoFeasible`] for an unknown edge profile.
pub fn plan(
    table: &super::CostTable,
    edge_profile: &str,
    conditions: &Conditions,
    constraints: &Constraints,
) -> Result<Vec<Estimate>, PlanError> {
    let candidates = table.candidates(edge_profile).ok_or(PlanError::NoFeasible)?;
    plan_candidates(&candidates, conditions, constraints)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seed article's worked example: 28 layers, feature size falling and compute rising
    /// with depth, a cloud 18x faster than the edge, only the 27 inner cuts considered; the
    /// cut after layer `depth` is called `layer<depth>`.
    fn seed_example() -> Vec<Candidate> {
        let sizes = [
            1000., 900., 820., 750., 680., 620., 560., 510., 460., 420., 380., 340., 310., 280.,
            250., 225., 200., 180., 160., 145., 130., 118., 106., 95., 86., 78., 70., 64.,
        ];
        let compute = [
            0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.4, 1.5, 1.7, 1.9, 2.1, 2.3, 2.6, 2.9,
            3.2, 3.5, 3.9, 4.3, 4.8, 5.3, 5.8, 6.4, 7.1, 7.8, 8.6,
        ];
        (1..28)
            .map(|split| Candidate {
                placement: Placement::Split {
                    boundary: format!("layer{split}"),
                    codec: Setting::F32,
                },
                depth: split,
                edge_ms: compute[..split].iter().sum(),
                edge_fixed_ms: 0.0,
                bytes: sizes[split - 1],
                cloud_ms: compute[split..].iter().sum::<f64>() / 18.0,
                agreement: 1.0,
                edge_param_bytes: split as u64,
            })
            .collect()
    }

    fn at(bandwidth: f64) -> Conditions {
        Conditions { rtt_ms: 0.0, uplink_bytes_per_ms: bandwidth, ..Default::default() }
    }

    #[test]
    fn the_seed_example_moves_the_split_deeper_when_bandwidth_falls() {
        let c = seed_example();
        let fast = plan_candidates(&c, &at(50.0), &Constraints::default()).unwrap();
        assert_eq!(fast[0].depth, 7);
        assert!((fast[0].total_ms - 20.5111).abs() < 1e-3, "{}", fast[0].total_ms);
        let slow = plan_candidates(&c, &at(8.0), &Constraints::default()).unwrap();
        assert_eq!(slow[0].depth, 17);
        assert!((slow[0].total_ms - 51.9722).abs() < 1e-3, "{}", slow[0].total_ms);
    }

    #[test]
    fn constraints_exclude_candidates() {
        let mut c = seed_example();
        c.push(Candidate {
            placement: Placement::CloudOnly,
            depth: 0,
            edge_ms: 0.0,
            edge_fixed_ms: 0.0,
            bytes: 10.0,
            cloud_ms: 1.0,
            agreement: 1.0,
            edge_param_bytes: 0,
        });
        // Cloud-only is cheapest at 50 units...
        assert_eq!(
            plan_candidates(&c, &at(50.0), &Constraints::default()).unwrap()[0].placement,
            Placement::CloudOnly
        );
        // ...but a privacy floor forbids raw pixels and every cut before it.
        let private = Constraints { privacy_floor: 10, ..Default::default() };
        let p = plan_candidates(&c, &at(50.0), &private).unwrap();
        assert_eq!(p[0].depth, 10);
        // A memory budget caps the depth; an accuracy floor drops lossy options.
        c[2].agreement = 0.9;
        let k = Constraints {
            privacy_floor: 1,
            min_agreement: 0.99,
            max_edge_param_bytes: Some(5),
            ..Default::default()
        };
        let p = plan_candidates(&c, &at(50.0), &k).unwrap();
        assert!(p.iter().all(|e| e.depth != 3));
        assert_eq!(p.len(), 4, "layers 1, 2, 4, 5");
        let none = Constraints { privacy_floor: 30, ..Default::default() };
        assert_eq!(plan_candidates(&c, &at(50.0), &none), Err(PlanError::NoFeasible));
    }

    /// Edge-only (150 ms on the device), a split after a block (55 ms, 20 kB, 11 ms on the
    /// server) and cloud-only (a 60 kB photo, 16 ms on the server), as EfficientNet-Lite0's
    /// are in shape.
    fn three_tiers() -> Vec<Candidate> {
        let tier = |placement, depth, edge_ms, bytes, cloud_ms| Candidate {
            placement,
            depth,
            edge_ms,
            edge_fixed_ms: 0.0,
            bytes,
            cloud_ms,
            agreement: 1.0,
            edge_param_bytes: depth as u64,
        };
        let split = Placement::Split { boundary: "block5".into(), codec: Setting::F32 };
        vec![
            tier(Placement::EdgeOnly, 20, 150.0, 0.0, 0.0),
            tier(split, 7, 55.0, 20_000.0, 11.0),
            tier(Placement::CloudOnly, 0, 0.0, 60_000.0, 16.0),
        ]
    }

    fn first(c: &[Candidate], k: &Constraints) -> Placement {
        let link = Conditions { rtt_ms: 50.0, uplink_bytes_per_ms: 1250.0, ..Default::default() };
        plan_candidates(c, &link, k).unwrap()[0].placement.clone()
    }

    fn goal(mode: super::super::Mode, radio: super::super::Radio) -> Constraints {
        let objective = Objective { mode, radio, ..Default::default() };
        Constraints { objective, ..Default::default() }
    }

    #[test]
    fn each_goal_picks_its_own_placement() {
        use super::super::{Mode, Radio};
        let c = three_tiers();
        let split = c[1].placement.clone();
        // Latency: cloud-only (114 ms against 132 and 150).
        assert_eq!(first(&c, &Constraints::default()), Placement::CloudOnly);
        // Battery on Wi-Fi: the radio is cheap, sending the photo cheapest; with the photo
        // kept private, the split's 55 ms of compute beat edge-only's 150.
        assert_eq!(first(&c, &goal(Mode::Battery, Radio::Wifi)), Placement::CloudOnly);
        let private = Constraints { privacy_floor: 1, ..goal(Mode::Battery, Radio::Wifi) };
        assert_eq!(first(&c, &private), split);
        // Battery on LTE: the radio's tail (12 s at 1 W) outweighs any compute saved.
        assert_eq!(first(&c, &goal(Mode::Battery, Radio::Lte)), Placement::EdgeOnly);
        // Data: nothing sent.
        assert_eq!(first(&c, &goal(Mode::Data, Radio::Wifi)), Placement::EdgeOnly);
        // Balanced on Wi-Fi: the split, best of neither latency nor energy alone.
        assert_eq!(first(&c, &goal(Mode::Balanced, Radio::Wifi)), split);
        // Every estimate carries its terms.
        let link = Conditions { rtt_ms: 50.0, uplink_bytes_per_ms: 1250.0, ..Default::default() };
        let all = plan_candidates(&c, &link, &goal(Mode::Balanced, Radio::Wifi)).unwrap();
        let edge = all.iter().find(|e| e.placement == Placement::EdgeOnly).unwrap();
        assert!((edge.compute_mj - 150.0 * 2.3).abs() < 1e-9);
        assert_eq!((edge.radio_mj, edge.server_cost, edge.bytes), (0.0, 0.0, 0.0));
        let cloud = all.iter().find(|e| e.placement == Placement::CloudOnly).unwrap();
        assert!(cloud.radio_mj > 0.0 && cloud.compute_mj == 0.0 && cloud.server_cost == 16.0);
    }

    #[test]
    fn deadlines_bind_by_class() {
        use super::super::{Class, Mode, Radio, RealTime};
        let c = three_tiers();
        let within = |class, deadline_ms, k: Constraints| Constraints {
            realtime: Some(RealTime { class, deadline_ms: Some(deadline_ms) }),
            ..k
        };
        let link = Conditions { rtt_ms: 50.0, uplink_bytes_per_ms: 1250.0, ..Default::default() };
        // Hard, 100 ms: nothing is predicted under 114 ms.
        let hard = within(Class::Hard, 100.0, Constraints::default());
        match plan_candidates(&c, &link, &hard) {
            Err(PlanError::Deadline { deadline_ms, fastest_ms }) => {
                assert_eq!(deadline_ms, 100.0);
                assert!((fastest_ms - 114.0).abs() < 1e-9, "{fastest_ms}");
            }
            other => panic!("expected the deadline refused, got {other:?}"),
        }
        // Hard, 120 ms, on battery over LTE: only cloud-only meets it, whatever its energy.
        let lte = within(Class::Hard, 120.0, goal(Mode::Battery, Radio::Lte));
        let ranked = plan_candidates(&c, &link, &lte).unwrap();
        assert_eq!(ranked.len(), 1);
        assert_eq!(ranked[0].placement, Placement::CloudOnly);
        // Soft, 100 ms: none meets it, so the fastest first.
        let soft = within(Class::Soft, 100.0, goal(Mode::Data, Radio::Wifi));
        assert_eq!(first(&c, &soft), Placement::CloudOnly);
        // Soft, 140 ms, battery, photo private: the split (132 ms) before edge-only (150).
        let private = Constraints { privacy_floor: 1, ..goal(Mode::Battery, Radio::Wifi) };
        let ranked = plan_candidates(&c, &link, &within(Class::Soft, 140.0, private)).unwrap();
        assert_eq!(ranked[0].placement, c[1].placement);
        assert_eq!(ranked[1].placement, Placement::EdgeOnly, "late, but still offered");
        // Batch: no deadline, latency only breaks ties; balanced then keeps the split.
        let batch = within(Class::Batch, 1.0, goal(Mode::Balanced, Radio::Wifi));
        assert_eq!(first(&c, &batch), c[1].placement);
        assert!(within(Class::Soft, -1.0, Constraints::default()).check().is_err());
    }

    #[test]
    fn no_link_means_edge_only_if_allowed() {
        let mut c = seed_example();
        c.push(Candidate {
            placement: Placement::EdgeOnly,
            depth: 28,
            edge_ms: 80.0,
            edge_fixed_ms: 0.0,
            bytes: 0.0,
            cloud_ms: 0.0,
            agreement: 1.0,
            edge_param_bytes: 28,
        });
        let p = plan_candidates(&c, &at(0.0), &Constraints::default()).unwrap();
        assert_eq!(p[0].placement, Placement::EdgeOnly);
        assert_eq!(p[0].total_ms, 80.0);
        assert!(p[1].total_ms.is_infinite());
    }

    /// The encrypted placement is never chosen unless asked for, however cheap; asked for, it
    /// is chosen over every split and cloud-only, whatever the privacy floor, and edge-only
    /// takes its place when the link is down.
    #[test]
    fn the_encrypted_placement_is_chosen_only_when_asked() {
        let mut c = three_tiers();
        c.push(Candidate {
            placement: Placement::Encrypted { boundary: "pool".into() },
            depth: 19,
            edge_ms: 40.0,
            edge_fixed_ms: 0.0,
            bytes: 1_000.0,
            cloud_ms: 1.0,
            agreement: 0.99,
            edge_param_bytes: 19,
        });
        let link = Conditions { rtt_ms: 10.0, uplink_bytes_per_ms: 1000.0, ..Default::default() };
        let plain = plan_candidates(&c, &link, &Constraints::default()).unwrap();
        assert!(plain.iter().all(|e| !matches!(e.placement, Placement::Encrypted { .. })));
        let asked = Constraints { encrypted: true, privacy_floor: 20, ..Default::default() };
        let p = plan_candidates(&c, &link, &asked).unwrap();
        assert_eq!(p.len(), 2, "{p:?}");
        assert_eq!(p[0].placement, Placement::Encrypted { boundary: "pool".into() });
        assert_eq!(p[1].placement, Placement::EdgeOnly);
        assert!(p.iter().all(|e| e.placement.server_reads_nothing()));
        assert_eq!(
            plan_candidates(&c, &at(0.0), &asked).unwrap()[0].placement,
            Placement::EdgeOnly
        );
        // It is held to the accuracy floor like any other.
        let strict = Constraints { min_agreement: 0.995, ..asked };
        assert_eq!(plan_candidates(&c, &link, &strict).unwrap().len(), 1);
        // Without edge-only or an encrypted candidate, asking for it leaves nothing.
        c.retain(|c| !c.placement.server_reads_nothing());
        let asked = Constraints { encrypted: true, ..Default::default() };
        assert_eq!(plan_candidates(&c, &link, &asked), Err(PlanError::NoFeasible));
    }
}
