//! Valid frames of every codec path, built from synthetic activations: seeds for the fuzzer and
//! inputs for robustness tests (the decoders do not care whether a network produced them).

use super::{FeaturesFrame, Request};
use crate::codec::{
    AllocSetting, Calibration, EncodeContext, QuantSetting, SUPPORTED_BITS, Setting, StreamEncoder,
};
use crate::model::{Boundary, Features};

/// Deterministic activation-like values for one image at `boundary`.
pub fn synthetic_activations(boundary: Boundary, seed: u32) -> Features {
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
    Features::new(boundary, &[1, c, h, w], values).expect("one image at the boundary")
}

/// Encoded request frames at every calibrated boundary: f32, each bit depth (entropy-coded and
/// packed), a projection, allocated levels from coarse to fine, and a keyframe followed by two
/// residual frames of a stream.
pub fn sample_frames(calibration: &Calibration) -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    for (n, boundary) in calibration.boundaries().enumerate() {
        let features = synthetic_activations(boundary, n as u32);
        let mut settings = vec![Setting::F32];
        for bits in SUPPORTED_BITS {
            settings.push(Setting::Quant(QuantSetting::bits(bits)));
            settings.push(Setting::Quant(QuantSetting { bits, rank: 0, entropy: false }));
        }
        settings.push(Setting::Quant(QuantSetting { bits: 3, rank: 8, entropy: true }));
        for level in [2, 8, 12, 16, 24] {
            settings.push(Setting::Alloc(AllocSetting { level }));
        }
        for (i, setting) in settings.into_iter().enumerate() {
            let id = (n * 100 + i) as u64;
            let ctx = EncodeContext::new(Some(calibration));
            if let Ok(frame) = FeaturesFrame::encode(&features, setting, ctx) {
                frames.push(Request::Features { id, frame }.to_bytes());
            }
        }
        let mut stream = StreamEncoder::new(n as u32 + 1, 30, 1);
        for seed in 0..3 {
            let noise = synthetic_activations(boundary, seed);
            let moved: Vec<f32> =
                noise.values().iter().zip(features.values()).map(|(a, b)| b + 0.05 * a).collect();
            let moved = Features::new(boundary, &features.dims(), moved).expect("same shape");
            let setting = Setting::Quant(QuantSetting::bits(4));
            let ctx = EncodeContext::new(Some(calibration)).with_stream(Some(&mut stream));
            if let Ok(frame) = FeaturesFrame::encode(&moved, setting, ctx) {
                frames.push(Request::Features { id: seed.into(), frame }.to_bytes());
            }
        }
    }
    frames
}
