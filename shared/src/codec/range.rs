//! An adaptive range coder: the entropy coder of the context-modelled settings
//! ([`super::alloc`]).
//!
//! It codes symbols of an 8-letter alphabet with a [`Cdf`] and binary decisions with a [`Bit`];
//! both adapt after every use, so a context's statistics are learnt from the frame itself:
//! nothing per image or per channel has to be stored or sent. Everything is integer arithmetic
//! (15-bit cumulative counts, 12-bit probabilities, a 32-bit range, a 64-bit low word carrying
//! into the bytes already written), so the browser and the server stay bit-exact.
//! Equiprobable bits are not range-coded at all (that would cost the decoder a division
//! each): they go to a bypass stream (`bypass.rs`).
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
        let (down, up) = (self.0 - (self.0 >> rate), self.0 + ((PROB_ONE - self.0) >> rate));
        self.0 = if bit { down } else { up };
    }

    /// Split of `range` given to a zero bit: never 0 and never all of it.
    fn bound(self, range: u32) -> u32 {
        (range >> PROB_BITS) * u32::from(self.0.clamp(32, PROB_ONE - 32))
    }
}

/// Symbols of a [`Cdf`].
pub const SYMBOLS: usize = 8;
/// Bits of the scale a [`Cdf`]'s interval bounds are computed on.
const CDF_BITS: u32 = 15;
/// Share of that scale every symbol keeps whatever the statistics: no symbol's interval is
/// ever empty, so every symbol stays codable.
const CDF_FLOOR: u32 = 4;
/// What a [`Cdf`]'s adaptive counts sum to: the scale less the floors.
const CDF_TOTAL: i16 = ((1 << CDF_BITS) - SYMBOLS as u32 * CDF_FLOOR) as i16;

/// An adaptive distribution over [`SYMBOLS`] symbols, kept as cumulative counts.
///
/// Coding a symbol moves every cumulative count a fraction of the way toward the step function
/// that symbol would have: one symbol costs one interval lookup and one pass over 8 integers,
/// where a binarised code spends an adaptive binary decision (and a renormalisation) per step
/// of the symbol's unary prefix (the first context model did, and took 1.6× as long to encode
/// and decode; docs/codec.md). Eight letters rather than sixteen: the decoder's interval
/// lookup and the update cost half as much, and frames came out no larger (the tail the larger
/// alphabet modelled is nearly flat). Adaptation starts fast and slows down as the context
/// sees more symbols.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cdf {
    /// `below[s]`: the count of symbols less than `s`, out of [`CDF_TOTAL`]; `below[0]` = 0.
    /// Eight 16-bit lanes: the update is one vector operation natively.
    below: [i16; SYMBOLS],
    seen: u16,
}

impl Default for Cdf {
    fn default() -> Self {
        let mut below = [0; SYMBOLS];
        for (s, b) in below.iter_mut().enumerate() {
            *b = (i32::from(CDF_TOTAL) * s as i32 / SYMBOLS as i32) as i16;
        }
        Self { below, seen: 0 }
    }
}

impl Cdf {
    /// Lower bound of symbol `s`'s interval within a range of `unit << CDF_BITS`.
    fn bound(&self, unit: u32, s: usize) -> u32 {
        unit * (self.below[s] as u32 + s as u32 * CDF_FLOOR)
    }

    /// How many of the bounds of symbols 1.. are at or below `code`: the symbol whose
    /// interval holds it. Seven independent multiply-compares, no branch to mispredict (a
    /// linear search mispredicts its exit on nearly every symbol) and no chain of loads each
    /// waiting on the last (as in a binary search).
    fn count_at_or_below(&self, unit: u32, code: u32) -> usize {
        let mut count = 0;
        for s in 1..SYMBOLS {
            count += usize::from(self.bound(unit, s) <= code);
        }
        count
    }

    #[inline]
    fn update(&mut self, symbol: usize) {
        // A window of 16 symbols at first, widening to 128 once the context has seen 256.
        let rate =
            4 + u32::from(self.seen > 15) + u32::from(self.seen > 63) + u32::from(self.seen > 255);
        self.seen = self.seen.saturating_add(1);
        // Branch-free over a fixed array, so that it vectorises: `above` is all ones where
        // s > symbol (the sign of symbol − s), selecting the total as the target there.
        let symbol = symbol as i16;
        for (s, b) in self.below.iter_mut().enumerate() {
            let above = (symbol - s as i16) >> 15;
            *b += ((above & CDF_TOTAL) - *b) >> rate;
        }
    }
}

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
    #[inline]
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

    /// Code `symbol` (below [`SYMBOLS`]) with the adaptive distribution `cdf`, then update it.
    #[inline]
    pub fn symbol(&mut self, cdf: &mut Cdf, symbol: usize) {
        let unit = self.range >> CDF_BITS;
        let low = cdf.bound(unit, symbol);
        self.low += u64::from(low);
        // The last symbol takes what the scale leaves over.
        self.range =
            if symbol + 1 < SYMBOLS { cdf.bound(unit, symbol + 1) - low } else { self.range - low };
        cdf.update(symbol);
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
    #[inline]
    pub fn bit(&mut self, p: &mut Bit) -> bool {
        let bound = p.bound(self.range);
        // Selected rather than branched on: a sign is a coin toss for the branch predictor.
        let bit = self.code >= bound;
        let taken = 0u32.wrapping_sub(u32::from(bit));
        self.code -= bound & taken;
        self.range = (bound & !taken) | (self.range.wrapping_sub(bound) & taken);
        p.update(bit, ADAPT);
        self.normalise();
        bit
    }

    /// Decode one symbol coded with `cdf`, then update `cdf` as the encoder did.
    #[inline]
    pub fn symbol(&mut self, cdf: &mut Cdf) -> usize {
        let unit = self.range >> CDF_BITS;
        let symbol = cdf.count_at_or_below(unit, self.code);
        let next = if symbol + 1 < SYMBOLS { cdf.bound(unit, symbol + 1) } else { self.range };
        let low = cdf.bound(unit, symbol);
        // A damaged payload can put `code` past the top of the range; the top symbol's interval
        // then absorbs it, and `finish` or the caller's bounds catch the damage. Every interval
        // is at least `unit * CDF_FLOOR` wide, so `next > low`.
        self.code -= low;
        self.range = next - low;
        cdf.update(symbol);
        self.normalise();
        symbol
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

    /// A deterministic stream of decisions: skewed bits in two contexts and 16-letter symbols.
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

    /// A skewed symbol from a script value: small symbols common, every one of the 16 used.
    fn letter(raw: u32) -> usize {
        ((raw % 97) as usize * (raw % 89) as usize / 520).min(SYMBOLS - 1)
    }

    #[test]
    fn round_trips_adaptive_bits_and_symbols() {
        let steps = script(20_000);
        let mut enc = Encoder::new();
        let (mut probs, mut cdfs) = ([Bit::default(); 2], [Cdf::default(); 2]);
        for (ctx, bit, raw) in &steps {
            enc.bit(&mut probs[*ctx], *bit);
            enc.symbol(&mut cdfs[*ctx], letter(*raw));
        }
        let bytes = enc.finish();
        let mut dec = Decoder::new(&bytes).unwrap();
        let (mut probs, mut cdfs) = ([Bit::default(); 2], [Cdf::default(); 2]);
        for (ctx, bit, raw) in &steps {
            assert_eq!(dec.bit(&mut probs[*ctx]), *bit);
            assert_eq!(dec.symbol(&mut cdfs[*ctx]), letter(*raw));
        }
        dec.finish().unwrap();
    }

    #[test]
    fn symbols_cost_about_their_entropy_and_rare_ones_stay_codable() {
        let steps = script(40_000);
        let letters: Vec<usize> = steps.iter().map(|s| letter(s.2)).collect();
        let mut counts = [0f64; SYMBOLS];
        for l in &letters {
            counts[*l] += 1.0;
        }
        assert!(counts.iter().all(|c| *c > 0.0), "{counts:?}");
        let n = letters.len() as f64;
        let entropy: f64 = counts.iter().map(|c| -c / n * (c / n).log2()).sum();
        let mut enc = Encoder::new();
        let mut cdf = Cdf::default();
        for l in &letters {
            enc.symbol(&mut cdf, *l);
        }
        // A long run of the rarest symbol after the model has learnt it is rare.
        for _ in 0..100 {
            enc.symbol(&mut cdf, SYMBOLS - 1);
        }
        let bytes = enc.finish();
        let bits = 8.0 * bytes.len() as f64 / n;
        assert!(bits > entropy && bits < entropy * 1.03 + 0.05, "{bits} bits, entropy {entropy}");
        let mut dec = Decoder::new(&bytes).unwrap();
        let mut cdf = Cdf::default();
        assert!(letters.iter().all(|l| dec.symbol(&mut cdf) == *l));
        assert!((0..100).all(|_| dec.symbol(&mut cdf) == SYMBOLS - 1));
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
        let mut cdf = Cdf::default();
        for _ in 0..64 {
            enc.symbol(&mut cdf, SYMBOLS - 1);
        }
        let bytes = enc.finish();
        let mut dec = Decoder::new(&bytes).unwrap();
        let mut p = Bit::default();
        for b in &bits {
            assert_eq!(dec.bit(&mut p), *b);
        }
        let mut cdf = Cdf::default();
        assert!((0..64).all(|_| dec.symbol(&mut cdf) == SYMBOLS - 1));
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
