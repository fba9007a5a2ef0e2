//! `cargo xtask test`, what CI runs: the habits, then every test.

use std::process::Command;

use anyhow::Result;

use crate::browser::ensure_browser_tools;
use crate::cmd::{cargo, run};
use crate::server::start_server;
use crate::wasm_build::{WASM_TARGET, ensure_wasm_target};
use crate::{paths, setup};

/// The checks every change passes before the tests: formatting, clippy with warnings as errors,
/// and `split-shared` building for wasm32 on its own (the browser half must not need anything
/// native).
fn habits() -> Result<()> {
    let has =
        |tool: &str| cargo().arg(tool).arg("--version").output().is_ok_and(|o| o.status.success());
    if !has("fmt") || !has("clippy") {
        run(Command::new("rustup").args(["component", "add", "rustfmt", "clippy"]))?;
    }
    run(cargo().args(["fmt", "--all", "--check"]))?;
    run(cargo().args(["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"]))?;
    ensure_wasm_target()?;
    run(cargo().args(["check", "--target", WASM_TARGET, "-p", "split-shared"]))
}

/// `cargo xtask test`: weights, wasm build, Rust tests, then the headless-browser tests.
pub fn test_all() -> Result<()> {
    let (freed, sessions) = crate::prune::prune_target(&crate::cmd::target_dir());
    if freed > 0 || sessions > 0 {
        eprintln!(
            "test: pruned {} MiB of stale test binaries and {sessions} incremental sessions",
            freed >> 20
        );
    }
    habits()?;
    let weights = setup::ensure_weights()?;
    let calibration = crate::calibrate::ensure_calibration()?;
    crate::wasm_build::build()?;
    run(cargo()
        .args(["test", "--workspace"])
        .env("SPLIT_WEIGHTS", &weights)
        .env("SPLIT_CALIBRATION", &calibration))?;
    let web = paths::repo_root().join("web");
    ensure_browser_tools(&web)?;
    // The client's TypeScript declarations against the way the README embeds it.
    run(Command::new(web.join("node_modules/.bin/tsc")).args(["-p", "."]).current_dir(&web))?;
    let server = start_server(&[
        "--weights".into(),
        weights.display().to_string(),
        "--calibration".into(),
        calibration.display().to_string(),
        // The e2e load check drives the server from loopback, one address, far over the rate
        // one person's page sends (the limit itself is tested in cloud-server/tests/ws.rs).
        "--rate-limit".into(),
        "0".into(),
    ])?;
    run(Command::new("node").arg("tests/e2e.mjs").current_dir(&web).env("SPLIT_URL", &server.url))?;
    drop(server);
    // The performance lab's quick mode, so the harness cannot rot (checks behaviour, not speed).
    let out = std::env::temp_dir().join("splitinfer-lab-quick");
    let _ = std::fs::remove_dir_all(&out);
    let results =
        crate::lab::lab(&crate::lab::Options::quick(out.clone()), "./run.sh lab --quick")?;
    crate::lab::check(&results, &out)?;
    eprintln!("test: lab quick mode passed ({})", out.join("README.md").display());
    // The decoders an attacker reaches, under libFuzzer for a bounded time (a longer run:
    // `./run.sh fuzz 600`). libFuzzer needs nightly; without it the step says so and is skipped.
    if crate::fuzz::nightly_available() {
        crate::fuzz::quick(20)?;
        eprintln!("test: fuzzing found nothing in 20 s per target");
    } else {
        eprintln!(
            "test: fuzzing skipped: no nightly toolchain (`rustup toolchain install nightly`)"
        );
    }
    eprintln!("test: all passed");
    Ok(())
}
