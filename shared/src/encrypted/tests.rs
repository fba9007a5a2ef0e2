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
