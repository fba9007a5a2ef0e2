//! Headless Chromium and the node tools that drive it.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::cmd::{build_workspace, run};
use crate::paths;
use crate::server::start_server;

/// Debian's chromium and `web/node_modules` (playwright-core, binaryen, typescript), installed
/// when missing.
pub fn ensure_browser_tools(dir: &Path) -> Result<()> {
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
    // `npm ci` again when a tool of package.json is missing (a checkout older than it).
    if ["node_modules/playwright-core", "node_modules/.bin/tsc"]
        .iter()
        .any(|p| !dir.join(p).exists())
    {
        run(Command::new("npm").args(["ci", "--no-audit", "--no-fund"]).current_dir(dir))?;
    }
    Ok(())
}

/// Edge profiles from headless Chromium (wasm CPU and WebGPU), measured against a fresh server;
/// returns the JSON file `web/tests/profile.mjs` wrote.
pub fn browser_profile() -> Result<PathBuf> {
    crate::calibrate::ensure_calibration()?;
    crate::wasm_build::build()?;
    let web = paths::repo_root().join("web");
    ensure_browser_tools(&web)?;
    build_workspace()?;
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
