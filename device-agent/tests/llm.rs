//! A split chat through the native agent on the real server: this test is the phone (the
//! embedding, blocks 0..4 and the head), the agent runs blocks 4..12 relayed through the group,
//! the server 12..30 on the `/llm` socket the agent opens; then the agent runs 4..30 alone. The
//! greedy answers are the independent reference's for the unsplit model; the server's metrics
//! show it ran its blocks only in the first; bad frames get the `/llm` codes through the relay,
//! and the conversation goes on.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use awc::ws::{Frame, Message};
use device_agent::{Agent, AgentOptions, LlmMember};
use futures_util::SinkExt;
use serde_json::{Value, json};
use split_shared::codec::{DEFAULT_HIDDEN_CODEC, HiddenCodec};
use split_shared::models::smollm2::{KvCache, Smollm2, argmax};
use split_shared::protocol::{LlmErrorCode, LlmFrame, MODEL_SMOLLM2};

mod common;

use common::{Socket, next, next_json, relay, relayed};

/// Blocks the phone keeps.
const FRONT: usize = 4;

fn model() -> &'static Smollm2 {
    static MODEL: OnceLock<Smollm2> = OnceLock::new();
    MODEL.get_or_init(|| {
        let bytes = std::fs::read(split_paths::llm_file())
            .expect("SmolLM2's GGUF file: run `./run.sh setup`");
        Smollm2::load(&bytes).unwrap().0
    })
}

fn golden() -> (Vec<u32>, Vec<u32>) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/tests/data/smollm2_golden.json");
    let g: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let ids = |v: &Value| -> Vec<u32> {
        v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
    };
    (ids(&g["prompts"][1]["ids"]), ids(&g["prompts"][1]["greedy"]))
}

async fn signal(ws: &mut Socket, peer: u32, data: Value) {
    let message = json!({ "type": "signal", "to": peer, "data": data });
    ws.send(Message::Text(message.to_string().into())).await.unwrap();
}

/// Relay `frame` to `peer` and wait for its reply.
async fn call(ws: &mut Socket, peer: u32, frame: &[u8]) -> LlmFrame {
    LlmFrame::decode(&relay(ws, peer, frame).await).unwrap()
}

fn code(reply: LlmFrame) -> LlmErrorCode {
    match reply {
        LlmFrame::Error { code, .. } => code,
        other => panic!("expected an error, got {other:?}"),
    }
}

fn hidden(codec: HiddenCodec, id: u64, position: u32, values: Vec<f32>) -> Vec<u8> {
    let width = model().config.dim as u32;
    LlmFrame::Hidden { id, reply: false, position, width, codec, values }.encode()
}

/// Answers the `/llm` server counted (`split_requests_total{from="llm"}`).
async fn server_answers(srv: &actix_test::TestServer) -> u64 {
    let mut response = awc::Client::new().get(srv.url("/metrics")).send().await.unwrap();
    let text = String::from_utf8(response.body().await.unwrap().to_vec()).unwrap();
    text.lines()
        .find(|l| l.starts_with("split_requests_total{from=\"llm\"}"))
        .and_then(|l| l.split_whitespace().last())
        .map_or(0, |n| n.parse().unwrap())
}

/// A greedy answer of `n` tokens with the agent's stage ending at `to`.
async fn answer(ws: &mut Socket, peer: u32, to: u16, codec: HiddenCodec, n: usize) -> Vec<u32> {
    let m = model();
    let (prompt, _) = golden();
    let positions = (prompt.len() + n) as u32;
    signal(ws, peer, json!({ "llmStage": { "to": to } })).await;
    let open = LlmFrame::Open {
        id: 1,
        model: MODEL_SMOLLM2,
        first: FRONT as u16,
        end: m.config.layers as u16,
        positions,
        head: None,
    };
    let opened = call(ws, peer, &open.encode()).await;
    assert!(
        matches!(opened, LlmFrame::Opened { id: 1, first: 4, end: 30, head: false, .. }),
        "the phone sees the range it opened: {opened:?}"
    );
    let mut front = KvCache::new(&m.config, 0..FRONT, positions as usize);
    let (mut tokens, mut position, mut got) = (prompt, 0u32, Vec::new());
    while got.len() < n {
        let mut x = m.embed(&tokens).unwrap();
        m.forward_layers(0..FRONT, &mut x, &mut front).unwrap();
        let rows = tokens.len() as u32;
        let id = 2 + got.len() as u64;
        match call(ws, peer, &hidden(codec, id, position, x)).await {
            LlmFrame::Hidden {
                id: got_id, reply: true, position: p, codec: back, values, ..
            } => {
                assert_eq!((got_id, p, back), (id, position + rows - 1, codec));
                got.push(argmax(&m.logits(&values).unwrap()));
            }
            other => panic!("expected the last row, got {other:?}"),
        }
        position += rows;
        tokens = vec![*got.last().unwrap()];
    }
    got
}

#[actix_web::test]
async fn a_split_chat_runs_through_the_agent_and_the_server() {
    // A KV budget of one conversation of 18 blocks, taken back from one idle for a second.
    let flags = ["--llm-kv-mib", "2", "--llm-evict-after", "1"];
    let state = cloud_server::AppState::load(&cloud_server::Config::for_tests_with(&flags))
        .expect("weights missing: run `./run.sh setup`");
    let served = state.clone();
    let srv = actix_test::start(move || {
        actix_web::App::new().configure(cloud_server::config_app(served.clone()))
    });
    let (_, mut phone) = awc::Client::new().ws(srv.url("/group")).connect().await.unwrap();
    let device = json!({ "id": "phone", "name": "phone", "backend": "cpu", "msPerImage": 90.0 });
    let hello = json!({ "type": "create", "device": device });
    phone.send(Message::Text(hello.to_string().into())).await.unwrap();
    let join_code = next_json(&mut phone).await["code"].as_str().unwrap().to_string();

    let llm = LlmMember::load(&split_paths::llm_file(), 256).expect("SmolLM2's GGUF file");
    let agent = Agent::load(&split_paths::weights_file(), None).expect("weights").with_llm(llm);
    let options = AgentOptions {
        url: srv.url("/group").replace("http://", "ws://"),
        code: Some(join_code),
        id: "laptop".into(),
        name: "laptop".into(),
        token: None,
        on_joined: None,
    };
    let running = actix_web::rt::spawn(device_agent::run(Arc::new(agent), options));
    let members = next_json(&mut phone).await;
    let laptop = &members["members"][1];
    assert_eq!(laptop["llm"], json!(true), "the agent says it runs split chats: {members}");
    let peer = laptop["peer"].as_u64().unwrap() as u32;

    let (_, want) = golden();
    let n = want.len().min(16);
    let before = server_answers(&srv).await;
    // Phone 0..4, laptop 4..12, server 12..30: exact floats, then the default coding (the
    // laptop decodes the phone's rows and codes its own in the same encoding).
    for codec in [HiddenCodec::F32, DEFAULT_HIDDEN_CODEC] {
        assert_eq!(answer(&mut phone, peer, 12, codec, n).await, want[..n], "{codec}");
    }
    let through_server = server_answers(&srv).await - before;
    assert_eq!(through_server, 2 * (1 + n as u64), "an open and a step per token, twice");

    // The laptop runs the rest itself: the server answers nothing more.
    assert_eq!(answer(&mut phone, peer, 30, HiddenCodec::F32, n).await, want[..n]);
    assert_eq!(server_answers(&srv).await - before, through_server);

    // Bad frames through the relay: the `/llm` codes, and the conversation goes on.
    let dim = model().config.dim;
    assert_eq!(
        code(call(&mut phone, peer, &hidden(HiddenCodec::F32, 40, 0, vec![0.5; dim - 1])).await),
        LlmErrorCode::BadValues
    );
    assert_eq!(
        code(call(&mut phone, peer, b"SPLM\x04\x00\x7f\x00\x09\x00\x00\x00\x00\x00\x00\x00").await),
        LlmErrorCode::BadFrame
    );
    let tokens = LlmFrame::Tokens { id: 41, position: 0, generate: 1, tokens: vec![1] };
    assert_eq!(code(call(&mut phone, peer, &tokens.encode()).await), LlmErrorCode::Placement);
    signal(&mut phone, peer, json!({ "llmStage": { "to": 31 } })).await;
    let open = LlmFrame::Open {
        id: 42,
        model: MODEL_SMOLLM2,
        first: 4,
        end: 30,
        positions: 8,
        head: None,
    };
    assert_eq!(code(call(&mut phone, peer, &open.encode()).await), LlmErrorCode::BadLayers);
    assert_eq!(answer(&mut phone, peer, 12, HiddenCodec::F32, 2).await, want[..2]);

    // Another conversation on the server takes the laptop's idle one's cache: the phone hears
    // `evicted` (once), opens again and goes on.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (_, mut other) = awc::Client::new()
        .ws(srv.url("/llm"))
        .max_frame_size(split_shared::protocol::MAX_LLM_FRAME_BYTES)
        .connect()
        .await
        .unwrap();
    let open = LlmFrame::Open {
        id: 1,
        model: MODEL_SMOLLM2,
        first: 12,
        end: 30,
        positions: 64,
        head: None,
    };
    other.send(Message::Binary(open.encode().into())).await.unwrap();
    let Frame::Binary(opened) = next(&mut other).await else { panic!("no answer to the open") };
    assert!(matches!(LlmFrame::decode(&opened), Ok(LlmFrame::Opened { .. })), "{opened:?}");
    let evicted = LlmFrame::decode(&relayed(&mut phone, peer).await).unwrap();
    assert_eq!(code(evicted), LlmErrorCode::Evicted);
    // Once the other conversation has sat idle for its second, the laptop's open takes it back.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(answer(&mut phone, peer, 12, HiddenCodec::F32, 2).await, want[..2]);
    running.abort();
}
