//! `cargo xtask plan-sim`: the adaptive controller against the oracle, the best fixed choice,
//! edge-only and cloud-only on the standard traces, with the measured cost table.
//!
//! ```text
//! cargo xtask plan-sim [--table profiles/cost-table.json] [--edge browser-wasm-cpu]
//!                      [--privacy-floor block5] [--min-agreement 0.99]
//! ```

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use split_shared::model::Boundary;
use split_shared::plan::sim::{simulate, standard_traces};
use split_shared::plan::{Constraints, ControllerConfig, CostTable};

use crate::paths;

/// Run the simulation with command-line `args`.
pub fn run(args: &[String]) -> Result<()> {
    let mut table_path: PathBuf = paths::repo_root().join("profiles/cost-table.json");
    let mut edge = "browser-wasm-cpu".to_string();
    let mut constraints = Constraints::default();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--table" => table_path = value()?.into(),
            "--edge" => edge = value()?.clone(),
            "--privacy-floor" => {
                constraints.privacy_floor = usize::from(value()?.parse::<Boundary>()?.index())
            }
            "--min-agreement" => constraints.min_agreement = value()?.parse()?,
            other => bail!("unknown flag {other}; see the doc comment of xtask/src/plan_sim.rs"),
        }
    }
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
