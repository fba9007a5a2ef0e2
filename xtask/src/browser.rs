//! Headless Chromium and the node tools that drive it.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};

use crate::cmd::run;

/// Debian's chromium and `web/node_modules` (playwright-core, binaryen, typescript), installed
/// when missing.
pub fn ensure_browser_tools(dir: &Path) -> Result<()> {
    if !Path::new("/usr/bin/chromium").exists() {
        eprintln!("test: installing Debian's chromium for the browser tests");
        apt_install(&["chromium"])
            .context("the browser tests need /usr/bin/chromium (apt-get install chromium)")?;
    }
    ensure_node_modules(dir)
}

/// `npm ci` in `dir` when a tool of its package.json is missing (a fresh clone, or a checkout
/// older than the tool).
pub fn ensure_node_modules(dir: &Path) -> Result<()> {
    if ["node_modules/playwright-core", "node_modules/.bin/tsc", "node_modules/.bin/wasm-opt"]
        .iter()
        .any(|p| !dir.join(p).exists())
    {
        run(Command::new("npm").args(["ci", "--no-audit", "--no-fund"]).current_dir(dir))?;
    }
    Ok(())
}

/// `apt-get install` of Debian packages, with an `apt-get update` first if that fails (a new
/// machine's package lists may be missing or old).
pub fn apt_install(packages: &[&str]) -> Result<()> {
    let install = || {
        run(Command::new("apt-get")
            .args(["install", "-y", "-q"])
            .args(packages)
            .env("DEBIAN_FRONTEND", "noninteractive"))
    };
    install().or_else(|_| {
        run(Command::new("apt-get").args(["update", "-q"]))?;
        install()
    })
}
