//! Fitting tables to sample activations: what the calibration command runs per boundary.

use super::quant::{self, ClipRange};
use super::{CodecError, QuantTable};

/// Tail fractions tried for clipping, both ends alike; 0 keeps the full observed range.
const TAIL_CANDIDATES: [f64; 8] = [0.0, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 2e-2, 5e-2];

/// The clip range minimizing the mean squared quantization error of `sorted` (ascending) at
/// `bits`: clipping a few outliers buys a finer step for everything else, and the best trade
/// depends on the bit depth.
pub fn best_clip(sorted: &[f32], bits: u8) -> ClipRange {
    let n = sorted.len();
    if n == 0 {
        return ClipRange { lo: 0.0, hi: 0.0 };
    }
    let levels = 1usize << bits;
    let mut best = (f64::INFINITY, ClipRange { lo: sorted[0], hi: sorted[n - 1] });
    let mut q = Vec::new();
    let mut back = Vec::new();
    for tail in TAIL_CANDIDATES {
        let k = ((tail * n as f64) as usize).min((n - 1) / 2);
        let range = ClipRange { lo: sorted[k], hi: sorted[n - 1 - k] };
        quant::quantize(sorted, &[range], levels, &mut q);
        quant::dequantize(&q, &[range], levels, &mut back);
        let mse: f64 = sorted.iter().zip(&back).map(|(a, b)| f64::from(a - b).powi(2)).sum();
        if mse < best.0 {
            best = (mse, range);
        }
    }
    best.1
}

/// A table for `bits` from per-channel samples: MSE-best clip ranges, and symbol frequencies
/// of the samples quantized with them.
///
/// # Errors
/// Never for well-formed input; the signature follows [`QuantTable::from_counts`].
pub fn fit_table(bits: u8, channels: &[Vec<f32>]) -> Result<QuantTable, CodecError> {
    let levels = 1usize << bits;
    let mut ranges = Vec::with_capacity(channels.len());
    let mut counts = Vec::with_capacity(channels.len());
    let mut q = Vec::new();
    for samples in channels {
        let mut sorted: Vec<f32> = samples.iter().copied().filter(|v| v.is_finite()).collect();
        sorted.sort_by(f32::total_cmp);
        let range = best_clip(&sorted, bits);
        quant::quantize(&sorted, &[range], levels, &mut q);
        let mut histogram = vec![0u64; levels];
        for s in &q {
            histogram[usize::from(*s)] += 1;
        }
        ranges.push(range);
        counts.push(histogram);
    }
    QuantTable::from_counts(bits, ranges, &counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clipping_trims_a_lone_outlier_at_low_bit_depths() {
        let mut v: Vec<f32> = (0..10_000).map(|i| (i % 100) as f32 / 100.0).collect();
        v.push(50.0);
        v.sort_by(f32::total_cmp);
        let r2 = best_clip(&v, 2);
        assert!(r2.hi < 2.0, "the outlier would waste every level: {r2:?}");
        let full = best_clip(&[0.0, 1.0, 2.0], 8);
        assert_eq!((full.lo, full.hi), (0.0, 2.0));
    }
}
