//! Quantized matrix × vector products with the vector quantized too: 8 bits per value, a scale
//! per block of 32, and integer dot products inside each block (what llama.cpp does).
//!
//! [`quant_matmul`](crate::quant_matmul) turns each weight into a float before it multiplies;
//! on one AVX2 core that unpacking, not memory, bounds a decode step (docs/llm.md, "Speed").
//! Here a block's 32 products are one `maddubs` (unsigned 4-bit or sign-adjusted 8-bit weights
//! times signed 8-bit values, summed in pairs) and one `madd` (pairs of pairs), or one
//! `vpdpbusd` where the machine has AVX-512 VNNI, exact in integers; only their sums of four
//! become floats, scaled by both blocks' scales:
//!
//! - `Q4_1`: `Σ w·x ≈ dw·dx · Σ q·qx + min · Σ x` (`Σ x` of the unquantized vector);
//! - `Q8_0`: `Σ w·x ≈ dw·dx · Σ q·qx`.
//!
//! The vector's quantization (`qx = round(x / dx)`, `dx = max |x| / 127` per block) is the one
//! approximation (up to half a step of 1/127 of the block's largest value per value): through
//! SmolLM2's 30 blocks the logits move by up to 2 and a greedy answer may part from the
//! exact kernels' after a few tokens (docs/llm.md, "8-bit activations"). Every instruction set
//! gives the same bits: the integer sums are exact and the float steps run in one order (eight
//! lanes, each `lane = sum·scale + lane` with one rounding, then summed pairwise).

use crate::quant::{
    QBLOCK, QuantFormat, QuantMatrix, QuantShapeError, assert_runs_here, check_lengths, parts_for,
};
use crate::threads;

/// Lanes of the float accumulator: the eight 32-bit lanes of an AVX2 register, each the sum of
/// four adjacent products of a block.
const LANES: usize = 8;

/// One input vector quantized per block.
struct Q8Vector {
    /// `round(x / dx)` per value.
    q: Vec<i8>,
    /// `dx` per block.
    scales: Vec<f32>,
    /// `Σ x` per block, of the values before quantization.
    sums: Vec<f32>,
}

fn quantize(x: &[f32]) -> Q8Vector {
    let blocks = x.len() / QBLOCK;
    let mut v = Q8Vector {
        q: vec![0; x.len()],
        scales: Vec::with_capacity(blocks),
        sums: Vec::with_capacity(blocks),
    };
    for (xb, qb) in x.chunks_exact(QBLOCK).zip(v.q.chunks_exact_mut(QBLOCK)) {
        let max = xb.iter().fold(0.0f32, |m, a| m.max(a.abs()));
        let scale = max / 127.0;
        let inverse = if scale > 0.0 { 1.0 / scale } else { 0.0 };
        for (q, a) in qb.iter_mut().zip(xb) {
            // |a · inverse| ≤ 127 up to rounding, and `as` saturates: never out of range.
            *q = (a * inverse).round() as i8;
        }
        v.scales.push(scale);
        v.sums.push(xb.iter().sum());
    }
    v
}

/// [`quant_matmul`](crate::quant_matmul) with each input vector quantized to 8 bits per value
/// (module docs): `out[t, r] ≈ Σ_c w[r, c] · x[t, c]`, `x: [tokens, cols]`, `out: [tokens,
/// rows]`. Rows are split across the kernels' threads for large matrices.
///
/// # Panics
/// When `isa` cannot run on this machine.
pub fn quant_matmul_q8(
    isa: crate::Isa,
    w: &QuantMatrix,
    x: &[f32],
    tokens: usize,
    out: &mut [f32],
) -> Result<(), QuantShapeError> {
    w.check()?;
    check_lengths(w, x, out, tokens)?;
    if tokens == 0 || w.rows == 0 {
        return Ok(());
    }
    assert_runs_here(isa);
    #[cfg(target_arch = "x86_64")]
    let vnni = matches!(isa, crate::Isa::Avx512 | crate::Isa::Avx512Zmm) && avx2::has_vnni();
    let bpr = w.cols / QBLOCK;
    // One vector at a time: the rows split as for a product of one.
    let parts = parts_for(w, 1);
    for (xt, ot) in x.chunks_exact(w.cols).zip(out.chunks_exact_mut(w.rows)) {
        let v = quantize(xt);
        let chunks = split_rows(ot, parts);
        threads::run_parts(parts, |p| {
            let rows = threads::range(w.rows, parts, p);
            let mut dst = chunks[p].lock().unwrap_or_else(|e| e.into_inner());
            for (o, r) in dst.iter_mut().zip(rows) {
                let blocks = r * bpr..(r + 1) * bpr;
                *o = match isa {
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: AVX2 and FMA were asserted above, VNNI detected.
                    crate::Isa::Avx2 | crate::Isa::Avx512 | crate::Isa::Avx512Zmm => unsafe {
                        if vnni {
                            avx2::row_dot_vnni(w, blocks, &v)
                        } else {
                            avx2::row_dot(w, blocks, &v)
                        }
                    },
                    _ => row_dot_portable(w, blocks, &v),
                };
            }
        });
    }
    Ok(())
}

/// `out` cut into the parts' disjoint row ranges, each behind a lock of its own (taken once per
/// part, by the one thread that runs it).
fn split_rows(out: &mut [f32], parts: usize) -> Vec<std::sync::Mutex<&mut [f32]>> {
    let rows = out.len();
    let mut rest = out;
    let mut chunks = Vec::with_capacity(parts);
    for p in 0..parts {
        let (head, tail) = rest.split_at_mut(threads::range(rows, parts, p).len());
        chunks.push(std::sync::Mutex::new(head));
        rest = tail;
    }
    chunks
}

/// The two accumulators added lane by lane, then their lanes and the `min` terms' lanes each
/// summed pairwise, as [`crate::quant`]'s accumulators are.
fn finish(lanes: [[f32; LANES]; 2], offsets: [f32; LANES]) -> f32 {
    let pairwise = |mut a: [f32; LANES]| {
        let mut width = LANES;
        while width > 1 {
            width /= 2;
            for j in 0..width {
                a[j] += a[j + width];
            }
        }
        a[0]
    };
    let both = std::array::from_fn(|j| lanes[0][j] + lanes[1][j]);
    pairwise(both) + pairwise(offsets)
}

/// The definition every instruction set's loop gives the bits of: per block, lane `k` is the
/// exact integer sum of products `4k .. 4k + 4`, times the two scales' product, added with one
/// rounding to that lane of one of two accumulators (even blocks, odd blocks: two chains of
/// additions the processor can overlap); the `min` terms of block `b` go to lane `b % 8` of a
/// third. The two are added lane by lane, then everything summed pairwise.
fn row_dot_portable(w: &QuantMatrix, blocks: std::ops::Range<usize>, v: &Q8Vector) -> f32 {
    let mut lanes = [[0.0f32; LANES]; 2];
    let mut offsets = [0.0f32; LANES];
    let pb = w.format.packed_bytes();
    let first = blocks.start;
    for (k, b) in blocks.enumerate() {
        let packed = &w.packed[b * pb..(b + 1) * pb];
        let qx = &v.q[k * QBLOCK..(k + 1) * QBLOCK];
        let weight = |j: usize| -> i32 {
            match w.format {
                QuantFormat::Q4_1 => {
                    i32::from((packed[j % (QBLOCK / 2)] >> (4 * (j / (QBLOCK / 2)))) & 15)
                }
                QuantFormat::Q8_0 => i32::from(packed[j] as i8),
            }
        };
        let scale = w.scales[b] * v.scales[k];
        for (lane, acc) in lanes[k % 2].iter_mut().enumerate() {
            let sum: i32 = (4 * lane..4 * lane + 4).map(|j| weight(j) * i32::from(qx[j])).sum();
            *acc = (sum as f32).mul_add(scale, *acc);
        }
        if w.format == QuantFormat::Q4_1 {
            offsets[(b - first) % LANES] =
                w.mins[b].mul_add(v.sums[k], offsets[(b - first) % LANES]);
        }
    }
    finish(lanes, offsets)
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;
    use std::ops::Range;

    use super::{LANES, Q8Vector, finish};
    use crate::quant::{QBLOCK, QuantFormat, QuantMatrix};

    /// Whether the machine has AVX-512 VNNI (with VL): `vpdpbusd` then sums four products of a
    /// lane in one instruction instead of `maddubs` + `madd`. The sums are exact either way
    /// (no pair of products here comes near `maddubs`' saturation: at most 2 · 128 · 127).
    pub(super) fn has_vnni() -> bool {
        is_x86_feature_detected!("avx512vnni") && is_x86_feature_detected!("avx512vl")
    }

    /// Per 32-bit lane, the sum of the four products of unsigned bytes `a` and signed bytes `b`.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn dot4_avx2(a: __m256i, b: __m256i) -> __m256i {
        _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1))
    }

    /// [`dot4_avx2`] in one instruction.
    #[inline]
    #[target_feature(enable = "avx2,avx512vnni,avx512vl")]
    fn dot4_vnni(a: __m256i, b: __m256i) -> __m256i {
        _mm256_dpbusd_epi32(_mm256_setzero_si256(), a, b)
    }

    /// The row loop for one format (`Q4` a const, so each format's loop has no branch on it) and
    /// one way of summing four products; `$features` must include what `$dot4` needs.
    macro_rules! row_dot {
        ($entry:ident, $inner:ident, $features:literal, $dot4:ident) => {
            /// [`super::row_dot_portable`]'s bits: a block's 32 weights in one register (a
            /// `Q4_1` block's 16 bytes split into low and high nibbles, in value order), four
            /// products a lane summed exactly, the blocks' scale products computed eight at a
            /// time.
            ///
            /// # Safety
            /// The machine must have `$features`; `blocks` must lie within `w` and `v` must hold
            /// as many blocks (the caller checked `w` and quantized a vector of `w.cols` values).
            #[target_feature(enable = $features)]
            pub(super) unsafe fn $entry(
                w: &QuantMatrix,
                blocks: Range<usize>,
                v: &Q8Vector,
            ) -> f32 {
                // SAFETY: the same contract, and the same features enabled.
                unsafe {
                    match w.format {
                        QuantFormat::Q4_1 => $inner::<true>(w, blocks, v),
                        QuantFormat::Q8_0 => $inner::<false>(w, blocks, v),
                    }
                }
            }

            #[target_feature(enable = $features)]
            unsafe fn $inner<const Q4: bool>(
                w: &QuantMatrix,
                blocks: Range<usize>,
                v: &Q8Vector,
            ) -> f32 {
                let (n, first) = (blocks.len(), blocks.start);
                let pb = w.format.packed_bytes();
                // Every slice checked once here; the loop's pointer offsets stay inside them.
                let packed = &w.packed[first * pb..(first + n) * pb];
                let scales = &w.scales[blocks.clone()];
                let (xq, xs) = (&v.q[..n * QBLOCK], &v.scales[..n]);
                // Block `b` of the row: its eight lane sums as floats.
                let block = |b: usize| -> __m256 {
                    // SAFETY: `b < n`: 32 bytes of `xq` and `pb` of `packed` from these offsets.
                    let (x, p) = unsafe {
                        (
                            _mm256_loadu_si256(xq.as_ptr().add(b * QBLOCK).cast()),
                            packed.as_ptr().add(b * pb),
                        )
                    };
                    let sums = if Q4 {
                        // SAFETY: a `Q4_1` block packs 16 bytes.
                        let bytes = unsafe { _mm_loadu_si128(p.cast()) };
                        let nibbles = _mm256_and_si256(
                            _mm256_set_m128i(_mm_srli_epi16::<4>(bytes), bytes),
                            _mm256_set1_epi8(15),
                        );
                        $dot4(nibbles, x)
                    } else {
                        // SAFETY: a `Q8_0` block packs 32 bytes.
                        let q = unsafe { _mm256_loadu_si256(p.cast()) };
                        // |q| as unsigned bytes, and x carrying q's sign: the same products.
                        $dot4(_mm256_sign_epi8(q, q), _mm256_sign_epi8(x, q))
                    };
                    _mm256_cvtepi32_ps(sums)
                };
                let (mut even, mut odd) = (_mm256_setzero_ps(), _mm256_setzero_ps());
                let mut prod = [0.0f32; LANES];
                for k in (0..n).step_by(LANES) {
                    let m = (n - k).min(LANES);
                    if m == LANES {
                        // SAFETY: `k + 8 <= n` floats in both.
                        let (a, b) = unsafe {
                            (
                                _mm256_loadu_ps(scales.as_ptr().add(k)),
                                _mm256_loadu_ps(xs.as_ptr().add(k)),
                            )
                        };
                        // SAFETY: `prod` holds eight floats.
                        unsafe { _mm256_storeu_ps(prod.as_mut_ptr(), _mm256_mul_ps(a, b)) };
                    } else {
                        for j in 0..m {
                            prod[j] = scales[k + j] * xs[k + j];
                        }
                    }
                    // `k` is even: blocks `k + j` with even `j` are the row's even blocks.
                    let mut j = 0;
                    while j + 1 < m {
                        even = _mm256_fmadd_ps(block(k + j), _mm256_set1_ps(prod[j]), even);
                        odd = _mm256_fmadd_ps(block(k + j + 1), _mm256_set1_ps(prod[j + 1]), odd);
                        j += 2;
                    }
                    if j < m {
                        even = _mm256_fmadd_ps(block(k + j), _mm256_set1_ps(prod[j]), even);
                    }
                }
                let mut lanes = [[0.0f32; LANES]; 2];
                for (l, a) in lanes.iter_mut().zip([even, odd]) {
                    // SAFETY: `l` holds eight floats.
                    unsafe { _mm256_storeu_ps(l.as_mut_ptr(), a) };
                }
                // The `min` terms, eight blocks at a time into the eight lanes.
                let mut offsets = [0.0f32; LANES];
                if Q4 {
                    let mins = &w.mins[blocks];
                    let full = n / LANES * LANES;
                    let mut o = _mm256_setzero_ps();
                    for c in (0..full).step_by(LANES) {
                        // SAFETY: `c + 8 <= n` values in both `mins` and `v.sums` (`n` blocks each).
                        let (m, s) = unsafe {
                            (
                                _mm256_loadu_ps(mins.as_ptr().add(c)),
                                _mm256_loadu_ps(v.sums.as_ptr().add(c)),
                            )
                        };
                        o = _mm256_fmadd_ps(m, s, o);
                    }
                    // SAFETY: `offsets` holds eight floats.
                    unsafe { _mm256_storeu_ps(offsets.as_mut_ptr(), o) };
                    for c in full..n {
                        offsets[c % LANES] = mins[c].mul_add(v.sums[c], offsets[c % LANES]);
                    }
                }
                finish(lanes, offsets)
            }
        };
    }

    row_dot!(row_dot, row_dot_format, "avx2,fma", dot4_avx2);
    row_dot!(row_dot_vnni, row_dot_vnni_format, "avx2,fma,avx512vnni,avx512vl", dot4_vnni);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::quant::matrix;

    /// Every instruction set gives the definition's bits, on odd shapes and both formats, with
    /// the rows split across threads and not; and the definition is the product with the
    /// quantized vector, up to the floats' rounding.
    #[test]
    fn every_isa_gives_the_definitions_bits_and_stays_close() {
        for format in [QuantFormat::Q4_1, QuantFormat::Q8_0] {
            for (rows, cols, tokens) in [(1, 32, 1), (7, 96, 2), (300, 576, 1), (257, 1536, 3)] {
                let (packed, scales, mins) = matrix(format, rows, cols, rows as u64 * 31 + 7);
                let w = QuantMatrix {
                    format,
                    rows,
                    cols,
                    scales: &scales,
                    mins: &mins,
                    packed: &packed,
                };
                let x: Vec<f32> = (0..tokens * cols)
                    .map(|i| ((i * 7919 % 1000) as f32 / 500.0 - 1.0) * 3.0)
                    .collect();
                let mut want = vec![0.0; tokens * rows];
                quant_matmul_q8(crate::Isa::Portable, &w, &x, tokens, &mut want).unwrap();
                // The same product in floats, of the vector as quantized: equal up to the
                // floats' rounding (the quantization itself is the approximation, not the sums).
                let rounded: Vec<f32> = x
                    .chunks_exact(cols)
                    .flat_map(|xt| {
                        let v = quantize(xt);
                        (0..cols)
                            .map(move |c| f32::from(v.q[c]) * v.scales[c / QBLOCK])
                            .collect::<Vec<_>>()
                    })
                    .collect();
                let mut exact = vec![0.0; tokens * rows];
                crate::quant_matmul(crate::Isa::Reference, &w, &rounded, tokens, &mut exact)
                    .unwrap();
                // `Q4_1`'s minimums multiply the sums of the vector before quantization.
                if format == QuantFormat::Q4_1 {
                    let bpr = cols / QBLOCK;
                    for t in 0..tokens {
                        for r in 0..rows {
                            for b in 0..bpr {
                                let span = t * cols + b * QBLOCK..t * cols + (b + 1) * QBLOCK;
                                let drift: f32 = x[span.clone()].iter().sum::<f32>()
                                    - rounded[span].iter().sum::<f32>();
                                exact[t * rows + r] += mins[r * bpr + b] * drift;
                            }
                        }
                    }
                }
                let scale = exact.iter().fold(0.0f32, |m, a| m.max(a.abs())).max(1e-3);
                for (a, e) in want.iter().zip(&exact) {
                    assert!((a - e).abs() <= 1e-4 * scale, "{format:?} {rows}x{cols}: {a} vs {e}");
                }
                for isa in crate::Isa::available() {
                    for threads in [1, 2] {
                        crate::set_max_threads(threads);
                        let mut got = vec![f32::NAN; tokens * rows];
                        quant_matmul_q8(isa, &w, &x, tokens, &mut got).unwrap();
                        assert!(
                            got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()),
                            "{format:?} {rows}x{cols} {isa:?} {threads}t"
                        );
                    }
                }
                crate::set_max_threads(0);
            }
        }
    }

    /// A block of zeros quantizes to zeros (no division by a zero scale), and the extremes stay
    /// in range.
    #[test]
    fn quantization_edges() {
        let mut x = vec![0.0f32; 64];
        x[32] = -5.0;
        x[33] = 5.0;
        x[34] = 2.5;
        let v = quantize(&x);
        assert!(v.q[..32].iter().all(|&q| q == 0) && v.scales[0] == 0.0);
        assert_eq!((v.q[32], v.q[33], v.q[34]), (-127, 127, 64));
        assert_eq!(v.sums[1], 2.5);
    }

    #[test]
    fn wrong_lengths_are_errors() {
        let (packed, scales, mins) = matrix(QuantFormat::Q4_1, 2, 64, 1);
        let w = QuantMatrix {
            format: QuantFormat::Q4_1,
            rows: 2,
            cols: 64,
            scales: &scales,
            mins: &mins,
            packed: &packed,
        };
        let mut out = vec![0.0; 2];
        assert!(quant_matmul_q8(crate::Isa::Portable, &w, &[0.0; 63], 1, &mut out).is_err());
        assert!(quant_matmul_q8(crate::Isa::Portable, &w, &[0.0; 64], 1, &mut out[..1]).is_err());
    }
}
