//! Any bytes as what one side of the encrypted classifier reads from the other, through the
//! scheme's own readers (fhe.rs's protobuf): the first byte picks the kind, the rest is
//! (0) an uploaded ciphertext as the server reads it before evaluating (every baby step of the
//! upload these bytes), (1) a session's evaluation key as the server reads it, (2) an answer as
//! the device decrypts it. The frame around them is `decode_frame`'s; these are the bytes a
//! frame within its limits hands on. Nothing may panic; every input is either read or refused
//! with a typed error.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use rand::SeedableRng;
use rand::rngs::StdRng;
use split_shared::encrypted::layout::{BABY, IN, OUT};
use split_shared::encrypted::{DeviceKeys, EncryptedClassifier, QuantizedClassifier, SessionKey};

/// Keys from a fixed seed (the seed corpus's ciphertexts are under another key: decryption
/// does not authenticate, so they read as ciphertexts all the same), a classifier of made-up
/// weights and the key the server holds for them.
struct Sides {
    device: DeviceKeys,
    server: EncryptedClassifier,
    key: SessionKey,
}

fn sides() -> &'static Sides {
    static S: OnceLock<Sides> = OnceLock::new();
    S.get_or_init(|| {
        let mut rng = StdRng::seed_from_u64(35);
        let device = DeviceKeys::generate(&mut rng);
        let weight: Vec<f32> =
            (0..OUT * IN).map(|i| ((i * 7919) % 255) as f32 / 255.0 - 0.5).collect();
        let bias = vec![0.25; OUT];
        let server = EncryptedClassifier::new(&QuantizedClassifier::new(&weight, &bias))
            .expect("the classifier encodes");
        let key_bytes = device.evaluation_key(&mut rng).expect("an evaluation key");
        let key = EncryptedClassifier::read_key(&key_bytes).expect("its own key reads");
        Sides { device, server, key }
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&kind, bytes)) = data.split_first() else { return };
    let s = sides();
    match kind % 3 {
        0 => drop(s.server.evaluate(&[bytes; BABY], &s.key)),
        1 => drop(EncryptedClassifier::read_key(bytes)),
        _ => drop(s.device.decrypt(bytes)),
    }
});
