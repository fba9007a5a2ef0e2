//! The plain-burn-op path that WebGPU (and a wgpu server) runs equals the fused kernels' path,
//! boundary by boundary, checked on `flex` by forcing that path there. Its own test binary:
//! the switch is process-wide.

mod common;

use std::sync::Mutex;

use burn::tensor::{Device, Distribution, Tensor};
use common::*;
use split_kernels::PointwiseShape;
use split_shared::Boundary;
use split_shared::image::to_input_tensor;
use split_shared::model::fused::{self, set_composed_only};

/// The switch is process-wide: one test at a time flips it.
static SWITCH: Mutex<()> = Mutex::new(());

#[test]
fn composed_ops_equal_fused_kernels_at_every_boundary() {
    let _switch = SWITCH.lock().unwrap_or_else(|e| e.into_inner());
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

/// On a smaller input (the reduced-input light model, trained on the composed path and run on
/// the kernels) the two paths agree too, odd map sizes (144: 9 → 5) and batches included.
#[test]
fn composed_ops_equal_fused_kernels_on_a_smaller_input() {
    let _switch = SWITCH.lock().unwrap_or_else(|e| e.into_inner());
    let device = Device::flex();
    let model = model(&device);
    for size in [128, 144] {
        let input = |name: &str| {
            let img = split_shared::image::resize_bicubic(&fixture_image(name), size, size);
            to_input_tensor(&img, &device)
        };
        let (cat, coffee) = (input("chelsea"), input("coffee"));
        let batch = Tensor::cat(vec![cat.clone(), coffee.clone()], 0);
        let run = |x: &Tensor<4>, composed: bool| {
            set_composed_only(composed);
            let out = values(model.forward_at(x.clone()).unwrap());
            set_composed_only(false);
            out
        };
        let one_by_one = [run(&cat, false), run(&coffee, false)].concat();
        for (what, got) in [
            ("composed", run(&cat, true)),
            ("fused, batch of 2", run(&batch, false)[..1000].to_vec()),
            ("composed, batch of 2", run(&batch, true)),
        ] {
            let want = &one_by_one[..got.len()];
            let scale = want.iter().fold(1.0f32, |m, v| m.max(v.abs()));
            let diff = max_abs_diff(want, &got);
            assert!(diff <= 1e-5 * scale, "{size}, {what}: differs by {diff} (scale {scale})");
        }
    }
}

/// Other devices load 1x1 weights as one panel (`[1, c_in, c_out]`, what their matmul reads);
/// the composed path gives the same answer from that layout as from the kernels' panels.
#[test]
fn composed_pointwise_reads_one_panel_and_panels_alike() {
    let _switch = SWITCH.lock().unwrap_or_else(|e| e.into_inner());
    let device = Device::flex();
    let (c_in, c_out) = (24, 40);
    let x = Tensor::<4>::random([1, 5, 3, c_in], Distribution::Default, &device);
    let plain = Tensor::<2>::random([c_in, c_out], Distribution::Default, &device);
    let plain = plain.into_data().try_to_vec::<f32>().unwrap();
    let bias = Tensor::<1>::random([c_out], Distribution::Default, &device);
    let shape = PointwiseShape { pixels: 1, c_in, c_out };
    let [panels, _, pw] = fused::pointwise_weight_dims(c_in, c_out, &device);
    assert!(panels > 1, "flex loads panels");
    let weight = |values: Vec<f32>, dims: [usize; 3]| {
        Tensor::<3>::from_data(burn::tensor::TensorData::new(values, dims), &device)
    };
    let packed = weight(shape.pack_weight(&plain), [panels, c_in, pw]);
    let one = weight(plain, [1, c_in, c_out]);
    let kernels = values(fused::pointwise(x.clone(), packed.clone(), bias.clone(), true, None));
    set_composed_only(true);
    let from_panels = values(fused::pointwise(x.clone(), packed, bias.clone(), true, None));
    let from_one = values(fused::pointwise(x, one, bias, true, None));
    set_composed_only(false);
    assert!(max_abs_diff(&kernels, &from_panels) <= 1e-5);
    assert!(max_abs_diff(&kernels, &from_one) <= 1e-5);
}
