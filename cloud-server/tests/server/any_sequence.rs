//! A stateful model the server was never written for, defined here and nowhere else, served on
//! `/llm` beside SmolLM2 through `AppState::host_sequence`, over a real socket: the U-shaped
//! split (this test keeps the embedding, block 0 and the head) and cloud-only (token ids in,
//! tokens streamed back) answer as the unsplit model does, token for token, with the steps
//! batched across conversations; refusals carry the same codes as SmolLM2's; `/api/info` lists
//! the model. `docs/models.md` points here.

use std::ops::Range;
use std::sync::Arc;

use awc::ws::Message;
use futures_util::SinkExt;
use split_shared::codec::HiddenCodec;
use split_shared::protocol::{Finish, HeadSampling, LlmErrorCode, LlmFrame};
use split_shared::runtime::{
    SequenceError, SequenceModel, SequenceSpec, SequenceState, SequenceStep,
};

use crate::common;
use crate::llm::{call, code, connect, streamed};

const WIDTH: usize = 3;
const VOCAB: usize = 6;
const BLOCKS: usize = 4;
const CONTEXT: usize = 32;
/// Its model byte: one the server does not use for another model.
const ID: u8 = 91;

/// Four blocks over rows of three values. Block `b` mixes each row with the mean of the rows
/// it has seen in this conversation (its state), rotated by one and weighted by `b + 1`, then
/// takes `tanh`; the head scores each token with a fixed ±3 matrix.
struct Mixer {
    spec: SequenceSpec,
}

/// What a range of blocks has seen: one row per position, block after block, the range's
/// blocks interleaved (`[position][block][WIDTH]`).
struct Seen {
    first: usize,
    count: usize,
    values: Vec<f32>,
    capacity: usize,
}

impl Seen {
    /// The mean of what block `k` of the range has seen, once `row` is added.
    fn see(&mut self, k: usize, row: &[f32]) -> [f32; WIDTH] {
        self.values.extend_from_slice(row);
        let stride = self.count * WIDTH;
        let seen = self.values.len() / stride + usize::from(k + 1 < self.count);
        std::array::from_fn(|i| {
            let at = |p: usize| self.values[p * stride + k * WIDTH + i];
            (0..seen).map(at).sum::<f32>() / seen as f32
        })
    }
}

impl SequenceState for Seen {
    fn len(&self) -> usize {
        self.values.len() / (self.count.max(1) * WIDTH)
    }
    fn capacity(&self) -> usize {
        self.capacity
    }
    fn blocks(&self) -> Range<usize> {
        self.first..self.first + self.count
    }
    fn bytes(&self) -> usize {
        self.values.len() * 4
    }
    fn truncate(&mut self, len: usize) {
        self.values.truncate(len * self.count * WIDTH);
    }
}

impl Mixer {
    fn new() -> Self {
        let spec = SequenceSpec {
            id: ID,
            name: "mixer".into(),
            blocks: BLOCKS,
            width: WIDTH,
            vocab: VOCAB,
            context: CONTEXT,
            state_bytes_per_position: WIDTH * 4,
        };
        Self { spec }
    }

    /// One step alone: the checks (nothing changes when one fails), then row by row.
    fn step(&self, s: &mut SequenceStep<'_, Seen>) -> Result<(), SequenceError> {
        let rows = s.hidden.len() / WIDTH;
        if s.blocks != s.state.blocks()
            || s.blocks.end > BLOCKS
            || rows == 0
            || !s.hidden.len().is_multiple_of(WIDTH)
            || s.hidden.iter().any(|v| !v.is_finite())
        {
            return Err(SequenceError::Shape(format!("blocks {:?} or rows", s.blocks)));
        }
        if s.state.len() + rows > s.state.capacity {
            let (needed, limit) = (s.state.len() + rows, s.state.capacity);
            return Err(SequenceError::Context { needed, limit });
        }
        for row in s.hidden.chunks_exact_mut(WIDTH) {
            for (k, block) in s.blocks.clone().enumerate() {
                let mean = s.state.see(k, row);
                let weight = (block + 1) as f32 * 0.7;
                for i in 0..WIDTH {
                    row[i] = (row[i] + weight * mean[(i + 1) % WIDTH]).tanh();
                }
            }
        }
        Ok(())
    }
}

impl SequenceModel for Mixer {
    type State = Seen;

    fn sequence_spec(&self) -> &SequenceSpec {
        &self.spec
    }

    fn new_state(&self, blocks: Range<usize>, capacity: usize) -> Seen {
        let (first, count) = (blocks.start, blocks.len());
        Seen { first, count, values: Vec::new(), capacity: capacity.min(CONTEXT) }
    }

    fn embed(&self, tokens: &[u32]) -> Result<Vec<f32>, SequenceError> {
        let mut rows = Vec::with_capacity(tokens.len() * WIDTH);
        for &t in tokens {
            if t as usize >= VOCAB {
                return Err(SequenceError::Token { id: t, vocab: VOCAB });
            }
            let t = t as f32;
            rows.extend([t.cos(), (1.3 * t).sin(), t / VOCAB as f32 - 0.5]);
        }
        Ok(rows)
    }

    fn forward_steps(
        &self,
        steps: &mut [SequenceStep<'_, Seen>],
    ) -> Vec<Result<(), SequenceError>> {
        steps.iter_mut().map(|s| self.step(s)).collect()
    }

    fn head_each(&self, hidden: &[f32]) -> Result<Vec<f32>, SequenceError> {
        if hidden.is_empty() || !hidden.len().is_multiple_of(WIDTH) {
            return Err(SequenceError::Shape(format!("{} values", hidden.len())));
        }
        let weight = |v: usize, i: usize| ((v * 3 + i * 5) % 7) as f32 - 3.0;
        Ok(hidden
            .chunks_exact(WIDTH)
            .flat_map(|row| {
                (0..VOCAB).map(move |v| row.iter().enumerate().map(|(i, x)| x * weight(v, i)).sum())
            })
            .collect())
    }
}

fn argmax(scores: &[f32]) -> u32 {
    let best = scores.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).unwrap().0;
    best as u32
}

/// The unsplit model's greedy answer of `count` tokens to `prompt`, here.
fn unsplit(m: &Mixer, prompt: &[u32], count: usize) -> Vec<u32> {
    let mut state = m.new_state(0..BLOCKS, CONTEXT);
    let mut rows = m.embed(prompt).unwrap();
    let mut answer = Vec::new();
    while answer.len() < count {
        m.forward_blocks(0..BLOCKS, &mut rows, &mut state).unwrap();
        let token = argmax(&m.head_each(&rows[rows.len() - WIDTH..]).unwrap());
        answer.push(token);
        rows = m.embed(&[token]).unwrap();
    }
    answer
}

fn hidden(id: u64, position: u32, values: Vec<f32>) -> LlmFrame {
    let (width, codec) = (WIDTH as u32, HiddenCodec::F32);
    LlmFrame::Hidden { id, reply: false, position, width, codec, values }
}

const PROMPT: [u32; 4] = [1, 4, 2, 3];
const ANSWER: usize = 12;

/// With this model hosted beside SmolLM2 (when `./run.sh setup` fetched it), steps batched;
/// a second model of the same id or name is refused.
fn server() -> actix_test::TestServer {
    let mut state = common::state(&["--llm-batch"]);
    state.host_sequence(Arc::new(Mixer::new()), Some(5)).expect("its id and name are free");
    let again = state.host_sequence(Arc::new(Mixer::new()), None).unwrap_err();
    assert!(again.to_string().contains("hosted already"), "{again}");
    common::serve(state)
}

#[actix_web::test]
async fn a_model_of_its_own_runs_split_and_cloud_only_on_llm() {
    let srv = server();
    let m = Mixer::new();
    let want = unsplit(&m, &PROMPT, ANSWER);

    // U-split: block 0 and the head here, blocks 1..4 on the server.
    let mut ws = connect(&srv).await;
    let open = LlmFrame::Open {
        id: 1,
        model: ID,
        first: 1,
        end: BLOCKS as u16,
        positions: 20,
        head: None,
    };
    match call(&mut ws, &open).await {
        LlmFrame::Opened { first: 1, end: 4, positions: 20, width: 3, head: false, .. } => {}
        other => panic!("expected the conversation open, got {other:?}"),
    }
    let mut front = m.new_state(0..1, CONTEXT);
    let mut rows = m.embed(&PROMPT).unwrap();
    let (mut position, mut got) = (0u32, Vec::new());
    while got.len() < ANSWER {
        m.forward_blocks(0..1, &mut rows, &mut front).unwrap();
        let sent = (rows.len() / WIDTH) as u32;
        let back = match call(&mut ws, &hidden(2 + got.len() as u64, position, rows)).await {
            LlmFrame::Hidden { reply: true, position: p, values, .. } => {
                assert_eq!(p, position + sent - 1, "the last row's position");
                values
            }
            other => panic!("expected hidden states, got {other:?}"),
        };
        position += sent;
        let token = argmax(&m.head_each(&back).unwrap());
        got.push(token);
        rows = m.embed(&[token]).unwrap();
    }
    assert_eq!(got, want, "the U-split answers as the unsplit model");

    // Cloud-only on another socket: token ids in, the answer streamed.
    let mut cloud = connect(&srv).await;
    let head = Some(HeadSampling::GREEDY);
    let open =
        LlmFrame::Open { id: 1, model: ID, first: 0, end: BLOCKS as u16, positions: 20, head };
    assert!(matches!(call(&mut cloud, &open).await, LlmFrame::Opened { head: true, .. }));
    let ask =
        LlmFrame::Tokens { id: 7, position: 0, generate: ANSWER as u32, tokens: PROMPT.to_vec() };
    cloud.send(Message::Binary(ask.encode().into())).await.unwrap();
    let (tokens, generated, finish) = streamed(&mut cloud, 7, PROMPT.len() as u32).await;
    // The answer ends at the end token (5) this server was told of, or at the count.
    let until_end = want.iter().position(|&t| t == 5).map_or(ANSWER, |i| i + 1);
    assert_eq!(tokens, want[..until_end], "cloud-only answers as the unsplit model");
    assert_eq!(generated as usize, until_end);
    let expected = if until_end < ANSWER { Finish::EndToken } else { Finish::Count };
    assert_eq!(finish, expected);

    // The split conversation is still served after the other's generation.
    m.forward_blocks(0..1, &mut rows, &mut front).unwrap();
    assert!(matches!(
        call(&mut ws, &hidden(40, position, rows)).await,
        LlmFrame::Hidden { reply: true, .. }
    ));
}

#[actix_web::test]
async fn its_refusals_carry_the_codes_smollm2s_do() {
    let srv = server();
    let mut ws = connect(&srv).await;
    let open = |id, first, end, positions| LlmFrame::Open {
        id,
        model: ID,
        first,
        end,
        positions,
        head: None,
    };
    // Another model byte: the refusal names what is hosted.
    let unknown = LlmFrame::Open { id: 1, model: 200, first: 1, end: 4, positions: 8, head: None };
    match call(&mut ws, &unknown).await {
        LlmFrame::Error { code: LlmErrorCode::UnknownModel, message, .. } => {
            assert!(message.contains("91 (mixer)"), "{message}");
        }
        other => panic!("expected unknown_model, got {other:?}"),
    }
    assert_eq!(code(call(&mut ws, &open(2, 1, 5, 8)).await), LlmErrorCode::BadLayers);
    // Past the model's context (32), whatever the server's --llm-positions.
    assert_eq!(code(call(&mut ws, &open(3, 1, 4, 33)).await), LlmErrorCode::KvBudget);
    assert!(matches!(call(&mut ws, &open(4, 1, 4, 8)).await, LlmFrame::Opened { .. }));
    let rows = |n: usize| vec![0.25f32; n * WIDTH];
    let narrow = LlmFrame::Hidden {
        id: 5,
        reply: false,
        position: 0,
        width: 2,
        codec: HiddenCodec::F32,
        values: vec![0.0; 4],
    };
    assert_eq!(code(call(&mut ws, &narrow).await), LlmErrorCode::BadValues);
    let mut nan = rows(1);
    nan[1] = f32::NAN;
    assert_eq!(code(call(&mut ws, &hidden(6, 0, nan)).await), LlmErrorCode::BadValues);
    assert_eq!(code(call(&mut ws, &hidden(7, 3, rows(1))).await), LlmErrorCode::Position);
    assert_eq!(code(call(&mut ws, &hidden(8, 0, rows(9))).await), LlmErrorCode::KvBudget);
    let ids = LlmFrame::Tokens { id: 9, position: 0, generate: 1, tokens: vec![1] };
    assert_eq!(code(call(&mut ws, &ids).await), LlmErrorCode::Placement);
    // Nothing refused reached the cache: position 0 still goes next.
    assert!(matches!(
        call(&mut ws, &hidden(10, 0, rows(8))).await,
        LlmFrame::Hidden { position: 7, .. }
    ));
    // A token past its vocabulary, cloud-only: the server's embedding refuses it.
    let mut cloud = connect(&srv).await;
    let head = Some(HeadSampling::GREEDY);
    let open = LlmFrame::Open { id: 1, model: ID, first: 0, end: 4, positions: 8, head };
    assert!(matches!(call(&mut cloud, &open).await, LlmFrame::Opened { .. }));
    let past = LlmFrame::Tokens { id: 2, position: 0, generate: 1, tokens: vec![VOCAB as u32] };
    assert_eq!(code(call(&mut cloud, &past).await), LlmErrorCode::BadValues);
}

#[actix_web::test]
async fn api_info_lists_it() {
    let srv = server();
    let mut response = awc::Client::new().get(srv.url("/api/info")).send().await.unwrap();
    let info: serde_json::Value = response.json().limit(1 << 20).await.unwrap();
    let models = info["sequence_models"].as_array().expect("sequence_models");
    let mixer = models.iter().find(|m| m["name"] == "mixer").expect("the test's model");
    assert_eq!(mixer["id"], ID);
    assert_eq!((mixer["blocks"].as_u64(), mixer["width"].as_u64()), (Some(4), Some(3)));
    assert_eq!(mixer["max_positions"], CONTEXT as u64, "its context caps the server's");
    if info.get("llm").is_some() {
        assert_eq!(models[0]["name"], info["llm"]["model"], "SmolLM2 first");
    }
}
