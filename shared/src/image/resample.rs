//! Bicubic resampling that reproduces Pillow's `Image.resize(..., BICUBIC)` on 8-bit images.
//!
//! Why not the `image` crate's filter: the weights' accuracy was measured with Pillow's pipeline,
//! and matching it pixel-for-pixel lets the golden tests compare against the reference exactly.
//! Pillow widens the cubic kernel by the downscale factor (anti-aliasing), normalizes each
//! output pixel's taps, rounds them to 22-bit fixed point, and runs the horizontal pass (rounded
//! to 8 bits) before the vertical one.

use super::RgbImage;

/// Fixed-point precision Pillow uses for 8-bit images: 32 bits minus 8 for the value minus 2
/// for the sign and headroom.
const PRECISION_BITS: u32 = 32 - 8 - 2;
/// Support of the cubic kernel at scale 1.
const CUBIC_SUPPORT: f64 = 2.0;
/// Keys' cubic with a = -0.5, as Pillow uses.
const CUBIC_A: f64 = -0.5;

fn cubic(x: f64) -> f64 {
    let x = x.abs();
    if x < 1.0 {
        ((CUBIC_A + 2.0) * x - (CUBIC_A + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        (((x - 5.0) * x + 8.0) * x - 4.0) * CUBIC_A
    } else {
        0.0
    }
}

/// For every output index: first input index and fixed-point taps.
fn coefficients(in_size: usize, out_size: usize) -> Vec<(usize, Vec<i32>)> {
    let scale = in_size as f64 / out_size as f64;
    let filter_scale = scale.max(1.0);
    let support = CUBIC_SUPPORT * filter_scale;
    (0..out_size)
        .map(|xx| {
            let center = (xx as f64 + 0.5) * scale;
            // C's (int) cast truncates toward zero before the clamp.
            let xmin = ((center - support + 0.5).trunc() as i64).max(0) as usize;
            let xmax = ((center + support + 0.5).trunc() as i64).min(in_size as i64) as usize;
            let weights: Vec<f64> =
                (xmin..xmax).map(|x| cubic((x as f64 - center + 0.5) / filter_scale)).collect();
            let total: f64 = weights.iter().sum();
            let one = f64::from(1u32 << PRECISION_BITS);
            let taps = weights
                .iter()
                .map(|w| {
                    let w = if total != 0.0 { w / total } else { 0.0 };
                    if w < 0.0 {
                        (w * one - 0.5).trunc() as i32
                    } else {
                        (w * one + 0.5).trunc() as i32
                    }
                })
                .collect();
            (xmin, taps)
        })
        .collect()
}

fn clip8(acc: i64) -> u8 {
    (acc >> PRECISION_BITS).clamp(0, 255) as u8
}

/// Resize an RGB image with Pillow-compatible bicubic filtering.
pub fn resize_bicubic(img: &RgbImage, out_w: usize, out_h: usize) -> RgbImage {
    let half = 1i64 << (PRECISION_BITS - 1);
    // Horizontal pass: width changes, height stays.
    let mut tmp = vec![0u8; img.height * out_w * 3];
    let horiz = coefficients(img.width, out_w);
    for y in 0..img.height {
        let row = &img.pixels[y * img.width * 3..(y + 1) * img.width * 3];
        for (x, (start, taps)) in horiz.iter().enumerate() {
            for c in 0..3 {
                let acc = taps.iter().enumerate().fold(half, |a, (i, t)| {
                    a + i64::from(row[(start + i) * 3 + c]) * i64::from(*t)
                });
                tmp[(y * out_w + x) * 3 + c] = clip8(acc);
            }
        }
    }
    // Vertical pass.
    let mut out = vec![0u8; out_h * out_w * 3];
    let vert = coefficients(img.height, out_h);
    for (y, (start, taps)) in vert.iter().enumerate() {
        for x in 0..out_w * 3 {
            let acc = taps.iter().enumerate().fold(half, |a, (i, t)| {
                a + i64::from(tmp[(start + i) * out_w * 3 + x]) * i64::from(*t)
            });
            out[y * out_w * 3 + x] = clip8(acc);
        }
    }
    RgbImage { width: out_w, height: out_h, pixels: out }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_image_stays_constant() {
        let img = RgbImage::new(37, 23, vec![200; 37 * 23 * 3]).unwrap();
        let out = resize_bicubic(&img, 16, 9);
        assert!(out.pixels.iter().all(|p| *p == 200));
    }

    #[test]
    fn taps_sum_to_one_in_fixed_point() {
        for (i, o) in [(262, 224), (224, 224), (100, 224), (1000, 224)] {
            for (_, taps) in coefficients(i, o) {
                let s: i32 = taps.iter().sum();
                assert!((s - (1 << PRECISION_BITS)).abs() <= taps.len() as i32, "{i}->{o}: {s}");
            }
        }
    }
}
