//! `/encrypted` over a real socket: the server classifies a photo's pooled features encrypted
//! under a key only this test holds, and the test decrypts the tiger cat; every malformed
//! frame, key and ciphertext is refused with its code and the session goes on; keys past the
//! budget are refused, or take an idle session's place, which that session is told.

use std::time::Duration;

use awc::ws::{Frame, Message};
use burn::tensor::Device;
use futures_util::SinkExt;
use split_shared::encrypted::{DeviceKeys, QuantizedClassifier, quantize_features};
use split_shared::labels::top_k;
use split_shared::model::{Boundary, EfficientNetLite0, NUM_CLASSES, read_weights};
use split_shared::protocol::{
    EncryptedErrorCode as Code, EncryptedFrame, MAX_ENCRYPTED_FRAME_BYTES, PARAMETERS_ID,
};

use crate::common::{self, Socket};

async fn send(ws: &mut Socket, bytes: Vec<u8>) -> EncryptedFrame {
    ws.send(Message::Binary(bytes.into())).await.unwrap();
    next(ws).await
}

async fn next(ws: &mut Socket) -> EncryptedFrame {
    match common::next_message(ws, Duration::from_secs(60)).await {
        Frame::Binary(b) => EncryptedFrame::decode(&b).expect("reply decodes"),
        other => panic!("expected a binary reply, got {other:?}"),
    }
}

fn code(reply: &EncryptedFrame) -> Option<Code> {
    match reply {
        EncryptedFrame::Error { code, .. } => Some(*code),
        _ => None,
    }
}

fn key_frame(id: u64, key: Vec<u8>) -> Vec<u8> {
    EncryptedFrame::Key { id, parameters: PARAMETERS_ID, key }.encode()
}

fn classify(id: u64, parts: Vec<Vec<u8>>) -> Vec<u8> {
    EncryptedFrame::Classify { id, parameters: PARAMETERS_ID, parts }.encode()
}

/// The bundled photo's pooled features, quantized as the browser would send them.
fn chelsea_features() -> Vec<i64> {
    let device = Device::flex();
    let model = EfficientNetLite0::load(&split_paths::weights_file(), &device).unwrap();
    let photo = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../web/samples/chelsea.png"));
    let img = split_shared::image::preprocess(&photo.unwrap()).unwrap();
    let x = split_shared::image::to_input_tensor(&img, &device);
    let pooled = model.forward_range(x, Boundary::INPUT, Boundary::POOL).unwrap();
    quantize_features(&pooled.into_data().try_to_vec::<f32>().unwrap())
}

fn classifier() -> QuantizedClassifier {
    let w = read_weights(&split_paths::weights_file()).unwrap();
    QuantizedClassifier::new(
        w.tensor("fc.weight", &[NUM_CLASSES, 1280]).unwrap(),
        w.tensor("fc.bias", &[NUM_CLASSES]).unwrap(),
    )
}

#[actix_web::test]
async fn the_server_classifies_features_it_cannot_read() {
    let (srv, _) = common::server_and_state(&[]);
    let mut ws = common::connect(&srv, "/encrypted", MAX_ENCRYPTED_FRAME_BYTES).await;
    let mut rng = rand::rng();
    let keys = DeviceKeys::generate(&mut rng);
    let features = chelsea_features();
    let upload = keys.encrypt(&features, &mut rng).unwrap();

    // Before a key; a key for other parameters; bytes that are no key; a frame that is none.
    assert_eq!(code(&send(&mut ws, classify(1, upload.clone())).await), Some(Code::NoKey));
    let other = EncryptedFrame::Key { id: 2, parameters: 9, key: vec![1; 10] }.encode();
    assert_eq!(code(&send(&mut ws, other).await), Some(Code::Parameters));
    assert_eq!(code(&send(&mut ws, key_frame(3, b"no key".to_vec())).await), Some(Code::Malformed));
    assert_eq!(code(&send(&mut ws, b"SPLE garbage".to_vec()).await), Some(Code::BadFrame));

    let key = keys.evaluation_key(&mut rng).unwrap();
    assert_eq!(send(&mut ws, key_frame(4, key)).await, EncryptedFrame::KeyAccepted { id: 4 });
    let EncryptedFrame::Answer { id: 5, queue_us, server_us, ciphertext } =
        send(&mut ws, classify(5, upload.clone())).await
    else {
        panic!("an answer")
    };
    // The server's evaluation takes milliseconds (32 in release), and it says so; nothing else
    // was waiting.
    assert!(server_us > 1_000 && server_us < 60_000_000, "{server_us} µs");
    assert!(queue_us < 1_000_000, "{queue_us} µs waiting with no other session");
    let integer = keys.decrypt(&ciphertext).unwrap();
    assert_eq!(integer, classifier().evaluate(&features), "the clear integer logits, exactly");
    let top = top_k(&classifier().logits(&integer), 5);
    assert_eq!(top[0].class, 282, "chelsea is a tiger cat");

    // One part short, one part that is no ciphertext, the answer sent back as a part.
    assert_eq!(
        code(&send(&mut ws, classify(6, upload[1..].to_vec())).await),
        Some(Code::Malformed)
    );
    let mut bad = upload.clone();
    bad[5] = vec![0xff; 100];
    assert_eq!(code(&send(&mut ws, classify(7, bad)).await), Some(Code::Malformed));
    let mut swapped = upload.clone();
    swapped[0] = ciphertext;
    assert_eq!(code(&send(&mut ws, classify(8, swapped)).await), Some(Code::Malformed));
    // The session still answers.
    let again = send(&mut ws, classify(9, upload)).await;
    assert!(matches!(again, EncryptedFrame::Answer { id: 9, .. }), "{again:?}");
}

#[actix_web::test]
async fn keys_past_the_budget_are_refused_or_take_an_idle_sessions_place() {
    // Room for three keys of 335 kB.
    let (srv, _) =
        common::server_and_state(&["--encrypted-key-mib", "1", "--encrypted-evict-after", "1"]);
    let mut rng = rand::rng();
    let keys: Vec<DeviceKeys> = (0..4).map(|_| DeviceKeys::generate(&mut rng)).collect();
    let mut sockets = Vec::new();
    for _ in 0..4 {
        sockets.push(common::connect(&srv, "/encrypted", MAX_ENCRYPTED_FRAME_BYTES).await);
    }
    let frames: Vec<Vec<u8>> = keys.iter().map(|k| k.evaluation_key(&mut rng).unwrap()).collect();
    for (i, ws) in sockets.iter_mut().take(3).enumerate() {
        let id = i as u64 + 1;
        let reply = send(ws, key_frame(id, frames[i].clone())).await;
        assert_eq!(reply, EncryptedFrame::KeyAccepted { id });
    }
    // The others are not idle long enough to lose their keys.
    let reply = send(&mut sockets[3], key_frame(4, frames[3].clone())).await;
    assert_eq!(code(&reply), Some(Code::KeyBudget));
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let reply = send(&mut sockets[3], key_frame(5, frames[3].clone())).await;
    assert_eq!(reply, EncryptedFrame::KeyAccepted { id: 5 });
    // The least recently active (the first) is told, then asked for its key again.
    assert_eq!(code(&next(&mut sockets[0]).await), Some(Code::Evicted));
    let upload = keys[0].encrypt(&[1; 1280], &mut rng).unwrap();
    assert_eq!(code(&send(&mut sockets[0], classify(6, upload)).await), Some(Code::NoKey));
    // The second still holds its key: answered.
    let upload = keys[1].encrypt(&[1; 1280], &mut rng).unwrap();
    let reply = send(&mut sockets[1], classify(7, upload)).await;
    assert!(matches!(reply, EncryptedFrame::Answer { id: 7, .. }), "{reply:?}");
}
