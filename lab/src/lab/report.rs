//! The lab's report: markdown tables, SVG charts and `data.json`, from [`Results`].

use std::fmt::Write;
use std::path::Path;

use anyhow::Result;

use super::stats::{self, LinkRuns, LinkSummary};
use super::{LoadRow, Results};
use split_studies::svg::{Series, Style, bar_chart, xy_chart};

/// Window of the trace oracle, ms of trace time (scaled with the trace).
const ORACLE_WINDOW_MS: f64 = 3_000.0;

fn f0(v: f64) -> String {
    if v.is_finite() { format!("{v:.0}") } else { "–".into() }
}

fn f2(v: f64) -> String {
    if v.is_finite() { format!("{v:.2}") } else { "–".into() }
}

fn placements(m: &stats::ModeSummary) -> String {
    m.placements
        .iter()
        .map(|(p, share)| format!("{p} {:.0}%", share * 100.0))
        .collect::<Vec<_>>()
        .join(", ")
}

fn mode_table(out: &mut String, s: &LinkSummary) {
    out.push_str(
        "| mode | P50 ms | P95 ms | P99 ms | max ms | bytes sent | edge ms | requests | auto placements |\n",
    );
    out.push_str("|---|---|---|---|---|---|---|---|---|\n");
    for m in &s.modes {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            m.mode,
            f0(m.p[0]),
            f0(m.p[1]),
            f0(m.p[2]),
            f0(m.max),
            f0(m.bytes),
            f0(m.edge_ms),
            m.requests,
            placements(m)
        );
    }
}

/// Empirical CDF points of a mode's latencies (all repeats).
fn cdf(link: &LinkRuns, mode: &str) -> Vec<(f64, f64)> {
    let mut v: Vec<f64> = link
        .runs
        .iter()
        .filter(|r| r.mode == mode)
        .flat_map(|r| r.samples.iter().map(|s| s.total))
        .collect();
    v.sort_by(f64::total_cmp);
    let n = v.len() as f64;
    let mut pts = vec![(v.first().copied().unwrap_or(0.0), 0.0)];
    pts.extend(v.iter().enumerate().map(|(i, x)| (*x, (i + 1) as f64 / n)));
    pts
}

fn write_svg(dir: &Path, name: &str, svg: &str, md: &mut String, alt: &str) -> Result<()> {
    std::fs::write(dir.join(name), svg)?;
    let _ = writeln!(md, "\n![{alt}]({name})\n");
    Ok(())
}

fn load_table(out: &mut String, rows: &[&LoadRow]) {
    out.push_str("| workload | link | clients | bytes/request | req/s | P50 ms | P95 ms | P99 ms | server CPU ms/request | answers | errors |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
    for r in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.1} | {} | {} | {} | {} | {} | {} |",
            r.workload,
            r.link.as_deref().unwrap_or("loopback"),
            r.clients,
            r.bytes,
            r.rps,
            f0(r.p50_ms),
            f0(r.p95_ms),
            f0(r.p99_ms),
            if r.server_cpu_ms.is_finite() {
                format!("{:.1}", r.server_cpu_ms)
            } else {
                "–".into()
            },
            r.ok,
            r.errors
        );
    }
}

/// The browser runs, split by kind and summarised once for every section that reads them.
struct Links<'a> {
    profiles: Vec<&'a LinkRuns>,
    traces: Vec<&'a LinkRuns>,
    summaries: Vec<LinkSummary>,
    trace_summaries: Vec<LinkSummary>,
}

impl<'a> Links<'a> {
    fn of(r: &'a Results) -> Self {
        let b = &r.browser;
        let profiles: Vec<&LinkRuns> = b.links.iter().filter(|l| l.kind == "profile").collect();
        let traces: Vec<&LinkRuns> = b.links.iter().filter(|l| l.kind == "trace").collect();
        let summaries = profiles.iter().map(|l| stats::summarize_profile(l)).collect();
        let trace_summaries = traces
            .iter()
            .map(|l| stats::summarize_trace(l, ORACLE_WINDOW_MS * l.scale.unwrap_or(1.0)))
            .collect();
        Self { profiles, traces, summaries, trace_summaries }
    }
}

/// Write the report (`README.md` with its charts, and `data.json`: the results and their
/// summaries as this code computes them) into `dir`, one section after another.
///
/// # Errors
/// When a file cannot be written.
pub fn write(r: &Results, dir: &Path) -> Result<()> {
    let links = Links::of(r);
    let mut md = String::new();
    header(&mut md, r);
    goals(&mut md, r, &links);
    browser_links(&mut md, r, &links, dir)?;
    varying_links(&mut md, r, &links, dir)?;
    bytes_per_request(&mut md, &links, dir)?;
    edge_cost(&mut md, r);
    cloud_tier(&mut md, r);
    baselines(&mut md, r);
    cold_start(&mut md, r);
    std::fs::write(dir.join("README.md"), md)?;
    let data = serde_json::json!({
        "results": r,
        "summaries": links.summaries,
        "trace_summaries": links.trace_summaries,
    });
    std::fs::write(dir.join("data.json"), serde_json::to_string(&data)?)?;
    Ok(())
}

/// What ran, where and when.
fn header(md: &mut String, r: &Results) {
    let _ = writeln!(md, "# Performance lab{}\n", if r.quick { " (quick mode)" } else { "" });
    let _ = writeln!(
        md,
        "Produced by `{}` on {} at commit `{}`. Figures are medians over {}{} run(s) of each trace; every number below is in `data.json`.\n",
        r.command,
        r.date,
        r.machine.commit,
        if has_profiles(r) {
            format!("{} repeat(s) on constant links and ", r.repeats)
        } else {
            String::new()
        },
        r.browser.trace_repeats
    );
    let m = &r.machine;
    let _ = writeln!(
        md,
        "Machine: {} ({} logical cores), {:.1} GiB, Linux {}, no GPU used; {}; Node {}; browser: {}. \
         Server and load generator: the workspace's dev profile (dependencies at opt-level 3), on the same cores as the browser; \
         server started with `--cache-entries 0` so that every request computes.\n",
        m.cpu, m.cores, m.memory_gib, m.kernel, m.rustc, m.node, m.browser
    );
}

/// Whether the browser ran constant links (a traces-only run did not).
fn has_profiles(r: &Results) -> bool {
    r.browser.links.iter().any(|l| l.kind != "trace")
}

/// The issue goals, met or not.
fn goals(md: &mut String, r: &Results, links: &Links) {
    md.push_str("## Goals\n\n| goal | measured | met |\n|---|---|---|\n");
    for s in links.summaries.iter().filter(|s| s.link == "3g" || s.link == "4g") {
        let _ = writeln!(
            md,
            "| adaptive P95 ≤ 0.7× best single tier ({}) | {} | {} |",
            s.link,
            f2(s.auto_vs_best_single),
            if s.auto_vs_best_single <= 0.7 { "yes" } else { "no" }
        );
    }
    let worst = links
        .summaries
        .iter()
        .chain(&links.trace_summaries)
        .map(|s| (s.auto_vs_oracle, s.link.as_str()))
        .filter(|(v, _)| v.is_finite())
        .max_by(|a, b| a.0.total_cmp(&b.0));
    if let Some((v, link)) = worst {
        let _ = writeln!(
            md,
            "| adaptive P95 ≤ 1.05× oracle everywhere | worst {} ({link}) | {} |",
            f2(v),
            if v <= 1.05 { "yes" } else { "no" }
        );
    }
    if let Some(w) = &r.ort_web {
        let ms = |k: &str| w[k].as_f64().unwrap_or(f64::NAN);
        for (threads, burn, ort) in [(1, "burn_ms", "ort_ms"), (2, "burn_threads_ms", "ort_2_ms")] {
            if w.get(burn).is_none() {
                continue; // reports from before the threaded build
            }
            let ratio = ms(burn) / ms(ort);
            let _ = writeln!(
                md,
                "| browser edge ≤ 1.0× ORT-web time ({threads} thread{}) | {} | {} |",
                if threads > 1 { "s" } else { "" },
                f2(ratio),
                if ratio <= 1.0 { "yes" } else { "no" }
            );
        }
    }
    if let Some(o) = &r.onnx {
        let full = o.parts.iter().find(|p| p.part == "full");
        if let Some(p) = full {
            // Reports from before burn ran on 2 threads compare with its 1-thread time.
            let burn = if p.burn_2_ms.is_finite() { p.burn_2_ms } else { p.burn_ms };
            let ratio = p.ort_2_ms / burn;
            let _ = writeln!(
                md,
                "| cloud tier ≥ 1.0× ORT CPU throughput (per-image compute, whole network, 2 threads) | {} | {} |",
                f2(ratio),
                if ratio >= 1.0 { "yes" } else { "no" }
            );
        }
    }
    md.push('\n');
}

/// Latency of every mode through constant links, with CDF charts.
fn browser_links(md: &mut String, r: &Results, links: &Links, dir: &Path) -> Result<()> {
    let b = &r.browser;
    if !has_profiles(r) {
        let _ = writeln!(
            md,
            "## The browser over the traces, CPU throttled {}×\n\n\
             The page's `SplitClient` in headless Chromium with the CPU throttled through the DevTools protocol \
             (`Emulation.setCPUThrottlingRate`) before the client starts, its WebSocket through the userspace link \
             emulator (`netem`). `cloud` is a plain app uploading a quality-0.9 JPEG of the 224×224 crop made with the \
             browser's canvas; latency is the page's wall time of `classify`. The best single tier is the faster of \
             edge-only and cloud-only. A ratio is the median of the runs' ratios, each run's in brackets. {}\n",
            b.throttle,
            device_note()
        );
    } else {
        let _ = writeln!(
            md,
            "## The browser through emulated links, CPU throttled {}×\n\n\
         The page's `SplitClient` in headless Chromium with the CPU throttled through the DevTools protocol \
         (`Emulation.setCPUThrottlingRate`) before the client starts, its WebSocket through the userspace link \
         emulator (`netem`); {} request(s) per mode and repeat after a warm-up, {} \
         `cloud` is a plain app: for each request it crops and resizes the photo to 224×224 with the browser's canvas and \
         uploads a quality-0.9 JPEG (encode time included) as a model-input frame; `auto` makes the same JPEG when it picks cloud-only, its time counted. Latency is the page's wall time of `classify`. The oracle is the \
         best fixed mode of each repeat; the best single tier is the faster of edge-only and cloud-only. \
         A ratio is the median of the repeats' ratios, each repeat's in brackets. {}\n",
            b.throttle,
            b.requests,
            turns(links),
            device_note()
        );
    }
    md.push_str("| link | best single tier (P95 ms) | oracle P95 ms | auto / best single tier | auto / oracle | device during auto / during edge-only |\n|---|---|---|---|---|---|\n");
    for s in links.summaries.iter().chain(&links.trace_summaries) {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} |",
            s.link,
            s.best_single.as_ref().map_or("–".into(), |(m, v)| format!("{m} ({v:.0})")),
            f0(s.oracle_p95),
            f2(s.auto_vs_best_single),
            ratio_and_runs(s),
            s.auto_device_vs_edge.map_or("–".into(), f2)
        );
    }
    for (s, link) in links.summaries.iter().zip(&links.profiles) {
        let _ = writeln!(md, "\n### {}\n", s.link);
        mode_table(md, s);
        let series: Vec<Series> = s
            .modes
            .iter()
            .map(|m| Series {
                name: m.mode.clone(),
                points: cdf(link, &m.mode),
                style: Style::Step,
            })
            .collect();
        let name = format!("cdf-{}.svg", s.link);
        let svg = xy_chart(
            &format!("Latency CDF, {} (CPU {}x)", s.link, b.throttle),
            "ms",
            "fraction of requests",
            &series,
            None,
        );
        write_svg(dir, &name, &svg, md, &format!("latency CDF on {}", s.link))?;
    }
    Ok(())
}

/// How the modes of a constant link took turns ([`LinkRuns::interleaved`](stats::LinkRuns)).
fn turns(links: &Links) -> &'static str {
    if links.profiles.iter().all(|l| l.interleaved.as_deref() == Some("requests")) {
        "each mode in its own browser (its own client, learning only from its own requests), the \
         modes taking turns request by request (request i of every mode, then request i + 1, the \
         order reversed every other time), so that every mode meets the same minutes of the \
         machine; a page is throttled only while its own request runs."
    } else {
        "one client running the modes one after the other (in reverse order on every other repeat)."
    }
}

/// What the summary table's last column says (`LinkSummary::auto_device_vs_edge`).
fn device_note() -> String {
    format!(
        "The last column is the device's speed while auto ran against while fixed edge-only ran: the \
         P95 stage time of auto's edge-only runs that did not pause for a ping over edge-only's (the \
         same photo through the same stages; median over repeats, – where auto ran fewer than {} on the \
         device). Above 1 the machine was slower during auto's run, which its P95 carries and the \
         oracle's, made of the fixed modes' runs, does not.",
        stats::MIN_DEVICE_RUNS
    )
}

/// A link's auto / oracle: the median, and each repeat's where there were several.
fn ratio_and_runs(s: &LinkSummary) -> String {
    if s.auto_vs_oracle_runs.len() < 2 {
        return f2(s.auto_vs_oracle);
    }
    let runs: Vec<String> = s.auto_vs_oracle_runs.iter().map(|&v| f2(v)).collect();
    format!("{} ({})", f2(s.auto_vs_oracle), runs.join(", "))
}

/// Latency and placement over the time-varying traces.
fn varying_links(md: &mut String, r: &Results, links: &Links, dir: &Path) -> Result<()> {
    md.push_str("\n## Time-varying links\n\nEach mode runs back to back over the whole trace with a fresh emulator, whose clock starts when the client connects. The oracle picks, in each window of 3 s of trace time, the fixed mode whose requests starting there had the lowest mean latency. Per-request percentiles under-weight a stall: a fixed mode that waits out an outage does so in one long request while a mode that keeps answering logs many; read the tables with the timeline charts.\n");
    let runs = r.browser.trace_repeats;
    if runs > 1 {
        let _ = writeln!(
            md,
            "\nEach trace ran {runs} times, modes interleaved within each run. A run is rated against its own oracle (runs meet the trace's stalls at other moments); the table above gives the median of the runs' auto / oracle and, in brackets, each run's; a mode's percentiles below are medians over runs; the charts show the first run.",
        );
    }
    for (s, link) in links.trace_summaries.iter().zip(&links.traces) {
        let scale = link.scale.unwrap_or(1.0);
        let recorded = crate::recorded::recorded().into_iter().find(|t| t.name == link.link);
        let segments = crate::netem::schedule(&link.link)
            .map(|t| {
                if let Some(r) = &recorded {
                    return format!(
                        "recorded: {}; uplink median {:.0} kbit/s, 10th percentile {:.0}; RTT {} ms added",
                        r.source,
                        r.up_quantile(0.5),
                        r.up_quantile(0.1),
                        r.rtt_ms
                    );
                }
                t.scaled(scale)
                    .segments
                    .iter()
                    .map(|(at, p)| format!("{:.0} s {}", at, p.name))
                    .collect::<Vec<_>>()
                    .join(" → ")
            })
            .unwrap_or_default();
        let _ = writeln!(md, "\n### {} ({segments})\n", s.link);
        mode_table(md, s);
        let first = || link.runs.iter().filter(|run| run.repeat == 0);
        let series: Vec<Series> = first()
            .map(|run| Series {
                name: run.mode.clone(),
                points: run.samples.iter().map(|x| (x.t.unwrap_or(0.0) / 1e3, x.total)).collect(),
                style: Style::Points,
            })
            .collect();
        let svg = xy_chart(
            &format!("Latency over the {} trace", s.link),
            "trace time s (request start)",
            "ms",
            &series,
            None,
        );
        write_svg(dir, &format!("trace-{}.svg", s.link), &svg, md, "latency over the trace")?;
        if let Some(auto) = first().find(|r| r.mode == "auto") {
            let mut labels: Vec<String> = Vec::new();
            for x in &auto.samples {
                let p = x.placement.clone().unwrap_or_default();
                if !labels.contains(&p) {
                    labels.push(p);
                }
            }
            let pts = auto
                .samples
                .iter()
                .map(|x| {
                    let p = x.placement.clone().unwrap_or_default();
                    (
                        x.t.unwrap_or(0.0) / 1e3,
                        labels.iter().position(|l| *l == p).unwrap_or(0) as f64,
                    )
                })
                .collect();
            let svg = xy_chart(
                &format!("Where auto ran each request, {} trace", s.link),
                "trace time s",
                "",
                &[Series { name: "auto".into(), points: pts, style: Style::Step }],
                Some(&labels),
            );
            write_svg(
                dir,
                &format!("trace-{}-placement.svg", s.link),
                &svg,
                md,
                "placement over time",
            )?;
        }
    }
    Ok(())
}

/// Bytes each mode sends.
fn bytes_per_request(md: &mut String, links: &Links, dir: &Path) -> Result<()> {
    if links.summaries.is_empty() {
        return Ok(()); // a traces-only run: the trace tables give each mode's bytes
    }
    md.push_str("\n## Bytes per request\n");
    let mut bars = Vec::new();
    for s in &links.summaries {
        for m in &s.modes {
            bars.push((format!("{} · {}", s.link, m.mode), m.bytes));
        }
    }
    write_svg(
        dir,
        "bytes.svg",
        &bar_chart("Bytes sent per request (median)", "bytes", &bars),
        md,
        "bytes per request",
    )?;
    Ok(())
}

/// CPU time per request in the browser.
fn edge_cost(md: &mut String, r: &Results) {
    let cost = &r.browser.edge_cost;
    let _ = writeln!(
        md,
        "\n## Edge cost: CPU time per request\n\nThe energy proxy measurable here: CPU time (user + system) of every Chromium process per request, \
         on loopback and **without** throttling (Chromium's throttle keeps a core busy while it holds the page back, so CPU time under it measures the throttle). \
         Idle rate with the page open: {:.0} ms/s, subtracted over each run's wall time. Medians over repeats.\n",
        cost.idle_cpu_ms_per_s
    );
    md.push_str(
        "| mode | CPU ms / request | net of idle | wall ms / request |\n|---|---|---|---|\n",
    );
    let mut modes: Vec<&str> = Vec::new();
    for run in &cost.runs {
        if !modes.contains(&run.mode.as_str()) {
            modes.push(&run.mode);
        }
    }
    for mode in modes {
        let runs: Vec<_> = cost.runs.iter().filter(|x| x.mode == mode).collect();
        let med = |f: &dyn Fn(&&stats::CostRun) -> f64| {
            stats::median(&runs.iter().map(f).collect::<Vec<_>>())
        };
        let _ = writeln!(
            md,
            "| {mode} | {} | {} | {} |",
            f0(med(&|x| x.cpu_ms_per_request)),
            f0(med(&|x| x.net_cpu_ms_per_request)),
            f0(med(&|x| x.wall_ms_per_request))
        );
    }
}

/// Server throughput, and the userspace emulator against kernel shaping.
fn cloud_tier(md: &mut String, r: &Results) {
    if r.throughput.is_empty() && r.links.is_empty() {
        return; // a traces-only run
    }
    md.push_str("\n## Cloud tier throughput\n\nNative clients (`loadgen`, the shared code), each one WebSocket with one request in flight, on loopback; server CPU from `/proc/PID/stat`.\n\n");
    load_table(md, &r.throughput.iter().collect::<Vec<_>>());

    md.push_str("\n## Links: userspace emulator against kernel rate limits\n\nOne native client per row. `kernel:` rows: the server on the host end of a veth pair, the client in a network namespace, `tc tbf` at the profile's rates on both ends, the round trip added by the emulator with no rate limit (`rtt:<ms>`): the two implementations of the same profile should agree.\n\n");
    if let Some(why) = &r.kernel_unavailable {
        let _ = writeln!(md, "Kernel shaping was not available in this run: {why}\n");
    }
    let mut link_rows: Vec<&LoadRow> = r.links.iter().collect();
    link_rows.sort_by(|a, b| {
        let key = |r: &LoadRow| {
            r.link.clone().unwrap_or_default().trim_start_matches("kernel:").to_string()
        };
        key(a).cmp(&key(b)).then(a.workload.cmp(&b.workload))
    });
    load_table(md, &link_rows);
}

/// ONNX Runtime natively and in the browser.
fn baselines(md: &mut String, r: &Results) {
    if let Some(o) = &r.onnx {
        let _ = writeln!(
            md,
            "\n## ONNX Runtime CPU against burn `flex`\n\nThe model exported from the project's weights (`tools/export_onnx.py`; max |logit − golden| {:.1e} on `chelsea`), ONNX Runtime {} from PyPI, medians of 30 runs{}. burn used {:.2} CPU-seconds per second of the whole-network run (its thread pool).\n",
            o.max_abs_logit_diff,
            o.onnxruntime,
            o.how_timed(),
            o.burn_cpu_per_wall
        );
        md.push_str(&crate::onnx::tables(o));
    }
    if let Some(w) = &r.ort_web {
        let ms = |k: &str| w[k].as_f64().unwrap_or(f64::NAN);
        let version = w["ort_version"].as_str().unwrap_or("?");
        let _ = writeln!(
            md,
            "\n## ONNX Runtime Web against burn in the browser\n\nSame Chromium, unthrottled, the same exported model; median of {} runs.\n\n| engine | threads | whole network ms |\n|---|---|---|\n| burn wasm (`flex`, relaxed SIMD) | 1 | {:.1} |\n| ONNX Runtime Web {version} (wasm) | 1 | {:.1} |",
            w["repeats"],
            ms("burn_ms"),
            ms("ort_ms"),
        );
        // Reports from before the threaded build have no 2-thread rows.
        if w.get("burn_threads_ms").is_some() {
            let _ = writeln!(
                md,
                "| burn wasm (`flex`, relaxed SIMD, Web Worker threads) | 2 | {:.1} |\n| ONNX Runtime Web {version} (wasm) | 2 | {:.1} |",
                ms("burn_threads_ms"),
                ms("ort_2_ms"),
            );
        }
    }
}

/// Bytes and seconds before the page is ready, per placement (`tests/coldstart.mjs`).
fn cold_start(md: &mut String, r: &Results) {
    let Some(c) = &r.cold_start else { return };
    md.push_str("\n## Start-up of the demo page\n\nLoopback, CPU backend, the page's `?weights=` per placement; cold: a fresh browser profile, warm: a reload (weights from Cache Storage); bytes as transferred. Over shaped links: `./run.sh lab --start` ([reports/lab-start](../lab-start/README.md)).\n\n| placement | visit | bytes | ready s | first answer s |\n|---|---|---|---|---|\n");
    for row in c.as_array().into_iter().flatten() {
        // Reports from before per-placement start-up have a row per backend instead.
        let placement = row["mode"].as_str().or(row["backend"].as_str()).unwrap_or("?");
        let _ = writeln!(
            md,
            "| {placement} | {} | {} | {:.1} | {:.1} |",
            row["visit"].as_str().unwrap_or("cold"),
            row["bytes"],
            row["ready_s"].as_f64().unwrap_or(f64::NAN),
            row["first_s"].as_f64().unwrap_or(f64::NAN)
        );
    }
}
