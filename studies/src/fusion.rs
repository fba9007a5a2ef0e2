//! `./run.sh fusion`: how much fusing two devices' views of one object gains over either
//! view alone, on labelled photos. Each photo gives two views, crops of 75% of its width and
//! height from opposite corners (two cameras that each see most of the object, from different
//! sides), each preprocessed as any photo; the network classifies both, and the fused top-5
//! (`split_shared::group::fusion`, on the top-5 lists a reply carries) is scored against the
//! label beside each view alone.

use std::path::PathBuf;

use anyhow::{Context, Result};
use burn::tensor::Device;
use split_shared::group::fusion::{Rule, fuse};
use split_shared::labels::{Prediction, TOP_K, top_k};
use split_shared::model::{Boundary, EfficientNetLite0};

use crate::eval::{image_files, read_csv_classes};
use xtask::setup;

/// `./run.sh fusion`
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Folder of labelled photos (`labels.csv` beside them).
    #[arg(long)]
    images: PathBuf,
    /// Photos to skip first.
    #[arg(long, default_value_t = 0)]
    skip: usize,
    /// Photos to use (after `--skip`).
    #[arg(long, default_value_t = 500)]
    limit: usize,
    /// Weights (default: the ones setup fetched).
    #[arg(long)]
    weights: Option<PathBuf>,
}

/// Share of each view's side the crop keeps.
const VIEW_SIDE: f64 = 0.75;

fn view(img: &split_shared::image::RgbImage, corner: usize) -> split_shared::image::RgbImage {
    let (w, h) = (img.width, img.height);
    let (cw, ch) = ((w as f64 * VIEW_SIDE) as usize, (h as f64 * VIEW_SIDE) as usize);
    let (left, top) = if corner == 0 { (0, 0) } else { (w - cw, h - ch) };
    split_shared::image::center_crop_resize(&img.crop(left, top, cw, ch), 224)
}

#[derive(Default)]
struct Score {
    top1: usize,
    top5: usize,
}

impl Score {
    fn add(&mut self, top: &[Prediction], label: usize) {
        self.top1 += usize::from(top.first().is_some_and(|p| usize::from(p.class) == label));
        self.top5 += usize::from(top.iter().any(|p| usize::from(p.class) == label));
    }
}

/// Run the comparison and print a table.
pub fn run(o: Args) -> Result<()> {
    let labels = read_csv_classes(&o.images.join("labels.csv"))?;
    let weights = match &o.weights {
        Some(p) => p.clone(),
        None => setup::ensure_weights()?,
    };
    let device = Device::flex();
    let model = EfficientNetLite0::load(&weights, &device)?;
    let files: Vec<PathBuf> =
        image_files(&o.images)?.into_iter().skip(o.skip).take(o.limit).collect();
    let names = ["view A", "view B", "fused: mean", "fused: confidence", "whole photo"];
    let mut scores: Vec<Score> = names.iter().map(|_| Score::default()).collect();
    let mut n = 0;
    for file in &files {
        let name = file.file_name().and_then(|f| f.to_str()).unwrap_or_default();
        let Some(&label) = labels.get(name) else { continue };
        let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
        let img = split_shared::image::decode(&bytes)?;
        let classify = |pixels: &split_shared::image::RgbImage| -> Result<Vec<Prediction>> {
            let x = split_shared::image::to_input_tensor(pixels, &device);
            let logits = model.forward_range(x, Boundary::INPUT, Boundary::LOGITS)?;
            let values: Vec<f32> = logits.into_data().try_to_vec::<f32>().expect("f32 logits");
            Ok(top_k(&values, TOP_K))
        };
        let views = [classify(&view(&img, 0))?, classify(&view(&img, 1))?];
        let whole = classify(&split_shared::image::center_crop_resize(&img, 224))?;
        let answers = [
            views[0].clone(),
            views[1].clone(),
            fuse(&views, Rule::Mean, TOP_K),
            fuse(&views, Rule::Confidence, TOP_K),
            whole,
        ];
        for (s, a) in scores.iter_mut().zip(&answers) {
            s.add(a, label);
        }
        n += 1;
    }
    anyhow::ensure!(n > 0, "no labelled photos in {}", o.images.display());
    println!(
        "Two views per photo (opposite {:.0}% crops), {n} photos from {}:\n",
        VIEW_SIDE * 100.0,
        o.images.display()
    );
    println!("| answer | top-1 | top-5 |");
    println!("| --- | --- | --- |");
    for (name, s) in names.iter().zip(&scores) {
        println!(
            "| {name} | {:.1}% | {:.1}% |",
            100.0 * s.top1 as f64 / n as f64,
            100.0 * s.top5 as f64 / n as f64
        );
    }
    Ok(())
}
