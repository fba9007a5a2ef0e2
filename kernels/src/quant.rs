//! Matrix products over block-quantized weights (GGUF's `Q4_1` and `Q8_0`), dequantized in
//! registers: the weights stay at 4.75 or 8.5 bits per value in memory and each block of 32
//! becomes floats only inside the dot product that reads it.
//!
//! A language model's decode step is a chain of matrix × vector products whose weights come
//! cold from memory every token, so bytes read are the cost; a `Q4_1` row is a fifth of its
//! `f32` size. Per block of 32 values along a row:
//!
//! - `Q4_1`: `w[j] = scale · q[j] + min`, `q[j]` four bits (`j < 16`: the low nibble of byte
//!   `j`; `j ≥ 16`: the high nibble of byte `j - 16`), so `Σ w·x = scale · Σ q·x + min · Σ x`,
//!   and `Σ x` per block is computed once per input vector, not once per row;
//! - `Q8_0`: `w[j] = scale · q[j]`, `q[j]` a signed byte.
//!
//! The scales and minimums are kept as `f32` beside the packed values (GGUF stores them as
//! `f16` inside each block), so the inner loop does no half-float conversion.
//!
//! The loops are safe code over fixed-size arrays; the x86 entries compile the same loop with
//! AVX2 + FMA enabled (`f32::mul_add` is then one instruction; elsewhere it would be a library
//! call, so the portable build multiplies and adds). The browser's build has loops of its own
//! in WebAssembly's 128-bit SIMD (`quant_wasm.rs`).

use std::sync::Mutex;

use crate::threads;

/// Values per quantization block.
pub const QBLOCK: usize = 32;

/// A block quantization format of GGUF.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuantFormat {
    /// 4-bit values with a per-block scale and minimum.
    Q4_1,
    /// 8-bit signed values with a per-block scale.
    Q8_0,
}

impl QuantFormat {
    /// Packed bytes per block (without the scale and minimum).
    pub const fn packed_bytes(self) -> usize {
        match self {
            QuantFormat::Q4_1 => QBLOCK / 2,
            QuantFormat::Q8_0 => QBLOCK,
        }
    }
}

/// A row-major `rows × cols` matrix in blocks of [`QBLOCK`] along each row (`cols` a multiple
/// of it): block `b` of row `r` is block `r · cols / 32 + b` of `scales`, `mins` (empty for
/// `Q8_0`) and `packed` ([`QuantFormat::packed_bytes`] each).
#[derive(Clone, Copy, Debug)]
pub struct QuantMatrix<'a> {
    /// How the values are packed.
    pub format: QuantFormat,
    /// Output values (one per row).
    pub rows: usize,
    /// Input values per row.
    pub cols: usize,
    /// Per block: the scale.
    pub scales: &'a [f32],
    /// Per block: the minimum (`Q4_1`); empty for `Q8_0`.
    pub mins: &'a [f32],
    /// Per block: the packed values.
    pub packed: &'a [u8],
}

/// What is wrong with a [`QuantMatrix`] or the vectors given with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuantShapeError {
    /// `cols` is not a multiple of the block size.
    #[error("{cols} columns is not a multiple of the {QBLOCK}-value block")]
    Cols {
        /// The columns given.
        cols: usize,
    },
    /// A slice's length does not match the shape.
    #[error("{what}: {got} values, the shape needs {expected}")]
    Len {
        /// Which slice.
        what: &'static str,
        /// The length it had.
        got: usize,
        /// The length the shape needs.
        expected: usize,
    },
    /// The shape's size does not fit in memory's address space.
    #[error("the shape's size overflows")]
    Overflow,
}

impl QuantMatrix<'_> {
    fn blocks_per_row(&self) -> usize {
        self.cols / QBLOCK
    }

    /// Every slice's length against the shape.
    pub fn check(&self) -> Result<(), QuantShapeError> {
        if !self.cols.is_multiple_of(QBLOCK) {
            return Err(QuantShapeError::Cols { cols: self.cols });
        }
        let blocks =
            self.rows.checked_mul(self.blocks_per_row()).ok_or(QuantShapeError::Overflow)?;
        let packed =
            blocks.checked_mul(self.format.packed_bytes()).ok_or(QuantShapeError::Overflow)?;
        let mins = if self.format == QuantFormat::Q4_1 { blocks } else { 0 };
        for (what, got, expected) in [
            ("scales", self.scales.len(), blocks),
            ("mins", self.mins.len(), mins),
            ("packed", self.packed.len(), packed),
        ] {
            if got != expected {
                return Err(QuantShapeError::Len { what, got, expected });
            }
        }
        Ok(())
    }

    /// Row `r` as floats (for an embedding lookup, and the tests).
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) -> Result<(), QuantShapeError> {
        self.check()?;
        if r >= self.rows || out.len() != self.cols {
            return Err(QuantShapeError::Len { what: "row", got: out.len(), expected: self.cols });
        }
        let bpr = self.blocks_per_row();
        let pb = self.format.packed_bytes();
        for (b, chunk) in out.chunks_exact_mut(QBLOCK).enumerate() {
            let i = r * bpr + b;
            let scale = self.scales[i];
            let packed = &self.packed[i * pb..(i + 1) * pb];
            match self.format {
                QuantFormat::Q4_1 => {
                    let min = self.mins[i];
                    for j in 0..QBLOCK / 2 {
                        chunk[j] = scale * f32::from(packed[j] & 15) + min;
                        chunk[j + QBLOCK / 2] = scale * f32::from(packed[j] >> 4) + min;
                    }
                }
                QuantFormat::Q8_0 => {
                    for (w, &q) in chunk.iter_mut().zip(packed) {
                        *w = scale * f32::from(q as i8);
                    }
                }
            }
        }
        Ok(())
    }
}

/// Weights × vectors per thread below which a call stays on one thread. Every product of a
/// decode step (0.1–0.9 M weights, 13–120 µs on one AVX2 core) splits: with helpers that spin
/// between calls a hand-off costs about a microsecond, and two threads decode about 1.6× as
/// fast as one (docs/llm.md, "Speed"; from 1 M, where only the output projection split, 1.05×).
const MIN_VALUES_PER_PART: usize = 1 << 16;

/// `out[t, r] = Σ_c w[r, c] · x[t, c]` for `tokens` input vectors: `x: [tokens, cols]`,
/// `out: [tokens, rows]`. Rows are split across the kernels' threads for large matrices.
/// [`Isa::Reference`](crate::Isa::Reference) dequantizes each row and sums in order (the
/// definition the tests hold the others to).
///
/// # Panics
/// When `isa` cannot run on this machine.
pub fn quant_matmul(
    isa: crate::Isa,
    w: &QuantMatrix,
    x: &[f32],
    tokens: usize,
    out: &mut [f32],
) -> Result<(), QuantShapeError> {
    quant_matmul_groups(isa, w, x, &[tokens], out)
}

/// Threads a product of `tokens` vectors with `w` is split across (by rows).
pub(crate) fn parts_for(w: &QuantMatrix, tokens: usize) -> usize {
    let work = w.rows.saturating_mul(w.cols).saturating_mul(tokens);
    threads::max_threads().min(work / MIN_VALUES_PER_PART).min(w.rows).max(1)
}

/// # Panics
/// When `isa` asks for AVX2 on a machine without AVX2 and FMA.
pub(crate) fn assert_runs_here(isa: crate::Isa) {
    if matches!(isa, crate::Isa::Avx2 | crate::Isa::Avx512 | crate::Isa::Avx512Zmm) {
        assert!(
            matches!(
                crate::Isa::detect(),
                crate::Isa::Avx2 | crate::Isa::Avx512 | crate::Isa::Avx512Zmm
            ),
            "{isa:?} kernels asked for on a machine without AVX2 and FMA"
        );
    }
}

/// `x` holds `tokens` vectors of `w.cols` values and `out` room for `tokens` of `w.rows`.
pub(crate) fn check_lengths(
    w: &QuantMatrix,
    x: &[f32],
    out: &[f32],
    tokens: usize,
) -> Result<(), QuantShapeError> {
    let need = |what, got: usize, a: usize, b: usize| {
        let expected = a.checked_mul(b).ok_or(QuantShapeError::Overflow)?;
        if got == expected { Ok(()) } else { Err(QuantShapeError::Len { what, got, expected }) }
    };
    need("x", x.len(), tokens, w.cols)?;
    need("out", out.len(), tokens, w.rows)
}

/// [`quant_matmul`] over several products' input vectors at once: `x` holds the groups' vectors
/// one after the other (`groups[g]` of them for group `g`), `out` their results in the same
/// order. Each weight row is read from memory once for every group, and each group's results
/// are bit for bit what [`quant_matmul`] gives for that group alone: a group is summed as it
/// would be alone (one vector at a time below [`MANY_TOKENS`] vectors, each block dequantized
/// once for the group's vectors from there), whatever the other groups are. A server that
/// batches many conversations' steps this way answers each as it would alone.
///
/// # Panics
/// When `isa` cannot run on this machine.
pub fn quant_matmul_groups(
    isa: crate::Isa,
    w: &QuantMatrix,
    x: &[f32],
    groups: &[usize],
    out: &mut [f32],
) -> Result<(), QuantShapeError> {
    w.check()?;
    let tokens = groups
        .iter()
        .try_fold(0usize, |a, &g| a.checked_add(g))
        .ok_or(QuantShapeError::Overflow)?;
    check_lengths(w, x, out, tokens)?;
    if tokens == 0 || w.rows == 0 {
        return Ok(());
    }
    let bpr = w.blocks_per_row();
    // Each group's vectors from this one on, and whether the group goes one vector at a time
    // against each row (few vectors, or the reference) or has each block dequantized once for
    // all of them ([`row_dots`], which needs no block sums).
    let spans: Vec<(std::ops::Range<usize>, bool)> = groups
        .iter()
        .scan(0, |start, &g| {
            let span = *start..*start + g;
            *start += g;
            Some((span, g < MANY_TOKENS || isa == crate::Isa::Reference))
        })
        .filter(|(span, _)| !span.is_empty())
        .collect();
    // Σ x per block of each input vector (the `min` term of Q4_1), for the one-at-a-time groups.
    let sums: Vec<f32> = if spans.iter().any(|(_, per_vector)| *per_vector) {
        x.chunks_exact(QBLOCK).map(|c| c.iter().sum()).collect()
    } else {
        Vec::new()
    };
    let parts = parts_for(w, tokens);
    // Each part writes its rows for every token into a buffer of its own ([rows, tokens]),
    // scattered into `out` afterwards: the parts share nothing they write.
    let results: Vec<Mutex<Vec<f32>>> = (0..parts).map(|_| Mutex::new(Vec::new())).collect();
    assert_runs_here(isa);
    // The vectors of every one-at-a-time group: a row's dot products with all of them share
    // the unpacking of its blocks ([`row_dot_each`]), which changes no bit of any of them.
    let single: Vec<usize> = spans
        .iter()
        .filter(|(_, per_vector)| *per_vector)
        .flat_map(|(span, _)| span.clone())
        .collect();
    threads::run_parts(parts, |p| {
        let rows = threads::range(w.rows, parts, p);
        let mut local = vec![0.0f32; rows.len() * tokens];
        for (k, r) in rows.enumerate() {
            let blocks = r * bpr..(r + 1) * bpr;
            let dots = &mut local[k * tokens..(k + 1) * tokens];
            for (span, per_vector) in &spans {
                if !per_vector {
                    let xs = &x[span.start * w.cols..span.end * w.cols];
                    row_dots(isa, w, blocks.clone(), xs, &mut dots[span.clone()]);
                }
            }
            row_dot_each(isa, w, blocks, x, &sums, &single, dots);
        }
        *results[p].lock().unwrap_or_else(|e| e.into_inner()) = local;
    });
    for (p, result) in results.into_iter().enumerate() {
        let local = result.into_inner().unwrap_or_else(|e| e.into_inner());
        for (k, r) in threads::range(w.rows, parts, p).enumerate() {
            for t in 0..tokens {
                out[t * w.rows + r] = local[k * tokens + t];
            }
        }
    }
    Ok(())
}

/// From this many input vectors on, each block of a row is dequantized once into floats and
/// multiplied with every vector ([`row_dots`]) instead of unpacked again per vector.
const MANY_TOKENS: usize = 4;

/// One row's dot products with every input vector of `x` (`[dots.len(), cols]`).
fn row_dots(
    isa: crate::Isa,
    w: &QuantMatrix,
    blocks: std::ops::Range<usize>,
    x: &[f32],
    dots: &mut [f32],
) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        crate::Isa::Avx2 | crate::Isa::Avx512 | crate::Isa::Avx512Zmm => {
            // SAFETY: as in `row_dot`: `quant_matmul_groups` asserted AVX2 and FMA.
            unsafe { row_dots_fma(w, blocks, x, dots) }
        }
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        crate::Isa::Simd128 if w.format == QuantFormat::Q4_1 => {
            crate::quant_wasm::row_dots(w, blocks, x, dots)
        }
        _ => row_dots_generic::<false>(w, blocks, x, dots),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn row_dots_fma(w: &QuantMatrix, blocks: std::ops::Range<usize>, x: &[f32], dots: &mut [f32]) {
    row_dots_generic::<true>(w, blocks, x, dots)
}

#[inline(always)]
fn row_dots_generic<const FMA: bool>(
    w: &QuantMatrix,
    blocks: std::ops::Range<usize>,
    x: &[f32],
    dots: &mut [f32],
) {
    const H: usize = QBLOCK / 2;
    let pb = w.format.packed_bytes();
    let mut acc = vec![[0.0f32; 8]; dots.len()];
    let mut values = [0.0f32; QBLOCK];
    for (b, i) in blocks.enumerate() {
        let packed = &w.packed[i * pb..(i + 1) * pb];
        let scale = w.scales[i];
        match w.format {
            QuantFormat::Q4_1 => {
                let min = w.mins[i];
                for j in 0..H {
                    values[j] = madd::<FMA>(scale, f32::from(packed[j] & 15), min);
                    values[j + H] = madd::<FMA>(scale, f32::from(packed[j] >> 4), min);
                }
            }
            QuantFormat::Q8_0 => {
                for (v, &q) in values.iter_mut().zip(packed) {
                    *v = scale * f32::from(q as i8);
                }
            }
        }
        for (t, a) in acc.iter_mut().enumerate() {
            let xb: &[f32; QBLOCK] =
                x[(t * w.cols + b * QBLOCK)..][..QBLOCK].try_into().expect("a block");
            for j in 0..8 {
                let s = madd::<FMA>(values[j], xb[j], values[j + 8] * xb[j + 8]);
                let s = madd::<FMA>(values[j + 16], xb[j + 16], s);
                a[j] = madd::<FMA>(values[j + 24], xb[j + 24], a[j] + s);
            }
        }
    }
    for (d, a) in dots.iter_mut().zip(&acc) {
        *d = ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
    }
}

/// Vectors [`row_dot_each`] takes at once: their accumulators (two registers each with AVX2)
/// and the block's unpacked values stay in registers.
const EACH: usize = 4;

/// `dots[t] = ` [`row_dot`] of the row with vector `t` of `x`, for each `t` in `tokens`. On the
/// instruction sets whose [`row_dot`] is [`row_dot_generic`], [`EACH`] vectors at a time share
/// the unpacking of each block and each gets exactly [`row_dot_generic`]'s arithmetic, in its
/// order: the same bits as one call per vector, for less work.
fn row_dot_each(
    isa: crate::Isa,
    w: &QuantMatrix,
    blocks: std::ops::Range<usize>,
    x: &[f32],
    sums: &[f32],
    tokens: &[usize],
    dots: &mut [f32],
) {
    let bpr = w.blocks_per_row();
    let vector = |t: usize| &x[t * w.cols..(t + 1) * w.cols];
    let block_sums = |t: usize| &sums[t * bpr..(t + 1) * bpr];
    let shared = matches!(
        isa,
        crate::Isa::Portable | crate::Isa::Avx2 | crate::Isa::Avx512 | crate::Isa::Avx512Zmm
    );
    let mut chunks = tokens.chunks_exact(EACH);
    if shared {
        for chunk in &mut chunks {
            let xs = std::array::from_fn(|v| vector(chunk[v]));
            let ss = std::array::from_fn(|v| block_sums(chunk[v]));
            let got = match isa {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: as in `row_dot`: `quant_matmul_groups` asserted AVX2 and FMA.
                crate::Isa::Avx2 | crate::Isa::Avx512 | crate::Isa::Avx512Zmm => unsafe {
                    row_dot_each_fma(w, blocks.clone(), xs, ss)
                },
                _ => row_dot_each_generic::<false>(w, blocks.clone(), xs, ss),
            };
            for (&t, d) in chunk.iter().zip(got) {
                dots[t] = d;
            }
        }
    }
    let rest = if shared { chunks.remainder() } else { tokens };
    for &t in rest {
        dots[t] = row_dot(isa, w, blocks.clone(), vector(t), block_sums(t));
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn row_dot_each_fma(
    w: &QuantMatrix,
    blocks: std::ops::Range<usize>,
    xs: [&[f32]; EACH],
    sums: [&[f32]; EACH],
) -> [f32; EACH] {
    row_dot_each_generic::<true>(w, blocks, xs, sums)
}

/// Block `b` of the row (unpacked: `lo`, `hi`, `scale`) into each vector's accumulators, as
/// [`row_dot_generic`] adds a block. A function, not a closure: it must be inlined into the
/// caller compiled with FMA (a closure's `mul_add` was a library call, 25 times slower).
#[inline(always)]
fn each_block<const FMA: bool>(
    acc: &mut [[f32; QBLOCK / 2]; EACH],
    xs: &[&[f32]; EACH],
    b: usize,
    scale: f32,
    lo: &[f32; QBLOCK / 2],
    hi: &[f32; QBLOCK / 2],
) {
    const H: usize = QBLOCK / 2;
    for (a, x) in acc.iter_mut().zip(xs) {
        let xb: &[f32; QBLOCK] = x[b * QBLOCK..][..QBLOCK].try_into().expect("a block");
        for j in 0..H {
            let s = madd::<FMA>(lo[j], xb[j], hi[j] * xb[j + H]);
            a[j] = madd::<FMA>(scale, s, a[j]);
        }
    }
}

/// [`row_dot_generic`] for [`EACH`] vectors, each block unpacked once for all of them.
#[inline(always)]
fn row_dot_each_generic<const FMA: bool>(
    w: &QuantMatrix,
    blocks: std::ops::Range<usize>,
    xs: [&[f32]; EACH],
    sums: [&[f32]; EACH],
) -> [f32; EACH] {
    const H: usize = QBLOCK / 2;
    let first = blocks.start;
    let mut acc = [[0.0f32; H]; EACH];
    let mut offset = [0.0f32; EACH];
    let (mut lo, mut hi) = ([0.0f32; H], [0.0f32; H]);
    match w.format {
        QuantFormat::Q4_1 => {
            let packed = &w.packed[first * H..blocks.end * H];
            for (b, q) in packed.chunks_exact(H).enumerate() {
                let q: &[u8; H] = q.try_into().expect("chunks of H");
                for j in 0..H {
                    lo[j] = f32::from(q[j] & 15);
                    hi[j] = f32::from(q[j] >> 4);
                }
                each_block::<FMA>(&mut acc, &xs, b, w.scales[first + b], &lo, &hi);
                for v in 0..EACH {
                    offset[v] = madd::<FMA>(w.mins[first + b], sums[v][b], offset[v]);
                }
            }
        }
        QuantFormat::Q8_0 => {
            let packed = &w.packed[first * QBLOCK..blocks.end * QBLOCK];
            for (b, q) in packed.chunks_exact(QBLOCK).enumerate() {
                let q: &[u8; QBLOCK] = q.try_into().expect("chunks of QBLOCK");
                for j in 0..H {
                    lo[j] = f32::from(q[j] as i8);
                    hi[j] = f32::from(q[j + H] as i8);
                }
                each_block::<FMA>(&mut acc, &xs, b, w.scales[first + b], &lo, &hi);
            }
        }
    }
    std::array::from_fn(|v| sum_pairwise(&mut acc[v]) + offset[v])
}

/// One row's dot product with one input vector, on the best instruction set.
fn row_dot(
    isa: crate::Isa,
    w: &QuantMatrix,
    blocks: std::ops::Range<usize>,
    x: &[f32],
    sums: &[f32],
) -> f32 {
    match isa {
        #[cfg(target_arch = "x86_64")]
        crate::Isa::Avx2 | crate::Isa::Avx512 | crate::Isa::Avx512Zmm => {
            // SAFETY: `quant_matmul` asserted that this machine has AVX2 and FMA, the
            // features `row_dot_fma` is compiled with.
            unsafe { row_dot_fma(w, blocks, x, sums) }
        }
        // `Q4_1` only: the compiler vectorises the portable `Q8_0` loop well for wasm (3.5 GB/s
        // on the output projection against 2.6 for explicit SIMD), the `Q4_1` one not at all.
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        crate::Isa::Simd128 if w.format == QuantFormat::Q4_1 => {
            crate::quant_wasm::row_dot(w, blocks, x, sums)
        }
        crate::Isa::Reference => row_dot_reference(w, blocks, x),
        _ => row_dot_plain(w, blocks, x, sums),
    }
}

/// The definition: each block dequantized, products summed in order.
fn row_dot_reference(w: &QuantMatrix, blocks: std::ops::Range<usize>, x: &[f32]) -> f32 {
    let mut values = [0.0f32; QBLOCK];
    let mut sum = 0.0f32;
    let pb = w.format.packed_bytes();
    for (k, i) in blocks.enumerate() {
        let packed = &w.packed[i * pb..(i + 1) * pb];
        for (j, v) in values.iter_mut().enumerate() {
            let q = match w.format {
                QuantFormat::Q4_1 => {
                    f32::from((packed[j % (QBLOCK / 2)] >> (4 * (j / (QBLOCK / 2)))) & 15)
                }
                QuantFormat::Q8_0 => f32::from(packed[j] as i8),
            };
            *v = w.scales[i] * q + w.mins.get(i).copied().unwrap_or(0.0);
        }
        for (v, xv) in values.iter().zip(&x[k * QBLOCK..(k + 1) * QBLOCK]) {
            sum += v * xv;
        }
    }
    sum
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn row_dot_fma(w: &QuantMatrix, blocks: std::ops::Range<usize>, x: &[f32], sums: &[f32]) -> f32 {
    row_dot_generic::<true>(w, blocks, x, sums)
}

fn row_dot_plain(w: &QuantMatrix, blocks: std::ops::Range<usize>, x: &[f32], sums: &[f32]) -> f32 {
    row_dot_generic::<false>(w, blocks, x, sums)
}

#[inline(always)]
fn madd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA { a.mul_add(b, c) } else { a * b + c }
}

/// `Σ_c w[r, c] · x[c]` over the row's `blocks`; `x` is the whole input vector and `sums` its
/// per-block sums. Sixteen accumulators, one per lane pair of a block, summed at the end.
#[inline(always)]
fn row_dot_generic<const FMA: bool>(
    w: &QuantMatrix,
    blocks: std::ops::Range<usize>,
    x: &[f32],
    sums: &[f32],
) -> f32 {
    const H: usize = QBLOCK / 2;
    let first = blocks.start;
    let mut acc = [0.0f32; H];
    let mut offset = 0.0f32;
    match w.format {
        QuantFormat::Q4_1 => {
            let packed = &w.packed[first * H..blocks.end * H];
            for (((b, q), xb), &scale) in packed
                .chunks_exact(H)
                .enumerate()
                .zip(x.chunks_exact(QBLOCK))
                .zip(&w.scales[blocks.clone()])
            {
                let q: &[u8; H] = q.try_into().expect("chunks of H");
                let xb: &[f32; QBLOCK] = xb.try_into().expect("chunks of QBLOCK");
                for j in 0..H {
                    let t =
                        madd::<FMA>(f32::from(q[j] & 15), xb[j], f32::from(q[j] >> 4) * xb[j + H]);
                    acc[j] = madd::<FMA>(scale, t, acc[j]);
                }
                offset = madd::<FMA>(w.mins[first + b], sums[b], offset);
            }
        }
        QuantFormat::Q8_0 => {
            let packed = &w.packed[first * QBLOCK..blocks.end * QBLOCK];
            for ((q, xb), &scale) in packed
                .chunks_exact(QBLOCK)
                .zip(x.chunks_exact(QBLOCK))
                .zip(&w.scales[blocks.clone()])
            {
                let q: &[u8; QBLOCK] = q.try_into().expect("chunks of QBLOCK");
                let xb: &[f32; QBLOCK] = xb.try_into().expect("chunks of QBLOCK");
                for j in 0..H {
                    let t = madd::<FMA>(
                        f32::from(q[j] as i8),
                        xb[j],
                        f32::from(q[j + H] as i8) * xb[j + H],
                    );
                    acc[j] = madd::<FMA>(scale, t, acc[j]);
                }
            }
        }
    }
    sum_pairwise(&mut acc) + offset
}

/// A row's sixteen accumulators summed pairwise, as the vector registers hold them: the one
/// order [`row_dot_generic`] and [`row_dot_each_generic`] share.
#[inline(always)]
fn sum_pairwise(acc: &mut [f32; QBLOCK / 2]) -> f32 {
    let mut width = QBLOCK / 2;
    while width > 1 {
        width /= 2;
        for j in 0..width {
            acc[j] += acc[j + width];
        }
    }
    acc[0]
}
