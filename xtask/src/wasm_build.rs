//! Building the wasm edge module: four variants into `web/pkg*`, bindings by wasm-bindgen at
//! the version in Cargo.lock, optimised by npm's binaryen.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::cmd::{cargo, run, target_dir};
use crate::paths;

/// The browser target.
pub const WASM_TARGET: &str = "wasm32-unknown-unknown";

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

pub fn ensure_wasm_target() -> Result<()> {
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
    /// Web Worker threads: shared memory, and the standard library rebuilt with atomics (which
    /// only a nightly compiler does: [`THREADS_TOOLCHAIN`]).
    threads: bool,
}

/// WebGPU + CPU for browsers with WebGPU; CPU-only (no cubecl/wgpu: a fraction of the size)
/// for the rest; the same with relaxed SIMD's fused multiply-add for engines that validate it,
/// and that again with Web Worker threads for pages that are cross-origin isolated.
const VARIANTS: [Variant; 4] = [
    Variant { dir: "pkg", features: "webgpu", target_features: None, threads: false },
    Variant { dir: "pkg-cpu", features: "", target_features: None, threads: false },
    Variant {
        dir: "pkg-cpu-relaxed",
        features: "",
        target_features: Some("+simd128,+relaxed-simd"),
        threads: false,
    },
    Variant {
        dir: "pkg-cpu-threads",
        features: "threads",
        target_features: Some("+atomics,+bulk-memory,+mutable-globals,+simd128,+relaxed-simd"),
        threads: true,
    },
];

/// The nightly the threaded build is made with, pinned so that a fresh machine builds what
/// was tested (`-Z build-std` has no stable equivalent).
pub const THREADS_TOOLCHAIN: &str = "nightly-2026-05-20";

/// Linker arguments of a threaded module: memory imported and shared between the workers
/// (at most 1 GiB: a shared memory needs a maximum), and the thread-local storage symbols
/// wasm-bindgen initialises in each worker.
const THREADS_LINK_ARGS: [&str; 7] = [
    "--shared-memory",
    "--max-memory=1073741824",
    "--import-memory",
    "--export=__wasm_init_tls",
    "--export=__tls_size",
    "--export=__tls_align",
    "--export=__tls_base",
];

/// Install the pinned nightly with the standard library's sources, once: later builds only
/// ask rustup what is installed (no download, no network).
fn ensure_threads_toolchain() -> Result<()> {
    let out = Command::new("rustup")
        .args(["component", "list", "--installed", "--toolchain", THREADS_TOOLCHAIN])
        .output()?;
    // Fails when the toolchain is missing; lists `rust-src` when its sources are there too.
    if out.status.success() && String::from_utf8_lossy(&out.stdout).lines().any(|l| l == "rust-src")
    {
        return Ok(());
    }
    eprintln!("web: installing {THREADS_TOOLCHAIN} with rust-src for the threaded build (once)");
    run(Command::new("rustup").args([
        "toolchain",
        "install",
        THREADS_TOOLCHAIN,
        "--profile",
        "minimal",
        "--component",
        "rust-src",
    ]))
}

/// `cargo +nightly` through rustup, free of the environment the stable cargo running this
/// task set for its children.
fn nightly_cargo() -> Command {
    let mut c = Command::new("cargo");
    c.arg(format!("+{THREADS_TOOLCHAIN}")).current_dir(paths::repo_root());
    for var in ["CARGO", "RUSTC", "RUSTDOC", "RUSTUP_TOOLCHAIN", "RUSTC_WRAPPER"] {
        c.env_remove(var);
    }
    c
}

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
        let mut cmd = if v.threads {
            ensure_threads_toolchain()?;
            let mut c = nightly_cargo();
            c.args(["build", "-Z", "build-std=panic_abort,std"]);
            c
        } else {
            let mut c = cargo();
            c.arg("build");
            c
        };
        cmd.args(["--package", "wasm-edge", "--profile", "wasm", "--target", WASM_TARGET]);
        if !v.features.is_empty() {
            cmd.args(["--features", v.features]);
        }
        let mut target = target_dir();
        if let Some(features) = v.target_features {
            target = target.join(v.dir);
            let mut flags = format!("-C target-feature={features}");
            if v.threads {
                for arg in THREADS_LINK_ARGS {
                    flags.push_str(&format!(" -C link-arg={arg}"));
                }
            }
            cmd.env("CARGO_TARGET_DIR", &target)
                .env("CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS", flags);
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
        if v.threads {
            o.arg("--enable-threads");
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
