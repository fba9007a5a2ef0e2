//! Privacy measured: what a white-box server could do with the features it receives.
//!
//! - `./run.sh invert`: reconstruct the photo from the features at each boundary by
//!   optimisation (feature match plus a total-variation prior) and score the reconstructions
//!   (PSNR, SSIM) per boundary, codec and noise;
//! - `./run.sh adversarial`: craft adversarial photos against the public model and measure
//!   how often the feature noise's random draw defeats them.
//!
//! Both need gradients, i.e. burn's autodiff, which the rest of the project never uses: it is
//! behind xtask's `invert` feature, and these tasks rebuild xtask with it when it is missing,
//! so that `./run.sh test` and the demo do not compile burn twice.

// Without autodiff only the relaunch and the tests use the helpers and metrics below.
#![cfg_attr(not(feature = "invert"), allow(dead_code))]

mod metrics;

#[cfg(feature = "invert")]
mod adversarial;
#[cfg(feature = "invert")]
mod attack;
#[cfg(feature = "invert")]
mod invert;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use split_shared::image::RgbImage;
use split_shared::model::{Boundary, INPUT_SIZE};

use xtask::paths;

/// A reconstruction whose [`metrics::structure`] (coarse-luma correlation with the photo) is at
/// or above this counts as recognisable. SSIM cannot be the test: from block11 on it scores a
/// reconstruction against an unrelated photo about as high as against its own (flat regions
/// match anything), while the shapes are still plainly there. Reconstructions correlate with
/// unrelated photos at |r| ≤ 0.14 in the measurements (chance); 0.1 errs on the side of calling
/// a reconstruction recognisable (docs/privacy.md).
pub const RECOGNISABLE_STRUCTURE: f64 = 0.1;

/// Options of `./run.sh invert`.
#[derive(clap::Args, Debug)]
pub struct InvertArgs {
    /// Photos reconstructed and drawn in the figure; default: the three bundled samples
    /// (web/samples). Only photos you may publish belong here.
    #[arg(long, value_delimiter = ',')]
    photos: Vec<PathBuf>,
    /// A folder of held-back photos (e.g. ../shared/data/imagenet-dev): measured, never written
    /// out.
    #[arg(long)]
    held_back: Option<PathBuf>,
    /// Skip the first N held-back photos (sorted by name).
    #[arg(long, default_value_t = 0)]
    skip: usize,
    /// Use at most N held-back photos.
    #[arg(long, default_value_t = 8)]
    limit: usize,
    /// Boundaries whose features the server receives.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "stem,block0,block1,block3,block5,block8,block11,block13,block15,head"
    )]
    boundaries: Vec<Boundary>,
    /// Codecs the features travel in (`f32`, `s14`, `q6`, ... as `./run.sh eval --codecs`);
    /// default: uncoded and the default codec. The page's reconstructions (`--page-dir`) are
    /// the first codec's.
    #[arg(long, value_delimiter = ',', default_values_t = default_codecs())]
    codecs: Vec<String>,
    /// Noise added before coding: `none`, `gauss:<scale>`, `laplace:<scale>`.
    #[arg(long, value_delimiter = ',', default_value = "none")]
    noise: Vec<String>,
    /// Optimisation steps per reconstruction.
    #[arg(long, default_value_t = 300)]
    steps: usize,
    /// Adam step size in pixel units, decayed to zero on a cosine.
    #[arg(long, default_value_t = 0.05)]
    lr: f64,
    /// Weight of the total-variation prior: one value, or one per boundary; default, by
    /// boundary: 5 up to block1, 25 to block5, 100 after (tuned on chelsea: deeper features
    /// need a stronger prior).
    #[arg(long, value_delimiter = ',')]
    tv: Vec<f64>,
    /// Folder of the report.
    #[arg(long, default_value = "reports/privacy")]
    out: PathBuf,
    /// Base name of the report's files (`<name>.md`, `.json`, `.jpg`).
    #[arg(long, default_value = "inversion")]
    name: String,
    /// Also write each sample's reconstruction as `<photo>-<boundary>.jpg` into this folder
    /// (the demo page's "what the server could reconstruct", web/samples/seen).
    #[arg(long)]
    page_dir: Option<PathBuf>,
}

/// `f32` and the codec clients send by default.
fn default_codecs() -> Vec<String> {
    vec!["f32".into(), split_shared::codec::DEFAULT_SETTING.to_string()]
}

impl InvertArgs {
    /// The prior's weight at the `i`-th boundary.
    fn tv_at(&self, i: usize) -> f64 {
        match self.tv.as_slice() {
            [] if self.boundaries[i] <= Boundary::block(1).expect("block1 exists") => 5.0,
            [] if self.boundaries[i] <= Boundary::block(5).expect("block5 exists") => 25.0,
            [] => 100.0,
            [one] => *one,
            many => many[i],
        }
    }

    fn photos(&self) -> Vec<PathBuf> {
        if self.photos.is_empty() {
            let samples = paths::repo_root().join("web/samples");
            ["chelsea", "coffee", "camera"]
                .iter()
                .map(|n| samples.join(format!("{n}.png")))
                .collect()
        } else {
            self.photos.clone()
        }
    }
}

/// Options of `./run.sh adversarial`.
#[derive(clap::Args, Debug)]
pub struct AdversarialArgs {
    /// Folder of photos (e.g. ../shared/data/imagenet-dev).
    #[arg(long)]
    images: PathBuf,
    /// Use at most N photos.
    #[arg(long, default_value_t = 40)]
    limit: usize,
    /// L∞ budgets of the attack, in 8-bit pixel steps (1 = 1/255).
    #[arg(long, value_delimiter = ',', default_value = "1,4")]
    eps: Vec<f32>,
    /// Signed-gradient steps of the attack.
    #[arg(long, default_value_t = 10)]
    steps: usize,
    /// The split whose features carry the noise.
    #[arg(long, default_value = "block5")]
    split: Boundary,
    /// Codec of the features frame.
    #[arg(long, default_value = "q6")]
    codec: String,
    /// Noise defences compared with none: `gauss:<scale>`, `laplace:<scale>`.
    #[arg(long, value_delimiter = ',', default_value = "gauss:0.02,gauss:0.05")]
    noise: Vec<String>,
    /// Noise draws the adaptive attacker averages its gradient over (0: no adaptive attack).
    #[arg(long, default_value_t = 4)]
    eot: usize,
    /// Noise draws each adversarial photo is answered with (a fresh seed each, as the browser).
    #[arg(long, default_value_t = 5)]
    trials: usize,
}

/// `./run.sh invert`.
pub fn invert(a: InvertArgs) -> Result<()> {
    #[cfg(feature = "invert")]
    return invert::run(a);
    #[cfg(not(feature = "invert"))]
    {
        let _ = a;
        relaunch()
    }
}

/// `./run.sh adversarial`.
pub fn adversarial(a: AdversarialArgs) -> Result<()> {
    #[cfg(feature = "invert")]
    return adversarial::run(a);
    #[cfg(not(feature = "invert"))]
    {
        let _ = a;
        relaunch()
    }
}

/// Run this same command again from a `split-studies` built with autodiff (`--features invert`).
#[cfg(not(feature = "invert"))]
fn relaunch() -> Result<()> {
    eprintln!(
        "split-studies: the attacks need burn's autodiff; running split-studies built with \
         --features invert"
    );
    let mut cargo = xtask::cmd::cargo();
    cargo.args(["run", "--package", "split-studies", "--features", "invert", "--"]);
    cargo.args(std::env::args_os().skip(1));
    xtask::cmd::run(&mut cargo)
}

/// What the server receives at `boundary` for `pixels`: the edge's features, noise added if
/// asked, coded and decoded exactly as browser and server do; and the frame's size.
#[cfg(feature = "invert")]
fn received(
    model: &split_shared::model::EfficientNetLite0,
    pixels: &[f32],
    boundary: Boundary,
    codec: &str,
    noise: Option<split_shared::codec::Noise>,
    calibration: &split_shared::codec::Calibration,
    seed: u64,
) -> Result<(split_shared::model::Features, usize)> {
    use split_shared::model::Features;
    let device = burn::tensor::Device::flex();
    let x = split_shared::image::to_input_tensor(&pixels_to_image(pixels), &device);
    let f = Features::from_tensor(boundary, model.forward_range(x, Boundary::INPUT, boundary)?)?;
    let f = match noise {
        Some(n) => f.with_noise(n, calibration, seed)?,
        None => f,
    };
    let setting = crate::eval::setting_at(codec, boundary, Some(calibration))?;
    let frame = crate::eval::encode_as_edge(seed, &f, setting, Some(calibration), None)?;
    let (decoded, _) = crate::eval::decode_as_server(&frame, Some(calibration), None)?;
    Ok((decoded, frame.len()))
}

/// A photo preprocessed as the network sees it, as `[3, 224, 224]` values in `[0, 1]`.
pub(crate) fn image_pixels(path: &Path) -> Result<Vec<f32>> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let img = split_shared::image::preprocess(&bytes)
        .with_context(|| format!("preprocessing {}", path.display()))?;
    let plane = INPUT_SIZE * INPUT_SIZE;
    let mut out = vec![0.0; 3 * plane];
    for (i, px) in img.pixels.chunks_exact(3).enumerate() {
        for c in 0..3 {
            out[c * plane + i] = f32::from(px[c]) / 255.0;
        }
    }
    Ok(out)
}

/// `[3, 224, 224]` values in `[0, 1]` back to 8-bit pixels (rounded, clamped).
pub(crate) fn pixels_to_image(chw: &[f32]) -> RgbImage {
    let plane = INPUT_SIZE * INPUT_SIZE;
    let mut px = vec![0u8; 3 * plane];
    for i in 0..plane {
        for c in 0..3 {
            px[i * 3 + c] = (chw[c * plane + i].clamp(0.0, 1.0) * 255.0).round() as u8;
        }
    }
    RgbImage::new(INPUT_SIZE, INPUT_SIZE, px).expect("224x224x3 values")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pixels_round_trip_through_an_image() {
        let path = paths::repo_root().join("web/samples/coffee.png");
        let p = image_pixels(&path).unwrap();
        assert_eq!(p.len(), 3 * INPUT_SIZE * INPUT_SIZE);
        assert!(p.iter().all(|v| (0.0..=1.0).contains(v)));
        let again: Vec<f32> =
            pixels_to_image(&p).pixels.iter().map(|v| f32::from(*v) / 255.0).collect();
        // Interleaved back: the same values in HWC order.
        let plane = INPUT_SIZE * INPUT_SIZE;
        assert_eq!(again[3 * 10 + 1], p[plane + 10]);
        assert!(metrics::psnr(&p, &p).is_infinite());
    }
}

#[cfg(test)]
mod page_index {
    use split_shared::model::PRIVACY_FLOOR;

    use super::*;

    /// The page's reconstructions and the default floor must say the same thing: every sample's
    /// reconstruction from the floor on is below the threshold, and the boundary measured just
    /// before it still gave a recognisable one (or the floor would be later than the data says).
    /// And they must have been measured on what a client sends by default: the default codec,
    /// no noise (a change of `DEFAULT_SETTING` fails here until `./run.sh invert` is re-run).
    #[test]
    fn the_default_floor_is_what_the_measurements_say() {
        let dir = paths::repo_root().join("web/samples/seen");
        let index: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("index.json")).unwrap()).unwrap();
        assert_eq!(index["floor"], PRIVACY_FLOOR.name());
        assert_eq!(index["codec"], split_shared::codec::DEFAULT_SETTING.to_string());
        assert_eq!(index["noise"], "none");
        assert_eq!(index["threshold"]["structure"], RECOGNISABLE_STRUCTURE);
        let samples = index["samples"].as_object().unwrap();
        assert_eq!(samples.len(), 3, "the three bundled samples");
        let mut before_floor = 0;
        for (photo, at) in samples {
            for (boundary, m) in at.as_object().unwrap() {
                let b: Boundary = boundary.parse().unwrap();
                let r = m["structure"].as_f64().unwrap();
                assert!(dir.join(m["file"].as_str().unwrap()).exists(), "{photo} {boundary}");
                if b >= PRIVACY_FLOOR {
                    assert!(r < RECOGNISABLE_STRUCTURE, "{photo} at {boundary}: structure {r}");
                }
            }
            let last_before = at
                .as_object()
                .unwrap()
                .iter()
                .filter_map(|(b, m)| Some((b.parse::<Boundary>().ok()?, m["structure"].as_f64()?)))
                .filter(|(b, _)| *b < PRIVACY_FLOOR)
                .max_by_key(|(b, _)| *b);
            if last_before.is_some_and(|(_, r)| r >= RECOGNISABLE_STRUCTURE) {
                before_floor += 1;
            }
        }
        assert!(before_floor > 0, "no sample was recognisable just before the floor");
    }
}
