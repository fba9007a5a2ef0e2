//! The request service without a socket: the same `answer` the WebSocket loop calls, driven
//! directly, and the `/api/info` contract as the client reads it.

use cloud_server::{AppState, Config, ServerInfo, Session, answer};
use split_shared::labels::TOP_K;
use split_shared::model::Boundary;
use split_shared::protocol::{Encoding, ErrorCode, FeaturesFrame, Reply, Request};

const CHELSEA: &[u8] = include_bytes!("../../../web/samples/chelsea.png");

fn state_with(flags: &[&str]) -> AppState {
    AppState::load(&Config::for_tests_with(flags)).unwrap_or_else(|e| panic!("{e:#}"))
}

fn state() -> AppState {
    state_with(&[])
}

fn cached(reply: &Reply) -> bool {
    match reply {
        Reply::Result { timings, .. } => timings.cached,
        other => panic!("expected a result, got {other:?}"),
    }
}

#[actix_web::test]
async fn frames_are_answered_without_a_transport() {
    let state = state();
    let mut streams = Session::new(&state);
    let ping = Request::Ping { id: 4, payload: vec![0; 100] }.to_bytes();
    match Reply::decode(&answer(&state, &ping, &mut streams).await.to_bytes()).unwrap() {
        Reply::Pong { id: 4, received: 100, .. } => {}
        other => panic!("expected a pong, got {other:?}"),
    }
    let image = Request::Image { id: 5, payload: CHELSEA.to_vec() }.to_bytes();
    match answer(&state, &image, &mut streams).await {
        Reply::Result { id: 5, from, top, .. } => {
            assert_eq!(from, Boundary::INPUT.index());
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
        "weights_bytes",
        "weights_id",
        "weights_shards",
        "boundaries",
    ] {
        assert!(info.get(field).is_some(), "/api/info lacks {field}: {info}");
    }
    // The size is the file's, and the id its container's checksum: what clients cache it by.
    let path = cloud_server::Config::for_tests().weights_path();
    assert_eq!(info["weights_bytes"].as_u64(), Some(std::fs::metadata(&path).unwrap().len()));
    let bytes = std::fs::read(&path).unwrap();
    let tail = u64::from_le_bytes(bytes[bytes.len() - 8..].try_into().unwrap());
    assert_eq!(info["weights_id"].as_str(), Some(format!("{tail:016x}").as_str()));
    assert!(info["calibration"]["bytes"].as_u64().is_some_and(|n| n > 0));
    assert_eq!(info["boundaries"].as_array().map(Vec::len), Some(21));
    // The kernels' instruction set, as the server chose it at start.
    let isa = format!("{:?}", split_kernels::Isa::detect());
    assert_eq!(info["kernels"].as_str(), Some(isa.as_str()));
    let shards = info["weights_shards"].as_array().unwrap();
    let sum: u64 = shards.iter().map(|s| s["bytes"].as_u64().unwrap()).sum();
    let whole = info["weights_bytes"].as_u64().unwrap();
    // Each shard repeats the container's header and checksum (20 bytes).
    assert!(sum >= whole && sum < whole + 20 * 19, "shards {sum} bytes, the file {whole}");
}

/// One session's results do not answer another's repeats (that would tell the second client
/// what the first classified) unless the operator shares the cache.
#[actix_web::test]
async fn the_result_cache_is_per_session_unless_shared() {
    let image = Request::Image { id: 1, payload: CHELSEA.to_vec() }.to_bytes();
    let state = state();
    let (mut a, mut b) = (Session::new(&state), Session::new(&state));
    assert!(!cached(&answer(&state, &image, &mut a).await));
    assert!(cached(&answer(&state, &image, &mut a).await), "a repeat in the same session");
    assert!(!cached(&answer(&state, &image, &mut b).await), "another session computes anew");
    let shared = state_with(&["--shared-cache"]);
    let (mut a, mut b) = (Session::new(&shared), Session::new(&shared));
    assert!(!cached(&answer(&shared, &image, &mut a).await));
    assert!(cached(&answer(&shared, &image, &mut b).await), "shared on request");
}

/// Non-finite activations are malformed, not classified into NaN probabilities.
#[actix_web::test]
async fn nan_features_are_malformed() {
    let state = state();
    let b = Boundary::block(15).unwrap();
    let [c, h, w] = b.info().shape;
    for bad in [f32::NAN, f32::INFINITY] {
        let mut values = vec![0.5f32; c * h * w];
        values[7] = bad;
        let frame = FeaturesFrame {
            boundary: b.index(),
            encoding: Encoding::F32,
            shape: vec![1, c as u32, h as u32, w as u32],
            payload: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        };
        let bytes = Request::Features { id: 3, frame }.to_bytes();
        match answer(&state, &bytes, &mut Session::new(&state)).await {
            Reply::Error { id: 3, code: ErrorCode::Malformed, message } => {
                assert!(message.contains("non-finite"), "{message}")
            }
            other => panic!("expected malformed for {bad}, got {other:?}"),
        }
    }
}

/// A JPEG cut short is refused as `bad_image` before decoding (it could declare a huge image and
/// cost its full decoding), and the session keeps working.
#[actix_web::test]
async fn truncated_jpegs_are_bad_images() {
    let state = state();
    let mut session = Session::new(&state);
    let img = split_shared::image::decode(CHELSEA).unwrap();
    let jpeg = split_shared::image::encode_jpeg(&img, 90).unwrap();
    let cut = Request::Image { id: 6, payload: jpeg[..jpeg.len() * 2 / 3].to_vec() }.to_bytes();
    match answer(&state, &cut, &mut session).await {
        Reply::Error { id: 6, code: ErrorCode::BadImage, message } => {
            assert!(message.contains("truncated"), "{message}")
        }
        other => panic!("expected bad_image, got {other:?}"),
    }
    let whole = Request::Image { id: 7, payload: jpeg }.to_bytes();
    assert!(matches!(answer(&state, &whole, &mut session).await, Reply::Result { id: 7, .. }));
}

/// Stream references count against a per-session and a server-wide byte budget: a session
/// whose keyframe goes over the server's total forgets its references, so its next delta asks
/// for a keyframe, while the sessions within the budget keep streaming.
#[actix_web::test]
async fn stream_references_stay_within_the_servers_budget() {
    use split_shared::codec::{Calibration, EncodeContext, StreamEncoder};
    use split_shared::protocol::synthetic_activations;
    let b = Boundary::block(5).unwrap();
    let [c, h, w] = b.info().shape;
    // Room for one block5 reference (one symbol per value) on the whole server.
    let total = (c * h * w + c * h * w / 2).to_string();
    let state = state_with(&["--stream-bytes-total", &total]);
    let calibration = Calibration::load(&Config::for_tests().calibration_path()).unwrap();
    let frame = |enc: &mut StreamEncoder, seed: u32, id: u64| {
        let spec = split_shared::model::lite0_spec();
        let features = synthetic_activations(&spec, b.index(), seed);
        let ctx = EncodeContext::new(Some(&calibration)).with_stream(Some(enc));
        let frame =
            split_shared::runtime::encode_frame(&spec, &features, "q4".parse().unwrap(), ctx)
                .unwrap();
        Request::Features { id, frame }.to_bytes()
    };
    let (mut first, mut second) = (Session::new(&state), Session::new(&state));
    let (mut enc1, mut enc2) = (StreamEncoder::new(1, 30, 0), StreamEncoder::new(2, 30, 0));
    let ok = |r: Reply| assert!(matches!(r, Reply::Result { .. }), "{r:?}");
    ok(answer(&state, &frame(&mut enc1, 1, 1), &mut first).await); // keyframe, kept
    ok(answer(&state, &frame(&mut enc2, 2, 2), &mut second).await); // keyframe: over the total
    ok(answer(&state, &frame(&mut enc1, 3, 3), &mut first).await); // delta: the first streams on
    match answer(&state, &frame(&mut enc2, 4, 4), &mut second).await {
        Reply::Error { id: 4, code: ErrorCode::KeyframeRequired, .. } => {}
        other => panic!("expected keyframe_required, got {other:?}"),
    }
    // Once the first session ends, its bytes are free again.
    drop(first);
    enc2.force_keyframe();
    ok(answer(&state, &frame(&mut enc2, 5, 5), &mut second).await);
    ok(answer(&state, &frame(&mut enc2, 6, 6), &mut second).await);
}

/// A PNG whose header declares 40 MP is refused from the header (PNG cannot be decoded at a
/// reduced scale, so it would cost its full size), before any pixel is decoded.
#[actix_web::test]
async fn a_40_megapixel_png_is_refused_from_its_header() {
    fn crc32(bytes: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &b in bytes {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 != 0 { (crc >> 1) ^ 0xedb8_8320 } else { crc >> 1 };
            }
        }
        !crc
    }
    use image::ImageEncoder;
    // A real 1x1 PNG, its IHDR rewritten to 8000x5000 (the CRC with it).
    let mut png = Vec::new();
    image::codecs::png::PngEncoder::new(&mut png)
        .write_image(&[9, 9, 9], 1, 1, image::ExtendedColorType::Rgb8)
        .unwrap();
    png[16..20].copy_from_slice(&8000u32.to_be_bytes());
    png[20..24].copy_from_slice(&5000u32.to_be_bytes());
    let crc = crc32(&png[12..29]);
    png[29..33].copy_from_slice(&crc.to_be_bytes());
    let state = state();
    let request = Request::Image { id: 9, payload: png }.to_bytes();
    match answer(&state, &request, &mut Session::new(&state)).await {
        Reply::Error { id: 9, code: ErrorCode::BadImage, message } => {
            assert!(message.contains("8000x5000") && message.contains("larger than"), "{message}")
        }
        other => panic!("expected bad_image, got {other:?}"),
    }
}

/// The congestion price: 1 on an idle server (× the schedule's factor for this hour), in
/// `/api/info` and every pong and result; above 1 while requests wait for the workers.
#[actix_web::test]
async fn the_price_is_published_and_rises_with_the_queue() {
    let price = |reply: Reply| match reply {
        Reply::Pong { load, .. } | Reply::Result { load, .. } => load.price_milli,
        other => panic!("expected a pong or a result, got {other:?}"),
    };
    let ping = Request::Ping { id: 1, payload: Vec::new() }.to_bytes();
    let idle = state();
    assert_eq!(price(answer(&idle, &ping, &mut Session::new(&idle)).await), 1_000);
    let info = serde_json::to_value(ServerInfo::of(&idle)).unwrap();
    assert_eq!(info["price"]["now"], 1.0);
    assert_eq!(info["price"]["smoothing_s"], 10.0);
    // A schedule over the whole day halves it.
    let half = state_with(&["--price-schedule", "0-24:0.5"]);
    assert_eq!(price(answer(&half, &ping, &mut Session::new(&half)).await), 500);
    let info = serde_json::to_value(ServerInfo::of(&half)).unwrap();
    assert_eq!(info["price"]["schedule"][0]["factor"], 0.5);
    // Eight photos for one worker, no smoothing: pings among them see the queue's price. They
    // ask every 2 ms until the photos are answered: when the first photo reaches the worker
    // depends on the machine's load (each is decoded first), so no one instant is sure to
    // find photos waiting.
    let busy = state_with(&["--workers", "1", "--price-smoothing-s", "0", "--cache-entries", "0"]);
    let image = |id| Request::Image { id, payload: CHELSEA.to_vec() }.to_bytes();
    let answered = std::cell::Cell::new(false);
    let photos = async {
        let prices = futures_util::future::join_all((10..18).map(|id| {
            let busy = &busy;
            async move { price(answer(busy, &image(id), &mut Session::new(busy)).await) }
        }))
        .await;
        answered.set(true);
        prices
    };
    let among = async {
        let mut highest = 0;
        while !answered.get() {
            highest = highest.max(price(answer(&busy, &ping, &mut Session::new(&busy)).await));
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        highest
    };
    let (results, queued) = futures_util::join!(photos, among);
    assert!(queued > 1_000, "the highest price a ping saw with photos waiting: {queued}");
    assert!(results.iter().all(|&p| p >= 1_000), "{results:?}");
    assert!(<Config as clap::Parser>::try_parse_from(["s", "--price-schedule", "7-3:1"]).is_err());
}
