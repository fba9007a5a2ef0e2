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
/// Not the kernels' own tests: those build and run in their checked profile
/// (`kernels-checked`), and a second, unchecked build of them (minutes of monomorphised SIMD
/// tiles) would never run.
pub fn build_workspace() -> Result<()> {
    run(cargo().args(["test", "--workspace", "--exclude", "split-kernels", "--no-run"]))
}

/// The server binary alone, as [`build_workspace`] builds it (the same profile and, for the
/// crates both build, the same features): what the demo and the cluster run, without the
/// tests and the measuring tools.
pub fn build_server() -> Result<()> {
    run(cargo().args(["build", "--package", "cloud-server", "--bin", "cloud-server"]))
}

/// The environment `./run.sh test` sets so that cargo lints the workspace while it builds it
/// (clippy's driver as the workspace's rustc wrapper, with the arguments clippy passes it).
const LINT_ENV: [&str; 2] = ["RUSTC_WORKSPACE_WRAPPER", "CLIPPY_ARGS"];

/// Whether this process's builds of the workspace run clippy (`./run.sh test` set it up).
pub fn builds_lint() -> bool {
    std::env::var_os(LINT_ENV[0]).is_some_and(|w| w.to_string_lossy().contains("clippy-driver"))
}

/// `cmd` without the lint wrapper: for builds that must not go through clippy's driver (the
/// browser modules, whose code it would compile without MIR optimisations; other toolchains;
/// `cargo install` of tools, whose crates count as workspace members there).
pub fn without_lints(cmd: &mut Command) -> &mut Command {
    for var in LINT_ENV {
        cmd.env_remove(var);
    }
    cmd
}

/// The cargo target directory (honours CARGO_TARGET_DIR).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| paths::repo_root().join("target"), PathBuf::from)
}

/// `cargo install NAME --version VERSION --root ROOT`, first with the crate's own lock file
/// (`--locked`: the dependency versions its release was tested with). A registry may no longer
/// offer one of those (a yanked release: on a new machine `wasm-bindgen-cli` 0.2.130's lock
/// names `webpki-roots` 1.0.11, which crates.io does not serve any more); then the newest
/// compatible versions are resolved instead, as a plain `cargo install` would, and it says so.
pub fn cargo_install(name: &str, version: &str, root: &std::path::Path) -> Result<()> {
    let install = |locked: bool| {
        let mut c = cargo();
        without_lints(&mut c).args(["install", name, "--version", version, "--root"]).arg(root);
        if locked {
            c.arg("--locked");
        }
        eprintln!("$ {c:?}");
        c.status().with_context(|| format!("running cargo install {name}"))
    };
    if install(true)?.success() {
        return Ok(());
    }
    eprintln!(
        "{name} {version}: its lock file names a dependency version the registry does not \
         offer; installing it with the newest compatible dependencies instead"
    );
    anyhow::ensure!(install(false)?.success(), "cargo install {name} {version} failed");
    Ok(())
}
