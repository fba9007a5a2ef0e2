//! The adaptive controller: re-plans every period on forecast conditions, switches only for a
//! real gain after a minimum dwell, and re-plans at once when the link fails or a signal jumps.

use serde::{Deserialize, Serialize};

use super::monitor::Forecast;
use super::planner::{
    Candidate, Conditions, Constraints, Estimate, Placement, estimate, plan_candidates,
};

/// Tuning of the controller.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
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
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            period_ms: 2_000.0,
            min_gain: 0.1,
            min_dwell_ms: 6_000.0,
            jump_factor: 3.0,
            horizon_ms: 5_000.0,
        }
    }
}

/// A logged change of placement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
    log: Vec<Switch>,
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
        Self {
            config,
            current: None,
            since_ms: 0.0,
            last_plan_ms: f64::NEG_INFINITY,
            planned_for: None,
            log: Vec::new(),
        }
    }

    /// The placement in force.
    pub fn current(&self) -> Option<&Placement> {
        self.current.as_ref()
    }

    /// Every switch so far, with its reason.
    pub fn log(&self) -> &[Switch] {
        &self.log
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
        let conditions = if jump.is_some() || outage { forecast.now } else { forecast.predicted };
        self.last_plan_ms = now_ms;
        self.planned_for = Some(forecast.now);
        let Ok(ranked) = plan_candidates(candidates, &conditions, constraints) else {
            return Decision::Keep;
        };
        let best = ranked[0].clone();
        let current = self.current.clone();
        let reason = match &current {
            None => Some("initial plan".to_string()),
            Some(c) if *c == best.placement => None,
            Some(c) => {
                let now_cost = ranked.iter().find(|e| e.placement == *c).map(|e| e.total_ms);
                let gain = now_cost.map(|n| (n - best.total_ms) / n);
                let dwelt = now_ms - self.since_ms >= self.config.min_dwell_ms;
                match (now_cost, gain) {
                    (None, _) => Some("the current placement is no longer allowed".to_string()),
                    (Some(n), _) if outage && !n.is_finite() => {
                        Some("link down: running locally".to_string())
                    }
                    (Some(n), Some(g))
                        if g >= self.config.min_gain
                            && (dwelt || jump.is_some() || !n.is_finite()) =>
                    {
                        let why = jump.clone().map_or_else(String::new, |j| format!("{j}; "));
                        Some(format!(
                            "{why}predicted {n:.0} -> {:.0} ms ({:.0}% faster)",
                            best.total_ms,
                            100.0 * g
                        ))
                    }
                    _ => None,
                }
            }
        };
        match reason {
            None => Decision::Keep,
            Some(reason) => {
                let switch = Switch { at_ms: now_ms, from: current, to: best, reason };
                self.current = Some(switch.to.placement.clone());
                self.since_ms = now_ms;
                self.log.push(switch.clone());
                Decision::Switch(switch)
            }
        }
    }

    /// Predicted cost of the current placement under `conditions` (for display).
    pub fn predicted(&self, candidates: &[Candidate], conditions: &Conditions) -> Option<Estimate> {
        let current = self.current.as_ref()?;
        candidates.iter().find(|c| c.placement == *current).map(|c| estimate(c, conditions))
    }
}
