//! The real server over a real WebSocket: split frames, cloud-only images, malformed input.

use crate::common;

use std::time::Duration;

use awc::ws::{Frame, Message};
use burn::tensor::Device;
use cloud_server::Config;
use futures_util::SinkExt;
use std::sync::OnceLock;

use split_shared::codec::{Calibration, EncodeContext, Setting, StreamEncoder};
use split_shared::model::{Boundary, EfficientNetLite0, Features};
use split_shared::protocol::FeaturesFrame;
use split_shared::protocol::{
    Encoding, ErrorCode, MAX_FRAME_BYTES, MAX_PAYLOAD_BYTES, NO_GAP, PROTOCOL_VERSION, Reply,
    Request,
};

use crate::common::Socket;

const CHELSEA: &[u8] = include_bytes!("../../../web/samples/chelsea.png");
/// ImageNet's cat classes: tabby, tiger cat, Persian, Siamese, Egyptian cat.
const CATS: std::ops::RangeInclusive<u16> = 281..=285;

fn server_with(flags: &[&str]) -> actix_test::TestServer {
    common::server_and_state(flags).0
}

fn server() -> actix_test::TestServer {
    server_with(&[])
}

async fn connect(srv: &actix_test::TestServer) -> Socket {
    // awc's default limit on received messages: every reply of `/ws` is smaller.
    common::connect(srv, "/ws", 64 * 1024).await
}

async fn next_frame(ws: &mut Socket) -> Frame {
    common::next_message(ws, Duration::from_secs(60)).await
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

fn model() -> &'static EfficientNetLite0 {
    static MODEL: OnceLock<EfficientNetLite0> = OnceLock::new();
    MODEL.get_or_init(|| {
        EfficientNetLite0::load(&Config::for_tests().weights_path(), &Device::flex())
            .unwrap_or_else(|e| panic!("{e}"))
    })
}

fn calibration() -> &'static Calibration {
    static CALIBRATION: OnceLock<Calibration> = OnceLock::new();
    CALIBRATION.get_or_init(|| {
        Calibration::load(&Config::for_tests().calibration_path())
            .unwrap_or_else(|e| panic!("{e}; run `./run.sh setup`"))
    })
}

/// Activations of `photo` at `split`, computed the way the browser does.
fn activations(photo: &[u8], split: Boundary) -> Features {
    let img = split_shared::image::preprocess(photo).unwrap();
    let device = Device::flex();
    let x = model()
        .forward_range(split_shared::image::to_input_tensor(&img, &device), Boundary::INPUT, split)
        .unwrap();
    Features::from_tensor(split, x).unwrap()
}

fn coded_frame(
    id: u64,
    split: Boundary,
    setting: &str,
    photo: &[u8],
    stream: Option<&mut StreamEncoder>,
) -> Vec<u8> {
    let setting: Setting = setting.parse().unwrap();
    let ctx = EncodeContext::new(Some(calibration())).with_stream(stream);
    let frame = activations(photo, split).to_frame(setting, ctx).unwrap();
    Request::Features { id, frame }.to_bytes()
}

/// f32 features of the chelsea photo at `split`.
fn features_frame(id: u64, split: Boundary) -> Vec<u8> {
    coded_frame(id, split, "f32", CHELSEA, None)
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
    assert!(matches!(cloud_only, Reply::Result { id: 1, from: 0, .. }));
    // The model input made by the client (cropped and resized, then JPEG): not cropped again,
    // so it answers like the original photo.
    let input = split_shared::image::preprocess(CHELSEA).unwrap();
    let jpeg = split_shared::image::encode_jpeg(&input, 95).unwrap();
    let as_input = roundtrip(&mut ws, Request::Input { id: 2, payload: jpeg }.to_bytes()).await;
    assert_eq!(top1(&as_input), top1(&cloud_only), "{as_input:?}");
    // Anything but 224x224 is not a model input.
    let wrong = roundtrip(&mut ws, Request::Input { id: 3, payload: CHELSEA.to_vec() }.to_bytes());
    match wrong.await {
        Reply::Error { id: 3, code: ErrorCode::BadImage, message } => {
            assert!(message.contains("224x224"), "{message}")
        }
        other => panic!("expected bad_image, got {other:?}"),
    }
    for (i, split) in ["stem", "block5", "block14", "head", "pool"].into_iter().enumerate() {
        let split: Boundary = split.parse().unwrap();
        let reply = roundtrip(&mut ws, features_frame(10 + i as u64, split)).await;
        assert_eq!(top1(&reply), top1(&cloud_only), "split at {split}");
        let Reply::Result { id, from, top, timings, load } = reply else { unreachable!() };
        assert_eq!((id, from, top.len()), (10 + i as u64, split.index(), 5));
        assert!(timings.compute_us > 0 && !timings.cached);
        assert_eq!(load.workers, 1);
        assert!(load.recent_us > 0, "the server reports its recent compute time");
    }
}

#[actix_web::test]
async fn coded_features_repeats_and_streams_are_served() {
    let srv = server();
    let mut ws = connect(&srv).await;
    let block5 = Boundary::block(5).unwrap();
    let reference = top1(&roundtrip(&mut ws, features_frame(1, block5)).await);
    for (i, setting) in ["q8", "q4", "q3-packed", "q4-r40"].into_iter().enumerate() {
        let reply =
            roundtrip(&mut ws, coded_frame(2 + i as u64, block5, setting, CHELSEA, None)).await;
        assert_eq!(top1(&reply), reference, "{setting}");
    }

    // The same content again: answered from the cache, no compute.
    let again = roundtrip(&mut ws, coded_frame(9, block5, "q4", CHELSEA, None)).await;
    let Reply::Result { timings, top, .. } = &again else { panic!("{again:?}") };
    assert!(timings.cached && timings.compute_us == 0, "{timings:?}");
    assert_eq!(top[0].class, reference);

    // A stream: keyframe, then residuals; a lost frame is refused until a keyframe comes.
    let coffee: &[u8] = include_bytes!("../../../web/samples/coffee.png");
    let mut enc = StreamEncoder::new(4, 30, 1);
    let key = coded_frame(20, block5, "q4", coffee, Some(&mut enc));
    let delta = coded_frame(21, block5, "q4", CHELSEA, Some(&mut enc));
    let coffee_top = top1(&roundtrip(&mut ws, key).await);
    assert_eq!(
        top1(&roundtrip(&mut ws, delta).await),
        reference,
        "the residual decodes to chelsea"
    );
    let _lost = coded_frame(22, block5, "q4", coffee, Some(&mut enc));
    let after_loss = coded_frame(23, block5, "q4", CHELSEA, Some(&mut enc));
    expect_error(roundtrip(&mut ws, after_loss).await, 23, ErrorCode::KeyframeRequired);
    enc.force_keyframe();
    let recovered = coded_frame(24, block5, "q4", coffee, Some(&mut enc));
    assert_eq!(top1(&roundtrip(&mut ws, recovered).await), coffee_top);
    // References belong to the connection: a delta on a new one needs a keyframe first.
    let mut other = connect(&srv).await;
    let delta = coded_frame(25, block5, "q4", CHELSEA, Some(&mut enc));
    expect_error(roundtrip(&mut other, delta).await, 25, ErrorCode::KeyframeRequired);
}

#[actix_web::test]
async fn bad_codec_frames_get_typed_errors() {
    let srv = server();
    let mut ws = connect(&srv).await;
    let block8 = Boundary::block(8).unwrap();
    let valid = coded_frame(1, block8, "q4", CHELSEA, None);
    let Request::Features { frame, .. } = Request::decode(&valid).unwrap() else { unreachable!() };
    let (Encoding::Coded(params), payload) = (frame.encoding, frame.payload.clone()) else {
        unreachable!()
    };
    let with = |params, payload: Vec<u8>| {
        let frame = FeaturesFrame { encoding: Encoding::Coded(params), payload, ..frame.clone() };
        Request::Features { id: 2, frame }.to_bytes()
    };
    let mut foreign = params;
    foreign.calibration ^= 0xff;
    expect_error(
        roundtrip(&mut ws, with(foreign, payload.clone())).await,
        2,
        ErrorCode::CalibrationMismatch,
    );
    let mut too_deep = params;
    too_deep.setting.rank = 4096;
    expect_error(
        roundtrip(&mut ws, with(too_deep, payload.clone())).await,
        2,
        ErrorCode::UnsupportedCodec,
    );
    let mut five_bits = params;
    five_bits.setting.bits = 5;
    expect_error(
        roundtrip(&mut ws, with(five_bits, payload.clone())).await,
        2,
        ErrorCode::UnsupportedCodec,
    );
    let damaged: Vec<u8> = payload[..payload.len() - 3].to_vec();
    expect_error(roundtrip(&mut ws, with(params, damaged)).await, 2, ErrorCode::Malformed);
    let mut orphan = params;
    orphan.pos.delta = true;
    expect_error(roundtrip(&mut ws, with(orphan, payload.clone())).await, 2, ErrorCode::Malformed);
    // Still serving.
    assert!(CATS.contains(&top1(&roundtrip(&mut ws, valid).await)));
}

#[actix_web::test]
async fn info_and_calibration_are_served() {
    let srv = server();
    let mut info = awc::Client::new().get(srv.url("/api/info")).send().await.unwrap();
    let info: serde_json::Value = info.json().await.unwrap();
    assert_eq!(info["calibration"]["id"], format!("{:016x}", calibration().id()));
    let url = info["calibration"]["url"].as_str().unwrap();
    let mut response = awc::Client::new().get(srv.url(url)).send().await.unwrap();
    let body = response.body().limit(64 << 20).await.unwrap();
    assert_eq!(Calibration::from_bytes(&body).unwrap().id(), calibration().id());
}

/// The weights per stage: `/api/info` lists 19 shards whose sizes and checksums are those of
/// the bytes served; each holds its stage's tensors; together they are the whole file; a
/// client's cached copy revalidates to 304; an unknown or traversing name is a 404.
#[actix_web::test]
async fn weight_shards_are_listed_and_served() {
    use split_shared::container::TensorFile;
    use split_shared::model::WEIGHTS_MAGIC;
    let srv = server();
    let client = awc::Client::new();
    let info: serde_json::Value =
        client.get(srv.url("/api/info")).send().await.unwrap().json().await.unwrap();
    let shards = info["weights_shards"].as_array().unwrap();
    assert_eq!(shards.len(), 19);
    let mut values = 0;
    for s in shards {
        let url = format!("{}?v={}", s["url"].as_str().unwrap(), s["id"].as_str().unwrap());
        let mut response = client.get(srv.url(&url)).send().await.unwrap();
        assert_eq!(response.status(), 200, "{url}");
        let cache = response.headers().get("cache-control").unwrap().to_str().unwrap();
        assert!(cache.contains("immutable"), "{url}: a versioned URL is cached for good: {cache}");
        let etag = response.headers().get("etag").unwrap().clone();
        let body = response.body().limit(64 << 20).await.unwrap();
        assert_eq!(body.len() as u64, s["bytes"].as_u64().unwrap(), "{url}: size");
        let tail = u64::from_le_bytes(body[body.len() - 8..].try_into().unwrap());
        assert_eq!(format!("{tail:016x}"), s["id"].as_str().unwrap(), "{url}: checksum");
        let file = TensorFile::from_bytes(&body, WEIGHTS_MAGIC).unwrap();
        let stage = s["name"].as_str().unwrap();
        let prefix = split_shared::model::stage_prefix(stage.parse().unwrap()).unwrap();
        assert!(file.names().all(|n| n.starts_with(&prefix)), "{stage}: only its tensors");
        values += file.num_values();
        let again = client.get(srv.url(&url)).insert_header(("if-none-match", etag)).send();
        assert_eq!(again.await.unwrap().status(), 304, "{url}: revalidated");
    }
    let whole = std::fs::read(cloud_server::Config::for_tests().weights_path()).unwrap();
    let whole = TensorFile::from_bytes(&whole, WEIGHTS_MAGIC).unwrap();
    assert_eq!(values, whole.num_values(), "the shards hold the whole file");
    for bad in [
        "/weights/shards/pool.splw",
        "/weights/shards/stem",
        "/weights/shards/..%2Fefficientnet-lite0.splw",
    ] {
        let response = client.get(srv.url(bad)).send().await.unwrap();
        assert_eq!(response.status(), 404, "{bad}");
    }
    let unversioned = client.get(srv.url("/weights/shards/stem.splw")).send().await.unwrap();
    let cache = unversioned.headers().get("cache-control").unwrap().to_str().unwrap();
    assert_eq!(cache, "no-cache", "an unversioned URL revalidates");
}

/// The light model: `/api/info` names its precision and lists a shard per stage; each is the
/// stage's weights within half an int8 step of each output channel's range, at about a quarter
/// of the f32 shard's bytes; with `--light-model none` there is none (and no route answers).
#[actix_web::test]
async fn light_model_shards_are_the_weights_in_int8() {
    use split_shared::container::{TensorFile, dequantize};
    use split_shared::model::WEIGHTS_MAGIC;
    let srv = server();
    let client = awc::Client::new();
    let info: serde_json::Value =
        client.get(srv.url("/api/info")).send().await.unwrap().json().await.unwrap();
    assert_eq!(info["light_model"]["precision"], "int8");
    let shards = info["light_model"]["shards"].as_array().unwrap();
    assert_eq!(shards.len(), 19);
    let whole = std::fs::read(cloud_server::Config::for_tests().weights_path()).unwrap();
    let whole = TensorFile::from_bytes(&whole, WEIGHTS_MAGIC).unwrap();
    let (mut light_bytes, mut full_bytes) = (0, 0);
    for (s, full) in shards.iter().zip(info["weights_shards"].as_array().unwrap()) {
        let url = format!("{}?v={}", s["url"].as_str().unwrap(), s["id"].as_str().unwrap());
        let mut response = client.get(srv.url(&url)).send().await.unwrap();
        assert_eq!(response.status(), 200, "{url}");
        let body = response.body().limit(64 << 20).await.unwrap();
        assert_eq!(body.len() as u64, s["bytes"].as_u64().unwrap(), "{url}: size");
        light_bytes += body.len() as u64;
        full_bytes += full["bytes"].as_u64().unwrap();
        for (name, dims, values) in dequantize(&body).unwrap().iter() {
            let exact = whole.tensor(name, dims).unwrap();
            let rows = if dims.len() < 2 { values.len() } else { dims[0] };
            for (row, (a, b)) in exact
                .chunks(values.len() / rows)
                .zip(values.chunks(values.len() / rows))
                .enumerate()
            {
                let step = a.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
                let worst = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
                assert!(
                    worst <= step / 2.0 + 1e-7,
                    "{name} row {row}: off by {worst}, step {step}"
                );
            }
        }
    }
    let ratio = light_bytes as f64 / full_bytes as f64;
    assert!((0.24..0.28).contains(&ratio), "int8 is about a quarter of the bytes: {ratio:.3}");

    let srv = server_with(&["--light-model", "none"]);
    let info: serde_json::Value =
        client.get(srv.url("/api/info")).send().await.unwrap().json().await.unwrap();
    assert!(info.get("light_model").is_none(), "no light model: {info}");
    let response = client.get(srv.url("/weights/light/stem.splq")).send().await.unwrap();
    assert_eq!(response.status(), 404);
}

/// The calibration per boundary: each part loads as the server's calibration (same id, which
/// frames carry) restricted to its boundary, and a frame coded with the part is answered.
#[actix_web::test]
async fn calibration_parts_load_as_the_whole_at_their_boundary() {
    let srv = server();
    let client = awc::Client::new();
    let info: serde_json::Value =
        client.get(srv.url("/api/info")).send().await.unwrap().json().await.unwrap();
    let parts = info["calibration"]["parts"].as_array().unwrap();
    let whole = calibration();
    assert_eq!(parts.len(), whole.boundaries().count());
    let mut sum = 0;
    let mut ws = connect(&srv).await;
    for p in parts {
        let url = p["url"].as_str().unwrap();
        let body =
            client.get(srv.url(url)).send().await.unwrap().body().limit(64 << 20).await.unwrap();
        assert_eq!(body.len() as u64, p["bytes"].as_u64().unwrap(), "{url}");
        let part = Calibration::from_bytes(&body).unwrap();
        assert_eq!(part.id(), whole.id(), "{url}: the whole file's id");
        let name = p["name"].as_str().unwrap();
        assert_eq!(part.boundaries().collect::<Vec<_>>(), [name]);
        sum += body.len();
        if name == "block5" {
            let b = Boundary::block(5).unwrap();
            let ctx = EncodeContext::new(Some(&part));
            let frame = activations(CHELSEA, b).to_frame("q6".parse().unwrap(), ctx);
            let frame = Request::Features { id: 3, frame: frame.unwrap() }.to_bytes();
            assert!(CATS.contains(&top1(&roundtrip(&mut ws, frame).await)), "coded with the part");
        }
    }
    let block5 = parts.iter().find(|p| p["name"] == "block5").unwrap()["bytes"].as_u64().unwrap();
    assert!(block5 * 20 < sum as u64, "block5's part: {block5} of {sum} bytes");
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

    // A WebSocket message over the frame limit closes that session with 1009 and a reason (from
    // the frame header: the server may close before the client has finished sending)...
    let _sent = bad.send(Message::Binary(vec![0u8; MAX_FRAME_BYTES + 1].into())).await;
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

/// Another site's page cannot open `/ws` through a visitor's browser; the server's own pages,
/// native clients (no Origin) and origins the operator lists can.
#[actix_web::test]
async fn foreign_origins_are_refused() {
    let srv = server();
    let ws = |origin: Option<String>| {
        let mut request = awc::Client::new().ws(srv.url("/ws"));
        if let Some(o) = origin {
            request = request.origin(o.as_str());
        }
        request.connect()
    };
    let err = ws(Some("https://evil.example".into())).await.err().expect("refused");
    assert!(err.to_string().contains("403") || format!("{err:?}").contains("403"), "{err:?}");
    let own = format!("http://{}", srv.addr());
    assert!(ws(Some(own)).await.is_ok(), "the server's own origin");
    assert!(ws(None).await.is_ok(), "a native client sends no Origin");
}

/// With `--token`, `/ws` needs it — as `Authorization: Bearer` (native) or as the subprotocol
/// `bearer.TOKEN` beside `split.v1` (browsers), which the server then selects — and a missing
/// or wrong token gets 401 without a session; the other routes stay open (the page must load
/// before it can present the token).
#[actix_web::test]
async fn a_token_guards_the_websocket() {
    const TOKEN: &str = "test-token-0123456789";
    let srv = server_with(&["--token", TOKEN]);
    let status = |r: Result<_, awc::error::WsClientError>| match r {
        Ok(_) => 101,
        Err(awc::error::WsClientError::InvalidResponseStatus(s)) => s.as_u16(),
        Err(e) => panic!("unexpected handshake error {e:?}"),
    };
    let ws = || awc::Client::new().ws(srv.url("/ws"));
    let no_token = ws().connect().await.map(|(_, s)| s);
    assert_eq!(status(no_token), 401);
    let wrong = ws().bearer_auth("test-token-0123456780").connect().await.map(|(_, s)| s);
    assert_eq!(status(wrong), 401);
    let short = ws().protocols(["split.v1", "bearer.test-token"]).connect().await.map(|(_, s)| s);
    assert_eq!(status(short), 401, "a prefix of the token is not the token");

    let (_, mut socket) = ws().bearer_auth(TOKEN).connect().await.expect("header token");
    let reply = roundtrip(&mut socket, Request::Ping { id: 3, payload: vec![] }.to_bytes()).await;
    assert!(matches!(reply, Reply::Pong { id: 3, .. }), "{reply:?}");

    let bearer = format!("bearer.{TOKEN}");
    let (response, _) =
        ws().protocols(["split.v1", bearer.as_str()]).connect().await.expect("subprotocol token");
    let selected = response.headers().get("sec-websocket-protocol").map(|v| v.to_str().unwrap());
    assert_eq!(
        selected,
        Some("split.v1"),
        "a browser drops a socket whose protocol is not selected"
    );

    let info = awc::Client::new().get(srv.url("/api/info")).send().await.unwrap();
    assert!(info.status().is_success());
}

/// Only the site is served from the web folder: the page, the client, the wasm builds and the
/// samples; the tooling beside them (tests, package.json, node_modules) is not.
#[actix_web::test]
async fn only_the_site_is_served() {
    let srv = server();
    let status = |path: &'static str| {
        let url = srv.url(path);
        async move { awc::Client::new().get(url).send().await.unwrap().status().as_u16() }
    };
    for path in
        ["/", "/index.html", "/split-client.js", "/client/connection.js", "/samples/chelsea.png"]
    {
        assert_eq!(status(path).await, 200, "{path}");
    }
    for path in [
        "/package.json",
        "/tests/e2e.mjs",
        "/tsconfig.json",
        "/node_modules/typescript/package.json",
    ] {
        assert_eq!(status(path).await, 404, "{path}");
    }
    // The site is cross-origin isolated, so its client may start the threaded build.
    let page = awc::Client::new().get(srv.url("/")).send().await.unwrap();
    let header =
        |name: &str| page.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    assert_eq!(header("cross-origin-opener-policy").as_deref(), Some("same-origin"));
    assert_eq!(header("cross-origin-embedder-policy").as_deref(), Some("require-corp"));
}

/// A client that disconnects while its request waits in the queue costs no compute: the model
/// skips work nobody waits for, and the sessions ahead of it are answered as usual.
#[actix_web::test]
async fn work_of_a_client_that_left_is_skipped() {
    let (srv, state) =
        common::server_and_state(&["--workers", "1", "--batch", "1", "--cache-entries", "0"]);
    let image = || Request::Image { id: 1, payload: CHELSEA.to_vec() }.to_bytes();
    // Many sessions keep the single worker busy (24 images: several hundred ms of work)...
    const BUSY: u64 = 24;
    let mut busy = Vec::new();
    for _ in 0..BUSY {
        let mut ws = connect(&srv).await;
        ws.send(Message::Binary(image().into())).await.unwrap();
        busy.push(ws);
    }
    // ...while one more sends a request and leaves once it is queued, before it is reached.
    let mut leaving = connect(&srv).await;
    leaving.send(Message::Binary(image().into())).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    leaving.close().await.unwrap();
    drop(leaving);
    for ws in &mut busy {
        match next_frame(ws).await {
            Frame::Binary(b) => assert!(matches!(Reply::decode(&b), Ok(Reply::Result { .. }))),
            other => panic!("expected a result, got {other:?}"),
        }
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while state.engine().abandoned() == 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(state.engine().abandoned(), 1, "the leaving client's request was skipped");
    assert_eq!(state.engine().forward_passes(), BUSY, "only the waiting sessions were computed");
}

/// Over its rate, a client address gets `rate_limited` replies (the session stays open) and is
/// served again once its bucket refills.
#[actix_web::test]
async fn requests_over_the_rate_are_refused_then_served_again() {
    let srv = server_with(&["--rate-limit", "5"]);
    let mut ws = connect(&srv).await;
    let mut limited = 0;
    for id in 0..10u64 {
        let ping = Request::Ping { id, payload: vec![] }.to_bytes();
        match roundtrip(&mut ws, ping).await {
            Reply::Pong { id: got, .. } => assert_eq!(got, id),
            reply => {
                expect_error(reply, id, ErrorCode::RateLimited);
                limited += 1;
            }
        }
    }
    assert!((4..=5).contains(&limited), "a burst of 5, then refusals: {limited} refused");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let ping = Request::Ping { id: 11, payload: vec![] }.to_bytes();
    assert!(matches!(roundtrip(&mut ws, ping).await, Reply::Pong { id: 11, .. }));
}

#[actix_web::test]
async fn head_requests_answer_like_get() {
    let srv = server();
    for path in ["/healthz", "/api/info"] {
        let response = awc::Client::new().head(srv.url(path)).send().await.unwrap();
        assert!(response.status().is_success(), "HEAD {path}: {}", response.status());
    }
}

/// A client that announces a 1 GiB message is closed with 1009 from the frame header, without
/// the server buffering what it streams, and other sessions keep being served.
#[actix_web::test]
async fn a_huge_announced_frame_is_refused_before_it_arrives() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let srv = server();
    let mut tcp = tokio::net::TcpStream::connect(srv.addr()).await.unwrap();
    let response = common::upgrade(&mut tcp, &srv.addr().to_string()).await.unwrap();
    assert!(response.starts_with(b"HTTP/1.1 101"), "{}", String::from_utf8_lossy(&response));
    // A binary frame declaring 1 GiB, masked as a client must, then the first 4 MiB of it.
    tcp.write_all(&common::gigabyte_frame_header()).await.unwrap();
    let streamed = tcp.write_all(&vec![0u8; 4 << 20]).await;
    // The server answers with a close frame (opcode 8) carrying 1009, then stops reading. Its
    // heartbeat ping may come first: server frames are unmasked and control frames short, so
    // each is two header bytes and a payload of at most 125.
    let close = async {
        loop {
            let mut header = [0u8; 2];
            tcp.read_exact(&mut header).await?;
            let mut payload = vec![0u8; usize::from(header[1] & 0x7f)];
            tcp.read_exact(&mut payload).await?;
            if header[0] & 0x0f != 9 {
                return Ok::<_, std::io::Error>((header, payload));
            }
        }
    };
    let read = tokio::time::timeout(Duration::from_secs(10), close).await;
    let read = read.expect("the server closes promptly, not after a gigabyte");
    let (header, payload) =
        read.unwrap_or_else(|e| panic!("a close frame ({e}; streaming: {streamed:?})"));
    assert_eq!(header[0] & 0x0f, 8, "a close frame: {header:?}");
    assert_eq!(u16::from_be_bytes([payload[0], payload[1]]), 1009, "code 1009 (message too big)");
    // Everyone else is still served.
    let mut ws = connect(&srv).await;
    let reply = roundtrip(&mut ws, features_frame(5, Boundary::block(11).unwrap())).await;
    assert!(matches!(reply, Reply::Result { id: 5, .. }), "{reply:?}");
}

/// Open WebSockets are capped per client address (and in all): the next one gets 503, and a
/// place frees when a session ends.
#[actix_web::test]
async fn connections_are_capped_per_address() {
    let srv = server_with(&["--max-connections-per-ip", "2"]);
    let first = connect(&srv).await;
    let _second = connect(&srv).await;
    let refused = awc::Client::new().ws(srv.url("/ws")).connect().await.err().expect("refused");
    assert!(format!("{refused:?}").contains("503"), "{refused:?}");
    drop(first);
    let mut third = None;
    for _ in 0..50 {
        if let Ok((_, s)) = awc::Client::new().ws(srv.url("/ws")).connect().await {
            third = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut third = third.expect("a place freed once a session closed");
    let reply = roundtrip(&mut third, features_frame(8, Boundary::block(11).unwrap())).await;
    assert!(matches!(reply, Reply::Result { id: 8, .. }), "{reply:?}");
}

/// Behind a trusted proxy the per-address cap counts the addresses it forwards; from anyone
/// else `X-Forwarded-For` is ignored, so a client cannot pick its own address.
#[actix_web::test]
async fn forwarded_addresses_count_only_from_a_trusted_proxy() {
    let forwarded = |srv: &actix_test::TestServer, ip: &'static str| {
        awc::Client::new().ws(srv.url("/ws")).set_header("x-forwarded-for", ip).connect()
    };
    let behind = server_with(&["--max-connections-per-ip", "1", "--trusted-proxy", "127.0.0.1"]);
    let _a = forwarded(&behind, "203.0.113.7").await.expect("first client");
    let _b = forwarded(&behind, "198.51.100.1, 203.0.113.9").await.expect("another client");
    let again = forwarded(&behind, "203.0.113.7").await.err().expect("the first client's second");
    assert!(format!("{again:?}").contains("503"), "{again:?}");
    // A network of proxies (an ingress controller's pods) works the same way.
    let ingress = server_with(&["--max-connections-per-ip", "1", "--trusted-proxy", "127.0.0.0/8"]);
    let _d = forwarded(&ingress, "203.0.113.7").await.expect("first client");
    let _e = forwarded(&ingress, "203.0.113.8").await.expect("another client");
    let open = server_with(&["--max-connections-per-ip", "1"]);
    let _c = forwarded(&open, "203.0.113.7").await.expect("first client");
    let spoofed = forwarded(&open, "198.51.100.1").await.err().expect("same address, new header");
    assert!(format!("{spoofed:?}").contains("503"), "{spoofed:?}");
}

/// A pong says how long after the connection's frame before it the server read its ping (how
/// the client times its uplink probe behind a bare ping); a connection's first frame has none.
#[actix_web::test]
async fn a_pong_carries_the_time_since_the_frame_before_its_ping() {
    let srv = server();
    let mut ws = connect(&srv).await;
    let gap = |reply: Reply| match reply {
        Reply::Pong { gap_us, .. } => gap_us,
        other => panic!("expected a pong, got {other:?}"),
    };
    let ping = |id| Request::Ping { id, payload: vec![0; 100] }.to_bytes();
    assert_eq!(gap(roundtrip(&mut ws, ping(1)).await), NO_GAP);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = gap(roundtrip(&mut ws, ping(2)).await);
    assert!((300_000..10_000_000).contains(&after), "{after} us");
}

/// A ping sent behind a request is answered while the request computes, not after it: its pong
/// times the link, which is what the client's planner takes it for.
#[actix_web::test]
async fn a_ping_behind_a_request_is_answered_before_it() {
    let srv = server();
    let mut ws = connect(&srv).await;
    // The whole network on a photo: milliseconds of compute, where a pong takes microseconds.
    // Fed, then flushed together: the ping follows the photo at once. The server looks at a
    // frame it has read before a finished answer, but one it has not yet read cannot go first:
    // on a loaded machine (a clean clone's CI, 2026-12-08) the ping's bytes once reached the
    // server only after the photo's answer was ready. A server that held pings behind requests
    // would fail every try; the test asks for the pong first in one of three.
    let mut orders = Vec::new();
    for try_ in 0..3u64 {
        let (image_id, ping_id) = (10 * try_ + 1, 10 * try_ + 2);
        let image = Request::Image { id: image_id, payload: CHELSEA.to_vec() }.to_bytes();
        ws.feed(Message::Binary(image.into())).await.unwrap();
        ws.feed(Message::Binary(Request::Ping { id: ping_id, payload: vec![] }.to_bytes().into()))
            .await
            .unwrap();
        ws.flush().await.unwrap();
        let mut order = Vec::new();
        for _ in 0..2 {
            match next_frame(&mut ws).await {
                Frame::Binary(b) => match Reply::decode(&b).expect("reply decodes") {
                    Reply::Pong { id, gap_us, .. } => {
                        // Read behind the photo: stamped from the photo's arrival.
                        assert_ne!(gap_us, NO_GAP);
                        order.push(("pong", id));
                    }
                    Reply::Result { id, .. } => order.push(("result", id)),
                    other => panic!("{other:?}"),
                },
                other => panic!("expected a binary reply, got {other:?}"),
            }
        }
        let pong_first = order == [("pong", ping_id), ("result", image_id)];
        assert!(pong_first || order == [("result", image_id), ("pong", ping_id)], "{order:?}");
        orders.push(order);
        if pong_first {
            break;
        }
    }
    assert!(
        orders.last().is_some_and(|o| o[0].0 == "pong"),
        "the ping answered after the request in every try: {orders:?}"
    );
    // A malformed ping still waits its turn and is refused by the usual path.
    let mut bad = Request::Ping { id: 3, payload: vec![1, 2, 3] }.to_bytes();
    bad.truncate(bad.len() - 1);
    expect_error(roundtrip(&mut ws, bad).await, 3, ErrorCode::Malformed);
}
