//! `./run.sh lab [--quick] [--out DIR] [--repeats N] [--requests N]`: the performance lab in
//! one command. It starts the server (cache off, so every request computes) and runs:
//!
//! 1. the cloud tier's throughput with 1, 8 and 64 native clients per workload (`loadgen`), with
//!    the server's CPU time per request;
//! 2. each link profile through the userspace emulator and, where this process may create network
//!    namespaces, through kernel rate limits (`tc tbf`) with the emulator adding only the delay:
//!    the two emulations checked against each other;
//! 3. the browser lab (`web/tests/lab.mjs`): the real page in headless Chromium, CPU throttled,
//!    every mode on every link profile, repeated, then the time-varying traces, then the edge's
//!    CPU time per mode;
//! 4. (full mode) ONNX Runtime CPU against burn `flex` with a per-op profile of both, ONNX Runtime
//!    Web against burn's wasm in the same Chromium, and the demo page's cold start;
//!
//! and writes `README.md` (tables), SVG charts and `data.json` (every figure) to the output folder
//! (default `reports/lab`); `--from-data F` only rewrites the report from a run's `data.json`.
//! `--trace-repeats N` runs each trace N times (one run is one draw of where its stalls meet the
//! requests); `--traces-only` runs the browser over the traces alone (`reports/lab-traces`).
//! `--quick` is one profile, one short trace and a few requests: the test
//! suite runs it so the harness cannot rot, and checks what it measured (no timing asserted).

pub mod crowd;
pub mod netns;
pub mod progressive;
pub mod report;
pub mod start;
pub mod stats;

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::LoadRun;
use crate::netem::PROFILES;
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::onnx;
use xtask::cmd::target_dir;
use xtask::paths;
use xtask::server::{Server, start_server};

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// One profile, one short trace, few requests, no ONNX Runtime.
    pub quick: bool,
    /// Where the report goes.
    pub out: PathBuf,
    /// Repeats of every measurement (figures are medians over them).
    pub repeats: usize,
    /// Requests per mode and repeat in the browser, per client in loadgen.
    pub requests: usize,
    /// Runs of each trace and mode in the browser.
    pub trace_repeats: usize,
    /// Only the browser over the traces (and the edge's CPU cost): no load tests, constant
    /// links or baselines.
    pub traces_only: bool,
    /// The modes run over the traces; `None`: the browser lab's own list.
    pub trace_modes: Option<String>,
    /// The traces; `None`: the browser lab's own list.
    pub traces: Option<String>,
}

impl Options {
    /// The quick mode the test suite runs.
    pub fn quick(out: PathBuf) -> Self {
        Self {
            quick: true,
            out,
            repeats: 1,
            requests: 2,
            trace_repeats: 1,
            traces_only: false,
            trace_modes: None,
            traces: None,
        }
    }
}

/// The machine the figures come from.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Machine {
    /// CPU model.
    pub cpu: String,
    /// Logical cores.
    pub cores: usize,
    /// Memory, GiB.
    pub memory_gib: f64,
    /// Kernel release.
    pub kernel: String,
    /// `rustc -V`.
    pub rustc: String,
    /// `node -v`.
    pub node: String,
    /// The browser's user agent.
    pub browser: String,
    /// Commit of the checkout (with `-dirty` when it has changes).
    pub commit: String,
}

/// One loadgen measurement.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LoadRow {
    /// Workload (`jpeg224`, `features:block5:q6`, ...).
    pub workload: String,
    /// Link (`None`: loopback), with `kernel:` for tc-shaped runs.
    pub link: Option<String>,
    /// Concurrent clients.
    pub clients: usize,
    /// Bytes per request.
    pub bytes: u64,
    /// Medians over repeats: req/s, P50, P95, P99 ms, server CPU ms per request.
    #[serde(deserialize_with = "crate::measure::null_as_nan")]
    pub rps: f64,
    /// P50 ms.
    #[serde(deserialize_with = "crate::measure::null_as_nan")]
    pub p50_ms: f64,
    /// P95 ms.
    #[serde(deserialize_with = "crate::measure::null_as_nan")]
    pub p95_ms: f64,
    /// P99 ms.
    #[serde(deserialize_with = "crate::measure::null_as_nan")]
    pub p99_ms: f64,
    /// Server CPU (user + system) per answered request, ms.
    #[serde(deserialize_with = "crate::measure::null_as_nan")]
    pub server_cpu_ms: f64,
    /// Answers and errors, all repeats.
    pub ok: u64,
    /// Error replies, timeouts, dropped connections.
    pub errors: u64,
    /// Top-1 classes seen.
    pub top1: Vec<u64>,
}

/// Everything the lab measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results {
    /// The command that produced it.
    pub command: String,
    /// UTC time at the start.
    pub date: String,
    /// Quick mode.
    pub quick: bool,
    /// Repeats.
    pub repeats: usize,
    /// Machine.
    pub machine: Machine,
    /// Cloud-tier throughput.
    pub throughput: Vec<LoadRow>,
    /// One client through each link: userspace emulator and kernel tbf.
    pub links: Vec<LoadRow>,
    /// Why the kernel-shaped runs are missing, if they are.
    pub kernel_unavailable: Option<String>,
    /// The browser lab's raw samples.
    pub browser: stats::BrowserLab,
    /// ONNX Runtime CPU against burn (full mode).
    pub onnx: Option<onnx::OnnxReport>,
    /// ONNX Runtime Web against burn wasm (full mode).
    pub ort_web: Option<serde_json::Value>,
    /// Cold start of the demo page (full mode).
    pub cold_start: Option<serde_json::Value>,
}

pub(crate) fn output(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

pub(crate) fn machine(browser: &str) -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let field = |text: &str, key: &str| {
        text.lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split(':').nth(1))
            .map(|v| v.trim().to_string())
            .unwrap_or_default()
    };
    let kb: f64 = field(&meminfo, "MemTotal").trim_end_matches(" kB").parse().unwrap_or(0.0);
    Machine {
        cpu: field(&cpuinfo, "model name"),
        cores: std::thread::available_parallelism().map_or(0, usize::from),
        memory_gib: kb / 1024.0 / 1024.0,
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .into(),
        rustc: output("rustc", &["-V"]),
        node: output("node", &["-v"]),
        browser: browser.to_string(),
        commit: checkout_commit(),
    }
}

/// The checkout's commit, `-dirty` when a tracked file differs from it (the lab's own new
/// report folder does not count).
pub(crate) fn checkout_commit() -> String {
    let root = paths::repo_root();
    let root = root.to_string_lossy();
    let status = output("git", &["-C", &root, "status", "--porcelain", "--untracked-files=no"]);
    let head = output("git", &["-C", &root, "rev-parse", "--short", "HEAD"]);
    format!("{head}{}", if status.is_empty() { "" } else { "-dirty" })
}

/// One loadgen measurement to make.
struct Job<'a> {
    workload: &'a str,
    clients: &'a [usize],
    /// Emulated link (`loadgen --link`).
    link: Option<&'a str>,
    /// How the report names the link.
    label: Option<String>,
    /// Server process, for its CPU time.
    server_pid: Option<u32>,
}

/// Run `loadgen --json` once per repeat and fold the runs into medians per client count.
fn loadgen(
    runner: &dyn Fn() -> Command,
    url: &str,
    job: Job<'_>,
    opts: &Options,
) -> Result<Vec<LoadRow>> {
    let Job { workload, clients, link, label, server_pid } = job;
    let mut by_clients: Vec<Vec<LoadRun>> = vec![Vec::new(); clients.len()];
    for _ in 0..opts.repeats {
        let mut cmd = runner();
        // The photo from this checkout: loadgen's default is its build's (the target dir is shared).
        let image = paths::repo_root().join("web/samples/chelsea.png");
        cmd.args(["--url", url, "--workload", workload, "--json"])
            .arg("--image")
            .arg(image)
            .args(["--requests", &opts.requests.max(2).to_string()])
            .args([
                "--clients",
                &clients.iter().map(ToString::to_string).collect::<Vec<_>>().join(","),
            ]);
        if let Some(link) = link {
            cmd.args(["--link", link]);
        }
        if let Some(pid) = server_pid {
            cmd.args(["--server-pid", &pid.to_string()]);
        }
        let out = cmd.output().context("running loadgen")?;
        if !out.status.success() {
            bail!("loadgen {workload} failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        for (i, line) in String::from_utf8_lossy(&out.stdout).lines().enumerate() {
            by_clients.get_mut(i).context("loadgen printed more runs than asked")?.push(
                serde_json::from_str(line).with_context(|| format!("loadgen output {line:?}"))?,
            );
        }
    }
    let rows = clients
        .iter()
        .zip(by_clients)
        .map(|(&c, runs)| {
            let med = |f: &dyn Fn(&LoadRun) -> f64| {
                stats::median(&runs.iter().map(f).collect::<Vec<_>>())
            };
            LoadRow {
                workload: workload.into(),
                link: label.clone(),
                clients: c,
                bytes: runs.first().map_or(0, |r| r.bytes as u64),
                rps: med(&|r| r.report.rps),
                p50_ms: med(&|r| r.report.p50_ms),
                p95_ms: med(&|r| r.report.p95_ms),
                p99_ms: med(&|r| r.report.p99_ms),
                server_cpu_ms: med(&|r| r.server_cpu_ms_per_request.unwrap_or(f64::NAN)),
                ok: runs.iter().map(|r| r.report.ok as u64).sum(),
                errors: runs.iter().map(|r| r.report.errors as u64).sum(),
                top1: runs
                    .iter()
                    .flat_map(|r| r.report.top1.iter().map(|&c| u64::from(c)))
                    .collect(),
            }
        })
        .collect();
    Ok(rows)
}

fn ws_url(server: &Server) -> String {
    format!("{}ws", server.url.replacen("http://", "ws://", 1))
}

pub(crate) fn server_args(extra: &[&str]) -> Vec<String> {
    // The page's WebSocket goes through the link emulator, another port than the page's origin:
    // the lab's own pages are allowed explicitly.
    // The load tests open up to 64 connections from loopback, more than one address may by
    // default, and send more requests per second than one address may.
    let mut args: Vec<String> = vec![
        "--allow-origin".into(),
        "*".into(),
        "--max-connections-per-ip".into(),
        "1024".into(),
        // Every load client comes from loopback: one address, far over a person's rate.
        "--rate-limit".into(),
        "0".into(),
        "--cache-entries".into(),
        "0".into(),
        "--weights".into(),
        split_paths::weights_file().display().to_string(),
        "--calibration".into(),
        split_paths::calibration_file().display().to_string(),
    ];
    args.extend(extra.iter().map(ToString::to_string));
    args
}

/// Links through kernel shaping: a second server on the veth's host end, loadgen in the namespace.
fn kernel_links(opts: &Options, workloads: &[&str]) -> Result<Vec<LoadRow>> {
    let ns = netns::Netns::create()?;
    // The namespace's address is this machine's own (a veth pair): clear text never leaves it.
    let server = start_server(&server_args(&["--host", &ns.host_ip, "--allow-plaintext"]))?;
    let url = ws_url(&server);
    let bin = target_dir().join("debug/loadgen");
    let mut rows = Vec::new();
    for link in profiles(opts) {
        ns.shape(&link)?;
        for w in workloads {
            let delay = format!("rtt:{}", link.rtt_ms);
            let job = Job {
                workload: w,
                clients: &[1],
                link: Some(&delay),
                label: Some(format!("kernel:{}", link.name)),
                server_pid: None,
            };
            rows.extend(loadgen(&|| ns.command(&bin), &url, job, opts)?);
        }
    }
    Ok(rows)
}

fn profiles(opts: &Options) -> Vec<crate::netem::LinkProfile> {
    if opts.quick { vec![PROFILES[1]] } else { PROFILES.to_vec() }
}

fn node(script: &str, server: &Server, envs: &[(&str, String)]) -> Result<()> {
    let web = paths::repo_root().join("web");
    let status = Command::new("node")
        .arg(script)
        .current_dir(&web)
        .env("SPLIT_URL", &server.url)
        .env("CARGO_TARGET_DIR", target_dir())
        .envs(envs.iter().map(|(k, v)| (*k, v.as_str())))
        .status()
        .with_context(|| format!("running node {script}"))?;
    if !status.success() {
        bail!("node {script} failed: {status}");
    }
    Ok(())
}

pub(crate) fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    serde_json::from_slice(
        &std::fs::read(path).with_context(|| format!("reading {}", path.display()))?,
    )
    .with_context(|| format!("parsing {}", path.display()))
}

/// Run the lab with everything built; returns what it measured (also written to `opts.out`).
///
/// # Errors
/// A failing step (server, loadgen, browser) stops the lab with its message.
pub fn lab(opts: &Options, command: &str) -> Result<Results> {
    std::fs::create_dir_all(&opts.out)?;
    // Read before the run: the checkout the run was built from.
    let (date, commit) = (output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]), checkout_commit());
    let server = start_server(&server_args(&[]))?;
    let url = ws_url(&server);
    let pid = server.pid();
    let loadgen_bin = target_dir().join("debug/loadgen");
    let local = || Command::new(&loadgen_bin);

    let (workloads, clients): (&[&str], &[usize]) = if opts.traces_only {
        (&[], &[])
    } else if opts.quick {
        (&["jpeg224", "features:block11:q6"], &[1, 8])
    } else {
        (&["jpeg224", "features:block5:q6", "features:block11:q6"], &[1, 8, 64])
    };
    let mut throughput = Vec::new();
    if !workloads.is_empty() {
        eprintln!("lab: cloud tier throughput");
    }
    for w in workloads {
        let job = Job { workload: w, clients, link: None, label: None, server_pid: Some(pid) };
        throughput.extend(loadgen(&local, &url, job, opts)?);
    }

    let mut links = Vec::new();
    if !workloads.is_empty() {
        eprintln!("lab: links, userspace emulator");
    }
    for link in if opts.traces_only { Vec::new() } else { profiles(opts) } {
        for w in workloads {
            let job = Job {
                workload: w,
                clients: &[1],
                link: Some(link.name),
                label: Some(link.name.to_string()),
                server_pid: None,
            };
            links.extend(loadgen(&local, &url, job, opts)?);
        }
    }
    let kernel_unavailable = if opts.traces_only {
        None
    } else {
        eprintln!("lab: links, kernel tbf in a network namespace");
        match kernel_links(opts, workloads) {
            Ok(rows) => {
                links.extend(rows);
                None
            }
            Err(e) => {
                eprintln!("lab: kernel shaping unavailable: {e:#}");
                Some(format!("{e:#}"))
            }
        }
    };

    eprintln!("lab: browser");
    let raw = opts.out.join("browser-samples.json");
    let mut env = vec![
        ("OUT", raw.display().to_string()),
        ("REPEATS", opts.repeats.to_string()),
        ("REQUESTS", opts.requests.to_string()),
        ("NETEM_BIN", target_dir().join("debug/netem").display().to_string()),
    ];
    if opts.quick {
        env.extend([
            ("LINKS", "4g".into()),
            ("MODES", "edge,cloud,block11,auto".into()),
            ("TRACES", "outage".into()),
            ("TRACE_MODES", "cloud,auto".into()),
            ("TRACE_SCALE", "0.2".into()),
        ]);
    }
    // After the quick mode's list: what is asked for wins (the child sees the last of a name).
    env.push(("TRACE_REPEATS", opts.trace_repeats.to_string()));
    if opts.traces_only {
        env.push(("LINKS", String::new()));
    }
    if let Some(modes) = &opts.trace_modes {
        env.push(("TRACE_MODES", modes.clone()));
    }
    if let Some(traces) = &opts.traces {
        env.push(("TRACES", traces.clone()));
    }
    node("tests/lab.mjs", &server, &env)?;
    let browser: stats::BrowserLab = read_json(&raw)?;
    std::fs::remove_file(&raw)?; // every sample goes into data.json

    let (mut onnx_report, mut ort_web, mut cold_start) = (None, None, None);
    if !opts.quick && !opts.traces_only {
        eprintln!("lab: ONNX Runtime CPU against burn flex, per-op profiles");
        let r = onnx::measure(30, true, 1)?;
        std::fs::copy(&r.model, paths::repo_root().join("web/pkg/efficientnet-lite0.onnx"))?;
        onnx_report = Some(r);
        eprintln!("lab: ONNX Runtime Web against burn wasm");
        let web = paths::repo_root().join("web");
        if !web.join("node_modules/onnxruntime-web").exists() {
            let status = Command::new("npm")
                .args(["install", "--no-save", "--no-audit", "--no-fund", "onnxruntime-web@1.30.0"])
                .current_dir(&web)
                .status()?;
            anyhow::ensure!(status.success(), "npm install onnxruntime-web failed");
        }
        let out = std::env::temp_dir().join("splitinfer-ort-web.json");
        node("tests/ort-bench.mjs", &server, &[("JSON_OUT", out.display().to_string())])?;
        ort_web = Some(read_json(&out)?);
        eprintln!("lab: cold start");
        let out = std::env::temp_dir().join("splitinfer-coldstart.json");
        node("tests/coldstart.mjs", &server, &[("JSON_OUT", out.display().to_string())])?;
        cold_start = Some(read_json(&out)?);
    }
    drop(server);

    let results = Results {
        command: command.into(),
        date,
        quick: opts.quick,
        repeats: opts.repeats,
        machine: Machine { commit, ..machine(browser.chromium.as_deref().unwrap_or("?")) },
        throughput,
        links,
        kernel_unavailable,
        browser,
        onnx: onnx_report,
        ort_web,
        cold_start,
    };
    report::write(&results, &opts.out)?;
    Ok(results)
}

/// What the quick run must show, whatever the timings: every request answered with the right
/// class, every mode measured, the adaptive client running locally while the link is down, and
/// the report written.
///
/// # Errors
/// Naming the first check that fails.
pub fn check(results: &Results, out: &Path) -> Result<()> {
    let cat = |c: u64| (281..=285).contains(&c);
    for row in results.throughput.iter().chain(&results.links) {
        anyhow::ensure!(row.ok > 0 && row.errors == 0, "loadgen {row:?}");
        anyhow::ensure!(row.top1.iter().copied().all(cat), "wrong class under load: {row:?}");
    }
    if results.kernel_unavailable.is_none() {
        anyhow::ensure!(
            results
                .links
                .iter()
                .any(|r| r.link.as_deref().is_some_and(|l| l.starts_with("kernel:"))),
            "no kernel-shaped rows"
        );
    }
    for link in &results.browser.links {
        for run in &link.runs {
            anyhow::ensure!(!run.samples.is_empty(), "{} {}: no samples", link.link, run.mode);
            anyhow::ensure!(
                run.samples.iter().all(|s| cat(u64::from(s.top1))),
                "{} {}: wrong class",
                link.link,
                run.mode
            );
        }
    }
    for link in results.browser.links.iter().filter(|l| l.kind == "profile") {
        anyhow::ensure!(
            link.interleaved.as_deref() == Some("requests") && stats::modes_took_turns(link),
            "{}: the modes did not take turns request by request",
            link.link
        );
    }
    let outage =
        results.browser.links.iter().find(|l| l.link == "outage").context("no outage trace")?;
    let auto =
        outage.runs.iter().find(|r| r.mode == "auto").context("no auto run on the outage")?;
    anyhow::ensure!(
        auto.samples
            .iter()
            .any(|s| matches!(s.placement.as_deref(), Some("fallback_edge" | "edge_only"))),
        "auto never ran locally during the outage: {:?}",
        auto.samples.iter().map(|s| &s.placement).collect::<Vec<_>>()
    );
    for f in ["README.md", "data.json"] {
        anyhow::ensure!(out.join(f).exists(), "{f} not written");
    }
    let svgs = std::fs::read_dir(out)?
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "svg"))
        .count();
    anyhow::ensure!(svgs >= 4, "{svgs} charts written");
    Ok(())
}

/// Everything the lab runs: weights, calibration, the wasm module, the workspace's binaries
/// (built as `cargo test` builds them, so the two share compiled units), Chromium and playwright.
fn prepare_binaries() -> Result<()> {
    xtask::setup::ensure_weights()?;
    xtask::setup::ensure_calibration()?;
    xtask::wasm_build::build()?;
    xtask::cmd::build_workspace()?;
    xtask::browser::ensure_browser_tools(&paths::repo_root().join("web"))
}

/// The performance lab: throughput, links, browser and baselines, and its report.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A few minutes instead of half an hour: fewer repeats, requests and links (checks the
    /// harness, not the figures); writes to a temporary folder unless `--out` is given.
    #[arg(long)]
    quick: bool,
    /// Report folder; default `reports/lab`.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Repeats of each measurement.
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Requests per client in the load tests.
    #[arg(long, default_value_t = 10)]
    requests: usize,
    /// Runs of each time-varying trace and mode in the browser (a run is one draw of where the
    /// trace's stalls meet the requests; each is rated against its own oracle).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=20))]
    trace_repeats: u16,
    /// Only the browser over the traces (and the edge's CPU cost): no load tests, constant
    /// links or baselines; report in `reports/lab-traces` unless `--out` is given.
    #[arg(long, conflicts_with_all = ["quick", "from_data"])]
    traces_only: bool,
    /// The modes run over the traces (edge, cloud, auto, a boundary such as block5); default:
    /// edge, cloud, block5, block11 and auto. The oracle chooses among the fixed ones.
    #[arg(long, value_delimiter = ',')]
    trace_modes: Vec<String>,
    /// The traces run in the browser (names as `netem` knows them); default: the lab's five.
    #[arg(long, value_delimiter = ',', conflicts_with = "quick")]
    traces: Vec<String>,
    /// Only rewrite the report (tables and charts) from a run's `data.json`.
    #[arg(long)]
    from_data: Option<PathBuf>,
    /// The multi-client lab instead: this many native browser-like clients at once (with
    /// `--pages` real Chromium pages), every mode, against one server and against three
    /// replicas behind HAProxy; report in `reports/lab-clients/<N>-clients` unless `--out` is
    /// given.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=256))]
    clients: Option<u16>,
    /// Chromium pages (4x CPU throttle, real wasm compute) joining the native clients
    /// (`--clients`). Chromium throttles by keeping a core busy (about 950 ms of CPU a second per
    /// page, idle): on a machine that also runs the server, each page takes a core from it.
    #[arg(long, default_value_t = 0, requires = "clients")]
    pages: usize,
    /// Seconds per mode in the multi-client lab, the first third left out as settling.
    #[arg(long, default_value_t = 45.0, requires = "clients")]
    duration_s: f64,
    /// Modes of the multi-client lab: edge, cloud, auto, <boundary>:<codec>.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "edge,cloud,block5:q6,block11:q6,auto",
        requires = "clients"
    )]
    modes: Vec<String>,
    /// Server setups of the multi-client lab: replicas behind HAProxy (1: the server alone).
    #[arg(long, value_delimiter = ',', default_value = "1,3", requires = "clients")]
    replicas: Vec<usize>,
    /// The start-up lab instead: bytes and seconds to ready and to the first answer of the
    /// demo page per placement (cloud only, block5, block11, edge only), cold and warm, on
    /// loopback and over `--start-links`; report in `reports/lab-start` unless `--out` is given.
    /// Needs root (a network namespace).
    #[arg(long, conflicts_with = "clients")]
    start: bool,
    /// Links of the start-up lab (link profiles; loopback is always measured).
    #[arg(long, value_delimiter = ',', default_value = "4g,3g", requires = "start")]
    start_links: Vec<String>,
    /// The progressive lab instead: time to the light model's answer and to the server's, per
    /// link, over the photos of `--images`; report in `reports/lab-progressive` unless `--out`
    /// is given. Needs root (a network namespace).
    #[arg(long, conflicts_with_all = ["clients", "start"], requires = "images")]
    progressive: bool,
    /// Photos for the progressive lab (e.g. ../shared/data/imagenet-dev).
    #[arg(long, requires = "progressive")]
    images: Option<PathBuf>,
    /// Photos per link in the progressive lab.
    #[arg(long, default_value_t = 100, requires = "progressive")]
    limit: usize,
    /// Links of the progressive lab (link profiles; loopback is always measured).
    #[arg(long, value_delimiter = ',', default_value = "4g,3g", requires = "progressive")]
    progressive_links: Vec<String>,
    /// Run on what is already built, without the builds' own checks (the four browser modules
    /// relinked in turn, the workspace's test build): the test command passes it after making
    /// everything itself (23 s of each quick run in reports/cold-test/timeline-e6ecad3.txt).
    #[arg(long, hide = true)]
    prebuilt: bool,
}

/// `--trace-modes`: names the browser lab knows, at least one fixed mode for the oracle.
fn check_trace_modes(modes: &[String]) -> Result<()> {
    if modes.is_empty() {
        return Ok(());
    }
    let known = |m: &str| {
        matches!(m, "edge" | "cloud" | "auto")
            || m.strip_prefix("block").is_some_and(|n| n.parse::<u8>().is_ok())
    };
    if let Some(bad) = modes.iter().find(|m| !known(m)) {
        bail!(
            "--trace-modes: unknown mode {bad:?} (edge, cloud, auto or a boundary such as block5)"
        );
    }
    if modes.iter().all(|m| m == "auto") {
        bail!(
            "--trace-modes: the oracle needs a fixed mode (edge, cloud or a boundary) beside auto"
        );
    }
    Ok(())
}

/// `./run.sh lab ...`: build what the lab needs, run it, write the report.
pub fn run(a: Args) -> Result<()> {
    if let (true, Some(images)) = (a.progressive, &a.images) {
        prepare_binaries()?;
        let out = a.out.clone().unwrap_or_else(progressive::default_out);
        let args: Vec<String> = std::env::args().skip(2).collect();
        let command = format!("./run.sh lab {}", args.join(" ")).trim_end().to_string();
        progressive::lab(&a.progressive_links, images, a.limit, &out, &command)?;
        eprintln!("lab: report in {}", out.join("README.md").display());
        return Ok(());
    }
    if a.start {
        prepare_binaries()?;
        let out = a.out.unwrap_or_else(start::default_out);
        let args: Vec<String> = std::env::args().skip(2).collect();
        let command = format!("./run.sh lab {}", args.join(" ")).trim_end().to_string();
        start::lab(&a.start_links, &out, &command)?;
        eprintln!("lab: report in {}", out.join("README.md").display());
        return Ok(());
    }
    if let Some(clients) = a.clients {
        let quick = crowd::CrowdOptions::quick();
        let crowd_opts = crowd::CrowdOptions {
            clients: usize::from(clients),
            pages: a.pages,
            duration_s: if a.quick { quick.duration_s } else { a.duration_s },
            settle_s: if a.quick { quick.settle_s } else { a.duration_s / 3.0 },
            interval_ms: quick.interval_ms,
            modes: a.modes,
            replicas: if a.quick { quick.replicas } else { a.replicas },
        };
        let out = match a.out {
            Some(o) => o,
            None if a.quick => std::env::temp_dir().join("splitinfer-lab-clients-quick"),
            None => crowd::default_out(usize::from(clients)),
        };
        if !a.prebuilt {
            if crowd_opts.pages > 0 {
                xtask::wasm_build::build()?;
                xtask::browser::ensure_browser_tools(&paths::repo_root().join("web"))?;
            }
            xtask::setup::ensure_weights()?;
            xtask::setup::ensure_calibration()?;
            xtask::cmd::build_workspace()?;
        }
        let args: Vec<String> = std::env::args().skip(2).collect();
        let command = format!("./run.sh lab {}", args.join(" ")).trim_end().to_string();
        let results = crowd::lab(&crowd_opts, &out, &command)?;
        if a.quick {
            crowd::check(&results, &out)?;
        }
        eprintln!("lab: report in {}", out.join("README.md").display());
        return Ok(());
    }
    let out_given = a.out.is_some();
    check_trace_modes(&a.trace_modes)?;
    for t in &a.traces {
        if !crate::netem::schedule(t)?.duration_s.is_finite() {
            bail!("--traces: {t:?} is a constant link, not a trace");
        }
    }
    let default_out = if a.traces_only { "reports/lab-traces" } else { "reports/lab" };
    let mut opts = Options {
        quick: a.quick,
        out: a.out.unwrap_or_else(|| paths::repo_root().join(default_out)),
        repeats: a.repeats,
        requests: a.requests,
        trace_repeats: usize::from(a.trace_repeats),
        traces_only: a.traces_only,
        trace_modes: (!a.trace_modes.is_empty()).then(|| a.trace_modes.join(",")),
        traces: (!a.traces.is_empty()).then(|| a.traces.join(",")),
    };
    let from_data = a.from_data;
    if let Some(data) = from_data {
        // Only the report: tables and charts again from a run's data.json.
        let data: serde_json::Value = read_json(&data)?;
        let results: Results = serde_json::from_value(data["results"].clone())
            .context("data.json has no lab results")?;
        report::write(&results, &opts.out)?;
        eprintln!("lab: report rewritten in {}", opts.out.join("README.md").display());
        return Ok(());
    }
    if opts.quick {
        let defaults = Options::quick(opts.out.clone());
        opts.repeats = opts.repeats.min(defaults.repeats);
        opts.requests = opts.requests.min(3);
        if !out_given {
            opts.out = std::env::temp_dir().join("splitinfer-lab-quick");
        }
    }
    if !a.prebuilt {
        prepare_binaries()?;
    }
    let args: Vec<String> = std::env::args().skip(2).collect();
    let command = format!("./run.sh lab {}", args.join(" ")).trim_end().to_string();
    let results = lab(&opts, &command)?;
    if opts.quick {
        check(&results, &opts.out)?;
    }
    eprintln!("lab: report in {}", opts.out.join("README.md").display());
    Ok(())
}
