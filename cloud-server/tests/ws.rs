//! The real server over a real WebSocket: split frames, cloud-only images, malformed input.

use std::time::Duration;

use actix_codec::Framed;
use actix_web::App;
use awc::BoxedSocket;
use awc::ws::{Codec, Frame, Message};
use burn::tensor::Device;
use cloud_server::{AppState, Config, config_app};
use futures_util::{SinkExt, StreamExt};
use split_shared::model::{Boundary, EfficientNetLite0, WeightsFile};
use split_shared::protocol::{
    ErrorCode, MAX_FRAME_BYTES, MAX_PAYLOAD_BYTES, PROTOCOL_VERSION, Reply, Request,
};

type Socket = Framed<BoxedSocket, Codec>;

const CHELSEA: &[u8] = include_bytes!("../../web/samples/chelsea.png");
/// ImageNet's cat classes: tabby, tiger cat, Persian, Siamese, Egyptian cat.
const CATS: std::ops::RangeInclusive<u16> = 281..=285;

fn server() -> actix_test::TestServer {
    let state = AppState::load(&Config::for_tests())
        .expect("weights missing: run `cargo xtask setup` (or set SPLIT_WEIGHTS)");
    actix_test::start(move || App::new().configure(config_app(state.clone())))
}

async fn connect(srv: &actix_test::TestServer) -> Socket {
    let (_response, socket) =
        awc::Client::new().ws(srv.url("/ws")).connect().await.expect("websocket handshake");
    socket
}

async fn next_frame(ws: &mut Socket) -> Frame {
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            match ws.next().await.expect("socket open").expect("valid frame") {
                Frame::Ping(_) | Frame::Pong(_) => continue,
                other => return other,
            }
        }
    })
    .await
    .expect("reply within 60 s")
}

async fn roundtrip(ws: &mut Socket, frame: Vec<u8>) -> Reply {
    ws.send(Message::Binary(frame.into())).await.unwrap();
    match next_frame(ws).await {
        Frame::Binary(b) => Reply::decode(&b).expect("reply decodes"),
        other => panic!("expected a binary reply, got {other:?}"),
    }
}

fn expect_error(reply: Reply, id: u64, code: ErrorCode) {
    match reply {
        Reply::Error { id: got, code: c, message } => {
            assert_eq!((got, c), (id, code), "{message}");
            assert!(!message.is_empty());
        }
        other => panic!("expected a {code:?} error, got {other:?}"),
    }
}

/// Features of the chelsea photo at `split`, computed the way the browser does.
fn features_frame(id: u64, split: Boundary) -> Vec<u8> {
    let device = Device::flex();
    let bytes = std::fs::read(Config::for_tests().weights_path()).unwrap();
    let model = EfficientNetLite0::from_weights(&WeightsFile::from_bytes(&bytes).unwrap(), &device)
        .unwrap();
    let img = split_shared::image::preprocess(CHELSEA).unwrap();
    let x = model
        .forward_range(split_shared::image::to_input_tensor(&img, &device), Boundary::INPUT, split)
        .unwrap();
    let dims = x.dims();
    Request::features_f32(id, split, &dims, &x.into_data().try_to_vec::<f32>().unwrap()).to_bytes()
}

fn top1(reply: &Reply) -> u16 {
    match reply {
        Reply::Result { top, .. } => top[0].class,
        other => panic!("expected a result, got {other:?}"),
    }
}

#[actix_web::test]
async fn split_frames_and_cloud_only_images_are_answered() {
    let srv = server();
    let mut ws = connect(&srv).await;
    let cloud_only =
        roundtrip(&mut ws, Request::Image { id: 1, payload: CHELSEA.to_vec() }.to_bytes()).await;
    assert!(CATS.contains(&top1(&cloud_only)), "{cloud_only:?}");
    assert!(matches!(cloud_only, Reply::Result { id: 1, from: Boundary::INPUT, .. }));
    for (i, split) in ["stem", "block5", "block14", "head", "pool"].into_iter().enumerate() {
        let split: Boundary = split.parse().unwrap();
        let reply = roundtrip(&mut ws, features_frame(10 + i as u64, split)).await;
        assert_eq!(top1(&reply), top1(&cloud_only), "split at {split}");
        let Reply::Result { id, from, top, timings } = reply else { unreachable!() };
        assert_eq!((id, from, top.len()), (10 + i as u64, split, 5));
        assert!(timings.compute_us > 0);
    }
}

#[actix_web::test]
async fn malformed_input_gets_typed_errors_while_others_are_served() {
    let srv = server();
    let mut bad = connect(&srv).await;
    let mut good = connect(&srv).await;
    let valid = features_frame(99, Boundary::block(8).unwrap());

    // A well-formed request from another session, in flight while the bad one misbehaves.
    good.send(Message::Binary(valid.clone().into())).await.unwrap();

    let truncated = valid[..valid.len() / 2].to_vec();
    expect_error(roundtrip(&mut bad, truncated).await, 99, ErrorCode::Malformed);

    let mut wrong_version = valid.clone();
    wrong_version[4..6].copy_from_slice(&(PROTOCOL_VERSION + 1).to_le_bytes());
    expect_error(roundtrip(&mut bad, wrong_version).await, 99, ErrorCode::UnsupportedVersion);

    // Valid framing, but block8 features announced as block2 (a different shape).
    let mut wrong_shape = valid.clone();
    wrong_shape[16] = Boundary::block(2).unwrap().index();
    expect_error(roundtrip(&mut bad, wrong_shape).await, 99, ErrorCode::ShapeMismatch);

    let garbage: Vec<u8> =
        (0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    expect_error(roundtrip(&mut bad, garbage).await, 0, ErrorCode::Malformed);

    // A header announcing more than the payload limit is refused before anything is read.
    let mut announced = Request::Image { id: 5, payload: vec![] }.to_bytes();
    announced[16..20].copy_from_slice(&((MAX_PAYLOAD_BYTES + 1) as u32).to_le_bytes());
    expect_error(roundtrip(&mut bad, announced).await, 5, ErrorCode::TooLarge);

    let not_an_image = Request::Image { id: 6, payload: b"GIF89a not really".to_vec() }.to_bytes();
    expect_error(roundtrip(&mut bad, not_an_image).await, 6, ErrorCode::BadImage);

    bad.send(Message::Text("hello".into())).await.unwrap();
    match next_frame(&mut bad).await {
        Frame::Binary(b) => {
            expect_error(Reply::decode(&b).unwrap(), 0, ErrorCode::UnsupportedMessage)
        }
        other => panic!("{other:?}"),
    }

    // After all that, the same session still serves a valid request.
    let reply = roundtrip(&mut bad, valid.clone()).await;
    assert!(CATS.contains(&top1(&reply)));

    // And the concurrent session got its answer.
    let Frame::Binary(b) = next_frame(&mut good).await else { panic!("binary reply") };
    let good_reply = Reply::decode(&b).unwrap();
    assert_eq!(good_reply.id(), 99);
    assert!(CATS.contains(&top1(&good_reply)));

    // A WebSocket message over the frame limit closes that session with 1009 and a reason...
    bad.send(Message::Binary(vec![0u8; MAX_FRAME_BYTES + 1].into())).await.unwrap();
    match next_frame(&mut bad).await {
        Frame::Close(Some(reason)) => {
            assert_eq!(reason.code, awc::ws::CloseCode::Size);
            assert!(reason.description.unwrap_or_default().contains(&MAX_FRAME_BYTES.to_string()));
        }
        other => panic!("expected a close frame, got {other:?}"),
    }
    // ...and the other session keeps working.
    let again = roundtrip(&mut good, valid).await;
    assert!(CATS.contains(&top1(&again)));
}
