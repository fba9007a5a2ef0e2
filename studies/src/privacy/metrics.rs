//! How close a reconstruction is to the photo, on `[0, 1]` values in the layout the network
//! reads (`[3, H, W]`, channel planes): PSNR over the RGB pixels, SSIM over their luma, and
//! the correlation of their coarse luma ([`structure`]), the one that tracks whether a person
//! would recognise the photo.

/// Peak signal-to-noise ratio in dB of `b` against `a` (values in `[0, 1]`, same length);
/// `f64::INFINITY` when they are equal.
pub fn psnr(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len(), "psnr of images of different sizes");
    let mse = a.iter().zip(b).map(|(x, y)| f64::from(x - y).powi(2)).sum::<f64>() / a.len() as f64;
    if mse == 0.0 { f64::INFINITY } else { -10.0 * mse.log10() }
}

/// ITU-R BT.601 luma of a `[3, h, w]` image.
fn luma(chw: &[f32], plane: usize) -> Vec<f64> {
    (0..plane)
        .map(|i| {
            0.299 * f64::from(chw[i])
                + 0.587 * f64::from(chw[plane + i])
                + 0.114 * f64::from(chw[2 * plane + i])
        })
        .collect()
}

/// The 11-tap Gaussian window (σ = 1.5) of the usual SSIM, normalized.
fn window() -> [f64; 11] {
    let mut w = [0.0; 11];
    for (i, v) in w.iter_mut().enumerate() {
        let d = i as f64 - 5.0;
        *v = (-d * d / (2.0 * 1.5 * 1.5)).exp();
    }
    let sum: f64 = w.iter().sum();
    w.map(|v| v / sum)
}

/// Separable Gaussian filter, "valid" region only (no padding): `(h - 10) × (w - 10)`.
fn blur(x: &[f64], h: usize, w: usize) -> Vec<f64> {
    let k = window();
    let (oh, ow) = (h - 10, w - 10);
    let mut rows = vec![0.0; h * ow];
    for y in 0..h {
        for x0 in 0..ow {
            rows[y * ow + x0] = (0..11).map(|t| k[t] * x[y * w + x0 + t]).sum();
        }
    }
    let mut out = vec![0.0; oh * ow];
    for y0 in 0..oh {
        for x0 in 0..ow {
            out[y0 * ow + x0] = (0..11).map(|t| k[t] * rows[(y0 + t) * ow + x0]).sum();
        }
    }
    out
}

/// Structural similarity (Wang et al. 2004: 11×11 Gaussian window, σ = 1.5, K1 = 0.01,
/// K2 = 0.03, dynamic range 1) of the luma of `b` against `a`, both `[3, h, w]` in `[0, 1]`.
/// 1 for identical images, about 0 for unrelated ones.
pub fn ssim(a: &[f32], b: &[f32], h: usize, w: usize) -> f64 {
    assert!(h > 10 && w > 10, "ssim needs images larger than its 11x11 window");
    assert_eq!(a.len(), 3 * h * w, "ssim: first image is not [3, {h}, {w}]");
    assert_eq!(b.len(), 3 * h * w, "ssim: second image is not [3, {h}, {w}]");
    let (x, y) = (luma(a, h * w), luma(b, h * w));
    let product = |p: &[f64], q: &[f64]| p.iter().zip(q).map(|(u, v)| u * v).collect::<Vec<_>>();
    let (mx, my) = (blur(&x, h, w), blur(&y, h, w));
    let (sxx, syy, sxy) =
        (blur(&product(&x, &x), h, w), blur(&product(&y, &y), h, w), blur(&product(&x, &y), h, w));
    let (c1, c2) = (0.01f64.powi(2), 0.03f64.powi(2));
    let n = mx.len();
    (0..n)
        .map(|i| {
            let (vx, vy, cxy) =
                (sxx[i] - mx[i] * mx[i], syy[i] - my[i] * my[i], sxy[i] - mx[i] * my[i]);
            ((2.0 * mx[i] * my[i] + c1) * (2.0 * cxy + c2))
                / ((mx[i] * mx[i] + my[i] * my[i] + c1) * (vx + vy + c2))
        })
        .sum::<f64>()
        / n as f64
}

/// The layout a reconstruction keeps: the Pearson correlation of the two images' luma averaged
/// over `factor × factor` cells (4: a 56×56 thumbnail of a 224×224 image). Blind to the
/// brightness, contrast and colour casts an inversion gets wrong and to its fine-grained noise,
/// it measures whether the photo's shapes are where they were: about 0 for an unrelated image,
/// 1 for the photo itself.
pub fn structure(a: &[f32], b: &[f32], h: usize, w: usize, factor: usize) -> f64 {
    let thumb = |chw: &[f32]| {
        let y = luma(chw, h * w);
        let (th, tw) = (h / factor, w / factor);
        let mut t = vec![0.0; th * tw];
        for r in 0..th * factor {
            for c in 0..tw * factor {
                t[(r / factor) * tw + c / factor] += y[r * w + c];
            }
        }
        t
    };
    let (x, y) = (thumb(a), thumb(b));
    let n = x.len() as f64;
    let (mx, my) = (x.iter().sum::<f64>() / n, y.iter().sum::<f64>() / n);
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (u, v) in x.iter().zip(&y) {
        sxy += (u - mx) * (v - my);
        sxx += (u - mx) * (u - mx);
        syy += (v - my) * (v - my);
    }
    // A flat image has no layout (its variance is rounding error at most).
    let flat = 1e-12 * n;
    if sxx <= flat || syy <= flat { 0.0 } else { sxy / (sxx * syy).sqrt() }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A smooth test image with some texture: `[3, h, w]`.
    fn image(h: usize, w: usize) -> Vec<f32> {
        (0..3 * h * w)
            .map(|i| {
                let (c, p) = (i / (h * w), i % (h * w));
                let (y, x) = ((p / w) as f32, (p % w) as f32);
                0.5 + 0.3 * ((x * 0.3 + c as f32).sin() * (y * 0.2).cos())
            })
            .collect()
    }

    #[test]
    fn psnr_of_a_known_error() {
        let a = vec![0.5f32; 300];
        let b = vec![0.6f32; 300]; // mse 0.01 -> 20 dB
        assert!((psnr(&a, &b) - 20.0).abs() < 1e-4);
        assert!(psnr(&a, &a).is_infinite());
    }

    #[test]
    fn ssim_is_one_for_equal_images_and_falls_with_damage() {
        let (h, w) = (32, 40);
        let a = image(h, w);
        assert!((ssim(&a, &a, h, w) - 1.0).abs() < 1e-9);
        let noisy: Vec<f32> = a
            .iter()
            .enumerate()
            .map(|(i, v)| v + if (i * 7919) % 13 < 6 { 0.08 } else { -0.08 })
            .collect();
        let flat = vec![0.5f32; a.len()];
        let (s_noisy, s_flat) = (ssim(&a, &noisy, h, w), ssim(&a, &flat, h, w));
        assert!(s_noisy < 0.9 && s_noisy > 0.1, "noisy {s_noisy}");
        assert!(s_flat < s_noisy, "a flat grey image keeps less structure: {s_flat}");
        // Symmetric, and a brightness shift costs less than noise of the same size.
        assert!((ssim(&noisy, &a, h, w) - s_noisy).abs() < 1e-12);
        let brighter: Vec<f32> = a.iter().map(|v| v + 0.08).collect();
        assert!(ssim(&a, &brighter, h, w) > s_noisy);
    }

    #[test]
    fn structure_ignores_contrast_and_fine_noise_but_not_layout() {
        let (h, w) = (32, 32);
        // A bright blob at (cx, cy) on grey.
        let blob = |cx: f32, cy: f32| -> Vec<f32> {
            (0..3 * h * w)
                .map(|i| {
                    let p = i % (h * w);
                    let (y, x) = ((p / w) as f32, (p % w) as f32);
                    0.3 + 0.6 * (-((x - cx).powi(2) + (y - cy).powi(2)) / 40.0).exp()
                })
                .collect()
        };
        let a = blob(8.0, 8.0);
        assert!((structure(&a, &a, h, w, 4) - 1.0).abs() < 1e-9);
        // Half the contrast, brighter, and a pixel-level checkerboard: the layout stays.
        let washed: Vec<f32> = a
            .iter()
            .enumerate()
            .map(|(i, v)| 0.3 + 0.5 * v + if (i + i / w) % 2 == 0 { 0.05 } else { -0.05 })
            .collect();
        assert!(structure(&a, &washed, h, w, 4) > 0.95);
        // The blob elsewhere: nothing of where things were.
        assert!(structure(&a, &blob(24.0, 24.0), h, w, 4) < 0.2);
        assert_eq!(structure(&a, &vec![0.5; a.len()], h, w, 4), 0.0, "a flat image has no layout");
    }
}
