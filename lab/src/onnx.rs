//! `./run.sh onnx [--repeats N]`: export the model to ONNX from the project's weights
//! (`tools/export_onnx.py`), check its logits against the golden fixture, and time ONNX Runtime
//! (CPU, from PyPI) against burn `flex` on the same machine: the whole network and the cloud
//! tier's tails from block5 and block11, with 1 and 2 threads, one image a run or a batch
//! (`--batch N`: both engines run N images at once, what the server does under load; the times
//! are per image).
//!
//! The two engines are timed in turns: in each of [`ROUNDS`] rounds, for each part and thread
//! count, a stretch of ONNX Runtime's runs (the script's `--serve` mode, a process kept open)
//! and one of burn's, the order alternating from round to round; each engine's figure is the
//! median of all its runs. This machine's speed drifts by 10–30% for seconds at a time (a
//! virtual machine's neighbours), and timed one after the other the engines met different
//! stretches of it. Each stretch starts after a pause ([`SETTLE`]), so that neither meets the
//! other's threads still spinning.
//!
//! Python packages (`numpy`, `onnx`, `onnxruntime`) go into a virtual environment in the cache.

use std::fmt::Write;
use std::io::{BufRead, BufReader, Write as _};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use burn::tensor::{Device, Tensor};
use split_shared::model::{Boundary, EfficientNetLite0, blocks};

use xtask::{paths, setup};

fn python() -> Result<PathBuf> {
    let venv = paths::cache_dir().join("venv");
    let py = venv.join("bin/python");
    if !py.exists() {
        let status = Command::new("python3").args(["-m", "venv"]).arg(&venv).status()?;
        anyhow::ensure!(status.success(), "python3 -m venv failed");
    }
    let check = Command::new(&py).args(["-c", "import numpy, onnx, onnxruntime"]).output()?;
    if !check.status.success() {
        eprintln!("onnx: installing numpy, onnx, onnxruntime into {}", venv.display());
        let status = Command::new(&py)
            .args(["-m", "pip", "install", "--quiet", "numpy", "onnx", "onnxruntime"])
            .status()?;
        anyhow::ensure!(status.success(), "pip install onnx onnxruntime failed");
    }
    Ok(py)
}

/// Rounds of turns in [`measure`]: each engine's runs of a part come in this many stretches.
const ROUNDS: usize = 6;

/// The pause before each stretch, so that it starts on a quiet machine. ONNX Runtime's
/// intra-op threads spin on after a run (its default, which its speed relies on); burn's
/// stretches started the moment ORT's 2-thread one ended ran their 2-thread tails at 1.3–2.3×
/// their time in the other rounds, slower than on 1 thread (a helper holding a part on the
/// core the spinning thread held). Tens of ms were seen; 100 ms clears them.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(100);

/// `tools/export_onnx.py --serve`, kept open: its report, then ONNX Runtime's run times on
/// request.
struct OrtTimer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    report: serde_json::Value,
}

impl OrtTimer {
    /// Start the script and read its report (the export and its check are done by then).
    fn start(cmd: &mut Command) -> Result<Self> {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("running tools/export_onnx.py")?;
        let stdin = child.stdin.take().context("the script's stdin")?;
        let mut stdout = BufReader::new(child.stdout.take().context("the script's stdout")?);
        let mut line = String::new();
        stdout.read_line(&mut line).context("reading export_onnx.py's report")?;
        if line.trim().is_empty() {
            let status = child.wait()?;
            bail!("export_onnx.py failed ({status}); its errors are above");
        }
        let report = serde_json::from_str(&line).context("export_onnx.py report")?;
        Ok(Self { child, stdin, stdout, report })
    }

    /// `repeats` timed runs of a model (`full`, `block5`, `block11`) on `threads` threads, ms.
    fn times(&mut self, model: &str, threads: usize, repeats: usize) -> Result<Vec<f64>> {
        writeln!(self.stdin, "{model} {threads} {repeats}").context("asking export_onnx.py")?;
        self.stdin.flush()?;
        let mut line = String::new();
        self.stdout.read_line(&mut line).context("reading export_onnx.py's times")?;
        let times: Vec<f64> = serde_json::from_str(&line).with_context(|| {
            format!("export_onnx.py's times for {model} on {threads}: {line:?}")
        })?;
        anyhow::ensure!(
            times.len() == repeats,
            "export_onnx.py timed {} runs, not {repeats}",
            times.len()
        );
        Ok(times)
    }

    /// Close the script's input and wait for it to end.
    fn finish(self) -> Result<()> {
        let Self { mut child, stdin, .. } = self;
        drop(stdin);
        let status = child.wait()?;
        anyhow::ensure!(status.success(), "export_onnx.py ended with {status}");
        Ok(())
    }
}

/// One part of the network timed on both engines, ms per image (a run of [`OnnxReport::batch`]
/// images divided by it).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct PartTiming {
    /// `full`, `tail-block5`, `tail-block11`.
    pub part: String,
    /// burn `flex` with the kernels on 1 thread, median.
    #[serde(deserialize_with = "crate::measure::null_as_nan")]
    pub burn_ms: f64,
    /// burn `flex` with the kernels on 2 threads, median (NaN in reports from before it).
    #[serde(default = "crate::measure::nan", deserialize_with = "crate::measure::null_as_nan")]
    pub burn_2_ms: f64,
    /// ONNX Runtime CPU with 1 and 2 intra-op threads, median.
    #[serde(deserialize_with = "crate::measure::null_as_nan")]
    pub ort_1_ms: f64,
    /// With 2 threads.
    #[serde(deserialize_with = "crate::measure::null_as_nan")]
    pub ort_2_ms: f64,
}

/// What [`measure`] found.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct OnnxReport {
    /// onnxruntime's version.
    pub onnxruntime: String,
    /// Largest |logit - golden| of the exported model on `chelsea`.
    #[serde(deserialize_with = "crate::measure::null_as_nan")]
    pub max_abs_logit_diff: f64,
    /// Whole network and the cloud tier's tails.
    pub parts: Vec<PartTiming>,
    /// burn's CPU time over wall time for the whole network on 2 threads (threads in use).
    #[serde(deserialize_with = "crate::measure::null_as_nan")]
    pub burn_cpu_per_wall: f64,
    /// Per operation category, ms per image: burn (each op alone), ORT 1 and 2 threads
    /// (profiler). Empty unless asked for.
    pub ops: Vec<(String, f64, f64, f64)>,
    /// Path of the exported whole-network model.
    pub model: PathBuf,
    /// Images a timed run (1 in reports from before it).
    #[serde(default = "one")]
    pub batch: usize,
    /// Stretches each engine's runs came in, in turn with the other's (1: one engine's runs,
    /// then the other's, as in reports from before 2026-12-07's).
    #[serde(default = "one")]
    pub rounds: usize,
    /// The pause before each stretch, ms (0: none, as in reports from before it).
    #[serde(default)]
    pub settle_ms: u64,
}

fn one() -> usize {
    1
}

impl OnnxReport {
    /// How the runs were taken, as the report's sentence goes on after "medians of N runs":
    /// reports say how they were timed, older ones included (their fields' serde defaults).
    pub fn how_timed(&self) -> String {
        if self.rounds <= 1 {
            return " (one engine's, then the other's)".into();
        }
        let pause = if self.settle_ms > 0 {
            format!(
                ", each after a {} ms pause (ONNX Runtime's threads spin on after a run)",
                self.settle_ms
            )
        } else {
            String::new()
        };
        format!(
            " of each engine, taken in {} stretches in turn with the other's (the machine's speed \
             drifts for seconds at a time){pause}",
            self.rounds
        )
    }
}

/// Export, check against the golden logits, and time both engines; with `ops`, the per-op
/// profiles too.
///
/// # Errors
/// Missing weights, a failing Python step, or an export that does not reproduce the logits.
pub fn measure(repeats: usize, ops: bool, batch: usize) -> Result<OnnxReport> {
    anyhow::ensure!(batch >= 1, "a batch of at least one image");
    let weights_path = setup::ensure_weights()?;
    let out = paths::cache_dir().join("onnx");
    std::fs::create_dir_all(&out)?;
    let tails = [("block5", 5usize), ("block11", 11)];
    let arch = serde_json::json!({
        "blocks": blocks().iter().map(|b| serde_json::json!({
            "kernel": b.kernel, "stride": b.stride, "expand": b.expand, "c_in": b.c_in, "c_out": b.c_out,
        })).collect::<Vec<_>>(),
        "sizes": (0..16).map(|i| Boundary::block(i).map(|b| b.info().shape[1])).collect::<Result<Vec<_>, _>>()?,
        "tails": tails.iter().map(|(n, i)| serde_json::json!([n, i])).collect::<Vec<_>>(),
    });
    let arch_path = out.join("arch.json");
    std::fs::write(&arch_path, arch.to_string())?;
    let fixture = paths::repo_root().join("shared/tests/data/chelsea");
    let mut cmd = Command::new(python()?);
    cmd.arg(paths::repo_root().join("tools/export_onnx.py"))
        .arg("--weights")
        .arg(&weights_path)
        .arg("--arch")
        .arg(&arch_path)
        .arg("--out")
        .arg(&out)
        .arg("--fixture")
        .arg(&fixture)
        .args(["--repeats", &repeats.to_string()])
        .args(["--batch", &batch.to_string()]);
    if ops {
        cmd.arg("--profile-ops");
    }
    let mut ort = OrtTimer::start(cmd.arg("--serve"))?;
    let report = ort.report.clone();
    let top1 = &report["top1"];
    let max_diff = report["max_abs_logit_diff"].as_f64().unwrap_or(f64::NAN);
    if top1[0] != top1[1] || max_diff.is_nan() || max_diff > 1e-3 {
        bail!("the ONNX export does not reproduce the golden logits (max |diff| {max_diff})");
    }

    let device = Device::flex();
    let model = EfficientNetLite0::load(&weights_path, &device)?;
    let model = &model;
    let run_from = |from: Boundary| {
        let [c, h, w] = from.info().shape;
        let x = Tensor::<4>::zeros([batch, c, h, w], &device);
        move || {
            drop(
                model
                    .forward_range(x.clone(), from, Boundary::LOGITS)
                    .expect("forward")
                    .into_data(),
            )
        }
    };
    let names = [
        ("full", Boundary::INPUT),
        ("tail-block5", Boundary::block(5)?),
        ("tail-block11", Boundary::block(11)?),
    ];
    // [part][threads - 1]: every run of each engine, over the rounds.
    let mut burn_runs = vec![[Vec::new(), Vec::new()]; names.len()];
    let mut ort_runs = burn_runs.clone();
    let per_round = repeats.div_ceil(ROUNDS).max(1);
    for round in 0..ROUNDS {
        for (i, (name, from)) in names.iter().enumerate() {
            for threads in [1, 2] {
                let burn = || {
                    std::thread::sleep(SETTLE);
                    split_kernels::set_max_threads(threads);
                    let t = crate::measure::times_ms(run_from(*from), per_round);
                    split_kernels::set_max_threads(0);
                    t
                };
                let model = name.trim_start_matches("tail-");
                let mut ort_times = || {
                    std::thread::sleep(SETTLE);
                    ort.times(model, threads, per_round)
                };
                if round % 2 == 0 {
                    ort_runs[i][threads - 1].extend(ort_times()?);
                    burn_runs[i][threads - 1].extend(burn());
                } else {
                    burn_runs[i][threads - 1].extend(burn());
                    ort_runs[i][threads - 1].extend(ort_times()?);
                }
            }
        }
    }
    ort.finish()?;
    let per_image = |runs: &[f64]| crate::lab::stats::median(runs) / batch as f64;
    let parts = names
        .iter()
        .zip(burn_runs.iter().zip(&ort_runs))
        .map(|((name, _), (burn, ort))| PartTiming {
            part: (*name).into(),
            burn_ms: per_image(&burn[0]),
            burn_2_ms: per_image(&burn[1]),
            ort_1_ms: per_image(&ort[0]),
            ort_2_ms: per_image(&ort[1]),
        })
        .collect();
    split_kernels::set_max_threads(2);
    let cpu0 = crate::measure::self_cpu_ms();
    let t0 = Instant::now();
    let whole = run_from(Boundary::INPUT);
    for _ in 0..repeats {
        whole();
    }
    let burn_cpu_per_wall =
        (crate::measure::self_cpu_ms() - cpu0) / (t0.elapsed().as_secs_f64() * 1e3);
    split_kernels::set_max_threads(0);

    let mut op_rows = Vec::new();
    if ops {
        split_kernels::set_max_threads(1);
        let burn = crate::ops_profile::burn_ops(repeats);
        split_kernels::set_max_threads(0);
        let ort = |t: &str| report["ops"][t]["ms"].as_object().cloned().unwrap_or_default();
        let (o1, o2) = (ort("1"), ort("2"));
        let mut names: Vec<String> = burn.keys().cloned().collect();
        names.extend(o1.keys().chain(o2.keys()).filter(|k| !burn.contains_key(*k)).cloned());
        names.dedup();
        for name in names {
            let get = |m: &serde_json::Map<String, serde_json::Value>| {
                m.get(&name).and_then(serde_json::Value::as_f64).unwrap_or(0.0)
            };
            op_rows.push((
                name.clone(),
                burn.get(&name).copied().unwrap_or(0.0),
                get(&o1),
                get(&o2),
            ));
        }
    }
    Ok(OnnxReport {
        onnxruntime: report["onnxruntime"].as_str().unwrap_or("?").to_string(),
        max_abs_logit_diff: max_diff,
        parts,
        burn_cpu_per_wall,
        ops: op_rows,
        model: out.join("efficientnet-lite0.onnx"),
        batch,
        rounds: ROUNDS,
        settle_ms: SETTLE.as_millis() as u64,
    })
}

/// ONNX export of the model, ONNX Runtime (CPU) against burn flex.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Timed runs of each engine per part and thread count, taken in six stretches in turn
    /// with the other engine's, each after a 100 ms pause (the median of them all is reported).
    #[arg(long, default_value_t = 30)]
    repeats: usize,
    /// Also time every operation alone, burn and ORT side by side.
    #[arg(long)]
    ops: bool,
    /// Images a timed run, on both engines (the server batches up to 4 under load); the
    /// tables give ms per image.
    #[arg(long, default_value_t = 1)]
    batch: usize,
}

/// Print the comparison as markdown.
pub fn run(a: Args) -> Result<()> {
    let r = measure(a.repeats, a.ops, a.batch)?;
    println!(
        "ONNX export: {} (onnxruntime {}), max |logit - golden| {:.2e}; burn CPU/wall {:.2}; {} image(s) a run, ms per image",
        r.model.display(),
        r.onnxruntime,
        r.max_abs_logit_diff,
        r.burn_cpu_per_wall,
        r.batch
    );
    println!("{}", tables(&r));
    Ok(())
}

/// The ONNX Runtime tables (also printed by `./run.sh onnx`).
pub fn tables(r: &OnnxReport) -> String {
    let mut out = String::new();
    out.push_str("| part | burn flex 1 thread ms | burn flex 2 threads ms | ORT CPU 1 thread ms | ORT CPU 2 threads ms | burn / ORT (1 thread) | burn / ORT (2 threads) |\n|---|---|---|---|---|---|---|\n");
    for p in &r.parts {
        let _ = writeln!(
            out,
            "| {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} |",
            p.part,
            p.burn_ms,
            p.burn_2_ms,
            p.ort_1_ms,
            p.ort_2_ms,
            p.burn_ms / p.ort_1_ms,
            p.burn_2_ms / p.ort_2_ms
        );
    }
    if !r.ops.is_empty() {
        out.push_str("\nPer operation, ms per image (burn: each op timed alone with the model's shapes, 1 thread; ORT: its profiler's kernel times, whole-network runs):\n\n");
        out.push_str("| operation | burn flex ms | ORT 1 thread ms | ORT 2 threads ms | burn / ORT (1 thread) | share of burn's time |\n|---|---|---|---|---|---|\n");
        let total: f64 = r.ops.iter().map(|o| o.1).sum();
        let mut ops = r.ops.clone();
        ops.sort_by(|a, b| b.1.total_cmp(&a.1));
        for (name, burn, o1, o2) in &ops {
            let ratio = match (*burn > 0.0, *o1 > 0.0) {
                (true, true) => format!("{:.1}", burn / o1),
                (false, _) => "fused in the conv (burn)".into(),
                (true, false) => "fused (ORT)".into(),
            };
            let _ = writeln!(
                out,
                "| {name} | {burn:.2} | {o1:.2} | {o2:.2} | {ratio} | {:.0}% |",
                burn / total * 100.0
            );
        }
        let (o1, o2): (f64, f64) =
            (r.ops.iter().map(|o| o.2).sum(), r.ops.iter().map(|o| o.3).sum());
        let _ = writeln!(out, "| **sum** | {total:.2} | {o1:.2} | {o2:.2} | {:.1} | |", total / o1);
        if let Some(full) = r.parts.iter().find(|p| p.part == "full") {
            let _ = writeln!(
                out,
                "\nburn's whole network in one forward (1 thread): {:.2} ms, {:.0}% of the sum of \
                 its ops. Timed alone, an op finds its weights and input in cache; in the network \
                 the 18.5 MB of weights and the larger activations come from memory (a `perf` \
                 profile of repeated forwards, `cargo run -p split-shared --example forward_loop`, \
                 puts 94% of the time in the three kernels: 1x1 71%, depthwise 19%, stem 5%).",
                full.burn_ms,
                full.burn_ms / total * 100.0
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in for `export_onnx.py --serve` speaking the same lines: its report, then for
    /// `NAME THREADS REPEATS` as many times (one fewer when the name is `short`).
    fn script(body: &str) -> Command {
        let mut cmd = Command::new("python3");
        cmd.args(["-c", body]);
        cmd
    }

    const SERVE: &str = r#"
import json, sys
print(json.dumps({"onnxruntime": "test"}), flush=True)
for line in sys.stdin:
    name, threads, repeats = line.split()
    n = int(repeats) - (name == "short")
    print(json.dumps([float(threads)] * n), flush=True)
"#;

    #[test]
    fn the_timer_reads_the_report_then_answers_each_request_in_turn() {
        let mut t = OrtTimer::start(&mut script(SERVE)).unwrap();
        assert_eq!(t.report["onnxruntime"], "test");
        assert_eq!(t.times("full", 2, 3).unwrap(), vec![2.0; 3]);
        assert_eq!(t.times("block5", 1, 4).unwrap(), vec![1.0; 4]);
        let err = t.times("short", 1, 4).unwrap_err().to_string();
        assert!(err.contains("timed 3 runs, not 4"), "{err}");
        t.finish().unwrap();
    }

    #[test]
    fn a_script_that_fails_before_its_report_is_an_error() {
        let err = OrtTimer::start(&mut script("import sys; sys.exit(3)")).err().unwrap();
        assert!(err.to_string().contains("export_onnx.py failed"), "{err}");
    }

    /// A report says how its runs were taken: reports from before the turns (no `rounds`) and
    /// before the pause (no `settle_ms`) read as they were timed, not as the code times now.
    #[test]
    fn a_report_says_how_it_was_timed_older_ones_included() {
        let report = |extra: &str| -> OnnxReport {
            serde_json::from_str(&format!(
                r#"{{"onnxruntime": "1.32.0", "max_abs_logit_diff": 4e-6, "parts": [],
                    "burn_cpu_per_wall": 1.9, "ops": [], "model": "m.onnx"{extra}}}"#
            ))
            .expect("a report")
        };
        assert_eq!(report("").how_timed(), " (one engine's, then the other's)");
        let turns = report(r#", "rounds": 6"#).how_timed();
        assert!(turns.contains("taken in 6 stretches in turn"), "{turns}");
        assert!(!turns.contains("pause"), "{turns}");
        let paused = report(r#", "rounds": 6, "settle_ms": 100"#).how_timed();
        assert!(paused.contains("taken in 6 stretches in turn"), "{paused}");
        assert!(
            paused.ends_with(
                "each after a 100 ms pause (ONNX Runtime's threads spin on after a run)"
            ),
            "{paused}"
        );
    }
}
