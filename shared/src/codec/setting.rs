//! Named codec settings: what a user picks and what the wire's parameters describe.

use std::fmt;
use std::str::FromStr;

use super::CodecError;
use super::alloc::MAX_LEVEL;

/// Bit depths the calibration tables are built for.
pub const SUPPORTED_BITS: [u8; 5] = [8, 6, 4, 3, 2];

/// How one boundary's activations are turned into bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Setting {
    /// Little-endian f32, uncompressed: the lossless reference.
    F32,
    /// Calibrated per-channel quantization, optionally after a low-rank projection, optionally
    /// entropy-coded.
    Quant(QuantSetting),
    /// Steps allocated by measured sensitivity, context-modelled range coding
    /// ([`super::alloc`]).
    Alloc(AllocSetting),
    /// Each channel quantized between its own extremes in the frame, which travel with it, at
    /// this many bits (one of [`SUPPORTED_BITS`]): needs no calibration, so any model on the
    /// runtime can send it ([`super::ranged`]).
    Ranged(u8),
    /// The learned bottleneck trained at the boundary ([`super::learned`]), its codes at this
    /// many bits (one of [`SUPPORTED_BITS`] the calibration has tables for), entropy coded.
    Learned(u8),
}

/// Parameters of the sensitivity-allocated codec: one quality level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AllocSetting {
    /// 0 to [`MAX_LEVEL`]: each level halves the predicted distortion (KL of the answer,
    /// 2^−level nats) and halves every channel's step every two levels.
    pub level: u8,
}

impl AllocSetting {
    pub(crate) fn check(self) -> Result<Self, CodecError> {
        if self.level > MAX_LEVEL {
            return Err(CodecError::UnsupportedLevel(self.level));
        }
        Ok(self)
    }
}

/// Parameters of the quantizing codec.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QuantSetting {
    /// Bits per value, one of [`SUPPORTED_BITS`].
    pub bits: u8,
    /// Keep only the first `rank` principal components of the channel vector (0: no projection).
    pub rank: u16,
    /// rANS-code the symbols with the calibrated per-channel distributions (otherwise bit-pack).
    pub entropy: bool,
}

impl QuantSetting {
    /// `bits` bits per value, entropy-coded, no projection.
    pub const fn bits(bits: u8) -> Self {
        Self { bits, rank: 0, entropy: true }
    }

    /// Number of quantization levels.
    pub fn levels(self) -> usize {
        1 << self.bits
    }

    pub(crate) fn check(self) -> Result<Self, CodecError> {
        if !SUPPORTED_BITS.contains(&self.bits) {
            return Err(CodecError::UnsupportedBits(self.bits));
        }
        Ok(self)
    }
}

crate::serde_by_name!(Setting, "codec setting");

impl fmt::Display for Setting {
    /// `f32`, `q<bits>[-r<rank>][-packed]` (e.g. `q4`, `q2-r16`, `q8-packed`), `s<level>` or
    /// `ranged<bits>` or `learned<bits>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::F32 => f.write_str("f32"),
            Self::Ranged(bits) => write!(f, "ranged{bits}"),
            Self::Learned(bits) => write!(f, "learned{bits}"),
            Self::Alloc(a) => write!(f, "s{}", a.level),
            Self::Quant(q) => {
                write!(f, "q{}", q.bits)?;
                if q.rank > 0 {
                    write!(f, "-r{}", q.rank)?;
                }
                if !q.entropy {
                    f.write_str("-packed")?;
                }
                Ok(())
            }
        }
    }
}

impl FromStr for Setting {
    type Err = CodecError;

    fn from_str(s: &str) -> Result<Self, CodecError> {
        let bad = || CodecError::BadSetting(s.to_string());
        if s == "f32" {
            return Ok(Self::F32);
        }
        if let Some(bits) = s.strip_prefix("ranged") {
            let bits: u8 = digits(bits).ok_or_else(bad)?;
            if !SUPPORTED_BITS.contains(&bits) {
                return Err(CodecError::UnsupportedBits(bits));
            }
            return Ok(Self::Ranged(bits));
        }
        if let Some(bits) = s.strip_prefix("learned") {
            let bits: u8 = digits(bits).ok_or_else(bad)?;
            if !SUPPORTED_BITS.contains(&bits) {
                return Err(CodecError::UnsupportedBits(bits));
            }
            return Ok(Self::Learned(bits));
        }
        if let Some(level) = s.strip_prefix('s') {
            let level = digits(level).ok_or_else(bad)?;
            return Ok(Self::Alloc(AllocSetting { level }.check()?));
        }
        let mut parts = s.split('-');
        let bits = parts.next().and_then(|p| p.strip_prefix('q')).ok_or_else(bad)?;
        let mut q = QuantSetting::bits(bits.parse().map_err(|_| bad())?);
        for part in parts {
            match part {
                "packed" if q.entropy => q.entropy = false,
                r if r.starts_with('r') && q.rank == 0 => {
                    q.rank = r[1..].parse().ok().filter(|r| *r > 0).ok_or_else(bad)?;
                }
                _ => return Err(bad()),
            }
        }
        Ok(Self::Quant(q.check()?))
    }
}

/// A number written in ASCII digits only: `parse` alone would take `+3`.
fn digits(s: &str) -> Option<u8> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for name in [
            "f32",
            "q8",
            "q4",
            "q3-packed",
            "q2-r16",
            "q6-r8-packed",
            "s0",
            "s12",
            "s24",
            "ranged8",
            "ranged2",
            "learned4",
            "learned2",
        ] {
            assert_eq!(name.parse::<Setting>().unwrap().to_string(), name);
        }
    }

    #[test]
    fn bad_names_are_refused() {
        for name in [
            "",
            "q",
            "q5",
            "q4-r0",
            "q4-x",
            "q4-packed-packed",
            "f16",
            "q4-r16-r8",
            "s",
            "s25",
            "s+3",
            "s-1",
            "s1.5",
            "s300",
            "s4-packed",
            "ranged",
            "ranged5",
            "ranged+8",
            "ranged8-packed",
            "learned",
            "learned5",
            "learned+4",
            "learned4-packed",
        ] {
            assert!(name.parse::<Setting>().is_err(), "{name}");
        }
    }
}
