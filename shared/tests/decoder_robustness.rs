//! The fuzz target's property on stable Rust, so every test run checks it: mutated frames of
//! every codec path decode or fail with a typed error, never panic, and never come back with a
//! wrong-sized tensor. (`cargo xtask fuzz` runs the libFuzzer target for longer.)

use split_shared::codec::{Calibration, StreamDecoder};
use split_shared::model::lite0_spec;
use split_shared::protocol::{Encoding, Request, sample_frames};
use split_shared::runtime::decode_frame;

fn calibration() -> Calibration {
    Calibration::load(&split_paths::calibration_file())
        .unwrap_or_else(|e| panic!("{e}; run `./run.sh setup`"))
}

fn decode(frame: &[u8], calibration: &Calibration, streams: &mut StreamDecoder) -> bool {
    let Ok(Request::Features { frame, .. }) = Request::decode(frame) else {
        return false;
    };
    // The server's path: EfficientNet-Lite0's spec, its calibration, the session's streams.
    match decode_frame(&lite0_spec(), &frame, Some(calibration), Some(streams)) {
        Ok(x) => {
            let size: usize = x.dims().iter().product();
            assert_eq!(x.values().len(), size, "decoded size matches shape");
            assert_eq!(x.boundary(), frame.boundary);
            true
        }
        Err(_) => false,
    }
}

#[test]
fn valid_frames_decode_in_order() {
    let calibration = calibration();
    let mut streams = StreamDecoder::new();
    let frames = sample_frames(&lite0_spec(), &calibration);
    assert!(frames.len() > 200, "{} sample frames", frames.len());
    let learned = |f: &Vec<u8>| {
        matches!(Request::decode(f), Ok(Request::Features { frame, .. })
            if matches!(frame.encoding, Encoding::Learned(_)))
    };
    assert!(frames.iter().any(learned), "the shipped learned coder's frames are among them");
    for (i, f) in frames.iter().enumerate() {
        assert!(decode(f, &calibration, &mut streams), "sample frame {i} must decode");
    }
}

#[test]
fn mutated_frames_never_panic() {
    let calibration = calibration();
    let frames = sample_frames(&lite0_spec(), &calibration);
    let mut streams = StreamDecoder::new();
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let (mut ok, mut refused) = (0, 0);
    for round in 0..6000 {
        let mut f = frames[round % frames.len()].clone();
        for _ in 0..1 + next() % 3 {
            let r = next();
            let i = (r >> 16) as usize % f.len().max(1);
            match r % 4 {
                0 => f.truncate(i),
                1 if !f.is_empty() => f[i] ^= 1 << (r >> 61),
                2 if !f.is_empty() => f[i] = (r >> 24) as u8,
                _ => f.insert(i.min(f.len()), (r >> 32) as u8),
            }
        }
        if decode(&f, &calibration, &mut streams) { ok += 1 } else { refused += 1 }
    }
    assert!(refused > 0 && ok + refused == 6000);
}
