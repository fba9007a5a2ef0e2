//! The classifier and the pooled features as integers: what the ciphertext computes on.

use super::PLAINTEXT_MODULUS;
use super::layout::{IN, OUT};

/// The pooled features' range: the head ends in ReLU6 and the pool averages, so every value is
/// in `[0, 6]`; no calibration needed.
pub const FEATURE_MAX: f32 = 6.0;
/// Feature levels: `[0, FEATURE_MAX]` to `0..=FEATURE_LEVELS`.
pub const FEATURE_LEVELS: i64 = 255;
/// Weight levels: `[−max |w|, max |w|]` to `−WEIGHT_LEVELS..=WEIGHT_LEVELS`, one scale for the
/// whole matrix, so that the integer logits rank as the real ones (no scale per class needed
/// to take the top-5).
pub const WEIGHT_LEVELS: i64 = 255;

/// The largest sum of products a logit can reach, bias aside.
const PRODUCTS_MAX: i64 = FEATURE_LEVELS * WEIGHT_LEVELS * IN as i64;
/// The largest bias, in integer units: a logit must stay inside the plaintext space's
/// `(−t/2, t/2]`, products and bias together (the real biases need about 10⁴).
const BIAS_MAX: i64 = (PLAINTEXT_MODULUS as i64) / 2 - PRODUCTS_MAX - 1;
const _: () = assert!(BIAS_MAX > 1_000_000);

/// The classifier (1280 → 1000) with integer weights and bias.
#[derive(Clone, Debug, PartialEq)]
pub struct QuantizedClassifier {
    /// `OUT × IN`, row-major, in `−WEIGHT_LEVELS..=WEIGHT_LEVELS`.
    pub weights: Vec<i64>,
    /// In units of `feature_step × weight_step`, clamped to what the plaintext space holds.
    pub bias: Vec<i64>,
    /// One weight level, in weight units.
    pub weight_step: f32,
}

impl QuantizedClassifier {
    /// From the real classifier: `weight` `OUT × IN` row-major (PyTorch's `[out, in]`), `bias`
    /// `OUT`.
    ///
    /// # Panics
    /// When the shapes are not the classifier's (a caller's mistake, not input).
    pub fn new(weight: &[f32], bias: &[f32]) -> Self {
        assert_eq!((weight.len(), bias.len()), (OUT * IN, OUT), "the classifier's shapes");
        let max = weight.iter().fold(0f32, |m, w| m.max(w.abs())).max(f32::MIN_POSITIVE);
        let weight_step = max / WEIGHT_LEVELS as f32;
        let weights = weight.iter().map(|w| (w / weight_step).round() as i64).collect();
        let unit = feature_step() * weight_step;
        let bias =
            bias.iter().map(|b| ((b / unit).round() as i64).clamp(-BIAS_MAX, BIAS_MAX)).collect();
        Self { weights, bias, weight_step }
    }

    /// The logits from the integer ones, in the real classifier's units.
    pub fn logits(&self, integer: &[i64]) -> Vec<f32> {
        logits_of(integer, self.weight_step)
    }

    /// The integer logits in the clear: what a decrypted answer must equal.
    pub fn evaluate(&self, features: &[i64]) -> Vec<i64> {
        (0..OUT)
            .map(|o| {
                let row = &self.weights[o * IN..(o + 1) * IN];
                row.iter().zip(features).map(|(w, x)| w * x).sum::<i64>() + self.bias[o]
            })
            .collect()
    }
}

/// The logits from the integer ones, given the classifier's weight step (what a device that
/// holds only that step, not the weights, decrypts its answer with).
pub fn logits_of(integer: &[i64], weight_step: f32) -> Vec<f32> {
    let unit = feature_step() * weight_step;
    integer.iter().map(|v| *v as f32 * unit).collect()
}

/// One feature level, in feature units.
pub fn feature_step() -> f32 {
    FEATURE_MAX / FEATURE_LEVELS as f32
}

/// The pooled features (`IN` values) as integers in `0..=FEATURE_LEVELS`; values outside
/// `[0, FEATURE_MAX]` (none, from this network) are clamped, NaN taken as 0.
pub fn quantize_features(pooled: &[f32]) -> Vec<i64> {
    pooled
        .iter()
        .map(|v| {
            let v = if v.is_nan() { 0.0 } else { v.clamp(0.0, FEATURE_MAX) };
            (v / feature_step()).round() as i64
        })
        .collect()
}
