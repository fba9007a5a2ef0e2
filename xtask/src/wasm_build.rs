//! Building the wasm edge module: five variants into `web/pkg*`, bindings by wasm-bindgen at
//! the version in Cargo.lock, optimised by npm's binaryen.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::cmd::{cargo, run, target_dir, without_lints};
use crate::paths;
use crate::toolchain::{ensure_nightly, nightly_cargo};

/// The browser target.
pub const WASM_TARGET: &str = "wasm32-unknown-unknown";

/// The version of the package `name` in the lock file at `lock`.
#[cfg(test)]
fn locked_version(lock: &Path, name: &str) -> Result<String> {
    let text =
        std::fs::read_to_string(lock).with_context(|| format!("reading {}", lock.display()))?;
    let mut lines = text.lines();
    let wanted = format!("name = \"{name}\"");
    while let Some(line) = lines.next() {
        if line == wanted
            && let Some(v) = lines.next().and_then(|l| l.strip_prefix("version = \""))
        {
            return Ok(v.trim_end_matches('"').to_string());
        }
    }
    anyhow::bail!("{name} is not in {}", lock.display())
}

/// The wasm32 target of the stable toolchain, added with rustup when missing.
pub fn ensure_wasm_target() -> Result<()> {
    crate::toolchain::ensure_target(WASM_TARGET)
}

/// The crate that generates the modules' JavaScript bindings (`bindgen/`: wasm-bindgen's
/// generator as a library, at the version the workspace links).
const BINDGEN_CRATE: &str = "bindgen";

/// `split-bindgen`, compiled (once; cargo finds it fresh afterwards) in a target directory of
/// its own, so that it builds while the native tests do. Compiling the generator alone takes a
/// fraction of `cargo install wasm-bindgen-cli`, which also compiles that command's test
/// runner, HTTP client and TLS stack (13 of the cold run's minutes at a544a18).
fn ensure_bindgen() -> Result<PathBuf> {
    let manifest = paths::repo_root().join(BINDGEN_CRATE).join("Cargo.toml");
    let target = target_dir().join("bindgen");
    let mut c = cargo();
    without_lints(&mut c)
        .args(["build", "--release", "--locked", "--manifest-path"])
        .arg(&manifest)
        .env("CARGO_TARGET_DIR", &target);
    run(&mut c)?;
    Ok(target.join("release/split-bindgen"))
}

/// One build of the edge module the page may load (`web/split-client.js` picks).
struct Variant {
    /// Folder under `web/` the bindings go to.
    dir: &'static str,
    /// Cargo features of `wasm-edge` (`relaxed-simd` turns on relaxed SIMD in the kernels'
    /// functions only, so the crates around them are the plain-SIMD build's).
    features: &'static str,
    /// Target features for this build, when not just `.cargo/config.toml`'s `+simd128`; such a
    /// build compiles every crate again, in the target directory named beside them, apart from
    /// the builds with other flags so that they do not overwrite each other's units (those
    /// without share `browser/` under the target directory). Builds with the same flags share
    /// one: the two threaded builds differ in the kernels' feature only.
    target_features: Option<(&'static str, &'static str)>,
    /// Web Worker threads: shared memory, and the standard library rebuilt with atomics (which
    /// only a nightly compiler does: [`crate::toolchain::NIGHTLY`]).
    threads: bool,
    /// binaryen's optimisation level for this module ([`WASM_OPT_WEBGPU`], [`WASM_OPT_CPU`]).
    opt_level: &'static str,
}

/// `wasm-opt` on the WebGPU module (13.6 MB from wasm-bindgen, mostly cubecl and wgpu, which
/// run on the GPU's time, not the module's): measured on this module (npm binaryen 132, two
/// cores) -O1 takes 78 s and gives 12.8 MB, 2.77 MB gzipped; -O2 322 s, 12.2 / 2.93 MB; -O3
/// 339 s, 12.0 / 2.95 MB; none 13.6 / 2.82 MB. Gzipped (how the server sends it) -O1 is the
/// smallest and four times faster to make than -O3.
const WASM_OPT_WEBGPU: &str = "-O1";
/// `wasm-opt` on the CPU modules, where the network's compute runs in wasm: -O1 too. Measured
/// on the relaxed-SIMD module (2.42 MB from wasm-bindgen; npm binaryen, two cores with a build
/// beside it): -O1 18 s, 2.34 MB, 710 kB gzipped; -O3 94 s, 2.24 MB, 726 kB gzipped. The
/// page's own edge profile (`profileEdge(30)`, whole network, six alternating page loads of
/// each) gave -O1 33.1–52.7 ms (median 38.0) and -O3 36.0–52.5 ms (median 46.7): -O3 bought
/// no speed, a larger download and five times the time (reports/cold-test/README.md). Again
/// on that module with its fat LTO (1.82 MB from wasm-bindgen, nothing beside it): -O1 11 s,
/// 1.76 MB, 590 kB gzipped; -O3 35 s, 1.72 MB, 600 kB gzipped.
const WASM_OPT_CPU: &str = "-O1";

/// The threaded builds' target features: shared memory and the atomics it needs.
const THREADS_FEATURES: &str = "+atomics,+bulk-memory,+mutable-globals,+simd128";

/// WebGPU + CPU for browsers with WebGPU; CPU-only (no cubecl/wgpu: a fraction of the size)
/// for the rest; the same with relaxed SIMD's fused multiply-add for engines that validate it,
/// and both again with Web Worker threads for pages that are cross-origin isolated (Firefox
/// has threads and no relaxed SIMD: `web/tests/engines.mjs`).
const VARIANTS: [Variant; 5] = [
    Variant {
        dir: "pkg",
        features: "webgpu",
        target_features: None,
        threads: false,
        opt_level: WASM_OPT_WEBGPU,
    },
    Variant {
        dir: "pkg-cpu",
        features: "",
        target_features: None,
        threads: false,
        opt_level: WASM_OPT_CPU,
    },
    Variant {
        dir: "pkg-cpu-relaxed",
        features: "relaxed-simd,encrypted",
        target_features: None,
        threads: false,
        opt_level: WASM_OPT_CPU,
    },
    Variant {
        dir: "pkg-cpu-threads",
        features: "threads,relaxed-simd,encrypted",
        target_features: Some(("pkg-cpu-threads", THREADS_FEATURES)),
        threads: true,
        opt_level: WASM_OPT_CPU,
    },
    Variant {
        dir: "pkg-cpu-threads-simd128",
        features: "threads",
        target_features: Some(("pkg-cpu-threads", THREADS_FEATURES)),
        threads: true,
        opt_level: WASM_OPT_CPU,
    },
];

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

/// The file in each module folder naming the compiler output and `wasm-opt` level it was made
/// from.
const STAMP: &str = ".built-from";

/// The build every browser can run (simd128, one thread), and the one the client falls back
/// to when the build it picked is missing: the demo serves as soon as this one is made.
pub const FALLBACK_BUILD: &str = "pkg-cpu";

/// The folders under `web/` the browser builds go to, in the order [`build`] makes them (the
/// variants' `dir`s; a test keeps the two lists together).
pub const BUILD_DIRS: [&str; 5] =
    ["pkg", "pkg-cpu", "pkg-cpu-relaxed", "pkg-cpu-threads", "pkg-cpu-threads-simd128"];

/// `cargo xtask web`: compile `wasm-edge` for the browser, every variant, generate the JS
/// bindings in `web/pkg*` and optimise them.
pub fn build() -> Result<()> {
    build_only(&BUILD_DIRS)
}

/// [`build`] for the variants whose folders `dirs` names, in that order.
///
/// A module's bindings and `wasm-opt` (single-threaded, minutes on the WebGPU module) run in a
/// thread of their own while the next module compiles: on two cores the compile of one crate
/// at a time (one codegen unit, fat LTO) leaves a core free for them. Each folder is made in
/// a hidden folder of `web/` and moved into place whole, so a server serving the page
/// meanwhile never hands out half a module.
pub fn build_only(dirs: &[&str]) -> Result<()> {
    ensure_wasm_target()?;
    let bindgen = ensure_bindgen()?;
    let opt = wasm_opt()?;
    let mut finishing = Vec::new();
    for dir in dirs {
        let v = VARIANTS
            .iter()
            .find(|v| v.dir == *dir)
            .with_context(|| format!("no browser build makes web/{dir}"))?;
        let mut cmd = if v.threads {
            ensure_nightly(&["rust-src"])?;
            let mut c = nightly_cargo();
            c.args(["build", "-Z", "build-std=panic_abort,std"]);
            c
        } else {
            let mut c = cargo();
            without_lints(&mut c).arg("build");
            c
        };
        cmd.args(["--package", "wasm-edge", "--profile", "wasm", "--target", WASM_TARGET]);
        if !v.features.is_empty() {
            cmd.args(["--features", v.features]);
        }
        // Target directories of their own, apart from the native one: the browser modules
        // build while the tests do, and cargo locks a target directory for one build at a time.
        let mut target = target_dir().join("browser");
        if let Some((folder, features)) = v.target_features {
            target = target_dir().join(folder);
            let mut flags = format!("-C target-feature={features}");
            if v.threads {
                for arg in THREADS_LINK_ARGS {
                    flags.push_str(&format!(" -C link-arg={arg}"));
                }
            }
            cmd.env("CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS", flags);
        }
        cmd.env("CARGO_TARGET_DIR", &target);
        run(&mut cmd)?;
        let wasm = target.join(WASM_TARGET).join("wasm/wasm_edge.wasm");
        let out_dir = paths::repo_root().join("web").join(v.dir);
        // Bindings and optimisation take minutes on the WebGPU build: skip them when this
        // compiler output is the one the folder was made from.
        let stamp = out_dir.join(STAMP);
        let source = format!("{} {}", source_id(&wasm)?, v.opt_level);
        let file = out_dir.join("wasm_edge_bg.wasm");
        if file.exists() && std::fs::read_to_string(&stamp).is_ok_and(|s| s == source) {
            finishing.push(std::thread::spawn(move || Ok((v.dir, None))));
            continue;
        }
        // The next variant may overwrite the compiler's output (pkg and pkg-cpu share a
        // target directory, and so do the threaded builds): the thread works on a copy.
        let input = target_dir().join(format!("{}.compiled.wasm", v.dir));
        std::fs::copy(&wasm, &input).with_context(|| format!("copying {}", wasm.display()))?;
        let (bindgen, opt) = (bindgen.clone(), opt.clone());
        finishing.push(std::thread::spawn(move || {
            let staging = paths::repo_root().join("web").join(format!(".{}.building", v.dir));
            if staging.exists() {
                std::fs::remove_dir_all(&staging)?;
            }
            let raw = bind_and_optimise(v, &bindgen, &opt, &input, &staging)?;
            std::fs::remove_file(&input)?;
            std::fs::write(staging.join(STAMP), &source)?;
            if out_dir.exists() {
                std::fs::remove_dir_all(&out_dir)?;
            }
            std::fs::rename(&staging, &out_dir)
                .with_context(|| format!("moving {} into place", staging.display()))?;
            Ok((v.dir, Some(raw)))
        }));
    }
    let mut failed = None;
    for t in finishing {
        match t
            .join()
            .map_err(|_| anyhow::anyhow!("a module's optimisation panicked"))
            .and_then(|r| r)
        {
            Ok((dir, raw)) => {
                let file = paths::repo_root().join("web").join(dir).join("wasm_edge_bg.wasm");
                let size = std::fs::metadata(&file)?.len();
                let before = raw.map_or(" (up to date)".into(), |raw| {
                    format!(" (before wasm-opt {:.2} MB)", raw as f64 / 1e6)
                });
                eprintln!(
                    "web: web/{dir}/wasm_edge_bg.wasm {:.2} MB{before}, {:.2} MB gzip -9",
                    size as f64 / 1e6,
                    gzip_len(&file)? as f64 / 1e6
                );
            }
            Err(e) => failed = failed.or(Some(e)),
        }
    }
    failed.map_or(Ok(()), Err)
}

/// wasm-bindgen's bindings for `input` into `out_dir`, then `wasm-opt` on the module at the
/// variant's level; returns the module's size before `wasm-opt`.
fn bind_and_optimise(
    v: &Variant,
    bindgen: &Path,
    opt: &Path,
    input: &Path,
    out_dir: &Path,
) -> Result<u64> {
    run(Command::new(bindgen).arg(input).arg(out_dir).arg("wasm_edge"))?;
    let file = out_dir.join("wasm_edge_bg.wasm");
    let raw = std::fs::metadata(&file)?.len();
    let mut o = Command::new(opt);
    o.arg(&file).arg("-o").arg(&file).args([v.opt_level, "--strip-debug", "--strip-producers"]);
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
    if v.features.contains("relaxed-simd") {
        o.arg("--enable-relaxed-simd");
    }
    if v.threads {
        o.arg("--enable-threads");
    }
    run(&mut o)?;
    Ok(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_build_folders_are_the_variants_folders() {
        assert_eq!(VARIANTS.map(|v| v.dir), BUILD_DIRS);
        assert!(BUILD_DIRS.contains(&FALLBACK_BUILD));
        // The fallback must run everywhere: no target features beyond the default simd128,
        // no threads, no WebGPU.
        let fallback = VARIANTS.iter().find(|v| v.dir == FALLBACK_BUILD).unwrap();
        assert!(fallback.features.is_empty() && fallback.target_features.is_none());
        assert!(!fallback.threads);
    }

    /// The bindings' generator must be the release the modules link: the same version in
    /// both lock files.
    #[test]
    fn the_bindgen_crate_generates_for_the_linked_wasm_bindgen() {
        let root = paths::repo_root();
        let linked = locked_version(&root.join("Cargo.lock"), "wasm-bindgen").unwrap();
        let generator = root.join(BINDGEN_CRATE).join("Cargo.lock");
        assert_eq!(locked_version(&generator, "wasm-bindgen-cli-support").unwrap(), linked);
        assert_eq!(locked_version(&generator, "wasm-bindgen-shared").unwrap(), linked);
    }
}
