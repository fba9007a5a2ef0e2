//! `cargo xtask eval`: split inference over a folder of images, the way the product runs it.
//!
//! For every image: preprocess, run the edge half to the split, encode the frame the browser would
//! send, decode it as the server does, run the cloud half, and compare with the unsplit network
//! (and, when given, with labels and with another implementation's top-1 predictions).
//!
//! ```text
//! cargo xtask eval --images DIR [--labels DIR/labels.csv] [--splits block5,block8]
//!                  [--limit N] [--reference preds.csv] [--weights FILE]
//! ```

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use burn::tensor::{Device, Tensor};
use split_shared::labels::top_k;
use split_shared::model::{Boundary, EfficientNetLite0, WeightsFile, features_tensor};
use split_shared::protocol::Request;

use crate::setup;

struct Options {
    images: PathBuf,
    labels: Option<PathBuf>,
    splits: Vec<Boundary>,
    limit: usize,
    reference: Option<PathBuf>,
    weights: Option<PathBuf>,
}

fn parse(args: &[String]) -> Result<Options> {
    let mut o = Options {
        images: PathBuf::new(),
        labels: None,
        splits: vec![Boundary::block(5)?],
        limit: usize::MAX,
        reference: None,
        weights: None,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--images" => o.images = value()?.into(),
            "--labels" => o.labels = Some(value()?.into()),
            "--splits" => {
                o.splits =
                    value()?.split(',').map(|s| s.trim().parse()).collect::<Result<_, _>>()?;
            }
            "--limit" => o.limit = value()?.parse()?,
            "--reference" => o.reference = Some(value()?.into()),
            "--weights" => o.weights = Some(value()?.into()),
            other => bail!("unknown flag {other}; see the doc comment of xtask/src/eval.rs"),
        }
    }
    if o.images.as_os_str().is_empty() {
        bail!("--images DIR is required");
    }
    if o.labels.is_none() && o.images.join("labels.csv").exists() {
        o.labels = Some(o.images.join("labels.csv"));
    }
    Ok(o)
}

/// `file,class_index,...` rows (header optional); also reads `file,top1` prediction files.
fn read_csv_classes(path: &PathBuf) -> Result<HashMap<String, usize>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, ',');
            let file = f.next()?.trim().to_string();
            let class = f.next()?.trim().parse().ok()?;
            Some((file, class))
        })
        .collect())
}

fn logits_of(t: Tensor<4>) -> Vec<f32> {
    t.into_data().try_to_vec::<f32>().expect("f32 logits")
}

#[derive(Default)]
struct Tally {
    n: usize,
    top1: usize,
    top5: usize,
    agree_full: usize,
    bytes: usize,
    edge_s: f64,
    cloud_s: f64,
}

/// Run the evaluation and print a table.
pub fn run(args: &[String]) -> Result<()> {
    let o = parse(args)?;
    let weights_path = match &o.weights {
        Some(p) => p.clone(),
        None => setup::ensure_weights()?,
    };
    let bytes = std::fs::read(&weights_path)
        .with_context(|| format!("reading {}", weights_path.display()))?;
    let device = Device::flex();
    let model = EfficientNetLite0::from_weights(&WeightsFile::from_bytes(&bytes)?, &device)?;
    let labels = o.labels.as_ref().map(read_csv_classes).transpose()?;
    let reference = o.reference.as_ref().map(read_csv_classes).transpose()?;

    let mut files: Vec<PathBuf> = std::fs::read_dir(&o.images)
        .with_context(|| format!("reading {}", o.images.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            matches!(p.extension().and_then(|e| e.to_str()), Some("jpg" | "jpeg" | "png" | "JPEG"))
        })
        .collect();
    files.sort();
    files.truncate(o.limit);
    if files.is_empty() {
        bail!("no .jpg or .png images in {}", o.images.display());
    }

    let mut tallies: Vec<Tally> = o.splits.iter().map(|_| Tally::default()).collect();
    let (mut full_top1, mut ref_agree, mut ref_n, mut labelled) = (0, 0, 0, 0);
    let mut ref_disagreements = Vec::new();
    for (i, path) in files.iter().enumerate() {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        let img = split_shared::image::preprocess(&std::fs::read(path)?)
            .with_context(|| format!("preprocessing {name}"))?;
        let input = split_shared::image::to_input_tensor(&img, &device);
        let full = top_k(&logits_of(model.forward(input.clone())?), 5);
        let label = labels.as_ref().and_then(|l| l.get(&name)).copied();
        if let Some(l) = label {
            labelled += 1;
            full_top1 += usize::from(full[0].class as usize == l);
        }
        if let Some(r) = reference.as_ref().and_then(|r| r.get(&name)) {
            ref_n += 1;
            ref_agree += usize::from(full[0].class as usize == *r);
            if full[0].class as usize != *r {
                let margin = full[0].prob - full[1].prob;
                ref_disagreements.push(format!(
                    "{name}: ours {} (p {:.3}, margin {margin:.3}), reference {r}",
                    full[0].class, full[0].prob
                ));
            }
        }
        for (split, t) in o.splits.iter().zip(&mut tallies) {
            let start = Instant::now();
            let feat = model.forward_range(input.clone(), Boundary::INPUT, *split)?;
            let dims = feat.dims();
            let values = feat.into_data().try_to_vec::<f32>().expect("f32 features");
            let frame = Request::features_f32(i as u64, *split, &dims, &values).to_bytes();
            t.edge_s += start.elapsed().as_secs_f64();
            let start = Instant::now();
            let Request::Features { payload, shape, .. } = Request::decode(&frame)? else {
                unreachable!()
            };
            let x = features_tensor(&shape, &payload, &device);
            let top = top_k(&logits_of(model.forward_range(x, *split, Boundary::LOGITS)?), 5);
            t.cloud_s += start.elapsed().as_secs_f64();
            t.n += 1;
            t.bytes += frame.len();
            t.agree_full += usize::from(top[0].class == full[0].class);
            if let Some(l) = label {
                t.top1 += usize::from(top[0].class as usize == l);
                t.top5 += usize::from(top.iter().any(|p| p.class as usize == l));
            }
        }
        if (i + 1) % 50 == 0 {
            eprintln!("eval: {}/{} images", i + 1, files.len());
        }
    }

    let pct = |a: usize, b: usize| if b == 0 { f64::NAN } else { 100.0 * a as f64 / b as f64 };
    println!("images: {} from {}", files.len(), o.images.display());
    if labelled > 0 {
        println!(
            "unsplit model top-1 accuracy: {:.1}% ({full_top1}/{labelled})",
            pct(full_top1, labelled)
        );
    }
    if ref_n > 0 {
        println!(
            "top-1 agreement with reference predictions: {:.2}% ({ref_agree}/{ref_n})",
            pct(ref_agree, ref_n)
        );
        for d in &ref_disagreements {
            println!("  differs: {d}");
        }
    }
    println!(
        "| split | top-1 | top-5 | agreement with unsplit | bytes/image | edge ms | cloud ms |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (split, t) in o.splits.iter().zip(&tallies) {
        println!(
            "| {split} | {:.1}% | {:.1}% | {:.2}% | {} | {:.1} | {:.1} |",
            pct(t.top1, labelled),
            pct(t.top5, labelled),
            pct(t.agree_full, t.n),
            t.bytes / t.n.max(1),
            1e3 * t.edge_s / t.n as f64,
            1e3 * t.cloud_s / t.n as f64,
        );
    }
    Ok(())
}
