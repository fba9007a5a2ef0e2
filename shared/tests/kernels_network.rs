//! Every fused kernel equals the scalar reference on every convolution shape of
//! EfficientNet-Lite0 (batch 1 and the largest batch a frame may carry), on every instruction
//! set this machine runs. Odd shapes are tested in `split-kernels` itself.

use split_kernels::reference::{self, assert_close, test_values as values};
use split_kernels::{Activation, Conv, ConvShape, Isa, MbConvParams, MbConvShape, PointwiseShape};
use split_shared::model::{HEAD_CHANNELS, INPUT_SIZE, MAX_BATCH, blocks};

/// The network's convolutions in order: (pointwise shapes, depthwise shapes) per batch size.
fn network_shapes(batch: usize) -> (Vec<(PointwiseShape, Activation, bool)>, Vec<ConvShape>) {
    let (mut pw, mut dw) = (Vec::new(), Vec::new());
    let mut hw = INPUT_SIZE / 2;
    for b in blocks() {
        if b.expand != 1 {
            let s = PointwiseShape { pixels: batch * hw * hw, c_in: b.c_in, c_out: b.hidden() };
            pw.push((s, Activation::Relu6, false));
        }
        dw.push(ConvShape::depthwise(batch, hw, hw, b.hidden(), b.kernel, b.stride));
        hw = hw.div_ceil(b.stride);
        let s = PointwiseShape { pixels: batch * hw * hw, c_in: b.hidden(), c_out: b.c_out };
        pw.push((s, Activation::Linear, b.residual()));
    }
    let s = PointwiseShape { pixels: batch * hw * hw, c_in: 320, c_out: HEAD_CHANNELS };
    pw.push((s, Activation::Relu6, false));
    (pw, dw)
}

#[test]
fn every_network_shape_equals_reference() {
    for batch in [1, MAX_BATCH] {
        let (pw, dw) = network_shapes(batch);
        for (i, (s, act, residual)) in pw.into_iter().enumerate() {
            let x = values(s.pixels * s.c_in, i as u64);
            let scale = 1.0 / (s.c_in as f32).sqrt();
            let w: Vec<f32> =
                values(s.c_in * s.c_out, 100 + i as u64).iter().map(|v| v * scale).collect();
            let b = values(s.c_out, 200 + i as u64);
            let r = residual.then(|| values(s.pixels * s.c_out, 300 + i as u64));
            let mut want = vec![0.0; s.pixels * s.c_out];
            reference::pointwise(s, &x, &w, &b, act, r.as_deref(), &mut want);
            for isa in Isa::available().into_iter().skip(1) {
                let got = split_kernels::pointwise_new(isa, s, &x, &w, &b, act, r.as_deref());
                assert_close(&got, &want, &format!("{isa:?} pointwise {s:?}"));
            }
        }
        for (i, s) in dw.into_iter().enumerate() {
            let x = values(s.input_len(), 400 + i as u64);
            let w = values(s.kernel * s.kernel * s.c_in, 500 + i as u64);
            let b = values(s.c_in, 600 + i as u64);
            let mut want = vec![0.0; s.output_len()];
            reference::depthwise(s, &x, &w, &b, Activation::Relu6, &mut want);
            for isa in Isa::available().into_iter().skip(1) {
                let got = split_kernels::depthwise_new(isa, s, &x, &w, &b, Activation::Relu6);
                assert_close(&got, &want, &format!("{isa:?} depthwise {s:?}"));
            }
        }
        let s = ConvShape {
            batch,
            height: INPUT_SIZE,
            width: INPUT_SIZE,
            c_in: 3,
            c_out: 32,
            kernel: 3,
            stride: 2,
        };
        let (x, w, b) = (values(s.input_len(), 7), values(27 * 32, 8), values(32, 9));
        let mut want = vec![0.0; s.output_len()];
        reference::conv_nchw_to_nhwc(s, &x, &w, &b, Activation::Relu6, &mut want);
        for isa in Isa::available().into_iter().skip(1) {
            let got = split_kernels::conv_nchw_to_nhwc_new(isa, s, &x, &w, &b, Activation::Relu6);
            assert_close(&got, &want, &format!("{isa:?} stem {s:?}"));
        }
    }
}

/// Every block as one call ([`split_kernels::mbconv`]: in bands of rows for blocks 0–5) equals
/// the scalar reference's three convolutions.
#[test]
fn every_block_in_one_call_equals_reference() {
    for batch in [1, MAX_BATCH] {
        let mut hw = INPUT_SIZE / 2;
        for (i, b) in blocks().iter().enumerate() {
            let seed = 1000 * (i as u64 + 1);
            let (c_in, c_mid, c_out) = (b.c_in, b.hidden(), b.c_out);
            let s = MbConvShape {
                batch,
                height: hw,
                width: hw,
                c_in,
                c_mid,
                c_out,
                kernel: b.kernel,
                stride: b.stride,
            };
            let scaled = |n: usize, fan_in: usize, seed: u64| -> Vec<f32> {
                values(n, seed).iter().map(|v| v / (fan_in as f32).sqrt()).collect()
            };
            let (ew, eb) = (scaled(c_in * c_mid, c_in, seed), values(c_mid, seed + 1));
            let (dw, db) = (values(b.kernel * b.kernel * c_mid, seed + 2), values(c_mid, seed + 3));
            let (pw, pb) = (scaled(c_mid * c_out, c_mid, seed + 4), values(c_out, seed + 5));
            let p = MbConvParams {
                expand: (b.expand != 1).then_some(Conv { weight: &ew, bias: &eb }),
                depthwise: Conv { weight: &dw, bias: &db },
                project: Conv { weight: &pw, bias: &pb },
            };
            let x = values(s.input_len(), seed + 6);
            let mut want = vec![0.0; s.output_len()];
            split_kernels::mbconv(Isa::Reference, s, &x, &p, b.residual(), &mut want);
            for isa in Isa::available().into_iter().skip(1) {
                let got = split_kernels::mbconv_new(isa, s, &x, &p, b.residual());
                assert_close(&got, &want, &format!("{isa:?} block {i} {s:?}"));
            }
            hw = hw.div_ceil(b.stride);
        }
    }
}
