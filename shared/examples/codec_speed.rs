//! Times one codec setting's encode and decode on a real photo's activations: a target for
//! `perf record` and the figure behind docs/codec.md's native timings.
//!
//! `cargo run --release -p split-shared --example codec_speed -- WEIGHTS CALIBRATION PHOTO
//! [SPLIT] [SETTING] [REPEATS]` (defaults: block5, s14, 200).
use burn::tensor::Device;
use split_shared::codec::{Calibration, DecodeContext, EncodeContext};
use split_shared::model::{Boundary, EfficientNetLite0, Features};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [weights, calibration, photo, ..] = args.as_slice() else {
        return Err(
            "usage: codec_speed WEIGHTS CALIBRATION PHOTO [SPLIT] [SETTING] [REPEATS]".into()
        );
    };
    let split: Boundary = args.get(3).map_or("block5", String::as_str).parse()?;
    let setting = args.get(4).map_or("s14", String::as_str).parse()?;
    let repeats: usize = args.get(5).map_or(Ok(200), |s| s.parse())?;
    let device = Device::flex();
    let model = EfficientNetLite0::load(weights.as_ref(), &device)?;
    let calibration = Calibration::load(calibration.as_ref())?;
    let img = split_shared::image::preprocess(&std::fs::read(photo)?)?;
    let x = split_shared::image::to_input_tensor(&img, &device);
    let features = Features::from_tensor(split, model.forward_range(x, Boundary::INPUT, split)?)?;
    let (mut enc, mut dec) = (Vec::with_capacity(repeats), Vec::with_capacity(repeats));
    let (mut bytes, mut digest) = (0, 0u64);
    for _ in 0..repeats {
        let t = Instant::now();
        let frame = features.to_frame(setting, EncodeContext::new(Some(&calibration)))?;
        enc.push(t.elapsed().as_secs_f64() * 1e3);
        bytes = frame.payload.len();
        // FNV-1a of the payload: a change to the coder that should not change the bytes shows.
        digest = frame
            .payload
            .iter()
            .fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3));
        let t = Instant::now();
        let back = Features::from_frame(&frame, DecodeContext::new(Some(&calibration)))?;
        dec.push(t.elapsed().as_secs_f64() * 1e3);
        assert_eq!(back.values().len(), features.values().len());
    }
    enc.sort_by(f64::total_cmp);
    dec.sort_by(f64::total_cmp);
    let values = features.values().len();
    println!(
        "{split} {setting}: {bytes} bytes ({:.2} bits/value), encode median {:.3} ms, decode median {:.3} ms, payload digest {digest:016x}",
        8.0 * bytes as f64 / values as f64,
        enc[repeats / 2],
        dec[repeats / 2]
    );
    Ok(())
}
