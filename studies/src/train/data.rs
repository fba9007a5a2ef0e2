//! The photos training sees and the photos it never sees, and the augmentations.
//!
//! The dev set has one photo per class (500 of ImageNet's even classes). A photo is held back
//! by its file name's hash, a quarter of them, the same on every run and machine; the claims
//! are measured on those. Training views are random resized crops (a quarter to all of the
//! photo's area, aspect 3:4 to 4:3), mirrored half the time, with brightness, contrast and
//! saturation jittered by up to ±30%: the teacher sees the same view, so any view is a valid
//! example.

use std::path::PathBuf;

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
