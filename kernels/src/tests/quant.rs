//! The quantized matrix product on every instruction set against its reference, on shapes with
//! one row, one block, odd row counts, several tokens, and calls large enough to be split
//! across threads; and the length checks.

use split_kernels::reference::test_values as values;
use split_kernels::{
    Isa, QBLOCK, QuantFormat, QuantMatrix, QuantShapeError, quant_matmul, quant_matmul_groups,
};

/// Packed bytes, scales and minimums of a random `rows × cols` matrix.
pub(crate) fn matrix(
    format: QuantFormat,
    rows: usize,
    cols: usize,
    seed: u64,
) -> (Vec<u8>, Vec<f32>, Vec<f32>) {
    let blocks = rows * cols / QBLOCK;
    let bytes = values(blocks * format.packed_bytes(), seed);
    let packed = bytes.iter().map(|v| ((v + 1.0) * 127.9) as u8).collect();
    let scales = values(blocks, seed + 1).iter().map(|v| v * 0.1).collect();
    let mins = match format {
        QuantFormat::Q4_1 => values(blocks, seed + 2),
        QuantFormat::Q8_0 => Vec::new(),
    };
    (packed, scales, mins)
}

#[test]
fn every_isa_equals_reference() {
    for format in [QuantFormat::Q4_1, QuantFormat::Q8_0] {
        for (rows, cols, tokens) in [
            (1, 32, 1),
            (3, 64, 1),
            (17, 96, 2),
            (5, 576, 3),
            (64, 1536, 1),
            // Large enough to be split across threads (2 M weights × vectors and more).
            (4096, 576, 1),
            (600, 576, 7),
        ] {
            let (packed, scales, mins) = matrix(format, rows, cols, rows as u64 * 31 + cols as u64);
            let w =
                QuantMatrix { format, rows, cols, scales: &scales, mins: &mins, packed: &packed };
            let x = values(tokens * cols, 7);
            let mut want = vec![0.0; tokens * rows];
            quant_matmul(Isa::Reference, &w, &x, tokens, &mut want).unwrap();
            // The reference itself against a row dequantized and summed in f64.
            let mut row = vec![0.0; cols];
            w.dequantize_row(rows - 1, &mut row).unwrap();
            let exact: f64 = row
                .iter()
                .zip(&x[(tokens - 1) * cols..])
                .map(|(a, b)| f64::from(*a) * f64::from(*b))
                .sum();
            assert!(
                (want[tokens * rows - 1] as f64 - exact).abs() < 1e-3,
                "{format:?} reference vs f64"
            );
            for isa in Isa::available() {
                let mut got = vec![f32::NAN; tokens * rows];
                quant_matmul(isa, &w, &x, tokens, &mut got).unwrap();
                for (i, (g, r)) in got.iter().zip(&want).enumerate() {
                    // Sums of `cols` products of magnitude ≲ 2 in another order.
                    let tol = 1e-5 * cols as f32;
                    assert!(
                        (g - r).abs() <= tol,
                        "{format:?} {isa:?} {rows}x{cols}x{tokens} [{i}]: {g} vs {r}"
                    );
                }
            }
        }
    }
}

/// Several groups of vectors in one call give each group exactly what a call of its own gives:
/// groups of one (decode steps), of three (still one vector at a time) and of five and 40 (the
/// dequantize-once path), mixed, on a matrix small enough for one thread and one large enough to
/// be split across threads; empty groups are allowed (wrong lengths: `wrong_lengths_are_errors`).
#[test]
fn groups_equal_their_own_calls_bit_for_bit() {
    for format in [QuantFormat::Q4_1, QuantFormat::Q8_0] {
        for (rows, cols) in [(67, 576), (2048, 576)] {
            let (packed, scales, mins) = matrix(format, rows, cols, rows as u64 + 5);
            let w =
                QuantMatrix { format, rows, cols, scales: &scales, mins: &mins, packed: &packed };
            let groups = [1, 5, 0, 1, 3, 40, 1];
            let tokens: usize = groups.iter().sum();
            let x = values(tokens * cols, 11);
            for isa in Isa::available() {
                let mut together = vec![f32::NAN; tokens * rows];
                quant_matmul_groups(isa, &w, &x, &groups, &mut together).unwrap();
                let mut start = 0;
                for &g in &groups {
                    let mut alone = vec![f32::NAN; g * rows];
                    quant_matmul(isa, &w, &x[start * cols..(start + g) * cols], g, &mut alone)
                        .unwrap();
                    let got = &together[start * rows..(start + g) * rows];
                    assert!(
                        got.iter().zip(&alone).all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{format:?} {isa:?} {rows}x{cols}: group of {g} at {start}"
                    );
                    start += g;
                }
            }
        }
    }
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
    // Groups of two vectors in all, and three vectors' values.
    assert_eq!(
        quant_matmul_groups(Isa::Portable, &w, &[0.0; 192], &[1, 1], &mut [0.0; 4]),
        Err(QuantShapeError::Len { what: "x", got: 192, expected: 128 })
    );
    let mut out = vec![0.0; 2];
    assert!(matches!(
        quant_matmul(Isa::Portable, &w, &[0.0; 63], 1, &mut out),
        Err(QuantShapeError::Len { what: "x", .. })
    ));
    assert!(matches!(
        quant_matmul(Isa::Portable, &w, &[0.0; 64], 1, &mut [0.0; 3]),
        Err(QuantShapeError::Len { what: "out", .. })
    ));
    let short = QuantMatrix { packed: &packed[1..], ..w };
    assert!(matches!(short.check(), Err(QuantShapeError::Len { what: "packed", .. })));
    let odd = QuantMatrix { cols: 48, ..w };
    assert_eq!(odd.check(), Err(QuantShapeError::Cols { cols: 48 }));
    let huge = QuantMatrix { rows: usize::MAX / 2, ..w };
    assert_eq!(huge.check(), Err(QuantShapeError::Overflow));
    assert!(w.dequantize_row(2, &mut [0.0; 64]).is_err());
}

/// The language model's shapes, one vector (a decode step), on each instruction set and thread
/// count: GB/s of weights read. Not a test; run it by name.
#[test]
#[ignore = "a benchmark: cargo test --release -p split-kernels --features threads --lib quant_speed -- --ignored --nocapture"]
fn quant_speed() {
    for (format, rows, cols, reps) in [
        (QuantFormat::Q4_1, 1536, 576, 400),
        (QuantFormat::Q4_1, 576, 1536, 400),
        (QuantFormat::Q4_1, 192, 576, 2000),
        (QuantFormat::Q8_0, 49152, 576, 10),
    ] {
        let (packed, scales, mins) = matrix(format, rows, cols, 3);
        let w = QuantMatrix { format, rows, cols, scales: &scales, mins: &mins, packed: &packed };
        let bytes = packed.len() + 4 * (scales.len() + mins.len());
        let x = values(cols, 1);
        let mut out = vec![0.0; rows];
        for isa in Isa::available().into_iter().skip(1) {
            for threads in [1, 2] {
                split_kernels::set_max_threads(threads);
                type Kernel = fn(
                    Isa,
                    &QuantMatrix,
                    &[f32],
                    usize,
                    &mut [f32],
                ) -> Result<(), split_kernels::QuantShapeError>;
                let kernels: [(&str, Kernel); 2] = [
                    ("f32 vector", quant_matmul),
                    ("8-bit vector", split_kernels::quant_matmul_q8),
                ];
                for (name, kernel) in kernels {
                    kernel(isa, &w, &x, 1, &mut out).unwrap();
                    let t = std::time::Instant::now();
                    for _ in 0..reps {
                        kernel(isa, &w, &x, 1, &mut out).unwrap();
                    }
                    let s = t.elapsed().as_secs_f64() / reps as f64;
                    eprintln!(
                        "{format:?} {rows}x{cols} {isa:?} {threads}t {name}: {:.1} us, {:.2} GB/s",
                        s * 1e6,
                        bytes as f64 / s / 1e9
                    );
                }
            }
        }
    }
    split_kernels::set_max_threads(0);
}

/// The products of a batched decode step: `n` conversations' vectors each a group of its own,
/// one grouped call against `n` calls of one vector, per vector. A benchmark:
/// `cargo test --release -p split-kernels --features threads --lib groups_speed -- --ignored --nocapture`.
#[test]
#[ignore = "a benchmark: cargo test --release -p split-kernels --features threads --lib groups_speed -- --ignored --nocapture"]
fn groups_speed() {
    let isa = Isa::detect();
    for (rows, cols) in [(1536, 576), (576, 1536), (192, 576)] {
        let format = QuantFormat::Q4_1;
        let (packed, scales, mins) = matrix(format, rows, cols, 3);
        let w = QuantMatrix { format, rows, cols, scales: &scales, mins: &mins, packed: &packed };
        for n in [1, 8, 32] {
            let x = values(n * cols, 1);
            let mut out = vec![0.0; n * rows];
            for threads in [1, 2] {
                split_kernels::set_max_threads(threads);
                let reps = 4000 / n;
                let time = |f: &mut dyn FnMut()| {
                    f();
                    let t = std::time::Instant::now();
                    for _ in 0..reps {
                        f();
                    }
                    t.elapsed().as_secs_f64() / reps as f64 / n as f64 * 1e6
                };
                let groups = vec![1; n];
                let together = time(&mut || {
                    quant_matmul_groups(isa, &w, &x, &groups, &mut out).unwrap();
                });
                let alone = time(&mut || {
                    for t in 0..n {
                        let (xt, ot) =
                            (&x[t * cols..(t + 1) * cols], &mut out[t * rows..(t + 1) * rows]);
                        quant_matmul(isa, &w, xt, 1, ot).unwrap();
                    }
                });
                eprintln!(
                    "{rows}x{cols} {isa:?} {threads}t, {n} vectors: {together:.1} us a vector grouped, {alone:.1} alone"
                );
            }
        }
    }
    split_kernels::set_max_threads(0);
}
