//! 1x1 convolution over NHWC as one register-tiled GEMM, `[pixels, c_in] x [c_in, c_out]`, with
//! bias, ReLU6 and the residual add applied to the accumulators before the single store: no
//! zero-filled output, no separate bias/clamp/add passes over memory.
//!
//! A tile is `MR` pixels × `NV` vectors of output channels, held in `MR * NV` registers while
//! the whole `c_in` reduction runs; each step loads `NV` vectors of one weight row (contiguous in
//! `[c_in, c_out]`) and broadcasts one input value per pixel. The weight panel of a column block
//! (`c_in × NV * LANES` floats) stays in L2 while every pixel block passes over it.
//!
//! The weight comes in panels of [`crate::PANEL`] output channels (see
//! [`PointwiseShape`]): a column block reads `NV * LANES / PANEL` contiguous streams, which
//! the prefetchers follow when the weights are cold. Even so, a layer with few pixels (7×7)
//! spends a third of its time waiting for weights that come from L3 or memory in every
//! forward, so while one column block runs, its tiles also prefetch the next block's panels
//! (one cache line per reduction step), which are contiguous in the panel layout.

use crate::shape::{Activation, PointwiseShape};
use crate::simd::Simd;

/// Raw operands of one call; lengths were checked by the safe entry point.
#[derive(Clone)]
pub(crate) struct Args {
    pub s: PointwiseShape,
    pub x: *const f32,
    pub w: *const f32,
    pub bias: *const f32,
    pub act: Activation,
    pub residual: Option<*const f32>,
    pub out: *mut f32,
    /// The output channels this call computes (multiples of the lanes); the rest belong to
    /// other threads.
    pub cols: std::ops::Range<usize>,
}

// SAFETY: the pointers are only read, except `out`, and the parallel parts of one call write
// disjoint ranges of it (see `crate::threads`); the buffers outlive the call.
unsafe impl Sync for Args {}

impl Args {
    /// The same product restricted to pixels `p0..p1`.
    pub(crate) fn rows(&self, p0: usize, p1: usize) -> Args {
        let (k, n) = (self.s.c_in, self.s.c_out);
        // SAFETY: `p0 <= p1 <= pixels`, so every offset stays inside its buffer.
        unsafe {
            Args {
                s: PointwiseShape { pixels: p1 - p0, ..self.s },
                x: self.x.add(p0 * k),
                w: self.w,
                bias: self.bias,
                act: self.act,
                residual: self.residual.map(|r| r.add(p0 * n)),
                out: self.out.add(p0 * n),
                cols: self.cols.clone(),
            }
        }
    }
}

/// Cache lines still to prefetch: the next column block's weights.
struct Prefetch {
    next: *const f32,
    end: *const f32,
}

/// Floats per cache line (64 bytes on every target this prefetches on).
const LINE: usize = 16;

impl Prefetch {
    /// The weights of output columns `c0..c1` (a whole number of panels: contiguous), or
    /// nothing when the layout is one panel (row-major: not contiguous per block).
    fn columns(a: &Args, c0: usize, c1: usize) -> Prefetch {
        let pw = a.s.panel_width();
        let (start, end) = if c0 < c1 && pw < a.s.c_out {
            (c0 / pw * pw * a.s.c_in, c1.div_ceil(pw) * pw * a.s.c_in)
        } else {
            (0, 0)
        };
        // Never dereferenced: only handed to `S::prefetch`, which does not fault.
        Prefetch { next: a.w.wrapping_add(start), end: a.w.wrapping_add(end) }
    }
}

/// One `R × NV` tile at pixel `p0`, output vector column `v0`.
///
/// # Safety
/// `p0 + R <= pixels`, `(v0 + NV) * LANES <= c_out`, and every pointer in `a` is valid for the
/// shape.
#[inline(always)]
unsafe fn tile<S: Simd, const R: usize, const NV: usize>(
    a: &Args,
    p0: usize,
    v0: usize,
    pf: &mut Prefetch,
) {
    let (k, n) = (a.s.c_in, a.s.c_out);
    let col = v0 * S::LANES;
    let pw = a.s.panel_width();
    // Offset of each vector's first weight (input channel 0) in the panel layout; a vector
    // never straddles two panels (`pw` is a multiple of the lanes).
    let offsets: [usize; NV] = std::array::from_fn(|v| a.s.weight_index(0, col + v * S::LANES));
    // SAFETY: (the whole body) indices stay inside the ranges the caller guarantees above.
    unsafe {
        let mut acc = [[S::splat(0.0); NV]; R];
        for row in acc.iter_mut() {
            for (v, a_v) in row.iter_mut().enumerate() {
                *a_v = S::load(a.bias.add(col + v * S::LANES));
            }
        }
        let xr = a.x.add(p0 * k);
        let mut wrow = a.w;
        for kk in 0..k {
            if pf.next < pf.end {
                S::prefetch(pf.next);
                pf.next = pf.next.wrapping_add(LINE);
            }
            let mut b = [S::splat(0.0); NV];
            for (v, b_v) in b.iter_mut().enumerate() {
                *b_v = S::load(wrow.add(offsets[v]));
            }
            for (r, row) in acc.iter_mut().enumerate() {
                let xv = S::splat(*xr.add(r * k + kk));
                for (v, a_v) in row.iter_mut().enumerate() {
                    *a_v = S::mul_add(xv, b[v], *a_v);
                }
            }
            wrow = wrow.add(pw);
        }
        let (lo, hi) = (S::splat(0.0), S::splat(6.0));
        for (r, row) in acc.iter().enumerate() {
            let o = (p0 + r) * n + col;
            for (v, &a_v) in row.iter().enumerate() {
                let mut y = match a.act {
                    Activation::Linear => a_v,
                    Activation::Relu6 => S::clamp(a_v, lo, hi),
                };
                if let Some(res) = a.residual {
                    y = S::add(y, S::load(res.add(o + v * S::LANES)));
                }
                S::store(a.out.add(o + v * S::LANES), y);
            }
        }
    }
}

/// Every pixel block for one column block of `NV` vectors.
///
/// # Safety
/// As [`tile`], for all pixels.
#[inline(always)]
unsafe fn column<S: Simd, const MR: usize, const NV: usize>(a: &Args, v0: usize) {
    let full = a.s.pixels / MR * MR;
    let next = (v0 + NV) * S::LANES;
    let pf = &mut Prefetch::columns(a, next, (next + NV * S::LANES).min(a.cols.end));
    // SAFETY: every tile lies inside `pixels` and the column block inside `c_out`.
    unsafe {
        let mut p = 0;
        while p < full {
            tile::<S, MR, NV>(a, p, v0, pf);
            p += MR;
        }
        match a.s.pixels - full {
            0 => {}
            1 => tile::<S, 1, NV>(a, full, v0, pf),
            2 => tile::<S, 2, NV>(a, full, v0, pf),
            3 => tile::<S, 3, NV>(a, full, v0, pf),
            4 => tile::<S, 4, NV>(a, full, v0, pf),
            5 => tile::<S, 5, NV>(a, full, v0, pf),
            6 => tile::<S, 6, NV>(a, full, v0, pf),
            7 => tile::<S, 7, NV>(a, full, v0, pf),
            _ => unreachable!("MR is at most 8"),
        }
    }
}

/// The whole product. `c_out` must be a multiple of `S::LANES`, and so must the panel width;
/// `MR <= 8`, `NV <= 4`.
///
/// # Safety
/// Pointers valid for the shape; `c_out % S::LANES == 0`; `a.cols` inside `0..c_out` at
/// multiples of `S::LANES`.
#[inline(always)]
pub(crate) unsafe fn run<S: Simd, const MR: usize, const NV: usize>(a: &Args) {
    let vectors = a.cols.end / S::LANES;
    let mut v0 = a.cols.start / S::LANES;
    // SAFETY: each column block is inside `c_out`.
    unsafe {
        while v0 < vectors {
            let nv = NV.min(vectors - v0);
            match nv {
                _ if nv == NV => column::<S, MR, NV>(a, v0),
                1 => column::<S, MR, 1>(a, v0),
                2 => column::<S, MR, 2>(a, v0),
                3 => column::<S, MR, 3>(a, v0),
                _ => unreachable!("NV is at most 4"),
            }
            v0 += nv;
        }
    }
}
