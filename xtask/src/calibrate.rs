//! `cargo xtask calibrate`: fit the codec's tables to real activations and write the
//! calibration artefact the server loads and serves to browsers.
//!
//! `cargo xtask calibrate --help` lists the options. Per boundary it collects activations of the images (a strided sample of at most
//! [`POSITIONS_PER_IMAGE`] spatial positions per image), then for each bit depth picks the
//! per-channel clip range with the least quantization error and counts symbol frequencies; and it
//! learns a PCA projection of the channel vector (components by decreasing variance) with tables
//! of its own. Without `--images` it uses the three bundled CC0 photos, each in 30 crops and
//! flips: enough for working tables, though a few hundred photos of the target domain calibrate
//! better (see the README's codec section for measured figures of both).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use burn::tensor::Device;
use nalgebra::{DMatrix, SymmetricEigen};
use split_shared::codec::fit::fit_table;
use split_shared::codec::{BoundaryTables, Calibration, PcaTables, Projection, SUPPORTED_BITS};
use split_shared::image::{RgbImage, center_crop_resize, to_input_tensor};
use split_shared::model::{Boundary, EfficientNetLite0};

use crate::{paths, setup};

/// Spatial positions sampled per image and boundary.
const POSITIONS_PER_IMAGE: usize = 256;
/// Most principal components stored per boundary.
const DEFAULT_MAX_RANK: usize = 128;

/// Fit the codec's tables to real activations and write the calibration file.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Folder of images; default: crops and flips of the three bundled photos.
    #[arg(long, env = "SPLIT_CALIBRATION_IMAGES")]
    images: Option<PathBuf>,
    /// Skip the first N images (sorted by name).
    #[arg(long, default_value_t = 0)]
    skip: usize,
    /// Use at most N images.
    #[arg(long)]
    limit: Option<usize>,
    /// Where to write it; default: the path the server reads.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Boundaries to calibrate (stem to head), comma-separated; default: all of them.
    #[arg(long, value_delimiter = ',')]
    boundaries: Vec<Boundary>,
    /// Most principal components stored per boundary.
    #[arg(long, default_value_t = DEFAULT_MAX_RANK)]
    max_rank: usize,
}

struct Options {
    images: Option<PathBuf>,
    skip: usize,
    limit: usize,
    out: PathBuf,
    boundaries: Vec<Boundary>,
    max_rank: usize,
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
        out: a.out.unwrap_or_else(split_paths::calibration_file),
        boundaries,
        max_rank: a.max_rank,
    })
}

/// Sorted image files of a folder, `skip` then at most `limit` of them.
pub fn image_files(dir: &Path, skip: usize, limit: usize) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            matches!(p.extension().and_then(|e| e.to_str()), Some("jpg" | "jpeg" | "png" | "JPEG"))
        })
        .collect();
    files.sort();
    let files: Vec<PathBuf> = files.into_iter().skip(skip).take(limit).collect();
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

/// Per boundary: `channels` rows of samples, position-aligned across channels.
fn collect(
    model: &EfficientNetLite0,
    images: &[RgbImage],
    boundaries: &[Boundary],
) -> Result<BTreeMap<Boundary, Vec<Vec<f32>>>> {
    let device = Device::flex();
    let mut samples: BTreeMap<Boundary, Vec<Vec<f32>>> =
        boundaries.iter().map(|b| (*b, vec![Vec::new(); b.info().shape[0]])).collect();
    let last = *boundaries.iter().max().expect("at least one boundary");
    for (i, img) in images.iter().enumerate() {
        let mut x = to_input_tensor(img, &device);
        let mut at = Boundary::INPUT;
        for b in Boundary::all().filter(|b| *b > Boundary::INPUT && *b <= last) {
            x = model.forward_range(x, at, b)?;
            at = b;
            let Some(rows) = samples.get_mut(&b) else { continue };
            let values = x.clone().into_data().try_to_vec::<f32>().expect("f32 activations");
            let positions = values.len() / rows.len();
            let stride = positions.div_ceil(POSITIONS_PER_IMAGE).max(1);
            let offset = i % stride;
            for (row, channel) in rows.iter_mut().zip(values.chunks_exact(positions)) {
                row.extend(channel.iter().skip(offset).step_by(stride));
            }
        }
        if (i + 1) % 25 == 0 {
            eprintln!("calibrate: {}/{} images", i + 1, images.len());
        }
    }
    Ok(samples)
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
    let eig = SymmetricEigen::new(cov);
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

fn tables_for(rows: &[Vec<f32>], max_rank: usize) -> Result<BoundaryTables> {
    let mut t = BoundaryTables::default();
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

/// Make sure a valid calibration exists at the default path (written from the bundled photos,
/// or from `$SPLIT_CALIBRATION_IMAGES`); returns its path.
pub fn ensure_calibration() -> Result<PathBuf> {
    let path = split_paths::calibration_file();
    if let Ok(bytes) = std::fs::read(&path) {
        match Calibration::from_bytes(&bytes) {
            Ok(c) => {
                eprintln!("calibration: {} is up to date ({:016x})", path.display(), c.id());
                return Ok(path);
            }
            Err(e) => {
                eprintln!("calibration: {} is unusable ({e}); calibrating again", path.display())
            }
        }
    }
    // The flags' defaults and environment, as `cargo xtask calibrate` without flags has them.
    #[derive(clap::Parser)]
    struct Defaults {
        #[command(flatten)]
        args: Args,
    }
    calibrate(&options(<Defaults as clap::Parser>::parse_from(["calibrate"]).args)?)
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
    let samples = collect(&model, &images, &o.boundaries)?;
    let mut boundaries = BTreeMap::new();
    for (b, rows) in samples {
        boundaries.insert(b, tables_for(&rows, o.max_rank)?);
        eprintln!(
            "calibrate: {b} fitted ({} channels, {} samples each)",
            b.info().shape[0],
            rows[0].len()
        );
    }
    let calibration = Calibration::new(images.len() as u32, boundaries);
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
