use futures_executor::block_on;
use split_shared::codec::DecodeContext;
use split_shared::protocol::{Request, ServerTimings};

use super::*;

fn runner() -> EdgeRunner {
    let path = split_paths::weights_file();
    let bytes = std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run `./run.sh setup`", path.display()));
    let runner = EdgeRunner::new(&bytes, Device::flex()).expect("valid weights");
    let path = split_paths::calibration_file();
    let calibration = std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run `cargo xtask setup`", path.display()));
    runner.set_calibration(&calibration).expect("valid calibration");
    runner
}

fn photo() -> Vec<u8> {
    std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../web/samples/chelsea.png")).unwrap()
}

fn opts(split: &str, setting: &str, stream: bool) -> RunOptions {
    RunOptions {
        split: split.parse().unwrap(),
        setting: setting.parse().unwrap(),
        stream,
        noise: None,
    }
}

/// What the server would answer for a features frame.
fn cloud(runner: &EdgeRunner, frame: &[u8]) -> Vec<Prediction> {
    let Request::Features { frame, .. } = Request::decode(frame).unwrap() else {
        panic!("a features frame")
    };
    let features =
        runner.with_calibration(|c| Features::from_frame(&frame, DecodeContext::new(c))).unwrap();
    let from = features.boundary();
    let x = features.to_tensor(&runner.device);
    let logits = runner.model.borrow().forward_range(x, from, Boundary::LOGITS).unwrap();
    top_k(&logits.into_data().try_to_vec::<f32>().unwrap(), TOP_K)
}

#[test]
fn edge_only_f32_and_coded_splits_agree_on_a_bundled_photo() {
    let runner = runner();
    let local = block_on(runner.run(&photo(), opts("logits", "f32", false), 1)).unwrap();
    let EdgeOutput::Local { top, reduced: false } = local else {
        panic!("edge-only must answer locally")
    };
    assert!((281..=285).contains(&top[0].class), "chelsea is a cat, got {}", top[0].class);
    let mut sizes = Vec::new();
    for setting in ["f32", "q8", "q4", "q2-r16"] {
        let out = block_on(runner.run(&photo(), opts("block5", setting, false), 2)).unwrap();
        let EdgeOutput::Remote { frame, delta: false } = out else { panic!("{setting}: {out:?}") };
        assert_eq!(cloud(&runner, &frame)[0].class, top[0].class, "{setting}");
        sizes.push(frame.len());
    }
    assert!(sizes.windows(2).all(|w| w[1] < w[0]), "fewer bits, fewer bytes: {sizes:?}");
}

#[test]
fn a_paused_run_pauses_between_stages_and_answers_the_same() {
    use std::cell::Cell;
    use std::rc::Rc;
    let runner = runner();
    runner.set_cache_entries(0);
    let plain = block_on(runner.run(&photo(), opts("block5", "f32", false), 1)).unwrap();
    let pauses = Rc::new(Cell::new(0));
    let counted = Rc::clone(&pauses);
    runner.set_pause(Some(Box::new(move || {
        counted.set(counted.get() + 1);
        Box::pin(async {})
    })));
    let paused = block_on(runner.run(&photo(), opts("block5", "f32", false), 1)).unwrap();
    let block5: Boundary = "block5".parse().unwrap();
    assert_eq!(pauses.get(), usize::from(block5.index()) - 1, "a pause between stages");
    assert_eq!(paused, plain, "the same frame, byte for byte");
    runner.set_pause(None);
    block_on(runner.run(&photo(), opts("logits", "f32", false), 2)).unwrap();
    assert_eq!(pauses.get(), usize::from(block5.index()) - 1, "no pause once unset");
}

#[test]
fn repeated_content_is_answered_from_the_cache() {
    let runner = runner();
    let o = opts("block11", "q4", false);
    let EdgeOutput::Remote { frame, .. } = block_on(runner.run(&photo(), o, 7)).unwrap() else {
        panic!()
    };
    // No reply yet: the repeat must be computed and sent again.
    assert!(matches!(block_on(runner.run(&photo(), o, 8)).unwrap(), EdgeOutput::Remote { .. }));
    let top = cloud(&runner, &frame);
    let reply = Reply::Result {
        id: 7,
        from: o.split.index(),
        top: top.clone(),
        timings: ServerTimings::default(),
        load: Default::default(),
    };
    runner.accept_reply(&reply.to_bytes()).unwrap();
    assert_eq!(block_on(runner.run(&photo(), o, 9)).unwrap(), EdgeOutput::Cached { top });
    // Other options or other content are not served from that entry.
    assert!(matches!(
        block_on(runner.run(&photo(), opts("block11", "q3", false), 10)).unwrap(),
        EdgeOutput::Remote { .. }
    ));
    let mut other = photo();
    let last = other.len() - 20;
    other[last] ^= 1;
    assert!(!matches!(block_on(runner.run(&other, o, 11)), Ok(EdgeOutput::Cached { .. })));
}

#[test]
fn streams_send_deltas_until_the_server_asks_for_a_keyframe() {
    let runner = runner();
    let img = split_shared::image::preprocess(&photo()).unwrap();
    let o = opts("block8", "q4", true);
    let kinds: Vec<bool> = (0..3)
        .map(|i| match block_on(runner.run_pixels(&img, o, i)).unwrap() {
            EdgeOutput::Remote { delta, .. } => delta,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(kinds, vec![false, true, true]);
    let refusal = Reply::error(3, ErrorCode::KeyframeRequired, "lost frame");
    runner.accept_reply(&refusal.to_bytes()).unwrap();
    let EdgeOutput::Remote { delta, .. } = block_on(runner.run_pixels(&img, o, 4)).unwrap() else {
        panic!()
    };
    assert!(!delta, "a keyframe after keyframe_required");
}

#[test]
fn bad_input_is_a_typed_error() {
    let runner = runner();
    let err = block_on(runner.run(b"GIF89a", opts("stem", "f32", false), 1)).unwrap_err();
    assert!(matches!(err, split_shared::Error::ImageDecode(_)), "{err}");
    let err = runner.set_calibration(b"SPLC and nothing else").unwrap_err();
    assert!(matches!(err, split_shared::Error::Codec(_)), "{err}");
    assert!(runner.accept_reply(b"not a reply").is_err());
}

/// An edge that loaded only the stages up to its split runs that split, says what it lacks for
/// a deeper one, and runs everything once the rest is loaded; warm-up and the profile cover
/// what is loaded.
#[test]
fn an_edge_with_some_stages_runs_up_to_them() {
    let bytes = std::fs::read(split_paths::weights_file()).unwrap();
    let edge = EdgeRunner::empty(Device::flex());
    block_on(edge.warm_up()).expect("nothing to warm up");
    let block5: Boundary = "block5".parse().unwrap();
    for b in Boundary::all().skip(1).take_while(|b| *b <= block5) {
        edge.load_stage(b, &bytes).unwrap(); // the whole file holds every shard
    }
    assert_eq!(edge.loaded_through(), block5);
    block_on(edge.warm_up()).unwrap();
    let profile = block_on(edge.profile(1, || 0.0)).unwrap();
    assert_eq!(profile.len(), usize::from(block5.index()) + 1, "input..=block5");
    let out = block_on(edge.run(&photo(), opts("block5", "f32", false), 1)).unwrap();
    assert!(matches!(out, EdgeOutput::Remote { .. }));
    let Err(err) = block_on(edge.run(&photo(), opts("logits", "f32", false), 2)) else {
        panic!("edge-only without the deeper stages")
    };
    assert!(err.to_string().contains("block6"), "{err}");
    for b in Boundary::all().filter(|b| *b > block5) {
        if b != Boundary::POOL {
            edge.load_stage(b, &bytes).unwrap();
        }
    }
    let EdgeOutput::Local { top, reduced: false } =
        block_on(edge.run(&photo(), opts("logits", "f32", false), 3)).unwrap()
    else {
        panic!("edge-only once every stage is loaded")
    };
    assert_eq!(top[0].class, 282, "tiger cat");
}

/// Calibration parts accumulate: a block5 part codes block5 but not block11 until block11's
/// part is added, and the frames decode with the whole calibration (the server's).
#[test]
fn calibration_parts_accumulate() {
    let bytes = std::fs::read(split_paths::weights_file()).unwrap();
    let whole = Calibration::load(&split_paths::calibration_file()).unwrap();
    let edge = EdgeRunner::new(&bytes, Device::flex()).unwrap();
    let (b5, b11) = ("block5", "block11");
    assert_eq!(edge.add_calibration(&whole.part(b5).unwrap()).unwrap(), whole.id());
    let EdgeOutput::Remote { frame, .. } =
        block_on(edge.run(&photo(), opts("block5", "q6", false), 1)).unwrap()
    else {
        panic!("a frame")
    };
    let Request::Features { frame, .. } = Request::decode(&frame).unwrap() else { panic!() };
    Features::from_frame(&frame, DecodeContext::new(Some(&whole)))
        .expect("the server's calibration decodes it");
    assert!(block_on(edge.run(&photo(), opts("block11", "q6", false), 2)).is_err());
    edge.add_calibration(&whole.part(b11).unwrap()).unwrap();
    assert!(block_on(edge.run(&photo(), opts("block11", "q6", false), 3)).is_ok());
}

/// An edge with its own stages in full and the light model after them answers edge-only and
/// finishes its split's frames with `reduced` set, never from or into the cache; a full shard
/// replaces a light stage, a light shard never replaces a full one.
#[test]
fn the_light_model_answers_reduced_until_the_full_stages_arrive() {
    let weights = split_shared::model::read_weights(&split_paths::weights_file()).unwrap();
    let whole = std::fs::read(split_paths::weights_file()).unwrap();
    let calibration = std::fs::read(split_paths::calibration_file()).unwrap();
    let edge = EdgeRunner::empty(Device::flex());
    edge.set_calibration(&calibration).unwrap();
    let block5: Boundary = "block5".parse().unwrap();
    let light = split_shared::model::light_shards(&weights, split_shared::model::DEFAULT_LIGHT);
    for (b, _) in &light {
        if *b <= block5 {
            edge.load_stage(*b, &whole).unwrap();
        }
    }
    for (b, bytes) in &light {
        assert_eq!(edge.load_light_stage(*b, bytes).unwrap(), *b > block5, "{b}");
    }
    assert_eq!(edge.loaded_through(), block5, "light stages are not the full weights");
    assert_eq!(edge.reachable_through(), Boundary::LOGITS);

    let EdgeOutput::Remote { frame, .. } =
        block_on(edge.run(&photo(), opts("block5", "q6", false), 1)).unwrap()
    else {
        panic!("a frame")
    };
    let Request::Features { frame, .. } = Request::decode(&frame).unwrap() else { panic!() };
    let answer = block_on(edge.finish_locally(&frame)).unwrap();
    assert_eq!((answer.top[0].class, answer.reduced, answer.from), (282, true, block5));
    for id in [2, 3] {
        let out = block_on(edge.run(&photo(), opts("logits", "f32", false), id)).unwrap();
        assert!(matches!(out, EdgeOutput::Local { reduced: true, .. }), "never cached: {out:?}");
    }
    // The light shard is damaged: refused, and the stage stays what it was.
    let (b11, light11) = light.iter().find(|(b, _)| b.name() == "block11").unwrap();
    assert!(edge.load_light_stage(*b11, &light11[..light11.len() - 3]).is_err());
    for b in Boundary::all().filter(|b| *b > block5 && *b != Boundary::POOL) {
        edge.load_stage(b, &whole).unwrap();
    }
    assert_eq!(edge.loaded_through(), Boundary::LOGITS);
    assert!(!edge.load_light_stage(*b11, light11).unwrap(), "a full stage stays full");
    let answer = block_on(edge.finish_locally(&frame)).unwrap();
    assert_eq!((answer.top[0].class, answer.reduced), (282, false));
}

/// Noise on the features: the frame changes with the seed (and not without one), the answer
/// stays a cat at a small scale, and an unknown kind is refused before anything runs.
#[test]
fn noise_changes_the_frame_not_the_answer() {
    let runner = runner();
    runner.set_cache_entries(0);
    let noisy = |seed| RunOptions {
        noise: Some(("gauss:0.02".parse().unwrap(), seed)),
        ..opts("block5", "q6", false)
    };
    let frame = |o| match block_on(runner.run(&photo(), o, 1)).unwrap() {
        EdgeOutput::Remote { frame, .. } => frame,
        other => panic!("{other:?}"),
    };
    let (clean, a, b, a_again) =
        (frame(opts("block5", "q6", false)), frame(noisy(1)), frame(noisy(2)), frame(noisy(1)));
    assert_ne!(clean, a, "noise changes the features");
    assert_ne!(a, b, "another seed, another draw");
    assert_eq!(a, a_again, "the same seed, the same draw");
    assert!((281..=285).contains(&cloud(&runner, &a)[0].class), "still a cat");
    assert!("gauss:0".parse::<Noise>().is_err());
}

fn clock() -> f64 {
    0.0
}

/// A device group's three-device pipeline on one runner standing in for each device: stage 1
/// codes block5, stage 2 runs on to block11 and codes again, stage 3 answers; the answer is
/// the unsplit model's, and relayed images and junk are answered as the server would.
#[test]
fn pipeline_stages_and_relayed_requests_answer_like_the_server() {
    let runner = runner();
    let local = block_on(runner.run(&photo(), opts("logits", "f32", false), 1)).unwrap();
    let EdgeOutput::Local { top: unsplit, .. } = local else { panic!("local") };
    let out = block_on(runner.run(&photo(), opts("block5", "s14", false), 7)).unwrap();
    let EdgeOutput::Remote { frame, .. } = out else { panic!("a frame") };
    let Request::Features { frame: first, .. } = Request::decode(&frame).unwrap() else {
        panic!("features")
    };
    let block11: Boundary = "block11".parse().unwrap();
    let second =
        block_on(runner.continue_features(&first, block11, "s14".parse().unwrap())).unwrap();
    assert_eq!(second.boundary, block11.index());
    let request = Request::Features { id: 7, frame: second }.to_bytes();
    let reply = Reply::decode(&block_on(runner.answer_request(&request, clock))).unwrap();
    let Reply::Result { id, from, top, .. } = reply else { panic!("{reply:?}") };
    assert_eq!((id, from, top[0].class), (7, block11.index(), unsplit[0].class));

    let image = Request::Image { id: 8, payload: photo() }.to_bytes();
    let reply = Reply::decode(&block_on(runner.answer_request(&image, clock))).unwrap();
    assert!(
        matches!(&reply, Reply::Result { id: 8, from: 0, top, .. } if top[0].class == unsplit[0].class)
    );
    let junk = Reply::decode(&block_on(runner.answer_request(b"SPLT", clock))).unwrap();
    assert!(matches!(junk, Reply::Error { code: ErrorCode::Malformed, .. }), "{junk:?}");
    let bad = Request::Image { id: 9, payload: vec![1, 2, 3] }.to_bytes();
    let bad = Reply::decode(&block_on(runner.answer_request(&bad, clock))).unwrap();
    assert!(matches!(bad, Reply::Error { id: 9, code: ErrorCode::BadImage, .. }), "{bad:?}");
    // A stage may not run backwards.
    let stem: Boundary = "stem".parse().unwrap();
    assert!(block_on(runner.continue_features(&first, stem, "f32".parse().unwrap())).is_err());
}

fn clock_ms() -> f64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed().as_secs_f64() * 1e3
}

#[test]
fn a_timed_run_says_how_much_of_it_the_stages_took() {
    let runner = runner();
    let t = clock_ms();
    let (out, stages_ms) =
        block_on(runner.run_timed(&photo(), opts("block5", "q6", false), 1, clock_ms)).unwrap();
    let whole_ms = clock_ms() - t;
    // The photo's decoding and the features' coding are the rest.
    assert!(stages_ms > 0.0 && stages_ms < whole_ms, "{stages_ms} of {whole_ms} ms");
    let plain = block_on(runner.run(&photo(), opts("block5", "q6", false), 1)).unwrap();
    assert_eq!(out, plain, "timing changes nothing of the output");
    let (first, stages_ms) =
        block_on(runner.run_timed(&photo(), opts("logits", "f32", false), 2, clock_ms)).unwrap();
    assert!(matches!(first, EdgeOutput::Local { .. }) && stages_ms > 0.0);
    let (cached, stages_ms) =
        block_on(runner.run_timed(&photo(), opts("logits", "f32", false), 3, clock_ms)).unwrap();
    assert!(matches!(cached, EdgeOutput::Cached { .. }) && stages_ms == 0.0, "{cached:?}");
}

/// The reduced-input answer: at 224 it is the whole network's answer; smaller, it is reduced
/// and cheaper, with the full weights or the light model's; a size out of range or a missing
/// stage is a typed error before anything runs.
#[test]
fn a_smaller_input_answers_reduced_from_full_or_light_stages() {
    let runner = runner();
    let EdgeOutput::Local { top, .. } =
        block_on(runner.run(&photo(), opts("logits", "f32", false), 1)).unwrap()
    else {
        panic!("edge-only answers here")
    };
    let (same, _) =
        block_on(runner.answer_at(&photo(), ImageSource::Photo, 224, clock_ms)).unwrap();
    assert_eq!(
        (same.top.clone(), same.reduced, same.from, same.input_size),
        (top, false, Boundary::INPUT, 224)
    );
    let (small, stages_ms) =
        block_on(runner.answer_at(&photo(), ImageSource::Photo, 128, clock_ms)).unwrap();
    assert!(small.reduced && small.input_size == 128 && stages_ms > 0.0, "{small:?}");
    assert!((281..=285).contains(&small.top[0].class), "still a cat at 128: {:?}", small.top);

    let weights = split_shared::model::read_weights(&split_paths::weights_file()).unwrap();
    let light = EdgeRunner::empty(Device::flex());
    let shards = split_shared::model::light_shards(&weights, split_shared::model::DEFAULT_LIGHT);
    for (b, bytes) in &shards[..shards.len() - 1] {
        light.load_light_stage(*b, bytes).unwrap();
    }
    let missing =
        block_on(light.answer_at(&photo(), ImageSource::Photo, 128, clock_ms)).unwrap_err();
    assert!(
        matches!(missing, split_shared::Error::Model(ModelError::StageNotLoaded { .. })),
        "{missing}"
    );
    let (b, bytes) = shards.last().unwrap();
    light.load_light_stage(*b, bytes).unwrap();
    let (int8, _) = block_on(light.answer_at(&photo(), ImageSource::Photo, 128, clock_ms)).unwrap();
    assert!(int8.reduced && (281..=285).contains(&int8.top[0].class), "{int8:?}");
    let (int8_full_size, _) =
        block_on(light.answer_at(&photo(), ImageSource::Photo, 224, clock_ms)).unwrap();
    assert!(int8_full_size.reduced, "the light model's answer is reduced at any size");

    for size in [0, 31, 225, usize::MAX] {
        let err =
            block_on(runner.answer_at(&photo(), ImageSource::Photo, size, clock_ms)).unwrap_err();
        assert!(
            matches!(err, split_shared::Error::Model(ModelError::InputSize { .. })),
            "{size}: {err}"
        );
    }
}

/// A model input (the 224x224 upload a cloud-only request makes) is the network's input as it
/// is: answered as the server reads it, not cropped a second time as a photo would be.
#[test]
fn a_model_input_is_answered_without_a_second_crop() {
    let runner = runner();
    let pixels = split_shared::image::preprocess(&photo()).unwrap();
    let input = split_shared::image::encode_jpeg(&pixels, 90).unwrap();
    let decoded = split_shared::image::decode_input(&input).unwrap();
    let EdgeOutput::Local { top, .. } =
        block_on(runner.run_pixels(&decoded, opts("logits", "f32", false), 1)).unwrap()
    else {
        panic!("edge-only answers here")
    };
    let (as_input, _) =
        block_on(runner.answer_at(&input, ImageSource::ModelInput, 224, clock_ms)).unwrap();
    assert_eq!((as_input.top.clone(), as_input.reduced), (top.clone(), false));
    // Read as a photo, the same bytes lose their border to a second crop: another answer.
    let (as_photo, _) =
        block_on(runner.answer_at(&input, ImageSource::Photo, 224, clock_ms)).unwrap();
    assert_ne!(as_photo.top, top);
    let (small, _) =
        block_on(runner.answer_at(&input, ImageSource::ModelInput, 128, clock_ms)).unwrap();
    assert!(small.reduced && small.input_size == 128, "{small:?}");
    assert!((281..=285).contains(&small.top[0].class), "still a cat at 128: {:?}", small.top);
    // A photo is no model input: refused as the server refuses it.
    let err =
        block_on(runner.answer_at(&photo(), ImageSource::ModelInput, 128, clock_ms)).unwrap_err();
    assert!(matches!(err, split_shared::Error::ImageDecode(_)), "{err}");
}
