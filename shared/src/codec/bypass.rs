//! Equiprobable bits kept apart from the range coder: the low bits of large magnitudes, the
//! extra bits of a magnitude band. Range-coding a bit at probability one half costs a division
//! in the decoder; packing it here costs a shift, and compresses exactly as well.

use super::CodecError;

/// Most bits one call writes or reads.
pub const MAX_BITS: u32 = 16;

/// Packs bits, least significant first.
#[derive(Debug, Default)]
pub struct BitWriter {
    bytes: Vec<u8>,
    acc: u64,
    filled: u32,
}

impl BitWriter {
    /// Append the low `count` (at most [`MAX_BITS`]) bits of `value`.
    pub fn put(&mut self, value: u32, count: u32) {
        debug_assert!(count <= MAX_BITS);
        self.acc |= u64::from(value & ((1 << count) - 1)) << self.filled;
        self.filled += count;
        // Four bytes at a time; `filled` stays below 32 + MAX_BITS.
        if self.filled >= 32 {
            self.bytes.extend_from_slice(&(self.acc as u32).to_le_bytes());
            self.acc >>= 32;
            self.filled -= 32;
        }
    }

    /// The bytes, the last one padded with zeros.
    pub fn finish(mut self) -> Vec<u8> {
        let tail = self.filled.div_ceil(8) as usize;
        self.bytes.extend_from_slice(&self.acc.to_le_bytes()[..tail]);
        self.bytes
    }
}

/// Reads what a [`BitWriter`] wrote.
#[derive(Debug)]
pub struct BitReader<'a> {
    bytes: &'a [u8],
    next: usize,
    acc: u64,
    held: u32,
}

impl<'a> BitReader<'a> {
    /// Read `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, next: 0, acc: 0, held: 0 }
    }

    /// The next `count` (at most [`MAX_BITS`]) bits; zeros past the end, which
    /// [`BitReader::finish`] reports.
    pub fn get(&mut self, count: u32) -> u32 {
        if self.held < count {
            // Four bytes at a time where there are four; `held` stays below 32 + MAX_BITS.
            let word = match self.bytes.get(self.next..self.next + 4) {
                Some(four) => u32::from_le_bytes(four.try_into().expect("4 bytes")),
                None => (0..4).rev().fold(0, |w, i| {
                    (w << 8) | u32::from(self.bytes.get(self.next + i).copied().unwrap_or(0))
                }),
            };
            self.acc |= u64::from(word) << self.held;
            self.next += 4;
            self.held += 32;
        }
        let value = (self.acc & ((1 << count) - 1)) as u32;
        self.acc >>= count;
        self.held -= count;
        value
    }

    /// Check every byte was read, and nothing past the end.
    ///
    /// # Errors
    /// [`CodecError::BadPayload`] when bits were missing, whole bytes are left over, or the
    /// last byte's padding is not zero.
    pub fn finish(self) -> Result<(), CodecError> {
        // Bytes fetched ahead and not needed are the ones `held` counts beyond the last bit.
        // Every held bit came from a fetched byte, so this does not underflow.
        let used = self.next - (self.held / 8) as usize;
        if used > self.bytes.len() {
            return Err(CodecError::BadPayload("bypass bits end too early"));
        }
        if used < self.bytes.len() || self.acc != 0 {
            return Err(CodecError::BadPayload("bypass bits have data left over"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_reports_damage() {
        let calls: Vec<(u32, u32)> =
            (0..500u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 7, i % 17)).collect();
        let mut w = BitWriter::default();
        for (v, n) in &calls {
            w.put(*v, *n);
        }
        let bytes = w.finish();
        let read = |b: &[u8]| {
            let mut r = BitReader::new(b);
            let ok = calls.iter().all(|(v, n)| r.get(*n) == v & ((1 << n) - 1));
            (ok, r.finish())
        };
        assert_eq!(read(&bytes), (true, Ok(())));
        assert!(read(&bytes[..bytes.len() - 1]).1.is_err());
        let mut long = bytes.clone();
        long.push(0);
        assert!(read(&long).1.is_err());
        // Padding bits that are not zero are damage too.
        let mut w = BitWriter::default();
        w.put(1, 3);
        let mut r = BitReader::new(&[0b1001]);
        assert_eq!(r.get(3), 1);
        assert!(r.finish().is_err());
        assert_eq!(w.finish(), vec![1]);
    }
}
