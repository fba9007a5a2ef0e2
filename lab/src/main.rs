//! `split-lab <task>` (`./run.sh <task>`): the performance lab, the planner's cost table, the
//! controller's simulation, the ONNX Runtime baseline and the language model's chat.

use anyhow::Result;
use clap::{Parser, Subcommand};
use split_lab::{chat, lab, llm_crowd, llm_placements, onnx, plan_sim, profile, recorded};

/// The network's activations are multi-megabyte buffers allocated and freed on every forward;
/// glibc's allocator hands them back to the OS and page-faults them in again each time
/// (about 44 faults a forward), mimalloc keeps them for reuse: 3–6% of a forward (docs/kernels.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The performance lab: time, bytes and CPU of the split against edge-only, cloud-only and
/// other runtimes.
#[derive(Parser, Debug)]
#[command(name = "split-lab", about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand, Debug)]
enum Task {
    /// The performance lab (throughput, links, browser, baselines) and its report.
    Lab(lab::Args),
    /// Measure the planner's cost table (`profiles/cost-table.json`).
    Profile(profile::Args),
    /// The adaptive controller on synthetic traces (or, `--lab-links`, the lab's links, many
    /// runs each) with the measured cost table.
    PlanSim(plan_sim::Args),
    /// ONNX export of the model and ONNX Runtime (CPU) against burn flex.
    Onnx(onnx::Args),
    /// SmolLM2-135M-Instruct answering one message on this CPU, with its prefill and decode speed.
    Chat(chat::Args),
    /// Many split conversations with SmolLM2 on one server at once: the server's part of each
    /// token, its memory, every reply checked.
    LlmCrowd(llm_crowd::Args),
    /// SmolLM2's placements (edge-only, U-split, plain split, cloud-only) timed against each
    /// other over the lab's emulated links.
    LlmPlacements(llm_placements::Args),
    /// Turn a recorded cellular trace (Mahimahi's format: a pair of uplink and downlink files)
    /// into the rates per window the link emulator replays (`lab/traces/<name>.json`).
    ImportTrace(recorded::ImportArgs),
}

fn main() -> Result<()> {
    match Cli::parse().task {
        Task::Lab(a) => lab::run(a),
        Task::Profile(a) => profile::run(a),
        Task::PlanSim(a) => plan_sim::run(a),
        Task::Onnx(a) => onnx::run(a),
        Task::Chat(a) => chat::run(a),
        Task::LlmCrowd(a) => llm_crowd::run(a),
        Task::LlmPlacements(a) => llm_placements::run(a),
        Task::ImportTrace(a) => recorded::import(a),
    }
}
