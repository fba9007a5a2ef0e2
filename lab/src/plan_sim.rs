//! `./run.sh plan-sim`: the adaptive controller against the oracle, the best fixed choice,
//! edge-only and cloud-only on the standard traces, with the measured cost table; with
//! `--lab-links`, on the browser lab's profiles and traces instead ([`crate::trace_sim`]), each
//! many times, rated by the lab report's own statistics.
//!
//! `./run.sh plan-sim --help` lists the options.

use std::path::PathBuf;

use anyhow::{Context, Result};
use split_shared::model::Boundary;
use split_shared::plan::sim::{simulate, standard_traces};
use split_shared::plan::{Candidate, Constraints, ControllerConfig, CostTable};

use crate::lab::stats;
use crate::netem;
use crate::trace_sim::{self, Device};
use xtask::paths;

/// The adaptive controller on the standard traces (or the lab's links) with the measured cost
/// table.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Cost table; default `profiles/cost-table.json`.
    #[arg(long)]
    table: Option<PathBuf>,
    /// Edge profile of the table to simulate.
    #[arg(long, default_value = "browser-wasm-cpu")]
    edge: String,
    /// Nothing (no image, no features) leaves the device before this boundary.
    #[arg(long)]
    privacy_floor: Option<Boundary>,
    /// Lowest acceptable top-1 agreement with the uncompressed model.
    #[arg(long)]
    min_agreement: Option<f64>,
    /// Only placements the server reads nothing of: the table's encrypted placement, or
    /// edge-only.
    #[arg(long)]
    encrypted: bool,
    /// Most parameter bytes the edge may hold (EfficientNet-Lite0: 13,400,000 to `pool`,
    /// 18,524,000 for all of it).
    #[arg(long)]
    max_edge_param_bytes: Option<u64>,
    /// Instead of the synthetic traces: the browser lab's links (its four profiles and five
    /// traces, through the link emulator's model), every fixed mode and `auto` as the lab runs
    /// them, each link `--seeds` times; the lab report's ratios, with their spread.
    #[arg(long)]
    lab_links: bool,
    /// Runs of each lab link (`--lab-links`), each with its own draws of device time.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..))]
    seeds: u64,
    /// Only these lab links (`--lab-links`), comma-separated.
    #[arg(long, value_delimiter = ',')]
    links: Vec<String>,
    /// Spread of each simulated device time (`--lab-links`): the standard deviation of its log.
    #[arg(long, default_value_t = Device::default().jitter)]
    jitter: f64,
    /// What an edge run costs beyond itself while a ping is out (`--lab-links`), a fraction
    /// of the time they overlap.
    #[arg(long, default_value_t = Device::default().pause_cost)]
    pause_cost: f64,
    /// How late, at most, a pong that comes during an edge run is read, ms (`--lab-links`).
    #[arg(long, default_value_t = Device::default().pong_lateness_ms)]
    pong_lateness_ms: f64,
}

/// Run the simulation.
pub fn run(a: Args) -> Result<()> {
    let table_path = a.table.unwrap_or_else(|| paths::repo_root().join("profiles/cost-table.json"));
    let edge = a.edge;
    let mut constraints = Constraints::default();
    if let Some(b) = a.privacy_floor {
        constraints.privacy_floor = usize::from(b.index());
    }
    if let Some(m) = a.min_agreement {
        constraints.min_agreement = m;
    }
    constraints.encrypted = a.encrypted;
    constraints.max_edge_param_bytes = a.max_edge_param_bytes;
    let text = std::fs::read_to_string(&table_path)
        .with_context(|| format!("reading {}", table_path.display()))?;
    let table = CostTable::from_json(&text).map_err(anyhow::Error::msg)?;
    let candidates = table.candidates(&edge).with_context(|| {
        format!("no edge profile {edge:?}; have {:?}", table.edge.keys().collect::<Vec<_>>())
    })?;
    println!(
        "cost table {} (edge profile {edge}), constraints {constraints:?}",
        table_path.display()
    );
    if a.lab_links {
        return lab_links(
            &candidates,
            a.seeds,
            &a.links,
            Device {
                jitter: a.jitter,
                pause_cost: a.pause_cost,
                pong_lateness_ms: a.pong_lateness_ms,
                ..Device::default()
            },
        );
    }
    println!(
        "| trace | adaptive s | oracle s | adaptive / oracle | best fixed | adaptive / best fixed | edge-only s | cloud-only s | switches |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for trace in standard_traces() {
        let r = simulate(&trace, &candidates, &constraints, ControllerConfig::default(), 500.0);
        let s = |ms: f64| format!("{:.1}", ms / 1e3);
        println!(
            "| {} | {} | {} | {:.3} | {} | {:.3} | {} | {} | {} |",
            r.trace,
            s(r.adaptive_ms),
            s(r.oracle_ms),
            r.adaptive_ms / r.oracle_ms,
            r.best_fixed.0,
            r.adaptive_ms / r.best_fixed.1,
            r.edge_only_ms.map_or("–".into(), s),
            r.cloud_only_ms.map_or("–".into(), s),
            r.switches
        );
    }
    Ok(())
}

/// The lab's links, each `seeds` times: auto against the lab report's oracle.
fn lab_links(candidates: &[Candidate], seeds: u64, only: &[String], device: Device) -> Result<()> {
    let modes = trace_sim::lab_modes(candidates)?;
    if let Some(unknown) = only.iter().find(|o| !trace_sim::LAB_LINKS.contains(&o.as_str())) {
        anyhow::bail!(
            "--links: {unknown:?} is none of the lab's links ({})",
            trace_sim::LAB_LINKS.join(", ")
        );
    }
    println!(
        "{seeds} runs a link (seeds 0..{seeds}), device {device:?}; profiles 10 s a mode, traces 60 s"
    );
    println!(
        "| link | auto / oracle P95: median (10th–90th pct) | runs ≤ 1.05 | auto P95 ms | oracle P95 ms | edge-only P95 | cloud-only P95 | auto's placements |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for name in
        trace_sim::LAB_LINKS.iter().filter(|n| only.is_empty() || only.iter().any(|o| o == *n))
    {
        let r = trace_sim::rate_link(&netem::schedule(name)?, candidates, &modes, device, seeds);
        let mix: Vec<String> = r
            .placements
            .iter()
            .filter(|(_, s)| **s >= 0.005)
            .map(|(p, s)| format!("{p} {:.0}%", s * 100.0))
            .collect();
        println!(
            "| {name} | {:.2} ({:.2}–{:.2}) | {}/{} | {:.0} | {:.0} | {:.0} | {:.0} | {} |",
            r.ratio_quantile(0.5),
            r.ratio_quantile(0.1),
            r.ratio_quantile(0.9),
            r.ratios.iter().filter(|x| **x <= 1.05).count(),
            r.ratios.len(),
            stats::median(&r.auto_p95),
            stats::median(&r.oracle_p95),
            stats::median(&r.edge_p95),
            stats::median(&r.cloud_p95),
            mix.join(", ")
        );
    }
    Ok(())
}
