//! Valid frames of every codec path, built from synthetic activations: seeds for the fuzzer and
//! inputs for robustness tests (the decoders do not care whether a network produced them).

use super::{Calibration, QuantSetting, SUPPORTED_BITS, Setting, StreamEncoder, features_request};
use crate::model::Boundary;

/// Deterministic activation-like values for one image at `boundary`.
pub fn synthetic_activations(boundary: Boundary, seed: u32) -> (Vec<usize>, Vec<f32>) {
    let [c, h, w] = boundary.info().shape;
    let mut state = 0x9e37_79b9u32 ^ seed.wrapping_mul(0x85eb_ca6b);
    let values = (0..c * h * w)
        .map(|i| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            let noise = (state >> 8) as f32 / (1 << 24) as f32 - 0.5;
            ((i % (h * w)) as f32 * 0.05 + (i / (h * w)) as f32).sin() + noise
        })
        .collect();
    (vec![1, c, h, w], values)
}

/// Encoded request frames at every calibrated boundary: f32, each bit depth (entropy-coded and
/// packed), a projection, and a keyframe followed by two residual frames of a stream.
pub fn sample_frames(calibration: &Calibration) -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    for (n, boundary) in calibration.boundaries().enumerate() {
        let (dims, values) = synthetic_activations(boundary, n as u32);
        let mut settings = vec![Setting::F32];
        for bits in SUPPORTED_BITS {
            settings.push(Setting::Quant(QuantSetting::bits(bits)));
            settings.push(Setting::Quant(QuantSetting { bits, rank: 0, entropy: false }));
        }
        settings.push(Setting::Quant(QuantSetting { bits: 3, rank: 8, entropy: true }));
        for (i, setting) in settings.into_iter().enumerate() {
            let id = (n * 100 + i) as u64;
            if let Ok(r) =
                features_request(id, boundary, &dims, &values, setting, Some(calibration), None)
            {
                frames.push(r.to_bytes());
            }
        }
        let mut stream = StreamEncoder::new(n as u32 + 1, 30, 1);
        for seed in 0..3 {
            let (_, v) = synthetic_activations(boundary, seed);
            let moved: Vec<f32> = v.iter().zip(&values).map(|(a, b)| b + 0.05 * a).collect();
            let setting = Setting::Quant(QuantSetting::bits(4));
            if let Ok(r) = features_request(
                seed.into(),
                boundary,
                &dims,
                &moved,
                setting,
                Some(calibration),
                Some(&mut stream),
            ) {
                frames.push(r.to_bytes());
            }
        }
    }
    frames
}
