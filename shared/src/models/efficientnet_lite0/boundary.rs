//! The 21 named places where the network can be cut.

use std::fmt;
use std::str::FromStr;

use super::{ModelError, Result};

/// Number of boundaries: input, stem, block0..block15, head, pool, logits.
pub const NUM_BOUNDARIES: usize = 21;

const NAMES: [&str; NUM_BOUNDARIES] = [
    "input", "stem", "block0", "block1", "block2", "block3", "block4", "block5", "block6",
    "block7", "block8", "block9", "block10", "block11", "block12", "block13", "block14", "block15",
    "head", "pool", "logits",
];

/// The privacy floor a client gets when it asks for one without naming a boundary: the earliest
/// boundary whose features a white-box attacker could not turn back into a recognisable photo
/// at the default codec. Measured, not assumed (docs/privacy.md, `./run.sh invert`): through
/// block15 the reconstructions still show the subject (SSIM ≥ 0.3 on the luma); from the head
/// conv's output on they do not.
pub const PRIVACY_FLOOR: Boundary = Boundary::HEAD;

/// A point between two stages of the network. Boundary `k` is the output of stage `k`
/// (stage 0 does not exist: boundary 0 is the normalized input image).
///
/// Running the network from boundary `a` to boundary `b` applies stages `a+1..=b`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Boundary(u8);

impl Boundary {
    /// The normalized input image, `[3, 224, 224]`.
    pub const INPUT: Self = Self(0);
    /// After the stem convolution, `[32, 112, 112]`.
    pub const STEM: Self = Self(1);
    /// After the 1x1 head convolution, `[1280, 7, 7]`.
    pub const HEAD: Self = Self(18);
    /// After global average pooling, `[1280]` (stored as `[1280, 1, 1]`).
    pub const POOL: Self = Self(19);
    /// Class logits, `[1000]` (stored as `[1000, 1, 1]`).
    pub const LOGITS: Self = Self(20);

    /// Boundary after MBConv block `i` (0..16).
    pub fn block(i: usize) -> Result<Self> {
        if i < 16 {
            Ok(Self(i as u8 + 2))
        } else {
            Err(ModelError::UnknownBoundary(format!("block{i}")))
        }
    }

    /// Boundary from its index (0..21), as carried in frames.
    pub fn from_index(index: u8) -> Result<Self> {
        if (index as usize) < NUM_BOUNDARIES {
            Ok(Self(index))
        } else {
            Err(ModelError::UnknownBoundary(index.to_string()))
        }
    }

    /// Index 0..21.
    pub fn index(self) -> u8 {
        self.0
    }

    /// Name as used in URLs, CLIs and the page: `input`, `stem`, `block0`, ..., `logits`.
    pub fn name(self) -> &'static str {
        NAMES[self.0 as usize]
    }

    /// Every boundary in forward order.
    pub fn all() -> impl DoubleEndedIterator<Item = Self> + ExactSizeIterator {
        (0..NUM_BOUNDARIES as u8).map(Self)
    }
}

crate::serde_by_name!(Boundary, "boundary");

impl fmt::Display for Boundary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Boundary {
    type Err = ModelError;

    fn from_str(s: &str) -> Result<Self> {
        NAMES
            .iter()
            .position(|n| *n == s)
            .map(|i| Self(i as u8))
            .ok_or_else(|| ModelError::UnknownBoundary(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for b in Boundary::all() {
            assert_eq!(b.name().parse::<Boundary>().unwrap(), b);
            assert_eq!(Boundary::from_index(b.index()).unwrap(), b);
        }
        assert_eq!(Boundary::block(15).unwrap().name(), "block15");
        assert!(Boundary::block(16).is_err());
        assert!(Boundary::from_index(21).is_err());
        assert!("block16".parse::<Boundary>().is_err());
    }

    #[test]
    fn json_is_the_name() {
        let b = Boundary::block(5).unwrap();
        assert_eq!(serde_json::to_string(&b).unwrap(), "\"block5\"");
        assert_eq!(serde_json::from_str::<Boundary>("\"block5\"").unwrap(), b);
        let e = serde_json::from_str::<Boundary>("\"block99\"").unwrap_err().to_string();
        assert!(e.contains("block99"), "{e}");
    }
}
