//! The one pinned nightly the project needs, for three things stable cannot do: the threaded
//! wasm build (`-Z build-std` with atomics), libFuzzer (`cargo fuzz`'s sanitizer flags) and
//! Miri. Pinned so that a fresh machine builds and checks with what was tested; installed by
//! rustup on first use, after which the checks only ask rustup what is there (no network).

use std::process::Command;
use std::sync::Mutex;

use anyhow::Result;

use crate::cmd::run;
use crate::paths;

/// The nightly every nightly-only step uses.
pub const NIGHTLY: &str = "nightly-2026-05-20";

/// Held while one thread asks rustup about [`NIGHTLY`] and installs what is missing: the test
/// command's two lanes both need the nightly (the threaded module, Miri and the fuzzers), and
/// two rustup installs of one toolchain at once would race.
static INSTALLING: Mutex<()> = Mutex::new(());

/// Install [`NIGHTLY`] (minimal profile) with `components`, once: a later call with the same
/// components asks rustup what is installed and downloads nothing.
pub fn ensure_nightly(components: &[&str]) -> Result<()> {
    let _one_at_a_time = INSTALLING.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let out = Command::new("rustup")
        .args(["component", "list", "--installed", "--toolchain", NIGHTLY])
        .output()?;
    // Fails when the toolchain is missing; lists each installed component by its full name
    // (`rust-src`, `miri-x86_64-unknown-linux-gnu`).
    let listed = String::from_utf8_lossy(&out.stdout).into_owned();
    let missing: Vec<&str> = components
        .iter()
        .copied()
        .filter(|c| !listed.lines().any(|l| l == *c || l.starts_with(&format!("{c}-"))))
        .collect();
    if out.status.success() && missing.is_empty() {
        return Ok(());
    }
    eprintln!("toolchain: installing {NIGHTLY} with {} (once)", components.join(", "));
    let mut install = Command::new("rustup");
    install.args(["toolchain", "install", NIGHTLY, "--profile", "minimal"]);
    for c in components {
        install.args(["--component", c]);
    }
    run(&mut install)
}

/// `cargo +NIGHTLY` in the repository, free of the environment the stable cargo running this
/// task set for its children.
pub fn nightly_cargo() -> Command {
    let mut c = Command::new("cargo");
    c.arg(format!("+{NIGHTLY}")).current_dir(paths::repo_root());
    for var in ["CARGO", "RUSTC", "RUSTDOC", "RUSTUP_TOOLCHAIN", "RUSTC_WRAPPER"] {
        c.env_remove(var);
    }
    crate::cmd::without_lints(&mut c);
    c
}

/// A target of the stable toolchain, added with rustup when missing.
pub fn ensure_target(target: &str) -> Result<()> {
    let out = Command::new("rustup").args(["target", "list", "--installed"]).output();
    if let Ok(out) = out
        && !String::from_utf8_lossy(&out.stdout).lines().any(|l| l == target)
    {
        run(Command::new("rustup").args(["target", "add", target]))?;
    }
    Ok(())
}

/// The kernels' tests compiled to WebAssembly (`wasm32-wasip1`, `+simd128`) and run under
/// Node's WASI (`tools/wasi-run.mjs`), once as the plain-SIMD module is built and once with the
/// `relaxed-simd` feature as the relaxed-SIMD module is: the browser's loops (`Isa::Simd128`:
/// the convolutions and the quantized product) against the references, which no native test
/// reaches.
pub fn wasm_kernels() -> Result<()> {
    const TARGET: &str = "wasm32-wasip1";
    ensure_target(TARGET)?;
    let runner = paths::repo_root().join("tools/wasi-run.mjs");
    for (features, node_flag) in
        [("", None), ("relaxed-simd", Some("--experimental-wasm-relaxed-simd"))]
    {
        let runner = format!(
            "node --no-warnings {}{}",
            node_flag.map_or(String::new(), |f| format!("{f} ")),
            runner.display()
        );
        let mut c = crate::cmd::cargo();
        crate::cmd::without_lints(&mut c);
        c.args(["test", "--release", "-p", "split-kernels", "--lib", "--target", TARGET]);
        if !features.is_empty() {
            c.args(["--features", features]);
        }
        run(c
            .env("CARGO_TARGET_DIR", crate::cmd::target_dir().join("wasi"))
            .env("CARGO_TARGET_WASM32_WASIP1_RUNNER", runner)
            .env("CARGO_TARGET_WASM32_WASIP1_RUSTFLAGS", "-C target-feature=+simd128"))?;
    }
    Ok(())
}

/// Miri over the kernels' portable and reference paths (`split-kernels`' `miri` tests: small
/// shapes, every public entry, the owned outputs): undefined behaviour in the crate that holds
/// the workspace's `unsafe` fails the test command.
pub fn miri_kernels() -> Result<()> {
    ensure_nightly(&["miri", "rust-src"])?;
    run(nightly_cargo().args(["miri", "setup"]))?;
    run(nightly_cargo()
        .args(["miri", "test", "-p", "split-kernels", "--lib", "--", "tests::miri::"])
        // Outside the workspace's target directory: Miri's artefacts are its own.
        .env("CARGO_TARGET_DIR", paths::cache_dir().join("miri-target"))
        .env("MIRIFLAGS", "-Zmiri-strict-provenance"))
}
