//! `./run.sh invert`: reconstruct photos from the features a server receives, per boundary,
//! codec and noise, and report how close the reconstructions come (docs/privacy.md).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use burn::tensor::Device;
use serde::Serialize;
use split_shared::codec::{Calibration, Noise};
use split_shared::model::{Boundary, EfficientNetLite0, INPUT_SIZE};

use super::attack::{InvertOptions, WhiteBox};
use super::metrics::{psnr, ssim, structure};
use super::{InvertArgs, image_pixels, pixels_to_image, received};
use crate::eval;
use xtask::setup;

/// One reconstruction's measurements.
#[derive(Serialize)]
struct Row {
    photo: String,
    /// A bundled sample (drawn in the figure) or a held-back photo (measured only).
    sample: bool,
    boundary: String,
    codec: String,
    noise: String,
    /// Bytes of the features frame the server received.
    bytes: usize,
    psnr_db: f64,
    ssim: f64,
    /// Correlation of the coarse luma with the photo's ([`structure`]).
    structure: f64,
    /// The highest |structure| this reconstruction has with any *other* photo measured in the
    /// same run: what chance alone gives.
    chance: f64,
    feature_error: f64,
    seconds: f64,
}

fn noise_name(n: Option<Noise>) -> String {
    n.map_or_else(|| "none".into(), |n| n.to_string())
}

/// Run the attack over every photo × boundary × codec × noise and write the report.
pub fn run(o: InvertArgs) -> Result<()> {
    let weights = setup::ensure_weights()?;
    let calibration = Calibration::load(&setup::ensure_calibration()?)?;
    let model = EfficientNetLite0::load(&weights, &Device::flex())?;
    let attacker = WhiteBox::load(&weights)?;
    let noises: Vec<Option<Noise>> = o
        .noise
        .iter()
        .map(|n| if n == "none" { Ok(None) } else { n.parse().map(Some) })
        .collect::<Result<_, _>>()?;
    let mut photos: Vec<(PathBuf, bool)> = o.photos().into_iter().map(|p| (p, true)).collect();
    if let Some(dir) = &o.held_back {
        let files = eval::image_files(dir)?;
        photos.extend(files.into_iter().skip(o.skip).take(o.limit).map(|p| (p, false)));
    }
    if photos.is_empty() {
        bail!("no photos to attack");
    }
    if o.tv.len() > 1 && o.tv.len() != o.boundaries.len() {
        bail!("--tv takes one value or one per boundary ({} boundaries)", o.boundaries.len());
    }
    std::fs::create_dir_all(&o.out).with_context(|| format!("creating {}", o.out.display()))?;

    let mut rows: Vec<Row> = Vec::new();
    // Every reconstruction, by row, and every photo: for the chance level afterwards.
    let mut recons: Vec<Vec<f32>> = Vec::new();
    let originals: Vec<Vec<f32>> =
        photos.iter().map(|(p, _)| image_pixels(p)).collect::<Result<_>>()?;
    let mut row_photo: Vec<usize> = Vec::new();
    // Reconstructions of the samples, per condition then photo then boundary: the figure.
    let mut drawn: Vec<Vec<f32>> = Vec::new();
    let conditions: Vec<(String, Option<Noise>)> =
        o.codecs.iter().flat_map(|c| noises.iter().map(move |n| (c.clone(), *n))).collect();
    let total = conditions.len() * photos.len() * o.boundaries.len();
    let started = Instant::now();
    for (codec, noise) in &conditions {
        for (index, (path, sample)) in photos.iter().enumerate() {
            let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or("photo").to_string();
            let original = &originals[index];
            for (b, &boundary) in o.boundaries.iter().enumerate() {
                let options = InvertOptions { steps: o.steps, lr: o.lr, tv: o.tv_at(b) };
                let start = Instant::now();
                let seed = index as u64;
                let (z, bytes) =
                    received(&model, original, boundary, codec, *noise, &calibration, seed)?;
                let z = z.into_values();
                let inv = attacker.invert(boundary, &z, &options, |_, _| {})?;
                let row = Row {
                    photo: if *sample { name.clone() } else { format!("held-back #{index}") },
                    sample: *sample,
                    boundary: boundary.name().into(),
                    codec: codec.clone(),
                    noise: noise_name(*noise),
                    bytes,
                    psnr_db: psnr(original, &inv.pixels),
                    ssim: ssim(original, &inv.pixels, INPUT_SIZE, INPUT_SIZE),
                    structure: structure(original, &inv.pixels, INPUT_SIZE, INPUT_SIZE, 4),
                    chance: f64::NAN,
                    feature_error: inv.feature_error,
                    seconds: start.elapsed().as_secs_f64(),
                };
                eprintln!(
                    "invert [{}/{total}, {:.0} s]: {} {} {} {}: PSNR {:.2} dB, SSIM {:.3}, structure {:.3}, feature error {:.4}",
                    rows.len() + 1,
                    started.elapsed().as_secs_f64(),
                    row.photo,
                    row.boundary,
                    row.codec,
                    row.noise,
                    row.psnr_db,
                    row.ssim,
                    row.structure,
                    row.feature_error
                );
                if *sample {
                    if let Some(dir) = &o.page_dir {
                        let file = dir.join(format!("{name}-{}.jpg", boundary.name()));
                        let jpeg =
                            split_shared::image::encode_jpeg(&pixels_to_image(&inv.pixels), 85)?;
                        std::fs::write(&file, jpeg)
                            .with_context(|| format!("writing {}", file.display()))?;
                    }
                    drawn.push(inv.pixels.clone());
                }
                recons.push(inv.pixels);
                row_photo.push(index);
                rows.push(row);
            }
            if *sample {
                drawn.push(original.clone());
            }
        }
    }
    // Chance: each reconstruction against the other photos (same boundary and condition).
    for i in 0..rows.len() {
        let peers = (0..rows.len()).filter(|&j| {
            row_photo[j] != row_photo[i]
                && rows[j].boundary == rows[i].boundary
                && rows[j].codec == rows[i].codec
                && rows[j].noise == rows[i].noise
        });
        rows[i].chance = peers
            .map(|j| {
                structure(&originals[row_photo[i]], &recons[j], INPUT_SIZE, INPUT_SIZE, 4).abs()
            })
            .fold(0.0, f64::max);
    }
    let samples = photos.iter().filter(|(_, s)| *s).count();
    if samples > 0 {
        let figure = o.out.join(format!("{}.jpg", o.name));
        std::fs::write(&figure, figure_jpeg(&drawn, o.boundaries.len()))?;
        eprintln!("invert: figure {}", figure.display());
    }
    let json = o.out.join(format!("{}.json", o.name));
    let meta = serde_json::json!({
        "steps": o.steps, "lr": o.lr,
        "tv": o.boundaries.iter().enumerate().map(|(i, b)| (b.name(), o.tv_at(i))).collect::<std::collections::BTreeMap<_, _>>(),
        "rows": rows,
    });
    std::fs::write(&json, serde_json::to_string_pretty(&meta)?)?;
    if let Some(dir) = &o.page_dir {
        let index = dir.join("index.json");
        std::fs::write(&index, serde_json::to_string_pretty(&page_index(&rows, &o))?)?;
        eprintln!("invert: the page's reconstructions and {}", index.display());
    }
    let table = summary(&rows, &o.boundaries, &conditions);
    std::fs::write(o.out.join(format!("{}.md", o.name)), &table)?;
    println!("{table}");
    eprintln!("invert: {} and {}.md in {}", json.display(), o.name, o.out.display());
    Ok(())
}

/// What the demo page reads (web/seen.js): per sample and boundary, the reconstruction's file
/// and scores, with the threshold and the floor they give.
fn page_index(rows: &[Row], o: &InvertArgs) -> serde_json::Value {
    let mut samples = serde_json::Map::new();
    for r in rows.iter().filter(|r| r.sample) {
        let entry = samples.entry(r.photo.clone()).or_insert_with(|| serde_json::json!({}));
        entry[&r.boundary] = serde_json::json!({
            "file": format!("{}-{}.jpg", r.photo, r.boundary),
            "psnr_db": (r.psnr_db * 100.0).round() / 100.0,
            "ssim": (r.ssim * 1000.0).round() / 1000.0,
            "structure": (r.structure * 1000.0).round() / 1000.0,
        });
    }
    serde_json::json!({
        "codec": o.codecs.first(),
        "noise": o.noise.first(),
        "steps": o.steps,
        "threshold": { "structure": super::RECOGNISABLE_STRUCTURE },
        "floor": split_shared::model::PRIVACY_FLOOR.name(),
        "boundaries": Boundary::all().map(Boundary::name).collect::<Vec<_>>(),
        "samples": samples,
    })
}

/// Mean, min and max.
fn spread(v: &[f64]) -> (f64, f64, f64) {
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (mean, min, max)
}

/// The markdown table: per boundary and condition, PSNR and SSIM over all photos.
fn summary(
    rows: &[Row],
    boundaries: &[Boundary],
    conditions: &[(String, Option<Noise>)],
) -> String {
    let mut s = String::from(
        "| boundary | codec | noise | photos | bytes | PSNR dB mean (min–max) | SSIM mean (min–max) | structure mean (min–max) | chance (max) | feature error |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let mut floors = String::new();
    for (codec, noise) in conditions {
        for b in boundaries {
            let of: Vec<&Row> = rows
                .iter()
                .filter(|r| {
                    r.boundary == b.name() && &r.codec == codec && r.noise == noise_name(*noise)
                })
                .collect();
            if of.is_empty() {
                continue;
            }
            let p = spread(&of.iter().map(|r| r.psnr_db).collect::<Vec<_>>());
            let q = spread(&of.iter().map(|r| r.ssim).collect::<Vec<_>>());
            let st = spread(&of.iter().map(|r| r.structure).collect::<Vec<_>>());
            let chance = of.iter().map(|r| r.chance).fold(0.0, f64::max);
            let bytes = of.iter().map(|r| r.bytes).sum::<usize>() / of.len();
            let err = of.iter().map(|r| r.feature_error).sum::<f64>() / of.len() as f64;
            let _ = writeln!(
                s,
                "| {} | {codec} | {} | {} | {bytes} | {:.1} ({:.1}–{:.1}) | {:.3} ({:.3}–{:.3}) | {:.2} ({:.2}–{:.2}) | {chance:.2} | {err:.4} |",
                b.name(),
                noise_name(*noise),
                of.len(),
                p.0,
                p.1,
                p.2,
                q.0,
                q.1,
                q.2,
                st.0,
                st.1,
                st.2
            );
        }
        // The floor this condition supports: the earliest boundary measured from which on
        // every reconstruction stays below the threshold.
        let below = |b: &Boundary| {
            rows.iter()
                .filter(|r| {
                    r.boundary == b.name() && &r.codec == codec && r.noise == noise_name(*noise)
                })
                .all(|r| r.structure < super::RECOGNISABLE_STRUCTURE)
        };
        let floor = (0..boundaries.len()).find(|&i| boundaries[i..].iter().all(below));
        let _ = writeln!(
            floors,
            "- {codec}, noise {}: every reconstruction's structure below {} from {} on",
            noise_name(*noise),
            super::RECOGNISABLE_STRUCTURE,
            floor.map_or("no boundary measured", |i| boundaries[i].name())
        );
    }
    s + "\n" + &floors
}

/// The figure: one row per sample photo and condition, reconstructions left to right in
/// boundary order, the photo itself last.
fn figure_jpeg(tiles: &[Vec<f32>], boundaries: usize) -> Vec<u8> {
    let cols = boundaries + 1;
    let rows = tiles.len() / cols;
    let (n, gap) = (INPUT_SIZE, 4);
    let (w, h) = (cols * (n + gap) - gap, rows * (n + gap) - gap);
    let mut pixels = vec![255u8; w * h * 3];
    for (t, tile) in tiles.iter().enumerate() {
        let img = pixels_to_image(tile);
        let (x0, y0) = ((t % cols) * (n + gap), (t / cols) * (n + gap));
        for y in 0..n {
            let src = &img.pixels[y * n * 3..(y + 1) * n * 3];
            let at = ((y0 + y) * w + x0) * 3;
            pixels[at..at + n * 3].copy_from_slice(src);
        }
    }
    let img = split_shared::image::RgbImage::new(w, h, pixels).expect("sized above");
    split_shared::image::encode_jpeg(&img, 85).expect("encoding a JPEG in memory")
}
