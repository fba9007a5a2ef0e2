//! Building the wasm edge module, starting the demo, and running every test.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result, bail};

use crate::{paths, setup};

const WASM_TARGET: &str = "wasm32-unknown-unknown";

fn run(cmd: &mut Command) -> Result<()> {
    eprintln!("$ {cmd:?}");
    let status =
        cmd.status().with_context(|| format!("could not start {:?}", cmd.get_program()))?;
    if !status.success() {
        bail!("{:?} failed: {status}", cmd.get_program());
    }
    Ok(())
}

fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(paths::repo_root());
    c
}

/// The cargo target directory (honours CARGO_TARGET_DIR).
pub(crate) fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| paths::repo_root().join("target"), PathBuf::from)
}

/// The wasm-bindgen version pinned in Cargo.lock; the CLI must match it exactly.
fn locked_wasm_bindgen_version() -> Result<String> {
    let lock = std::fs::read_to_string(paths::repo_root().join("Cargo.lock"))
        .context("reading Cargo.lock")?;
    let mut lines = lock.lines();
    while let Some(line) = lines.next() {
        if line == "name = \"wasm-bindgen\""
            && let Some(v) = lines.next().and_then(|l| l.strip_prefix("version = \""))
        {
            return Ok(v.trim_end_matches('"').to_string());
        }
    }
    bail!("wasm-bindgen is not in Cargo.lock")
}

fn ensure_wasm_target() -> Result<()> {
    let out = Command::new("rustup").args(["target", "list", "--installed"]).output();
    if let Ok(out) = out
        && !String::from_utf8_lossy(&out.stdout).lines().any(|l| l == WASM_TARGET)
    {
        run(Command::new("rustup").args(["target", "add", WASM_TARGET]))?;
    }
    Ok(())
}

fn ensure_wasm_bindgen_cli(version: &str) -> Result<PathBuf> {
    let root = paths::tools_dir().join(format!("wasm-bindgen-{version}"));
    let bin = root.join("bin/wasm-bindgen");
    if !bin.exists() {
        eprintln!("web: installing wasm-bindgen-cli {version} (once, a few minutes)");
        run(cargo()
            .args(["install", "wasm-bindgen-cli", "--version", version, "--root"])
            .arg(&root))?;
    }
    Ok(bin)
}

/// `cargo xtask web`: compile `wasm-edge` for the browser and generate its JS bindings in `web/pkg`.
pub fn build() -> Result<()> {
    ensure_wasm_target()?;
    run(cargo().args(["build", "--package", "wasm-edge", "--release", "--target", WASM_TARGET]))?;
    let bindgen = ensure_wasm_bindgen_cli(&locked_wasm_bindgen_version()?)?;
    let wasm = target_dir().join(WASM_TARGET).join("release/wasm_edge.wasm");
    let out_dir = paths::repo_root().join("web/pkg");
    run(Command::new(bindgen)
        .arg("--target")
        .arg("web")
        .arg("--out-dir")
        .arg(&out_dir)
        .arg(&wasm))?;
    let size = std::fs::metadata(out_dir.join("wasm_edge_bg.wasm")).map(|m| m.len()).unwrap_or(0);
    eprintln!("web: wrote {} ({:.1} MB wasm)", out_dir.display(), size as f64 / 1e6);
    Ok(())
}

/// A running cloud-server, killed on drop.
pub struct Server {
    child: Child,
    /// Base URL, e.g. `http://127.0.0.1:40123/`.
    pub url: String,
}

impl Server {
    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start the server binary that `cargo test --workspace` just built (building it separately
/// would resolve features differently and recompile burn) on a free port; returns once it prints
/// its URL.
pub(crate) fn start_server(extra: &[String]) -> Result<Server> {
    let bin = target_dir().join("debug/cloud-server");
    let root = paths::repo_root();
    let mut child = Command::new(&bin)
        .args(["--port", "0"])
        .arg("--web-dir")
        .arg(root.join("web"))
        .arg("--cost-table")
        .arg(root.join("profiles/cost-table.json"))
        .args(extra)
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let stdout = child.stdout.take().context("server stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let url = loop {
        match lines.next() {
            Some(Ok(line)) => {
                if let Some(url) = line.strip_prefix("split-inference demo: ") {
                    break url.to_string();
                }
            }
            _ => bail!("the server exited before listening; see its log above"),
        }
    };
    Ok(Server { child, url })
}

/// `cargo xtask demo [server flags]`: everything the demo needs, then the server in the foreground.
pub fn demo(args: &[String]) -> Result<()> {
    crate::calibrate::ensure_calibration()?;
    build()?;
    let args = args.strip_prefix(&["--".to_string()]).unwrap_or(args);
    run(cargo().args(["run", "--package", "cloud-server", "--"]).args(args))
}

fn ensure_browser_tools(dir: &Path) -> Result<()> {
    if !Path::new("/usr/bin/chromium").exists() {
        eprintln!("test: installing Debian's chromium for the browser tests");
        run(Command::new("apt-get")
            .args(["install", "-y", "-q", "chromium"])
            .env("DEBIAN_FRONTEND", "noninteractive"))
        .or_else(|_| {
            run(Command::new("apt-get").args(["update", "-q"]))?;
            run(Command::new("apt-get")
                .args(["install", "-y", "-q", "chromium"])
                .env("DEBIAN_FRONTEND", "noninteractive"))
        })
        .context("the browser tests need /usr/bin/chromium (apt-get install chromium)")?;
    }
    if !dir.join("node_modules/playwright-core").exists() {
        run(Command::new("npm").args(["ci", "--no-audit", "--no-fund"]).current_dir(dir))?;
    }
    Ok(())
}

/// Edge profiles from headless Chromium (wasm CPU and WebGPU), measured against a fresh server;
/// returns the JSON file `web/tests/profile.mjs` wrote.
pub fn browser_profile() -> Result<PathBuf> {
    crate::calibrate::ensure_calibration()?;
    build()?;
    let web = paths::repo_root().join("web");
    ensure_browser_tools(&web)?;
    run(cargo().args(["build", "--package", "cloud-server"]))?;
    let server = start_server(&[])?;
    let out = std::env::temp_dir().join("splitinfer-browser-profile.json");
    run(Command::new("node")
        .arg("tests/profile.mjs")
        .current_dir(&web)
        .env("SPLIT_URL", &server.url)
        .env("OUT", &out))?;
    drop(server);
    Ok(out)
}

/// Everything the lab runs: weights, calibration, the wasm module, the workspace's binaries
/// (built as `cargo test` builds them, so the two share compiled units), Chromium and playwright.
pub fn prepare_binaries() -> Result<()> {
    setup::ensure_weights()?;
    crate::calibrate::ensure_calibration()?;
    build()?;
    run(cargo().args(["test", "--workspace", "--no-run"]))?;
    ensure_browser_tools(&paths::repo_root().join("web"))
}

/// `cargo xtask test`: weights, wasm build, Rust tests, then the headless-browser tests.
pub fn test_all() -> Result<()> {
    let weights = setup::ensure_weights()?;
    let calibration = crate::calibrate::ensure_calibration()?;
    build()?;
    run(cargo()
        .args(["test", "--workspace"])
        .env("SPLIT_WEIGHTS", &weights)
        .env("SPLIT_CALIBRATION", &calibration))?;
    let web = paths::repo_root().join("web");
    ensure_browser_tools(&web)?;
    let server = start_server(&[
        "--weights".into(),
        weights.display().to_string(),
        "--calibration".into(),
        calibration.display().to_string(),
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
    eprintln!("test: all passed");
    Ok(())
}
