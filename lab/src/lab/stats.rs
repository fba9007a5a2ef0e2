//! The browser lab's raw samples (what `web/tests/lab.mjs` writes) and the figures the report
//! gives: percentiles per mode as medians over repeats, the best single tier, the oracle, and
//! the adaptive mode's ratios to both.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One request as the page measured it.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct Sample {
    /// Wall time of `classify`, ms.
    pub total: f64,
    /// Bytes sent over the WebSocket.
    pub bytes: f64,
    /// Edge compute, ms.
    pub edge: f64,
    /// Of `edge`, the network's stages, ms (absent where none ran on the device).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edge_stages: Option<f64>,
    /// `true` when the edge run paused between its stages for a ping out (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edge_paused: Option<bool>,
    /// What auto planned (`edge_only`, `cloud_only`, `<boundary>:<codec>`, `fallback_edge`).
    pub placement: Option<String>,
    /// Top-1 class.
    pub top1: u32,
    /// Start time on the trace, ms (trace runs only).
    pub t: Option<f64>,
    /// When the request started, ms since the Unix epoch.
    #[serde(default)]
    pub start: Option<f64>,
    /// What auto's planner believed when it answered (auto only): the forecast link and its
    /// best placements' predicted totals, as `web/tests/lab.mjs` records them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned: Option<serde_json::Value>,
}

/// One mode's requests in one repeat.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct Run {
    /// Repeat index.
    pub repeat: usize,
    /// `edge`, `cloud`, a boundary, or `auto`.
    pub mode: String,
    /// Requests in order.
    pub samples: Vec<Sample>,
    /// Trace length, ms (trace runs only).
    pub duration_ms: Option<f64>,
    /// When the trace's clock started, ms since the Unix epoch (trace runs only): samples start
    /// at `origin + t`, to line them up with what was logged beside the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<f64>,
}

/// Every run over one link (a constant profile or a trace).
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct LinkRuns {
    /// Profile or trace name.
    pub link: String,
    /// `profile` or `trace`.
    pub kind: String,
    /// Time scale of a trace (1 = as defined).
    pub scale: Option<f64>,
    /// How a constant link's modes took turns: `requests` when each mode had its own browser and
    /// the modes took turns request by request; absent in reports from before 2026-12-08, whose
    /// modes ran one after the other within each repeat (on one client).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interleaved: Option<String>,
    /// Runs: one per mode and repeat.
    pub runs: Vec<Run>,
}

/// Edge CPU per request and mode, unthrottled.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct CostRun {
    /// Repeat index.
    pub repeat: usize,
    /// Mode.
    pub mode: String,
    /// Chromium CPU time per request, ms.
    pub cpu_ms_per_request: f64,
    /// The same less the idle rate over the run's wall time.
    pub net_cpu_ms_per_request: f64,
    /// Wall time per request, ms.
    pub wall_ms_per_request: f64,
}

/// The edge cost section.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct EdgeCost {
    /// Chromium's CPU use with the page open and idle, ms per s.
    pub idle_cpu_ms_per_s: f64,
    /// Runs.
    pub runs: Vec<CostRun>,
}

/// Everything the browser lab wrote.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct BrowserLab {
    /// CPU throttling factor.
    pub throttle: f64,
    /// Requests per mode and repeat on constant links.
    pub requests: usize,
    /// Repeats on constant links.
    pub repeats: usize,
    /// Runs of each trace and mode (reports before 2026-12-07 ran each once).
    #[serde(default = "one")]
    pub trace_repeats: usize,
    /// The browser's user agent.
    pub chromium: Option<String>,
    /// Constant links, then traces.
    pub links: Vec<LinkRuns>,
    /// Edge CPU per mode.
    pub edge_cost: EdgeCost,
}

fn one() -> usize {
    1
}

/// P50, P95 and P99 of latencies (nearest rank).
pub fn percentiles(values: &[f64]) -> [f64; 3] {
    let mut v: Vec<f64> = values.to_vec();
    v.sort_by(f64::total_cmp);
    [0.5, 0.95, 0.99].map(|q| {
        if v.is_empty() { f64::NAN } else { v[((v.len() - 1) as f64 * q).round() as usize] }
    })
}

/// The median of values (mean of the middle two for an even count).
pub fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// One mode over a link: percentiles as medians over repeats.
#[derive(Clone, Debug, Serialize)]
pub struct ModeSummary {
    /// Mode.
    pub mode: String,
    /// Median over repeats of each repeat's P50, P95, P99, ms.
    pub p: [f64; 3],
    /// The longest request of all repeats, ms (a stall shows here).
    pub max: f64,
    /// Median bytes sent per request.
    pub bytes: f64,
    /// Median edge ms per request.
    pub edge_ms: f64,
    /// Requests, all repeats.
    pub requests: usize,
    /// Share of requests per placement (auto).
    pub placements: BTreeMap<String, f64>,
}

/// A link's comparison.
#[derive(Clone, Debug, Serialize)]
pub struct LinkSummary {
    /// Profile or trace.
    pub link: String,
    /// Per mode.
    pub modes: Vec<ModeSummary>,
    /// The faster of edge-only and cloud-only by P95, and its P95.
    pub best_single: Option<(String, f64)>,
    /// The oracle's P95: the best fixed mode per repeat (constant links) or per time window
    /// (traces).
    pub oracle_p95: f64,
    /// Adaptive P95 over the best single tier's (median of per-repeat ratios on constant links).
    pub auto_vs_best_single: f64,
    /// Adaptive P95 over the oracle's (the median of the per-repeat ratios).
    pub auto_vs_oracle: f64,
    /// Each repeat's adaptive P95 over its oracle's, in repeat order.
    pub auto_vs_oracle_runs: Vec<f64>,
    /// The device's speed while auto ran against while fixed edge-only ran: the P95 stage time
    /// of auto's own edge-only runs that did not pause for a ping, over edge-only's, per
    /// repeat, then the median. The same photo through the same stages, so above 1 the machine
    /// ran slower during auto's run, not the plan; a P95 because the goals rate P95s, and the
    /// machine's slow spells set them. `None` where auto ran fewer than [`MIN_DEVICE_RUNS`]
    /// such runs in every repeat.
    pub auto_device_vs_edge: Option<f64>,
}

/// Edge runs a repeat's auto needs for its device speed to be compared (the constant links'
/// 20 requests a repeat, less the runs that paused, leave 15-20; a P95 of 10 is already their
/// slowest run).
pub const MIN_DEVICE_RUNS: usize = 10;

/// Whether a constant link's modes took turns within every repeat: each mode's first request
/// started before every other mode's last. Run one after the other, the first mode's last request
/// starts before the next mode's first. `false` where a sample has no start time.
pub fn modes_took_turns(link: &LinkRuns) -> bool {
    // The first and last start of a run's requests; `None` where one has no start time.
    let span = |run: &Run| {
        run.samples.iter().try_fold(None, |span: Option<(f64, f64)>, s| {
            let t = s.start?;
            Some(Some(span.map_or((t, t), |(lo, hi)| (lo.min(t), hi.max(t)))))
        })?
    };
    let repeats: BTreeMap<usize, Vec<&Run>> =
        link.runs.iter().fold(BTreeMap::new(), |mut by, run| {
            by.entry(run.repeat).or_default().push(run);
            by
        });
    repeats.values().all(|runs| {
        let spans: Option<Vec<(f64, f64)>> = runs.iter().map(|r| span(r)).collect();
        spans.is_some_and(|spans| {
            spans
                .iter()
                .enumerate()
                .all(|(i, a)| spans.iter().enumerate().all(|(j, b)| i == j || a.0 < b.1))
        })
    })
}

/// One repeat's [`LinkSummary::auto_device_vs_edge`].
fn device_speed_ratio(runs: &[&Run]) -> Option<f64> {
    let stages = |mode: &str, keep: fn(&Sample) -> bool| -> Vec<f64> {
        runs.iter()
            .filter(|r| r.mode == mode)
            .flat_map(|r| &r.samples)
            .filter(|s| keep(s))
            .filter_map(|s| s.edge_stages)
            .collect()
    };
    let auto = stages("auto", |s| {
        s.placement.as_deref() == Some("edge_only") && s.edge_paused != Some(true)
    });
    let edge = stages("edge", |_| true);
    if auto.len() < MIN_DEVICE_RUNS || edge.len() < MIN_DEVICE_RUNS {
        return None;
    }
    Some(percentiles(&auto)[1] / percentiles(&edge)[1])
}

/// [`LinkSummary::auto_device_vs_edge`] over every repeat.
fn device_speed(link: &LinkRuns) -> Option<f64> {
    let ratios: Vec<f64> = repeats(link).filter_map(|runs| device_speed_ratio(&runs)).collect();
    (!ratios.is_empty()).then(|| median(&ratios))
}

fn mode_summary(mode: &str, runs: &[&Run]) -> ModeSummary {
    let per_repeat: Vec<[f64; 3]> = runs
        .iter()
        .map(|r| percentiles(&r.samples.iter().map(|s| s.total).collect::<Vec<_>>()))
        .collect();
    let all: Vec<&Sample> = runs.iter().flat_map(|r| &r.samples).collect();
    let mut placements = BTreeMap::new();
    for s in &all {
        if let Some(p) = &s.placement {
            *placements.entry(p.clone()).or_insert(0.0) += 1.0 / all.len() as f64;
        }
    }
    ModeSummary {
        mode: mode.to_string(),
        p: [0, 1, 2].map(|i| median(&per_repeat.iter().map(|p| p[i]).collect::<Vec<_>>())),
        max: all.iter().map(|s| s.total).fold(f64::NAN, f64::max),
        bytes: median(&all.iter().map(|s| s.bytes).collect::<Vec<_>>()),
        edge_ms: median(&all.iter().map(|s| s.edge).collect::<Vec<_>>()),
        requests: all.len(),
        placements,
    }
}

fn p95(samples: &[&Sample]) -> f64 {
    percentiles(&samples.iter().map(|s| s.total).collect::<Vec<_>>())[1]
}

/// Summarize a constant link: ratios are computed per repeat, then the median is taken.
pub fn summarize_profile(link: &LinkRuns) -> LinkSummary {
    let modes: Vec<String> = unique_modes(link);
    let (oracle, vs_single, vs_oracle) = rate_repeats(link, |runs| {
        let fixed = runs.iter().filter(|r| r.mode != "auto");
        fixed.map(|r| p95(&r.samples.iter().collect::<Vec<_>>())).fold(f64::INFINITY, f64::min)
    });
    let summaries: Vec<ModeSummary> = modes
        .iter()
        .map(|m| mode_summary(m, &link.runs.iter().filter(|r| &r.mode == m).collect::<Vec<_>>()))
        .collect();
    let best_single = summaries
        .iter()
        .filter(|s| s.mode == "edge" || s.mode == "cloud")
        .min_by(|a, b| a.p[1].total_cmp(&b.p[1]))
        .map(|s| (s.mode.clone(), s.p[1]));
    LinkSummary {
        link: link.link.clone(),
        modes: summaries,
        best_single,
        oracle_p95: median(&oracle),
        auto_vs_best_single: median(&vs_single),
        auto_vs_oracle: median(&vs_oracle),
        auto_vs_oracle_runs: vs_oracle,
        auto_device_vs_edge: device_speed(link),
    }
}

/// Each repeat rated alone: its oracle's P95 (`oracle` of that repeat's runs), and where auto
/// ran, auto's P95 over the best single tier's and over the oracle's.
fn rate_repeats(
    link: &LinkRuns,
    oracle: impl Fn(&[&Run]) -> f64,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (mut best, mut vs_single, mut vs_oracle) = (Vec::new(), Vec::new(), Vec::new());
    for runs in repeats(link) {
        let p = |m: &str| {
            runs.iter().find(|r| r.mode == m).map(|r| p95(&r.samples.iter().collect::<Vec<_>>()))
        };
        let o = oracle(&runs);
        let single = [p("edge"), p("cloud")].into_iter().flatten().fold(f64::INFINITY, f64::min);
        best.push(o);
        if let Some(a) = p("auto") {
            vs_single.push(a / single);
            vs_oracle.push(a / o);
        }
    }
    (best, vs_single, vs_oracle)
}

/// The repeats a link's runs number (the highest index + 1).
fn repeat_count(link: &LinkRuns) -> usize {
    link.runs.iter().map(|r| r.repeat).max().map_or(0, |m| m + 1)
}

/// Each repeat's runs, in repeat order (a repeat with none gives an empty list).
fn repeats(link: &LinkRuns) -> impl Iterator<Item = Vec<&Run>> {
    (0..repeat_count(link)).map(|repeat| link.runs.iter().filter(|r| r.repeat == repeat).collect())
}

fn unique_modes(link: &LinkRuns) -> Vec<String> {
    let mut modes: Vec<String> = Vec::new();
    for r in &link.runs {
        if !modes.contains(&r.mode) {
            modes.push(r.mode.clone());
        }
    }
    modes
}

/// The oracle over one run of a trace: in each window of `window_ms`, the fixed mode whose
/// requests started in it have the lowest mean latency; its requests there are the oracle's. A
/// mode with no request starting in a window (one stuck in flight) cannot be chosen for it.
/// `runs` are one repeat's (runs of other repeats met other moments of the trace).
pub fn trace_oracle<'a>(runs: &[&'a Run], window_ms: f64) -> Vec<&'a Sample> {
    let fixed: Vec<&Run> = runs.iter().copied().filter(|r| r.mode != "auto").collect();
    let end = fixed.iter().flat_map(|r| &r.samples).filter_map(|s| s.t).fold(0.0f64, f64::max);
    let mut out = Vec::new();
    let mut w0 = 0.0;
    while w0 <= end {
        let in_window = |r: &&'a Run| -> Vec<&'a Sample> {
            r.samples
                .iter()
                .filter(|s| s.t.is_some_and(|t| t >= w0 && t < w0 + window_ms))
                .collect()
        };
        let best = fixed
            .iter()
            .map(in_window)
            .filter(|s| !s.is_empty())
            .min_by(|a, b| mean(a).total_cmp(&mean(b)));
        out.extend(best.unwrap_or_default());
        w0 += window_ms;
    }
    out
}

fn mean(s: &[&Sample]) -> f64 {
    s.iter().map(|s| s.total).sum::<f64>() / s.len() as f64
}

/// Summarize a trace: each repeat is rated alone, its oracle choosing per window of
/// `window_ms` among that repeat's fixed modes; the ratios and the oracle's P95 are the
/// medians over repeats, as on constant links.
pub fn summarize_trace(link: &LinkRuns, window_ms: f64) -> LinkSummary {
    let mut summary = summarize_profile(link);
    let (oracle, vs_single, vs_oracle) =
        rate_repeats(link, |runs| p95(&trace_oracle(runs, window_ms)));
    summary.oracle_p95 = median(&oracle);
    summary.auto_vs_oracle = median(&vs_oracle);
    summary.auto_vs_best_single = median(&vs_single);
    summary.auto_vs_oracle_runs = vs_oracle;
    summary
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(total: f64, t: f64) -> Sample {
        Sample {
            total,
            bytes: 0.0,
            edge: 0.0,
            edge_stages: None,
            edge_paused: None,
            placement: None,
            top1: 282,
            t: Some(t),
            start: None,
            planned: None,
        }
    }

    fn run(mode: &str, repeat: usize, samples: Vec<Sample>) -> Run {
        Run { repeat, mode: mode.into(), samples, duration_ms: None, origin: None }
    }

    #[test]
    fn percentiles_and_medians() {
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(percentiles(&v), [11.0, 19.0, 20.0]);
        assert_eq!(median(&[3.0, 1.0, 2.0, 10.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn ratios_are_per_repeat_then_median() {
        let c = |v: f64| vec![s(v, 0.0), s(v, 0.0)];
        let link = LinkRuns {
            link: "x".into(),
            kind: "profile".into(),
            scale: None,
            interleaved: None,
            runs: vec![
                run("edge", 0, c(100.0)),
                run("cloud", 0, c(200.0)),
                run("block5", 0, c(50.0)),
                run("auto", 0, c(80.0)),
                run("edge", 1, c(100.0)),
                run("cloud", 1, c(40.0)),
                run("block5", 1, c(50.0)),
                run("auto", 1, c(60.0)),
            ],
        };
        let sum = summarize_profile(&link);
        // Repeat 0: single 100, oracle 50; repeat 1: single 40, oracle 40.
        assert_eq!(sum.auto_vs_best_single, (0.8 + 1.5) / 2.0);
        assert_eq!(sum.auto_vs_oracle, (1.6 + 1.5) / 2.0);
        assert_eq!(sum.oracle_p95, 45.0);
        assert_eq!(
            sum.modes.iter().map(|m| m.mode.as_str()).collect::<Vec<_>>(),
            ["edge", "cloud", "block5", "auto"]
        );
    }

    #[test]
    fn the_device_speed_compares_autos_unpaused_edge_runs_with_edge_onlys() {
        let edge_run = |stages: f64, placement: Option<&str>, paused: Option<bool>| Sample {
            edge_stages: Some(stages),
            placement: placement.map(String::from),
            edge_paused: paused,
            ..s(stages + 30.0, 0.0)
        };
        let n = MIN_DEVICE_RUNS;
        // Edge-only: runs of 100 ms with a slow tail from 120 (P95 = 120).
        let edge: Vec<Sample> =
            (0..n).map(|i| edge_run(if i + 2 >= n { 120.0 } else { 100.0 }, None, None)).collect();
        // Auto: unpaused edge-only runs with a tail at 180 (P95 = 180), and what does not
        // count, slower still: paused runs, a split's stages and a fallback's.
        let mut auto: Vec<Sample> = (0..n)
            .map(|i| edge_run(if i + 2 >= n { 180.0 } else { 100.0 }, Some("edge_only"), None))
            .collect();
        for _ in 0..5 {
            auto.push(edge_run(900.0, Some("edge_only"), Some(true)));
            auto.push(edge_run(900.0, Some("block5:s12"), None));
            auto.push(edge_run(900.0, Some("fallback_edge"), None));
        }
        let few: Vec<Sample> =
            (0..n - 1).map(|_| edge_run(300.0, Some("edge_only"), None)).collect();
        let link = LinkRuns {
            link: "x".into(),
            kind: "profile".into(),
            scale: None,
            interleaved: None,
            runs: vec![
                run("edge", 0, edge.clone()),
                run("auto", 0, auto),
                // Too few of auto's runs on the device to compare: this repeat says nothing.
                run("edge", 1, edge),
                run("auto", 1, few),
            ],
        };
        assert_eq!(summarize_profile(&link).auto_device_vs_edge, Some(1.5));
        let cloud_only = LinkRuns { runs: link.runs[2..].to_vec(), ..link };
        assert_eq!(summarize_profile(&cloud_only).auto_device_vs_edge, None);
    }

    #[test]
    fn the_trace_oracle_picks_the_best_mode_per_window_and_skips_stuck_ones() {
        let link = LinkRuns {
            link: "t".into(),
            kind: "trace".into(),
            scale: Some(1.0),
            interleaved: None,
            runs: vec![
                // cloud is fast, then stuck for the second window (no request starts there).
                run(
                    "cloud",
                    0,
                    vec![s(10.0, 0.0), s(10.0, 500.0), s(1500.0, 900.0), s(10.0, 2400.0)],
                ),
                run("edge", 0, vec![s(100.0, 0.0), s(100.0, 1100.0), s(100.0, 2100.0)]),
                run("auto", 0, vec![s(10.0, 0.0)]),
            ],
        };
        // Window 0: cloud's mean includes the request that got stuck (507 ms) > edge's 100;
        // window 1: only edge starts a request; window 2: cloud is back and faster.
        let runs: Vec<&Run> = link.runs.iter().collect();
        let oracle: Vec<f64> = trace_oracle(&runs, 1000.0).iter().map(|s| s.total).collect();
        assert_eq!(oracle, [100.0, 100.0, 10.0]);
    }

    #[test]
    fn each_run_of_a_trace_is_rated_against_its_own_oracle() {
        let c = |v: f64| vec![s(v, 0.0), s(v, 1500.0)];
        let link = LinkRuns {
            link: "t".into(),
            kind: "trace".into(),
            scale: Some(1.0),
            interleaved: None,
            runs: vec![
                run("edge", 0, c(100.0)),
                run("auto", 0, c(100.0)),
                run("edge", 1, c(200.0)),
                run("cloud", 1, c(50.0)),
                run("auto", 1, c(100.0)),
            ],
        };
        // Repeat 0: auto is its oracle (edge, 100); repeat 1: twice cloud's 50. Pooled, the
        // first run's auto would have been held to the second run's cloud.
        let sum = summarize_trace(&link, 1000.0);
        assert_eq!(sum.auto_vs_oracle_runs, [1.0, 2.0]);
        assert_eq!(sum.auto_vs_oracle, 1.5);
        assert_eq!(sum.oracle_p95, 75.0);
        assert_eq!(sum.auto_vs_best_single, 1.5);
    }

    #[test]
    fn modes_that_ran_one_after_the_other_did_not_take_turns() {
        let at = |mode: &str, starts: &[f64]| Run {
            samples: starts.iter().map(|&t| Sample { start: Some(t), ..s(100.0, 0.0) }).collect(),
            ..run(mode, 0, vec![])
        };
        let link = |runs| LinkRuns {
            link: "x".into(),
            kind: "profile".into(),
            scale: None,
            interleaved: None,
            runs,
        };
        assert!(modes_took_turns(&link(vec![at("edge", &[0.0, 20.0]), at("auto", &[10.0, 30.0])])));
        assert!(!modes_took_turns(&link(vec![
            at("edge", &[0.0, 10.0]),
            at("auto", &[20.0, 30.0])
        ])));
        // A sample without its start time proves nothing.
        let mut unknown = link(vec![at("edge", &[0.0, 20.0]), at("auto", &[10.0, 30.0])]);
        unknown.runs[1].samples[0].start = None;
        assert!(!modes_took_turns(&unknown));
    }
}
