//! The adaptive controller: re-plans every period on forecast conditions, switches only for a
//! real gain after a minimum dwell, and re-plans at once when the link fails or a signal jumps.

use serde::{Deserialize, Serialize};

use super::monitor::Forecast;
use super::planner::{Candidate, Conditions, Constraints, Estimate, Placement, plan_candidates};

/// Tuning of the controller.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ControllerConfig {
    /// Re-plan at least this often, ms.
    pub period_ms: f64,
    /// Switch only when the new placement is predicted this much faster (0.1 = 10%).
    pub min_gain: f64,
    /// Keep a placement at least this long unless a jump or an outage forces a re-plan, ms.
    pub min_dwell_ms: f64,
    /// A signal that moved by this factor since the last plan is a jump.
    pub jump_factor: f64,
    /// How far ahead to plan, ms.
    pub horizon_ms: f64,
    /// Chance per re-plan that a *load-driven* switch is made (one the server's queue alone
    /// called for: at the queue the current placement was chosen under it would not be worth
    /// it). Every client of a busy server sees the same queue; if all moved at once they would
    /// empty it, all come back, and fill it again. Moving a fraction each period lets the queue
    /// answer before the rest decide, so the mix settles. 1 turns this off.
    pub load_switch_probability: f64,
    /// Each dwell is `min_dwell_ms` times a random factor in `1 ± dwell_jitter`, so clients that
    /// switched together do not re-plan in step.
    pub dwell_jitter: f64,
    /// Price of the server's compute under load: when ranking placements, cloud time counts
    /// `1 + queue / queue_price_ms` times. The wait a client sees is what its request costs it;
    /// what it costs the others is the extra wait its cloud time adds to theirs, which grows
    /// with the queue. Pricing it in, the crowd keeps the server near a short queue, each
    /// client giving it the part of the network its own edge runs slowest (0: off).
    pub queue_price_ms: f64,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            period_ms: 2_000.0,
            min_gain: 0.1,
            min_dwell_ms: 6_000.0,
            jump_factor: 3.0,
            horizon_ms: 5_000.0,
            load_switch_probability: 0.3,
            dwell_jitter: 0.5,
            queue_price_ms: 5.0,
        }
    }
}

/// A small deterministic generator (xorshift64*): the controller's coin flips, seeded per
/// client so a simulation replays exactly.
#[derive(Clone, Debug)]
struct Coin(u64);

impl Coin {
    /// A uniform value in `[0, 1)`.
    fn next(&mut self) -> f64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Switches the controller keeps for the page to show, the newest: a page open for hours
/// switches thousands of times, and every request's explanation carries the log.
pub const SWITCH_LOG_CAP: usize = 64;

/// A logged change of placement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Switch {
    /// When, ms.
    pub at_ms: f64,
    /// The previous placement (`None` at start).
    pub from: Option<Placement>,
    /// The new one, with its predicted breakdown.
    pub to: Estimate,
    /// Why.
    pub reason: String,
}

/// What one tick decided.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Decision {
    /// Nothing due, or nothing better enough.
    Keep,
    /// Change placement.
    Switch(Switch),
}

/// Placement state over time.
#[derive(Clone, Debug)]
pub struct Controller {
    config: ControllerConfig,
    current: Option<Placement>,
    since_ms: f64,
    last_plan_ms: f64,
    planned_for: Option<Conditions>,
    /// The server queue the current placement was chosen under, ms.
    queue_at_switch_ms: f64,
    /// This placement's dwell (`min_dwell_ms` with jitter), ms.
    dwell_ms: f64,
    coin: Coin,
    /// The newest switches, at most [`SWITCH_LOG_CAP`], oldest first.
    log: Vec<Switch>,
    /// Every switch so far, including those the log no longer holds.
    switches: usize,
}

fn jumped(a: &Conditions, b: &Conditions, factor: f64) -> Option<String> {
    let ratio = |x: f64, y: f64| {
        if x > 0.0 && y > 0.0 {
            (x / y).max(y / x)
        } else if x == y {
            1.0
        } else {
            f64::INFINITY
        }
    };
    let rtt = ratio(a.rtt_ms, b.rtt_ms);
    let up = ratio(a.uplink_bytes_per_ms, b.uplink_bytes_per_ms);
    if rtt >= factor {
        Some(format!("RTT jumped {:.0} -> {:.0} ms", b.rtt_ms, a.rtt_ms))
    } else if up >= factor {
        Some(format!(
            "uplink jumped {:.0} -> {:.0} kB/s",
            b.uplink_bytes_per_ms, a.uplink_bytes_per_ms
        ))
    } else {
        None
    }
}

impl Controller {
    /// A controller with no placement yet; the first tick picks one.
    pub fn new(config: ControllerConfig) -> Self {
        Self::with_seed(config, 0x9E37_79B9_7F4A_7C15)
    }

    /// [`Self::new`] with its own random seed: each client of a server should have one.
    pub fn with_seed(config: ControllerConfig, seed: u64) -> Self {
        Self {
            config,
            current: None,
            since_ms: 0.0,
            last_plan_ms: f64::NEG_INFINITY,
            planned_for: None,
            queue_at_switch_ms: 0.0,
            dwell_ms: config.min_dwell_ms,
            // xorshift needs a non-zero state.
            coin: Coin(seed | 1),
            log: Vec::new(),
            switches: 0,
        }
    }

    /// The placement in force.
    pub fn current(&self) -> Option<&Placement> {
        self.current.as_ref()
    }

    /// The newest switches (at most [`SWITCH_LOG_CAP`]), oldest first, with their reasons.
    pub fn log(&self) -> &[Switch] {
        &self.log
    }

    /// How many times the placement changed, the first choice included.
    pub fn switch_count(&self) -> usize {
        self.switches
    }

    /// Re-plan at the next tick, whatever the period (the constraints changed).
    pub fn replan(&mut self) {
        self.last_plan_ms = f64::NEG_INFINITY;
    }

    /// Force a placement (the user's manual override); the controller resumes from it.
    pub fn set(&mut self, now_ms: f64, placement: Placement) {
        self.current = Some(placement);
        self.since_ms = now_ms;
    }

    /// Decide at `now_ms` given the monitor's `forecast`.
    pub fn tick(
        &mut self,
        now_ms: f64,
        candidates: &[Candidate],
        forecast: &Forecast,
        constraints: &Constraints,
    ) -> Decision {
        let jump = self
            .planned_for
            .as_ref()
            .and_then(|p| jumped(&forecast.now, p, self.config.jump_factor));
        let outage = !forecast.link_up;
        let due = self.current.is_none() || now_ms - self.last_plan_ms >= self.config.period_ms;
        if !due && jump.is_none() && !outage {
            return Decision::Keep;
        }
        // After a step, the trend still averages the old regime: plan on what is measured now.
        let measured = if jump.is_some() || outage { forecast.now } else { forecast.predicted };
        let conditions = self.priced(&measured);
        self.last_plan_ms = now_ms;
        self.planned_for = Some(forecast.now);
        let Ok(ranked) = plan_candidates(candidates, &conditions, constraints) else {
            // Nothing can be chosen, and a placement the constraints now forbid is not kept
            // (no features leave below a privacy floor just raised, none unencrypted once
            // encryption is asked for): none is in force, which runs locally.
            let allowed = |p: &Placement| {
                candidates
                    .iter()
                    .any(|c| c.placement == *p && super::planner::allowed(c, constraints))
            };
            if self.current.as_ref().is_some_and(|p| !allowed(p)) {
                self.current = None;
            }
            return Decision::Keep;
        };
        let best = ranked[0].clone();
        let current = self.current.clone();
        let reason = match &current {
            None => Some("initial plan".to_string()),
            Some(c) if *c == best.placement => None,
            Some(c) => {
                let now_cost = ranked.iter().find(|e| e.placement == *c).map(|e| e.score);
                let gain = now_cost.map(|n| (n - best.score) / n);
                let dwelt = now_ms - self.since_ms >= self.dwell_ms;
                match (now_cost, gain) {
                    (None, _) => Some("the current placement is no longer allowed".to_string()),
                    (Some(n), _) if outage && !n.is_finite() => {
                        Some("link down: running locally".to_string())
                    }
                    (Some(n), Some(g))
                        if g >= self.config.min_gain
                            && (dwelt || jump.is_some() || !n.is_finite())
                            && (jump.is_some()
                                || !n.is_finite()
                                || !self.load_driven(
                                    candidates,
                                    &measured,
                                    c,
                                    &best,
                                    constraints,
                                )
                                || self.coin.next() < self.config.load_switch_probability) =>
                    {
                        let why = jump.clone().map_or_else(String::new, |j| format!("{j}; "));
                        Some(match constraints.objective.mode {
                            super::Mode::Latency if constraints.objective.weights.is_none() => {
                                format!(
                                    "{why}predicted {n:.0} -> {:.0} ms ({:.0}% faster)",
                                    best.score,
                                    100.0 * g
                                )
                            }
                            mode => format!(
                                "{why}{} score {n:.0} -> {:.0} ({:.0}% lower; {:.0} ms)",
                                mode.name(),
                                best.score,
                                100.0 * g,
                                best.total_ms
                            ),
                        })
                    }
                    _ => None,
                }
            }
        };
        match reason {
            None => Decision::Keep,
            Some(reason) => {
                // Logged with the latency it predicts, not its price.
                let to = candidates
                    .iter()
                    .find(|c| c.placement == best.placement)
                    .map_or(best, |c| super::estimate_for(c, &measured, &constraints.objective));
                let switch = Switch { at_ms: now_ms, from: current, to, reason };
                self.current = Some(switch.to.placement.clone());
                self.since_ms = now_ms;
                self.queue_at_switch_ms = measured.queue_ms;
                let jitter = self.config.dwell_jitter.clamp(0.0, 1.0);
                self.dwell_ms =
                    self.config.min_dwell_ms * (1.0 + jitter * (2.0 * self.coin.next() - 1.0));
                if self.log.len() == SWITCH_LOG_CAP {
                    self.log.remove(0);
                }
                self.log.push(switch.clone());
                self.switches += 1;
                Decision::Switch(switch)
            }
        }
    }

    /// `conditions` with the server's compute priced by its queue ([`ControllerConfig::queue_price_ms`]).
    fn priced(&self, conditions: &Conditions) -> Conditions {
        let price = if self.config.queue_price_ms > 0.0 {
            1.0 + conditions.queue_ms.max(0.0) / self.config.queue_price_ms
        } else {
            1.0
        };
        Conditions { cloud_factor: conditions.cloud_factor * price, ..*conditions }
    }

    /// Whether moving from `current` to `best` is the server queue's doing: at the queue the
    /// current placement was chosen under, `best` would not gain enough to switch.
    fn load_driven(
        &self,
        candidates: &[Candidate],
        conditions: &Conditions,
        current: &Placement,
        best: &Estimate,
        constraints: &Constraints,
    ) -> bool {
        if conditions.queue_ms == self.queue_at_switch_ms {
            return false;
        }
        let before = self.priced(&Conditions { queue_ms: self.queue_at_switch_ms, ..*conditions });
        let cost = |p: &Placement| {
            candidates
                .iter()
                .find(|c| c.placement == *p && super::planner::allowed(c, constraints))
                .map(|c| super::estimate_for(c, &before, &constraints.objective).score)
        };
        match (cost(current), cost(&best.placement)) {
            (Some(now), Some(then)) if now.is_finite() => (now - then) / now < self.config.min_gain,
            _ => false,
        }
    }

    /// Predicted cost of the current placement under `conditions` (for display).
    pub fn predicted(
        &self,
        candidates: &[Candidate],
        conditions: &Conditions,
        objective: &super::Objective,
    ) -> Option<Estimate> {
        let current = self.current.as_ref()?;
        let c = candidates.iter().find(|c| c.placement == *current)?;
        Some(super::estimate_for(c, conditions, objective))
    }
}
