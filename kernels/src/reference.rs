//! Scalar reference implementations: the definition every fast kernel is tested against, and
//! what runs for shapes the SIMD kernels do not take (channels not a multiple of the vector
//! width). Written for clarity, one output value at a time.

use crate::shape::{Activation, ConvShape, PointwiseShape};

pub(crate) fn activate(v: f32, act: Activation) -> f32 {
    match act {
        Activation::Linear => v,
        Activation::Relu6 => v.clamp(0.0, 6.0),
    }
}

/// 1x1 convolution: `out[p, o] = act(bias[o] + sum_i x[p, i] * w[i, o]) (+ residual[p, o])`,
/// `w` in the panel layout ([`PointwiseShape::weight_index`]).
pub fn pointwise(
    s: PointwiseShape,
    x: &[f32],
    weight: &[f32],
    bias: &[f32],
    act: Activation,
    residual: Option<&[f32]>,
    out: &mut [f32],
) {
    for p in 0..s.pixels {
        for o in 0..s.c_out {
            let mut acc = bias[o];
            for i in 0..s.c_in {
                acc += x[p * s.c_in + i] * weight[s.weight_index(i, o)];
            }
            let v = activate(acc, act);
            out[p * s.c_out + o] = v + residual.map_or(0.0, |r| r[p * s.c_out + o]);
        }
    }
}

/// Depthwise kxk over NHWC: `weight` is `[k, k, c]`.
pub fn depthwise(
    s: ConvShape,
    x: &[f32],
    weight: &[f32],
    bias: &[f32],
    act: Activation,
    out: &mut [f32],
) {
    let (oh, ow) = s.out_hw();
    let (pt, pl) = s.pad_before();
    let c = s.c_in;
    for n in 0..s.batch {
        for oy in 0..oh {
            for ox in 0..ow {
                for ch in 0..c {
                    let mut acc = bias[ch];
                    for ky in 0..s.kernel {
                        for kx in 0..s.kernel {
                            let iy = (oy * s.stride + ky) as isize - pt as isize;
                            let ix = (ox * s.stride + kx) as isize - pl as isize;
                            if iy < 0 || ix < 0 || iy >= s.height as isize || ix >= s.width as isize
                            {
                                continue;
                            }
                            let xi =
                                ((n * s.height + iy as usize) * s.width + ix as usize) * c + ch;
                            acc += x[xi] * weight[(ky * s.kernel + kx) * c + ch];
                        }
                    }
                    out[((n * oh + oy) * ow + ox) * c + ch] = activate(acc, act);
                }
            }
        }
    }
}

/// Dense kxk convolution from NCHW input to NHWC output: `weight` is `[k, k, c_in, c_out]`.
pub fn conv_nchw_to_nhwc(
    s: ConvShape,
    x: &[f32],
    weight: &[f32],
    bias: &[f32],
    act: Activation,
    out: &mut [f32],
) {
    let (oh, ow) = s.out_hw();
    let (pt, pl) = s.pad_before();
    for n in 0..s.batch {
        for oy in 0..oh {
            for ox in 0..ow {
                for o in 0..s.c_out {
                    let mut acc = bias[o];
                    for ky in 0..s.kernel {
                        for kx in 0..s.kernel {
                            let iy = (oy * s.stride + ky) as isize - pt as isize;
                            let ix = (ox * s.stride + kx) as isize - pl as isize;
                            if iy < 0 || ix < 0 || iy >= s.height as isize || ix >= s.width as isize
                            {
                                continue;
                            }
                            for i in 0..s.c_in {
                                let xi = ((n * s.c_in + i) * s.height + iy as usize) * s.width
                                    + ix as usize;
                                let wi = ((ky * s.kernel + kx) * s.c_in + i) * s.c_out + o;
                                acc += x[xi] * weight[wi];
                            }
                        }
                    }
                    out[((n * oh + oy) * ow + ox) * s.c_out + o] = activate(acc, act);
                }
            }
        }
    }
}

/// Deterministic values in [-1, 1) from `seed` (xorshift): inputs for the tests that compare
/// the kernels with this module, reproducible when one fails.
pub fn test_values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// Panic unless `got` equals `want` within 1e-5, relative to the value (absolute below 1).
pub fn assert_close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= 1e-5 * w.abs().max(1.0), "{what}: [{i}] {g} vs {w}");
    }
}
