//! Attacks on the real server binary, its memory as the kernel counts it: many sessions pinning
//! camera-stream references, and connections announcing gigabyte messages, while a well-behaved
//! client keeps getting right answers; sessions uploading encrypted-classifier keys past their
//! budget. The bound asserted follows the flags and the flood.

use crate::common;

use std::time::{Duration, Instant};

use awc::ws::{Frame, Message};
use futures_util::{SinkExt, StreamExt};
use split_shared::codec::{Calibration, EncodeContext, StreamEncoder};
use split_shared::model::Boundary;
use split_shared::protocol::{Reply, Request, synthetic_activations};
use split_shared::runtime::encode_frame;

use common::Socket;

const CHELSEA: &[u8] = include_bytes!("../../../web/samples/chelsea.png");
/// Sessions pinning stream references, and streams each one opens.
const SESSIONS: usize = 100;
const STREAMS: u32 = 8;
/// The server-wide stream budget the server runs with, MiB (`--stream-bytes-total`: the memory
/// references hold, allocator slack included).
const BUDGET_MIB: u64 = 64;
/// What the server holds under the flood besides the references, whatever the budget: the
/// runtime's and the allocator's own slack. Measured with the budget at 0 (no reference kept):
/// +35 MiB for 50 sessions, +41 MiB for 100, so about 29 MiB plus the connections' part
/// ([`bound_mib`]); allowed twice that.
const SLACK_MIB: u64 = 64;

/// Growth of peak memory allowed over the warmed-up server, from the flags and the flood: the
/// stream budget, a receive buffer per quiet connection (actix-ws keeps the buffer its last
/// message was read into until the next one: at most that message's size; measured 0.12 MiB
/// per session for 0.19 MiB frames), and [`SLACK_MIB`].
fn bound_mib(budget_mib: u64, sessions: usize, largest_frame: usize) -> u64 {
    budget_mib + ((sessions * largest_frame) >> 20) as u64 + SLACK_MIB
}

async fn reply(ws: &mut Socket) -> Reply {
    match common::next_message(ws, Duration::from_secs(60)).await {
        Frame::Binary(b) => Reply::decode(&b).unwrap(),
        other => panic!("unexpected {other:?}"),
    }
}

async fn classify_chelsea(ws: &mut Socket, id: u64) -> (u16, Duration) {
    let start = Instant::now();
    let frame = Request::Image { id, payload: CHELSEA.to_vec() }.to_bytes();
    ws.send(Message::Binary(frame.into())).await.unwrap();
    match reply(ws).await {
        Reply::Result { top, .. } => (top[0].class, start.elapsed()),
        other => panic!("the well-behaved client got {other:?}"),
    }
}

/// A client announcing a 1 GiB binary message and streaming its first MiB. Panics when it
/// cannot even connect and upgrade: a flood that never reached the server proves nothing.
async fn announce_a_gigabyte(addr: &str) {
    use tokio::io::AsyncWriteExt;
    let mut tcp = tokio::net::TcpStream::connect(addr).await.expect("a flood connects");
    let head = common::upgrade(&mut tcp, addr).await.expect("a flood's handshake is answered");
    assert!(head.starts_with(b"HTTP/1.1 101"), "{}", String::from_utf8_lossy(&head));
    // Past here the server may close on us at any point: that is the defence working.
    let _ = tcp.write_all(&common::gigabyte_frame_header()).await;
    let _ = tokio::time::timeout(Duration::from_secs(5), tcp.write_all(&vec![7u8; 1 << 20])).await;
}

/// What a flood did to the server: peak memory over the warmed-up server, MiB, and the
/// well-behaved client's latencies.
struct FloodOutcome {
    grown_mib: u64,
    latencies: Vec<Duration>,
    /// The largest message an attacker sent, bytes.
    largest_frame: usize,
}

#[actix_web::test]
async fn memory_stays_bounded_under_stream_and_huge_frame_floods() {
    let budget = (BUDGET_MIB << 20).to_string();
    let outcome = flood(&["--stream-bytes-total", &budget], SESSIONS).await;
    let FloodOutcome { grown_mib, latencies, largest_frame } = outcome;
    let bound = bound_mib(BUDGET_MIB, SESSIONS, largest_frame);
    assert!(grown_mib <= bound, "peak memory grew {grown_mib} MiB (bound {bound} MiB)");
    // A bound on being served at all, not a speed goal: the floods must not starve others.
    let worst = latencies.iter().max().unwrap();
    assert!(*worst < Duration::from_secs(10), "a well-behaved request waited {worst:?}");
}

/// The same flood against a server whose stream budgets are lifted must break the bound: the
/// test above measures the defence, not a flood too small to matter.
#[actix_web::test]
async fn the_bound_fails_without_the_budgets() {
    let outcome = flood(
        &["--stream-bytes-total", "100000000000", "--stream-bytes-per-session", "100000000"],
        SESSIONS,
    )
    .await;
    let bound = bound_mib(BUDGET_MIB, SESSIONS, outcome.largest_frame);
    assert!(
        outcome.grown_mib > bound,
        "without budgets the flood grew the server only {} MiB: the bound of {bound} MiB \
         would not catch a missing defence",
        outcome.grown_mib
    );
}

/// Every attacker here is on loopback: one address, so the per-address caps that would
/// otherwise stop a flood before the budgets are reached are lifted (and the result cache off,
/// so that every request computes).
const FLOOD_FLAGS: [&str; 8] = [
    "--max-connections-per-ip",
    "512",
    "--max-connections",
    "512",
    "--rate-limit",
    "0",
    "--cache-entries",
    "0",
];

/// Start a server with `flags` (and caps lifted so that one loopback address can flood it),
/// then flood it while a well-behaved client keeps classifying.
async fn flood(flags: &[&str], sessions: usize) -> FloodOutcome {
    let mut args = FLOOD_FLAGS.to_vec();
    args.extend_from_slice(flags);
    let (server, url) = common::start(&args);
    let ws_url = format!("{}ws", url.replacen("http://", "ws://", 1));
    let addr = url.trim_start_matches("http://").trim_end_matches('/').to_string();
    let calibration = Calibration::load(&cloud_server::Config::for_tests().calibration_path())
        .expect("run `./run.sh setup` first");
    let connect = || async { awc::Client::new().ws(ws_url.as_str()).connect().await.unwrap().1 };

    let mut good = connect().await;
    let (cat, _) = classify_chelsea(&mut good, 1).await;
    assert!((281..=285).contains(&cat));
    let baseline = server.status_kib("VmHWM");

    // Sessions that each open several stem streams and keep them: 392 KiB per reference, 314
    // MiB in all without budgets (the issue measured 474 MiB for 150 sessions × 8).
    let (spec, stem) = (split_shared::model::lite0_spec(), Boundary::STEM.index());
    let setting = "q4".parse().unwrap();
    let mut attackers = Vec::new();
    let mut latencies = Vec::new();
    let mut largest_frame = 0;
    for s in 0..sessions {
        let mut ws = connect().await;
        for k in 0..STREAMS {
            let id = (s as u32) * STREAMS + k;
            let mut enc = StreamEncoder::new(id + 1, 1000, 0);
            let features = synthetic_activations(&spec, stem, id);
            let ctx = EncodeContext::new(Some(&calibration)).with_stream(Some(&mut enc));
            let frame = encode_frame(&spec, &features, setting, ctx).unwrap();
            let bytes = Request::Features { id: u64::from(id), frame }.to_bytes();
            largest_frame = largest_frame.max(bytes.len());
            ws.send(Message::Binary(bytes.into())).await.unwrap();
            assert!(matches!(reply(&mut ws).await, Reply::Result { .. }));
        }
        attackers.push(keep_alive(ws));
        if s % 20 == 19 {
            // Connections announcing gigabytes, and the well-behaved client, meanwhile.
            let floods: Vec<_> = (0..10).map(|_| announce_a_gigabyte(&addr)).collect();
            futures_util::future::join_all(floods).await;
            let (cat, took) = classify_chelsea(&mut good, 2 + s as u64).await;
            assert!((281..=285).contains(&cat), "the well-behaved client's answer stays right");
            latencies.push(took);
        }
    }
    let peak = server.status_kib("VmHWM");
    let grown_mib = peak.saturating_sub(baseline) / 1024;
    eprintln!(
        "attacks: {sessions} sessions, largest frame {largest_frame} B: peak RSS {} MiB, \
         {grown_mib} MiB over the warmed-up {} MiB; well-behaved latencies {latencies:?}",
        peak / 1024,
        baseline / 1024
    );
    for attacker in attackers {
        attacker.abort();
    }
    FloodOutcome { grown_mib, latencies, largest_frame }
}

/// Hold an attacker's session open for the rest of the flood: answer the server's pings, as a
/// real client's WebSocket does. An attacker that stopped reading would be dropped after 30 s
/// of silence (and its references freed), so on a slow machine the flood would hold less.
fn keep_alive(ws: Socket) -> actix_web::rt::task::JoinHandle<()> {
    actix_web::rt::spawn(async move {
        let (mut sink, mut stream) = ws.split();
        while let Some(Ok(frame)) = stream.next().await {
            if let Frame::Ping(payload) = frame
                && sink.send(Message::Pong(payload)).await.is_err()
            {
                break;
            }
        }
    })
}

/// A client that sends requests and never reads the replies: once the socket's buffers are
/// full the server's writes block, and after `--write-timeout` the session is closed and its
/// place among the open connections is free again.
#[actix_web::test]
async fn a_client_that_never_reads_is_dropped() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (_server, url) = common::start(&[
        "--write-timeout",
        "1",
        "--rate-limit",
        "0",
        "--max-connections-per-ip",
        "2",
    ]);
    let addr: std::net::SocketAddr =
        url.trim_start_matches("http://").trim_end_matches('/').parse().unwrap();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap(); // a small window: the server's writes block soon
    let mut tcp = socket.connect(addr).await.unwrap();
    common::upgrade(&mut tcp, &addr.to_string()).await.unwrap();
    // Pings as masked binary frames, as fast as the server takes them, never reading a pong.
    let ping = Request::Ping { id: 1, payload: vec![] }.to_bytes();
    let mut frame = vec![0x82, 0x80 | ping.len() as u8, 0, 0, 0, 0];
    frame.extend_from_slice(&ping);
    let burst: Vec<u8> = frame.iter().copied().cycle().take(frame.len() * 1000).collect();
    let mut sent = 0usize;
    while let Ok(Ok(())) = tokio::time::timeout(Duration::from_secs(3), tcp.write_all(&burst)).await
    {
        sent += 1000;
        assert!(sent < 5_000_000, "the server kept reading without being read from");
    }
    // The server is now blocked writing; after its write timeout it drops the session. Reading
    // then drains what it had sent and reaches the end of the stream.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let drained = tokio::time::timeout(Duration::from_secs(30), async {
        let mut buf = vec![0u8; 1 << 16];
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(drained.is_ok(), "the server closed the session of a client that never read");
    // Its place is free: both places of this address can be taken again.
    let ws_url = format!("{}ws", url.replacen("http://", "ws://", 1));
    for _ in 0..2 {
        assert!(awc::Client::new().ws(ws_url.as_str()).connect().await.is_ok());
    }
    eprintln!("never-reading client: {sent} pings sent before the server stopped reading");
}

/// 100 sessions each uploading an evaluation key to `/encrypted` (335 kB, a real one) against a
/// 16 MiB key budget: the server holds only what the budget allows (50 keys, as sent), refuses
/// the rest with `key_budget`, its memory grows within the budget, the connections' receive
/// buffers and the slack, and the well-behaved client on `/ws` keeps being answered.
#[actix_web::test]
async fn evaluation_keys_stay_within_their_budget() {
    use split_shared::encrypted::DeviceKeys;
    use split_shared::protocol::{
        EncryptedErrorCode, EncryptedFrame, MAX_ENCRYPTED_FRAME_BYTES, PARAMETERS_ID,
    };
    const KEY_BUDGET_MIB: u64 = 16;
    let budget = KEY_BUDGET_MIB.to_string();
    let mut args = FLOOD_FLAGS.to_vec();
    args.extend_from_slice(&["--encrypted-key-mib", &budget]);
    let (server, url) = common::start(&args);
    let ws_url = format!("{}ws", url.replacen("http://", "ws://", 1));
    let key_url = format!("{}encrypted", url.replacen("http://", "ws://", 1));
    let connect = |u: String, max: usize| async move {
        let c = awc::Client::new().ws(u.as_str()).max_frame_size(max).connect().await;
        c.unwrap().1
    };
    let mut good = connect(ws_url.clone(), 1 << 20).await;
    classify_chelsea(&mut good, 1).await;
    let baseline = server.status_kib("VmHWM");
    let mut rng = rand::rng();
    let key = DeviceKeys::generate(&mut rng).evaluation_key(&mut rng).unwrap();
    let frame = EncryptedFrame::Key { id: 1, parameters: PARAMETERS_ID, key: key.clone() }.encode();
    let (mut accepted, mut refused) = (0, 0);
    let mut attackers = Vec::new();
    let mut latencies = Vec::new();
    for s in 0..SESSIONS {
        let mut ws = connect(key_url.clone(), MAX_ENCRYPTED_FRAME_BYTES).await;
        ws.send(Message::Binary(frame.clone().into())).await.unwrap();
        let reply = match common::next_message(&mut ws, Duration::from_secs(60)).await {
            Frame::Binary(b) => EncryptedFrame::decode(&b).unwrap(),
            other => panic!("unexpected {other:?}"),
        };
        match reply {
            EncryptedFrame::KeyAccepted { .. } => accepted += 1,
            EncryptedFrame::Error { code: EncryptedErrorCode::KeyBudget, .. } => refused += 1,
            other => panic!("a key is accepted or refused for the budget, got {other:?}"),
        }
        attackers.push(keep_alive(ws));
        if s % 20 == 19 {
            let (cat, took) = classify_chelsea(&mut good, 2 + s as u64).await;
            assert!((281..=285).contains(&cat), "the well-behaved client's answer stays right");
            latencies.push(took);
        }
    }
    let peak = server.status_kib("VmHWM");
    let grown_mib = peak.saturating_sub(baseline) / 1024;
    let fits = (KEY_BUDGET_MIB << 20) as usize / key.len();
    eprintln!(
        "attacks: {SESSIONS} key uploads of {} B: {accepted} held, {refused} refused; peak RSS \
         {} MiB, {grown_mib} MiB over the warmed-up {} MiB; well-behaved latencies \
         {latencies:?}",
        key.len(),
        peak / 1024,
        baseline / 1024
    );
    assert_eq!(accepted, fits, "as many keys as the budget holds");
    assert_eq!(accepted + refused, SESSIONS);
    let bound = bound_mib(KEY_BUDGET_MIB, SESSIONS, frame.len());
    assert!(grown_mib <= bound, "peak memory grew {grown_mib} MiB (bound {bound} MiB)");
    let worst = latencies.iter().max().unwrap();
    assert!(*worst < Duration::from_secs(10), "a well-behaved request waited {worst:?}");
    for attacker in attackers {
        attacker.abort();
    }
}
