//! The plain-burn-op path that WebGPU (and a wgpu server) runs equals the fused kernels' path,
//! boundary by boundary, checked on `flex` by forcing that path there. Its own test binary:
//! the switch is process-wide.

mod common;

use burn::tensor::Device;
use common::*;
use split_shared::Boundary;
use split_shared::image::to_input_tensor;
use split_shared::model::fused::set_composed_only;

#[test]
fn composed_ops_equal_fused_kernels_at_every_boundary() {
    let device = Device::flex();
    let model = model(&device);
    let input = to_input_tensor(&fixture_image("chelsea"), &device);
    let run = |composed: bool| {
        set_composed_only(composed);
        let out: Vec<Vec<f32>> = Boundary::all()
            .map(|b| values(model.forward_range(input.clone(), Boundary::INPUT, b).unwrap()))
            .collect();
        set_composed_only(false);
        out
    };
    let (fused, composed) = (run(false), run(true));
    for ((b, f), c) in Boundary::all().zip(&fused).zip(&composed) {
        let scale = f.iter().fold(1.0f32, |m, v| m.max(v.abs()));
        let diff = max_abs_diff(f, c);
        assert!(diff <= 1e-5 * scale, "{b}: composed and fused differ by {diff} (scale {scale})");
    }
}
