//! How the language model's hidden states cross the `/llm` socket: one row of `width` values
//! per position, each row coded on its own (a decoding step sends one row each way, so there
//! is nothing across rows to exploit, and a row never waits for another).
//!
//! The families measured on SmolLM2's hidden states by `./run.sh llm-codec`
//! (`reports/llm-codec`, docs/llm.md): IEEE half and bfloat16 floats, and 8 bits per value with
//! one scale per row, with or without the row's largest values sent apart. No calibration: the
//! same code on both sides, nothing fitted.

use std::fmt;
use std::str::FromStr;

use crate::container::half::{bf16_from_f32, bf16_to_f32, f16_from_f32, f16_to_f32};

/// A hidden-state row encoding; the byte in a hidden frame's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HiddenCodec {
    /// Little-endian f32: exact.
    F32,
    /// IEEE 754 half precision (11 significant bits, largest 65,504).
    F16,
    /// bfloat16: f32's range, 8 significant bits.
    Bf16,
    /// Per row an f32 scale (the largest magnitude / 127), then one signed byte per value.
    Q8,
    /// [`Q8`](Self::Q8) after taking out the row's [`OUTLIERS`] largest magnitudes, sent as
    /// (u16 index, f16 value) pairs before the scale: a few channels of a transformer's
    /// residual stream are hundreds of times the others, and would set the step for all.
    Q8Outliers,
}

/// Values per row [`HiddenCodec::Q8Outliers`] sends apart.
pub const OUTLIERS: usize = 8;

/// What the client sends unless told otherwise: half the bytes of `f32`, and where its next
/// token differed from the unsplit model's on the study's prompts, the two were tied to within
/// a thousandth of a logit; the 8-bit codes lose tokens that were not ties (docs/llm.md, "The
/// hidden states' codec").
pub const DEFAULT_HIDDEN_CODEC: HiddenCodec = HiddenCodec::F16;

/// A hidden-state payload that does not decode.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HiddenCodecError {
    /// An encoding byte this side does not know.
    #[error("unknown hidden-state encoding {0}")]
    Unknown(u8),
    /// An encoding name this side does not know.
    #[error("unknown hidden-state encoding {0:?} (known: f32, f16, bf16, q8, q8o)")]
    UnknownName(String),
    /// An outlier's index past the row.
    #[error("an outlier at index {index} of a row of {width}")]
    Index {
        /// The index read.
        index: usize,
        /// Values per row.
        width: usize,
    },
    /// The payload is not `rows` rows of this encoding.
    #[error("{rows} rows of {width} values in {codec} take {expected} bytes, not {got}")]
    Length {
        /// The encoding.
        codec: HiddenCodec,
        /// Rows announced.
        rows: usize,
        /// Values per row.
        width: usize,
        /// Bytes they take.
        expected: usize,
        /// Bytes present.
        got: usize,
    },
}

impl HiddenCodec {
    /// Every encoding, in the order of their ids.
    pub const ALL: [HiddenCodec; 5] = [
        HiddenCodec::F32,
        HiddenCodec::F16,
        HiddenCodec::Bf16,
        HiddenCodec::Q8,
        HiddenCodec::Q8Outliers,
    ];

    /// The byte frames carry.
    pub fn id(self) -> u8 {
        match self {
            HiddenCodec::F32 => 0,
            HiddenCodec::F16 => 1,
            HiddenCodec::Bf16 => 2,
            HiddenCodec::Q8 => 3,
            HiddenCodec::Q8Outliers => 4,
        }
    }

    /// The encoding of a frame's byte.
    pub fn from_id(id: u8) -> Result<Self, HiddenCodecError> {
        Self::ALL.into_iter().find(|c| c.id() == id).ok_or(HiddenCodecError::Unknown(id))
    }

    /// Its name in the page, the CLI and the reports.
    pub fn name(self) -> &'static str {
        match self {
            HiddenCodec::F32 => "f32",
            HiddenCodec::F16 => "f16",
            HiddenCodec::Bf16 => "bf16",
            HiddenCodec::Q8 => "q8",
            HiddenCodec::Q8Outliers => "q8o",
        }
    }

    /// Bytes one row of `width` values takes (saturating: a crafted width cannot wrap).
    pub fn row_bytes(self, width: usize) -> usize {
        match self {
            HiddenCodec::F32 => width.saturating_mul(4),
            HiddenCodec::F16 | HiddenCodec::Bf16 => width.saturating_mul(2),
            HiddenCodec::Q8 => width.saturating_add(4),
            HiddenCodec::Q8Outliers => width.saturating_add(4 + 4 * OUTLIERS.min(width)),
        }
    }

    /// Append `values` (rows of `width`; a partial last row is the caller's bug and coded as
    /// far as it goes) to `out`.
    pub fn encode(self, values: &[f32], width: usize, out: &mut Vec<u8>) {
        // At most 4 bytes a value (q8o adds a few per row, which `Vec` grows for).
        out.reserve(values.len().saturating_mul(4));
        match self {
            HiddenCodec::F32 => values.iter().for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
            HiddenCodec::F16 => {
                values.iter().for_each(|v| out.extend_from_slice(&f16_from_f32(*v).to_le_bytes()))
            }
            HiddenCodec::Bf16 => {
                values.iter().for_each(|v| out.extend_from_slice(&bf16_from_f32(*v).to_le_bytes()))
            }
            HiddenCodec::Q8 => values.chunks(width.max(1)).for_each(|row| q8(row, out)),
            HiddenCodec::Q8Outliers => {
                let (mut rest, mut order) = (Vec::with_capacity(width), Vec::with_capacity(width));
                for row in values.chunks(width.max(1)) {
                    rest.clear();
                    rest.extend_from_slice(row);
                    order.clear();
                    order.extend(0..row.len());
                    let k = OUTLIERS.min(width);
                    if k < row.len() {
                        order.select_nth_unstable_by(k, |&a, &b| {
                            row[b].abs().total_cmp(&row[a].abs())
                        });
                    }
                    // A short last row still sends k pairs (index 0, value 0 repeat harmlessly).
                    for i in (0..k).map(|i| order.get(i).copied().unwrap_or(0)) {
                        out.extend_from_slice(&(i as u16).to_le_bytes());
                        let v = f16_from_f32(rest.get(i).copied().unwrap_or(0.0));
                        out.extend_from_slice(&v.to_le_bytes());
                        if let Some(x) = rest.get_mut(i) {
                            *x = 0.0;
                        }
                    }
                    q8(&rest, out);
                }
            }
        }
    }

    /// `values` (rows of `width`) as the other side decodes them.
    pub fn round_trip(self, values: &[f32], width: usize) -> Vec<f32> {
        let mut bytes = Vec::new();
        self.encode(values, width, &mut bytes);
        self.decode(&bytes, values.len() / width.max(1), width)
            .expect("whole rows decode as they were encoded")
    }

    /// `rows × width` values from `bytes`, which must be exactly that many rows. Values are not
    /// checked here: a crafted row can decode to NaN or infinity, which the model refuses.
    pub fn decode(
        self,
        bytes: &[u8],
        rows: usize,
        width: usize,
    ) -> Result<Vec<f32>, HiddenCodecError> {
        let expected = rows.checked_mul(self.row_bytes(width));
        if expected != Some(bytes.len()) {
            return Err(HiddenCodecError::Length {
                codec: self,
                rows,
                width,
                expected: expected.unwrap_or(usize::MAX),
                got: bytes.len(),
            });
        }
        let pairs = || bytes.chunks_exact(2).map(|b| [b[0], b[1]]);
        Ok(match self {
            HiddenCodec::F32 => bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
                .collect(),
            HiddenCodec::F16 => pairs().map(|b| f16_to_f32(u16::from_le_bytes(b))).collect(),
            HiddenCodec::Bf16 => pairs().map(|b| bf16_to_f32(u16::from_le_bytes(b))).collect(),
            HiddenCodec::Q8 => {
                let mut out = Vec::with_capacity(rows * width);
                for row in bytes.chunks_exact(self.row_bytes(width)) {
                    un_q8(row, &mut out);
                }
                out
            }
            HiddenCodec::Q8Outliers => {
                let mut out = Vec::with_capacity(rows * width);
                let k = OUTLIERS.min(width);
                for row in bytes.chunks_exact(self.row_bytes(width)) {
                    let (pairs, q) = row.split_at(4 * k);
                    let start = out.len();
                    un_q8(q, &mut out);
                    for p in pairs.chunks_exact(4) {
                        let index = usize::from(u16::from_le_bytes([p[0], p[1]]));
                        let value = f16_to_f32(u16::from_le_bytes([p[2], p[3]]));
                        let slot = out[start..]
                            .get_mut(index)
                            .ok_or(HiddenCodecError::Index { index, width })?;
                        *slot += value;
                    }
                }
                out
            }
        })
    }
}

/// One row as its scale (largest magnitude / 127) and a signed byte per value.
fn q8(row: &[f32], out: &mut Vec<u8>) {
    let max = row.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let scale = max / 127.0;
    let inverse = if scale > 0.0 { 1.0 / scale } else { 0.0 };
    out.extend_from_slice(&scale.to_le_bytes());
    out.extend(row.iter().map(|v| (v * inverse).round().clamp(-127.0, 127.0) as i8 as u8));
}

/// The values of one [`q8`] row (scale, then bytes) appended to `out`.
fn un_q8(row: &[u8], out: &mut Vec<f32>) {
    let (scale, q) = row.split_at(4);
    let scale = f32::from_le_bytes(scale.try_into().expect("4 bytes"));
    out.extend(q.iter().map(|&b| f32::from(b as i8) * scale));
}

impl fmt::Display for HiddenCodec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for HiddenCodec {
    type Err = HiddenCodecError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| HiddenCodecError::UnknownName(s.to_string()))
    }
}

crate::serde_by_name!(HiddenCodec, "hidden-state encoding");

#[cfg(test)]
mod tests {
    use super::*;

    fn rows() -> Vec<f32> {
        // Two rows of 5: one with an outlier (hidden states have a few large channels), one
        // all zero (the scale of an empty row must not divide by zero).
        vec![0.5, -1.25, 300.0, 1e-3, -0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    }

    #[test]
    fn each_encoding_round_trips_within_its_precision() {
        let x = rows();
        for codec in HiddenCodec::ALL {
            let mut bytes = Vec::new();
            codec.encode(&x, 5, &mut bytes);
            assert_eq!(bytes.len(), 2 * codec.row_bytes(5), "{codec}");
            let y = codec.decode(&bytes, 2, 5).unwrap();
            // Error bounds: half an ulp of each float format; half a step of the row's scale.
            for (a, b) in x.iter().zip(&y) {
                let bound = match codec {
                    HiddenCodec::F32 => 0.0,
                    HiddenCodec::F16 => a.abs() * 2f32.powi(-11) + 6e-8,
                    HiddenCodec::Bf16 => a.abs() * 2f32.powi(-8),
                    HiddenCodec::Q8 => 300.0 / 127.0 / 2.0,
                    // 300 goes apart (f16 holds it exactly); the rest's step is 1.25 / 127.
                    HiddenCodec::Q8Outliers => 1.25 / 127.0 / 2.0 + a.abs() * 2f32.powi(-11),
                };
                assert!((a - b).abs() <= bound, "{codec}: {a} became {b}");
            }
            assert!(y[5..].iter().all(|v| *v == 0.0), "{codec}: a zero row stays zero");
            assert_eq!(codec.name().parse::<HiddenCodec>().unwrap(), codec);
            assert_eq!(HiddenCodec::from_id(codec.id()).unwrap(), codec);
        }
    }

    #[test]
    fn outliers_go_apart_so_the_other_values_keep_their_precision() {
        // 64 values near 1 and two channels a thousand times larger, like the residual stream.
        let mut row: Vec<f32> = (0..64).map(|i| ((i * 37 % 64) as f32 - 32.0) / 32.0).collect();
        row[5] = 2_000.0;
        row[40] = -1_500.0;
        let worst = |codec: HiddenCodec| {
            let mut bytes = Vec::new();
            codec.encode(&row, 64, &mut bytes);
            let y = codec.decode(&bytes, 1, 64).unwrap();
            row.iter()
                .zip(&y)
                .filter(|(a, _)| a.abs() < 10.0)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max)
        };
        assert!(worst(HiddenCodec::Q8) > 0.5, "q8: the step is 2000/127");
        assert!(
            worst(HiddenCodec::Q8Outliers) <= 1.0 / 127.0,
            "q8o: {}",
            worst(HiddenCodec::Q8Outliers)
        );
        // An outlier index past the row is refused, not written out of place.
        let mut bytes = Vec::new();
        HiddenCodec::Q8Outliers.encode(&row, 64, &mut bytes);
        bytes[0..2].copy_from_slice(&64u16.to_le_bytes());
        assert_eq!(
            HiddenCodec::Q8Outliers.decode(&bytes, 1, 64),
            Err(HiddenCodecError::Index { index: 64, width: 64 })
        );
    }

    #[test]
    fn wrong_lengths_and_unknown_encodings_are_refused() {
        for codec in HiddenCodec::ALL {
            let mut bytes = Vec::new();
            codec.encode(&rows(), 5, &mut bytes);
            for cut in [0, 1, bytes.len() - 1] {
                assert!(codec.decode(&bytes[..cut], 2, 5).is_err(), "{codec} cut to {cut}");
            }
            assert!(codec.decode(&bytes, 3, 5).is_err());
            assert!(codec.decode(&bytes, usize::MAX, usize::MAX).is_err(), "no overflow");
        }
        assert_eq!(HiddenCodec::from_id(9), Err(HiddenCodecError::Unknown(9)));
        assert!("f8".parse::<HiddenCodec>().is_err());
    }

    #[test]
    fn half_precision_saturates_to_infinity_which_the_model_refuses() {
        let mut bytes = Vec::new();
        HiddenCodec::F16.encode(&[1e6], 1, &mut bytes);
        assert!(HiddenCodec::F16.decode(&bytes, 1, 1).unwrap()[0].is_infinite());
    }
}
