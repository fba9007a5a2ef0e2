//! The request service without a socket: the same `answer` the WebSocket loop calls, driven
//! directly, and the `/api/info` contract as the client reads it.

use cloud_server::{AppState, Config, ServerInfo, answer};
use split_shared::codec::StreamDecoder;
use split_shared::labels::TOP_K;
use split_shared::model::Boundary;
use split_shared::protocol::{ErrorCode, Reply, Request};

const CHELSEA: &[u8] = include_bytes!("../../web/samples/chelsea.png");

fn state() -> AppState {
    AppState::load(&Config::for_tests()).unwrap_or_else(|e| panic!("{e:#}"))
}

#[actix_web::test]
async fn frames_are_answered_without_a_transport() {
    let state = state();
    let mut streams = StreamDecoder::new();
    let ping = Request::Ping { id: 4, payload: vec![0; 100] }.to_bytes();
    match Reply::decode(&answer(&state, &ping, &mut streams).await.to_bytes()).unwrap() {
        Reply::Pong { id: 4, received: 100, .. } => {}
        other => panic!("expected a pong, got {other:?}"),
    }
    let image = Request::Image { id: 5, payload: CHELSEA.to_vec() }.to_bytes();
    match answer(&state, &image, &mut streams).await {
        Reply::Result { id: 5, from, top, .. } => {
            assert_eq!(from, Boundary::INPUT);
            assert_eq!(top.len(), TOP_K);
            assert!((281..=285).contains(&top[0].class), "a cat: {top:?}");
        }
        other => panic!("expected a result, got {other:?}"),
    }
    let mut broken = image.clone();
    broken.truncate(30);
    match answer(&state, &broken, &mut streams).await {
        Reply::Error { id: 5, code: ErrorCode::Malformed, .. } => {}
        other => panic!("expected a malformed error, got {other:?}"),
    }
}

#[actix_web::test]
async fn info_names_what_the_client_reads() {
    let info = serde_json::to_value(ServerInfo::of(&state())).unwrap();
    for field in [
        "calibration",
        "default_codec",
        "cost_table_url",
        "protocol_version",
        "max_frame_bytes",
        "model",
        "device",
        "weights_url",
        "boundaries",
    ] {
        assert!(info.get(field).is_some(), "/api/info lacks {field}: {info}");
    }
    assert_eq!(info["boundaries"].as_array().map(Vec::len), Some(21));
}
