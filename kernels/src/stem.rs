//! The stem: a dense kxk convolution reading the NCHW network input and writing NHWC, so the
//! layout change costs nothing, with bias and ReLU6 fused. Weights are `[k, k, c_in, c_out]`:
//! each (tap, input channel) is one row of `c_out` contiguous values, loaded as `NV` vectors and
//! multiplied by one broadcast input value. With 3 input channels and 32 outputs the whole
//! weight (3.4 KiB) stays in L1.

use crate::shape::{Activation, ConvShape};
use crate::simd::Simd;

/// Raw operands of one call; lengths were checked by the safe entry point.
#[derive(Clone)]
pub(crate) struct Args {
    pub s: ConvShape,
    pub x: *const f32,
    pub w: *const f32,
    pub bias: *const f32,
    pub act: Activation,
    pub out: *mut f32,
    /// The output channels this call computes (multiples of the lanes).
    pub channels: std::ops::Range<usize>,
}

// SAFETY: the pointers are only read, except `out`, and the parallel parts of one call write
// disjoint ranges of it (see `crate::threads`); the buffers outlive the call.
unsafe impl Sync for Args {}

/// All output pixels for the output-channel block at vector `v0`.
///
/// # Safety
/// Pointers valid for the shape; `(v0 + NV) * LANES <= c_out`.
#[inline(always)]
unsafe fn block<S: Simd, const NV: usize>(a: &Args, v0: usize) {
    let s = a.s;
    let (oh, ow) = s.out_hw();
    let (pt, pl) = s.pad_before();
    let (k, st, plane) = (s.kernel, s.stride, s.height * s.width);
    let col = v0 * S::LANES;
    // SAFETY: broadcasting a constant has no precondition beyond the ISA, which the caller has.
    let (lo, hi) = unsafe { (S::splat(0.0), S::splat(6.0)) };
    for n in 0..s.batch {
        for oy in 0..oh {
            let iy0 = (oy * st) as isize - pt as isize;
            let ky_lo = (-iy0).max(0) as usize;
            let ky_hi = (s.height as isize - iy0).clamp(0, k as isize) as usize;
            for ox in 0..ow {
                let ix0 = (ox * st) as isize - pl as isize;
                let kx_lo = (-ix0).max(0) as usize;
                let kx_hi = (s.width as isize - ix0).clamp(0, k as isize) as usize;
                // SAFETY: taps are limited to rows `ky_lo..ky_hi` and columns `kx_lo..kx_hi`
                // inside the image; channel and output indices are inside the shape.
                unsafe {
                    let mut acc = [S::splat(0.0); NV];
                    for (v, a_v) in acc.iter_mut().enumerate() {
                        *a_v = S::load(a.bias.add(col + v * S::LANES));
                    }
                    let img = a.x.add(n * s.c_in * plane);
                    for ky in ky_lo..ky_hi {
                        let iy = (iy0 + ky as isize) as usize;
                        for kx in kx_lo..kx_hi {
                            let ix = (ix0 + kx as isize) as usize;
                            for ci in 0..s.c_in {
                                let xv = S::splat(*img.add(ci * plane + iy * s.width + ix));
                                let wp = a.w.add(((ky * k + kx) * s.c_in + ci) * s.c_out + col);
                                for (v, a_v) in acc.iter_mut().enumerate() {
                                    *a_v = S::mul_add(xv, S::load(wp.add(v * S::LANES)), *a_v);
                                }
                            }
                        }
                    }
                    let out = a.out.add(((n * oh + oy) * ow + ox) * s.c_out + col);
                    for (v, &a_v) in acc.iter().enumerate() {
                        let y = match a.act {
                            Activation::Linear => a_v,
                            Activation::Relu6 => S::clamp(a_v, lo, hi),
                        };
                        S::store(out.add(v * S::LANES), y);
                    }
                }
            }
        }
    }
}

/// The whole convolution. `c_out` must be a multiple of `S::LANES`.
///
/// # Safety
/// Pointers valid for the shape; `c_out % S::LANES == 0`.
#[inline(always)]
pub(crate) unsafe fn run<S: Simd, const NV: usize>(a: &Args) {
    let vectors = a.channels.end / S::LANES;
    let mut v0 = a.channels.start / S::LANES;
    while v0 < vectors {
        let nv = NV.min(vectors - v0);
        // SAFETY: the block is inside `c_out`.
        unsafe {
            match nv {
                _ if nv == NV => block::<S, NV>(a, v0),
                1 => block::<S, 1>(a, v0),
                2 => block::<S, 2>(a, v0),
                3 => block::<S, 3>(a, v0),
                _ => unreachable!("NV is at most 4"),
            }
        }
        v0 += nv;
    }
}
