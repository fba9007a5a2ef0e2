//! Running commands: echo them, fail with their name when they fail; cargo in the workspace.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::paths;

/// Run `cmd` with inherited output; an error names the program when it fails.
pub fn run(cmd: &mut Command) -> Result<()> {
    eprintln!("$ {cmd:?}");
    let status =
        cmd.status().with_context(|| format!("could not start {:?}", cmd.get_program()))?;
    if !status.success() {
        bail!("{:?} failed: {status}", cmd.get_program());
    }
    Ok(())
}

/// `cargo` (the one running xtask) in the repository root.
pub fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(paths::repo_root());
    c
}

/// The binaries and tests every task runs, built once and the same way: `cargo test
/// --workspace --no-run` resolves features as `./run.sh test` does, so the demo, the lab and
/// the tools reuse its compiled units instead of rebuilding burn and actix with other features.
pub fn build_workspace() -> Result<()> {
    run(cargo().args(["test", "--workspace", "--no-run"]))
}

/// The cargo target directory (honours CARGO_TARGET_DIR).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| paths::repo_root().join("target"), PathBuf::from)
}
