//! The kernels' `unsafe` under Miri (`./run.sh test` runs `cargo miri test -p split-kernels
//! --lib -- tests::miri::` on the pinned nightly): every public entry on the portable path (the generic
//! SIMD code over 4-lane arrays, the same raw-pointer tiles the AVX2, AVX-512 and simd128
//! builds run) and the scalar fallback, on shapes small enough for the interpreter that still
//! reach each tail: partial tiles, edges on both sides, stride 2, odd channel counts, the owned
//! (uninitialised) outputs, and MBConv blocks in bands. Natively it is one more test of
//! the same values.

use split_kernels::reference::{self, assert_close, test_values as values};
use split_kernels::{Activation, Conv, ConvShape, Isa, MbConvParams, MbConvShape, PointwiseShape};

/// The paths Miri can run (it interprets no AVX): the portable kernels and the reference.
const PATHS: [Isa; 2] = [Isa::Portable, Isa::Reference];

#[test]
fn pointwise_under_miri() {
    for (pixels, c_in, c_out) in [(5, 8, 16), (7, 4, 12), (3, 5, 6)] {
        let s = PointwiseShape { pixels, c_in, c_out };
        let (x, w, b, r) = (
            values(pixels * c_in, 1),
            values(c_in * c_out, 2),
            values(c_out, 3),
            values(pixels * c_out, 4),
        );
        let mut want = vec![0.0; pixels * c_out];
        reference::pointwise(s, &x, &w, &b, Activation::Relu6, Some(&r), &mut want);
        for isa in PATHS {
            let got = split_kernels::pointwise_new(isa, s, &x, &w, &b, Activation::Relu6, Some(&r));
            assert_close(&got, &want, &format!("{isa:?} {s:?}"));
        }
    }
}

#[test]
fn depthwise_under_miri() {
    for (h, w, c, k, stride) in [(5, 6, 8, 3, 2), (4, 9, 4, 5, 1), (3, 3, 6, 3, 1), (5, 5, 4, 7, 3)]
    {
        let s = ConvShape::depthwise(1, h, w, c, k, stride);
        let (x, wt, b) = (values(s.input_len(), 5), values(k * k * c, 6), values(c, 7));
        let mut want = vec![0.0; s.output_len()];
        reference::depthwise(s, &x, &wt, &b, Activation::Relu6, &mut want);
        for isa in PATHS {
            let got = split_kernels::depthwise_new(isa, s, &x, &wt, &b, Activation::Relu6);
            assert_close(&got, &want, &format!("{isa:?} {s:?}"));
        }
    }
}

#[test]
fn stem_under_miri() {
    for (h, w, c_in, c_out, k, stride) in [(6, 5, 3, 8, 3, 2), (4, 4, 3, 6, 3, 1)] {
        let s = ConvShape { batch: 1, height: h, width: w, c_in, c_out, kernel: k, stride };
        let (x, wt, b) =
            (values(s.input_len(), 8), values(k * k * c_in * c_out, 9), values(c_out, 10));
        let mut want = vec![0.0; s.output_len()];
        reference::conv_nchw_to_nhwc(s, &x, &wt, &b, Activation::Linear, &mut want);
        for isa in PATHS {
            let got = split_kernels::conv_nchw_to_nhwc_new(isa, s, &x, &wt, &b, Activation::Linear);
            assert_close(&got, &want, &format!("{isa:?} {s:?}"));
        }
    }
}

#[test]
fn mbconv_under_miri() {
    // Under Miri the band thresholds are a few hundred bytes (`BAND_MIN_BYTES`), so these
    // blocks run in bands of one or two rows: with an expansion at stride 2 (the rows two
    // bands share move to the front), without one at stride 1 with a residual; natively they
    // run as three calls. Both against the reference's three calls.
    let shapes =
        [(7, 9, 4, 8, 8, 3, 2, false), (6, 7, 8, 8, 8, 5, 1, true), (5, 6, 4, 8, 4, 3, 1, true)];
    for (height, width, c_in, c_mid, c_out, kernel, stride, residual) in shapes {
        let s = MbConvShape { batch: 1, height, width, c_in, c_mid, c_out, kernel, stride };
        let (ew, eb) = (values(c_in * c_mid, 11), values(c_mid, 12));
        let (dw, db) = (values(kernel * kernel * c_mid, 13), values(c_mid, 14));
        let (pw, pb) = (values(c_mid * c_out, 15), values(c_out, 16));
        let p = MbConvParams {
            expand: (c_mid != c_in).then_some(Conv { weight: &ew, bias: &eb }),
            depthwise: Conv { weight: &dw, bias: &db },
            project: Conv { weight: &pw, bias: &pb },
        };
        let x = values(s.input_len(), 17);
        let want = split_kernels::mbconv_new(Isa::Reference, s, &x, &p, residual);
        let got = split_kernels::mbconv_new(Isa::Portable, s, &x, &p, residual);
        assert_close(&got, &want, &format!("{s:?}"));
    }
}
