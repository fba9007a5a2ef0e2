//! IEEE 754 half precision and bfloat16 from and to f32, rounding to nearest, ties to even.
//! Written here rather than taken from a crate so that the formats-only build of this crate
//! (the fuzzers, the build tasks) stays without dependencies it would compile only for this;
//! the tests check every half and bfloat16 value, and a sweep of f32s, against the `half` crate
//! (a dev-dependency).

/// The half-precision bits nearest `x` (overflow to infinity, NaN stays NaN).
pub fn f16_from_f32(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32;
    let man = bits & 0x7f_ffff;
    if exp == 0xff {
        // Infinity, or NaN with a quiet bit so that it stays NaN.
        return sign | 0x7c00 | if man != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        // Below the smallest normal half: a subnormal `m × 2^-24`, or zero.
        if e < -10 {
            return sign;
        }
        let m = man | 0x80_0000;
        let shift = (14 - e) as u32;
        let (kept, rest, half) = (m >> shift, m & ((1 << shift) - 1), 1 << (shift - 1));
        let round = u32::from(rest > half || (rest == half && kept & 1 == 1));
        // A carry into bit 10 is the smallest normal's encoding, as it should be.
        return sign | (kept + round) as u16;
    }
    let (kept, rest) = (man >> 13, man & 0x1fff);
    let round = u32::from(rest > 0x1000 || (rest == 0x1000 && kept & 1 == 1));
    // A carry out of the mantissa raises the exponent (up to infinity), as it should.
    sign | ((((e as u32) << 10) | kept) + round) as u16
}

/// The value of half-precision bits.
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x3ff);
    match exp {
        0 => {
            // Zero or subnormal: man × 2^-24, exact in f32.
            let v = man as f32 * f32::from_bits(0x3380_0000);
            if sign != 0 { -v } else { v }
        }
        0x1f => f32::from_bits(sign | 0x7f80_0000 | (man << 13)),
        _ => f32::from_bits(sign | ((exp + 112) << 23) | (man << 13)),
    }
}

/// The bfloat16 bits nearest `x` (the upper half of an f32, rounded; NaN stays NaN).
pub fn bf16_from_f32(x: f32) -> u16 {
    let bits = x.to_bits();
    if x.is_nan() {
        return ((bits >> 16) | 0x40) as u16;
    }
    // Adding just under half an ulp, plus one when the kept part is odd, rounds ties to even;
    // a carry into the exponent gives the next power of two, or infinity.
    ((bits + 0x7fff + ((bits >> 16) & 1)) >> 16) as u16
}

/// The value of bfloat16 bits.
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_half_and_bfloat_value_converts_as_the_half_crate_does() {
        for h in 0..=u16::MAX {
            let reference = half::f16::from_bits(h).to_f32();
            let ours = f16_to_f32(h);
            assert!(
                ours.to_bits() == reference.to_bits() || (ours.is_nan() && reference.is_nan()),
                "{h:#06x}"
            );
            if !ours.is_nan() {
                assert_eq!(f16_from_f32(ours), h, "{h:#06x} back");
            }
            let b = bf16_to_f32(h);
            let reference = half::bf16::from_bits(h).to_f32();
            assert!(
                b.to_bits() == reference.to_bits() || (b.is_nan() && reference.is_nan()),
                "{h:#06x}"
            );
            if !b.is_nan() {
                assert_eq!(bf16_from_f32(b), h);
            }
        }
    }

    #[test]
    fn known_halves_widen_exactly() {
        for (h, f) in [
            (0x3c00u16, 1.0f32),
            (0xc000, -2.0),
            (0x7bff, 65504.0),
            (0x0001, 5.960_464_5e-8),
            (0x8001, -5.960_464_5e-8),
            (0x03ff, 6.097_555e-5),
            (0x3555, 0.333_251_95),
            (0x0000, 0.0),
        ] {
            assert_eq!(f16_to_f32(h), f, "{h:#06x}");
        }
        assert!(f16_to_f32(0x7c00).is_infinite() && f16_to_f32(0x7e00).is_nan());
        assert!(f16_to_f32(0x8000).is_sign_negative());
    }

    #[test]
    fn a_sweep_of_f32s_rounds_as_the_half_crate_does() {
        // Every 997th bit pattern (all exponents, ties included among them) and the edges.
        let edges = [65504.0, 65519.99, 65520.0, 6.1e-5, 5.96e-8, 2.98e-8, 2.99e-8, 1e-10, 1e30];
        let sweep = (0..=u32::MAX).step_by(997).map(f32::from_bits);
        for x in sweep.chain(edges.into_iter().flat_map(|v: f32| [v, -v])) {
            if x.is_nan() {
                assert!(
                    f16_to_f32(f16_from_f32(x)).is_nan() && bf16_to_f32(bf16_from_f32(x)).is_nan()
                );
                continue;
            }
            assert_eq!(f16_from_f32(x), half::f16::from_f32(x).to_bits(), "f16 of {x:e}");
            assert_eq!(bf16_from_f32(x), half::bf16::from_f32(x).to_bits(), "bf16 of {x:e}");
        }
    }
}
