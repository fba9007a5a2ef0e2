//! [`quant_matmul`](crate::quant_matmul)'s inner loops for `Q4_1` in WebAssembly's 128-bit
//! SIMD: the browser's build (`+simd128`, and relaxed SIMD's fused multiply-add where the module
//! is built with it). The same sums as the portable loops, four lanes at a time: a block's 16
//! packed bytes are one load, split into low and high nibbles and widened to floats in
//! registers. The compiler leaves the portable `Q4_1` loop scalar for wasm (0.5–0.6 GB/s
//! against 1.6–2.5 here, `quant_speed` under Node); `Q8_0` stays on the portable loop, which
//! it does vectorise (3.5 GB/s; explicit SIMD gave 2.6).
//!
//! Safe code: the intrinsics used are safe functions on wasm (there is no run-time feature
//! check to skip: a module built with `+simd128` only instantiates where the engine has it, and
//! one holding relaxed SIMD instructions, the `relaxed-simd` feature's, only where the engine
//! validates those), and every load is `v128_load` through a reference to an array of the
//! right size.

use std::arch::wasm32::*;
use std::ops::Range;

use crate::quant::{QBLOCK, QuantMatrix};

const H: usize = QBLOCK / 2;

/// `a · b + c`: fused under relaxed SIMD, else a multiply and an add.
#[inline(always)]
fn madd(a: v128, b: v128, c: v128) -> v128 {
    // Inlined into the loops below, which the `relaxed-simd` feature compiles with that target
    // feature (a call outside them would not inline: the instruction needs it).
    #[cfg(feature = "relaxed-simd")]
    {
        f32x4_relaxed_madd(a, b, c)
    }
    #[cfg(not(feature = "relaxed-simd"))]
    {
        f32x4_add(f32x4_mul(a, b), c)
    }
}

#[inline(always)]
fn load16(bytes: &[u8; 16]) -> v128 {
    // SAFETY: `bytes` is 16 readable bytes; `v128_load` has no alignment requirement.
    unsafe { v128_load(bytes.as_ptr().cast()) }
}

#[inline(always)]
fn load4(v: &[f32; 4]) -> v128 {
    // SAFETY: 16 readable bytes, as above.
    unsafe { v128_load(v.as_ptr().cast()) }
}

#[inline(always)]
fn quad(x: &[f32; QBLOCK], at: usize) -> v128 {
    load4(x[at..at + 4].try_into().expect("4 values"))
}

/// Sixteen unsigned bytes as four vectors of four floats.
#[inline(always)]
fn u8_to_f32(v: v128) -> [v128; 4] {
    let lo = u16x8_extend_low_u8x16(v);
    let hi = u16x8_extend_high_u8x16(v);
    [
        f32x4_convert_u32x4(u32x4_extend_low_u16x8(lo)),
        f32x4_convert_u32x4(u32x4_extend_high_u16x8(lo)),
        f32x4_convert_u32x4(u32x4_extend_low_u16x8(hi)),
        f32x4_convert_u32x4(u32x4_extend_high_u16x8(hi)),
    ]
}

/// Block `i`'s packed values: the low nibbles (values 0..16) and the high ones (16..32), as
/// floats.
#[inline(always)]
fn nibbles(w: &QuantMatrix, i: usize) -> ([v128; 4], [v128; 4]) {
    let q = load16(w.packed[i * H..(i + 1) * H].try_into().expect("a block"));
    (u8_to_f32(v128_and(q, u8x16_splat(15))), u8_to_f32(u8x16_shr(q, 4)))
}

/// A block's 32 values (`scale · q + min`) as eight vectors.
#[inline(always)]
fn block_values(w: &QuantMatrix, i: usize) -> [v128; 8] {
    let (scale, min) = (f32x4_splat(w.scales[i]), f32x4_splat(w.mins[i]));
    let (low, high) = nibbles(w, i);
    std::array::from_fn(|k| madd(scale, if k < 4 { low[k] } else { high[k - 4] }, min))
}

fn horizontal(v: v128) -> f32 {
    (f32x4_extract_lane::<0>(v) + f32x4_extract_lane::<2>(v))
        + (f32x4_extract_lane::<1>(v) + f32x4_extract_lane::<3>(v))
}

/// One row of a `Q4_1` matrix dotted with one input vector (`x` the whole vector, `sums` its
/// per-block sums, for the minimums): `scale · Σ q·x` per block in four accumulators, the minimums'
/// term beside them.
#[cfg_attr(feature = "relaxed-simd", target_feature(enable = "relaxed-simd"))]
pub(crate) fn row_dot(w: &QuantMatrix, blocks: Range<usize>, x: &[f32], sums: &[f32]) -> f32 {
    let mut acc = [f32x4_splat(0.0); 4];
    let mut offset = 0.0f32;
    for (b, i) in blocks.enumerate() {
        let xb: &[f32; QBLOCK] = x[b * QBLOCK..(b + 1) * QBLOCK].try_into().expect("a block");
        let scale = f32x4_splat(w.scales[i]);
        let (first, second) = nibbles(w, i);
        offset += w.mins[i] * sums[b];
        for k in 0..4 {
            let t = madd(first[k], quad(xb, 4 * k), f32x4_mul(second[k], quad(xb, H + 4 * k)));
            acc[k] = madd(scale, t, acc[k]);
        }
    }
    horizontal(f32x4_add(f32x4_add(acc[0], acc[2]), f32x4_add(acc[1], acc[3]))) + offset
}

/// One row of a `Q4_1` matrix dotted with every input vector of `x` (`[dots.len(), cols]`),
/// each block dequantized once for all of them.
#[cfg_attr(feature = "relaxed-simd", target_feature(enable = "relaxed-simd"))]
pub(crate) fn row_dots(w: &QuantMatrix, blocks: Range<usize>, x: &[f32], dots: &mut [f32]) {
    let mut acc = vec![[f32x4_splat(0.0); 2]; dots.len()];
    for (b, i) in blocks.enumerate() {
        let values = block_values(w, i);
        for (t, a) in acc.iter_mut().enumerate() {
            let xb: &[f32; QBLOCK] =
                x[(t * w.cols + b * QBLOCK)..][..QBLOCK].try_into().expect("a block");
            let mut s0 = f32x4_mul(values[0], quad(xb, 0));
            let mut s1 = f32x4_mul(values[1], quad(xb, 4));
            for k in (2..8).step_by(2) {
                s0 = madd(values[k], quad(xb, 4 * k), s0);
                s1 = madd(values[k + 1], quad(xb, 4 * k + 4), s1);
            }
            a[0] = f32x4_add(a[0], s0);
            a[1] = f32x4_add(a[1], s1);
        }
    }
    for (d, a) in dots.iter_mut().zip(&acc) {
        *d = horizontal(f32x4_add(a[0], a[1]));
    }
}
