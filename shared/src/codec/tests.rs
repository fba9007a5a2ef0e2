//! Round trips of every codec path on a synthetic calibration at block5.

use std::collections::BTreeMap;

use super::fit::fit_table;
use super::*;

const B5: [usize; 4] = [1, 80, 14, 14];

fn boundary() -> &'static str {
    "block5"
}

/// [`encode`] with the arguments spelled out, as the tests vary each one.
fn encode_with(
    cal: &Calibration,
    boundary: &str,
    dims: &[usize],
    x: &[f32],
    setting: QuantSetting,
    stream: Option<&mut StreamEncoder>,
) -> Result<(CodedParams, Vec<u8>), CodecError> {
    encode(boundary, dims, x, setting, EncodeContext::new(Some(cal)).with_stream(stream))
}

/// [`decode`] likewise.
fn decode_with(
    cal: &Calibration,
    boundary: &str,
    dims: &[usize],
    params: &CodedParams,
    payload: &[u8],
    streams: Option<&mut StreamDecoder>,
) -> Result<Vec<f32>, CodecError> {
    decode(boundary, dims, params, payload, DecodeContext::new(Some(cal)).with_streams(streams))
}

/// Deterministic activations: channel-dependent scale, heavy-ish tails, some dead channels.
fn activations(seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let positions = B5[2] * B5[3];
    (0..B5[1] * positions)
        .map(|i| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let u = ((state >> 40) as f32 / (1u64 << 24) as f32).clamp(1e-6, 1.0 - 1e-6);
            let c = i / positions;
            if c % 13 == 12 {
                return 0.0;
            }
            let laplace = if u < 0.5 { (2.0 * u).ln() } else { -(2.0 * (1.0 - u)).ln() };
            // A smooth spatial pattern shared by frames, plus noise.
            let p = (i % positions) as f32;
            (p * 0.01 + c as f32).sin() * 2.0 + laplace * (0.2 + c as f32 * 0.05)
        })
        .collect()
}

/// A Householder reflection: orthonormal and not a permutation.
fn householder(n: usize) -> Vec<f32> {
    let v: Vec<f32> = (0..n).map(|i| 1.0 + i as f32 * 0.1).collect();
    let vv: f32 = v.iter().map(|x| x * x).sum();
    let mut h = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..n {
            h[i * n + j] = f32::from(i == j) - 2.0 * v[i] * v[j] / vv;
        }
    }
    h
}

fn calibration() -> Calibration {
    let positions = B5[2] * B5[3];
    let mut per_channel = vec![Vec::new(); B5[1]];
    let mut per_component = vec![Vec::new(); B5[1]];
    let projection =
        Projection { mean: vec![0.1; B5[1]], basis: householder(B5[1]), max_rank: B5[1] };
    for seed in 0..4 {
        let x = activations(seed);
        let y = projection.project(&x, B5[1]);
        for c in 0..B5[1] {
            per_channel[c].extend_from_slice(&x[c * positions..(c + 1) * positions]);
            per_component[c].extend_from_slice(&y[c * positions..(c + 1) * positions]);
        }
    }
    let mut tables = BoundaryTables::default();
    let mut pca = PcaTables { projection, tables: BTreeMap::new() };
    for bits in SUPPORTED_BITS {
        tables.raw.insert(bits, fit_table(bits, &per_channel).unwrap());
        pca.tables.insert(bits, fit_table(bits, &per_component).unwrap());
    }
    tables.pca = Some(pca);
    tables.alloc = Some(alloc_table(&per_channel));
    Calibration::new(4, BTreeMap::from([(boundary(), tables)]))
}

/// Means and spreads of the samples; channel c weighs 1 + c/10, so later channels get finer
/// steps.
fn alloc_table(per_channel: &[Vec<f32>]) -> AllocTable {
    let (mut center, mut spread, mut weight) = (Vec::new(), Vec::new(), Vec::new());
    for (c, v) in per_channel.iter().enumerate() {
        let mean = v.iter().sum::<f32>() / v.len() as f32;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f32>() / v.len() as f32;
        center.push(mean);
        spread.push(var.sqrt());
        weight.push(1.0 + c as f32 / 10.0);
    }
    AllocTable::new(center, spread, weight).unwrap()
}

#[test]
fn allocated_settings_round_trip_through_the_stored_calibration() {
    let cal = calibration();
    let stored = Calibration::from_bytes(&cal.to_bytes()).unwrap();
    let part = Calibration::from_bytes(&cal.part(boundary()).unwrap()).unwrap();
    let x = activations(42);
    let mut last_len = usize::MAX;
    for level in [12u8, 8, 4, 0] {
        let s = AllocSetting { level };
        let (params, payload) = encode_alloc(boundary(), &B5, &x, s, Some(&cal)).unwrap();
        assert_eq!(params.model, alloc::CONTEXT_MODEL);
        assert!(payload.len() < last_len, "coarser levels cost fewer bytes");
        last_len = payload.len();
        // The stored file and a one-boundary part code bit-identically.
        for other in [&stored, &part] {
            assert_eq!(
                encode_alloc(boundary(), &B5, &x, s, Some(other)).unwrap(),
                (params, payload.clone())
            );
        }
        let back = decode_alloc(boundary(), &B5, &params, &payload, Some(&stored)).unwrap();
        let steps = cal.lookup_alloc(boundary(), s).unwrap().steps(level);
        for (i, (a, b)) in x.iter().zip(&back).enumerate() {
            let step = steps[i / (B5[2] * B5[3])];
            if step > 0.0 {
                assert!((a - b).abs() <= step / 2.0 + 1e-4, "level {level}: value {i}");
            }
        }
    }
}

#[test]
fn allocated_frames_refuse_foreign_models_calibrations_and_levels() {
    let cal = calibration();
    let x = activations(7);
    let (params, payload) =
        encode_alloc(boundary(), &B5, &x, AllocSetting { level: 10 }, Some(&cal)).unwrap();
    let decode = |p: AllocParams| decode_alloc(boundary(), &B5, &p, &payload, Some(&cal));
    // Frames of the first context model (binarised, before the multi-symbol one) and of a
    // later one are refused by name, not misread.
    for model in [1, 3] {
        assert_eq!(
            decode(AllocParams { model, ..params }).unwrap_err(),
            CodecError::UnsupportedModel(model, 2)
        );
    }
    assert!(matches!(
        decode(AllocParams { calibration: params.calibration ^ 1, ..params }),
        Err(CodecError::CalibrationMismatch { .. })
    ));
    assert_eq!(
        decode(AllocParams { setting: AllocSetting { level: 25 }, ..params }).unwrap_err(),
        CodecError::UnsupportedLevel(25)
    );
    assert!(
        decode_alloc(boundary(), &B5, &params, &payload[..payload.len() - 1], Some(&cal)).is_err()
    );
    // A calibration without sensitivities leaves the settings uncalibrated, by name.
    let mut bare = BoundaryTables::default();
    bare.raw.insert(4, cal.lookup(boundary(), QuantSetting::bits(4)).unwrap().0.clone());
    let bare = Calibration::new(1, BTreeMap::from([(boundary(), bare)]));
    assert_eq!(bare.default_setting(), DEFAULT_QUANT_SETTING, "the default falls back to q");
    assert_eq!(cal.default_setting(), DEFAULT_SETTING);
    let err =
        encode_alloc(boundary(), &B5, &x, AllocSetting { level: 10 }, Some(&bare)).unwrap_err();
    assert_eq!(err.to_string(), "no calibration for s10 at block5");
    assert_eq!(
        encode_alloc(boundary(), &B5, &x, AllocSetting { level: 10 }, None).unwrap_err(),
        CodecError::NoCalibration
    );
}

fn settings() -> Vec<QuantSetting> {
    let mut out = Vec::new();
    for bits in SUPPORTED_BITS {
        for rank in [0, 16, 80] {
            for entropy in [true, false] {
                out.push(QuantSetting { bits, rank, entropy });
            }
        }
    }
    out
}

fn max_step(cal: &Calibration, setting: QuantSetting) -> f32 {
    let (table, _) = cal.lookup(boundary(), setting).unwrap();
    table.ranges().iter().map(|r| r.step(setting.levels())).fold(0.0, f32::max)
}

#[test]
fn every_setting_round_trips_within_its_quantization_error() {
    let cal = calibration();
    let x = activations(99);
    for setting in settings() {
        let (params, payload) = encode_with(&cal, boundary(), &B5, &x, setting, None).unwrap();
        assert_eq!(params.setting, setting);
        assert_eq!(params.pos, STANDALONE);
        let back = decode_with(&cal, boundary(), &B5, &params, &payload, None).unwrap();
        assert_eq!(back.len(), x.len());
        if setting.rank == 0 || setting.rank == 80 {
            // Full information: the error is quantization only (plus clipping of rare tails).
            let mse: f32 =
                x.iter().zip(&back).map(|(a, b)| (a - b).powi(2)).sum::<f32>() / x.len() as f32;
            let step = max_step(&cal, setting);
            assert!(mse <= step * step, "{setting:?}: mse {mse} vs step {step}");
        }
    }
}

#[test]
fn entropy_coding_and_packing_reconstruct_identically_and_entropy_is_smaller() {
    let cal = calibration();
    let x = activations(7);
    for bits in SUPPORTED_BITS {
        let coded = QuantSetting { bits, rank: 0, entropy: true };
        let packed = QuantSetting { entropy: false, ..coded };
        let (pc, bc) = encode_with(&cal, boundary(), &B5, &x, coded, None).unwrap();
        let (pp, bp) = encode_with(&cal, boundary(), &B5, &x, packed, None).unwrap();
        assert_eq!(bp.len(), quant::packed_len(x.len(), bits));
        assert!(bc.len() < bp.len(), "{bits} bits: rANS {} vs packed {}", bc.len(), bp.len());
        assert_eq!(
            decode_with(&cal, boundary(), &B5, &pc, &bc, None).unwrap(),
            decode_with(&cal, boundary(), &B5, &pp, &bp, None).unwrap()
        );
    }
}

/// A part holds one boundary's tables under the whole calibration's id: it codes exactly as
/// the whole does, lacks the other boundaries until merged, and refuses to join another
/// calibration.
#[test]
fn a_calibration_part_codes_like_the_whole_and_merges() {
    let one = calibration();
    let block6 = "block6"; // 80 channels at 14x14, like block5
    let tables = one.at(boundary()).unwrap().clone();
    let both = BTreeMap::from([(boundary(), tables.clone()), (block6, tables)]);
    let whole = Calibration::new(4, both);
    let part = whole.part(boundary()).unwrap();
    assert!(part.len() < whole.to_bytes().len() * 6 / 10, "a part is about half of two");
    let mut loaded = Calibration::from_bytes(&part).unwrap();
    assert_eq!(loaded.id(), whole.id(), "a part names the whole file");
    assert_eq!(loaded.boundaries().collect::<Vec<_>>(), [boundary()]);
    let x = activations(5);
    let s = QuantSetting { bits: 4, rank: 0, entropy: true };
    assert_eq!(
        encode_with(&loaded, boundary(), &B5, &x, s, None).unwrap(),
        encode_with(&whole, boundary(), &B5, &x, s, None).unwrap()
    );
    assert!(loaded.lookup(block6, s).is_err(), "not loaded yet");
    loaded.merge(Calibration::from_bytes(&whole.part(block6).unwrap()).unwrap()).unwrap();
    assert!(loaded.lookup(block6, s).is_ok());
    assert!(whole.part("block9").is_none());
    let other = Calibration::from_bytes(&one.part(boundary()).unwrap()).unwrap();
    assert_ne!(other.id(), whole.id());
    assert!(matches!(loaded.merge(other), Err(CodecError::BadCalibration(_))));
}

/// How many images the sensitivities came from is part of the file (and so of its id), and a
/// part carries it too; files that predate it read as 0.
#[test]
fn the_sensitivity_image_count_is_recorded() {
    let plain = calibration();
    assert_eq!(plain.sensitivity_images(), 0);
    let counted = plain.clone().with_sensitivity_images(48);
    assert_ne!(counted.id(), plain.id());
    let back = Calibration::from_bytes(&counted.to_bytes()).unwrap();
    assert_eq!((back.sensitivity_images(), back.id()), (48, counted.id()));
    let part = Calibration::from_bytes(&counted.part(boundary()).unwrap()).unwrap();
    assert_eq!((part.sensitivity_images(), part.id()), (48, counted.id()));
}

#[test]
fn calibration_round_trips_through_bytes_and_detects_damage() {
    let cal = calibration();
    let bytes = cal.to_bytes();
    let back = Calibration::from_bytes(&bytes).unwrap();
    assert_eq!(back.id(), cal.id());
    assert_eq!(back.to_bytes(), bytes, "serialization is deterministic");
    let x = activations(3);
    let s = QuantSetting { bits: 3, rank: 16, entropy: true };
    let (p1, b1) = encode_with(&cal, boundary(), &B5, &x, s, None).unwrap();
    let (p2, b2) = encode_with(&back, boundary(), &B5, &x, s, None).unwrap();
    assert_eq!((p1, &b1), (p2, &b2));
    let mut damaged = bytes.clone();
    damaged[100] ^= 1;
    assert!(matches!(Calibration::from_bytes(&damaged), Err(CodecError::BadCalibration(_))));
    assert!(matches!(
        Calibration::from_bytes(&bytes[..bytes.len() / 2]),
        Err(CodecError::BadCalibration(_))
    ));
    let weights_like = crate::container::TensorFile::new().to_bytes(crate::model::WEIGHTS_MAGIC);
    assert!(matches!(Calibration::from_bytes(&weights_like), Err(CodecError::BadCalibration(_))));
}

#[test]
fn foreign_calibration_uncalibrated_settings_and_bad_shapes_are_typed_errors() {
    let cal = calibration();
    let x = activations(1);
    let s = QuantSetting::bits(4);
    let (mut params, payload) = encode_with(&cal, boundary(), &B5, &x, s, None).unwrap();
    params.calibration ^= 1;
    assert!(matches!(
        decode_with(&cal, boundary(), &B5, &params, &payload, None),
        Err(CodecError::CalibrationMismatch { .. })
    ));
    let err = encode_with(&cal, "stem", &[1, 32, 112, 112], &vec![0.0; 32 * 112 * 112], s, None);
    assert!(matches!(err, Err(CodecError::NotCalibrated { .. })));
    let err = encode_with(&cal, boundary(), &B5, &x, QuantSetting { rank: 81, ..s }, None);
    assert!(matches!(err, Err(CodecError::RankTooLarge { max: 80, .. })));
    let err = encode_with(&cal, boundary(), &B5, &x, QuantSetting::bits(5), None);
    assert_eq!(err.unwrap_err(), CodecError::UnsupportedBits(5));
    let err =
        encode_with(&cal, boundary(), &[2, 80, 14, 14], &[x.clone(), x.clone()].concat(), s, None);
    assert_eq!(err.unwrap_err(), CodecError::BatchNotOne(2));
    // The codec holds the item to its tables: the channels they cover, values that fill the
    // shape, a shape of 2 to 4 dimensions.
    let err = encode_with(&cal, boundary(), &[1, 40, 14, 28], &x, s, None);
    assert!(matches!(err, Err(CodecError::ChannelMismatch { calibrated: 80, got: 40, .. })));
    params.calibration ^= 1;
    let err = decode_with(&cal, boundary(), &[1, 40, 14, 28], &params, &payload, None);
    assert!(matches!(err, Err(CodecError::ChannelMismatch { .. })));
    let err = encode_with(&cal, boundary(), &B5, &x[..x.len() / 2], s, None);
    assert!(matches!(err, Err(CodecError::BadPayload(_))));
    let err = encode_with(&cal, boundary(), &[1, 80, 14, 7, 2], &x, s, None);
    assert!(matches!(err, Err(CodecError::BadPayload(_))));
    let alloc = AllocSetting { level: 8 };
    let err = encode_alloc(boundary(), &[1, 40, 14, 28], &x, alloc, Some(&cal));
    assert!(matches!(err, Err(CodecError::ChannelMismatch { .. })));
}

/// Items of any rank the runtime allows code under the same tables: a vector (`[1, C]`: one
/// value a channel) and a sequence (`[1, C, L]`), at a boundary of a model that is not
/// EfficientNet-Lite0, named by its own spec, which `check_spec` holds the tables to.
#[test]
fn vectors_and_sequences_code_at_a_named_boundary_of_any_model() {
    use crate::runtime::{BoundarySpec, ModelSpec};
    let (channels, length) = (6usize, 5usize);
    let mut rng = 7u32;
    let mut draw = move || {
        rng = rng.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        (rng >> 8) as f32 / (1 << 24) as f32
    };
    let samples: Vec<Vec<f32>> =
        (0..channels).map(|c| (0..400).map(|_| c as f32 + 2.0 * draw()).collect()).collect();
    let mut tables = BoundaryTables::default();
    for bits in SUPPORTED_BITS {
        tables.raw.insert(bits, fit_table(bits, &samples).unwrap());
    }
    tables.alloc = Some(alloc_table(&samples));
    let cal = Calibration::new(400, [("hidden", tables.clone()), ("steps", tables)]);
    let spec = |hidden: usize| {
        let b = [
            BoundarySpec::new("input", &[3]),
            BoundarySpec::new("hidden", &[hidden]),
            BoundarySpec::new("steps", &[channels, length]),
            BoundarySpec::new("scores", &[2]),
        ];
        ModelSpec::new(40, "toy", b.to_vec(), 1).unwrap()
    };
    cal.check_spec(&spec(channels)).unwrap();
    let err = cal.check_spec(&spec(channels + 1)).unwrap_err();
    assert!(err.to_string().contains("hidden"), "{err}");
    let other = ModelSpec::new(
        41,
        "other",
        vec![BoundarySpec::new("input", &[3]), BoundarySpec::new("out", &[2])],
        1,
    )
    .unwrap();
    let err = cal.check_spec(&other).unwrap_err();
    assert!(err.to_string().contains("which other does not have"), "{err}");
    for (name, dims) in [("hidden", vec![1, channels]), ("steps", vec![1, channels, length])] {
        let per_channel: usize = dims[2..].iter().product();
        let x: Vec<f32> =
            (0..channels * per_channel).map(|i| (i / per_channel) as f32 + 1.0).collect();
        for s in [QuantSetting::bits(8), QuantSetting { bits: 4, rank: 0, entropy: false }] {
            let (params, payload) = encode_with(&cal, name, &dims, &x, s, None).unwrap();
            let back = decode_with(&cal, name, &dims, &params, &payload, None).unwrap();
            let worst = x.iter().zip(&back).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
            assert!(worst < if s.bits == 8 { 0.02 } else { 0.2 }, "{name} {s:?}: {worst}");
        }
        let a = AllocSetting { level: 16 };
        let (params, payload) = encode_alloc(name, &dims, &x, a, Some(&cal)).unwrap();
        let back = decode_alloc(name, &dims, &params, &payload, Some(&cal)).unwrap();
        assert_eq!(back.len(), x.len());
        // A stored calibration reads back with the same channels at each name.
        let stored = Calibration::from_bytes(&cal.to_bytes()).unwrap();
        assert_eq!(stored.at(name).unwrap().channels(), Some(channels));
    }
}

#[test]
fn damaged_payloads_are_rejected_never_panic() {
    let cal = calibration();
    let x = activations(5);
    for setting in [
        QuantSetting::bits(2),
        QuantSetting::bits(8),
        QuantSetting { bits: 4, rank: 16, entropy: false },
    ] {
        let (params, payload) = encode_with(&cal, boundary(), &B5, &x, setting, None).unwrap();
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..200 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let mut p = payload.clone();
            match rng % 3 {
                0 => p.truncate((rng >> 8) as usize % p.len()),
                1 => p.extend_from_slice(&rng.to_le_bytes()[..1 + (rng >> 60) as usize % 7]),
                _ => {
                    let i = (rng >> 8) as usize % p.len();
                    p[i] ^= 1 << ((rng >> 40) % 8);
                }
            }
            // Either a typed error or, for a flipped bit, some reconstruction of the right size.
            if let Ok(v) = decode_with(&cal, boundary(), &B5, &params, &p, None) {
                assert_eq!(v.len(), x.len());
            }
        }
    }
}

#[test]
fn streams_send_small_residuals_and_never_drift() {
    let cal = calibration();
    let setting = QuantSetting::bits(4);
    let mut enc = StreamEncoder::new(3, 10, 0);
    let mut dec = StreamDecoder::new();
    let mut sizes = Vec::new();
    for frame in 0..12u64 {
        // A still scene with a little noise: frames differ only slightly.
        let base = activations(11);
        let noise = activations(100 + frame);
        let x: Vec<f32> = base.iter().zip(&noise).map(|(b, n)| b + 0.01 * n).collect();
        let (params, payload) =
            encode_with(&cal, boundary(), &B5, &x, setting, Some(&mut enc)).unwrap();
        assert_eq!(params.pos.seq, frame as u32);
        assert_eq!(params.pos.delta, frame % 10 != 0, "keyframe every 10 frames");
        let streamed =
            decode_with(&cal, boundary(), &B5, &params, &payload, Some(&mut dec)).unwrap();
        // Lossless residuals: exactly what a standalone frame would reconstruct.
        let (sp, sb) = encode_with(&cal, boundary(), &B5, &x, setting, None).unwrap();
        assert_eq!(
            streamed,
            decode_with(&cal, boundary(), &B5, &sp, &sb, None).unwrap(),
            "frame {frame}"
        );
        sizes.push(payload.len());
    }
    assert!(sizes[1] * 2 < sizes[0], "residuals are cheaper than keyframes: {sizes:?}");
}

#[test]
fn a_dead_zone_bounds_the_error_and_shrinks_residuals() {
    let cal = calibration();
    let setting = QuantSetting::bits(6);
    let step = max_step(&cal, setting);
    let frames: Vec<Vec<f32>> = (0..5)
        .map(|f| {
            activations(11).iter().zip(activations(200 + f)).map(|(b, n)| b + 0.02 * n).collect()
        })
        .collect();
    let mut bytes = [0usize; 2];
    for (slot, deadzone) in [0u8, 1].into_iter().enumerate() {
        let mut enc = StreamEncoder::new(1, 100, deadzone);
        let mut dec = StreamDecoder::new();
        for x in &frames {
            let (p, b) = encode_with(&cal, boundary(), &B5, x, setting, Some(&mut enc)).unwrap();
            let y = decode_with(&cal, boundary(), &B5, &p, &b, Some(&mut dec)).unwrap();
            let (sp, sb) = encode_with(&cal, boundary(), &B5, x, setting, None).unwrap();
            let exact = decode_with(&cal, boundary(), &B5, &sp, &sb, None).unwrap();
            let worst = y.iter().zip(&exact).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
            assert!(worst <= f32::from(deadzone) * step + 1e-4, "dead zone {deadzone}: {worst}");
            bytes[slot] += b.len();
        }
    }
    assert!(bytes[1] < bytes[0], "{bytes:?}");
}

#[test]
fn lost_reordered_and_orphan_deltas_ask_for_a_keyframe() {
    let cal = calibration();
    let setting = QuantSetting::bits(3);
    let mut enc = StreamEncoder::new(5, 100, 0);
    let frames: Vec<_> = (0..4)
        .map(|f| {
            encode_with(&cal, boundary(), &B5, &activations(f), setting, Some(&mut enc)).unwrap()
        })
        .collect();
    let mut dec = StreamDecoder::new();
    let run = |dec: &mut StreamDecoder, i: usize| {
        decode_with(&cal, boundary(), &B5, &frames[i].0, &frames[i].1, Some(dec))
    };
    // A delta before any keyframe.
    assert!(matches!(run(&mut dec, 1), Err(CodecError::KeyframeRequired { stream: 5, .. })));
    run(&mut dec, 0).unwrap();
    // Frame 1 lost: frame 2 is out of sequence; the stream is then dropped.
    assert!(matches!(run(&mut dec, 2), Err(CodecError::KeyframeRequired { .. })));
    assert!(matches!(run(&mut dec, 3), Err(CodecError::KeyframeRequired { .. })));
    assert!(dec.is_empty());
    // A decoder without stream state refuses deltas rather than guessing.
    assert!(matches!(
        decode_with(&cal, boundary(), &B5, &frames[1].0, &frames[1].1, None),
        Err(CodecError::KeyframeRequired { .. })
    ));
    // The encoder recovers with a forced keyframe.
    enc.force_keyframe();
    let (p, b) =
        encode_with(&cal, boundary(), &B5, &activations(9), setting, Some(&mut enc)).unwrap();
    assert!(!p.pos.delta);
    decode_with(&cal, boundary(), &B5, &p, &b, Some(&mut dec)).unwrap();
    let (p, b) =
        encode_with(&cal, boundary(), &B5, &activations(10), setting, Some(&mut enc)).unwrap();
    assert!(p.pos.delta);
    decode_with(&cal, boundary(), &B5, &p, &b, Some(&mut dec)).unwrap();
}

/// The first (key) frame of stream `id` at `bits`, decoded into `dec`.
fn decode_keyframe(cal: &Calibration, id: u32, bits: u8, dec: &mut StreamDecoder) {
    let mut enc = StreamEncoder::new(id, 10, 0);
    let x = activations(1);
    let (p, b) =
        encode_with(cal, boundary(), &B5, &x, QuantSetting::bits(bits), Some(&mut enc)).unwrap();
    decode_with(cal, boundary(), &B5, &p, &b, Some(dec)).unwrap();
}

#[test]
fn decoders_track_a_bounded_number_of_streams() {
    let cal = calibration();
    let mut dec = StreamDecoder::new();
    for id in 1..=(MAX_STREAMS as u32 + 3) {
        decode_keyframe(&cal, id, 2, &mut dec);
    }
    assert_eq!(dec.len(), MAX_STREAMS);
}

#[test]
fn decoders_keep_streams_within_a_byte_budget() {
    let cal = calibration();
    let keyframe = |id: u32, dec: &mut StreamDecoder| decode_keyframe(&cal, id, 4, dec);
    let one = {
        let mut d = StreamDecoder::new();
        keyframe(1, &mut d);
        d.bytes()
    };
    assert!(one > 0);
    // Room for two references: a third evicts the oldest.
    let mut dec = StreamDecoder::with_budget(2 * one + one / 2);
    for id in 1..=3 {
        keyframe(id, &mut dec);
    }
    assert_eq!((dec.len(), dec.bytes()), (2, 2 * one));
    // A budget smaller than one reference keeps none: the frame decodes, its deltas cannot.
    let mut tiny = StreamDecoder::with_budget(one - 1);
    keyframe(1, &mut tiny);
    assert!(tiny.is_empty());
    dec.clear();
    assert_eq!(dec.bytes(), 0);
}
