//! `./run.sh light`: which light model to ship, by the numbers.
//!
//! For each candidate precision and each split the edge may hold in full (f32 up to the split,
//! the light model after it; `input` means everything light) it measures over a folder of
//! images: the bytes the device downloads for the light stages (raw and gzipped, as the server
//! sends them), top-1 agreement with the full f32 model (with its 95% Wilson lower bound), top-1
//! accuracy against labels, and the time of the light part natively.

use std::io::Write;
use std::time::Instant;

use anyhow::{Context, Result};
use burn::tensor::{Device, Tensor};
use split_shared::labels::top_k;
use split_shared::model::{
    Boundary, EfficientNetLite0, LightPrecision, light_shards, read_weights,
};
use split_shared::plan::wilson_lower;

use xtask::setup;

/// Which light model to ship: agreement, bytes and time of each candidate.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    photos: crate::eval::Photos,
    /// Candidate precisions: `int8`, `int4-g<group>`.
    #[arg(long, value_delimiter = ',', default_value = "int8,int4-g32,int4-g128")]
    precisions: Vec<LightPrecision>,
    /// Splits the edge holds in full; the light model runs the stages after them.
    #[arg(long, value_delimiter = ',', default_value = "input,block5,block11")]
    splits: Vec<Boundary>,
}

fn gzip_len(bytes: &[u8]) -> Result<usize> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(bytes)?;
    Ok(gz.finish()?.len())
}

fn logits(t: Tensor<4>) -> Vec<f32> {
    t.into_data().try_to_vec::<f32>().expect("f32 logits")
}

/// Run the comparison and print a markdown table.
pub fn run(o: Args) -> Result<()> {
    let weights = read_weights(&setup::ensure_weights()?)?;
    let device = Device::flex();
    let full = EfficientNetLite0::from_weights(&weights, &device)?;
    let (files, labels) = o.photos.read()?;

    struct Candidate {
        precision: LightPrecision,
        model: EfficientNetLite0,
        shards: Vec<(Boundary, Vec<u8>)>,
    }
    let mut candidates = Vec::new();
    for &precision in &o.precisions {
        let shards = light_shards(&weights, precision);
        let mut model = EfficientNetLite0::empty();
        for (b, bytes) in &shards {
            model.load_light_stage_bytes(*b, bytes, &device)?;
        }
        candidates.push(Candidate { precision, model, shards });
    }
    // Per (candidate, split): agreeing images, correct images, seconds of the light part.
    let mut tally = vec![vec![(0u32, 0u32, 0f64); o.splits.len()]; candidates.len()];
    let (mut full_correct, mut labelled, mut full_s) = (0u32, 0u32, 0f64);
    for (i, path) in files.iter().enumerate() {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        let img = split_shared::image::preprocess(&std::fs::read(path)?)
            .with_context(|| format!("preprocessing {name}"))?;
        let input = split_shared::image::to_input_tensor(&img, &device);
        let label = labels.as_ref().and_then(|l| l.get(&name)).copied();
        let start = Instant::now();
        let want = top_k(&logits(full.forward(input.clone())?), 1)[0].class;
        full_s += start.elapsed().as_secs_f64();
        if let Some(l) = label {
            labelled += 1;
            full_correct += u32::from(want as usize == l);
        }
        for (s, split) in o.splits.iter().enumerate() {
            let at_split = full.forward_range(input.clone(), Boundary::INPUT, *split)?;
            for (c, cand) in candidates.iter().enumerate() {
                let start = Instant::now();
                let got = top_k(
                    &logits(cand.model.forward_range(
                        at_split.clone(),
                        *split,
                        Boundary::LOGITS,
                    )?),
                    1,
                )[0]
                .class;
                let t = &mut tally[c][s];
                t.2 += start.elapsed().as_secs_f64();
                t.0 += u32::from(got == want);
                t.1 += u32::from(label.is_some_and(|l| got as usize == l));
            }
        }
        if (i + 1) % 50 == 0 {
            eprintln!("light: {}/{} images", i + 1, files.len());
        }
    }
    let n = files.len() as u32;
    // Bytes of each stage's f32 shard, serialized once.
    let f32_sizes: Vec<(Boundary, usize)> = split_shared::model::weight_shards(&weights)
        .iter()
        .map(|(b, s)| (*b, s.to_bytes(split_shared::model::WEIGHTS_MAGIC).len()))
        .collect();
    let f32_bytes = |split: Boundary| -> usize {
        f32_sizes.iter().filter(|(b, _)| *b > split).map(|(_, n)| n).sum()
    };
    println!("images: {n} from {}", o.photos.images.display());
    if labelled > 0 {
        println!(
            "full f32 model: top-1 accuracy {:.1}% ({full_correct}/{labelled}), {:.1} ms a forward",
            100.0 * f64::from(full_correct) / f64::from(labelled),
            1e3 * full_s / f64::from(n)
        );
    }
    println!(
        "| light | after | bytes (f32 would be) | gzipped | agreement | ≥ (95%) | top-1 | light ms |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (c, cand) in candidates.iter().enumerate() {
        for (s, split) in o.splits.iter().enumerate() {
            let after: Vec<u8> = cand
                .shards
                .iter()
                .filter(|(b, _)| b > split)
                .flat_map(|(_, x)| x.clone())
                .collect();
            let (agree, correct, secs) = tally[c][s];
            let top1 = if labelled == 0 {
                "–".to_string()
            } else {
                format!("{:.1}%", 100.0 * f64::from(correct) / f64::from(labelled))
            };
            println!(
                "| {} | {split} | {} ({}) | {} | {:.1}% | {:.1}% | {top1} | {:.1} |",
                cand.precision,
                after.len(),
                f32_bytes(*split),
                gzip_len(&after)?,
                100.0 * f64::from(agree) / f64::from(n),
                100.0 * wilson_lower(agree, n),
                1e3 * secs / f64::from(n),
            );
        }
    }
    Ok(())
}
