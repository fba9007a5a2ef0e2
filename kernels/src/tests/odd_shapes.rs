//! Every instruction set against the scalar reference on shapes chosen to hit each tail:
//! pixel counts that are not a multiple of the tile rows, channel counts that leave a partial
//! column block or are not a multiple of the vector width (reference path), widths where every
//! pixel touches an edge, stride 2 on odd sizes, batch > 1, and calls large enough to be split
//! across threads. The network's own shapes are tested
//! in `split-shared` (`tests/kernels_network.rs`), which knows the architecture.

use split_kernels::reference::{self, assert_close, test_values as values};
use split_kernels::{Activation, Conv, ConvShape, Isa, MbConvParams, MbConvShape, PointwiseShape};

#[test]
fn pointwise_tails_equal_reference() {
    for (pixels, c_in, c_out) in [
        (1, 8, 8),
        (7, 16, 24),
        (13, 24, 40),
        (49, 40, 8),
        (50, 3, 16),
        (9, 5, 7),
        // c_out ≡ 4 (mod 8): one panel as wide as c_out, 4-lane SIMD, 8-lane reference.
        (7, 16, 12),
        (5, 8, 20),
        (33, 24, 36),
        (100, 96, 72),
        // 16-lane kernels: three vectors of 16 (a partial column block of one).
        (7, 16, 48),
        // Large enough to be split across threads (with the `threads` feature): by pixel rows,
        // and by output channels (more channels than pixels) in 32- and 16-wide units.
        (1001, 96, 104),
        (37, 400, 1120),
        (11, 1200, 720),
    ] {
        let s = PointwiseShape { pixels, c_in, c_out };
        let x = values(pixels * c_in, 1);
        let w: Vec<f32> =
            values(c_in * c_out, 2).iter().map(|v| v / (c_in as f32).sqrt()).collect();
        let b = values(c_out, 3);
        let r = values(pixels * c_out, 4);
        for act in [Activation::Linear, Activation::Relu6] {
            for res in [None, Some(&r[..])] {
                let mut want = vec![0.0; pixels * c_out];
                reference::pointwise(s, &x, &w, &b, act, res, &mut want);
                for isa in Isa::available() {
                    let mut got = vec![f32::NAN; pixels * c_out];
                    split_kernels::pointwise(isa, s, &x, &w, &b, act, res, &mut got);
                    assert!(got.iter().all(|v| v.is_finite()), "{isa:?} {s:?}: a value unwritten");
                    assert_close(
                        &got,
                        &want,
                        &format!("{isa:?} {s:?} {act:?} res={}", res.is_some()),
                    );
                }
            }
        }
    }
}

#[test]
fn depthwise_edges_and_strides_equal_reference() {
    for (h, w, c, k, stride) in [
        (1, 1, 8, 3, 1),
        (2, 3, 8, 5, 1),
        (5, 7, 16, 3, 2),
        (7, 7, 24, 5, 2),
        (9, 4, 40, 5, 1),
        (6, 6, 12, 3, 1),
        (11, 13, 32, 3, 2),
        (14, 14, 48, 5, 1),
        // Kernel sizes without a sliding specialisation (1, 7) and strides over 2.
        (9, 9, 16, 1, 1),
        (12, 11, 8, 7, 1),
        (10, 10, 24, 7, 2),
        (13, 13, 16, 3, 3),
        (17, 15, 8, 5, 4),
        (6, 5, 8, 1, 3),
        // Split across threads by output rows.
        (57, 57, 104, 5, 2),
    ] {
        for batch in [1, 2] {
            let s = ConvShape::depthwise(batch, h, w, c, k, stride);
            let x = values(s.input_len(), 5);
            let wt = values(k * k * c, 6);
            let b = values(c, 7);
            for act in [Activation::Linear, Activation::Relu6] {
                let mut want = vec![0.0; s.output_len()];
                reference::depthwise(s, &x, &wt, &b, act, &mut want);
                for isa in Isa::available() {
                    let mut got = vec![f32::NAN; s.output_len()];
                    split_kernels::depthwise(isa, s, &x, &wt, &b, act, &mut got);
                    assert_close(&got, &want, &format!("{isa:?} {s:?} {act:?}"));
                }
            }
        }
    }
}

#[test]
fn stem_edges_equal_reference() {
    for (h, w, c_in, c_out, k, stride) in [
        (1, 1, 3, 8, 3, 2),
        (5, 6, 3, 32, 3, 2),
        (9, 9, 2, 24, 5, 1),
        (8, 5, 3, 6, 3, 2),
        (13, 14, 3, 16, 3, 1),
        // Other kernel sizes and strides; c_out ≡ 4 (mod 8).
        (11, 10, 3, 12, 5, 3),
        (9, 9, 3, 8, 1, 1),
        (15, 13, 2, 20, 7, 4),
        // Interior tiles with a remainder, and split across threads by output rows.
        (121, 119, 3, 32, 3, 2),
    ] {
        for batch in [1, 3] {
            let s = ConvShape { batch, height: h, width: w, c_in, c_out, kernel: k, stride };
            let x = values(s.input_len(), 8);
            let wt = values(k * k * c_in * c_out, 9);
            let b = values(c_out, 10);
            let mut want = vec![0.0; s.output_len()];
            reference::conv_nchw_to_nhwc(s, &x, &wt, &b, Activation::Relu6, &mut want);
            for isa in Isa::available() {
                let mut got = vec![f32::NAN; s.output_len()];
                split_kernels::conv_nchw_to_nhwc(isa, s, &x, &wt, &b, Activation::Relu6, &mut got);
                assert_close(&got, &want, &format!("{isa:?} {s:?}"));
            }
        }
    }
}

#[test]
#[should_panic(expected = "pointwise: weight length")]
fn wrong_weight_length_is_refused() {
    let s = PointwiseShape { pixels: 2, c_in: 8, c_out: 8 };
    let mut out = vec![0.0; 16];
    split_kernels::pointwise(
        Isa::detect(),
        s,
        &[0.0; 16],
        &[0.0; 63],
        &[0.0; 8],
        Activation::Linear,
        None,
        &mut out,
    );
}

#[test]
#[should_panic(expected = "overflows usize")]
fn a_shape_whose_size_wraps_is_refused() {
    // pixels × c_in wraps to 0 (in 64 and in 32 bits): an unchecked product would match the
    // empty input and send the kernel 2^64 floats past it.
    let s = PointwiseShape { pixels: usize::MAX / 2 + 1, c_in: 2, c_out: 8 };
    let mut out = [];
    split_kernels::pointwise(
        Isa::detect(),
        s,
        &[],
        &[0.0; 16],
        &[0.0; 8],
        Activation::Linear,
        None,
        &mut out,
    );
}

#[test]
#[should_panic(expected = "overflows usize")]
fn a_depthwise_weight_size_that_wraps_is_refused() {
    let k = 1 << (usize::BITS / 2);
    let s = ConvShape::depthwise(1, 1, 1, 4, k, 1);
    split_kernels::depthwise_new(Isa::detect(), s, &[0.0; 4], &[], &[0.0; 4], Activation::Linear);
}

#[test]
fn owned_outputs_equal_reference() {
    let s = ConvShape::depthwise(2, 9, 7, 24, 5, 2);
    let (x, w, b) = (values(s.input_len(), 11), values(25 * 24, 12), values(24, 13));
    let mut want = vec![0.0; s.output_len()];
    reference::depthwise(s, &x, &w, &b, Activation::Relu6, &mut want);
    for isa in Isa::available() {
        let got = split_kernels::depthwise_new(isa, s, &x, &w, &b, Activation::Relu6);
        assert_close(&got, &want, &format!("{isa:?} owned depthwise"));
    }
    let p = PointwiseShape { pixels: 31, c_in: 24, c_out: 40 };
    let (x, w, b) = (values(31 * 24, 14), values(24 * 40, 15), values(40, 16));
    let mut want = vec![0.0; 31 * 40];
    reference::pointwise(p, &x, &w, &b, Activation::Linear, None, &mut want);
    for isa in Isa::available() {
        let got = split_kernels::pointwise_new(isa, p, &x, &w, &b, Activation::Linear, None);
        assert_close(&got, &want, &format!("{isa:?} owned pointwise"));
    }
    // Channel counts the vector width does not divide: the reference writes the new vector.
    let s = ConvShape { batch: 1, height: 9, width: 8, c_in: 3, c_out: 6, kernel: 3, stride: 2 };
    let (x, w, b) = (values(s.input_len(), 17), values(9 * 3 * 6, 18), values(6, 19));
    let mut want = vec![0.0; s.output_len()];
    reference::conv_nchw_to_nhwc(s, &x, &w, &b, Activation::Relu6, &mut want);
    for isa in Isa::available() {
        let got = split_kernels::conv_nchw_to_nhwc_new(isa, s, &x, &w, &b, Activation::Relu6);
        assert_close(&got, &want, &format!("{isa:?} owned stem"));
    }
}

#[test]
fn mbconv_bands_equal_the_three_reference_calls() {
    // (batch, h, w, c_in, c_mid, c_out, k, stride, residual): all but the last two have an
    // expanded activation over `BAND_MIN_BYTES`, so they run in bands — stride 1 and 2, k 3
    // and 5, odd sizes (a last band shorter than the others), no expansion, bands of one row
    // (wide rows), batch 2 (parts and bands that meet an image's end) — and the last two are
    // small enough to run as three calls.
    let shapes = [
        (1, 40, 40, 16, 96, 24, 3, 2, false),
        (2, 41, 29, 24, 144, 24, 3, 1, true),
        (1, 33, 31, 24, 144, 40, 5, 2, false),
        (1, 30, 30, 40, 240, 40, 5, 1, true),
        (1, 64, 64, 32, 32, 16, 3, 1, false),
        (1, 5, 200, 8, 256, 8, 5, 1, true),
        (1, 7, 7, 192, 1152, 192, 5, 1, true),
        (2, 9, 9, 16, 48, 24, 3, 2, false),
    ];
    for (batch, height, width, c_in, c_mid, c_out, kernel, stride, residual) in shapes {
        let s = MbConvShape { batch, height, width, c_in, c_mid, c_out, kernel, stride };
        let expand_w: Vec<f32> =
            values(c_in * c_mid, 11).iter().map(|v| v / (c_in as f32).sqrt()).collect();
        let project_w: Vec<f32> =
            values(c_mid * c_out, 12).iter().map(|v| v / (c_mid as f32).sqrt()).collect();
        let (expand_b, dw_w, dw_b, project_b) = (
            values(c_mid, 13),
            values(kernel * kernel * c_mid, 14),
            values(c_mid, 15),
            values(c_out, 16),
        );
        let p = MbConvParams {
            expand: (c_mid != c_in).then_some(Conv { weight: &expand_w, bias: &expand_b }),
            depthwise: Conv { weight: &dw_w, bias: &dw_b },
            project: Conv { weight: &project_w, bias: &project_b },
        };
        let x = values(s.input_len(), 17);
        let mut want = vec![0.0; s.output_len()];
        split_kernels::mbconv(Isa::Reference, s, &x, &p, residual, &mut want);
        for isa in Isa::available() {
            let mut got = vec![f32::NAN; s.output_len()];
            split_kernels::mbconv(isa, s, &x, &p, residual, &mut got);
            assert!(got.iter().all(|v| v.is_finite()), "{isa:?} {s:?}: a value unwritten");
            assert_close(&got, &want, &format!("{isa:?} {s:?} residual={residual}"));
        }
    }
}
