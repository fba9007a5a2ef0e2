//! SplitMix64 (Steele, Lea and Flood, 2014): a small, fast, seedable stream of 64-bit draws.
//!
//! Not for secrets (the encrypted features use the operating system's generator): for what
//! must come out the same from the same seed on every platform, such as a language model's
//! sampled tokens, the lab's simulated link jitter and the studies' training sequences.

/// The generator: its whole state is one `u64`, advanced by a fixed odd step per draw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A stream starting from `seed` (any value, zero included).
    pub const fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 uniformly distributed bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform draw in [0, 1) with 53 bits (every `f64` step of that range).
    pub fn unit_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A uniform draw in [0, 1) with 24 bits (every `f32` step of that range).
    pub fn unit_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_is_splitmix64() {
        // The first outputs from seed 1234567, the test vector that circulates with the
        // reference C implementation.
        let mut r = SplitMix64::new(1_234_567);
        let want = [
            6_457_827_717_110_365_317,
            3_203_168_211_198_807_973,
            9_817_491_932_198_370_423,
            4_593_380_528_125_082_431,
            16_408_922_859_458_223_821,
        ];
        for w in want {
            assert_eq!(r.next_u64(), w);
        }
    }

    #[test]
    fn unit_draws_stay_below_one_and_spread_over_the_range() {
        let mut r = SplitMix64::new(0);
        let (mut lo, mut hi) = (0usize, 0usize);
        for _ in 0..10_000 {
            let (a, b) = (r.unit_f64(), r.unit_f32());
            assert!((0.0..1.0).contains(&a) && (0.0..1.0).contains(&b));
            lo += usize::from(a < 0.5);
            hi += usize::from(b >= 0.5);
        }
        assert!((4_700..5_300).contains(&lo) && (4_700..5_300).contains(&hi), "{lo} {hi}");
    }
}
