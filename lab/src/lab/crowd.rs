//! `./run.sh lab --clients N [--pages P]`: many users at once. A crowd of N browser-like native
//! clients (`crowd`, lab/src/crowd.rs: simulated device compute, real frames, each on its own
//! emulated link, [`LINK`]) plus P real pages in headless Chromium with 4x CPU throttling
//! (`web/tests/crowd-pages.mjs`), every mode in turn, first against one server, then against
//! three replicas behind HAProxy; the report sets the design table's rows beside the figures.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::crowd::CrowdReport;
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use super::{Machine, machine, output, read_json, server_args};
use xtask::cmd::target_dir;
use xtask::server::start_server;
use xtask::{cluster, paths};

/// What the multi-client lab runs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CrowdOptions {
    /// Native clients.
    pub clients: usize,
    /// Chromium pages besides them.
    pub pages: usize,
    /// Seconds per mode, settling included.
    pub duration_s: f64,
    /// Seconds at the start of each mode left out of the figures.
    pub settle_s: f64,
    /// Each client wants an answer this often, ms.
    pub interval_ms: f64,
    /// Modes, in order.
    pub modes: Vec<String>,
    /// Server setups: replicas behind the balancer (1: the server alone).
    pub replicas: Vec<usize>,
}

/// The modes every run compares.
pub const MODES: [&str; 5] = ["edge", "cloud", "block5:q6", "block11:q6", "auto"];

impl CrowdOptions {
    /// The quick run the test suite makes: a few clients and one page for a few seconds per
    /// mode, against one server and two replicas (checks behaviour, not speed). 5 s a mode,
    /// the first 1.5 left out: the page still makes a dozen requests in each (8 and 2 took
    /// 113 s of a new machine's test run, reports/cold-test/timeline-1e59f41.txt).
    pub fn quick() -> Self {
        Self {
            clients: 4,
            pages: 1,
            duration_s: 5.0,
            settle_s: 1.5,
            interval_ms: 250.0,
            modes: MODES.iter().map(ToString::to_string).collect(),
            replicas: vec![1, 2],
        }
    }
}

/// The pages' figures for one mode.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PagesRow {
    /// Answers in the window, all pages.
    pub requests: usize,
    /// Requests that failed.
    pub errors: usize,
    /// Answered locally after the server did not answer in time.
    pub fallbacks: usize,
    /// Latency percentiles, ms.
    #[serde(deserialize_with = "crate::measure::null_as_nan")]
    pub p50_ms: f64,
    /// 95th percentile, ms.
    #[serde(deserialize_with = "crate::measure::null_as_nan")]
    pub p95_ms: f64,
    /// Top-1 classes of the answers.
    pub top1: Vec<u64>,
}

/// One mode on one setup.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CrowdRow {
    /// Replicas behind the balancer (1: the server alone, no balancer).
    pub replicas: usize,
    /// The native crowd.
    pub native: CrowdReport,
    /// Server CPU per request it answered, ms, all replicas.
    pub server_cpu_ms_per_request: Option<f64>,
    /// The Chromium pages, when there were any.
    pub pages: Option<PagesRow>,
}

/// Everything the multi-client lab measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CrowdResults {
    /// The command that produced it.
    pub command: String,
    /// UTC time at the start.
    pub date: String,
    /// The machine.
    pub machine: Machine,
    /// What ran.
    pub options: CrowdOptions,
    /// One row per setup and mode.
    pub rows: Vec<CrowdRow>,
    /// The pages' raw samples per setup (`crowd-pages.mjs` output).
    pub pages_raw: Vec<serde_json::Value>,
}

/// The crowd's devices: this much slower than the profiled Chromium, spread evenly (phones to
/// laptops; the pages' 4x throttle sits in the middle).
pub const EDGE_FACTORS: (f64, f64) = (2.0, 6.0);

/// Every client's link, the crowd's and the pages' alike (a `lab/src/netem.rs` profile).
pub const LINK: &str = "4g";

fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// The pages' rows per mode from `crowd-pages.mjs` output, over the window after settling.
fn pages_rows(raw: &serde_json::Value, settle_ms: f64) -> Vec<(String, PagesRow)> {
    let mut out = Vec::new();
    for m in raw["modes"].as_array().into_iter().flatten() {
        let mode = m["mode"].as_str().unwrap_or("?").to_string();
        let mut row = PagesRow::default();
        let mut latencies = Vec::new();
        for page in m["pages"].as_array().into_iter().flatten() {
            for s in page.as_array().into_iter().flatten() {
                if s["t"].as_f64().unwrap_or(0.0) < settle_ms {
                    continue;
                }
                if s.get("error").is_some() {
                    row.errors += 1;
                    continue;
                }
                row.requests += 1;
                row.fallbacks += usize::from(s["placement"] == "fallback_edge");
                latencies.push(s["total"].as_f64().unwrap_or(f64::NAN));
                row.top1.push(s["top1"].as_u64().unwrap_or(0));
            }
        }
        latencies.sort_by(f64::total_cmp);
        row.p50_ms = crate::quantile(&latencies, 0.5);
        row.p95_ms = crate::quantile(&latencies, 0.95);
        out.push((mode, row));
    }
    out
}

/// One setup: the crowd and the pages on the same schedule against `url`.
fn run_setup(
    opts: &CrowdOptions,
    replicas: usize,
    url: &str,
    pids: &[u32],
) -> Result<(Vec<CrowdRow>, serde_json::Value)> {
    let ws = format!("{}ws", url.replacen("http://", "ws://", 1));
    let raw_path = std::env::temp_dir().join(format!("splitinfer-crowd-pages-{replicas}.json"));
    let _ = std::fs::remove_file(&raw_path);
    // The pages load the module and weights with a 4x slower CPU first; once they say "ready"
    // they and the crowd get the same start time.
    let mut pages = if opts.pages > 0 {
        let web = paths::repo_root().join("web");
        let mut child = Command::new("node")
            .arg("tests/crowd-pages.mjs")
            .current_dir(&web)
            .env("SPLIT_URL", url)
            .env("CARGO_TARGET_DIR", target_dir())
            .env("OUT", &raw_path)
            .env("PAGES", opts.pages.to_string())
            .env("MODES", opts.modes.join(","))
            .env("DURATION", opts.duration_s.to_string())
            .env("INTERVAL", opts.interval_ms.to_string())
            .env("LINK", LINK)
            .env("NETEM_BIN", target_dir().join("debug/netem"))
            .env_remove("START_AT")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("starting node tests/crowd-pages.mjs")?;
        let stdout = child.stdout.take().context("pages stdout")?;
        let ready = BufReader::new(stdout).lines().map_while(Result::ok).any(|l| l == "ready");
        if !ready {
            let _ = child.kill();
            bail!("tests/crowd-pages.mjs ended before its pages were ready (its log is above)");
        }
        Some(child)
    } else {
        None
    };
    let start_at = unix_ms() + 2_000;
    if let Some(child) = pages.as_mut() {
        let mut stdin = child.stdin.take().context("pages stdin")?;
        writeln!(stdin, "{start_at}")?;
    }
    let image = paths::repo_root().join("web/samples/chelsea.png");
    let cost_table = paths::repo_root().join("profiles/cost-table.json");
    let pid_list = pids.iter().map(ToString::to_string).collect::<Vec<_>>().join(",");
    let crowd = Command::new(target_dir().join("debug/crowd"))
        .args(["--url", &ws, "--json", "--clients", &opts.clients.to_string()])
        .args(["--modes", &opts.modes.join(",")])
        .args(["--duration-s", &opts.duration_s.to_string()])
        .args(["--settle-s", &opts.settle_s.to_string()])
        .args(["--interval-ms", &opts.interval_ms.to_string()])
        .args(["--edge-factor", &format!("{}-{}", EDGE_FACTORS.0, EDGE_FACTORS.1)])
        .args(["--link", LINK])
        .args(["--start-at", &start_at.to_string(), "--server-pid", &pid_list])
        .arg("--image")
        .arg(&image)
        .arg("--cost-table")
        .arg(&cost_table)
        .stderr(Stdio::inherit())
        .output()
        .context("running crowd")?;
    let pages_status = pages.as_mut().map(std::process::Child::wait).transpose()?;
    if !crowd.status.success() {
        bail!("crowd failed: {}", crowd.status);
    }
    if let Some(status) = pages_status
        && !status.success()
    {
        bail!("node tests/crowd-pages.mjs failed: {status}");
    }
    let raw: serde_json::Value =
        if opts.pages > 0 { read_json(&raw_path)? } else { serde_json::Value::Null };
    let mut by_mode = pages_rows(&raw, opts.settle_s * 1e3);
    let mut rows = Vec::new();
    for line in String::from_utf8_lossy(&crowd.stdout).lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).with_context(|| format!("crowd output {line:?}"))?;
        let native: CrowdReport = serde_json::from_value(v["report"].clone())?;
        let pages =
            by_mode.iter().position(|(m, _)| *m == native.mode).map(|i| by_mode.remove(i).1);
        eprintln!(
            "lab crowd: {replicas} replica(s), {}: P95 {:.0} ms, server {:.1} req/s",
            native.mode, native.p95_ms, native.server_rps
        );
        rows.push(CrowdRow {
            replicas,
            native,
            server_cpu_ms_per_request: v["server_cpu_ms_per_request"].as_f64(),
            pages,
        });
    }
    Ok((rows, raw))
}

/// Run the multi-client lab with everything built; writes `README.md` and `data.json` to `out`.
///
/// # Errors
/// A failing server, balancer, crowd or page run.
pub fn lab(opts: &CrowdOptions, out: &Path, command: &str) -> Result<CrowdResults> {
    std::fs::create_dir_all(out)?;
    let date = output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]);
    let args = server_args(&[]);
    let (mut rows, mut pages_raw) = (Vec::new(), Vec::new());
    for &replicas in &opts.replicas {
        eprintln!(
            "lab crowd: {} clients + {} pages, {replicas} replica(s)",
            opts.clients, opts.pages
        );
        let (r, raw) = if replicas == 1 {
            let server = start_server(&args)?;
            run_setup(opts, 1, &server.url, &[server.pid()])?
        } else {
            let c = cluster::start(replicas, cluster::free_port()?, false, &args)?;
            let pids: Vec<u32> = c.replicas.iter().map(xtask::server::Server::pid).collect();
            run_setup(opts, replicas, &c.url, &pids)?
        };
        rows.extend(r);
        pages_raw.push(raw);
    }
    let browser = pages_raw
        .iter()
        .find_map(|r| r["chromium"].as_str().map(String::from))
        .unwrap_or_else(|| "-".into());
    let results = CrowdResults {
        command: command.into(),
        date,
        machine: machine(&browser),
        options: opts.clone(),
        rows,
        pages_raw,
    };
    std::fs::write(out.join("data.json"), serde_json::to_vec_pretty(&results)?)?;
    std::fs::write(out.join("README.md"), report(&results))?;
    Ok(results)
}

fn f(v: f64, digits: usize) -> String {
    if v.is_finite() { format!("{v:.digits$}") } else { "–".into() }
}

fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

/// The report: per setup a table of modes, then the design table beside the figures.
pub fn report(r: &CrowdResults) -> String {
    let o = &r.options;
    let link = crate::netem::profile(LINK).expect("LINK is one of the emulator's profiles");
    let mut s = format!(
        "# Many users on one server\n\n`{}` — {} — {} ({} cores), commit {}\n\n\
         {} native clients (lab/src/crowd.rs: each a device {}–{}× slower than the cost table's \
         Chromium CPU profile, its compute simulated by that time, real frames over its own \
         emulated {} link: {:.0} ms RTT, {} Mbit/s up) and {} real page(s) in headless Chromium \
         (4× CPU throttle, real wasm compute, own link), each wanting an answer every {:.0} ms \
         (a camera; frames that come while busy are dropped). {:.0} s per mode, the first {:.0} s \
         left out. Server: `cloud-server` with its defaults (1 model worker), cache off.\n\n",
        r.command,
        r.date,
        r.machine.cpu,
        r.machine.cores,
        r.machine.commit,
        o.clients,
        EDGE_FACTORS.0,
        EDGE_FACTORS.1,
        link.name,
        link.rtt_ms,
        link.up_kbps / 1e3,
        o.pages,
        o.interval_ms,
        o.duration_s,
        o.settle_s,
    );
    for &replicas in &o.replicas {
        let rows: Vec<&CrowdRow> = r.rows.iter().filter(|x| x.replicas == replicas).collect();
        if replicas == 1 {
            s.push_str("## One server\n\n");
        } else {
            s.push_str(&format!(
                "## {replicas} replicas behind HAProxy (leastconn, same two cores)\n\n"
            ));
        }
        s.push_str(
            "| mode | answers/s | server req/s | P50 ms | P95 ms | P99 ms | fell back | failed | \
             device ms/req | KB sent/req | server CPU ms/req | edge weights | pages P50 / P95 ms | \
             placements (native) |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        );
        for row in rows {
            let n = &row.native;
            let pages = row.pages.as_ref().map_or_else(
                || "–".into(),
                |p| format!("{} / {} ({} req)", f(p.p50_ms, 0), f(p.p95_ms, 0), p.requests),
            );
            let placements: Vec<String> =
                n.placements.iter().take(3).map(|(p, c)| format!("{p} {c}")).collect();
            s.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                n.mode,
                f(n.answers_per_s, 1),
                f(n.server_rps, 1),
                f(n.p50_ms, 0),
                f(n.p95_ms, 0),
                f(n.p99_ms, 0),
                n.fallback,
                n.failed,
                f(n.edge_ms_per_request, 0),
                f(n.bytes_per_request / 1e3, 1),
                row.server_cpu_ms_per_request.map_or_else(|| "–".into(), |c| f(c, 1)),
                mb(n.edge_param_bytes),
                pages,
                placements.join(", ")
            ));
        }
        s.push('\n');
        if let Some(auto) =
            r.rows.iter().find(|x| x.replicas == replicas && x.native.mode == "auto")
        {
            let groups: Vec<String> = auto
                .native
                .by_speed
                .iter()
                .map(|g| {
                    format!(
                        "{:.1}–{:.1}× slower: {:.0}% to the server, P95 {} ms",
                        g.edge_factor.0,
                        g.edge_factor.1,
                        100.0 * g.remote_share,
                        f(g.p95_ms, 0)
                    )
                })
                .collect();
            if !groups.is_empty() {
                s.push_str(&format!("auto by device speed: {}.\n\n", groups.join("; ")));
            }
        }
    }
    s.push_str(&design_table(r));
    s.push_str(
        "\n- *device ms/req* is the simulated device compute per request: the energy proxy \
         (a phone's energy per answer grows with the time its processor runs the network).\n\
         - *edge weights* is what the placements used need on the device; the page downloads all \
         of them today whatever the mode (sharding the weights is issue 12).\n\
         - The replicas share this machine's two cores, so three replicas measure the balancer \
         and reconnection path, not three machines' capacity (docs/operating.md has pinned \
         replicas, one per core).\n",
    );
    s
}

/// The design's table (seed article: edge / cloud / split) beside what this lab measured on one
/// server: edge-only, cloud-only, the best fixed split by P95, and auto.
fn design_table(r: &CrowdResults) -> String {
    let one: Vec<&CrowdRow> = r.rows.iter().filter(|x| x.replicas == 1).collect();
    let get = |m: &str| one.iter().find(|x| x.native.mode == m).map(|x| &x.native);
    let best_split = one
        .iter()
        .filter(|x| !matches!(x.native.mode.as_str(), "edge" | "cloud" | "auto"))
        .min_by(|a, b| a.native.p95_ms.total_cmp(&b.native.p95_ms))
        .map(|x| &x.native);
    let cols = [get("edge"), get("cloud"), best_split, get("auto")];
    let cell =
        |c: Option<&CrowdReport>, v: &dyn Fn(&CrowdReport) -> String| c.map_or("–".into(), v);
    let row = |name: &str, design: [&str; 3], v: &dyn Fn(&CrowdReport) -> String| {
        format!(
            "| {name} | {} | {} | {} | {} | {} | {} | {} |\n",
            design[0],
            cell(cols[0], v),
            design[1],
            cell(cols[1], v),
            design[2],
            cell(cols[2], v),
            cell(cols[3], v)
        )
    };
    let mut s = format!(
        "## The design table, measured (one server, {} native clients)\n\n\
         | | design: edge | measured: edge only | design: cloud | measured: cloud only | design: split | measured: {} | measured: auto |\n\
         |---|---|---|---|---|---|---|---|\n",
        r.options.clients,
        best_split.map_or("best split", |b| b.mode.as_str())
    );
    s.push_str(&row("P95 latency", ["420 ms", "380 ms", "185 ms"], &|c| {
        format!("{} ms", f(c.p95_ms, 0))
    }));
    s.push_str(&row("Throughput", ["12 req/s", "28 req/s", "35 req/s"], &|c| {
        format!("{} answers/s ({} on the server)", f(c.answers_per_s, 0), f(c.server_rps, 0))
    }));
    s.push_str(&row("Edge energy", ["2.3 W", "0.4 W", "1.1 W"], &|c| {
        format!("{} ms device compute/req", f(c.edge_ms_per_request, 0))
    }));
    s.push_str(&row("Model on the device", ["800 MB (fails)", "2 KB", "45 MB"], &|c| {
        mb(c.edge_param_bytes)
    }));
    s
}

/// What a quick run must show, whatever the timings: every mode measured on every setup, the
/// crowd's answers right and none failed, the pages answered, edge-only never touched the
/// server and cloud-only never computed on the device, auto used the server, and the report
/// written.
///
/// # Errors
/// Naming the first check that fails.
pub fn check(r: &CrowdResults, out: &Path) -> Result<()> {
    let cat = |c: u64| (281..=285).contains(&c);
    for setup in &r.options.replicas {
        for mode in &r.options.modes {
            let row = r
                .rows
                .iter()
                .find(|x| x.replicas == *setup && x.native.mode == *mode)
                .with_context(|| format!("{mode} on {setup} replica(s) not measured"))?;
            let n = &row.native;
            anyhow::ensure!(n.requests > 0 && n.failed == 0, "{setup} {mode}: {n:?}");
            anyhow::ensure!(n.top1.iter().all(|&c| cat(u64::from(c))), "{mode}: wrong class");
            match mode.as_str() {
                "edge" => anyhow::ensure!(n.server == 0 && n.edge_ms_per_request > 0.0, "{n:?}"),
                "cloud" => anyhow::ensure!(n.local == 0 && n.edge_ms_per_request == 0.0, "{n:?}"),
                "auto" => anyhow::ensure!(n.server > 0, "auto never used the server: {n:?}"),
                _ => {
                    anyhow::ensure!(n.server == n.requests, "a fixed split answered locally: {n:?}")
                }
            }
            if r.options.pages > 0 {
                let p = row.pages.as_ref().with_context(|| format!("{mode}: no pages"))?;
                anyhow::ensure!(p.requests > 0 && p.errors == 0, "pages {mode}: {p:?}");
                anyhow::ensure!(p.top1.iter().copied().all(cat), "pages {mode}: wrong class");
            }
        }
    }
    for f in ["README.md", "data.json"] {
        anyhow::ensure!(out.join(f).exists(), "{f} not written");
    }
    Ok(())
}

/// Default report folder for a crowd of `clients`.
pub fn default_out(clients: usize) -> PathBuf {
    paths::repo_root().join(format!("reports/lab-clients/{clients}-clients"))
}
