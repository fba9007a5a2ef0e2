//! Device groups over the real server and real WebSockets: create and join by code, the member
//! list, signalling and relayed frames between members, and every refusal a bad or hostile
//! client can provoke, each typed and leaving other groups served.

use crate::common;

use std::time::Duration;

use awc::ws::{Frame, Message};
use futures_util::SinkExt;
use serde_json::{Value, json};
use split_shared::group::relay::RelayFrame;
use split_shared::group::{MAX_CONTROL_BYTES, MAX_DEVICES_PER_GROUP};
use split_shared::protocol::{Reply, Request};

use crate::common::Socket;

async fn connect(srv: &actix_test::TestServer) -> Socket {
    // awc's default limit on received messages, as before: relayed frames included.
    common::connect(srv, "/group", 64 * 1024).await
}

/// The next text or binary message (pings skipped), within 30 s.
async fn next(ws: &mut Socket) -> Frame {
    common::next_message(ws, Duration::from_secs(30)).await
}

async fn next_json(ws: &mut Socket) -> Value {
    match next(ws).await {
        Frame::Text(t) => serde_json::from_slice(&t).expect("JSON"),
        other => panic!("expected a control message, got {other:?}"),
    }
}

async fn send(ws: &mut Socket, message: Value) {
    ws.send(Message::Text(message.to_string().into())).await.unwrap();
}

fn device(id: &str, ms: f64) -> Value {
    json!({ "id": id, "name": format!("device {id}"), "backend": "cpu", "msPerImage": ms })
}

/// The reply to a control message that must be refused with `code`.
async fn expect_error(ws: &mut Socket, code: &str) {
    let reply = next_json(ws).await;
    assert_eq!(reply["type"], "error", "{reply}");
    assert_eq!(reply["code"], code, "{reply}");
    assert!(!reply["message"].as_str().unwrap().is_empty());
}

/// Create a group; its code.
async fn create(ws: &mut Socket, id: &str) -> String {
    send(ws, json!({ "type": "create", "device": device(id, 40.0) })).await;
    let joined = next_json(ws).await;
    assert_eq!(
        (joined["type"].as_str(), joined["you"].as_u64()),
        (Some("joined"), Some(1)),
        "{joined}"
    );
    joined["code"].as_str().unwrap().to_string()
}

/// Join `code`; this device's peer number.
async fn join(ws: &mut Socket, code: &str, id: &str) -> u64 {
    send(ws, json!({ "type": "join", "code": code, "device": device(id, 80.0) })).await;
    let joined = next_json(ws).await;
    assert_eq!(joined["type"], "joined", "{joined}");
    joined["you"].as_u64().unwrap()
}

#[actix_web::test]
async fn devices_join_by_code_see_each_other_and_pass_frames() {
    let (srv, state) = common::server_and_state(&[]);
    let mut phone = connect(&srv).await;
    let code = create(&mut phone, "phone").await;
    let mut laptop = connect(&srv).await;
    let laptop_peer = join(&mut laptop, &code, "laptop").await;
    assert_eq!(laptop_peer, 2);
    // The phone hears of the laptop, with what it said of itself.
    let members = next_json(&mut phone).await;
    assert_eq!(members["type"], "members");
    let list = members["members"].as_array().unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(
        (list[1]["id"].as_str(), list[1]["msPerImage"].as_f64()),
        (Some("laptop"), Some(80.0))
    );
    assert_eq!(list[1]["power"]["state"], "unknown");

    // Signalling passes unread, naming the sender.
    let offer = json!({ "sdp": "v=0 ...", "kind": "offer" });
    send(&mut phone, json!({ "type": "signal", "to": laptop_peer, "data": offer })).await;
    let signal = next_json(&mut laptop).await;
    assert_eq!((signal["type"].as_str(), signal["from"].as_u64()), (Some("signal"), Some(1)));
    assert_eq!(signal["data"], offer);

    // A protocol frame relayed to the laptop arrives with the phone as its sender, and the
    // laptop's answer comes back the same way.
    let request = Request::Ping { id: 77, payload: vec![9; 100] }.to_bytes();
    let envelope = RelayFrame { peer: 2, payload: &request }.to_bytes();
    phone.send(Message::Binary(envelope.into())).await.unwrap();
    let Frame::Binary(got) = next(&mut laptop).await else { panic!("a relayed frame") };
    let got = RelayFrame::parse(&got).unwrap();
    assert_eq!((got.peer, got.payload), (1, &request[..]));
    assert_eq!(Request::decode(got.payload).unwrap().id(), 77);
    let answer =
        Reply::error(77, split_shared::protocol::ErrorCode::Busy, "only a test").to_bytes();
    laptop
        .send(Message::Binary(RelayFrame { peer: 1, payload: &answer }.to_bytes().into()))
        .await
        .unwrap();
    let Frame::Binary(back) = next(&mut phone).await else { panic!("the answer") };
    assert_eq!(RelayFrame::parse(&back).unwrap(), RelayFrame { peer: 2, payload: &answer });

    // A heartbeat updates the list everyone sees.
    send(
        &mut laptop,
        json!({ "type": "status", "load": 3, "power": { "state": "battery", "level": 0.4 } }),
    )
    .await;
    let members = next_json(&mut phone).await;
    assert_eq!(members["members"][1]["load"], 3);
    assert_eq!(members["members"][1]["power"]["level"], 0.4);
    let _ = next_json(&mut laptop).await;

    // The laptop goes: the phone is told, and frames to it are refused.
    laptop.close().await.unwrap();
    drop(laptop);
    let members = next_json(&mut phone).await;
    assert_eq!(members["members"].as_array().unwrap().len(), 1, "{members}");
    let envelope = RelayFrame { peer: 2, payload: &request }.to_bytes();
    phone.send(Message::Binary(envelope.into())).await.unwrap();
    expect_error(&mut phone, "unknown_peer").await;
    send(&mut phone, json!({ "type": "leave" })).await;
    // Leaving is silent; the group is gone once empty.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(state.groups.is_empty());
}

#[actix_web::test]
async fn bad_and_hostile_messages_get_typed_errors_and_others_are_served() {
    let (srv, _state) = common::server_and_state(&["--max-groups", "2", "--rate-limit", "0"]);
    // A working group beside the attacker: it must stay served throughout.
    let mut a = connect(&srv).await;
    let code = create(&mut a, "a").await;
    let mut b = connect(&srv).await;
    join(&mut b, &code, "b").await;
    let _ = next_json(&mut a).await;

    let mut x = connect(&srv).await;
    // Before joining, nothing but create or join.
    send(&mut x, json!({ "type": "status", "load": 0 })).await;
    expect_error(&mut x, "not_joined").await;
    x.send(Message::Binary(RelayFrame { peer: 1, payload: b"hi" }.to_bytes().into()))
        .await
        .unwrap();
    expect_error(&mut x, "not_joined").await;
    // Not JSON, an unknown type, a bad device.
    x.send(Message::Text("{{{{".into())).await.unwrap();
    expect_error(&mut x, "bad_message").await;
    send(&mut x, json!({ "type": "teleport" })).await;
    expect_error(&mut x, "bad_message").await;
    send(&mut x, json!({ "type": "create", "device": device("bad id!", 10.0) })).await;
    expect_error(&mut x, "bad_message").await;
    // Wrong codes.
    for wrong in ["ZZZZZZ", "short", ""] {
        send(&mut x, json!({ "type": "join", "code": wrong, "device": device("x", 10.0) })).await;
        expect_error(&mut x, "unknown_group").await;
    }
    // Claiming another member's id.
    send(&mut x, json!({ "type": "join", "code": code, "device": device("a", 10.0) })).await;
    expect_error(&mut x, "id_in_use").await;
    // An oversized signalling message.
    let huge = json!({ "type": "signal", "to": 1, "data": "x".repeat(MAX_CONTROL_BYTES) });
    send(&mut x, huge).await;
    expect_error(&mut x, "too_large").await;
    // Groups beyond the server's limit.
    let second = create(&mut x, "x").await;
    send(&mut x, json!({ "type": "create", "device": device("x2", 10.0) })).await;
    expect_error(&mut x, "already_joined").await;
    let mut y = connect(&srv).await;
    send(&mut y, json!({ "type": "create", "device": device("y", 10.0) })).await;
    expect_error(&mut y, "too_many_groups").await;
    // A member may not relay to itself, to a stranger, or junk.
    x.send(Message::Binary(RelayFrame { peer: 1, payload: b"me" }.to_bytes().into()))
        .await
        .unwrap();
    expect_error(&mut x, "unknown_peer").await;
    x.send(Message::Binary(RelayFrame { peer: 2, payload: b"a's b?" }.to_bytes().into()))
        .await
        .unwrap();
    expect_error(&mut x, "unknown_peer").await;
    x.send(Message::Binary(b"SPLT not an envelope".to_vec().into())).await.unwrap();
    expect_error(&mut x, "bad_message").await;
    // A full group.
    for i in 0..MAX_DEVICES_PER_GROUP - 1 {
        let mut s = connect(&srv).await;
        join(&mut s, &second, &format!("fill{i}")).await;
        std::mem::forget(s);
    }
    send(&mut y, json!({ "type": "join", "code": second, "device": device("late", 10.0) })).await;
    expect_error(&mut y, "group_full").await;

    // The first group never noticed.
    let request = Request::Ping { id: 5, payload: vec![] }.to_bytes();
    a.send(Message::Binary(RelayFrame { peer: 2, payload: &request }.to_bytes().into()))
        .await
        .unwrap();
    let Frame::Binary(got) = next(&mut b).await else { panic!("relayed") };
    assert_eq!(RelayFrame::parse(&got).unwrap().payload, &request[..]);
}

#[actix_web::test]
async fn expired_codes_and_join_floods_are_refused() {
    let (srv, _state) = common::server_and_state(&["--group-code-ttl", "0", "--rate-limit", "20"]);
    let mut a = connect(&srv).await;
    let code = create(&mut a, "a").await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let mut b = connect(&srv).await;
    send(&mut b, json!({ "type": "join", "code": code, "device": device("b", 10.0) })).await;
    expect_error(&mut b, "expired_code").await;
    // A flood of joins from one address: past the rate, each is refused as such.
    let mut flood = connect(&srv).await;
    let mut limited = 0;
    for i in 0..60 {
        send(
            &mut flood,
            json!({ "type": "join", "code": "ABCDEF", "device": device(&format!("f{i}"), 10.0) }),
        )
        .await;
    }
    for _ in 0..60 {
        let reply = next_json(&mut flood).await;
        match reply["code"].as_str() {
            Some("rate_limited") => limited += 1,
            Some("unknown_group") => {}
            other => panic!("unexpected {other:?}: {reply}"),
        }
    }
    assert!(limited >= 30, "{limited} of 60 joins were rate-limited");
    // The member already in keeps its group (once this address's second has passed: in this
    // test every device shares the loopback address the flood came from).
    tokio::time::sleep(Duration::from_millis(1100)).await;
    send(&mut a, json!({ "type": "status", "load": 1 })).await;
    let members = next_json(&mut a).await;
    assert_eq!(members["members"][0]["load"], 1, "{members}");
}

#[actix_web::test]
async fn a_silent_device_leaves_its_group() {
    let (srv, _state) = common::server_and_state(&[]);
    let mut a = connect(&srv).await;
    let code = create(&mut a, "a").await;
    let mut quiet = connect(&srv).await;
    join(&mut quiet, &code, "quiet").await;
    let _ = next_json(&mut a).await;
    // `a` keeps sending heartbeats; `quiet` says nothing (its socket still answers pings).
    let started = std::time::Instant::now();
    let gone = loop {
        send(&mut a, json!({ "type": "status", "load": 0 })).await;
        let members = next_json(&mut a).await;
        if members["members"].as_array().unwrap().len() == 1 {
            break started.elapsed();
        }
        assert!(started.elapsed() < Duration::from_secs(40), "the silent device is still listed");
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    let timeout = split_shared::group::HEARTBEAT_TIMEOUT_S;
    assert!(gone >= Duration::from_secs(timeout), "dropped after {gone:?}, before {timeout} s");
    drop(quiet);
}
