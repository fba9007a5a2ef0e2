//! `./run.sh docs`: the figures in the docs that come from a committed data file, written from
//! it. A doc marks such a block with a pair of comments naming it,
//!
//! ```text
//! <!-- generated: cost-table-timings (./run.sh docs) -->
//! ...
//! <!-- end generated -->
//! ```
//!
//! and this task replaces what lies between with what [`render`] makes of the data. `./run.sh
//! test` runs it in check mode (`--check`): a doc whose block differs from its data fails the
//! tests, so a re-measured cost table cannot leave old figures behind. Figures a doc quotes from
//! a one-off measurement name the command that made them instead. Both modes also check that
//! every relative link of the committed Markdown files leads to a file and heading that exist
//! ([`crate::doc_links`]).

use std::path::Path;

use anyhow::{Context, Result, bail};
use split_shared::plan::{CodecCost, CostTable};

use crate::paths;

/// Check or rewrite the generated blocks.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Fail when a block differs from its data instead of rewriting it.
    #[arg(long)]
    check: bool,
}

impl Args {
    /// Check mode, as the test command runs it.
    pub fn check() -> Self {
        Self { check: true }
    }
}

/// The docs that hold generated blocks.
const DOCS: [&str; 4] = ["README.md", "docs/adaptive.md", "docs/codec.md", "docs/llm.md"];

/// What the blocks are made from: the planner's cost table and the language model's
/// placements as the lab timed them.
struct Data {
    table: CostTable,
    llm_placements: serde_json::Value,
}

/// The lab's run of the language model's placements (`./run.sh llm-placements`).
const LLM_PLACEMENTS: &str = "reports/llm-placements/data.json";

const BEGIN: &str = "<!-- generated: ";
const END: &str = "<!-- end generated -->";

/// Run the task.
pub fn run(a: Args) -> Result<()> {
    let root = paths::repo_root();
    let placements = root.join(LLM_PLACEMENTS);
    let data = Data {
        table: cost_table(&root)?,
        llm_placements: serde_json::from_str(
            &std::fs::read_to_string(&placements)
                .with_context(|| format!("reading {}", placements.display()))?,
        )
        .with_context(|| format!("parsing {}", placements.display()))?,
    };
    let mut stale = Vec::new();
    for doc in DOCS {
        let path = root.join(doc);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let (new, blocks) = regenerate(&text, &data).with_context(|| format!("in {doc}"))?;
        if blocks == 0 {
            bail!("{doc} has no generated block; DOCS lists it");
        }
        if new != text {
            if a.check {
                stale.push(doc);
            } else {
                std::fs::write(&path, new)?;
                eprintln!("docs: rewrote {doc}");
            }
        }
    }
    if !stale.is_empty() {
        bail!(
            "{} disagree with profiles/cost-table.json or {LLM_PLACEMENTS}; run `./run.sh docs` \
             and commit the result",
            stale.join(", ")
        );
    }
    eprintln!("docs: generated blocks match their data");
    let files = crate::doc_links::markdown_files(&root)?;
    let broken = crate::doc_links::check(&root, &files)?;
    if !broken.is_empty() {
        let list: Vec<String> = broken.iter().map(ToString::to_string).collect();
        bail!("{} broken link(s) in the docs:\n  {}", broken.len(), list.join("\n  "));
    }
    eprintln!("docs: the links of {} Markdown files lead somewhere", files.len());
    Ok(())
}

fn cost_table(root: &Path) -> Result<CostTable> {
    let path = root.join("profiles/cost-table.json");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    CostTable::from_json(&text).map_err(anyhow::Error::msg)
}

/// `text` with every generated block rendered again, and how many blocks it has.
fn regenerate(text: &str, data: &Data) -> Result<(String, usize)> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut blocks = 0;
    while let Some(start) = rest.find(BEGIN) {
        let header_end = rest[start..].find("-->").context("an unclosed generated marker")? + start;
        let name = rest[start + BEGIN.len()..header_end]
            .split_whitespace()
            .next()
            .context("a generated marker without a name")?;
        let body_start = rest[header_end..].find('\n').context("a marker at the end")? + header_end;
        let end =
            rest[body_start..].find(END).with_context(|| format!("block {name} has no `{END}`"))?
                + body_start;
        out.push_str(&rest[..=body_start]);
        out.push_str(&render(name, data)?);
        out.push_str(END);
        rest = &rest[end + END.len()..];
        blocks += 1;
    }
    out.push_str(rest);
    Ok((out, blocks))
}

/// The block called `name`, rendered from its data (ending with a newline).
fn render(name: &str, data: &Data) -> Result<String> {
    let t = &data.table;
    match name {
        "cost-table-timings" => timings(t),
        "cost-table" => full_table(t),
        "default-codec" => default_codec(t),
        "llm-placements" => llm_placements(&data.llm_placements),
        _ => bail!("unknown generated block {name:?}"),
    }
}

/// The language model's placements on each link, measured and as the planner predicted them.
fn llm_placements(d: &serde_json::Value) -> Result<String> {
    let num = |v: &serde_json::Value, key: &str| {
        v[key].as_f64().with_context(|| format!("{LLM_PLACEMENTS}: no number {key:?}"))
    };
    let file_bytes = num(d, "file_bytes")?;
    let mut out = String::from(
        "| link | placement | first token (× cloud-only) | tokens/s (time a token × cloud-only) \
         | predicted: first token, tokens/s | edge downloads | bytes up / down |\n\
         | --- | --- | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for run in d["links"].as_array().context("no links")? {
        let link = &run["link"];
        let mut label = format!(
            "{} ({}/{} Mbit/s, {} ms)",
            link["name"].as_str().context("a link without a name")?,
            num(link, "up_kbps")? / 1e3,
            num(link, "down_kbps")? / 1e3,
            num(link, "rtt_ms")?
        );
        for row in run["rows"].as_array().context("a link without rows")? {
            let placement = match row["placement"].as_str().context("a row without placement")? {
                "edge-only" => "edge-only",
                "u-split" => "U-split",
                "u-split-pipelined" => "U-split, prefill pipelined",
                "plain-split" => "plain split",
                "cloud-only" => "cloud-only",
                "u-split-via-member" => "U-split through a member, prefill pipelined",
                other => bail!("{LLM_PLACEMENTS}: an unknown placement {other:?}"),
            };
            let predicted = match (
                row["predicted_first_token_ms"].as_f64(),
                row["predicted_tokens_per_s"].as_f64(),
            ) {
                (Some(f), Some(t)) => format!("{f:.0} ms, {t:.1}"),
                _ => "–".into(),
            };
            let download = num(row, "edge_download_bytes")?;
            out += &format!(
                "| {label} | {placement} | {:.0} ms ({:.2}×) | {:.1} (× {:.2}) | {predicted} | \
                 {:.1} MB ({:.0}%) | {} / {} |\n",
                num(row, "first_token_ms")?,
                num(row, "first_token_vs_cloud")?,
                num(row, "tokens_per_s")?,
                num(row, "token_time_vs_cloud")?,
                download / 1e6,
                100.0 * download / file_bytes,
                thousands(num(row, "bytes_up")? as u64),
                thousands(num(row, "bytes_down")? as u64),
            );
            label.clear();
        }
    }
    Ok(out)
}

fn index(t: &CostTable, boundary: &str) -> Result<usize> {
    t.boundaries
        .iter()
        .position(|b| b == boundary)
        .with_context(|| format!("the cost table has no boundary {boundary}"))
}

fn edge_ms(t: &CostTable, profile: &str, k: usize) -> Option<f64> {
    t.edge.get(profile).and_then(|p| p.ms.get(k).copied().flatten())
}

fn ms(v: Option<f64>) -> String {
    match v {
        // Whole milliseconds once they are in the hundreds (the software WebGPU's).
        Some(v) if v >= 100.0 => thousands(v.round() as u64),
        Some(v) => format!("{:.1}", v.max(0.0)),
        None => "–".into(),
    }
}

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn codec<'a>(t: &'a CostTable, k: usize, setting: &str) -> Option<&'a CodecCost> {
    t.codecs.get(k)?.iter().find(|c| c.codec.to_string() == setting)
}

/// The README's table: edge and cloud ms at the two default splits, edge only and cloud only.
fn timings(t: &CostTable) -> Result<String> {
    let last = index(t, "logits")?;
    let mut s = String::from(
        "| split | edge native ms | edge wasm CPU ms | edge WebGPU (SwiftShader) ms | cloud ms |\n\
         | --- | --- | --- | --- | --- |\n",
    );
    let row = |label: &str, k: usize, cloud: Option<f64>| {
        format!(
            "| {label} | {} | {} | {} | {} |\n",
            ms(edge_ms(t, "native-flex", k)),
            ms(edge_ms(t, "browser-wasm-cpu", k)),
            ms(edge_ms(t, "browser-webgpu", k)),
            ms(cloud)
        )
    };
    s += &row("edge only", last, None);
    for b in ["block5", "block11"] {
        let k = index(t, b)?;
        s += &row(b, k, t.cloud_ms.get(k).copied().flatten());
    }
    s += &format!(
        "| cloud only (JPEG 224² upload, {:.1} kB) | – | – | – | {:.1} (decode included) |\n",
        t.image_bytes / 1000.0,
        t.cloud_only_ms
    );
    Ok(s)
}

fn with_bound(c: Option<&CodecCost>) -> String {
    match c {
        Some(c) => format!(
            "{} ({:.1}%, ≥ {:.1}%)",
            c.bytes.round(),
            100.0 * c.agreement,
            100.0 * c.reliable_agreement()
        ),
        None => "–".into(),
    }
}

/// docs/adaptive.md's table: every boundary's edge and cloud ms and the default codec's and q6's
/// bytes and agreement.
fn full_table(t: &CostTable) -> Result<String> {
    let default = split_shared::codec::DEFAULT_SETTING.to_string();
    let mut s = format!(
        "| boundary | edge: native flex | edge: browser wasm CPU | edge: browser WebGPU (SwiftShader) \
         | cloud (flex) | {default} bytes (agreement, bound) | q6 bytes (agreement, bound) |\n\
         |---|---|---|---|---|---|---|\n"
    );
    for (k, b) in t.boundaries.iter().enumerate() {
        s += &format!(
            "| {b} | {} | {} | {} | {} | {} | {} |\n",
            ms(edge_ms(t, "native-flex", k)),
            ms(edge_ms(t, "browser-wasm-cpu", k)),
            ms(edge_ms(t, "browser-webgpu", k)),
            ms(t.cloud_ms.get(k).copied().flatten()),
            with_bound(codec(t, k, &default)),
            with_bound(codec(t, k, "q6")),
        );
    }
    s += &format!(
        "\nCloud-only: {:.1} ms for decode + preprocess + network, uploading a {:.0}-byte JPEG \
         (mean). Measured on {} (`{}`).\n",
        t.cloud_only_ms, t.image_bytes, t.machine, t.command
    );
    Ok(s)
}

/// docs/codec.md's table: bytes and agreement of q6 and the `s` levels at the usual splits.
fn default_codec(t: &CostTable) -> Result<String> {
    let settings = ["q6", "s10", "s12", "s14"];
    let mut s =
        String::from("| split | q6 bytes (agreement) | s10 | s12 | s14 |\n|---|---|---|---|---|\n");
    for b in ["block5", "block11", "block15", "head"] {
        let k = index(t, b)?;
        let cells: Vec<String> = settings
            .iter()
            .map(|c| match codec(t, k, c) {
                Some(c) => format!("{} ({:.1}%)", c.bytes.round(), 100.0 * c.agreement),
                None => "–".into(),
            })
            .collect();
        s += &format!("| {b} | {} |\n", cells.join(" | "));
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Data {
        let root = paths::repo_root();
        let placements = std::fs::read_to_string(root.join(LLM_PLACEMENTS)).unwrap();
        Data {
            table: cost_table(&root).expect("the committed cost table"),
            llm_placements: serde_json::from_str(&placements).unwrap(),
        }
    }

    #[test]
    fn the_placements_table_has_a_row_a_placement_and_link() {
        let t = table();
        let out = llm_placements(&t.llm_placements).unwrap();
        let runs = t.llm_placements["links"].as_array().unwrap();
        let rows: usize = runs.iter().map(|r| r["rows"].as_array().unwrap().len()).sum();
        assert_eq!(out.lines().count(), 2 + rows);
        assert!(out.contains("| 4g (5/20 Mbit/s, 50 ms) | edge-only |"), "{out}");
        assert!(llm_placements(&serde_json::json!({ "file_bytes": 1 })).is_err());
    }

    #[test]
    fn blocks_are_rewritten_and_the_rest_kept() {
        let doc = "before\n<!-- generated: default-codec (./run.sh docs) -->\nstale\n\
                   <!-- end generated -->\nafter\n";
        let (out, n) = regenerate(doc, &table()).unwrap();
        assert_eq!(n, 1);
        assert!(
            out.starts_with("before\n<!-- generated: default-codec (./run.sh docs) -->\n| split")
        );
        assert!(out.ends_with("<!-- end generated -->\nafter\n"));
        assert!(!out.contains("stale"));
        assert_eq!(regenerate(&out, &table()).unwrap().0, out, "rendering twice changes nothing");
    }

    #[test]
    fn unknown_or_unclosed_blocks_are_errors() {
        let t = table();
        assert!(regenerate("<!-- generated: nope -->\nx\n<!-- end generated -->", &t).is_err());
        assert!(regenerate("<!-- generated: default-codec -->\nx\n", &t).is_err());
    }

    #[test]
    fn milliseconds_read_as_the_docs_write_them() {
        assert_eq!(ms(Some(4812.6)), "4,813");
        assert_eq!(ms(Some(13.66)), "13.7");
        assert_eq!(ms(Some(-0.01)), "0.0");
        assert_eq!(ms(None), "–");
    }
}
