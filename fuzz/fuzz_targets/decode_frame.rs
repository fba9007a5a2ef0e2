//! Any bytes as a client frame: the request decoder, then the codec with the real calibration
//! and a stream decoder that lives across inputs (so delta paths with state are reached too);
//! and as a frame of the chat's socket (`/llm`), its hidden rows in every encoding; as a frame
//! of the encrypted classifier's socket (`/encrypted`: its lengths and limits); and a
//! features frame as any model on the runtime decodes it (f32 and ranged, on a small model's
//! boundaries, so the ranged codec sees shapes of every rank).
//! Nothing may panic; every input is either decoded or refused with a typed error.
#![no_main]

use std::sync::{Mutex, OnceLock};

use libfuzzer_sys::fuzz_target;
use split_shared::codec::{Calibration, StreamDecoder};
use split_shared::model::lite0_spec;
use split_shared::protocol::{
    EncryptedFrame, LlmFrame, MAX_CIPHERTEXT_BYTES, MAX_KEY_BYTES, MAX_PARTS, Request,
};
use split_shared::runtime::{BoundarySpec, ModelSpec, decode_frame, decode_plain};

fn small_model() -> &'static ModelSpec {
    static S: OnceLock<ModelSpec> = OnceLock::new();
    S.get_or_init(|| {
        let b = [("input", &[6][..]), ("mid", &[4, 3]), ("map", &[2, 3, 2]), ("out", &[5])];
        let boundaries = b.iter().map(|(n, s)| BoundarySpec::new(*n, s)).collect();
        ModelSpec::new(9, "fuzz", boundaries, 4).expect("a valid spec")
    })
}

fn lite0() -> &'static ModelSpec {
    static S: OnceLock<ModelSpec> = OnceLock::new();
    S.get_or_init(lite0_spec)
}

fn calibration() -> &'static Calibration {
    static C: OnceLock<Calibration> = OnceLock::new();
    C.get_or_init(|| {
        Calibration::load(&split_paths::calibration_file())
            .expect("run `./run.sh setup` first: the fuzzer decodes with the real calibration")
    })
}

fuzz_target!(|data: &[u8]| {
    match EncryptedFrame::decode(data) {
        Ok(EncryptedFrame::Key { key, .. }) => assert!(key.len() <= MAX_KEY_BYTES),
        Ok(EncryptedFrame::Classify { parts, .. }) => {
            assert!(!parts.is_empty() && parts.len() <= MAX_PARTS);
            assert!(parts.iter().all(|p| p.len() <= MAX_CIPHERTEXT_BYTES));
        }
        _ => {}
    }
    if let Ok(LlmFrame::Hidden { width, values, .. }) = LlmFrame::decode(data) {
        assert!(values.is_empty() || values.len() % width as usize == 0);
    }
    static STREAMS: OnceLock<Mutex<StreamDecoder>> = OnceLock::new();
    let calibration = calibration();
    // Let the fuzzer reach the coded paths: stamp this calibration's id into coded and
    // allocated frames (both carry it 4 bytes into their parameters).
    let mut frame = data.to_vec();
    if frame.len() >= 48 && (frame[17] == 2 || frame[17] == 3) {
        let ndim = usize::from(frame[18]).min(4);
        let at = 20 + 4 * ndim + 4;
        if frame.len() >= at + 8 {
            frame[at..at + 8].copy_from_slice(&calibration.id().to_le_bytes());
        }
    }
    if let Ok(Request::Features { frame, .. }) = Request::decode(&frame) {
        if let Ok(x) = decode_plain(small_model(), &frame) {
            assert_eq!(x.values().len(), x.dims().iter().product::<usize>());
        }
        let mut streams = STREAMS.get_or_init(Default::default).lock().unwrap();
        if let Ok(x) = decode_frame(lite0(), &frame, Some(calibration), Some(&mut streams)) {
            assert_eq!(x.values().len(), x.dims().iter().product::<usize>());
        }
    }
});
