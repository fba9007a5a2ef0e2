//! A [`TensorFile`] with its weights in a few bits: the file a light model travels in.
//!
//! Every tensor of two or more dimensions (convolution kernels, the classifier's matrix) is cut
//! into groups of consecutive values (a group per output channel, or fixed-length groups) and
//! stored as symmetric integers with one f32 scale per group; one-dimensional tensors (the
//! biases, a few KB in all) stay f32, because an error there shifts a whole channel. Reading
//! gives back a plain [`TensorFile`] of the dequantized values, so whatever loads weights loads
//! these too.
//!
//! Layout (all integers little-endian):
//!
//! ```text
//! magic [4] | version u16 | reserved u16 | count u32
//! count x { name_len u16 | name utf-8 | ndim u8 | dims u32 x ndim | bits u8 |
//!           bits 32: f32 x numel
//!           bits 8 or 4: group_len u32 | scale f32 x ceil(numel / group_len) |
//!                        values: i8 x numel (8), or two's-complement nibbles, low first (4) }
//! fnv1a-64 of every byte above, u64
//! ```

use super::tensor_file::{finish, open, read_name_dims, seal, write_header, write_name_dims};
use super::{ContainerError, TensorFile};

/// Layout version this build reads and writes.
pub const QUANTIZED_FILE_VERSION: u16 = 1;
/// Header bytes before the first tensor (a capacity hint).
const HEADER_LEN: usize = 12;

/// How a tensor's values are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quantization {
    /// 8-bit integers, one scale per output channel (the first dimension).
    Int8PerChannel,
    /// 4-bit integers, one scale per `group` consecutive values.
    Int4Grouped {
        /// Values per scale.
        group: usize,
    },
}

impl Quantization {
    fn bits(self) -> u8 {
        match self {
            Self::Int8PerChannel => 8,
            Self::Int4Grouped { .. } => 4,
        }
    }

    fn group_len(self, dims: &[usize]) -> usize {
        match self {
            Self::Int8PerChannel => dims[1..].iter().product::<usize>().max(1),
            Self::Int4Grouped { group } => group.max(1),
        }
    }
}

/// The largest integer level of a `bits`-bit symmetric quantizer.
fn max_level(bits: u8) -> f32 {
    f32::from((1u8 << (bits - 1)) - 1)
}

/// Quantize `weights` (see the module docs) and write the file.
pub fn quantize(weights: &TensorFile, how: Quantization) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + weights.num_values() + 64);
    write_header(&mut out, QUANTIZED_MAGIC, QUANTIZED_FILE_VERSION, weights.names().count());
    for (name, dims, data) in weights.iter() {
        write_name_dims(&mut out, name, dims);
        if dims.len() < 2 {
            out.push(32);
            for v in data {
                out.extend_from_slice(&v.to_le_bytes());
            }
            continue;
        }
        let bits = how.bits();
        let group = how.group_len(dims);
        out.push(bits);
        out.extend_from_slice(&(group as u32).to_le_bytes());
        let top = max_level(bits);
        let scales: Vec<f32> =
            data.chunks(group).map(|g| g.iter().fold(0f32, |m, v| m.max(v.abs())) / top).collect();
        for s in &scales {
            out.extend_from_slice(&s.to_le_bytes());
        }
        let levels = data.chunks(group).zip(&scales).flat_map(|(g, &s)| {
            g.iter().map(move |v| if s > 0.0 { (v / s).round().clamp(-top, top) as i8 } else { 0 })
        });
        if bits == 8 {
            out.extend(levels.map(|q| q as u8));
        } else {
            let levels: Vec<i8> = levels.collect();
            out.extend(levels.chunks(2).map(|p| {
                let lo = (p[0] as u8) & 0x0f;
                let hi = p.get(1).map_or(0, |q| (*q as u8) & 0x0f);
                lo | (hi << 4)
            }));
        }
    }
    seal(out)
}

/// First four bytes of a quantized weights file.
pub const QUANTIZED_MAGIC: [u8; 4] = *b"SPLQ";

/// Read a file written by [`quantize`]: the tensors with their values dequantized.
///
/// # Errors
/// A [`ContainerError`] naming the first problem: wrong magic or version, a checksum mismatch
/// (a corrupt or partial download), or an absurd header.
pub fn dequantize(bytes: &[u8]) -> Result<TensorFile, ContainerError> {
    let (mut r, count, _) =
        open(bytes, QUANTIZED_MAGIC, QUANTIZED_FILE_VERSION..=QUANTIZED_FILE_VERSION)?;
    let malformed = |m: String| ContainerError::Malformed(m);
    let mut out = TensorFile::new();
    for _ in 0..count {
        let (name, dims) = read_name_dims(&mut r)?;
        // Every stored value takes at least half a byte: a count the rest cannot hold is a lie.
        let numel = dims
            .iter()
            .try_fold(1usize, |a, d| a.checked_mul(*d))
            .filter(|n| *n / 2 <= r.remaining())
            .ok_or_else(|| malformed(format!("tensor {name} {dims:?} does not fit")))?;
        let data = match r.u8()? {
            32 => r
                .take(numel.checked_mul(4).ok_or_else(|| malformed(format!("{name} too large")))?)?
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
                .collect(),
            bits @ (8 | 4) => {
                let group = r.u32()? as usize;
                if group == 0 {
                    return Err(malformed(format!("tensor {name} has groups of 0 values")));
                }
                let scales =
                    (0..numel.div_ceil(group)).map(|_| r.f32()).collect::<Result<Vec<_>, _>>()?;
                let levels: Vec<i8> = if bits == 8 {
                    r.take(numel)?.iter().map(|b| *b as i8).collect()
                } else {
                    r.take(numel.div_ceil(2))?
                        .iter()
                        .flat_map(|b| [((b << 4) as i8) >> 4, (*b as i8) >> 4])
                        .take(numel)
                        .collect()
                };
                levels.iter().enumerate().map(|(i, q)| f32::from(*q) * scales[i / group]).collect()
            }
            other => return Err(malformed(format!("tensor {name}: {other}-bit values"))),
        };
        out.insert(name, dims, data);
    }
    finish(r)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> TensorFile {
        let mut t = TensorFile::new();
        // Two output channels of very different ranges, and a bias.
        let w: Vec<f32> =
            (0..18).map(|i| if i < 9 { i as f32 * 0.01 } else { -(i as f32) }).collect();
        t.insert("conv.weight", vec![2, 1, 3, 3], w);
        t.insert("conv.bias", vec![2], vec![0.123_456, -7.5]);
        t
    }

    #[test]
    fn int8_per_channel_is_within_half_a_step_of_each_channel() {
        let t = sample();
        let back = dequantize(&quantize(&t, Quantization::Int8PerChannel)).unwrap();
        let (w, q) = (
            t.tensor("conv.weight", &[2, 1, 3, 3]).unwrap(),
            back.tensor("conv.weight", &[2, 1, 3, 3]).unwrap(),
        );
        for (c, step) in [(0, 0.08 / 127.0), (1, 17.0 / 127.0)] {
            for i in c * 9..c * 9 + 9 {
                assert!(
                    (w[i] - q[i]).abs() <= step / 2.0 + 1e-6,
                    "value {i}: {} vs {}",
                    w[i],
                    q[i]
                );
            }
        }
        // Biases are kept exactly.
        assert_eq!(back.tensor("conv.bias", &[2]).unwrap(), t.tensor("conv.bias", &[2]).unwrap());
    }

    #[test]
    fn int4_groups_keep_signs_and_scale() {
        let t = sample();
        let bytes = quantize(&t, Quantization::Int4Grouped { group: 4 });
        let back = dequantize(&bytes).unwrap();
        let (w, q) = (
            t.tensor("conv.weight", &[2, 1, 3, 3]).unwrap(),
            back.tensor("conv.weight", &[2, 1, 3, 3]).unwrap(),
        );
        for (i, (a, b)) in w.iter().zip(q).enumerate() {
            let group = &w[i / 4 * 4..(i / 4 * 4 + 4).min(18)];
            let step = group.iter().fold(0f32, |m, v| m.max(v.abs())) / 7.0;
            assert!((a - b).abs() <= step / 2.0 + 1e-6, "value {i}: {a} vs {b}");
        }
        // With as many scales as int8 per channel, half the bytes of values.
        let int4 = quantize(&t, Quantization::Int4Grouped { group: 9 }).len();
        assert_eq!(quantize(&t, Quantization::Int8PerChannel).len() - int4, 9);
    }

    #[test]
    fn damaged_files_are_refused() {
        let bytes = quantize(&sample(), Quantization::Int8PerChannel);
        assert!(matches!(dequantize(&bytes[..bytes.len() - 1]), Err(ContainerError::Checksum)));
        assert!(matches!(
            dequantize(b"SPLW0000000000000000"),
            Err(ContainerError::BadMagic { .. })
        ));
        let mut flipped = bytes.clone();
        flipped[20] ^= 1;
        assert!(matches!(dequantize(&flipped), Err(ContainerError::Checksum)));
        assert!(dequantize(&bytes).is_ok());
    }
}
