//! Valid frames of every codec path, built from synthetic activations: seeds for the fuzzer and
//! inputs for robustness tests (the decoders do not care whether a network produced them).

use super::Request;
use crate::codec::{
    AllocSetting, Calibration, EncodeContext, QuantSetting, SUPPORTED_BITS, Setting, StreamEncoder,
};
use crate::runtime::{Activations, ModelSpec, encode_frame};

/// Deterministic activation-like values for one item at boundary `index` of the model `spec`
/// describes (its first dimension the channels: each channel a wave of its own plus noise).
///
/// # Panics
/// When `index` is not one of the spec's boundaries.
pub fn synthetic_activations(spec: &ModelSpec, index: u8, seed: u32) -> Activations {
    let shape = &spec.boundary(index).expect("a boundary of the spec").shape;
    let per_channel: usize = shape[1..].iter().product();
    let count = shape.iter().product::<usize>();
    let mut state = 0x9e37_79b9u32 ^ seed.wrapping_mul(0x85eb_ca6b);
    let values = (0..count)
        .map(|i| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            let noise = (state >> 8) as f32 / (1 << 24) as f32 - 0.5;
            ((i % per_channel) as f32 * 0.05 + (i / per_channel) as f32).sin() + noise
        })
        .collect();
    let dims: Vec<usize> = std::iter::once(1).chain(shape.iter().copied()).collect();
    Activations::new(spec, index, &dims, values).expect("one item at the boundary")
}

/// Encoded request frames, addressed to `spec`'s model, at every boundary `calibration` has
/// tables for: f32, each bit depth (entropy-coded and packed), a projection, allocated levels
/// from coarse to fine, the learned bottleneck where one was trained, and a keyframe followed
/// by two residual frames of a stream.
pub fn sample_frames(spec: &ModelSpec, calibration: &Calibration) -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    let indices = calibration.boundaries().filter_map(|name| spec.index_of(name).ok());
    for (n, index) in indices.enumerate() {
        let features = synthetic_activations(spec, index, n as u32);
        let mut settings = vec![Setting::F32];
        for bits in SUPPORTED_BITS {
            settings.push(Setting::Quant(QuantSetting::bits(bits)));
            settings.push(Setting::Quant(QuantSetting { bits, rank: 0, entropy: false }));
        }
        settings.push(Setting::Quant(QuantSetting { bits: 3, rank: 8, entropy: true }));
        for level in [2, 8, 12, 16, 24] {
            settings.push(Setting::Alloc(AllocSetting { level }));
        }
        // Only the depths the calibration has tables for encode; the others are skipped below.
        settings.extend(SUPPORTED_BITS.map(Setting::Learned));
        for (i, setting) in settings.into_iter().enumerate() {
            let id = (n * 100 + i) as u64;
            let ctx = EncodeContext::new(Some(calibration));
            if let Ok(frame) = encode_frame(spec, &features, setting, ctx) {
                frames.push(Request::Features { id, frame }.to_bytes_for(spec.id));
            }
        }
        let mut stream = StreamEncoder::new(n as u32 + 1, 30, 1);
        for seed in 0..3 {
            let noise = synthetic_activations(spec, index, seed);
            let moved: Vec<f32> =
                noise.values().iter().zip(features.values()).map(|(a, b)| b + 0.05 * a).collect();
            let moved = Activations::new(spec, index, features.dims(), moved).expect("same shape");
            let setting = Setting::Quant(QuantSetting::bits(4));
            let ctx = EncodeContext::new(Some(calibration)).with_stream(Some(&mut stream));
            if let Ok(frame) = encode_frame(spec, &moved, setting, ctx) {
                frames.push(Request::Features { id: seed.into(), frame }.to_bytes_for(spec.id));
            }
        }
    }
    frames
}
