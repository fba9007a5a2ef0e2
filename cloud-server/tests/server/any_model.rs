//! A model the server was never written for, defined here and nowhere else, runs split
//! through the real server over a real WebSocket: the runtime's contract
//! ([`split_shared::runtime::SplitModel`]) is all it takes. `docs/models.md` walks through
//! this file.

use std::sync::Arc;
use std::time::Duration;

use awc::ws::{Frame, Message};
use futures_util::SinkExt;
use split_shared::codec::fit::fit_table;
use split_shared::codec::{
    AllocTable, BoundaryTables, Calibration, EncodeContext, SUPPORTED_BITS, Setting,
};
use split_shared::labels::{Prediction, TOP_K, top_k};
use split_shared::plan::{Conditions, Constraints, CostTable, Placement, plan};
use split_shared::protocol::{
    Encoding, ErrorCode, FeaturesFrame, MODEL_EFFICIENTNET_LITE0, Reply, Request, peek_model,
};
use split_shared::runtime::{
    Activations, BoundarySpec, ModelSpec, ProfileSetup, RuntimeError, SplitModel, encode_frame,
    encode_plain,
};

use crate::common::{self, Socket};

/// The tiny model's id on the wire: any byte no other hosted model uses.
const TINY: u8 = 42;
/// The id of the same network hosted with a codec calibration of its own.
const TINY_CODED: u8 = 43;

/// A two-layer perceptron over 6 inputs: `input [6]` → `hidden [4]` (affine, ReLU) →
/// `scores [3]` (affine). Its weights are a fixed pattern, so both halves hold the same model.
struct Tiny {
    spec: ModelSpec,
}

impl Tiny {
    fn new() -> Self {
        Self::named(TINY, "tiny-mlp")
    }

    /// The same network under another id and name.
    fn named(id: u8, name: &str) -> Self {
        // Parameters: 6×4 + 4 floats up to `hidden`, 4×3 + 3 more up to `scores`.
        let boundaries = vec![
            BoundarySpec::new("input", &[6]),
            BoundarySpec::new("hidden", &[4]).with_param_bytes(28 * 4),
            BoundarySpec::new("scores", &[3]).with_param_bytes(43 * 4),
        ];
        Self { spec: ModelSpec::new(id, name, boundaries, 4).unwrap() }
    }

    /// Weight `(o, i)` of the layer ending at boundary `layer`, and its bias for `o`.
    fn weight(layer: u8, o: usize, i: usize) -> f32 {
        ((o * 7 + i * 3 + usize::from(layer)) % 11) as f32 / 5.0 - 1.0
    }

    fn bias(layer: u8, o: usize) -> f32 {
        (o as f32 - 1.5) / 4.0 + f32::from(layer) / 10.0
    }

    /// The layer ending at boundary `layer`, on one item.
    fn layer(&self, layer: u8, x: &[f32]) -> Vec<f32> {
        let out = self.spec.boundaries[usize::from(layer)].len();
        (0..out)
            .map(|o| {
                let y =
                    x.iter().enumerate().map(|(i, v)| Self::weight(layer, o, i) * v).sum::<f32>()
                        + Self::bias(layer, o);
                if layer == 1 { y.max(0.0) } else { y }
            })
            .collect()
    }
}

impl SplitModel for Tiny {
    fn spec(&self) -> &ModelSpec {
        &self.spec
    }

    fn forward_range(&self, x: Activations, to: u8) -> split_shared::Result<Activations> {
        let from = x.boundary();
        self.spec.boundary(to)?;
        if to < from {
            Err(RuntimeError::BackwardRange { model: self.spec.name.clone(), from, to })?;
        }
        let mut items: Vec<Vec<f32>> = x.items().map(<[f32]>::to_vec).collect();
        for layer in from + 1..=to {
            items = items.iter().map(|item| self.layer(layer, item)).collect();
        }
        let mut dims = vec![items.len()];
        dims.extend_from_slice(&self.spec.boundaries[usize::from(to)].shape);
        Ok(Activations::new(&self.spec, to, &dims, items.concat())?)
    }
}

/// The tiny model's input for one example.
fn input(tiny: &Tiny, seed: f32) -> Activations {
    let values = (0..6).map(|i| ((i as f32 + seed) * 0.7).sin()).collect();
    Activations::new(&tiny.spec, 0, &[1, 6], values).unwrap()
}

/// A features frame of `x`, f32, addressed to the tiny model.
fn frame(id: u64, x: &Activations) -> Vec<u8> {
    let frame = FeaturesFrame {
        boundary: x.boundary(),
        encoding: Encoding::F32,
        shape: x.dims().iter().map(|d| *d as u32).collect(),
        payload: x.values().iter().flat_map(|v| v.to_le_bytes()).collect(),
    };
    Request::Features { id, frame }.to_bytes_for(TINY)
}

/// Send `frame`; the reply, and the model byte its header carries.
async fn call(ws: &mut Socket, frame: Vec<u8>) -> (Reply, Option<u8>) {
    ws.send(Message::Binary(frame.into())).await.unwrap();
    match common::next_message(ws, Duration::from_secs(60)).await {
        Frame::Binary(b) => (Reply::decode(&b).expect("reply decodes"), peek_model(&b)),
        other => panic!("expected a binary reply, got {other:?}"),
    }
}

fn top(reply: &Reply) -> (u8, Vec<Prediction>) {
    match reply {
        Reply::Result { from, top, .. } => (*from, top.clone()),
        other => panic!("expected a result, got {other:?}"),
    }
}

fn error_code(reply: &Reply) -> ErrorCode {
    match reply {
        Reply::Error { code, .. } => *code,
        other => panic!("expected an error, got {other:?}"),
    }
}

/// The tiny model's cost table, measured here on 200 inputs (enough for the planner's default
/// accuracy floor: 200 of 200 agreeing bound agreement at 98.1%).
fn profiled(tiny: &Tiny) -> CostTable {
    let start = std::time::Instant::now();
    let clock = move || start.elapsed().as_secs_f64() * 1e3;
    let inputs: Vec<Activations> = (0..200).map(|i| input(tiny, i as f32 * 0.37)).collect();
    let setup = ProfileSetup { command: "any_model.rs".into(), ..ProfileSetup::default() };
    setup.measure(tiny, &inputs, &clock).unwrap()
}

#[actix_web::test]
async fn a_model_defined_in_a_test_runs_split_through_the_real_server() {
    let mut state = common::state(&[]);
    let tiny = Tiny::new();
    let table = profiled(&tiny);
    // A table of another model is refused, and nothing is hosted.
    let lite0_table =
        CostTable::from_json(include_str!("../../../profiles/cost-table.json")).unwrap();
    let refused = state.host_with_cost_table(Arc::new(Tiny::new()), &lite0_table);
    assert!(matches!(refused, Err(RuntimeError::BadSpec(_))), "{refused:?}");
    state.host_with_cost_table(Arc::new(Tiny::new()), &table).expect("a free id and name");
    // The same model twice, by id or by name, is refused before any worker starts.
    assert!(matches!(state.host(Arc::new(Tiny::new())), Err(RuntimeError::Duplicate { .. })));
    let srv = common::serve(state.clone());
    let mut ws = common::connect(&srv, "/ws", 64 * 1024).await;

    for (id, seed) in [(1u64, 0.0f32), (2, 1.5), (3, -4.0)] {
        let x = input(&tiny, seed);
        let whole = tiny.forward_range(x.clone(), 2).unwrap();
        let expected = top_k(whole.values(), TOP_K);
        // Split after the hidden layer: the edge runs layer 1, the server layer 2.
        let hidden = tiny.forward_range(x.clone(), 1).unwrap();
        let (reply, model) = call(&mut ws, frame(id, &hidden)).await;
        assert_eq!(model, Some(TINY), "the reply answers for the model addressed");
        assert_eq!(reply.id(), id);
        // The server's half is the same arithmetic on the same values: equal to the bit.
        assert_eq!(top(&reply), (1, expected.clone()));
        // Cloud-only: the input itself, at boundary 0.
        let (reply, _) = call(&mut ws, frame(id + 10, &x)).await;
        assert_eq!(top(&reply), (0, expected.clone()));
        // The calibration-free codec: 8 bits a value in its own range, the same best class.
        let ranged = encode_plain(&hidden, Some(8)).unwrap();
        assert!(ranged.payload.len() < hidden.values().len() * 4, "smaller than f32");
        let ranged = Request::Features { id: id + 20, frame: ranged }.to_bytes_for(TINY);
        let (reply, _) = call(&mut ws, ranged).await;
        let (from, got) = top(&reply);
        assert_eq!((from, got[0].class), (1, expected[0].class));
        assert!((got[0].prob - expected[0].prob).abs() < 0.02, "{got:?} vs {expected:?}");
    }

    // What the tiny model refuses, each with its code, on the same socket.
    let good = tiny.forward_range(input(&tiny, 2.0), 1).unwrap();
    let mut wrong_shape = Request::decode(&frame(20, &good)).unwrap();
    if let Request::Features { frame, .. } = &mut wrong_shape {
        frame.shape = vec![1, 2, 2];
    }
    let (reply, _) = call(&mut ws, wrong_shape.to_bytes_for(TINY)).await;
    assert_eq!(error_code(&reply), ErrorCode::ShapeMismatch);
    let mut past_the_end = frame(21, &good);
    past_the_end[16] = 3; // the boundary index: the tiny model has 0..3
    let (reply, _) = call(&mut ws, past_the_end).await;
    assert_eq!(error_code(&reply), ErrorCode::Malformed);
    let image = Request::Image { id: 22, payload: b"\x89PNG".to_vec() }.to_bytes_for(TINY);
    let (reply, _) = call(&mut ws, image).await;
    assert_eq!(error_code(&reply), ErrorCode::Malformed, "it takes no images");
    let two = Activations::stack(vec![good.clone(), good.clone()]).unwrap();
    let (reply, _) = call(&mut ws, frame(23, &two)).await;
    assert_eq!(error_code(&reply), ErrorCode::ShapeMismatch, "one item per frame");
    let mut nobody = frame(24, &good);
    nobody[7] = 77;
    let (reply, model) = call(&mut ws, nobody).await;
    assert_eq!((error_code(&reply), model), (ErrorCode::UnknownModel, Some(77)));

    // EfficientNet-Lite0 is still served on the same socket, by its own byte, and takes the
    // calibration-free codec too: block5's activations at 8 bits, a cat.
    let photo = include_bytes!("../../../web/samples/chelsea.png").to_vec();
    let (reply, model) =
        call(&mut ws, Request::Image { id: 30, payload: photo.clone() }.to_bytes()).await;
    assert_eq!(model, Some(MODEL_EFFICIENTNET_LITE0));
    assert_eq!(top(&reply).1[0].class, 282);
    let lite0 = state.engine().model().clone();
    let x = lite0.image_input(&photo, false).unwrap();
    let block5 = lite0.forward_range(x, lite0.spec().index_of("block5").unwrap()).unwrap();
    let frame = encode_plain(&block5, Some(8)).unwrap();
    assert!(frame.payload.len() * 3 < block5.values().len() * 4, "under a third of f32");
    let frame = Request::Features { id: 31, frame };
    let (reply, _) = call(&mut ws, frame.to_bytes()).await;
    assert_eq!((top(&reply).0, top(&reply).1[0].class), (7, 282));

    // `/api/info` lists both, with their boundaries; `/metrics` counts the tiny model's own.
    let mut info = srv.get("/api/info").send().await.unwrap();
    let info: serde_json::Value = info.json().limit(1 << 20).await.unwrap();
    let names: Vec<&str> =
        info["models"].as_array().unwrap().iter().map(|m| m["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["efficientnet-lite0", "tiny-mlp"]);
    let listed = &info["models"][1];
    assert_eq!(listed["id"], TINY);
    assert_eq!(
        (&listed["default_codec"], &listed["cost_table_url"]),
        (&"f32".into(), &"/api/models/tiny-mlp/cost-table".into())
    );
    assert_eq!(info["models"][0]["default_codec"], info["default_codec"]);
    assert_eq!(info["models"][0]["cost_table_url"], "/api/cost-table");
    assert_eq!(
        listed["boundaries"][1],
        serde_json::json!({ "name": "hidden", "shape": [4], "param_bytes": 112 })
    );
    assert_eq!(info["models"][0]["boundaries"].as_array().unwrap().len(), 21);
    let mut metrics = srv.get("/metrics").send().await.unwrap();
    let metrics = String::from_utf8(metrics.body().await.unwrap().to_vec()).unwrap();
    assert!(metrics.contains("from=\"tiny-mlp/hidden\""), "{metrics}");

    // The tiny model's cost table, from where `/api/info` says, plans its split.
    let text = body(&srv, listed["cost_table_url"].as_str().unwrap()).await;
    let served = CostTable::from_json(&text).unwrap();
    served.check_spec(tiny.spec()).unwrap();
    assert_eq!(text, serde_json::to_string_pretty(&table).unwrap());
    plans_and_runs_the_tiny_model(&served, &tiny, &mut ws).await;
    let lite0 = body(&srv, "/api/models/efficientnet-lite0/cost-table").await;
    assert_eq!(lite0, body(&srv, "/api/cost-table").await);
    let mut missing = srv.get("/api/models/nobody/cost-table").send().await.unwrap();
    assert_eq!(missing.status(), 404);
    let why = missing.body().await.unwrap();
    assert_eq!(&why[..], b"no model nobody on this server");
}

async fn body(srv: &actix_test::TestServer, path: &str) -> String {
    let mut r = srv.get(path).send().await.unwrap();
    assert!(r.status().is_success(), "{path}: {}", r.status());
    String::from_utf8(r.body().limit(1 << 20).await.unwrap().to_vec()).unwrap()
}

/// The planner over the tiny model's table: no link keeps it whole on the edge; a fast link to
/// a far faster server, with the input kept private, splits it after `hidden`, and that split,
/// sent in the codec chosen, gets the unsplit answer's class.
async fn plans_and_runs_the_tiny_model(table: &CostTable, tiny: &Tiny, ws: &mut Socket) {
    let profile = "native-flex";
    let offline = Conditions { uplink_bytes_per_ms: 0.0, ..Conditions::default() };
    let best = &plan(table, profile, &offline, &Constraints::default()).unwrap()[0];
    assert_eq!(best.placement, Placement::EdgeOnly);
    let slow_edge = Conditions { rtt_ms: 0.0, edge_factor: 1e6, ..Conditions::default() };
    let private = Constraints { privacy_floor: 1, ..Constraints::default() };
    let best = &plan(table, profile, &slow_edge, &private).unwrap()[0];
    let Placement::Split { boundary, codec } = &best.placement else {
        panic!("expected a split, got {best:?}")
    };
    assert_eq!(boundary, "hidden");
    let bits = match codec {
        Setting::F32 => None,
        Setting::Ranged(bits) => Some(*bits),
        other => panic!("a calibrated codec for a model without one: {other}"),
    };
    for (id, seed) in [(40u64, 0.11f32), (41, 2.9)] {
        let x = input(tiny, seed);
        let expected = top_k(tiny.forward_range(x.clone(), 2).unwrap().values(), TOP_K);
        let at = tiny.forward_range(x, tiny.spec().index_of(boundary).unwrap()).unwrap();
        let frame = encode_plain(&at, bits).unwrap();
        let (reply, _) = call(ws, Request::Features { id, frame }.to_bytes_for(TINY)).await;
        assert_eq!(top(&reply).1[0].class, expected[0].class, "{codec} at {boundary}");
    }
}

/// The tiny network with a codec: its calibration's tables at `hidden`, by that name, fitted
/// here on the hidden activations of 200 inputs (the codec knows no model: any model's
/// activations code under tables made for its boundaries).
struct Coded {
    tiny: Tiny,
    calibration: Calibration,
}

impl SplitModel for Coded {
    fn spec(&self) -> &ModelSpec {
        &self.tiny.spec
    }

    fn forward_range(&self, x: Activations, to: u8) -> split_shared::Result<Activations> {
        self.tiny.forward_range(x, to)
    }

    fn calibration(&self) -> Option<&Calibration> {
        Some(&self.calibration)
    }
}

/// Tables at the boundary named `at` from the hidden activations of `n` inputs: clip ranges
/// and symbol counts at every bit depth, and each channel's mean and spread for the `s<level>`
/// settings (every channel weighing the same).
fn calibrate(tiny: &Tiny, at: &str, n: u32) -> Calibration {
    let hidden: Vec<Activations> =
        (0..n).map(|i| tiny.forward_range(input(tiny, i as f32 * 0.37), 1).unwrap()).collect();
    let per_channel: Vec<Vec<f32>> =
        (0..4).map(|c| hidden.iter().map(|h| h.values()[c]).collect()).collect();
    let mut tables = BoundaryTables::default();
    for bits in SUPPORTED_BITS {
        tables.raw.insert(bits, fit_table(bits, &per_channel).unwrap());
    }
    let mean = |v: &Vec<f32>| v.iter().sum::<f32>() / v.len() as f32;
    let center: Vec<f32> = per_channel.iter().map(mean).collect();
    let spread = per_channel
        .iter()
        .zip(&center)
        .map(|(v, m)| (v.iter().map(|x| (x - m).powi(2)).sum::<f32>() / v.len() as f32).sqrt())
        .collect();
    tables.alloc = Some(AllocTable::new(center, spread, vec![1.0; 4]).unwrap());
    Calibration::new(n, [(at, tables)])
}

#[actix_web::test]
async fn a_model_brings_its_own_codec_calibration() {
    let mut state = common::state(&[]);
    // Tables at a boundary the model does not have are refused when it is hosted.
    let wrong = Coded {
        tiny: Tiny::named(TINY_CODED, "tiny-coded"),
        calibration: calibrate(&Tiny::new(), "middle", 50),
    };
    let refused = state.host(Arc::new(wrong));
    assert!(
        matches!(&refused, Err(RuntimeError::BadSpec(why)) if why.contains("middle")),
        "{refused:?}"
    );
    let coded = Coded {
        tiny: Tiny::named(TINY_CODED, "tiny-coded"),
        calibration: calibrate(&Tiny::new(), "hidden", 200),
    };
    let calibration = coded.calibration.clone();
    let spec = coded.tiny.spec.clone();
    state.host(Arc::new(coded)).expect("its calibration fits its spec");
    state.host(Arc::new(Tiny::new())).expect("the plain one beside it");
    let srv = common::serve(state.clone());
    let mut ws = common::connect(&srv, "/ws", 64 * 1024).await;

    let tiny = Tiny::new();
    for (id, seed) in [(1u64, 0.4f32), (2, 2.2), (3, -3.1)] {
        let x = input(&tiny, seed);
        let expected = top_k(tiny.forward_range(x.clone(), 2).unwrap().values(), TOP_K);
        let hidden = tiny.forward_range(x, 1).unwrap();
        let hidden = Activations::new(&spec, 1, hidden.dims(), hidden.values().to_vec()).unwrap();
        for (k, setting) in ["q8", "q4-packed", "s14"].into_iter().enumerate() {
            let setting: Setting = setting.parse().unwrap();
            let ctx = EncodeContext::new(Some(&calibration));
            let frame = encode_frame(&spec, &hidden, setting, ctx).unwrap();
            assert!(matches!(
                frame.encoding,
                Encoding::Coded(_) | Encoding::Allocated(_) | Encoding::Learned(_)
            ));
            let bytes =
                Request::Features { id: id * 10 + k as u64, frame }.to_bytes_for(TINY_CODED);
            let (reply, model) = call(&mut ws, bytes).await;
            assert_eq!(model, Some(TINY_CODED));
            let (from, got) = top(&reply);
            assert_eq!((from, got[0].class), (1, expected[0].class), "{setting} for input {id}");
        }
    }

    // A frame coded with other tables names their id and is refused as such; a calibrated
    // frame to the model without a calibration is a codec it does not have; each time the
    // socket goes on.
    let x = tiny.forward_range(input(&tiny, 1.0), 1).unwrap();
    let x = Activations::new(&spec, 1, x.dims(), x.values().to_vec()).unwrap();
    let other = calibrate(&tiny, "hidden", 199);
    assert_ne!(other.id(), calibration.id());
    let stale =
        encode_frame(&spec, &x, "q8".parse().unwrap(), EncodeContext::new(Some(&other))).unwrap();
    let (reply, _) =
        call(&mut ws, Request::Features { id: 50, frame: stale.clone() }.to_bytes_for(TINY_CODED))
            .await;
    assert_eq!(error_code(&reply), ErrorCode::CalibrationMismatch);
    let (reply, _) =
        call(&mut ws, Request::Features { id: 51, frame: stale }.to_bytes_for(TINY)).await;
    assert_eq!(error_code(&reply), ErrorCode::UnsupportedCodec);
    let fine =
        encode_frame(&spec, &x, "q8".parse().unwrap(), EncodeContext::new(Some(&calibration)))
            .unwrap();
    let (reply, _) =
        call(&mut ws, Request::Features { id: 52, frame: fine }.to_bytes_for(TINY_CODED)).await;
    assert_eq!(top(&reply).0, 1);

    // `/api/info` offers its calibration's default setting; the plain model's stays f32.
    let mut info = srv.get("/api/info").send().await.unwrap();
    let info: serde_json::Value = info.json().limit(1 << 20).await.unwrap();
    let codec = |name: &str| {
        let models = info["models"].as_array().unwrap();
        models.iter().find(|m| m["name"] == name).unwrap()["default_codec"].clone()
    };
    assert_eq!((codec("tiny-coded"), codec("tiny-mlp")), ("s14".into(), "f32".into()));
}

/// The cost table may come from another machine: the server times its own tails at start and
/// serves the table's cloud figures scaled by one factor, saying so; `--keep-cost-table`
/// serves the file as written.
#[actix_web::test]
async fn the_cost_table_is_served_at_this_servers_speed_unless_kept() {
    let file = include_str!("../../../profiles/cost-table.json");
    let written = CostTable::from_json(file).unwrap();
    let srv = common::serve(common::state(&[]));
    let served = CostTable::from_json(&body(&srv, "/api/cost-table").await).unwrap();
    assert!(served.cloud_device.contains("timed by this server"), "{}", served.cloud_device);
    let factor = served.cloud_only_ms / written.cloud_only_ms;
    assert!(factor.is_finite() && factor > 0.0, "{factor}");
    for (s, w) in served.cloud_ms.iter().zip(&written.cloud_ms) {
        match (s, w) {
            (Some(s), Some(w)) if *w > 0.0 => assert!((s / w - factor).abs() < 1e-9),
            (s, w) => assert_eq!(s.is_some(), w.is_some()),
        }
    }
    assert_eq!((&served.edge, &served.codecs), (&written.edge, &written.codecs));
    let srv = common::serve(common::state(&["--keep-cost-table"]));
    assert_eq!(body(&srv, "/api/cost-table").await, file);
}

/// A server offers only the codecs its calibration decodes: with block11's tables alone, the
/// table it serves keeps block11's rows and only the uncalibrated ones elsewhere.
#[actix_web::test]
async fn the_cost_table_offers_only_codecs_the_calibration_decodes() {
    use split_shared::codec::{Calibration, Setting};
    let file = include_str!("../../../profiles/cost-table.json");
    let written = CostTable::from_json(file).unwrap();
    let whole = Calibration::load(&split_paths::calibration_file()).unwrap();
    let dir = std::env::temp_dir().join(format!("split-codecs-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let part = dir.join("block11.splc");
    std::fs::write(&part, whole.part("block11").unwrap()).unwrap();
    let srv = common::serve(common::state(&[
        "--keep-cost-table",
        "--calibration",
        part.to_str().unwrap(),
    ]));
    let served = CostTable::from_json(&body(&srv, "/api/cost-table").await).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    for ((name, served), written) in
        served.boundaries.iter().zip(&served.codecs).zip(&written.codecs)
    {
        let kept: Vec<_> = written
            .iter()
            .filter(|c| name == "block11" || matches!(c.codec, Setting::F32 | Setting::Ranged(_)))
            .collect();
        assert_eq!(served.iter().collect::<Vec<_>>(), kept, "at {name}");
    }
    let block11 = written.boundaries.iter().position(|b| b == "block11").unwrap();
    assert!(written.codecs[block11].len() > 1, "block11 has calibrated rows to keep");
}
