//! Splitting anywhere, and sending the features through a frame, changes nothing.

mod common;

use burn::tensor::{Device, Tensor};
use common::*;
use split_shared::Boundary;
use split_shared::codec::features_request;
use split_shared::codec::{Calibration, Setting, default_calibration_path, features_values};
use split_shared::image::to_input_tensor;
use split_shared::labels::top_k;
use split_shared::model::features_tensor;
use split_shared::protocol::Request;

#[test]
fn every_split_equals_the_full_forward_pass() {
    let device = Device::flex();
    let model = model(&device);
    let input = to_input_tensor(&fixture_image("chelsea"), &device);
    let full = values(model.forward(input.clone()).unwrap());
    let full_top1 = top_k(&full, 1)[0].class;
    for k in Boundary::all() {
        let edge = model.forward_range(input.clone(), Boundary::INPUT, k).unwrap();
        let dims = edge.dims();
        // Through the wire format, as the browser sends it and the server reads it.
        let frame = Request::features_f32(7, k, &dims, &values(edge)).to_bytes();
        let Request::Features { boundary, shape, encoding, payload, .. } =
            Request::decode(&frame).unwrap()
        else {
            panic!("features frame")
        };
        assert_eq!(boundary, k);
        let (dims, v) = features_values(k, &shape, &encoding, &payload, None, None).unwrap();
        let x = features_tensor(&dims, v, &device);
        let logits = values(model.forward_range(x, k, Boundary::LOGITS).unwrap());
        let diff = max_abs_diff(&logits, &full);
        assert!(diff <= 1e-5, "split at {k}: logits differ by {diff}");
        assert_eq!(top_k(&logits, 1)[0].class, full_top1, "split at {k}: top-1");
    }
}

#[test]
fn wrong_shapes_and_backward_ranges_are_errors() {
    let device = Device::flex();
    let model = model(&device);
    let wrong = Tensor::<4>::zeros([1, 24, 56, 56], &device);
    let err = model.forward_range(wrong, Boundary::STEM, Boundary::LOGITS).unwrap_err();
    assert!(matches!(err, split_shared::Error::ShapeMismatch { .. }), "{err}");
    let x = Tensor::<4>::zeros([1, 32, 112, 112], &device);
    let err = model.forward_range(x, Boundary::STEM, Boundary::INPUT).unwrap_err();
    assert!(matches!(err, split_shared::Error::BackwardRange { .. }), "{err}");
}

/// The real calibration, at every calibrated boundary: 8-bit keeps the top-1 of both bundled
/// fixtures, and every setting decodes to the right shape through the wire format.
#[test]
fn calibrated_codecs_keep_the_answer_at_every_boundary() {
    let path = default_calibration_path();
    let bytes = std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run `cargo xtask setup`", path.display()));
    let calibration = Calibration::from_bytes(&bytes).unwrap();
    let device = Device::flex();
    let model = model(&device);
    for name in ["chelsea", "coffee"] {
        let input = to_input_tensor(&fixture_image(name), &device);
        let full_top1 = top_k(&values(model.forward(input.clone()).unwrap()), 1)[0].class;
        for k in calibration.boundaries() {
            let edge = model.forward_range(input.clone(), Boundary::INPUT, k).unwrap();
            let dims = edge.dims();
            let v = values(edge);
            for setting in ["q8", "q4", "q2-r8", "q6-packed"] {
                let setting: Setting = setting.parse().unwrap();
                let frame =
                    features_request(1, k, &dims, &v, setting, Some(&calibration), None).unwrap();
                let Request::Features { shape, encoding, payload, .. } =
                    Request::decode(&frame.to_bytes()).unwrap()
                else {
                    panic!("features frame")
                };
                let (d, back) =
                    features_values(k, &shape, &encoding, &payload, Some(&calibration), None)
                        .unwrap();
                assert_eq!(back.len(), v.len());
                if setting.to_string() == "q8" {
                    let x = features_tensor(&d, back, &device);
                    let logits = values(model.forward_range(x, k, Boundary::LOGITS).unwrap());
                    assert_eq!(top_k(&logits, 1)[0].class, full_top1, "{name} at {k}, q8");
                }
            }
        }
    }
}
