//! A binary adaptive range coder: the entropy coder of the context-modelled settings
//! ([`super::alloc`]).
//!
//! Each binary decision is coded with a probability that lives in a [`Bit`] and adapts after
//! every use, so a context's statistics are learnt from the frame itself: nothing per image or
//! per channel has to be stored or sent. Everything is integer arithmetic (12-bit
//! probabilities, a 32-bit range, a 64-bit low word carrying into the bytes already written), so
//! the browser and the server stay bit-exact.
//!
//! The decoder reads exactly as many bytes as the encoder wrote; reading past the end, or
//! stopping short of it, means the payload is damaged, and [`Decoder::finish`] says so.

use super::CodecError;

/// Bits of a probability.
const PROB_BITS: u32 = 12;
const PROB_ONE: u16 = 1 << PROB_BITS;
/// The range is kept at or above this (renormalised a byte at a time).
const TOP: u32 = 1 << 24;
/// Bytes the decoder primes itself with (one always-zero byte, then four).
const PRIME: usize = 5;

/// An adaptive estimate of P(bit = 0), in 1/4096.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bit(u16);

impl Default for Bit {
    fn default() -> Self {
        Self(PROB_ONE / 2)
    }
}

impl Bit {
    /// Move the estimate toward the bit just coded: a window of about 2^`rate` decisions.
    fn update(&mut self, bit: bool, rate: u32) {
        if bit {
            self.0 -= self.0 >> rate;
        } else {
            self.0 += (PROB_ONE - self.0) >> rate;
        }
    }

    /// Split of `range` given to a zero bit: never 0 and never all of it.
    fn bound(self, range: u32) -> u32 {
        (range >> PROB_BITS) * u32::from(self.0.clamp(32, PROB_ONE - 32))
    }
}

/// Most equiprobable bits [`Encoder::raw`] codes in one step (the range stays at least 2^8).
pub const MAX_RAW_BITS: u32 = 16;

/// Adaptation rate of every [`Bit`]: the estimate moves by 1/2^`ADAPT` of the way each time.
pub const ADAPT: u32 = 5;

/// Writes binary decisions into bytes.
#[derive(Debug)]
pub struct Encoder {
    low: u64,
    range: u32,
    cache: u8,
    pending: u64,
    out: Vec<u8>,
}

impl Default for Encoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Encoder {
    /// An empty coder.
    pub fn new() -> Self {
        Self { low: 0, range: u32::MAX, cache: 0, pending: 1, out: Vec::new() }
    }

    /// Code `bit` with the adaptive probability `p`, then update `p`.
    pub fn bit(&mut self, p: &mut Bit, bit: bool) {
        let bound = p.bound(self.range);
        if bit {
            self.low += u64::from(bound);
            self.range -= bound;
        } else {
            self.range = bound;
        }
        p.update(bit, ADAPT);
        self.normalise();
    }

    /// Code the low `count` bits of `value` at probability one half, at most
    /// [`MAX_RAW_BITS`] at a time.
    pub fn raw(&mut self, value: u32, count: u32) {
        debug_assert!(count <= MAX_RAW_BITS);
        if count == 0 {
            return;
        }
        self.range >>= count;
        self.low += u64::from(value & ((1 << count) - 1)) * u64::from(self.range);
        self.normalise();
    }

    fn normalise(&mut self) {
        while self.range < TOP {
            self.range <<= 8;
            self.shift();
        }
    }

    /// Move the top byte of `low` out, resolving a carry into the bytes held back.
    fn shift(&mut self) {
        if self.low < 0xFF00_0000 || self.low > u64::from(u32::MAX) {
            let carry = (self.low >> 32) as u8;
            let mut byte = self.cache;
            while self.pending > 0 {
                self.out.push(byte.wrapping_add(carry));
                byte = 0xFF;
                self.pending -= 1;
            }
            self.cache = ((self.low >> 24) & 0xFF) as u8;
        }
        self.pending += 1;
        self.low = (self.low & 0x00FF_FFFF) << 8;
    }

    /// Flush and return the bytes.
    pub fn finish(mut self) -> Vec<u8> {
        for _ in 0..PRIME {
            self.shift();
        }
        self.out
    }
}

/// Reads the decisions an [`Encoder`] wrote, with the same probabilities in the same order.
#[derive(Debug)]
pub struct Decoder<'a> {
    code: u32,
    range: u32,
    bytes: &'a [u8],
    read: usize,
}

impl<'a> Decoder<'a> {
    /// Start decoding `bytes`.
    ///
    /// # Errors
    /// [`CodecError::BadPayload`] when it is shorter than any finished coder's output, or does
    /// not start the way every one does.
    pub fn new(bytes: &'a [u8]) -> Result<Self, CodecError> {
        if bytes.len() < PRIME || bytes[0] != 0 {
            return Err(CodecError::BadPayload("range-coded payload has no valid start"));
        }
        let code = u32::from_be_bytes(bytes[1..PRIME].try_into().expect("4 bytes"));
        Ok(Self { code, range: u32::MAX, bytes, read: PRIME })
    }

    /// Decode one decision coded with `p`, then update `p` as the encoder did.
    pub fn bit(&mut self, p: &mut Bit) -> bool {
        let bound = p.bound(self.range);
        let bit = if self.code < bound {
            self.range = bound;
            false
        } else {
            self.code -= bound;
            self.range -= bound;
            true
        };
        p.update(bit, ADAPT);
        self.normalise();
        bit
    }

    /// Decode `count` (at most [`MAX_RAW_BITS`]) equiprobable bits.
    pub fn raw(&mut self, count: u32) -> u32 {
        if count == 0 {
            return 0;
        }
        self.range >>= count;
        // A damaged payload can put `code` past the last slot: clamp rather than overflow;
        // `finish` or the caller's bounds catch the damage.
        let value = (self.code / self.range).min((1 << count) - 1);
        self.code -= value * self.range;
        self.normalise();
        value
    }

    fn normalise(&mut self) {
        while self.range < TOP {
            self.range <<= 8;
            // Past the end a damaged payload reads zeros; `finish` reports it.
            let byte = self.bytes.get(self.read).copied().unwrap_or(0);
            self.read += 1;
            self.code = (self.code << 8) | u32::from(byte);
        }
    }

    /// Whether the payload ran out before the decisions did: a damaged payload that any further
    /// decoding would only read more zeros from.
    pub fn overran(&self) -> bool {
        self.read > self.bytes.len()
    }

    /// Check the payload was used up exactly.
    ///
    /// # Errors
    /// [`CodecError::BadPayload`] when bytes were missing or are left over.
    pub fn finish(self) -> Result<(), CodecError> {
        match self.read.cmp(&self.bytes.len()) {
            std::cmp::Ordering::Equal => Ok(()),
            std::cmp::Ordering::Greater => {
                Err(CodecError::BadPayload("range-coded payload ends too early"))
            }
            std::cmp::Ordering::Less => {
                Err(CodecError::BadPayload("range-coded payload has data left over"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic stream of decisions: skewed bits in two contexts and raw values.
    fn script(n: usize) -> Vec<(usize, bool, u32)> {
        let mut state = 0x2545_f491_u32;
        (0..n)
            .map(|i| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                let ctx = i % 2;
                // Context 0 is mostly zeros, context 1 mostly ones.
                let bit = state.is_multiple_of(10) == (ctx == 0);
                (ctx, bit, state & 0x3ff)
            })
            .collect()
    }

    #[test]
    fn round_trips_adaptive_and_raw_bits() {
        let steps = script(20_000);
        let mut enc = Encoder::new();
        let mut probs = [Bit::default(); 2];
        for (ctx, bit, raw) in &steps {
            enc.bit(&mut probs[*ctx], *bit);
            if raw % 7 == 0 {
                enc.raw(*raw, 10);
            }
        }
        let bytes = enc.finish();
        let mut dec = Decoder::new(&bytes).unwrap();
        let mut probs = [Bit::default(); 2];
        for (ctx, bit, raw) in &steps {
            assert_eq!(dec.bit(&mut probs[*ctx]), *bit);
            if raw % 7 == 0 {
                assert_eq!(dec.raw(10), *raw);
            }
        }
        dec.finish().unwrap();
    }

    #[test]
    fn skewed_decisions_cost_about_their_entropy() {
        // 10% ones: 0.469 bits each; adaptation costs a little on top.
        let steps = script(40_000);
        let mut enc = Encoder::new();
        let mut p = Bit::default();
        for (_, bit, _) in steps.iter().filter(|s| s.0 == 0) {
            enc.bit(&mut p, *bit);
        }
        let bits = 8.0 * enc.finish().len() as f64 / 20_000.0;
        assert!((0.45..0.55).contains(&bits), "{bits} bits per decision");
    }

    #[test]
    fn carries_propagate_through_runs_of_ff() {
        // Long runs of the unlikely symbol push `low` up and force carries.
        let mut enc = Encoder::new();
        let mut p = Bit::default();
        let bits: Vec<bool> = (0..5000).map(|i| i % 500 < 480).collect();
        for b in &bits {
            enc.bit(&mut p, *b);
        }
        enc.raw(0xffff, 16);
        enc.raw(0xffff, 16);
        let bytes = enc.finish();
        let mut dec = Decoder::new(&bytes).unwrap();
        let mut p = Bit::default();
        for b in &bits {
            assert_eq!(dec.bit(&mut p), *b);
        }
        assert_eq!((dec.raw(16), dec.raw(16)), (0xffff, 0xffff));
        dec.finish().unwrap();
    }

    #[test]
    fn truncated_or_padded_payloads_are_reported() {
        let mut enc = Encoder::new();
        let mut p = Bit::default();
        for i in 0..3000 {
            enc.bit(&mut p, i % 3 == 0);
        }
        let bytes = enc.finish();
        let decode = |b: &[u8]| -> Result<(), CodecError> {
            let mut dec = Decoder::new(b)?;
            let mut p = Bit::default();
            for _ in 0..3000 {
                dec.bit(&mut p);
            }
            dec.finish()
        };
        decode(&bytes).unwrap();
        assert!(decode(&bytes[..bytes.len() - 1]).is_err());
        let mut long = bytes.clone();
        long.push(7);
        assert!(decode(&long).is_err());
        assert!(decode(&[1, 2, 3, 4, 5]).is_err());
        assert!(decode(&[]).is_err());
    }
}
