use std::time::Instant;

use super::layout::{IN, OUT, numbers};
use super::*;

fn classifier() -> QuantizedClassifier {
    QuantizedClassifier {
        weights: numbers(1, OUT * IN, WEIGHT_LEVELS),
        bias: numbers(2, OUT, 1_000_000),
        weight_step: 1.0,
    }
}

#[test]
fn the_server_computes_the_integer_logits_it_cannot_read() {
    let mut rng = rand::rng();
    let classifier = classifier();
    // The extremes of the range as well: every feature at its top, every product the largest.
    let mut features: Vec<i64> = numbers(3, IN, FEATURE_LEVELS / 2)
        .into_iter()
        .map(|v| v + FEATURE_LEVELS / 2 + 1)
        .collect();
    features[..8].fill(FEATURE_LEVELS);
    let t = Instant::now();
    let keys = DeviceKeys::generate(&mut rng);
    let key_bytes = keys.evaluation_key(&mut rng).unwrap();
    let upload = keys.encrypt(&features, &mut rng).unwrap();
    let device_ms = t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    let server = EncryptedClassifier::new(&classifier).unwrap();
    let setup_ms = t.elapsed().as_secs_f64() * 1e3;
    let key = EncryptedClassifier::read_key(&key_bytes).unwrap();
    let t = Instant::now();
    let parts: Vec<&[u8]> = upload.iter().map(Vec::as_slice).collect();
    let answer = server.evaluate(&parts, &key).unwrap();
    let server_ms = t.elapsed().as_secs_f64() * 1e3;
    let logits = keys.decrypt(&answer).unwrap();
    assert_eq!(logits, classifier.evaluate(&features), "decrypted = the clear integer logits");
    println!(
        "keys + encryption {device_ms:.0} ms, server setup {setup_ms:.0} ms, evaluation \
         {server_ms:.0} ms; key {} B, upload {} B, answer {} B",
        key_bytes.len(),
        upload.iter().map(Vec::len).sum::<usize>(),
        answer.len()
    );
}

#[test]
fn what_is_not_a_ciphertext_or_a_key_is_refused() {
    let mut rng = rand::rng();
    let keys = DeviceKeys::generate(&mut rng);
    let short = keys.encrypt(&[1; 7], &mut rng).unwrap_err();
    assert_eq!(short, EncryptedError::WrongLength { what: "features", got: 7, want: IN });
    let key = EncryptedClassifier::read_key(&keys.evaluation_key(&mut rng).unwrap()).unwrap();
    let server = EncryptedClassifier::new(&classifier()).unwrap();
    let upload = keys.encrypt(&[1; IN], &mut rng).unwrap();
    let mut parts: Vec<&[u8]> = upload.iter().map(Vec::as_slice).collect();
    for bad in [&b""[..], b"not a ciphertext", &[0xff; 64]] {
        // Bytes that are not a key, or a key with no rotation (an empty message).
        let err = EncryptedClassifier::read_key(bad).unwrap_err();
        assert!(
            matches!(
                err,
                EncryptedError::Malformed { what: "evaluation key", .. }
                    | EncryptedError::MissingRotation(_)
            ),
            "{err}"
        );
        assert!(matches!(keys.decrypt(bad), Err(EncryptedError::Malformed { .. })));
        let good = parts[3];
        parts[3] = bad;
        let err = server.evaluate(&parts, &key).unwrap_err();
        assert!(matches!(err, EncryptedError::Malformed { what: "ciphertext", .. }), "{err}");
        parts[3] = good;
    }
    // A ciphertext cut short, and one baby step missing.
    let cut = &upload[0][..upload[0].len() / 2];
    let err = server.evaluate(&[&[cut][..], &parts[1..]].concat(), &key).unwrap_err();
    assert!(matches!(err, EncryptedError::Malformed { .. }), "{err}");
    let err = server.evaluate(&parts[1..], &key).unwrap_err();
    assert!(matches!(err, EncryptedError::WrongLength { what: "baby steps", .. }), "{err}");
    // The answer of one evaluation is no upload.
    let answer = server.evaluate(&parts, &key).unwrap();
    parts[0] = &answer;
    let err = server.evaluate(&parts, &key).unwrap_err();
    assert!(matches!(err, EncryptedError::Malformed { .. }), "{err}");
    // A key without the giant steps' rotation.
    let partial = keys.evaluation_key_for(&layout::ROTATIONS[1..], &mut rng).unwrap();
    let err = EncryptedClassifier::read_key(&partial).unwrap_err();
    assert_eq!(err, EncryptedError::MissingRotation(layout::BABY));
}

/// Bytes an attacker sends as a key or a ciphertext go through fhe.rs's readers on the server;
/// damaged copies of real ones (bytes flipped, cut, grown) must come back as a typed error or
/// a value, never as a panic (the server would lose the evaluation thread's work and log a
/// crash for one bad upload).
#[test]
fn damaged_keys_and_ciphertexts_are_errors_not_panics() {
    let mut rng = rand::rng();
    let keys = DeviceKeys::generate(&mut rng);
    let key = keys.evaluation_key(&mut rng).unwrap();
    let upload = keys.encrypt(&[1; IN], &mut rng).unwrap();
    let server = EncryptedClassifier::new(&classifier()).unwrap();
    let session = EncryptedClassifier::read_key(&key).unwrap();
    let parts: Vec<&[u8]> = upload.iter().map(Vec::as_slice).collect();
    let answer = server.evaluate(&parts, &session).unwrap();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |below: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % below.max(1) as u64) as usize
    };
    let mut damage = |bytes: &[u8]| -> Vec<u8> {
        let mut b = bytes.to_vec();
        match next(4) {
            0 => {
                for _ in 0..=next(4) {
                    let at = next(b.len());
                    b[at] ^= 1 << next(8);
                }
            }
            1 => b.truncate(next(b.len())),
            2 => {
                let at = next(b.len());
                let grown: Vec<u8> = (0..=next(16)).map(|_| next(256) as u8).collect();
                b.splice(at..at, grown);
            }
            _ => {
                // A length or tag early in the message: where a reader decides what to allocate.
                let at = next(b.len().min(64));
                b[at] = [0x00, 0x7f, 0x80, 0xff][next(4)];
            }
        }
        b
    };
    let mut panicked = Vec::new();
    for i in 0..200 {
        let bad = damage(&key);
        let run = std::panic::catch_unwind(|| drop(EncryptedClassifier::read_key(&bad)));
        if run.is_err() {
            panicked.push(format!("key {i}: {} bytes", bad.len()));
        }
    }
    for i in 0..1000 {
        let bad = damage(&upload[i % upload.len()]);
        let run = std::panic::catch_unwind(|| drop(scheme::read_fresh(&bad, &parameters())));
        if run.is_err() {
            panicked.push(format!("upload {i}: {} bytes", bad.len()));
        }
        let bad = damage(&answer);
        let run = std::panic::catch_unwind(|| drop(keys.decrypt(&bad)));
        if run.is_err() {
            panicked.push(format!("answer {i}: {} bytes", bad.len()));
        }
    }
    assert!(panicked.is_empty(), "{} readers panicked: {panicked:?}", panicked.len());
}
