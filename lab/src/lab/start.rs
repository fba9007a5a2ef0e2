//! The start-up lab (`./run.sh lab --start`): what the demo page downloads and how long it
//! takes to be ready and to answer, per placement (cloud only, block5, block11, edge only),
//! cold (a fresh browser profile) and warm (a reload: weights from Cache Storage), on loopback
//! and over kernel-shaped links. Chromium and the link emulator run in a network namespace
//! whose veth is shaped with `tc tbf` at the link's rates (one link for all of the page's
//! connections, as a phone's radio is), the emulator adding the round trip; the server listens
//! on the veth's host end. The page is opened at the emulator's loopback address, a secure
//! context as an HTTPS site would be. Writes `reports/lab-start/README.md` and `data.json`.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

use crate::netem::PROFILES;
use anyhow::{Context, Result, bail};

use super::netns::Netns;
use super::{read_json, server_args};
use xtask::cmd::target_dir;
use xtask::paths;
use xtask::server::start_server;

/// Where the report goes unless `--out` says otherwise.
pub fn default_out() -> PathBuf {
    paths::repo_root().join("reports/lab-start")
}

/// The link emulator inside the namespace, killed on drop.
struct Proxy(Child);

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start `netem --link rtt:<ms>` in `ns` in front of `upstream`; returns it and its address.
fn start_delay(ns: &Netns, upstream: &str, rtt_ms: f64) -> Result<(Proxy, String)> {
    let bin = target_dir().join("debug/netem");
    let mut child = ns
        .command(&bin)
        .args(["--upstream", upstream, "--link", &format!("rtt:{rtt_ms}")])
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let stdout = child.stdout.take().context("netem stdout")?;
    let proxy = Proxy(child);
    let mut lines = BufReader::new(stdout).lines();
    for line in lines.by_ref() {
        if let Some(addr) = line?.strip_prefix("netem: listening on ") {
            // It prints more later (when its clock starts): keep reading, or it dies writing.
            std::thread::spawn(move || lines.for_each(drop));
            return Ok((proxy, addr.trim().to_string()));
        }
    }
    bail!("netem exited before listening")
}

/// Run `tests/coldstart.mjs` in `ns` against `url`; its rows, each with `link`.
fn measure(ns: &Netns, url: &str, link: &str) -> Result<Vec<serde_json::Value>> {
    let web = paths::repo_root().join("web");
    let out = std::env::temp_dir().join(format!("splitinfer-start-{link}.json"));
    let status = ns
        .command(Path::new("node"))
        .arg("tests/coldstart.mjs")
        .current_dir(&web)
        .env("SPLIT_URL", url)
        .env("JSON_OUT", &out)
        .status()
        .context("running node tests/coldstart.mjs")?;
    anyhow::ensure!(status.success(), "tests/coldstart.mjs failed on {link}: {status}");
    let mut rows: Vec<serde_json::Value> = read_json(&out)?;
    std::fs::remove_file(&out)?;
    for r in &mut rows {
        r["link"] = link.into();
    }
    Ok(rows)
}

/// Measure every placement on loopback and on each of `links`; write the report to `out`.
///
/// # Errors
/// Without root (the namespace), or when the server, the emulator or the browser fails.
pub fn lab(links: &[String], out: &Path, command: &str) -> Result<()> {
    let ns = Netns::create()?;
    // The namespace's address is this machine's own (a veth pair): clear text never leaves it.
    let server = start_server(&server_args(&["--host", &ns.host_ip, "--allow-plaintext"]))?;
    let upstream = server.url.trim_start_matches("http://").trim_end_matches('/').to_string();
    let per_link =
        over_links(&ns, &upstream, links, "start-up", |url, link| measure(&ns, url, link))?;
    drop(server);
    let rows: Vec<_> = per_link.into_iter().flat_map(|(_, rows)| rows).collect();
    write(&rows, links, out, command)
}

/// `measure(url, link)` on loopback (the veth unshaped, no delay) and then over each of
/// `links` (the veth shaped at the profile's rates, the emulator adding its round trip), the
/// page at the emulator's loopback address in the namespace: a secure context (Cache Storage,
/// cross-origin isolation and the threaded build), as on an HTTPS site. `what` names the lab
/// in the progress lines.
pub(super) fn over_links<T>(
    ns: &Netns,
    upstream: &str,
    links: &[String],
    what: &str,
    mut measure: impl FnMut(&str, &str) -> Result<T>,
) -> Result<Vec<(String, T)>> {
    eprintln!("lab: {what} on loopback");
    let (proxy, addr) = start_delay(ns, upstream, 0.0)?;
    let mut out = vec![("loopback".to_string(), measure(&format!("http://{addr}/"), "loopback")?)];
    drop(proxy);
    for name in links {
        let link = PROFILES
            .iter()
            .find(|p| p.name == name)
            .with_context(|| format!("unknown link {name}; use a profile such as 4g or 3g"))?;
        eprintln!("lab: {what} over {name}");
        ns.shape(link)?;
        let (_proxy, addr) = start_delay(ns, upstream, link.rtt_ms)?;
        out.push((name.clone(), measure(&format!("http://{addr}/"), name)?));
    }
    Ok(out)
}

fn write(rows: &[serde_json::Value], links: &[String], out: &Path, command: &str) -> Result<()> {
    std::fs::create_dir_all(out)?;
    let commit = super::machine("").commit;
    let data = serde_json::json!({ "command": command, "commit": commit, "rows": rows });
    std::fs::write(out.join("data.json"), serde_json::to_string_pretty(&data)?)?;
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Start-up of the demo page, per placement\n\n`{command}` at {commit}. Chromium \
         (CPU backend, its relaxed-SIMD threaded build), the demo page with `?weights=`: `none` \
         for cloud only, `block5` and `block11` for those splits, `all` for edge only. Cold: \
         a fresh browser profile; warm: a reload of the same profile, the weights and \
         calibration read from Cache Storage. Bytes as transferred (the server gzips every \
         response; float weights shrink by 5–7%). Ready: navigation to the page saying \
         ready; first answer: to chelsea's top-5 in that placement, the sample photo's \
         download (240 kB) included, and for cloud only its upload. The browser runs in a network namespace and opens the page at the \
         link emulator's loopback address there (a secure context, like an HTTPS site: Cache \
         Storage and the threaded build); loopback: the veth unshaped, no delay; other links \
         (`{}`): `tc tbf` on the veth at the profile's rates for all of the page's \
         connections together, the emulator adding the round trip.\n",
        links.join(", ")
    );
    md.push_str("| link | placement | visit | bytes | weights | calibration | wasm | ready s | first answer s |\n|---|---|---|---|---|---|---|---|---|\n");
    let kb = |v: &serde_json::Value| format!("{:.0} kB", v.as_f64().unwrap_or(f64::NAN) / 1e3);
    for r in rows {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {:.1} | {:.1} |",
            r["link"].as_str().unwrap_or("?"),
            r["mode"].as_str().unwrap_or("?"),
            r["visit"].as_str().unwrap_or("?"),
            kb(&r["bytes"]),
            kb(&r["by_kind"]["weights"]),
            kb(&r["by_kind"]["calibration"]),
            kb(&r["by_kind"]["wasm"]),
            r["ready_s"].as_f64().unwrap_or(f64::NAN),
            r["first_s"].as_f64().unwrap_or(f64::NAN),
        );
    }
    std::fs::write(out.join("README.md"), md)?;
    Ok(())
}
