//! The language model split across a real socket: this test is the client (embedding, blocks
//! 0..4, output projection and sampling), the server runs blocks 4..30 on `/llm`; then the
//! server runs the head too (plain split), and the whole model, streaming (cloud-only). The
//! greedy answers equal the independent reference's for the unsplit model, and bad frames get
//! typed errors while the conversation (and other conversations) go on.

use crate::common;

use std::sync::OnceLock;
use std::time::Duration;

use awc::ws::{Frame, Message};
use futures_util::SinkExt;
use split_shared::codec::{DEFAULT_HIDDEN_CODEC, HiddenCodec};
use split_shared::models::smollm2::{KvCache, Smollm2, argmax};
use split_shared::protocol::{
    Finish, HeadSampling, LlmErrorCode, LlmFrame, MAX_LLM_FRAME_BYTES, MODEL_SMOLLM2,
};

use crate::common::Socket;

/// Blocks the client keeps (the smallest U-split's front: the server then sees no embedding).
const FRONT: usize = 4;

fn model() -> &'static Smollm2 {
    static MODEL: OnceLock<Smollm2> = OnceLock::new();
    MODEL.get_or_init(|| {
        let bytes = std::fs::read(split_paths::llm_file())
            .expect("SmolLM2's GGUF file: run `./run.sh setup`");
        Smollm2::load(&bytes).unwrap().0
    })
}

fn golden() -> serde_json::Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/tests/data/smollm2_golden.json");
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

pub(crate) async fn connect(srv: &actix_test::TestServer) -> Socket {
    common::connect(srv, "/llm", MAX_LLM_FRAME_BYTES).await
}

pub(crate) async fn call(ws: &mut Socket, frame: &LlmFrame) -> LlmFrame {
    call_bytes(ws, frame.encode()).await
}

pub(crate) async fn call_bytes(ws: &mut Socket, bytes: Vec<u8>) -> LlmFrame {
    ws.send(Message::Binary(bytes.into())).await.unwrap();
    next_frame(ws).await
}

/// The server's next frame.
pub(crate) async fn next_frame(ws: &mut Socket) -> LlmFrame {
    match common::next_message(ws, Duration::from_secs(60)).await {
        Frame::Binary(b) => LlmFrame::decode(&b).expect("reply decodes"),
        other => panic!("expected a binary reply, got {other:?}"),
    }
}

fn open(id: u64, positions: u32) -> LlmFrame {
    LlmFrame::Open {
        id,
        model: MODEL_SMOLLM2,
        first: FRONT as u16,
        end: model().config.layers as u16,
        positions,
        head: None,
    }
}

/// Open a conversation whose server runs blocks `first..` and the head, greedy.
fn open_head(id: u64, first: u16, positions: u32) -> LlmFrame {
    let end = model().config.layers as u16;
    let head = Some(HeadSampling::GREEDY);
    LlmFrame::Open { id, model: MODEL_SMOLLM2, first, end, positions, head }
}

/// A streamed generation's tokens (their positions checked from `position` on) and its end.
pub(crate) async fn streamed(
    ws: &mut Socket,
    id: u64,
    mut position: u32,
) -> (Vec<u32>, u32, Finish) {
    let mut tokens = Vec::new();
    loop {
        match next_frame(ws).await {
            LlmFrame::Token { id: got, position: p, token } => {
                assert_eq!((got, p), (id, position), "token {}", tokens.len());
                tokens.push(token);
                position += 1;
            }
            LlmFrame::Done { id: got, generated, finish } => {
                assert_eq!(got, id);
                return (tokens, generated, finish);
            }
            other => panic!("expected tokens, got {other:?}"),
        }
    }
}

fn hidden(id: u64, position: u32, values: Vec<f32>) -> LlmFrame {
    hidden_in(HiddenCodec::F32, id, position, values)
}

fn hidden_in(codec: HiddenCodec, id: u64, position: u32, values: Vec<f32>) -> LlmFrame {
    let width = model().config.dim as u32;
    LlmFrame::Hidden { id, reply: false, position, width, codec, values }
}

pub(crate) fn code(reply: LlmFrame) -> LlmErrorCode {
    match reply {
        LlmFrame::Error { code, message, .. } => {
            assert!(!message.is_empty());
            code
        }
        other => panic!("expected an error, got {other:?}"),
    }
}

/// One step of the client's side: its blocks on `x`, the server's, then back.
async fn through_server(
    ws: &mut Socket,
    codec: HiddenCodec,
    front: &mut KvCache,
    position: u32,
    mut x: Vec<f32>,
    id: u64,
) -> Vec<f32> {
    let m = model();
    let x_rows = x.len() / m.config.dim;
    m.forward_layers(0..FRONT, &mut x, front).unwrap();
    match call(ws, &hidden_in(codec, id, position, x)).await {
        LlmFrame::Hidden { id: got, reply: true, position: p, codec: back, values, .. } => {
            let last = position + (x_rows as u32) - 1;
            assert_eq!(
                (got, p, back, values.len()),
                (id, last, codec, model().config.dim),
                "one row back, the last position's, in the request's encoding"
            );
            values
        }
        other => panic!("expected hidden states, got {other:?}"),
    }
}

#[actix_web::test]
async fn u_split_answers_as_the_unsplit_model() {
    let srv = common::server_and_state(&[]).0;
    let m = model();
    let dim = m.config.dim;
    let golden = golden();
    // Exact floats, then the encoding clients send by default.
    let codecs = [HiddenCodec::F32, DEFAULT_HIDDEN_CODEC];
    for (case, codec) in golden["prompts"].as_array().unwrap().iter().zip(codecs) {
        let prompt = ids(&case["ids"]);
        let want = ids(&case["greedy"]);
        let mut ws = connect(&srv).await;
        let positions = (prompt.len() + want.len()) as u32;
        assert!(
            matches!(call(&mut ws, &open(1, positions)).await, LlmFrame::Opened { width, .. } if width as usize == dim)
        );
        let mut front = KvCache::new(&m.config, 0..FRONT, positions as usize);
        // Prefill: the whole prompt in one frame.
        let back =
            through_server(&mut ws, codec, &mut front, 0, m.embed(&prompt).unwrap(), 2).await;
        let logits = m.logits(&back).unwrap();
        let mut next = argmax(&logits);
        let mut got = vec![];
        while got.len() < want.len() {
            got.push(next);
            let position = (prompt.len() + got.len() - 1) as u32;
            let back = through_server(
                &mut ws,
                codec,
                &mut front,
                position,
                m.embed(&[next]).unwrap(),
                3 + got.len() as u64,
            )
            .await;
            next = argmax(&m.logits(&back).unwrap());
        }
        assert_eq!(got, want, "{} ({codec})", case["user"]);
    }
}

/// A conversation's KV reservation follows its cache, 64 positions at a time, not the positions
/// it opened with: three conversations of 2,048 positions open in an 8 MiB budget (each holds
/// 64 positions × 26 blocks × 1,536 bytes = 2.4 MiB), a fourth does not; a frame whose rows
/// need a second step while the budget is full is refused with `kv_budget`, the conversation
/// and its cache unharmed, and the same frame goes through once another conversation ends.
#[actix_web::test]
async fn kv_reservations_grow_as_the_cache_fills() {
    let flags = ["--llm-positions", "2048", "--llm-kv-mib", "8", "--llm-evict-after", "0"];
    let srv = common::server_and_state(&flags).0;
    let dim = model().config.dim;
    let mut sockets = Vec::new();
    for i in 0..3 {
        let mut ws = connect(&srv).await;
        let opened = call(&mut ws, &open(1, 2048)).await;
        assert!(matches!(opened, LlmFrame::Opened { positions: 2048, .. }), "{i}: {opened:?}");
        sockets.push(ws);
    }
    let mut fourth = connect(&srv).await;
    assert_eq!(code(call(&mut fourth, &open(1, 2048)).await), LlmErrorCode::KvBudget);
    // 60 rows fit the first step; 10 more do not, until a conversation ends.
    let ws = &mut sockets[0];
    let first = call(ws, &hidden(2, 0, vec![0.25; 60 * dim])).await;
    assert!(matches!(first, LlmFrame::Hidden { position: 59, .. }), "{first:?}");
    let more = hidden(3, 60, vec![0.25; 10 * dim]);
    assert_eq!(code(call(ws, &more).await), LlmErrorCode::KvBudget);
    drop(sockets.pop());
    let mut reply = None;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        match call(&mut sockets[0], &more).await {
            LlmFrame::Error { code: LlmErrorCode::KvBudget, .. } => continue,
            other => {
                reply = Some(other);
                break;
            }
        }
    }
    // The refused frame left the cache at 60 positions: the rows go on from there.
    assert!(matches!(reply, Some(LlmFrame::Hidden { position: 69, .. })), "{reply:?}");
}

#[actix_web::test]
async fn bad_frames_get_typed_errors_and_the_conversation_goes_on() {
    let srv = common::server_and_state(&["--llm-positions", "64", "--llm-kv-mib", "2"]).0;
    // What a client reads before it opens a conversation.
    let info: serde_json::Value =
        awc::Client::new().get(srv.url("/api/info")).send().await.unwrap().json().await.unwrap();
    let llm = &info["llm"];
    assert_eq!(
        (llm["url"].as_str(), llm["model_id"].as_u64()),
        (Some("/llm"), Some(u64::from(MODEL_SMOLLM2)))
    );
    assert_eq!(
        (llm["layers"].as_u64(), llm["width"].as_u64(), llm["max_positions"].as_u64()),
        (Some(30), Some(576), Some(64))
    );
    let m = model();
    let dim = m.config.dim;
    let mut ws = connect(&srv).await;
    // Before open; unknown model; bad block ranges; more positions than allowed.
    assert_eq!(code(call(&mut ws, &hidden(1, 0, vec![0.5; dim])).await), LlmErrorCode::NotOpen);
    let mut other = open(2, 8);
    if let LlmFrame::Open { model, .. } = &mut other {
        *model = 1;
    }
    assert_eq!(code(call(&mut ws, &other).await), LlmErrorCode::UnknownModel);
    for (first, end) in [(4u16, 4u16), (10, 5), (0, 31)] {
        let f =
            LlmFrame::Open { id: 3, model: MODEL_SMOLLM2, first, end, positions: 8, head: None };
        assert_eq!(code(call(&mut ws, &f).await), LlmErrorCode::BadLayers, "{first}..{end}");
    }
    assert_eq!(code(call(&mut ws, &open(4, 65)).await), LlmErrorCode::KvBudget);
    // 64 positions of 26 blocks: 64 × 26 × 2 × 192 × 4 bytes = 2.4 MiB, over the 2 MiB budget.
    assert_eq!(code(call(&mut ws, &open(5, 64)).await), LlmErrorCode::KvBudget);
    assert!(matches!(call(&mut ws, &open(6, 16)).await, LlmFrame::Opened { positions: 16, .. }));
    // 16 positions take 16 × 26 × 1536 bytes = 0.61 MiB: three conversations fit in 2 MiB, a
    // fourth does not until one ends.
    let mut others = Vec::new();
    for i in 0..2 {
        let mut ws2 = connect(&srv).await;
        assert!(
            matches!(call(&mut ws2, &open(7, 16)).await, LlmFrame::Opened { .. }),
            "conversation {i}"
        );
        others.push(ws2);
    }
    let mut full = connect(&srv).await;
    assert_eq!(code(call(&mut full, &open(8, 16)).await), LlmErrorCode::KvBudget);
    drop(others.pop());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        matches!(call(&mut full, &open(9, 16)).await, LlmFrame::Opened { .. }),
        "a closed conversation's share is free again"
    );
    // Wrong width, NaN, a position that is not the next, garbage, a server frame sent by a client.
    let codec = HiddenCodec::F32;
    let f = LlmFrame::Hidden {
        id: 10,
        reply: false,
        position: 0,
        width: 7,
        codec,
        values: vec![0.0; 14],
    };
    assert_eq!(code(call(&mut ws, &f).await), LlmErrorCode::BadValues);
    // An encoding byte this server does not know; half floats past their range (infinity).
    let mut unknown = hidden(14, 0, vec![0.25; dim]).encode();
    unknown[7] = 0x7f;
    assert_eq!(code(call_bytes(&mut ws, unknown).await), LlmErrorCode::BadFrame);
    let huge = hidden_in(HiddenCodec::F16, 15, 0, vec![1e6; dim]);
    assert_eq!(code(call(&mut ws, &huge).await), LlmErrorCode::BadValues);
    let mut nan = vec![0.25; dim];
    nan[3] = f32::NAN;
    assert_eq!(code(call(&mut ws, &hidden(11, 0, nan)).await), LlmErrorCode::BadValues);
    assert_eq!(code(call(&mut ws, &hidden(12, 5, vec![0.25; dim])).await), LlmErrorCode::Position);
    assert_eq!(
        code(call_bytes(&mut ws, b"SPLM\x01\x00garbage".to_vec()).await),
        LlmErrorCode::BadFrame
    );
    let opened =
        LlmFrame::Opened { id: 13, first: 0, end: 1, positions: 1, width: 576, head: false };
    assert_eq!(code(call(&mut ws, &opened).await), LlmErrorCode::BadFrame);
    // More positions than reserved.
    assert_eq!(
        code(call(&mut ws, &hidden(14, 0, vec![0.25; dim * 17])).await),
        LlmErrorCode::KvBudget
    );
    // After all that, the conversation still runs, from position 0.
    let mut front = KvCache::new(&m.config, 0..FRONT, 16);
    let x = m.embed(&[1, 9690, 198]).unwrap();
    let back = through_server(&mut ws, HiddenCodec::F32, &mut front, 0, x, 15).await;
    assert_eq!(back.len(), dim, "three rows up, the last one back");
    assert!(back.iter().all(|v| v.is_finite()));
    let again =
        through_server(&mut ws, HiddenCodec::F32, &mut front, 3, m.embed(&[28]).unwrap(), 16).await;
    assert_eq!(again.len(), dim);
}

/// A conversation that does not fit the KV budget takes the cache of one idle past
/// `--llm-evict-after`: the idle one gets `evicted` and its socket closes; one idle for less is
/// not touched; the evicted client opens again once there is room and is served.
#[actix_web::test]
async fn an_idle_conversation_is_evicted_for_a_new_one() {
    let flags = ["--llm-positions", "64", "--llm-kv-mib", "1", "--llm-evict-after", "1"];
    let srv = common::server_and_state(&flags).0;
    let dim = model().config.dim;
    // 16 positions of 26 blocks: 0.61 MiB. One fits in 1 MiB, two do not.
    let mut idle = connect(&srv).await;
    assert!(matches!(call(&mut idle, &open(1, 16)).await, LlmFrame::Opened { .. }));
    // A frame that gets no reply (a stop with nothing under way) leaves it idle, not busy.
    idle.send(Message::Binary(LlmFrame::Stop { id: 9 }.encode().into())).await.unwrap();
    let mut newcomer = connect(&srv).await;
    assert_eq!(
        code(call(&mut newcomer, &open(2, 16)).await),
        LlmErrorCode::KvBudget,
        "not idle for a second yet"
    );
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(matches!(call(&mut newcomer, &open(3, 16)).await, LlmFrame::Opened { .. }));
    assert_eq!(code(next_frame(&mut idle).await), LlmErrorCode::Evicted);
    match common::next_message(&mut idle, Duration::from_secs(10)).await {
        Frame::Close(Some(r)) => assert_eq!(r.description.as_deref(), Some("evicted")),
        other => panic!("expected the evicted socket to close, got {other:?}"),
    }
    let reply = call(&mut newcomer, &hidden(4, 0, vec![0.1; dim])).await;
    assert!(matches!(reply, LlmFrame::Hidden { reply: true, .. }), "{reply:?}");
    // The evicted client comes back once the newcomer has gone, and is served.
    drop(newcomer);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut back = connect(&srv).await;
    assert!(matches!(call(&mut back, &open(5, 16)).await, LlmFrame::Opened { .. }));
    let reply = call(&mut back, &hidden(6, 0, vec![0.1; dim])).await;
    assert!(matches!(reply, LlmFrame::Hidden { reply: true, .. }), "{reply:?}");
}

#[actix_web::test]
async fn plain_split_and_cloud_only_answer_as_the_unsplit_model() {
    plain_split_and_cloud_only(&[]).await;
}

/// The same with every step run through the batching threads (`--llm-batch`): the server's
/// blocks, its head and its sampler in batches answer exactly as without them.
#[actix_web::test]
async fn batched_steps_answer_as_the_unsplit_model() {
    plain_split_and_cloud_only(&["--llm-batch"]).await;
}

/// And with the prompts run 8 rows a batch (38 rows: pieces of 8, 8, 8, 8 and 6), the decode
/// steps between them: the same tokens again.
#[actix_web::test]
async fn prompts_in_pieces_answer_as_the_unsplit_model() {
    plain_split_and_cloud_only(&["--llm-batch", "--llm-prefill-chunk", "8"]).await;
}

/// `--llm-q8`: the server decodes with 8-bit activations. Its cloud-only answer is the one
/// the same model with them on gives in this process, and (so the flag is seen to reach the
/// kernels) not the exact kernels' answer: on this prompt the two part after 10 tokens.
#[actix_web::test]
async fn eight_bit_activations_on_the_server_answer_as_the_same_model_here() {
    let srv = common::server_and_state(&["--llm-q8"]).0;
    let bytes = std::fs::read(split_paths::llm_file()).unwrap();
    let q8 = Smollm2::load(&bytes).unwrap().0.with_q8_activations(true);
    let golden = golden();
    let case = &golden["prompts"][1];
    let (prompt, exact) = (ids(&case["ids"]), ids(&case["greedy"]));
    let n = exact.len();
    let mut cache = KvCache::new(&q8.config, 0..q8.config.layers, prompt.len() + n);
    let mut next = argmax(&q8.forward(&prompt, &mut cache).unwrap());
    let mut want = Vec::new();
    while want.len() < n {
        want.push(next);
        next = argmax(&q8.forward(&[next], &mut cache).unwrap());
    }
    assert_ne!(want, exact, "8-bit activations gave the exact kernels' answer");
    let positions = (prompt.len() + n) as u32;
    let mut ws = connect(&srv).await;
    assert!(matches!(call(&mut ws, &open_head(1, 0, positions)).await, LlmFrame::Opened { .. }));
    let ask = LlmFrame::Tokens { id: 2, position: 0, generate: n as u32, tokens: prompt };
    ws.send(Message::Binary(ask.encode().into())).await.unwrap();
    let (tokens, _, _) = streamed(&mut ws, 2, positions - n as u32).await;
    assert_eq!(tokens, want);
}

async fn plain_split_and_cloud_only(server_args: &[&str]) {
    let srv = common::server_and_state(server_args).0;
    let m = model();
    let golden = golden();
    let case = &golden["prompts"][1];
    let (prompt, want) = (ids(&case["ids"]), ids(&case["greedy"]));
    let positions = (prompt.len() + want.len()) as u32;
    // Plain split: this side runs blocks 0..4, the server the rest and the head.
    let mut ws = connect(&srv).await;
    let opened = call(&mut ws, &open_head(1, FRONT as u16, positions)).await;
    assert!(matches!(opened, LlmFrame::Opened { head: true, .. }), "{opened:?}");
    let mut front = KvCache::new(&m.config, 0..FRONT, positions as usize);
    let (mut got, mut input, mut position) = (vec![], prompt.clone(), 0u32);
    while got.len() < want.len() {
        let mut x = m.embed(&input).unwrap();
        m.forward_layers(0..FRONT, &mut x, &mut front).unwrap();
        let id = 2 + got.len() as u64;
        position += input.len() as u32;
        match call(&mut ws, &hidden(id, position - input.len() as u32, x)).await {
            LlmFrame::Token { id: i, position: p, token } if (i, p) == (id, position) => {
                got.push(token);
                input = vec![token];
            }
            other => panic!("expected the next token, got {other:?}"),
        }
    }
    assert_eq!(got, want, "plain split");
    // Cloud-only: the prompt's ids in, the answer streamed.
    let mut ws = connect(&srv).await;
    assert!(matches!(call(&mut ws, &open_head(1, 0, positions)).await, LlmFrame::Opened { .. }));
    let ask = LlmFrame::Tokens { id: 2, position: 0, generate: want.len() as u32, tokens: prompt };
    ws.send(Message::Binary(ask.encode().into())).await.unwrap();
    let (tokens, generated, finish) = streamed(&mut ws, 2, positions - want.len() as u32).await;
    assert_eq!(tokens, want, "cloud-only");
    assert_eq!((generated, finish), (want.len() as u32, Finish::Count));
    // The cache holds every token but the last sent (the next frame starts with it); two more
    // do not fit.
    let last = *tokens.last().unwrap();
    let more =
        LlmFrame::Tokens { id: 3, position: positions - 1, generate: 1, tokens: vec![last, 28] };
    assert_eq!(code(call(&mut ws, &more).await), LlmErrorCode::KvBudget);
}

#[actix_web::test]
async fn a_generation_stops_when_asked_and_the_conversation_goes_on() {
    let srv = common::server_and_state(&[]).0;
    let golden = golden();
    let prompt = ids(&golden["prompts"][0]["ids"]);
    let n = prompt.len() as u32;
    let mut ws = connect(&srv).await;
    assert!(matches!(call(&mut ws, &open_head(1, 0, 512)).await, LlmFrame::Opened { .. }));
    // A stop with nothing under way gets no reply: the next reply is the generation's.
    ws.send(Message::Binary(LlmFrame::Stop { id: 2 }.encode().into())).await.unwrap();
    let ask = LlmFrame::Tokens { id: 3, position: 0, generate: 400, tokens: prompt.clone() };
    ws.send(Message::Binary(ask.encode().into())).await.unwrap();
    let first = next_frame(&mut ws).await;
    assert!(matches!(first, LlmFrame::Token { id: 3, .. }), "{first:?}");
    // While it streams: another frame is refused (the generation goes on), then stop.
    let x = hidden(4, n, vec![0.25; model().config.dim]);
    ws.send(Message::Binary(x.encode().into())).await.unwrap();
    ws.send(Message::Binary(LlmFrame::Stop { id: 5 }.encode().into())).await.unwrap();
    let (mut tokens, mut refused, mut end) = (1u32, vec![], None);
    while end.is_none() {
        match next_frame(&mut ws).await {
            LlmFrame::Token { id: 3, .. } => tokens += 1,
            LlmFrame::Error { id, code, .. } => refused.push((id, code)),
            LlmFrame::Done { id: 3, generated, finish } => end = Some((generated, finish)),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(refused, [(4, LlmErrorCode::Placement)]);
    let (generated, finish) = end.unwrap();
    assert_eq!((generated, finish), (tokens, Finish::Stopped));
    assert!(tokens < 40, "stopped after {tokens} tokens");
    // The conversation goes on from the last token sent (in no cache yet): a prefill with none
    // asked for, then one token.
    let next =
        LlmFrame::Tokens { id: 6, position: n + tokens - 1, generate: 0, tokens: vec![28, 29] };
    assert_eq!(
        call(&mut ws, &next).await,
        LlmFrame::Done { id: 6, generated: 0, finish: Finish::Count }
    );
    let one = LlmFrame::Tokens { id: 7, position: n + tokens + 1, generate: 1, tokens: vec![30] };
    ws.send(Message::Binary(one.encode().into())).await.unwrap();
    let (one, generated, finish) = streamed(&mut ws, 7, n + tokens + 2).await;
    assert_eq!((one.len(), generated, finish), (1, 1, Finish::Count));
}

#[actix_web::test]
async fn placements_refuse_the_frames_they_do_not_take() {
    let srv = common::server_and_state(&[]).0;
    let dim = model().config.dim;
    let mut ws = connect(&srv).await;
    // The head needs the last block; sampling values must make sense.
    let early = LlmFrame::Open {
        id: 1,
        model: MODEL_SMOLLM2,
        first: 0,
        end: 10,
        positions: 8,
        head: Some(HeadSampling::GREEDY),
    };
    assert_eq!(code(call(&mut ws, &early).await), LlmErrorCode::BadLayers);
    for (temperature, top_p) in [(f32::NAN, 0.9), (-1.0, 0.9), (0.7, 0.0), (0.7, 1.5)] {
        let head = Some(HeadSampling { temperature, top_p, seed: 1 });
        let f =
            LlmFrame::Open { id: 2, model: MODEL_SMOLLM2, first: 0, end: 30, positions: 8, head };
        assert_eq!(code(call(&mut ws, &f).await), LlmErrorCode::BadValues, "{temperature} {top_p}");
    }
    // Token ids to a U-split conversation (the server holds no embedding there).
    assert!(matches!(call(&mut ws, &open(3, 8)).await, LlmFrame::Opened { head: false, .. }));
    let tokens = LlmFrame::Tokens { id: 4, position: 0, generate: 1, tokens: vec![1] };
    assert_eq!(code(call(&mut ws, &tokens).await), LlmErrorCode::Placement);
    // Cloud-only: a token id past the vocabulary, no tokens, the wrong position.
    let mut ws = connect(&srv).await;
    assert!(matches!(call(&mut ws, &open_head(5, 0, 8)).await, LlmFrame::Opened { .. }));
    for (id, position, tokens, want) in [
        (6, 0, vec![1, 49_152], LlmErrorCode::BadValues),
        (7, 0, vec![], LlmErrorCode::BadValues),
        (8, 3, vec![1], LlmErrorCode::Position),
    ] {
        let f = LlmFrame::Tokens { id, position, generate: 1, tokens };
        assert_eq!(code(call(&mut ws, &f).await), want, "request {id}");
    }
    // Hidden states into a cloud-only conversation are taken (the client embedded them).
    let x = model().embed(&[1, 9690]).unwrap();
    assert_eq!(x.len(), 2 * dim);
    let reply = call(&mut ws, &hidden(9, 0, x)).await;
    assert!(matches!(reply, LlmFrame::Token { id: 9, position: 2, .. }), "{reply:?}");
}

#[actix_web::test]
async fn frames_over_the_rate_are_refused_then_served_again() {
    let srv = common::server_and_state(&["--rate-limit", "2"]).0;
    let mut ws = connect(&srv).await;
    let mut codes = Vec::new();
    for id in 0..6 {
        codes.push(match call(&mut ws, &open(id, 8)).await {
            LlmFrame::Opened { .. } => None,
            LlmFrame::Error { code, .. } => Some(code),
            other => panic!("{other:?}"),
        });
    }
    // Two at once are allowed (one opens the conversation, one finds it open); then refusals.
    assert_eq!(&codes[..2], &[None, Some(LlmErrorCode::NotOpen)]);
    assert!(codes[2..].contains(&Some(LlmErrorCode::RateLimited)), "{codes:?}");
    assert!(LlmErrorCode::RateLimited.is_transient());
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let m = model();
    let mut front = KvCache::new(&m.config, 0..FRONT, 8);
    let back =
        through_server(&mut ws, HiddenCodec::F32, &mut front, 0, m.embed(&[1]).unwrap(), 10).await;
    assert_eq!(back.len(), m.config.dim, "served again after a second");
}

/// `/llm/edge/{blocks}`: the share a browser runs, named in `/api/info`; a share of 4 blocks
/// loads with exactly those blocks; numbers past the model and non-numbers are refused.
#[actix_web::test]
async fn the_edge_share_is_served() {
    let srv = common::server_and_state(&[]).0;
    let client = awc::Client::default();
    let info: serde_json::Value =
        client.get(srv.url("/api/info")).send().await.unwrap().json().await.unwrap();
    let llm = &info["llm"];
    assert_eq!(llm["edge_url"], "/llm/edge/");
    assert_eq!(llm["file_id"].as_str().unwrap().len(), 16);
    let mut res = client.get(srv.url("/llm/edge/4")).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let share = res.body().limit(200 << 20).await.unwrap();
    let (edge, _) = Smollm2::load(&share).unwrap();
    assert_eq!(edge.blocks(), 0..FRONT);
    // The same again (from the server's kept shares).
    let again = client.get(srv.url("/llm/edge/4")).send().await.unwrap().body().limit(200 << 20);
    assert_eq!(again.await.unwrap(), share);
    // The tokenizer alone (cloud-only clients): the metadata, no weights.
    assert_eq!(llm["tokenizer_url"], "/llm/tokenizer");
    let mut res = client.get(srv.url("/llm/tokenizer")).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let file = res.body().limit(200 << 20).await.unwrap();
    let g = split_shared::container::Gguf::parse(&file).unwrap();
    assert!(g.tensors.is_empty() && file.len() < share.len() / 4, "{} bytes", file.len());
    let tokenizer = split_shared::models::smollm2::Tokenizer::from_gguf(&g).unwrap();
    assert_eq!(tokenizer.vocab(), model().config.vocab);
    // What the info says they weigh is what they weigh, and its costs are the planner's.
    assert_eq!(llm["share_bytes"][FRONT].as_u64(), Some(share.len() as u64));
    assert_eq!(llm["share_bytes"].as_array().unwrap().len(), 31);
    assert_eq!(llm["tokenizer_bytes"].as_u64(), Some(file.len() as u64));
    let costs: split_shared::plan::LlmSideCosts =
        serde_json::from_value(llm["costs"].clone()).unwrap();
    assert!(costs.block_token_ms > 0.0 && costs.head_ms > 0.0, "{costs:?}");
    assert!(Smollm2::load(&file).is_err(), "no weights in it");
    for bad in ["31", "abc", "-1"] {
        let mut res = client.get(srv.url(&format!("/llm/edge/{bad}"))).send().await.unwrap();
        assert_eq!(res.status(), 400, "{bad}");
        let body = res.body().await.unwrap();
        assert!(String::from_utf8_lossy(&body).contains("from 0 to 30"), "{bad}");
    }
}
