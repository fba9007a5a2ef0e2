//! `cargo xtask onnx [--repeats N]`: export the model to ONNX from the project's weights
//! (`tools/export_onnx.py`), check its logits against the golden fixture, and time ONNX Runtime
//! (CPU, from PyPI) against burn `flex` on the same machine: the whole network and the cloud
//! tier's tails from block5 and block11, with 1 and 2 threads.
//!
//! Python packages (`numpy`, `onnx`, `onnxruntime`) go into a virtual environment in the cache.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use burn::tensor::{Device, Tensor};
use split_shared::model::{Boundary, EfficientNetLite0, WeightsFile, blocks};

use crate::{paths, setup};

fn python() -> Result<PathBuf> {
    let venv = paths::cache_dir().join("venv");
    let py = venv.join("bin/python");
    if !py.exists() {
        let status = Command::new("python3").args(["-m", "venv"]).arg(&venv).status()?;
        anyhow::ensure!(status.success(), "python3 -m venv failed");
    }
    let check = Command::new(&py).args(["-c", "import numpy, onnx, onnxruntime"]).output()?;
    if !check.status.success() {
        eprintln!("onnx: installing numpy, onnx, onnxruntime into {}", venv.display());
        let status = Command::new(&py)
            .args(["-m", "pip", "install", "--quiet", "numpy", "onnx", "onnxruntime"])
            .status()?;
        anyhow::ensure!(status.success(), "pip install onnx onnxruntime failed");
    }
    Ok(py)
}

fn median_ms(mut f: impl FnMut(), repeats: usize) -> f64 {
    for _ in 0..2 {
        f();
    }
    let mut t: Vec<f64> = (0..repeats)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

/// Run the export and the comparison with command-line `args`.
pub fn run(args: &[String]) -> Result<()> {
    let repeats: usize = match args {
        [] => 30,
        [flag, n] if flag == "--repeats" => n.parse()?,
        _ => bail!("usage: cargo xtask onnx [--repeats N]"),
    };
    let weights_path = setup::ensure_weights()?;
    let out = paths::cache_dir().join("onnx");
    std::fs::create_dir_all(&out)?;
    let tails = [("block5", 5usize), ("block11", 11)];
    let arch = serde_json::json!({
        "blocks": blocks().iter().map(|b| serde_json::json!({
            "kernel": b.kernel, "stride": b.stride, "expand": b.expand, "c_in": b.c_in, "c_out": b.c_out,
        })).collect::<Vec<_>>(),
        "sizes": (0..16).map(|i| Boundary::block(i).map(|b| b.info().shape[1])).collect::<Result<Vec<_>, _>>()?,
        "tails": tails.iter().map(|(n, i)| serde_json::json!([n, i])).collect::<Vec<_>>(),
    });
    let arch_path = out.join("arch.json");
    std::fs::write(&arch_path, arch.to_string())?;
    let fixture = paths::repo_root().join("shared/tests/data/chelsea");
    let output = Command::new(python()?)
        .arg(paths::repo_root().join("tools/export_onnx.py"))
        .arg("--weights")
        .arg(&weights_path)
        .arg("--arch")
        .arg(&arch_path)
        .arg("--out")
        .arg(&out)
        .arg("--fixture")
        .arg(&fixture)
        .args(["--repeats", &repeats.to_string()])
        .output()
        .context("running tools/export_onnx.py")?;
    if !output.status.success() {
        bail!("export_onnx.py failed:\n{}", String::from_utf8_lossy(&output.stderr));
    }
    let report: serde_json::Value =
        serde_json::from_slice(&output.stdout).context("export_onnx.py report")?;

    let device = Device::flex();
    let model = EfficientNetLite0::from_weights(
        &WeightsFile::from_bytes(&std::fs::read(&weights_path)?)?,
        &device,
    )?;
    let run_from = |from: Boundary| {
        let [c, h, w] = from.info().shape;
        let x = Tensor::<4>::zeros([1, c, h, w], &device);
        median_ms(
            || {
                drop(
                    model
                        .forward_range(x.clone(), from, Boundary::LOGITS)
                        .expect("forward")
                        .into_data(),
                )
            },
            repeats,
        )
    };
    println!(
        "ONNX export: {} (onnxruntime {}), max |logit - golden| {:.2e}, top-1 (ORT, golden) {}",
        out.join("efficientnet-lite0.onnx").display(),
        report["onnxruntime"].as_str().unwrap_or("?"),
        report["max_abs_logit_diff"].as_f64().unwrap_or(f64::NAN),
        report["top1"],
    );
    let top1 = &report["top1"];
    if top1[0] != top1[1] || report["max_abs_logit_diff"].as_f64().is_none_or(|d| d > 1e-3) {
        bail!("the ONNX export does not reproduce the golden logits");
    }
    println!(
        "| part | burn flex ms | ORT CPU 1 thread ms | ORT CPU 2 threads ms | burn / ORT (2 threads) |"
    );
    println!("|---|---|---|---|---|");
    for (name, from) in [
        ("full", Boundary::INPUT),
        ("tail-block5", Boundary::block(5)?),
        ("tail-block11", Boundary::block(11)?),
    ] {
        let key = name.trim_start_matches("tail-");
        let ort = &report["models"][key];
        let (o1, o2) =
            (ort["1"].as_f64().unwrap_or(f64::NAN), ort["2"].as_f64().unwrap_or(f64::NAN));
        let burn = run_from(from);
        println!("| {name} | {burn:.1} | {o1:.1} | {o2:.1} | {:.2} |", burn / o2);
    }
    Ok(())
}
