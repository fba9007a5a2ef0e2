//! The headless browsers (Chromium, Firefox ESR, WebKitGTK on Xvfb) and the node tools that
//! drive them.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};

use crate::cmd::run;

/// The Debian packages the browser tests drive, with the binary each one installs: WebKitGTK's
/// WebDriver (its MiniBrowser comes with it) has no headless mode, so it draws on Xvfb.
pub const BROWSERS: [(&str, &str); 4] = [
    ("chromium", "/usr/bin/chromium"),
    ("firefox-esr", "/usr/bin/firefox-esr"),
    ("webkit2gtk-driver", "/usr/bin/WebKitWebDriver"),
    ("xvfb", "/usr/bin/Xvfb"),
];

/// The browsers ([`BROWSERS`]) and `web/node_modules` (playwright-core, puppeteer-core,
/// binaryen, typescript), installed when missing.
pub fn ensure_browser_tools(dir: &Path) -> Result<()> {
    let missing = missing_packages(&BROWSERS);
    if !missing.is_empty() {
        eprintln!("test: installing Debian's {} for the browser tests", missing.join(" and "));
        apt_install(&missing).with_context(|| {
            format!("the browser tests need {} (apt-get install)", missing.join(" and "))
        })?;
    }
    ensure_node_modules(dir)
}

/// The packages of `packages` (package, the binary it installs) whose binary is not there.
pub fn missing_packages<'a>(packages: &[(&'a str, &str)]) -> Vec<&'a str> {
    packages.iter().filter(|(_, bin)| !Path::new(bin).exists()).map(|(p, _)| *p).collect()
}

/// `npm ci` in `dir` when a tool of its package.json is missing (a fresh clone, or a checkout
/// older than the tool).
pub fn ensure_node_modules(dir: &Path) -> Result<()> {
    if [
        "node_modules/playwright-core",
        "node_modules/puppeteer-core",
        "node_modules/.bin/tsc",
        "node_modules/.bin/wasm-opt",
    ]
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
