//! Choosing where to split: a measured cost table, a planner that minimizes predicted latency
//! (or the device's energy, the bytes sent, a balance with the server's cost) under user
//! constraints, a network monitor that forecasts conditions, and a controller that
//! re-plans as they change without oscillating, inside the client policy (probing, deadlines,
//! what every reply teaches the monitor) that the browser and the simulator both run.
//!
//! All of it is plain Rust with time passed in (milliseconds), so the browser drives it through
//! the wasm module and the tests drive it through recorded or synthetic traces.

mod controller;
mod fixed;
mod llm;
mod monitor;
pub mod objective;
mod planner;
mod policy;
pub mod sim;
mod table;

pub use controller::{Controller, ControllerConfig, Decision, SWITCH_LOG_CAP, Switch};
pub use llm::{
    LlmEstimate, LlmLimits, LlmLink, LlmPlacement, LlmPlan, LlmPlanError, LlmRefusal, LlmShape,
    LlmSideCosts, LlmWorkload, estimate_llm, llm_candidates, llm_refusal, plan_llm,
};
pub use monitor::{Forecast, Measured, NetworkMonitor};
pub use objective::{Class, Mode, Objective, Radio, RealTime, Trip, Weights};
pub use planner::{
    Candidate, Conditions, Constraints, DEFAULT_MIN_AGREEMENT, Estimate, Placement, PlanError,
    estimate, estimate_for, plan, plan_candidates,
};
pub use policy::{AdaptivePolicy, Explanation, PingObservation, ProbeConfig, RequestObservation};
pub use table::{
    COST_TABLE_VERSION, CodecCost, CostTable, EdgeProfile, EncryptedCost, NATIVE_PROFILE,
    wilson_lower,
};
