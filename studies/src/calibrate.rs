//! `./run.sh calibrate`: fit the codec's tables to real activations and write the
//! calibration artefact the server loads and serves to browsers.
//!
//! `./run.sh calibrate --help` lists the options. Per boundary it collects activations of the
//! images (a strided sample of at most [`POSITIONS_PER_IMAGE`] spatial positions per image), then
//! for each bit depth picks the per-channel clip range with the least quantization error and
//! counts symbol frequencies; and it learns a PCA projection of the channel vector (components by
//! decreasing variance) with tables of its own. For the `s<level>` settings it measures each
//! channel's sensitivity: how far the model's answer moves (KL divergence) when noise is added to
//! that channel alone, on some of the images ([`sensitivity`]), and says how much the
//! sensitivities moved between the first half of those images and all of them.
//!
//! By default it writes `profiles/calibration.splc`, the tables the project ships (how they were
//! made: docs/codec.md, "The shipped calibration"). Without `--images` it fits to the three
//! bundled CC0 photos, each in 30 crops and flips: working tables, but coarser levels than tables
//! fitted to a few hundred varied photos (measured in the same section).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use burn::tensor::Device;
use nalgebra::{DMatrix, SymmetricEigen};
use split_shared::codec::fit::fit_table;
use split_shared::codec::{
    AllocTable, BoundaryTables, Calibration, PcaTables, Projection, SUPPORTED_BITS,
};
use split_shared::image::{RgbImage, center_crop_resize, to_input_tensor};
use split_shared::model::{Boundary, EfficientNetLite0, Features, MAX_BATCH};

use crate::eval::{kl_of_log_probs, log_softmax};
use xtask::{paths, setup};

/// Spatial positions sampled per image and boundary.
const POSITIONS_PER_IMAGE: usize = 256;
/// Most principal components stored per boundary.
const DEFAULT_MAX_RANK: usize = 128;
/// Images the channel sensitivities are measured on by default (each costs one run of the
/// rest of the network per channel and boundary: about half a minute for all boundaries); the
/// shipped calibration's count (docs/codec.md, "The shipped calibration": 25 against 50 still
/// moved each level's bytes by 2–6%).
const DEFAULT_SENSITIVITY_IMAGES: usize = 50;
/// Noise added to a channel to measure its sensitivity, as a fraction of the channel's spread
/// in that image: small enough for the KL to be quadratic in it, large enough to stay clear
/// of f32 rounding in the logits.
const PROBE_FRACTION: f64 = 0.1;

/// Fit the codec's tables to real activations and write the calibration file.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Folder of images; default: crops and flips of the three bundled photos.
    #[arg(long)]
    images: Option<PathBuf>,
    /// Skip the first N images (sorted by name).
    #[arg(long, default_value_t = 0)]
    skip: usize,
    /// Use at most N images.
    #[arg(long)]
    limit: Option<usize>,
    /// Where to write it; default: `profiles/calibration.splc`, the tables the project ships
    /// (`./run.sh setup` installs them where the server reads them). Fit your own elsewhere and
    /// point the server at it (`--calibration`, or `SPLIT_CALIBRATION` for every tool).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Boundaries to calibrate (stem to head), comma-separated; default: all of them.
    #[arg(long, value_delimiter = ',')]
    boundaries: Vec<Boundary>,
    /// Most principal components stored per boundary.
    #[arg(long, default_value_t = DEFAULT_MAX_RANK)]
    max_rank: usize,
    /// Images (spread evenly over the set) to measure channel sensitivities on, for the
    /// `s<level>` settings; 0 leaves those settings uncalibrated.
    #[arg(long, default_value_t = DEFAULT_SENSITIVITY_IMAGES)]
    sensitivity_images: usize,
    /// How `s<level>` steps are spread over channels: by measured `sensitivity`, or in
    /// proportion to each channel's `spread` (every channel alike; for comparison).
    #[arg(long, value_enum, default_value_t = Allocation::Sensitivity)]
    allocation: Allocation,
}

/// How the `s<level>` settings divide their steps among channels.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Allocation {
    /// By each channel's measured effect on the answer.
    Sensitivity,
    /// Steps proportional to each channel's spread, as if every channel mattered alike.
    Spread,
}

struct Options {
    images: Option<PathBuf>,
    skip: usize,
    limit: usize,
    out: PathBuf,
    boundaries: Vec<Boundary>,
    max_rank: usize,
    sensitivity_images: usize,
    allocation: Allocation,
}

/// The boundaries calibrated by default: every block output, the stem and the head.
pub fn default_boundaries() -> Vec<Boundary> {
    Boundary::all().filter(|b| (Boundary::STEM..=Boundary::HEAD).contains(b)).collect()
}

fn options(a: Args) -> Result<Options> {
    let boundaries = if a.boundaries.is_empty() { default_boundaries() } else { a.boundaries };
    if boundaries.iter().any(|b| !(Boundary::STEM..=Boundary::HEAD).contains(b)) {
        bail!("only boundaries from stem to head can be calibrated");
    }
    Ok(Options {
        images: a.images,
        skip: a.skip,
        limit: a.limit.unwrap_or(usize::MAX),
        out: a.out.unwrap_or_else(setup::shipped_calibration),
        boundaries,
        max_rank: a.max_rank,
        sensitivity_images: a.sensitivity_images,
        allocation: a.allocation,
    })
}

/// Sorted image files of a folder ([`crate::eval::image_files`]), `skip` then at most `limit`
/// of them; none is an error.
pub fn image_files(dir: &Path, skip: usize, limit: usize) -> Result<Vec<PathBuf>> {
    let files: Vec<PathBuf> =
        crate::eval::image_files(dir)?.into_iter().skip(skip).take(limit).collect();
    if files.is_empty() {
        bail!("no .jpg or .png images in {} (after skipping {skip})", dir.display());
    }
    Ok(files)
}

/// 30 views of a photo: 3 scales x 5 crop positions x 2 flips, each resized to 224 like the
/// real preprocessing.
fn views(img: &RgbImage) -> Vec<RgbImage> {
    let mut out = Vec::new();
    let short = img.width.min(img.height);
    for scale in [1.0, 0.8, 0.6] {
        let side = ((short as f64 * scale) as usize).max(8);
        let (mx, my) = (img.width - side, img.height - side);
        for (fx, fy) in [(1, 1), (0, 0), (2, 0), (0, 2), (2, 2)] {
            let crop = img.crop(mx * fx / 2, my * fy / 2, side, side);
            let view = center_crop_resize(&crop, split_shared::model::INPUT_SIZE);
            out.push(flip(&view));
            out.push(view);
        }
    }
    out
}

fn flip(img: &RgbImage) -> RgbImage {
    let mut pixels = Vec::with_capacity(img.pixels.len());
    for row in img.pixels.chunks_exact(img.width * 3) {
        for px in row.chunks_exact(3).rev() {
            pixels.extend_from_slice(px);
        }
    }
    RgbImage::new(img.width, img.height, pixels).expect("same size")
}

fn inputs(o: &Options) -> Result<Vec<RgbImage>> {
    match &o.images {
        Some(dir) => image_files(dir, o.skip, o.limit)?
            .iter()
            .map(|p| {
                let bytes = std::fs::read(p).with_context(|| format!("reading {}", p.display()))?;
                split_shared::image::preprocess(&bytes)
                    .with_context(|| format!("decoding {}", p.display()))
            })
            .collect(),
        None => {
            let dir = paths::repo_root().join("web/samples");
            let mut out = Vec::new();
            for p in image_files(&dir, 0, usize::MAX)? {
                let img = split_shared::image::decode(&std::fs::read(&p)?)?;
                out.extend(views(&img));
            }
            Ok(out)
        }
    }
}

/// What one pass over the images collects per boundary.
struct Collected {
    /// `channels` rows of samples, position-aligned across channels.
    samples: Vec<Vec<f32>>,
    /// Per channel: summed sensitivity, and the number of images it was measured on.
    sensitivity: Vec<f64>,
    probed: usize,
    /// The sums after the first half of the probed images, to show whether more would change
    /// them ([`convergence`]).
    half: Option<(Vec<f64>, usize)>,
}

fn collect(
    model: &EfficientNetLite0,
    images: &[RgbImage],
    boundaries: &[Boundary],
    sensitivity_images: usize,
) -> Result<BTreeMap<Boundary, Collected>> {
    let device = Device::flex();
    let mut out: BTreeMap<Boundary, Collected> = boundaries
        .iter()
        .map(|b| {
            let c = b.info().shape[0];
            (
                *b,
                Collected {
                    samples: vec![Vec::new(); c],
                    sensitivity: vec![0.0; c],
                    probed: 0,
                    half: None,
                },
            )
        })
        .collect();
    let last = *boundaries.iter().max().expect("at least one boundary");
    let probe_every = images.len().div_ceil(sensitivity_images.max(1)).max(1);
    // Images i with i % probe_every == 0, at most `sensitivity_images` of them.
    let probes = sensitivity_images.min(images.len().div_ceil(probe_every));
    for (i, img) in images.iter().enumerate() {
        let probe = probes > 0 && i % probe_every == 0 && i / probe_every < probes;
        let mut x = to_input_tensor(img, &device);
        let mut at = Boundary::INPUT;
        for b in Boundary::all().filter(|b| *b > Boundary::INPUT && *b <= last) {
            x = model.forward_range(x, at, b)?;
            at = b;
            let Some(collected) = out.get_mut(&b) else { continue };
            let values = x.clone().into_data().try_to_vec::<f32>().expect("f32 activations");
            if probe && std::env::var_os("SPLIT_CODING_GAIN").is_some() {
                spatial_gain(b, &values);
            }
            if probe {
                sensitivity(model, b, &values, i as u64, &mut collected.sensitivity)?;
                collected.probed += 1;
                if collected.probed == probes / 2 && probes >= 2 {
                    collected.half = Some((collected.sensitivity.clone(), collected.probed));
                }
            }
            let rows = &mut collected.samples;
            let positions = values.len() / rows.len();
            let stride = positions.div_ceil(POSITIONS_PER_IMAGE).max(1);
            let offset = i % stride;
            for (row, channel) in rows.iter_mut().zip(values.chunks_exact(positions)) {
                row.extend(channel.iter().skip(offset).step_by(stride));
            }
        }
        if (i + 1) % 25 == 0 || probe {
            eprintln!(
                "calibrate: {}/{} images{}",
                i + 1,
                images.len(),
                if probe { " (channel sensitivities measured on this one)" } else { "" }
            );
        }
    }
    Ok(out)
}

/// Add, per channel, KL(p(x) ‖ p(x + n_c)) / s_c² for one image's activations `values` at `b`,
/// where n_c is Gaussian noise of deviation s_c on channel c alone (s_c a fixed fraction of
/// the channel's spread in this image). For small noise the KL is quadratic, so this is the
/// KL per unit of noise variance: what uniform quantization with step Δ costs, times Δ²/12.
fn sensitivity(
    model: &EfficientNetLite0,
    b: Boundary,
    values: &[f32],
    seed: u64,
    out: &mut [f64],
) -> Result<()> {
    let device = Device::flex();
    let [c, h, w] = b.info().shape;
    let positions = h * w;
    let logits = |batch: Vec<f32>, n: usize| -> Result<Vec<Vec<f64>>> {
        let x = Features::new(b, &[n, c, h, w], batch)?.to_tensor(&device);
        let y = model.forward_range(x, b, Boundary::LOGITS)?;
        let flat = y.into_data().try_to_vec::<f32>().expect("f32 logits");
        Ok(flat.chunks_exact(flat.len() / n).map(log_softmax).collect())
    };
    let clean = logits(values.to_vec(), 1)?.remove(0);
    let mut rng = Normal::new(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ b.index() as u64);
    let channels: Vec<usize> = (0..c).collect();
    for group in channels.chunks(MAX_BATCH) {
        let mut batch = Vec::with_capacity(group.len() * values.len());
        let mut scales = Vec::with_capacity(group.len());
        for &ch in group {
            let plane = &values[ch * positions..(ch + 1) * positions];
            let mean = plane.iter().map(|v| f64::from(*v)).sum::<f64>() / positions as f64;
            let var = plane.iter().map(|v| (f64::from(*v) - mean).powi(2)).sum::<f64>()
                / positions as f64;
            // A channel flat in this image: probe at a small absolute scale instead.
            let s = PROBE_FRACTION * var.sqrt().max(1e-2);
            scales.push(s);
            let mut copy = values.to_vec();
            for v in &mut copy[ch * positions..(ch + 1) * positions] {
                *v += (s * rng.sample()) as f32;
            }
            batch.extend(copy);
        }
        for ((&ch, s), q) in group.iter().zip(&scales).zip(logits(batch, group.len())?) {
            out[ch] += kl_of_log_probs(&clean, &q) / (s * s);
        }
    }
    Ok(())
}

/// Diagnostic: the high-rate gain of predicting each value from its left and top neighbours
/// (least squares per channel), bits per value.
fn spatial_gain(b: Boundary, values: &[f32]) {
    let [c, h, w] = b.info().shape;
    let mut gain = 0.0;
    for plane in values.chunks_exact(h * w) {
        let mean = plane.iter().map(|v| f64::from(*v)).sum::<f64>() / (h * w) as f64;
        let at = |y: usize, x: usize| f64::from(plane[y * w + x]) - mean;
        let (mut sxx, mut sll, mut stt, mut slt, mut sxl, mut sxt) = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
        for y in 1..h {
            for x in 1..w {
                let (v, l, t) = (at(y, x), at(y, x - 1), at(y - 1, x));
                sxx += v * v;
                sll += l * l;
                stt += t * t;
                slt += l * t;
                sxl += v * l;
                sxt += v * t;
            }
        }
        let det = sll * stt - slt * slt;
        if sxx <= 0.0 || det <= 1e-12 {
            continue;
        }
        let a = (sxl * stt - sxt * slt) / det;
        let bb = (sxt * sll - sxl * slt) / det;
        let residual = (sxx - a * sxl - bb * sxt).max(0.01 * sxx);
        gain += 0.5 * (sxx / residual).log2();
    }
    eprintln!("coding gain: {b} left/top prediction: {:.3} bits/value", gain / c as f64);
}

/// How much the channel sensitivities moved between the first half of the probed images and
/// all of them: the median over channels of |ln(w_half / w_all)|, and how many channels the
/// default setting sends under one but not the other. Both near zero: more images would not
/// change the allocation.
fn convergence(c: &Collected, spread: &[f32], center: &[f32]) -> Option<(f64, usize)> {
    let (half, n) = c.half.as_ref()?;
    let mean =
        |sum: &[f64], n: usize| -> Vec<f32> { sum.iter().map(|s| (s / n as f64) as f32).collect() };
    let (w_half, w_all) = (mean(half, *n), mean(&c.sensitivity, c.probed));
    let mut logs: Vec<f64> = w_half
        .iter()
        .zip(&w_all)
        .filter(|(a, b)| **a > 0.0 && **b > 0.0)
        .map(|(a, b)| (f64::from(*a) / f64::from(*b)).ln().abs())
        .collect();
    logs.sort_by(f64::total_cmp);
    let median = logs.get(logs.len() / 2).copied().unwrap_or(0.0);
    let level = match split_shared::codec::DEFAULT_SETTING {
        split_shared::codec::Setting::Alloc(a) => a.level,
        _ => return Some((median, 0)),
    };
    let table = |w: Vec<f32>| AllocTable::new(center.to_vec(), spread.to_vec(), w).ok();
    let (a, b) = (table(w_half)?, table(w_all)?);
    let flips = a
        .steps(level)
        .iter()
        .zip(b.steps(level))
        .filter(|(x, y)| (**x > 0.0) != (*y > 0.0))
        .count();
    Some((median, flips))
}

/// Standard normal samples from a seeded xorshift generator (Box–Muller).
struct Normal(u64);

impl Normal {
    fn new(seed: u64) -> Self {
        Self(seed | 1)
    }

    fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((self.0 >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    fn sample(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

/// Principal components of the channel vectors: mean and the top `max_rank` eigenvectors of the
/// covariance, largest eigenvalue first, each with a deterministic sign.
fn pca(rows: &[Vec<f32>], max_rank: usize) -> Projection {
    let c = rows.len();
    let n = rows[0].len();
    let mean: Vec<f32> = rows
        .iter()
        .map(|r| (r.iter().map(|v| f64::from(*v)).sum::<f64>() / n as f64) as f32)
        .collect();
    let x = DMatrix::<f64>::from_fn(c, n, |i, j| f64::from(rows[i][j] - mean[i]));
    let cov = (&x * x.transpose()) / n as f64;
    let diag: Vec<f64> = (0..c).map(|i| cov[(i, i)]).collect();
    let eig = SymmetricEigen::new(cov);
    if std::env::var_os("SPLIT_CODING_GAIN").is_some() {
        // High-rate coding gain of decorrelating the channels, bits per value, with variances
        // floored at 1% of the mean (finer detail than any useful step).
        let floor = 0.01 * diag.iter().sum::<f64>() / c as f64;
        let sum_log =
            |v: &mut dyn Iterator<Item = f64>| v.map(|x| x.max(floor).log2()).sum::<f64>();
        let gain = 0.5
            * (sum_log(&mut diag.iter().copied()) - sum_log(&mut eig.eigenvalues.iter().copied()))
            / c as f64;
        eprintln!("coding gain: channels decorrelated: {gain:.3} bits/value");
    }
    let mut order: Vec<usize> = (0..c).collect();
    order.sort_by(|a, b| eig.eigenvalues[*b].total_cmp(&eig.eigenvalues[*a]));
    let rank = max_rank.min(c);
    let mut basis = vec![0.0f32; c * rank];
    for (k, &col) in order.iter().take(rank).enumerate() {
        let v = eig.eigenvectors.column(col);
        let sign = if v.iter().fold(0.0f64, |a, x| if x.abs() > a.abs() { *x } else { a }) < 0.0 {
            -1.0
        } else {
            1.0
        };
        for ch in 0..c {
            basis[ch * rank + k] = (v[ch] * sign) as f32;
        }
    }
    Projection { mean, basis, max_rank: rank }
}

fn tables_for(
    collected: &Collected,
    max_rank: usize,
    allocation: Allocation,
) -> Result<BoundaryTables> {
    let rows = &collected.samples;
    let mut t = BoundaryTables::default();
    if collected.probed > 0 {
        let (mut center, mut spread) = (Vec::new(), Vec::new());
        for r in rows {
            let n = r.len().max(1) as f64;
            let mean = r.iter().map(|v| f64::from(*v)).sum::<f64>() / n;
            let var = r.iter().map(|v| (f64::from(*v) - mean).powi(2)).sum::<f64>() / n;
            center.push(mean as f32);
            spread.push(var.sqrt() as f32);
        }
        let mut weight: Vec<f32> =
            collected.sensitivity.iter().map(|s| (s / collected.probed as f64) as f32).collect();
        if allocation == Allocation::Spread {
            // Same total predicted distortion, shared in proportion to each channel's variance.
            let sent: Vec<(f32, f32)> = weight
                .iter()
                .zip(&spread)
                .filter(|(_, s)| **s > 0.0)
                .map(|(w, s)| (*w, *s))
                .collect();
            let k = sent.iter().map(|(w, s)| f64::from(w * s * s)).sum::<f64>()
                / sent.len().max(1) as f64;
            weight = spread
                .iter()
                .map(|s| if *s > 0.0 { (k / f64::from(s * s)) as f32 } else { 0.0 })
                .collect();
        }
        t.alloc = Some(AllocTable::new(center, spread, weight)?);
    }
    for bits in SUPPORTED_BITS {
        t.raw.insert(bits, fit_table(bits, rows)?);
    }
    let projection = pca(rows, max_rank);
    let n = rows[0].len();
    let flat: Vec<f32> = rows.concat();
    let y = projection.project(&flat, projection.max_rank);
    let components: Vec<Vec<f32>> = y.chunks_exact(n).map(<[f32]>::to_vec).collect();
    let mut tables = BTreeMap::new();
    for bits in SUPPORTED_BITS {
        tables.insert(bits, fit_table(bits, &components)?);
    }
    t.pca = Some(PcaTables { projection, tables });
    Ok(t)
}

/// Run the calibration.
pub fn run(args: Args) -> Result<()> {
    calibrate(&options(args)?).map(drop)
}

fn calibrate(o: &Options) -> Result<PathBuf> {
    let weights = setup::ensure_weights()?;
    let model = EfficientNetLite0::load(&weights, &Device::flex())?;
    let images = inputs(o)?;
    match &o.images {
        Some(dir) => eprintln!("calibrate: {} images from {}", images.len(), dir.display()),
        None => eprintln!(
            "calibrate: {} views of the bundled photos (pass --images DIR for your own)",
            images.len()
        ),
    }
    let collected = collect(&model, &images, &o.boundaries, o.sensitivity_images)?;
    let probed = collected.values().map(|c| c.probed).max().unwrap_or(0);
    let mut boundaries = BTreeMap::new();
    for (b, c) in collected {
        boundaries.insert(b, tables_for(&c, o.max_rank, o.allocation)?);
        let sent = boundaries[&b].alloc.as_ref().map_or(String::new(), |t| {
            let count = |level| t.steps(level).iter().filter(|s| **s > 0.0).count();
            let moved = convergence(&c, t.spread(), t.center()).map_or(String::new(), |(m, f)| {
                format!(
                    "; the first {} of them against all: weights moved by a median {:.1}%, \
                     {f} channels sent by one only at {}",
                    c.half.as_ref().map_or(0, |h| h.1),
                    100.0 * m.exp_m1(),
                    split_shared::codec::DEFAULT_SETTING
                )
            });
            format!(
                "; channels sent at s8/s12/s16: {}/{}/{}{moved}",
                count(8),
                count(12),
                count(16)
            )
        });
        eprintln!(
            "calibrate: {b} fitted ({} channels, {} samples each, sensitivities from {} images{sent})",
            b.info().shape[0],
            c.samples[0].len(),
            c.probed
        );
    }
    let probed = u32::try_from(probed).unwrap_or(u32::MAX);
    let calibration =
        Calibration::new(images.len() as u32, boundaries.into_iter().map(|(b, t)| (b.name(), t)))
            .with_sensitivity_images(probed);
    let bytes = calibration.to_bytes();
    setup::write_atomically(&o.out, &bytes)?;
    eprintln!(
        "calibration: wrote {} ({} bytes, id {:016x})",
        o.out.display(),
        bytes.len(),
        calibration.id()
    );
    Ok(o.out.clone())
}
