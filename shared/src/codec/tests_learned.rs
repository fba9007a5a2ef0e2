//! The `learned<bits>` settings end to end on a synthetic calibration at block5: a coder that
//! keeps the channels the map varies in, its tables fitted like the trainer fits them.

use std::collections::BTreeMap;

use super::learned::Dense;
use super::*;
use crate::protocol::{Encoding, FeatureView, FeaturesFrame, Request};

const B5: [usize; 4] = [1, 80, 14, 14];
const KEPT: usize = 6;
const POSITIONS: usize = 14 * 14;

/// A map that varies in its first [`KEPT`] channels only (the rest constant 0.5).
fn map(seed: u32) -> Vec<f32> {
    (0..B5[1] * POSITIONS)
        .map(|i| {
            let (c, p) = (i / POSITIONS, i % POSITIONS);
            if c >= KEPT {
                return 0.5;
            }
            ((p as f32 * 0.37 + c as f32 * 1.3 + seed as f32).sin() * (1.0 + c as f32)).abs()
        })
        .collect()
}

/// Encoder: the first [`KEPT`] channels through a hidden ReLU layer (which passes the map's
/// non-negative values as they are); decoder: back, the constant channels from the bias.
fn coder() -> LearnedCoder {
    let select = |rows: usize, cols: usize| -> Vec<f32> {
        (0..rows * cols).map(|i| f32::from(i / cols == i % cols)).collect()
    };
    let layers = vec![
        Dense { w: select(80, KEPT), b: vec![0.0; KEPT] },
        Dense { w: select(KEPT, KEPT), b: vec![0.0; KEPT] },
        Dense {
            w: select(KEPT, 80),
            b: (0..80).map(|c| if c < KEPT { 0.0 } else { 0.5 }).collect(),
        },
    ];
    LearnedCoder::new(layers, 2).unwrap()
}

/// Tables over the codes at 4 and 2 bits: ranges from the maps' extremes, counts of levels.
fn calibration() -> Calibration {
    let coder = coder();
    let codes: Vec<Vec<f32>> = (0..4).map(|s| coder.encode(&map(s))).collect();
    let ranges: Vec<ClipRange> = (0..KEPT)
        .map(|k| {
            let of = |z: &Vec<f32>| z[k * POSITIONS..(k + 1) * POSITIONS].to_vec();
            let v: Vec<f32> = codes.iter().flat_map(of).collect();
            ClipRange {
                lo: v.iter().copied().fold(f32::MAX, f32::min),
                hi: v.iter().copied().fold(f32::MIN, f32::max),
            }
        })
        .collect();
    let table = |bits: u8| {
        let mut counts = vec![vec![1u64; 1 << bits]; KEPT];
        for z in &codes {
            let mut symbols = Vec::new();
            quant::quantize(z, &ranges, 1 << bits, &mut symbols);
            for (i, s) in symbols.iter().enumerate() {
                counts[i / POSITIONS][usize::from(*s)] += 1;
            }
        }
        QuantTable::from_counts(bits, ranges.clone(), &counts).unwrap()
    };
    let learned = LearnedTables {
        coder,
        tables: BTreeMap::from([(4, table(4)), (2, table(2))]),
        command: "a test".into(),
    };
    Calibration::new(4, [("block5", BoundaryTables::default())]).with_learned("block5", learned)
}

fn frame(cal: &Calibration, x: &[f32], bits: u8) -> Result<FeaturesFrame, CodecError> {
    let view = FeatureView { index: 7, name: "block5", dims: &B5, values: x };
    FeaturesFrame::encode(view, Setting::Learned(bits), EncodeContext::new(Some(cal)))
}

/// Coded, sent, read and decoded: the kept channels within half a step of their codes'
/// range, the others as the decoder's bias puts them; the payload under a byte per value's
/// worth of codes.
#[test]
fn a_learned_frame_round_trips_through_the_wire_and_the_stored_calibration() {
    let cal = Calibration::from_bytes(&calibration().to_bytes()).unwrap();
    let x = map(9);
    let sent = frame(&cal, &x, 4).unwrap();
    let Encoding::Learned(params) = sent.encoding else { panic!("{:?}", sent.encoding) };
    assert_eq!((params.bits, params.calibration), (4, cal.id()));
    assert!(sent.payload.len() < KEPT * POSITIONS / 2 + 64, "{} bytes", sent.payload.len());
    let bytes = Request::Features { id: 3, frame: sent.clone() }.to_bytes();
    let Request::Features { frame: got, .. } = Request::decode(&bytes).unwrap() else {
        panic!("not a features frame")
    };
    assert_eq!(got, sent);
    let back = got.decode_values("block5", DecodeContext::new(Some(&cal))).unwrap();
    let (_, table) = cal.lookup_learned("block5", 4).unwrap();
    for (i, (a, b)) in x.iter().zip(&back).enumerate() {
        let c = i / POSITIONS;
        let tolerance = if c < KEPT {
            let r = table.ranges()[c];
            r.step(16) / 2.0 + (a - a.clamp(r.lo, r.hi)).abs() + 1e-5
        } else {
            1e-6
        };
        assert!((a - b).abs() <= tolerance, "channel {c}: {a} → {b}");
    }
    assert_eq!(cal.at("block5").unwrap().learned.as_ref().unwrap().command, "a test");
    // Fewer bits, fewer bytes.
    assert!(frame(&cal, &x, 2).unwrap().payload.len() < sent.payload.len());
}

/// A browser's part of the calibration carries the coder and codes as the whole does.
#[test]
fn a_part_carries_the_learned_coder() {
    let whole = calibration();
    let part = Calibration::from_bytes(&whole.part("block5").unwrap()).unwrap();
    assert_eq!(part.id(), whole.id());
    let x = map(2);
    assert_eq!(frame(&part, &x, 4).unwrap(), frame(&whole, &x, 4).unwrap());
}

#[test]
fn learned_frames_refuse_foreign_calibrations_missing_tables_and_damage() {
    let cal = calibration();
    let x = map(1);
    let sent = frame(&cal, &x, 4).unwrap();
    let Encoding::Learned(params) = sent.encoding else { unreachable!() };
    let decode = |p: &LearnedParams, payload: &[u8], dims: &[usize]| {
        decode_learned("block5", dims, p, payload, Some(&cal))
    };
    let foreign = LearnedParams { calibration: params.calibration ^ 1, ..params };
    assert!(matches!(
        decode(&foreign, &sent.payload, &B5),
        Err(CodecError::CalibrationMismatch { .. })
    ));
    let three = LearnedParams { bits: 3, ..params };
    assert!(matches!(decode(&three, &sent.payload, &B5), Err(CodecError::NotCalibrated { .. })));
    assert!(matches!(frame(&cal, &x, 3), Err(CodecError::NotCalibrated { .. })));
    let err = encode_learned("block6", &B5, &x, 4, Some(&cal));
    assert!(matches!(err, Err(CodecError::NotCalibrated { .. })));
    assert!(matches!(encode_learned("block5", &B5, &x, 4, None), Err(CodecError::NoCalibration)));
    let err = encode_learned("block5", &[1, 40, 14, 28], &x, 4, Some(&cal));
    assert!(matches!(err, Err(CodecError::ChannelMismatch { calibrated: 80, got: 40, .. })));
    // Damaged payloads: typed errors or some map of the right size, never a panic.
    for cut in [0, 1, sent.payload.len() / 2, sent.payload.len() - 1] {
        if let Ok(v) = decode(&params, &sent.payload[..cut], &B5) {
            assert_eq!(v.len(), x.len());
        }
    }
    let mut flipped = sent.payload.clone();
    for i in (0..flipped.len()).step_by(7) {
        flipped[i] ^= 0x5a;
    }
    if let Ok(v) = decode(&params, &flipped, &B5) {
        assert_eq!(v.len(), x.len());
    }
}

/// A calibration whose coder does not chain, or whose tables cover other codes than the
/// coder makes, is refused at load.
#[test]
fn a_learned_coder_that_does_not_fit_is_refused_at_load() {
    use crate::container::TensorFile;
    let bytes = calibration().to_bytes();
    let f = TensorFile::from_bytes(&bytes, CALIBRATION_MAGIC).unwrap();
    // Every tensor as written, less `drop`, with `put` in place of its namesakes.
    let rewrite = |drop: &[&str], put: Vec<(&str, Vec<usize>, Vec<f32>)>| {
        let mut g = TensorFile::new();
        for (name, dims, data) in f.iter() {
            if !drop.contains(&name) && !put.iter().any(|(n, _, _)| *n == name) {
                g.insert(name, dims.to_vec(), data.to_vec());
            }
        }
        for (name, dims, data) in put {
            g.insert(name, dims, data);
        }
        Calibration::from_bytes(&g.to_bytes(CALIBRATION_MAGIC))
    };
    assert!(rewrite(&[], vec![]).is_ok(), "rewritten as it was, it loads");
    let bad = |r: Result<Calibration, CodecError>| matches!(r, Err(CodecError::BadCalibration(_)));
    let short = ("block5.learned.layer1.w", vec![KEPT, KEPT - 1], vec![0.0; KEPT * (KEPT - 1)]);
    assert!(bad(rewrite(&[], vec![short])), "a layer that does not chain");
    assert!(bad(rewrite(&["block5.learned.encoder"], vec![])), "no encoder count");
    let nan = ("block5.learned.layer0.b", vec![KEPT], vec![f32::NAN; KEPT]);
    assert!(bad(rewrite(&[], vec![nan])), "a weight that is not finite");
    // Tables over one code fewer than the coder makes.
    let n = KEPT - 1;
    let fewer = vec![
        ("block5.learned.q2.lo", vec![n], vec![0.0; n]),
        ("block5.learned.q2.hi", vec![n], vec![1.0; n]),
        ("block5.learned.q2.prob", vec![n, 4], vec![16384.0; n * 4]),
    ];
    assert!(bad(rewrite(&[], fewer)), "tables over other codes");
}

/// What a calibration can code: the learned depths it has tables for, settings that need no
/// tables, nothing it lacks the tables of.
#[test]
fn a_calibration_says_which_settings_it_codes() {
    let cal = calibration();
    for (setting, ok) in [
        ("learned4", true),
        ("learned2", true),
        ("learned3", false),
        ("q4", false),
        ("s12", false),
        ("f32", true),
        ("ranged4", true),
    ] {
        assert_eq!(cal.codes("block5", setting.parse().unwrap()), ok, "{setting}");
    }
    assert!(!cal.codes("block11", Setting::Learned(4)));
}
