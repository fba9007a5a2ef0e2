//! The cloud-server binary for the demo, the tests and the lab.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result, bail};

use crate::cmd::{build_workspace, run, target_dir};
use crate::paths;

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
    crate::wasm_build::build()?;
    build_workspace()?;
    let bin = target_dir().join("debug/cloud-server");
    run(Command::new(&bin).args(args).current_dir(paths::repo_root()))
}
