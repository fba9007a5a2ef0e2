//! A stateful model the runtime was never written for, defined here and nowhere else, runs split
//! through the runtime's member stage (`MemberStage`, what a device group's member serves with):
//! the asker keeps the embedding, the first block and the head, the stage the other blocks, and
//! the answer is the unsplit model's, token for token. The stage refuses what it would refuse
//! for SmolLM2, with the same codes. `docs/models.md` points here.

use std::ops::Range;
use std::sync::Arc;

use split_shared::codec::HiddenCodec;
use split_shared::protocol::{LlmErrorCode, LlmFrame};
use split_shared::runtime::{
    MemberStage, SequenceError, SequenceModel, SequenceSpec, SequenceState, SequenceStep,
    StageAction,
};

const WIDTH: usize = 4;
const VOCAB: usize = 7;
const BLOCKS: usize = 3;
/// Its model byte: any the process does not use for another.
const ID: u8 = 77;

/// Three blocks over rows of 4 values; block `b` adds to each row (doubled) the mean of a
/// fixed linear map of every row it has seen so far (its state: those maps, one per position),
/// then takes the sine. Positions see only the past, so a conversation decodes one row at a time.
struct Running {
    spec: SequenceSpec,
}

/// The maps each block has seen, per block of the range, one row per position.
struct Seen {
    blocks: Range<usize>,
    rows: Vec<Vec<[f32; WIDTH]>>,
    capacity: usize,
}

impl SequenceState for Seen {
    fn len(&self) -> usize {
        self.rows.first().map_or(0, Vec::len)
    }
    fn capacity(&self) -> usize {
        self.capacity
    }
    fn blocks(&self) -> Range<usize> {
        self.blocks.clone()
    }
    fn bytes(&self) -> usize {
        self.rows.iter().map(|r| r.len() * WIDTH * 4).sum()
    }
    fn truncate(&mut self, len: usize) {
        self.rows.iter_mut().for_each(|r| r.truncate(len));
    }
}

impl Running {
    fn new() -> Self {
        let spec = SequenceSpec {
            id: ID,
            name: "running-mean".into(),
            blocks: BLOCKS,
            width: WIDTH,
            vocab: VOCAB,
            context: 64,
            state_bytes_per_position: WIDTH * 4,
        };
        Self { spec }
    }

    fn map(block: usize, row: &[f32]) -> [f32; WIDTH] {
        std::array::from_fn(|o| {
            row.iter().enumerate().map(|(i, v)| v * (((o + 2 * i + block) % 5) as f32 - 2.0)).sum()
        })
    }

    /// One step alone: the checks, then the blocks row by row.
    fn step(&self, s: &mut SequenceStep<'_, Seen>) -> Result<(), SequenceError> {
        if s.blocks != s.state.blocks
            || s.blocks.end > BLOCKS
            || !s.hidden.len().is_multiple_of(WIDTH)
        {
            return Err(SequenceError::Shape(format!("blocks {:?} or rows", s.blocks)));
        }
        let rows = s.hidden.len() / WIDTH;
        if s.state.len() + rows > s.state.capacity {
            let needed = s.state.len() + rows;
            return Err(SequenceError::Context { needed, limit: s.state.capacity });
        }
        for row in s.hidden.chunks_exact_mut(WIDTH) {
            for (k, block) in s.blocks.clone().enumerate() {
                let seen = &mut s.state.rows[k];
                seen.push(Self::map(block, row));
                let n = seen.len() as f32;
                for (o, v) in row.iter_mut().enumerate() {
                    *v = (2.0 * *v + seen.iter().map(|m| m[o]).sum::<f32>() / n).sin();
                }
            }
        }
        Ok(())
    }
}

impl SequenceModel for Running {
    type State = Seen;

    fn sequence_spec(&self) -> &SequenceSpec {
        &self.spec
    }

    fn new_state(&self, blocks: Range<usize>, capacity: usize) -> Seen {
        let rows = blocks.clone().map(|_| Vec::new()).collect();
        Seen { blocks, rows, capacity: capacity.min(self.spec.context) }
    }

    fn embed(&self, tokens: &[u32]) -> Result<Vec<f32>, SequenceError> {
        let mut out = Vec::new();
        for &t in tokens {
            if t as usize >= VOCAB {
                return Err(SequenceError::Token { id: t, vocab: VOCAB });
            }
            out.extend((0..WIDTH).map(|i| ((t as usize * 3 + i) % VOCAB) as f32 / 3.0 - 1.0));
        }
        Ok(out)
    }

    fn forward_steps(
        &self,
        steps: &mut [SequenceStep<'_, Seen>],
    ) -> Vec<Result<(), SequenceError>> {
        steps.iter_mut().map(|s| self.step(s)).collect()
    }

    fn head_each(&self, hidden: &[f32]) -> Result<Vec<f32>, SequenceError> {
        let weight = |c: usize, i: usize| ((c * 5 + i * 3) % 7) as f32 - 3.0;
        Ok(hidden
            .chunks_exact(WIDTH)
            .flat_map(|row| {
                (0..VOCAB).map(move |c| row.iter().enumerate().map(|(i, v)| v * weight(c, i)).sum())
            })
            .collect())
    }
}

fn best(scores: &[f32]) -> u32 {
    (0..scores.len()).max_by(|&a, &b| scores[a].total_cmp(&scores[b]).then(b.cmp(&a))).unwrap()
        as u32
}

/// Greedy decoding of the whole model in one place.
fn whole(model: &Running, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut state = model.new_state(0..BLOCKS, 64);
    let mut input = prompt.to_vec();
    let mut out = Vec::new();
    for _ in 0..n {
        let mut rows = model.embed(&input).unwrap();
        model.forward_blocks(0..BLOCKS, &mut rows, &mut state).unwrap();
        let next = best(&model.head_each(&rows[rows.len() - WIDTH..]).unwrap());
        out.push(next);
        input = vec![next];
    }
    out
}

fn hidden(id: u64, position: u32, values: Vec<f32>) -> Vec<u8> {
    let width = WIDTH as u32;
    LlmFrame::Hidden { id, reply: false, position, width, codec: HiddenCodec::F32, values }.encode()
}

fn refused(action: StageAction) -> LlmErrorCode {
    match action {
        StageAction::Reply(LlmFrame::Error { code, .. }) => code,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn a_stateful_model_defined_in_a_test_runs_split_through_the_member_stage() {
    let model = Arc::new(Running::new());
    let prompt = [3, 1, 4, 1, 5];
    let expected = whole(&model, &prompt, 12);
    let kinds: std::collections::BTreeSet<u32> = expected.iter().copied().collect();
    assert!(kinds.len() >= 3, "a continuation worth comparing: {expected:?}");

    // The asker: embedding, block 0 and the head; the member: blocks 1..3, the last stage.
    let mut stage = MemberStage::new(model.clone(), 64);
    let open = LlmFrame::Open { id: 1, model: ID, first: 1, end: 3, positions: 64, head: None };
    match stage.handle(&open.encode(), None) {
        StageAction::Reply(LlmFrame::Opened { width, first: 1, end: 3, .. }) => {
            assert_eq!(width as usize, WIDTH);
        }
        other => panic!("expected opened, got {other:?}"),
    }
    let mut front = model.new_state(0..1, 64);
    let (mut input, mut position, mut got) = (prompt.to_vec(), 0u32, Vec::new());
    for id in 2..14 {
        let mut rows = model.embed(&input).unwrap();
        model.forward_blocks(0..1, &mut rows, &mut front).unwrap();
        let n = (rows.len() / WIDTH) as u32;
        let last = match stage.handle(&hidden(id, position, rows), None) {
            StageAction::Reply(LlmFrame::Hidden { reply: true, values, position: p, .. }) => {
                assert_eq!(p, position + n - 1, "the reply is the last position's row");
                values
            }
            other => panic!("expected the last row, got {other:?}"),
        };
        let next = best(&model.head_each(&last).unwrap());
        got.push(next);
        (input, position) = (vec![next], position + n);
    }
    assert_eq!(got, expected, "split through the stage, the unsplit model's tokens");

    // What the stage refuses for any model, with the codes it uses for SmolLM2; the
    // conversation goes on after each.
    let other = LlmFrame::Open { id: 20, model: 2, first: 1, end: 3, positions: 8, head: None };
    assert_eq!(refused(stage.handle(&other.encode(), None)), LlmErrorCode::UnknownModel);
    let past = LlmFrame::Open { id: 21, model: ID, first: 1, end: 4, positions: 8, head: None };
    assert_eq!(refused(stage.handle(&past.encode(), None)), LlmErrorCode::BadLayers);
    let narrow = LlmFrame::Hidden {
        id: 22,
        reply: false,
        position,
        width: 3,
        codec: HiddenCodec::F32,
        values: vec![0.0; 3],
    };
    assert_eq!(refused(stage.handle(&narrow.encode(), None)), LlmErrorCode::BadValues);
    assert_eq!(
        refused(stage.handle(&hidden(23, 0, vec![0.0; WIDTH]), None)),
        LlmErrorCode::Position
    );
    let nan = hidden(24, position, vec![f32::NAN; WIDTH]);
    assert_eq!(refused(stage.handle(&nan, None)), LlmErrorCode::BadValues);
    match stage.handle(&hidden(25, position, vec![0.1; WIDTH]), None) {
        StageAction::Reply(LlmFrame::Hidden { reply: true, .. }) => {}
        other => panic!("the conversation goes on after refusals, got {other:?}"),
    }
}

#[test]
fn a_stateful_models_batched_steps_equal_its_steps_alone() {
    // The contract the server's batching relies on, held by this model: several
    // conversations' steps in one call end as each would alone; a refused one changes nothing.
    let model = Running::new();
    let (a, b) = (model.embed(&[1, 2, 3]).unwrap(), model.embed(&[6, 0]).unwrap());
    let alone = |rows: &[f32]| {
        let mut s = model.new_state(0..BLOCKS, 8);
        let mut r = rows.to_vec();
        model.forward_blocks(0..BLOCKS, &mut r, &mut s).unwrap();
        (r, s.len())
    };
    let (mut ra, mut rb, mut rc) = (a.clone(), b.clone(), vec![0.0; WIDTH * 9]);
    let (mut sa, mut sb, mut sc) = (
        model.new_state(0..BLOCKS, 8),
        model.new_state(0..BLOCKS, 8),
        model.new_state(0..BLOCKS, 8),
    );
    let mut steps = [
        SequenceStep { blocks: 0..BLOCKS, hidden: &mut ra, state: &mut sa },
        SequenceStep { blocks: 0..BLOCKS, hidden: &mut rc, state: &mut sc },
        SequenceStep { blocks: 0..BLOCKS, hidden: &mut rb, state: &mut sb },
    ];
    let results = model.forward_steps(&mut steps);
    assert_eq!(results[1], Err(SequenceError::Context { needed: 9, limit: 8 }));
    assert!(results[0].is_ok() && results[2].is_ok());
    assert_eq!((ra, sa.len()), alone(&a));
    assert_eq!((rb, sb.len()), alone(&b));
    assert_eq!(sc.len(), 0, "the refused step holds nothing");
    assert_eq!(model.embed(&[9]), Err(SequenceError::Token { id: 9, vocab: VOCAB }));
}
