//! The progressive lab (`./run.sh lab --progressive --images DIR`): how soon the light model's
//! answer comes and how soon the server's, per link. The demo page (CPU backend, the stages up
//! to block5 in full and the int8 light model for the rest) classifies photos at block5 with
//! `progressive: true` (`web/tests/progressive.mjs`), on loopback and over link profiles shaped
//! as in the start-up lab (a network namespace, `tc tbf` at the profile's rates, the link
//! emulator adding the round trip). Writes `reports/lab-progressive/README.md` and `data.json`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::netns::Netns;
use super::start::over_links;
use super::{read_json, server_args};
use xtask::paths;
use xtask::server::start_server;

/// Where the report goes unless `--out` says otherwise.
pub fn default_out() -> PathBuf {
    paths::repo_root().join("reports/lab-progressive")
}

/// Run `tests/progressive.mjs` in `ns` against `url`; its rows.
fn measure(
    ns: &Netns,
    url: &str,
    images: &Path,
    limit: usize,
    link: &str,
) -> Result<Vec<serde_json::Value>> {
    let out = std::env::temp_dir().join(format!("splitinfer-progressive-{link}.json"));
    let status = ns
        .command(Path::new("node"))
        .arg("tests/progressive.mjs")
        .current_dir(paths::repo_root().join("web"))
        .env("SPLIT_URL", url)
        .env("IMAGES", images)
        .env("LIMIT", limit.to_string())
        .env("JSON_OUT", &out)
        .status()
        .context("running node tests/progressive.mjs")?;
    anyhow::ensure!(status.success(), "tests/progressive.mjs failed on {link}: {status}");
    let rows: Vec<serde_json::Value> = read_json(&out)?;
    std::fs::remove_file(&out)?;
    Ok(rows)
}

/// The `q`-quantile of `v` (sorted here), nearest rank.
fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(((v.len() as f64 * q).ceil() as usize).saturating_sub(1)).copied().unwrap_or(f64::NAN)
}

/// Measure on loopback and on each of `links`; write the report to `out`.
///
/// # Errors
/// Without root (the namespace), or when the server, the emulator or the browser fails.
pub fn lab(links: &[String], images: &Path, limit: usize, out: &Path, command: &str) -> Result<()> {
    let ns = Netns::create()?;
    let server = start_server(&server_args(&["--host", &ns.host_ip, "--allow-plaintext"]))?;
    let upstream = server.url.trim_start_matches("http://").trim_end_matches('/').to_string();
    let all = over_links(&ns, &upstream, links, "progressive answers", |url, link| {
        measure(&ns, url, images, limit, link)
    })?;
    drop(server);
    write(&all, images, out, command)
}

fn write(
    all: &[(String, Vec<serde_json::Value>)],
    images: &Path,
    out: &Path,
    command: &str,
) -> Result<()> {
    std::fs::create_dir_all(out)?;
    let commit = super::machine("").commit;
    let data = serde_json::json!({
        "command": command, "commit": commit,
        "links": all.iter().map(|(l, rows)| serde_json::json!({ "link": l, "rows": rows })).collect::<Vec<_>>(),
    });
    std::fs::write(out.join("data.json"), serde_json::to_string_pretty(&data)?)?;
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Progressive answers: the light model's first, the server's after\n\n`{command}` at \
         {commit}. Chromium (CPU backend, its relaxed-SIMD threaded build), the demo page with \
         the stages up to block5 in full and the int8 light model for the rest; each photo of \
         `{}` classified at block5 (codec q6) with `progressive: true`, one after another. First: \
         from the call to the light model's answer reaching the page (or to the final answer \
         when the server's came first); final: to the server's answer. Differ: the two top-1s \
         disagree (the page then replaces the answer it showed). Links as in the start-up lab \
         (`tc tbf` at the profile's rates in a network namespace, the link emulator adding the \
         round trip).\n",
        images.display()
    );
    md.push_str("| link | photos | first P50 ms | first P95 ms | final P50 ms | final P95 ms | light answer first | top-1 differ |\n|---|---|---|---|---|---|---|---|\n");
    for (link, rows) in all {
        let col = |k: &str| rows.iter().filter_map(|r| r[k].as_f64()).collect::<Vec<_>>();
        let (mut first, mut fin) = (col("firstMs"), col("finalMs"));
        let n = rows.len().max(1) as f64;
        let partial = rows.iter().filter(|r| r["partial"].as_bool() == Some(true)).count();
        let differ = rows.iter().filter(|r| r["firstTop1"] != r["finalTop1"]).count();
        let _ = writeln!(
            md,
            "| {link} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0}% | {differ} ({:.1}%) |",
            rows.len(),
            quantile(&mut first, 0.5),
            quantile(&mut first, 0.95),
            quantile(&mut fin, 0.5),
            quantile(&mut fin, 0.95),
            100.0 * partial as f64 / n,
            100.0 * differ as f64 / n,
        );
    }
    std::fs::write(out.join("README.md"), md)?;
    Ok(())
}
