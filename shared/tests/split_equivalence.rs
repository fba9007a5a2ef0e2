//! Splitting anywhere, and sending the features through a frame, changes nothing.

mod common;

use burn::tensor::{Device, Tensor};
use common::*;
use split_shared::Boundary;
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
        let Request::Features { boundary, shape, payload, .. } = Request::decode(&frame).unwrap()
        else {
            panic!("features frame")
        };
        assert_eq!(boundary, k);
        let x = features_tensor(&shape, &payload, &device);
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
