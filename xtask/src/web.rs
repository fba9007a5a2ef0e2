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

/// One build of the edge module the page may load (`web/split-client.js` picks).
struct Variant {
    /// Folder under `web/` the bindings go to.
    dir: &'static str,
    /// Cargo features of `wasm-edge`.
    features: &'static str,
    /// Target features for this build, when not just `.cargo/config.toml`'s `+simd128`; such a
    /// build gets its own target directory so the builds do not overwrite each other's units.
    target_features: Option<&'static str>,
}

/// WebGPU + CPU for browsers with WebGPU; CPU-only (no cubecl/wgpu: a fraction of the size)
/// for the rest; the same with relaxed SIMD's fused multiply-add for engines that validate it.
const VARIANTS: [Variant; 3] = [
    Variant { dir: "pkg", features: "webgpu", target_features: None },
    Variant { dir: "pkg-cpu", features: "", target_features: None },
    Variant {
        dir: "pkg-cpu-relaxed",
        features: "",
        target_features: Some("+simd128,+relaxed-simd"),
    },
];

/// binaryen's optimizer from npm (Debian's v108 produces modules that fail to instantiate).
fn wasm_opt() -> Result<PathBuf> {
    let web = paths::repo_root().join("web");
    let bin = web.join("node_modules/.bin/wasm-opt");
    if !bin.exists() {
        run(Command::new("npm").args(["ci", "--no-audit", "--no-fund"]).current_dir(&web))?;
    }
    Ok(bin)
}

/// What identifies a compiler output: a hash of its bytes (the variants share one output path,
/// so cargo relinks it whenever the variant changes; the bytes tell whether it really changed).
fn source_id(wasm: &Path) -> Result<String> {
    use sha2::Digest;
    let bytes = std::fs::read(wasm).with_context(|| format!("{}", wasm.display()))?;
    let hash = sha2::Sha256::digest(&bytes);
    Ok(hash.iter().map(|b| format!("{b:02x}")).collect())
}

fn gzip_len(path: &Path) -> Result<u64> {
    let out = Command::new("gzip").args(["-9", "-c"]).arg(path).output()?;
    anyhow::ensure!(out.status.success(), "gzip failed on {}", path.display());
    Ok(out.stdout.len() as u64)
}

/// `cargo xtask web`: compile `wasm-edge` for the browser, every variant, generate the JS
/// bindings in `web/pkg*` and optimise them.
pub fn build() -> Result<()> {
    ensure_wasm_target()?;
    let bindgen = ensure_wasm_bindgen_cli(&locked_wasm_bindgen_version()?)?;
    let opt = wasm_opt()?;
    let mut sizes = Vec::new();
    for v in &VARIANTS {
        let mut cmd = cargo();
        cmd.args(["build", "--package", "wasm-edge", "--profile", "wasm", "--target", WASM_TARGET]);
        if !v.features.is_empty() {
            cmd.args(["--features", v.features]);
        }
        let mut target = target_dir();
        if let Some(features) = v.target_features {
            target = target.join(v.dir);
            cmd.env("CARGO_TARGET_DIR", &target).env(
                "CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS",
                format!("-C target-feature={features}"),
            );
        }
        run(&mut cmd)?;
        let wasm = target.join(WASM_TARGET).join("wasm/wasm_edge.wasm");
        let out_dir = paths::repo_root().join("web").join(v.dir);
        let file = out_dir.join("wasm_edge_bg.wasm");
        // Bindings and optimisation take minutes on the WebGPU build: skip them when this
        // compiler output is the one the folder was made from.
        let stamp = out_dir.join(".built-from");
        let source = source_id(&wasm)?;
        if file.exists() && std::fs::read_to_string(&stamp).is_ok_and(|s| s == source) {
            sizes.push((v.dir, 0, std::fs::metadata(&file)?.len(), gzip_len(&file)?));
            continue;
        }
        run(Command::new(&bindgen)
            .args(["--target", "web", "--remove-name-section", "--remove-producers-section"])
            .arg("--out-dir")
            .arg(&out_dir)
            .arg(&wasm))?;
        let raw = std::fs::metadata(&file)?.len();
        let mut o = Command::new(&opt);
        o.arg(&file).arg("-o").arg(&file).args(["-O3", "--strip-debug", "--strip-producers"]);
        for f in [
            "simd",
            "bulk-memory",
            "nontrapping-float-to-int",
            "sign-ext",
            "mutable-globals",
            "reference-types",
            "multivalue",
        ] {
            o.arg(format!("--enable-{f}"));
        }
        if v.target_features.is_some_and(|f| f.contains("relaxed-simd")) {
            o.arg("--enable-relaxed-simd");
        }
        run(&mut o)?;
        std::fs::write(&stamp, &source)?;
        let size = std::fs::metadata(&file)?.len();
        sizes.push((v.dir, raw, size, gzip_len(&file)?));
    }
    for (dir, raw, size, gz) in sizes {
        let before = if raw > 0 {
            format!(" (before wasm-opt {:.2} MB)", raw as f64 / 1e6)
        } else {
            " (up to date)".into()
        };
        eprintln!(
            "web: web/{dir}/wasm_edge_bg.wasm {:.2} MB{before}, {:.2} MB gzip -9",
            size as f64 / 1e6,
            gz as f64 / 1e6
        );
    }
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
    habits()?;
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
