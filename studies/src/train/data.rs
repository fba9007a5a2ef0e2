//! The photos training sees and the photos it never sees, and the augmentations.
//!
//! The dev set has one photo per class (500 of ImageNet's even classes). A photo is held back
//! by its file name's hash, a quarter of them, the same on every run and machine; the claims
//! are measured on those. Training views are random resized crops (a quarter to all of the
//! photo's area, aspect 3:4 to 4:3), mirrored half the time, with brightness, contrast and
//! saturation jittered by up to ±30%: the teacher sees the same view, so any view is a valid
//! example.
//!
//! More photos may be trained on beside the dev set's (`--extra`): any natural photos serve,
//! since no label is used. They are never held back and never measured.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use rand::Rng;
use split_shared::container::fnv1a64;
use split_shared::image::{RgbImage, resize_bicubic};
use split_shared::model::INPUT_SIZE;

/// One photo in four is held back.
const HOLD_BACK_ONE_IN: u64 = 4;

/// Whether the photo of this file name is held back from training.
pub fn held_back(name: &str) -> bool {
    fnv1a64(name.as_bytes()).is_multiple_of(HOLD_BACK_ONE_IN)
}

/// Whether a held-back photo is in the half that chooses thresholds (the other half is
/// reported): the hash's next bit.
pub fn chooses(name: &str) -> bool {
    (fnv1a64(name.as_bytes()) / HOLD_BACK_ONE_IN).is_multiple_of(2)
}

/// The files of a folder, split into those trained on and those held back.
pub fn split(files: &[PathBuf]) -> (Vec<PathBuf>, Vec<PathBuf>) {
    files
        .iter()
        .cloned()
        .partition(|f| !held_back(f.file_name().and_then(|n| n.to_str()).unwrap_or_default()))
}

/// The held-back files in their two halves: those that choose (thresholds, or what to
/// watch while training) and those reported.
pub fn halves(held: &[PathBuf]) -> (Vec<PathBuf>, Vec<PathBuf>) {
    held.iter()
        .cloned()
        .partition(|f| chooses(f.file_name().and_then(|n| n.to_str()).unwrap_or_default()))
}

/// Photos trained on beside the dev set's.
#[derive(clap::Args, Debug, Default)]
pub struct Extra {
    /// A folder of more photos to train on, its subfolders included (e.g.
    /// ../shared/data/caltech101): all trained on, none held back or measured.
    #[arg(long)]
    pub extra: Option<PathBuf>,
    /// At most this many photos of each folder of `--extra`, the first by name (a collection
    /// with a few large folders would otherwise be mostly those).
    #[arg(long, default_value_t = 40)]
    pub extra_per_folder: usize,
}

impl Extra {
    /// The extra photos, sorted by path; none without `--extra`.
    pub fn files(&self) -> Result<Vec<PathBuf>> {
        let Some(root) = &self.extra else { return Ok(Vec::new()) };
        let mut out = Vec::new();
        collect(root, 0..self.extra_per_folder, &mut out)?;
        if out.is_empty() {
            anyhow::bail!("--extra: no .jpg or .png images in {} or below", root.display());
        }
        Ok(out)
    }

    /// Up to `n` more photos of each folder, the next by name: not trained on.
    pub fn measured(&self, n: usize) -> Result<Vec<PathBuf>> {
        let Some(root) = &self.extra else { return Ok(Vec::new()) };
        let mut out = Vec::new();
        let first = self.extra_per_folder;
        collect(root, first..first.saturating_add(n), &mut out)?;
        Ok(out)
    }
}

/// The photos of `dir` and its subfolders whose rank by name in their folder is in `ranks`.
fn collect(dir: &Path, ranks: std::ops::Range<usize>, out: &mut Vec<PathBuf>) -> Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    let mut rank = 0;
    for path in entries {
        if path.is_dir() {
            collect(&path, ranks.clone(), out)?;
        } else if crate::eval::is_image(&path) {
            if ranks.contains(&rank) {
                out.push(path);
            }
            rank += 1;
        }
    }
    Ok(())
}

/// How the photos trained on are listed (in a trained file's `meta.photos`, in cache keys):
/// a dev photo by its file name, an extra one with its folder's name in front (collections
/// reuse file names from folder to folder).
pub fn listing(dev: &[PathBuf], extra: &[PathBuf]) -> String {
    fn name(f: &Path) -> String {
        f.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string()
    }
    fn folder(f: &Path) -> String {
        f.parent().map(name).unwrap_or_default()
    }
    dev.iter()
        .map(|f| name(f))
        .chain(extra.iter().map(|f| format!("{}/{}", folder(f), name(f))))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A random view of `img` at the network's input size.
pub fn augment(img: &RgbImage, rng: &mut impl Rng) -> RgbImage {
    let (w, h) = (img.width as f64, img.height as f64);
    let area = w * h * rng.random_range(0.25..=1.0);
    let aspect = rng.random_range((3.0f64 / 4.0).ln()..=(4.0f64 / 3.0).ln()).exp();
    let cw = ((area * aspect).sqrt().round() as usize).clamp(1, img.width);
    let ch = ((area / aspect).sqrt().round() as usize).clamp(1, img.height);
    let left = rng.random_range(0..=img.width - cw);
    let top = rng.random_range(0..=img.height - ch);
    let mut view = resize_bicubic(&img.crop(left, top, cw, ch), INPUT_SIZE, INPUT_SIZE);
    if rng.random_bool(0.5) {
        mirror(&mut view);
    }
    let jitter =
        |rng: &mut dyn rand::RngCore| 1.0 + (rng.next_u32() as f32 / u32::MAX as f32 - 0.5) * 0.6;
    colour(&mut view, jitter(rng), jitter(rng), jitter(rng));
    view
}

fn mirror(img: &mut RgbImage) {
    let row = img.width * 3;
    for line in img.pixels.chunks_exact_mut(row) {
        for x in 0..img.width / 2 {
            for c in 0..3 {
                line.swap(x * 3 + c, (img.width - 1 - x) * 3 + c);
            }
        }
    }
}

/// Brightness, contrast (around the image's mean grey) and saturation (around each pixel's
/// grey), as factors.
fn colour(img: &mut RgbImage, brightness: f32, contrast: f32, saturation: f32) {
    let grey =
        |p: &[u8]| 0.299 * f32::from(p[0]) + 0.587 * f32::from(p[1]) + 0.114 * f32::from(p[2]);
    let n = (img.pixels.len() / 3).max(1) as f32;
    let mean = img.pixels.chunks_exact(3).map(grey).sum::<f32>() / n * brightness;
    for p in img.pixels.chunks_exact_mut(3) {
        let g = grey(p) * brightness;
        for v in p.iter_mut() {
            let x = f32::from(*v) * brightness;
            let x = g + (x - g) * saturation;
            let x = mean + (x - mean) * contrast;
            *v = x.round().clamp(0.0, 255.0) as u8;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    /// About a quarter held back, by name alone.
    #[test]
    fn a_quarter_is_held_back_by_name() {
        let files: Vec<PathBuf> =
            (0..400).map(|i| PathBuf::from(format!("photo-{i}.jpg"))).collect();
        let (train, held) = split(&files);
        assert_eq!(train.len() + held.len(), 400);
        assert!((70..=130).contains(&held.len()), "{}", held.len());
        assert!(held.iter().all(|f| held_back(f.to_str().unwrap())));
    }

    /// Extra photos come from every folder, at most so many of each, listed with their folder;
    /// the measured ones are the next of each folder.
    #[test]
    fn extra_photos_are_read_from_every_folder() {
        let root = std::env::temp_dir().join(format!("split-extra-{}", std::process::id()));
        for (dir, n) in [("a", 3), ("b", 1)] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
            for i in 0..n {
                std::fs::write(root.join(dir).join(format!("image_{i}.jpg")), b"").unwrap();
            }
            std::fs::write(root.join(dir).join("notes.txt"), b"").unwrap();
        }
        let extra = Extra { extra: Some(root.clone()), extra_per_folder: 2 };
        let files = extra.files().unwrap();
        let listed = listing(&[PathBuf::from("/dev/n1_x.JPEG")], &files);
        assert_eq!(listed, "n1_x.JPEG\na/image_0.jpg\na/image_1.jpg\nb/image_0.jpg");
        assert_eq!(extra.measured(5).unwrap(), [root.join("a").join("image_2.jpg")]);
        assert!(Extra::default().files().unwrap().is_empty());
        let empty = Extra { extra: Some(root.join("a").join("notes.txt")), extra_per_folder: 2 };
        assert!(empty.files().is_err());
        std::fs::remove_dir_all(root).unwrap();
    }

    /// Views are the input size, differ from one another, and the same seed makes the same.
    #[test]
    fn views_are_random_and_reproducible() {
        let img =
            RgbImage::new(40, 30, (0..40 * 30 * 3).map(|i| (i * 7 % 256) as u8).collect()).unwrap();
        let a = augment(&img, &mut StdRng::seed_from_u64(1));
        let b = augment(&img, &mut StdRng::seed_from_u64(1));
        let c = augment(&img, &mut StdRng::seed_from_u64(2));
        assert_eq!((a.width, a.height), (INPUT_SIZE, INPUT_SIZE));
        assert_eq!(a, b);
        assert_ne!(a, c);
        let mut m = a.clone();
        mirror(&mut m);
        assert_ne!(m, a);
        mirror(&mut m);
        assert_eq!(m, a);
    }
}
