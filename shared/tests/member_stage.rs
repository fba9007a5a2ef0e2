//! A member's middle stage of a split chat (`MemberStage`): the asker's blocks 0..4, the
//! member's 4..12, the rest 12..30 (here, standing in for the server), and the greedy answer is
//! the independent reference's for the unsplit model; the member as the last stage (4..30)
//! likewise. Every refusal is the `/llm` error frame the server would send, and the
//! conversation goes on after it.

use std::sync::Arc;

use split_shared::codec::HiddenCodec;
use split_shared::models::smollm2::{KvCache, Smollm2, argmax};
use split_shared::protocol::{HeadSampling, LlmErrorCode, LlmFrame, MODEL_SMOLLM2};
use split_shared::runtime::{MemberStage, StageAction};

/// Blocks the asker keeps.
const FRONT: u16 = 4;

fn load() -> Arc<Smollm2> {
    let path = split_paths::llm_file();
    let bytes = std::fs::read(&path).unwrap_or_else(|e| {
        panic!("these tests need SmolLM2's GGUF file at {} (`./run.sh setup`): {e}", path.display())
    });
    Arc::new(Smollm2::load(&bytes).unwrap().0)
}

fn golden_case() -> (Vec<u32>, Vec<u32>) {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/smollm2_golden.json");
    let g: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let ids = |v: &serde_json::Value| -> Vec<u32> {
        v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
    };
    let case = &g["prompts"][0];
    (ids(&case["ids"]), ids(&case["greedy"]))
}

fn open(positions: u32) -> Vec<u8> {
    LlmFrame::Open { id: 1, model: MODEL_SMOLLM2, first: FRONT, end: 30, positions, head: None }
        .encode()
}

fn hidden(id: u64, position: u32, values: Vec<f32>) -> Vec<u8> {
    LlmFrame::Hidden { id, reply: false, position, width: 576, codec: HiddenCodec::F32, values }
        .encode()
}

fn refused(action: StageAction) -> LlmErrorCode {
    match action {
        StageAction::Reply(LlmFrame::Error { code, message, .. }) => {
            assert!(!message.is_empty());
            code
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// Greedy decoding with the member's stage between the asker's front and `rest` (the blocks
/// after the member's, run here as the server would; empty when the member is last).
fn answer(
    model: &Smollm2,
    stage: &mut MemberStage<Smollm2>,
    to: u16,
    prompt: &[u32],
    n: usize,
) -> Vec<u32> {
    let positions = (prompt.len() + n) as u32;
    let mut front = KvCache::new(&model.config, 0..usize::from(FRONT), positions as usize);
    let mut rest = KvCache::new(&model.config, usize::from(to)..30, positions as usize);
    match stage.handle(&open(positions), Some(to)) {
        StageAction::OpenUpstream { upstream, opened } if to < 30 => {
            assert!(
                matches!(upstream, LlmFrame::Open { first, end: 30, head: None, .. } if first == to)
            );
            assert!(matches!(opened, LlmFrame::Opened { first: FRONT, end: 30, .. }), "{opened:?}");
        }
        StageAction::Reply(opened) if to == 30 => {
            assert!(matches!(opened, LlmFrame::Opened { first: FRONT, end: 30, .. }), "{opened:?}");
        }
        other => panic!("open with to {to}: {other:?}"),
    }
    let (mut tokens, mut position, mut got) = (prompt.to_vec(), 0u32, Vec::new());
    while got.len() < n {
        let mut x = model.embed(&tokens).unwrap();
        model.forward_layers(0..usize::from(FRONT), &mut x, &mut front).unwrap();
        let rows = tokens.len() as u32;
        let last = match stage.handle(&hidden(2 + got.len() as u64, position, x), None) {
            StageAction::Forward(LlmFrame::Hidden { position: p, mut values, .. }) => {
                assert_eq!(p, position);
                assert_eq!(values.len(), rows as usize * 576, "every row goes on to the server");
                model.forward_layers(usize::from(to)..30, &mut values, &mut rest).unwrap();
                values[values.len() - 576..].to_vec()
            }
            StageAction::Reply(LlmFrame::Hidden { position: p, values, reply: true, .. }) => {
                assert_eq!(p, position + rows - 1, "the last position's row");
                values
            }
            other => panic!("{other:?}"),
        };
        let next = argmax(&model.logits(&last).unwrap());
        got.push(next);
        position += rows;
        tokens = vec![next];
    }
    got
}

#[test]
fn a_member_between_asker_and_server_answers_as_the_unsplit_model() {
    let model = load();
    let (prompt, want) = golden_case();
    let n = want.len().min(16);
    let mut stage = MemberStage::new(model.clone(), 256);
    assert_eq!(
        answer(&model, &mut stage, 12, &prompt, n),
        want[..n],
        "member 4..12, server 12..30"
    );
    assert_eq!(stage.blocks(), Some(4..12));
    // A second open replaces the conversation: the member as the last stage.
    assert_eq!(answer(&model, &mut stage, 30, &prompt, n), want[..n], "member 4..30");
    assert_eq!(stage.blocks(), Some(4..30));
}

#[test]
fn a_member_refuses_bad_frames_with_the_servers_codes_and_goes_on() {
    let model = load();
    let mut stage = MemberStage::new(model.clone(), 64);
    assert_eq!(refused(stage.handle(&hidden(1, 0, vec![0.5; 576]), None)), LlmErrorCode::NotOpen);
    assert_eq!(refused(stage.handle(b"SPLM not a frame", None)), LlmErrorCode::BadFrame);
    for to in [4, 31, 2] {
        assert_eq!(refused(stage.handle(&open(8,), Some(to))), LlmErrorCode::BadLayers, "to {to}");
    }
    assert_eq!(refused(stage.handle(&open(65), Some(12))), LlmErrorCode::KvBudget);
    let mut other = LlmFrame::decode(&open(8)).unwrap();
    if let LlmFrame::Open { model, .. } = &mut other {
        *model = 1;
    }
    assert_eq!(refused(stage.handle(&other.encode(), Some(12))), LlmErrorCode::UnknownModel);
    let head = LlmFrame::Open {
        id: 1,
        model: MODEL_SMOLLM2,
        first: FRONT,
        end: 30,
        positions: 8,
        head: Some(HeadSampling::GREEDY),
    };
    assert_eq!(refused(stage.handle(&head.encode(), Some(30))), LlmErrorCode::Placement);
    assert_eq!(stage.blocks(), None, "nothing opened by a refused open");

    assert!(matches!(stage.handle(&open(8), Some(12)), StageAction::OpenUpstream { .. }));
    let tokens = LlmFrame::Tokens { id: 3, position: 0, generate: 1, tokens: vec![1] };
    assert_eq!(refused(stage.handle(&tokens.encode(), None)), LlmErrorCode::Placement);
    assert_eq!(refused(stage.handle(&hidden(4, 0, vec![0.5; 575]), None)), LlmErrorCode::BadValues);
    let mut nan = vec![0.5; 576];
    nan[7] = f32::NAN;
    assert_eq!(refused(stage.handle(&hidden(5, 0, nan), None)), LlmErrorCode::BadValues);
    assert_eq!(refused(stage.handle(&hidden(6, 3, vec![0.5; 576]), None)), LlmErrorCode::Position);
    assert_eq!(
        refused(stage.handle(&hidden(7, 0, vec![0.5; 9 * 576]), None)),
        LlmErrorCode::KvBudget
    );
    let stop = LlmFrame::Stop { id: 8 };
    assert_eq!(stage.handle(&stop.encode(), None), StageAction::Nothing);
    // A reply, a refusal included, is never answered (two members would refuse each other's
    // refusals for ever).
    let refusal = LlmFrame::Error { id: 8, code: LlmErrorCode::BadFrame, message: "no".into() };
    assert_eq!(stage.handle(&refusal.encode(), None), StageAction::Nothing);
    // After all that, the conversation is where it was: position 0 goes on.
    let on = stage.handle(&hidden(9, 0, vec![0.5; 2 * 576]), None);
    assert!(
        matches!(on, StageAction::Forward(LlmFrame::Hidden { id: 9, position: 0, .. })),
        "{on:?}"
    );
    assert_eq!(refused(stage.handle(&hidden(10, 0, vec![0.5; 576]), None)), LlmErrorCode::Position);

    // A member on a share of the model (a browser's: blocks 0..8) takes stages inside it only.
    let bytes = std::fs::read(split_paths::llm_file()).unwrap();
    let share = split_shared::models::smollm2::edge_share(&bytes, 8).unwrap();
    let mut small = MemberStage::new(Arc::new(Smollm2::load(&share).unwrap().0), 64);
    assert_eq!(refused(small.handle(&open(8), Some(12))), LlmErrorCode::BadLayers);
    assert!(matches!(small.handle(&open(8), Some(8)), StageAction::OpenUpstream { .. }));
}
