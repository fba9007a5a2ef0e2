//! The performance lab: what the split costs in time, bytes and CPU, measured against the real
//! server over real sockets, in headless Chromium, and against other runtimes.
//!
//! - [`loadgen`] (binary `loadgen`): many concurrent WebSocket clients sending real frames;
//! - [`crowd`] (binary `crowd`): browser-like clients, each on its own emulated link, mode after
//!   mode; [`netem`] (binary `netem`): the link emulator both use;
//! - [`lab`] (`./run.sh lab`): the whole lab in one command and its report;
//! - [`profile`] (`./run.sh profile`): the planner's cost table; [`plan_sim`] (`./run.sh
//!   plan-sim`): the adaptive controller on synthetic traces, and with [`trace_sim`] on the
//!   browser lab's links, many runs of each; [`onnx`] (`./run.sh onnx`): ONNX
//!   Runtime against burn; [`chat`] (`./run.sh chat`): SmolLM2 answering a message, timed;
//!   [`llm_crowd`] (`./run.sh llm-crowd`): many split conversations on one server at once.
//!
//! The `split-lab` binary runs the last six (`./run.sh lab --help`, ...).

pub mod chat;
pub mod crowd;
pub mod lab;
pub mod llm_crowd;
mod llm_member;
pub mod llm_placements;
pub mod loadgen;
pub mod measure;
pub mod netem;
pub mod onnx;
mod ops_profile;
pub mod plan_sim;
pub mod profile;
pub mod recorded;
pub mod trace_sim;
mod workload;

pub use loadgen::{LoadConfig, LoadReport, LoadRun, process_cpu_ms, quantile, run};
pub use workload::Workload;
