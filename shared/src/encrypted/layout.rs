//! Where the features and the classifier's weights sit in the ciphertext's slots, and the
//! order of rotations that turns one ciphertext of features into the logits: plain integer
//! code, the same on both sides, checked in the clear ([`evaluate_in_the_clear`]) against a
//! plain matrix product.
//!
//! BFV's batching gives [`SLOTS`] slots in two rows of [`ROW`]; a rotation turns both rows
//! left by the same amount. Each row holds the features [`IN`] long and then again from the
//! start (`row[c] = x[c mod IN]`), so a rotation by `i < D` reads `x[(c + i) mod IN]` in every
//! slot the result needs. Row `r` computes the logits `OUT_PER_ROW · r + j`. It does so in
//! [`LANES`] lanes of [`LANE`] slots: lane `l` (slots `l·LANE + j`) sums the inputs
//! `(l·LANE + j + i) mod IN` for `i < D` (the last lane fewer), so the lanes together cover
//! every input once and each needs only [`D`] products instead of `IN`. The `D` products are
//! grouped baby-step giant-step: `z = Σ_k rot(g·k, Σ_b P_{g·k+b} ⊙ rot(b, x))`, where `P_i`
//! is diagonal `i` turned right by `g·k` in the clear. The device uploads the `g` baby steps
//! `rot(b, x)` itself, each encrypted fresh: a product with a ciphertext that went through a
//! rotation (a key switch) carries that switch's noise times the plaintext's size, past what
//! the 109-bit modulus holds, while a switch after the products only adds its noise. The
//! server sums the products and takes the giant steps by Horner's rule (rotations by `g`),
//! adds the lanes with two rotations by `LANE`, and the bias: slot `(r, j)` holds logit
//! `OUT_PER_ROW·r + j`.

/// Slots of a ciphertext (the ring's degree).
pub const SLOTS: usize = 4096;
/// Slots of a row; rotations turn each row on its own.
pub const ROW: usize = SLOTS / 2;
/// Input values (the pooled features).
pub const IN: usize = 1280;
/// Outputs (the logits).
pub const OUT: usize = 1000;
/// Logits each row computes.
pub const OUT_PER_ROW: usize = OUT / 2;
/// Slots of a lane: at least the logits a row computes.
pub const LANE: usize = OUT_PER_ROW;
/// Lanes of a row, each summing its own part of the inputs.
pub const LANES: usize = IN.div_ceil(LANE);
/// Products (diagonals) a lane sums: the inputs of the widest lane.
pub const D: usize = LANE;
/// Baby steps: the features turned by `0..BABY`, each uploaded as a ciphertext of its own
/// (56 kB each); `D / BABY` giant steps, each a rotation by `BABY` on the server. More baby
/// steps, fewer rotations and a larger upload.
pub const BABY: usize = 12;
/// Giant steps.
pub const GIANT: usize = D.div_ceil(BABY);

// Every slot a rotation reads must be inside the row: lane `LANES − 1`'s last slot plus the
// largest rotation. And the lanes must cover the inputs.
const _: () = assert!((LANES - 1) * LANE + LANE - 1 + D - 1 < ROW);
const _: () = assert!(LANES * LANE >= IN && OUT_PER_ROW <= LANE && 2 * OUT_PER_ROW == OUT);

/// The rotations the evaluation uses: what the evaluation key must allow.
pub const ROTATIONS: [usize; 2] = [BABY, LANE];

/// Turn each row of `slots` left by `by` (what a ciphertext rotation does to its slots).
pub fn rotate(slots: &[i64], by: usize) -> Vec<i64> {
    let mut out = vec![0; slots.len()];
    for (row_out, row_in) in out.chunks_mut(ROW).zip(slots.chunks(ROW)) {
        for (c, v) in row_out.iter_mut().enumerate() {
            *v = row_in[(c + by) % ROW];
        }
    }
    out
}

/// The features' slots, turned by each baby step `0..BABY`: each row is `x` and then `x`
/// again from the start, turned left by `b`.
pub fn pack_features(x: &[i64]) -> Vec<Vec<i64>> {
    assert_eq!(x.len(), IN, "the pooled features");
    let packed: Vec<i64> = (0..SLOTS).map(|s| x[(s % ROW) % IN]).collect();
    (0..BABY).map(|b| rotate(&packed, b)).collect()
}

/// The input lane `l`'s slot `j` multiplies with diagonal `i`, or `None` where it is past the
/// lane's share of the inputs.
fn input_of(l: usize, j: usize, i: usize) -> Option<usize> {
    let share = LANE.min(IN - l * LANE);
    (i < share).then_some((l * LANE + j + i) % IN)
}

/// The `D` diagonals of `weights` (`OUT × IN`, row-major), each turned right by its giant
/// step in the clear, in the order the evaluation multiplies them: `[k · BABY + b]`.
pub fn diagonals(weights: &[i64]) -> Vec<Vec<i64>> {
    assert_eq!(weights.len(), OUT * IN, "the classifier's weights");
    (0..D)
        .map(|i| {
            let mut diag = vec![0; SLOTS];
            for r in 0..2 {
                for l in 0..LANES {
                    for j in 0..OUT_PER_ROW {
                        if let Some(k) = input_of(l, j, i) {
                            diag[r * ROW + l * LANE + j] = weights[(r * OUT_PER_ROW + j) * IN + k];
                        }
                    }
                }
            }
            // Turned right by the giant step: rot(g·k, P ⊙ rot(b, x)) = diag ⊙ rot(i, x).
            let giant = (i / BABY) * BABY;
            rotate(&diag, ROW - giant % ROW)
        })
        .collect()
}

/// The bias in the slots the logits come out in.
pub fn pack_bias(bias: &[i64]) -> Vec<i64> {
    assert_eq!(bias.len(), OUT, "the classifier's bias");
    let mut slots = vec![0; SLOTS];
    for (o, b) in bias.iter().enumerate() {
        slots[(o / OUT_PER_ROW) * ROW + o % OUT_PER_ROW] = *b;
    }
    slots
}

/// The logits from the slots of the result.
pub fn unpack_logits(slots: &[i64]) -> Vec<i64> {
    (0..OUT).map(|o| slots[(o / OUT_PER_ROW) * ROW + o % OUT_PER_ROW]).collect()
}

/// The evaluation's schedule on any slot arithmetic, from the `BABY` baby steps: `rot(ct,
/// by)`, `dot(cts, diagonal indices)` (the sum of the products of the ciphertexts with those
/// diagonals), `add`. The encrypted classifier and [`evaluate_in_the_clear`] both run it.
pub fn schedule<C: Clone>(
    babies: &[C],
    mut rot: impl FnMut(&C, usize) -> C,
    mut dot: impl FnMut(&[C], std::ops::Range<usize>) -> C,
    mut add: impl FnMut(&C, &C) -> C,
) -> C {
    assert_eq!(babies.len(), BABY, "the baby steps");
    let mut inner = |k: usize| {
        let range = k * BABY..((k + 1) * BABY).min(D);
        dot(&babies[..range.len()], range)
    };
    // Giant steps by Horner's rule, from the last.
    let mut z = inner(GIANT - 1);
    for k in (0..GIANT - 1).rev() {
        let turned = rot(&z, BABY);
        z = add(&turned, &inner(k));
    }
    // The lanes: z + rot(LANE, z + rot(LANE, z)) for three lanes.
    let mut lanes = z.clone();
    for _ in 1..LANES {
        let turned = rot(&lanes, LANE);
        lanes = add(&z, &turned);
    }
    lanes
}

/// The schedule on plain slots, modulo `t` as the ciphertext's plaintext space computes:
/// the logits `weights · x + bias`, each in `(−t/2, t/2]`.
pub fn evaluate_in_the_clear(weights: &[i64], bias: &[i64], x: &[i64], t: i64) -> Vec<i64> {
    let diags = diagonals(weights);
    let reduce = |v: i64| v.rem_euclid(t);
    let slots = schedule(
        &pack_features(x),
        |c, by| rotate(c, by),
        |cs, range| {
            let mut acc = vec![0i64; SLOTS];
            for (c, d) in cs.iter().zip(&diags[range]) {
                for ((a, x), w) in acc.iter_mut().zip(c).zip(d) {
                    *a = reduce(*a + reduce(x * w));
                }
            }
            acc
        },
        |a, b| a.iter().zip(b).map(|(a, b)| reduce(a + b)).collect(),
    );
    let with_bias: Vec<i64> =
        slots.iter().zip(pack_bias(bias)).map(|(s, b)| reduce(s + b)).collect();
    unpack_logits(&with_bias).into_iter().map(|v| if v > t / 2 { v - t } else { v }).collect()
}

/// Deterministic numbers in `−range..=range` for the tests (no dependency for them).
#[cfg(test)]
pub(super) fn numbers(seed: u64, n: usize, range: i64) -> Vec<i64> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 33) as i64).rem_euclid(2 * range + 1) - range
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_computes_the_matrix_product() {
        let w = numbers(1, OUT * IN, 255);
        let b = numbers(2, OUT, 5000);
        let x: Vec<i64> = numbers(3, IN, 127).into_iter().map(|v| v + 128).collect();
        let t = 268_369_921;
        let got = evaluate_in_the_clear(&w, &b, &x, t);
        for o in 0..OUT {
            let want: i64 = (0..IN).map(|i| w[o * IN + i] * x[i]).sum::<i64>() + b[o];
            assert_eq!(got[o], want, "logit {o}");
        }
    }

    #[test]
    fn rotations_turn_each_row_left() {
        let slots: Vec<i64> = (0..SLOTS as i64).collect();
        let turned = rotate(&slots, 3);
        assert_eq!(&turned[..2], &[3, 4]);
        assert_eq!(turned[ROW - 1], 2, "row 0 wraps into itself");
        assert_eq!(turned[ROW], ROW as i64 + 3, "row 1 turns on its own");
    }
}
