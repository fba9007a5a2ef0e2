//! `./run.sh plan-sim`: the adaptive controller against the oracle, the best fixed choice,
//! edge-only and cloud-only on the standard traces, with the measured cost table.
//!
//! `./run.sh plan-sim --help` lists the options.

use std::path::PathBuf;

use anyhow::{Context, Result};
use split_shared::model::Boundary;
use split_shared::plan::sim::{simulate, standard_traces};
use split_shared::plan::{Constraints, ControllerConfig, CostTable};

use xtask::paths;

/// The adaptive controller on the standard traces with the measured cost table.
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
