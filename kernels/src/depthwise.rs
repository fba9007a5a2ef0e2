//! Depthwise kxk convolution over NHWC with TF-SAME padding handled by index ranges (no padded
//! copy of the input), bias and ReLU6 in the epilogue.
//!
//! Channels are the vector dimension: NHWC puts a pixel's channels next to each other, so every
//! tap is `NV` contiguous vector loads whatever the stride or width, where an NCHW kernel
//! vectorises along rows only 7 or 14 wide. A tile is `OX` neighbouring output pixels × `NV`
//! channel vectors; each tap's weight vectors are loaded once per tile and reused for the `OX`
//! pixels (for the network's 3×3 and 5×5 kernels, [`interior_slide`] goes further and loads
//! each input pixel once per kernel row). Pixels whose window crosses the left or right edge
//! take a per-tap checked path; rows outside the image are skipped by narrowing the tap range.

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
    /// `s.pad_before().1`, computed once per call.
    pub pad_left: usize,
    /// The output rows this call computes, counted over the batch (`n * out_height + oy`); the
    /// rest belong to other threads.
    pub rows: std::ops::Range<usize>,
    /// The image row `x` starts at: 0 for whole images, a band's first row when the input is a
    /// band of one image's rows (batch 1; see `crate::mbconv`). Only the rows the computed
    /// outputs read need be present.
    pub x_row0: usize,
    /// The output row (over the batch) `out` starts at: 0, or a band's first row.
    pub out_row0: usize,
}

// SAFETY: the pointers are only read, except `out`, and the parallel parts of one call write
// disjoint ranges of it (see `crate::threads`); the buffers outlive the call.
unsafe impl Sync for Args {}

/// Per output row: the image row of tap 0 and the valid tap rows.
struct Row {
    /// Input pointer at the first row present of this image (row `x_row0`, column 0).
    x: *const f32,
    /// The row of tap 0 counted from `x`: `oy * stride - pad_top - x_row0` (may be negative;
    /// the rows of `ky_lo..ky_hi` are present).
    iy0: isize,
    ky_lo: usize,
    ky_hi: usize,
    out: *mut f32,
}

/// `OX` output pixels starting at `ox`, all taps horizontally inside the image.
///
/// # Safety
/// `ox .. ox + OX` are interior columns of `row`; `ch + NV * LANES <= c`.
#[inline(always)]
unsafe fn interior<S: Simd, const OX: usize, const NV: usize>(
    a: &Args,
    row: &Row,
    ox: usize,
    ch: usize,
) {
    let (k, st, c, pl) = (a.s.kernel, a.s.stride, a.s.c_in, a.pad_left);
    // SAFETY: (the whole body) every (iy, ix) read is inside the image by the caller's guarantee and
    // the tap range; every channel index is below `ch + NV * LANES <= c`.
    unsafe {
        let mut acc = [[S::splat(0.0); NV]; OX];
        for px in acc.iter_mut() {
            for (v, a_v) in px.iter_mut().enumerate() {
                *a_v = S::load(a.bias.add(ch + v * S::LANES));
            }
        }
        let ix0 = ox * st - pl;
        for ky in row.ky_lo..row.ky_hi {
            let xrow = row.x.offset((row.iy0 + ky as isize) * (a.s.width * c) as isize);
            for kx in 0..k {
                let wp = a.w.add((ky * k + kx) * c + ch);
                let mut wv = [S::splat(0.0); NV];
                for (v, w_v) in wv.iter_mut().enumerate() {
                    *w_v = S::load(wp.add(v * S::LANES));
                }
                for (p, px) in acc.iter_mut().enumerate() {
                    let xp = xrow.add((ix0 + p * st + kx) * c + ch);
                    for (v, a_v) in px.iter_mut().enumerate() {
                        *a_v = S::mul_add(S::load(xp.add(v * S::LANES)), wv[v], *a_v);
                    }
                }
            }
        }
        store::<S, OX, NV>(a, row.out.add(ox * c + ch), acc);
    }
}

/// [`interior`] for a kernel size `K` and stride `ST` known at compile time, sliding along the
/// row: each input pixel of a kernel row is loaded once and feeds every output pixel of the
/// tile whose window covers it, where [`interior`] loads it once per (output pixel, tap). For
/// 5×5 at stride 1 and 8 pixels that is 12 input loads per row and channel vector instead of
/// 40, so the loop is bound by multiply-adds rather than loads.
///
/// # Safety
/// As [`interior`]; `a.s.kernel == K`, `a.s.stride == ST`.
#[inline(always)]
unsafe fn interior_slide<
    S: Simd,
    const OX: usize,
    const NV: usize,
    const K: usize,
    const ST: usize,
>(
    a: &Args,
    row: &Row,
    ox: usize,
    ch: usize,
) {
    let (c, pl) = (a.s.c_in, a.pad_left);
    // SAFETY: (the whole body) as in `interior`: the tile's windows lie inside the image
    // horizontally, `ky_lo..ky_hi` vertically, and channels stay below `ch + NV * LANES`.
    unsafe {
        let mut acc = [[S::splat(0.0); NV]; OX];
        for px in acc.iter_mut() {
            for (v, a_v) in px.iter_mut().enumerate() {
                *a_v = S::load(a.bias.add(ch + v * S::LANES));
            }
        }
        let ix0 = ox * ST - pl;
        for ky in row.ky_lo..row.ky_hi {
            let xrow = row.x.offset((row.iy0 + ky as isize) * (a.s.width * c) as isize);
            let mut wv = [[S::splat(0.0); NV]; K];
            for (kx, w_k) in wv.iter_mut().enumerate() {
                let wp = a.w.add((ky * K + kx) * c + ch);
                for (v, w_v) in w_k.iter_mut().enumerate() {
                    *w_v = S::load(wp.add(v * S::LANES));
                }
            }
            for i in 0..(OX - 1) * ST + K {
                let xp = xrow.add((ix0 + i) * c + ch);
                let mut xv = [S::splat(0.0); NV];
                for (v, x_v) in xv.iter_mut().enumerate() {
                    *x_v = S::load(xp.add(v * S::LANES));
                }
                for (p, px) in acc.iter_mut().enumerate() {
                    // Input `i` is tap `i - p * ST` of output pixel `p`, when that is a tap.
                    let Some(kx) = i.checked_sub(p * ST).filter(|&kx| kx < K) else {
                        continue;
                    };
                    for (v, a_v) in px.iter_mut().enumerate() {
                        *a_v = S::mul_add(xv[v], wv[kx][v], *a_v);
                    }
                }
            }
        }
        store::<S, OX, NV>(a, row.out.add(ox * c + ch), acc);
    }
}

/// One output pixel whose window may cross the left/right edge.
///
/// # Safety
/// `ox` is an output column; `ch + NV * LANES <= c`.
#[inline(always)]
unsafe fn edge<S: Simd, const NV: usize>(a: &Args, row: &Row, ox: usize, ch: usize) {
    let (k, st, c, pl) = (a.s.kernel, a.s.stride, a.s.c_in, a.pad_left as isize);
    // SAFETY: taps with `ix` outside `0..width` are skipped; rows are inside by `ky_lo..ky_hi`.
    unsafe {
        let mut acc = [[S::splat(0.0); NV]; 1];
        for (v, a_v) in acc[0].iter_mut().enumerate() {
            *a_v = S::load(a.bias.add(ch + v * S::LANES));
        }
        for ky in row.ky_lo..row.ky_hi {
            let xrow = row.x.offset((row.iy0 + ky as isize) * (a.s.width * c) as isize);
            for kx in 0..k {
                let ix = (ox * st + kx) as isize - pl;
                if ix < 0 || ix >= a.s.width as isize {
                    continue;
                }
                let wp = a.w.add((ky * k + kx) * c + ch);
                let xp = xrow.add(ix as usize * c + ch);
                for (v, a_v) in acc[0].iter_mut().enumerate() {
                    let w_v = S::load(wp.add(v * S::LANES));
                    *a_v = S::mul_add(S::load(xp.add(v * S::LANES)), w_v, *a_v);
                }
            }
        }
        store::<S, 1, NV>(a, row.out.add(ox * c + ch), acc);
    }
}

/// Epilogue: activation, then one store per vector.
///
/// # Safety
/// `out` valid for `OX` pixels of `c` floats from the tile's first channel.
#[inline(always)]
unsafe fn store<S: Simd, const OX: usize, const NV: usize>(
    a: &Args,
    out: *mut f32,
    acc: [[S::V; NV]; OX],
) {
    let c = a.s.c_in;
    // SAFETY: the caller guarantees the destination.
    unsafe {
        let (lo, hi) = (S::splat(0.0), S::splat(6.0));
        for (p, px) in acc.iter().enumerate() {
            for (v, &a_v) in px.iter().enumerate() {
                let y = match a.act {
                    Activation::Linear => a_v,
                    Activation::Relu6 => S::clamp(a_v, lo, hi),
                };
                S::store(out.add(p * c + v * S::LANES), y);
            }
        }
    }
}

/// One output row for the channel block at `ch` of `NV` vectors.
///
/// # Safety
/// As [`interior`] and [`edge`].
#[inline(always)]
unsafe fn row_block<S: Simd, const OX: usize, const NV: usize>(a: &Args, row: &Row, ch: usize) {
    let ow = a.s.width.div_ceil(a.s.stride);
    let (k, st, w, pl) = (a.s.kernel, a.s.stride, a.s.width, a.pad_left);
    // Interior columns: ox * st >= pl and ox * st - pl + k <= w.
    let lo = pl.div_ceil(st).min(ow);
    let hi = if w + pl >= k { ((w + pl - k) / st + 1).min(ow) } else { 0 }.max(lo);
    // SAFETY: columns below `lo` and from `hi` take the checked path.
    unsafe {
        for ox in 0..lo {
            edge::<S, NV>(a, row, ox, ch);
        }
        let mut ox = lo;
        macro_rules! slide {
            ($k:literal, $st:literal) => {
                while ox + OX <= hi {
                    interior_slide::<S, OX, NV, $k, $st>(a, row, ox, ch);
                    ox += OX;
                }
            };
        }
        match (k, st) {
            (3, 1) => slide!(3, 1),
            (3, 2) => slide!(3, 2),
            (5, 1) => slide!(5, 1),
            (5, 2) => slide!(5, 2),
            _ => {
                while ox + OX <= hi {
                    interior::<S, OX, NV>(a, row, ox, ch);
                    ox += OX;
                }
            }
        }
        while ox < hi {
            interior::<S, 1, NV>(a, row, ox, ch);
            ox += 1;
        }
        for ox in hi..ow {
            edge::<S, NV>(a, row, ox, ch);
        }
    }
}

/// The output rows `a.rows`. The channels must be a multiple of `S::LANES`; `NV <= 4`.
///
/// # Safety
/// Pointers valid for the shape; `c % S::LANES == 0`; `a.rows` inside `batch * out_height`.
#[inline(always)]
pub(crate) unsafe fn run<S: Simd, const OX: usize, const NV: usize>(a: &Args) {
    let s = a.s;
    let (oh, ow) = s.out_hw();
    let pt = s.pad_before().0 as isize;
    let vectors = s.c_in / S::LANES;
    for r in a.rows.clone() {
        let (n, oy) = (r / oh, r % oh);
        {
            let iy0 = (oy * s.stride) as isize - pt;
            let row = Row {
                // SAFETY: image `n` starts inside `x` (`n` is 0 for a band); the output row is
                // inside `out` (the caller guarantees both for `a.rows`).
                x: unsafe { a.x.add(n * s.height * s.width * s.c_in) },
                iy0: iy0 - a.x_row0 as isize,
                ky_lo: (-iy0).max(0) as usize,
                ky_hi: (s.height as isize - iy0).clamp(0, s.kernel as isize) as usize,
                // SAFETY: as above.
                out: unsafe { a.out.add((r - a.out_row0) * ow * s.c_in) },
            };
            let mut v0 = 0;
            while v0 < vectors {
                let nv = NV.min(vectors - v0);
                let ch = v0 * S::LANES;
                // SAFETY: the channel block is inside `c`.
                unsafe {
                    match nv {
                        _ if nv == NV => row_block::<S, OX, NV>(a, &row, ch),
                        1 => row_block::<S, OX, 1>(a, &row, ch),
                        2 => row_block::<S, OX, 2>(a, &row, ch),
                        3 => row_block::<S, OX, 3>(a, &row, ch),
                        _ => unreachable!("NV is at most 4"),
                    }
                }
                v0 += nv;
            }
        }
    }
}
