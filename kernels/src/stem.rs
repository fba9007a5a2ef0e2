//! The stem: a dense kxk convolution reading the NCHW network input and writing NHWC, so the
//! layout change costs nothing, with bias and ReLU6 fused. Weights are `[k, k, c_in, c_out]`:
//! each (tap, input channel) is one row of `c_out` contiguous values, loaded as `NV` vectors and
//! multiplied by one broadcast input value, and reused for `OX` neighbouring output pixels.
//! With 3 input channels and 32 outputs the whole weight (3.4 KiB) stays in L1.

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
    /// The output rows this call computes, counted over the batch (`n * out_height + oy`).
    pub rows: std::ops::Range<usize>,
}

// SAFETY: the pointers are only read, except `out`, and the parallel parts of one call write
// disjoint ranges of it (see `crate::threads`); the buffers outlive the call.
unsafe impl Sync for Args {}

/// `OX` neighbouring output pixels from column `ox` for the output-channel block at `col`:
/// each tap's `NV` weight vectors are loaded once and used for all `OX` pixels.
///
/// # Safety
/// Pointers valid for the shape; `col + NV * LANES <= c_out`; image `n`, row `oy`; taps
/// `kx_lo..kx_hi` and `ky_lo..ky_hi` are inside the image for every one of the `OX` pixels.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn tile<S: Simd, const OX: usize, const NV: usize>(
    a: &Args,
    n: usize,
    oy: usize,
    ox: usize,
    col: usize,
    (ky_lo, ky_hi): (usize, usize),
    (kx_lo, kx_hi): (usize, usize),
) {
    let s = a.s;
    let (oh, ow) = s.out_hw();
    let (pt, pl) = s.pad_before();
    let (k, st, plane) = (s.kernel, s.stride, s.height * s.width);
    // SAFETY: (the whole body) every read is at a tap inside the image by the caller's ranges;
    // channel and output indices are inside the shape.
    unsafe {
        let mut acc = [[S::splat(0.0); NV]; OX];
        for px in acc.iter_mut() {
            for (v, a_v) in px.iter_mut().enumerate() {
                *a_v = S::load(a.bias.add(col + v * S::LANES));
            }
        }
        let img = a.x.add(n * s.c_in * plane);
        for ky in ky_lo..ky_hi {
            let iy = oy * st + ky - pt;
            for kx in kx_lo..kx_hi {
                for ci in 0..s.c_in {
                    let wp = a.w.add(((ky * k + kx) * s.c_in + ci) * s.c_out + col);
                    let mut wv = [S::splat(0.0); NV];
                    for (v, w_v) in wv.iter_mut().enumerate() {
                        *w_v = S::load(wp.add(v * S::LANES));
                    }
                    let xrow = img.add(ci * plane + iy * s.width);
                    for (p, px) in acc.iter_mut().enumerate() {
                        let xv = S::splat(*xrow.add((ox + p) * st + kx - pl));
                        for (v, a_v) in px.iter_mut().enumerate() {
                            *a_v = S::mul_add(xv, wv[v], *a_v);
                        }
                    }
                }
            }
        }
        let (lo, hi) = (S::splat(0.0), S::splat(6.0));
        for (p, px) in acc.iter().enumerate() {
            let out = a.out.add(((n * oh + oy) * ow + ox + p) * s.c_out + col);
            for (v, &a_v) in px.iter().enumerate() {
                let y = match a.act {
                    Activation::Linear => a_v,
                    Activation::Relu6 => S::clamp(a_v, lo, hi),
                };
                S::store(out.add(v * S::LANES), y);
            }
        }
    }
}

/// One output row for the output-channel block at `col`: edge pixels one at a time with
/// their taps narrowed, interior pixels in tiles of `OX`.
///
/// # Safety
/// As [`tile`], for every column of the row.
#[inline(always)]
unsafe fn row_block<S: Simd, const OX: usize, const NV: usize>(
    a: &Args,
    n: usize,
    oy: usize,
    col: usize,
) {
    let s = a.s;
    let ow = s.out_hw().1;
    let (pt, pl) = s.pad_before();
    let (k, st) = (s.kernel, s.stride);
    let iy0 = (oy * st) as isize - pt as isize;
    let ky = ((-iy0).max(0) as usize, (s.height as isize - iy0).clamp(0, k as isize) as usize);
    let taps = |ox: usize| {
        let ix0 = (ox * st) as isize - pl as isize;
        ((-ix0).max(0) as usize, (s.width as isize - ix0).clamp(0, k as isize) as usize)
    };
    // Interior columns: ox * st >= pl and ox * st - pl + k <= width.
    let lo = pl.div_ceil(st).min(ow);
    let hi = if s.width + pl >= k { ((s.width + pl - k) / st + 1).min(ow) } else { 0 }.max(lo);
    // SAFETY: interior tiles take every tap column; the others take `taps(ox)`.
    unsafe {
        for ox in (0..lo).chain(hi..ow) {
            tile::<S, 1, NV>(a, n, oy, ox, col, ky, taps(ox));
        }
        let mut ox = lo;
        while ox + OX <= hi {
            tile::<S, OX, NV>(a, n, oy, ox, col, ky, (0, k));
            ox += OX;
        }
        for ox in ox..hi {
            tile::<S, 1, NV>(a, n, oy, ox, col, ky, (0, k));
        }
    }
}

/// The output rows `a.rows`. `c_out` must be a multiple of `S::LANES`.
///
/// # Safety
/// Pointers valid for the shape; `c_out % S::LANES == 0`; `a.rows` inside `batch * out_height`.
#[inline(always)]
pub(crate) unsafe fn run<S: Simd, const OX: usize, const NV: usize>(a: &Args) {
    let oh = a.s.out_hw().0;
    let vectors = a.s.c_out / S::LANES;
    for r in a.rows.clone() {
        let (n, oy) = (r / oh, r % oh);
        let mut v0 = 0;
        while v0 < vectors {
            let nv = NV.min(vectors - v0);
            let col = v0 * S::LANES;
            // SAFETY: the block is inside `c_out`; the row inside the output.
            unsafe {
                match nv {
                    _ if nv == NV => row_block::<S, OX, NV>(a, n, oy, col),
                    1 => row_block::<S, OX, 1>(a, n, oy, col),
                    2 => row_block::<S, OX, 2>(a, n, oy, col),
                    3 => row_block::<S, OX, 3>(a, n, oy, col),
                    _ => unreachable!("NV is at most 4"),
                }
            }
            v0 += nv;
        }
    }
}
