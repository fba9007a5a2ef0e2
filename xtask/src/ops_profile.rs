//! Where burn's time goes: every operation of EfficientNet-Lite0 timed on its own with the
//! model's shapes on `flex` (eager, so a call returns when the work is done), summed by the
//! categories `tools/export_onnx.py --profile-ops` gives ONNX Runtime's profiler output.

use burn::nn::PaddingConfig2d;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::tensor::{Device, Distribution, Tensor};
use split_shared::model::{HEAD_CHANNELS, blocks};
use std::collections::BTreeMap;

use crate::onnx::median_ms;

fn conv(
    c_in: usize,
    c_out: usize,
    k: usize,
    stride: usize,
    groups: usize,
    device: &Device,
) -> Conv2d {
    Conv2dConfig::new([c_in, c_out], [k, k])
        .with_stride([stride, stride])
        .with_groups(groups)
        .with_padding(PaddingConfig2d::Same)
        .init(device)
}

/// Per-image ms of each operation category on `flex`, median of `repeats` per operation.
pub fn burn_ops(repeats: usize) -> BTreeMap<String, f64> {
    let device = Device::flex();
    let mut out = BTreeMap::<String, f64>::new();
    let mut add = |k: &str, ms: f64| *out.entry(k.to_string()).or_default() += ms;
    let random = |shape: [usize; 4]| Tensor::<4>::random(shape, Distribution::Default, &device);

    let x = random([1, 3, 224, 224]);
    let stem = conv(3, 32, 3, 2, 1, &device);
    add("stem conv 3x3", median_ms(|| drop(stem.forward(x.clone())), repeats));
    let mut size = 112;
    for spec in blocks() {
        let hidden = spec.hidden();
        let input = random([1, spec.c_in, size, size]);
        if spec.expand != 1 {
            let c = conv(spec.c_in, hidden, 1, 1, 1, &device);
            add("expand conv 1x1", median_ms(|| drop(c.forward(input.clone())), repeats));
        }
        let h = random([1, hidden, size, size]);
        add("relu6", median_ms(|| drop(h.clone().clamp(0.0, 6.0)), repeats));
        let dw = conv(hidden, hidden, spec.kernel, spec.stride, hidden, &device);
        let name = format!("depthwise {0}x{0}", spec.kernel);
        add(&name, median_ms(|| drop(dw.forward(h.clone())), repeats));
        size = size.div_ceil(spec.stride);
        let h = random([1, hidden, size, size]);
        add("relu6", median_ms(|| drop(h.clone().clamp(0.0, 6.0)), repeats));
        let project = conv(hidden, spec.c_out, 1, 1, 1, &device);
        add("project conv 1x1", median_ms(|| drop(project.forward(h.clone())), repeats));
        if spec.residual() {
            let y = random([1, spec.c_out, size, size]);
            add("residual add", median_ms(|| drop(y.clone() + y.clone()), repeats));
        }
    }
    let x = random([1, 320, 7, 7]);
    let head = conv(320, HEAD_CHANNELS, 1, 1, 1, &device);
    add("head conv 1x1", median_ms(|| drop(head.forward(x.clone())), repeats));
    let h = random([1, HEAD_CHANNELS, 7, 7]);
    add("relu6", median_ms(|| drop(h.clone().clamp(0.0, 6.0)), repeats));
    let fc = burn::nn::LinearConfig::new(HEAD_CHANNELS, 1000).init(&device);
    add(
        "pool + fc",
        median_ms(
            || drop(fc.forward(h.clone().mean_dims(&[2, 3]).reshape([1, HEAD_CHANNELS]))),
            repeats,
        ),
    );
    out
}
