//! Where burn's time goes: every operation of EfficientNet-Lite0 timed on its own with the
//! model's shapes on `flex`, through the same fused calls the model makes (eager, so a call
//! returns when the work is done), summed by the categories `tools/export_onnx.py
//! --profile-ops` gives ONNX Runtime's profiler output.
//!
//! Bias, ReLU6 and the residual add run inside the convolutions' epilogues, so they have no
//! rows of their own (ONNX Runtime fuses them the same way). Inputs are made once outside the
//! timed closure and passed by cheap clones of a shared buffer, so no timed call pays for an
//! allocation the network would not make.

use burn::tensor::{Device, Distribution, Tensor};
use split_shared::model::fused;
use split_shared::model::{HEAD_CHANNELS, blocks};
use std::collections::BTreeMap;

use crate::measure::median_ms;

/// Per-image ms of each operation category on `flex`, median of `repeats` per operation.
pub fn burn_ops(repeats: usize) -> BTreeMap<String, f64> {
    let device = Device::flex();
    let mut out = BTreeMap::<String, f64>::new();
    let mut add = |k: &str, ms: f64| *out.entry(k.to_string()).or_default() += ms;
    let random4 = |shape: [usize; 4]| Tensor::<4>::random(shape, Distribution::Default, &device);
    let random2 = |shape: [usize; 2]| Tensor::<2>::random(shape, Distribution::Default, &device);
    let panels = |c_in: usize, c_out: usize| {
        let dims = fused::pointwise_weight_dims(c_in, c_out, &device);
        Tensor::<3>::random(dims, Distribution::Default, &device)
    };
    let random1 = |n: usize| Tensor::<1>::random([n], Distribution::Default, &device);

    let x = random4([1, 3, 224, 224]);
    let (w, b) = (random2([27, 32]), random1(32));
    let run = || drop(fused::stem(x.clone(), w.clone(), b.clone(), 3, 2));
    add("stem conv 3x3", median_ms(run, repeats));
    let mut size = 112;
    for spec in blocks() {
        let hidden = spec.hidden();
        if spec.expand != 1 {
            let x = random4([1, size, size, spec.c_in]);
            let (w, b) = (panels(spec.c_in, hidden), random1(hidden));
            let run = || drop(fused::pointwise(x.clone(), w.clone(), b.clone(), true, None));
            add("expand conv 1x1", median_ms(run, repeats));
        }
        let x = random4([1, size, size, hidden]);
        let (w, b) = (random2([spec.kernel * spec.kernel, hidden]), random1(hidden));
        let (k, s) = (spec.kernel, spec.stride);
        let run = || drop(fused::depthwise(x.clone(), w.clone(), b.clone(), k, s));
        add(&format!("depthwise {k}x{k}"), median_ms(run, repeats));
        size = size.div_ceil(spec.stride);
        let x = random4([1, size, size, hidden]);
        let (w, b) = (panels(hidden, spec.c_out), random1(spec.c_out));
        let r = spec.residual().then(|| random4([1, size, size, spec.c_out]));
        let run = || drop(fused::pointwise(x.clone(), w.clone(), b.clone(), false, r.clone()));
        add("project conv 1x1", median_ms(run, repeats));
    }
    let x = random4([1, 7, 7, 320]);
    let (w, b) = (panels(320, HEAD_CHANNELS), random1(HEAD_CHANNELS));
    let run = || drop(fused::pointwise(x.clone(), w.clone(), b.clone(), true, None));
    add("head conv 1x1", median_ms(run, repeats));
    let h = random4([1, 7, 7, HEAD_CHANNELS]);
    let fc = burn::nn::LinearConfig::new(HEAD_CHANNELS, 1000).init(&device);
    let run = || drop(fc.forward(h.clone().mean_dims(&[1, 2]).reshape([1, HEAD_CHANNELS])));
    add("pool + fc", median_ms(run, repeats));
    out
}
