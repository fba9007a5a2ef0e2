//! Splitting anywhere, and sending the features through a frame, changes nothing.

mod common;

use burn::tensor::{Device, Tensor};
use common::*;
use split_shared::codec::{Calibration, DecodeContext, EncodeContext, Setting};
use split_shared::image::to_input_tensor;
use split_shared::labels::top_k;
use split_shared::model::{Features, ModelError};
use split_shared::protocol::{FeaturesFrame, Request};
use split_shared::{Boundary, EfficientNetLite0, Error};

/// Activations through the wire format, as the browser sends them and the server reads them.
fn through_a_frame(
    features: &Features,
    setting: Setting,
    calibration: Option<&Calibration>,
) -> Features {
    let frame = features.to_frame(setting, EncodeContext::new(calibration)).unwrap();
    let bytes = Request::Features { id: 7, frame }.to_bytes();
    let Request::Features { id: 7, frame } = Request::decode(&bytes).unwrap() else {
        panic!("features frame")
    };
    Features::from_frame(&frame, DecodeContext::new(calibration)).unwrap()
}

#[test]
fn every_split_equals_the_full_forward_pass() {
    let device = Device::flex();
    let model = model(&device);
    let input = to_input_tensor(&fixture_image("chelsea"), &device);
    let full = values(model.forward(input.clone()).unwrap());
    let full_top1 = top_k(&full, 1)[0].class;
    for k in Boundary::all() {
        let edge = model.forward_range(input.clone(), Boundary::INPUT, k).unwrap();
        let edge = Features::from_tensor(k, edge).unwrap();
        let cloud = through_a_frame(&edge, Setting::F32, None);
        assert_eq!(cloud, edge, "f32 frames are lossless");
        let x = cloud.to_tensor(&device);
        let logits = values(model.forward_range(x, k, Boundary::LOGITS).unwrap());
        let diff = max_abs_diff(&logits, &full);
        assert!(diff <= 1e-5, "split at {k}: logits differ by {diff}");
        assert_eq!(top_k(&logits, 1)[0].class, full_top1, "split at {k}: top-1");
    }
}

/// A range taken one stage at a time (what the browser's edge does while it lets its event loop
/// turn) runs one step a stage and ends where one call does, bit for bit.
#[test]
fn stepping_through_the_stages_equals_one_call() {
    let device = Device::flex();
    let model = model(&device);
    let input = to_input_tensor(&fixture_image("chelsea"), &device);
    let block5 = Boundary::block(5).unwrap();
    let mut steps = model.steps(input.clone(), Boundary::INPUT, block5).unwrap();
    let mut stages = 0;
    while model.step(&mut steps) {
        stages += 1;
    }
    assert!(steps.done() && !model.step(&mut steps), "nothing runs past the end");
    assert_eq!(stages, usize::from(block5.index()));
    let once = model.forward_range(input.clone(), Boundary::INPUT, block5).unwrap();
    assert_eq!(values(steps.finish()), values(once));
    let none = model.steps(input.clone(), Boundary::INPUT, Boundary::INPUT).unwrap();
    assert!(none.done());
    assert_eq!(values(none.finish()), values(input), "an empty range returns its input");
    let err = model.steps(Tensor::<4>::zeros([1, 24, 56, 56], &device), Boundary::STEM, block5);
    assert!(
        matches!(err, Err(ModelError::ShapeMismatch { .. })),
        "checked as forward_range checks"
    );
}

/// A model loaded stage by stage from the per-stage shards (what the browser downloads) runs
/// exactly like the whole file, refuses a range through a stage it lacks, and completes once
/// the rest arrives; the shards together are the whole file, and an edge at block5 needs a
/// small part of it.
#[test]
fn a_model_loaded_from_shards_runs_as_far_as_its_stages() {
    use split_shared::container::TensorFile;
    use split_shared::model::{WEIGHTS_MAGIC, weight_shards};
    let device = Device::flex();
    let full_model = model(&device);
    let bytes = std::fs::read(split_paths::weights_file()).unwrap();
    let file = TensorFile::from_bytes(&bytes, WEIGHTS_MAGIC).unwrap();
    let shards: Vec<(Boundary, Vec<u8>)> =
        weight_shards(&file).into_iter().map(|(b, s)| (b, s.to_bytes(WEIGHTS_MAGIC))).collect();
    let block5 = Boundary::block(5).unwrap();
    let edge_bytes: usize = shards.iter().filter(|(b, _)| *b <= block5).map(|(_, s)| s.len()).sum();
    let all_bytes: usize = shards.iter().map(|(_, s)| s.len()).sum();
    assert!(all_bytes >= bytes.len() - 64 * 19, "the shards hold every tensor");
    assert!(edge_bytes * 10 < all_bytes, "block5's shards: {edge_bytes} of {all_bytes} bytes");

    let mut edge = EfficientNetLite0::empty();
    assert_eq!(edge.loaded_through(), Boundary::INPUT);
    for (b, shard) in shards.iter().filter(|(b, _)| *b <= block5) {
        edge.load_stage_bytes(*b, shard, &device).unwrap();
    }
    assert_eq!(edge.loaded_through(), block5);
    let input = to_input_tensor(&fixture_image("chelsea"), &device);
    let got = values(edge.forward_range(input.clone(), Boundary::INPUT, block5).unwrap());
    let want = values(full_model.forward_range(input.clone(), Boundary::INPUT, block5).unwrap());
    assert_eq!(got, want, "the same weights, the same activations");
    let err = edge.forward_range(input.clone(), Boundary::INPUT, Boundary::LOGITS).unwrap_err();
    assert!(
        matches!(err, ModelError::StageNotLoaded { stage, .. } if stage == Boundary::block(6).unwrap()),
        "{err}"
    );
    // A shard is not the stage next to it.
    let (_, stem) = &shards[0];
    let err = edge.load_stage_bytes(Boundary::block(6).unwrap(), stem, &device).unwrap_err();
    assert!(matches!(err, ModelError::BadWeights(_)), "{err}");
    for (b, shard) in shards.iter().filter(|(b, _)| *b > block5) {
        edge.load_stage_bytes(*b, shard, &device).unwrap();
    }
    assert_eq!(edge.loaded_through(), Boundary::LOGITS);
    let got = values(edge.forward(input.clone()).unwrap());
    assert_eq!(got, values(full_model.forward(input).unwrap()));
}

#[test]
fn wrong_shapes_and_backward_ranges_are_errors() {
    let device = Device::flex();
    let model = model(&device);
    let wrong = Tensor::<4>::zeros([1, 24, 56, 56], &device);
    let err = model.forward_range(wrong, Boundary::STEM, Boundary::LOGITS).unwrap_err();
    assert!(matches!(err, ModelError::ShapeMismatch { .. }), "{err}");
    let x = Tensor::<4>::zeros([1, 32, 112, 112], &device);
    let err = model.forward_range(x, Boundary::STEM, Boundary::INPUT).unwrap_err();
    assert!(matches!(err, ModelError::BackwardRange { .. }), "{err}");
    // A frame whose shape does not fit its boundary is refused when decoded, before any model.
    let frame = FeaturesFrame {
        boundary: Boundary::block(5).unwrap().index(),
        encoding: split_shared::protocol::Encoding::F32,
        shape: vec![1, 2, 1, 2],
        payload: vec![0; 16],
    };
    let err = Features::from_frame(&frame, DecodeContext::default()).unwrap_err();
    assert!(matches!(err, Error::Model(ModelError::ShapeMismatch { .. })), "{err}");
}

/// The real calibration, at every calibrated boundary: 8-bit keeps the top-1 of both bundled
/// fixtures, and every setting decodes to the right shape through the wire format.
#[test]
fn calibrated_codecs_keep_the_answer_at_every_boundary() {
    let calibration = Calibration::load(&split_paths::calibration_file())
        .unwrap_or_else(|e| panic!("{e}; run `./run.sh setup`"));
    let device = Device::flex();
    let model = model(&device);
    for name in ["chelsea", "coffee"] {
        let input = to_input_tensor(&fixture_image(name), &device);
        let full_top1 = top_k(&values(model.forward(input.clone()).unwrap()), 1)[0].class;
        for k in calibration.boundaries() {
            let k: Boundary = k.parse().unwrap();
            let edge = model.forward_range(input.clone(), Boundary::INPUT, k).unwrap();
            let edge = Features::from_tensor(k, edge).unwrap();
            for setting in ["q8", "q4", "q2-r8", "q6-packed"] {
                let setting: Setting = setting.parse().unwrap();
                let back = through_a_frame(&edge, setting, Some(&calibration));
                assert_eq!((back.boundary(), back.dims()), (k, edge.dims()));
                if setting.to_string() == "q8" {
                    let x = back.to_tensor(&device);
                    let logits = values(model.forward_range(x, k, Boundary::LOGITS).unwrap());
                    assert_eq!(top_k(&logits, 1)[0].class, full_top1, "{name} at {k}, q8");
                }
            }
        }
    }
}

/// The shipped calibration's trained bottleneck (`learned<bits>`, block5 today), at every depth
/// it has tables for: through the wire format, the rest of the network on the decoder's map
/// keeps the top-1 of both bundled fixtures.
#[test]
fn the_shipped_learned_coder_keeps_the_answer_of_the_bundled_photos() {
    let calibration = Calibration::load(&split_paths::calibration_file())
        .unwrap_or_else(|e| panic!("{e}; run `./run.sh setup`"));
    let learned: Vec<(Boundary, Vec<u8>)> = calibration
        .boundaries()
        .filter_map(|b| {
            let l = calibration.at(b)?.learned.as_ref()?;
            Some((b.parse().unwrap(), l.tables.keys().copied().collect()))
        })
        .collect();
    assert!(!learned.is_empty(), "the shipped calibration has a learned coder");
    let device = Device::flex();
    let model = model(&device);
    for name in ["chelsea", "coffee"] {
        let input = to_input_tensor(&fixture_image(name), &device);
        let full_top1 = top_k(&values(model.forward(input.clone()).unwrap()), 1)[0].class;
        for (k, depths) in &learned {
            let edge = model.forward_range(input.clone(), Boundary::INPUT, *k).unwrap();
            let edge = Features::from_tensor(*k, edge).unwrap();
            for bits in depths {
                let back = through_a_frame(&edge, Setting::Learned(*bits), Some(&calibration));
                assert_eq!((back.boundary(), back.dims()), (*k, edge.dims()));
                let logits = values(
                    model.forward_range(back.to_tensor(&device), *k, Boundary::LOGITS).unwrap(),
                );
                assert_eq!(top_k(&logits, 1)[0].class, full_top1, "{name} at {k}, learned{bits}");
            }
        }
    }
}

/// The same weights on a smaller input (the reduced-input light model): at 224 it is the
/// network's own forward pass, smaller it still sees a cat, and what is not a square image
/// of a size it runs is refused with a typed error.
#[test]
fn the_network_runs_on_a_smaller_input() {
    let device = Device::flex();
    let model = model(&device);
    let img = fixture_image("chelsea");
    let full = values(model.forward(to_input_tensor(&img, &device)).unwrap());
    let same = values(model.forward_at(to_input_tensor(&img, &device)).unwrap());
    assert_eq!(same, full, "at the full size it is the forward pass");
    let smaller = split_shared::image::resize_bicubic(&img, 144, 144);
    let small = values(model.forward_at(to_input_tensor(&smaller, &device)).unwrap());
    assert_ne!(small, full);
    // Tiger cat (282) at 224; at 144 Egyptian cat (285) first, the tiger cat among the five.
    let top1 = top_k(&full, 1)[0].class;
    assert!(top_k(&small, 5).iter().any(|c| c.class == top1), "{:?}", top_k(&small, 5));
    for dims in
        [[1, 3, 144, 128], [1, 3, 16, 16], [1, 3, 256, 256], [1, 4, 144, 144], [5, 3, 144, 144]]
    {
        let x = Tensor::<4>::zeros(dims, &device);
        assert!(
            matches!(model.forward_at(x), Err(ModelError::InputSize { .. })),
            "{dims:?} refused"
        );
    }
}
