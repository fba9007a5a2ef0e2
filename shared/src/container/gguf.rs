//! GGUF, llama.cpp's model file: a header, typed metadata (`key → value`), tensor descriptions,
//! then the tensors' bytes at an aligned offset.
//!
//! Every count and length read from the file is checked against the bytes that are left before
//! anything is allocated for it, so a crafted file costs at most its own size in memory; each
//! tensor's byte range is checked against the data section. Values stay borrowed where they can
//! (tensor bytes); strings are copied and must be UTF-8.

use super::{Cursor, Truncated};

/// "GGUF" read as a little-endian u32.
pub(super) const MAGIC: &[u8; 4] = b"GGUF";
/// Alignment of the data section when the file does not say (`general.alignment`).
pub(super) const DEFAULT_ALIGNMENT: u64 = 32;
/// Dimensions a tensor may have (GGML's limit).
pub const MAX_DIMS: usize = 4;
/// Nesting of array values: arrays of arrays are legal GGUF, deeper nesting is refused.
const MAX_ARRAY_DEPTH: usize = 2;

/// A value of the metadata.
#[derive(Clone, Debug, PartialEq)]
pub enum GgufValue {
    /// Type 0.
    U8(u8),
    /// Type 1.
    I8(i8),
    /// Type 2.
    U16(u16),
    /// Type 3.
    I16(i16),
    /// Type 4.
    U32(u32),
    /// Type 5.
    I32(i32),
    /// Type 6.
    F32(f32),
    /// Type 7.
    Bool(bool),
    /// Type 8.
    Str(String),
    /// Type 9: elements of one type.
    Array(Vec<GgufValue>),
    /// Type 10.
    U64(u64),
    /// Type 11.
    I64(i64),
    /// Type 12.
    F64(f64),
}

impl GgufValue {
    /// The value as an unsigned integer, whatever its integer width.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            GgufValue::U8(v) => Some(v.into()),
            GgufValue::U16(v) => Some(v.into()),
            GgufValue::U32(v) => Some(v.into()),
            GgufValue::U64(v) => Some(v),
            GgufValue::I8(v) => u64::try_from(v).ok(),
            GgufValue::I16(v) => u64::try_from(v).ok(),
            GgufValue::I32(v) => u64::try_from(v).ok(),
            GgufValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }
}

/// How a tensor's values are stored (the GGML types this project reads; others are named by
/// number and refused where they are used).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GgmlType {
    /// 32-bit floats.
    F32,
    /// 16-bit floats.
    F16,
    /// Blocks of 32: an f16 scale, an f16 minimum, 16 bytes of 4-bit values.
    Q4_1,
    /// Blocks of 32: an f16 scale, 32 signed bytes.
    Q8_0,
    /// Any other GGML type, by its number.
    Other(u32),
}

impl GgmlType {
    fn from_id(id: u32) -> Self {
        match id {
            0 => GgmlType::F32,
            1 => GgmlType::F16,
            3 => GgmlType::Q4_1,
            8 => GgmlType::Q8_0,
            other => GgmlType::Other(other),
        }
    }

    /// Values per block and bytes per block, for the types this project reads.
    pub fn block(self) -> Option<(u64, u64)> {
        match self {
            GgmlType::F32 => Some((1, 4)),
            GgmlType::F16 => Some((1, 2)),
            GgmlType::Q4_1 => Some((32, 20)),
            GgmlType::Q8_0 => Some((32, 34)),
            GgmlType::Other(_) => None,
        }
    }
}

/// A tensor's description and where its bytes are.
#[derive(Clone, Debug, PartialEq)]
pub struct GgufTensor {
    /// Its name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// Dimensions, innermost (contiguous) first: a matrix of `n` rows of `k` values is `[k, n]`.
    pub dims: Vec<u64>,
    /// How its values are stored.
    pub kind: GgmlType,
    /// Where its bytes start, from the start of the data section.
    pub offset: u64,
}

impl GgufTensor {
    /// Values in the tensor.
    pub fn elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// What is wrong with a GGUF file.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum GgufError {
    /// The bytes end early.
    #[error("GGUF file {0}")]
    Truncated(#[from] Truncated),
    /// Not a GGUF file.
    #[error("not a GGUF file (magic {0:02x?})")]
    Magic([u8; 4]),
    /// A version this reader does not know (it reads 2 and 3).
    #[error("GGUF version {0} is not supported (2 and 3 are)")]
    Version(u32),
    /// A metadata value of an unknown type.
    #[error("metadata {key:?}: unknown value type {kind}")]
    ValueType {
        /// The key whose value it is.
        key: String,
        /// The type number.
        kind: u32,
    },
    /// A string that is not UTF-8.
    #[error("{what}: not UTF-8")]
    Utf8 {
        /// Where it was.
        what: String,
    },
    /// A count larger than the bytes left could hold, or past a limit.
    #[error("{what}: {count} is more than the file can hold")]
    Count {
        /// What was counted.
        what: String,
        /// The count the file gave.
        count: u64,
    },
    /// A tensor whose shape or type cannot be read.
    #[error("tensor {name:?}: {why}")]
    Tensor {
        /// The tensor's name.
        name: String,
        /// What is wrong.
        why: String,
    },
    /// The alignment the file asks for is not a power of two.
    #[error("alignment {0} is not a power of two")]
    Alignment(u64),
}

/// A parsed GGUF file borrowing its bytes.
#[derive(Debug)]
pub struct Gguf<'a> {
    /// The format version (2 or 3).
    pub version: u32,
    /// The metadata in file order.
    pub metadata: Vec<(String, GgufValue)>,
    /// The tensors in file order.
    pub tensors: Vec<GgufTensor>,
    /// The data section.
    data: &'a [u8],
}

impl<'a> Gguf<'a> {
    /// Parse the header, metadata and tensor descriptions, and check every tensor's bytes lie
    /// inside the data section.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, GgufError> {
        let mut c = Cursor::new(bytes);
        let magic: [u8; 4] = c.take(4)?.try_into().expect("4 bytes");
        if &magic != MAGIC {
            return Err(GgufError::Magic(magic));
        }
        let version = c.u32()?;
        if !(2..=3).contains(&version) {
            return Err(GgufError::Version(version));
        }
        let tensor_count = c.u64()?;
        let kv_count = c.u64()?;
        // A metadata entry takes at least 12 bytes (key length and value type), a tensor
        // description at least 20 (name length, dims, type, offset).
        let kv_count = bounded(kv_count, c.remaining() / 12, "metadata entries")?;
        let mut metadata = Vec::with_capacity(kv_count);
        for _ in 0..kv_count {
            let key = string(&mut c, "metadata key")?;
            let kind = c.u32()?;
            let value = value(&mut c, kind, &key, 0)?;
            metadata.push((key, value));
        }
        let tensor_count = bounded(tensor_count, c.remaining() / 20, "tensors")?;
        let mut tensors = Vec::with_capacity(tensor_count);
        for _ in 0..tensor_count {
            let name = string(&mut c, "tensor name")?;
            let n_dims = c.u32()?;
            if n_dims as usize > MAX_DIMS {
                return Err(GgufError::Tensor {
                    name,
                    why: format!("{n_dims} dimensions (at most {MAX_DIMS})"),
                });
            }
            let dims = (0..n_dims).map(|_| c.u64()).collect::<Result<Vec<_>, _>>()?;
            let kind = GgmlType::from_id(c.u32()?);
            let offset = c.u64()?;
            tensors.push(GgufTensor { name, dims, kind, offset });
        }
        let alignment = metadata
            .iter()
            .find(|(k, _)| k == "general.alignment")
            .and_then(|(_, v)| v.as_u64())
            .unwrap_or(DEFAULT_ALIGNMENT);
        if alignment == 0 || !alignment.is_power_of_two() {
            return Err(GgufError::Alignment(alignment));
        }
        let header = (bytes.len() - c.remaining()) as u64;
        let start = header.div_ceil(alignment) * alignment;
        let data = bytes.get(start as usize..).unwrap_or(&[]);
        let gguf = Gguf { version, metadata, tensors, data };
        for t in &gguf.tensors {
            gguf.tensor_bytes(t)?;
        }
        Ok(gguf)
    }

    /// A metadata value by key.
    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// A tensor's description by name.
    pub fn tensor(&self, name: &str) -> Option<&GgufTensor> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// A tensor's bytes (checked against its shape and type).
    pub fn tensor_bytes(&self, t: &GgufTensor) -> Result<&'a [u8], GgufError> {
        let bad = |why: String| GgufError::Tensor { name: t.name.clone(), why };
        let (per_block, block_bytes) =
            t.kind.block().ok_or_else(|| bad(format!("type {:?} is not supported", t.kind)))?;
        let elements = t
            .dims
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .ok_or_else(|| bad("size overflows".into()))?;
        if t.dims.first().is_some_and(|&d| !d.is_multiple_of(per_block)) {
            return Err(bad(format!(
                "rows of {} values do not fill blocks of {per_block}",
                t.dims[0]
            )));
        }
        let len = (elements / per_block)
            .checked_mul(block_bytes)
            .ok_or_else(|| bad("size overflows".into()))?;
        let end = t.offset.checked_add(len).ok_or_else(|| bad("offset overflows".into()))?;
        if end > self.data.len() as u64 {
            return Err(bad(format!(
                "bytes {}..{end} lie past the data section's {}",
                t.offset,
                self.data.len()
            )));
        }
        Ok(&self.data[t.offset as usize..end as usize])
    }
}

fn bounded(count: u64, most: usize, what: &str) -> Result<usize, GgufError> {
    if count > most as u64 {
        return Err(GgufError::Count { what: what.into(), count });
    }
    Ok(count as usize)
}

fn string(c: &mut Cursor, what: &str) -> Result<String, GgufError> {
    let len = c.u64()?;
    let len = bounded(len, c.remaining(), what)?;
    String::from_utf8(c.take(len)?.to_vec()).map_err(|_| GgufError::Utf8 { what: what.into() })
}

fn value(c: &mut Cursor, kind: u32, key: &str, depth: usize) -> Result<GgufValue, GgufError> {
    Ok(match kind {
        0 => GgufValue::U8(c.u8()?),
        1 => GgufValue::I8(c.u8()? as i8),
        2 => GgufValue::U16(c.u16()?),
        3 => GgufValue::I16(c.u16()? as i16),
        4 => GgufValue::U32(c.u32()?),
        5 => GgufValue::I32(c.u32()? as i32),
        6 => GgufValue::F32(c.f32()?),
        7 => GgufValue::Bool(c.u8()? != 0),
        8 => GgufValue::Str(string(c, key)?),
        9 if depth < MAX_ARRAY_DEPTH => {
            let inner = c.u32()?;
            let count = c.u64()?;
            // Every element takes at least one byte.
            let count = bounded(count, c.remaining(), key)?;
            let mut items = Vec::with_capacity(count);
            for _ in 0..count {
                items.push(value(c, inner, key, depth + 1)?);
            }
            GgufValue::Array(items)
        }
        10 => GgufValue::U64(c.u64()?),
        11 => GgufValue::I64(c.u64()? as i64),
        12 => GgufValue::F64(f64::from_bits(c.u64()?)),
        kind => return Err(GgufError::ValueType { key: key.into(), kind }),
    })
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A small valid file: two metadata entries, one f32 tensor of 2×32 and one Q8_0 row.
    pub(crate) fn sample() -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&3u32.to_le_bytes());
        b.extend_from_slice(&2u64.to_le_bytes()); // tensors
        b.extend_from_slice(&2u64.to_le_bytes()); // metadata
        let s = |b: &mut Vec<u8>, s: &str| {
            b.extend_from_slice(&(s.len() as u64).to_le_bytes());
            b.extend_from_slice(s.as_bytes());
        };
        s(&mut b, "general.architecture");
        b.extend_from_slice(&8u32.to_le_bytes());
        s(&mut b, "llama");
        s(&mut b, "tokenizer.ggml.tokens");
        b.extend_from_slice(&9u32.to_le_bytes());
        b.extend_from_slice(&8u32.to_le_bytes());
        b.extend_from_slice(&2u64.to_le_bytes());
        s(&mut b, "a");
        s(&mut b, "é");
        s(&mut b, "w");
        b.extend_from_slice(&2u32.to_le_bytes());
        b.extend_from_slice(&32u64.to_le_bytes());
        b.extend_from_slice(&2u64.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&0u64.to_le_bytes());
        s(&mut b, "q");
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&32u64.to_le_bytes());
        b.extend_from_slice(&8u32.to_le_bytes());
        b.extend_from_slice(&256u64.to_le_bytes());
        while b.len() % 32 != 0 {
            b.push(0);
        }
        b.extend((0..256).map(|i| i as u8));
        b.extend_from_slice(&[7; 34]);
        b
    }

    #[test]
    fn reads_metadata_and_tensors() {
        let bytes = sample();
        let g = Gguf::parse(&bytes).unwrap();
        assert_eq!(g.get("general.architecture"), Some(&GgufValue::Str("llama".into())));
        assert_eq!(
            g.get("tokenizer.ggml.tokens"),
            Some(&GgufValue::Array(vec![GgufValue::Str("a".into()), GgufValue::Str("é".into())]))
        );
        let w = g.tensor("w").unwrap();
        assert_eq!((w.dims.as_slice(), w.kind, w.elements()), (&[32, 2][..], GgmlType::F32, 64));
        assert_eq!(g.tensor_bytes(w).unwrap()[..4], [0, 1, 2, 3]);
        assert_eq!(g.tensor_bytes(g.tensor("q").unwrap()).unwrap(), &[7; 34]);
    }

    #[test]
    fn every_truncation_is_an_error() {
        let bytes = sample();
        for len in 0..bytes.len() {
            assert!(Gguf::parse(&bytes[..len]).is_err(), "{len} bytes parsed");
        }
    }

    #[test]
    fn crafted_counts_and_offsets_are_refused() {
        let bytes = sample();
        let mut huge_kv = bytes.clone();
        huge_kv[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(Gguf::parse(&huge_kv), Err(GgufError::Count { .. })));
        let mut bad_magic = bytes.clone();
        bad_magic[0] = b'X';
        assert!(matches!(Gguf::parse(&bad_magic), Err(GgufError::Magic(_))));
        let mut version = bytes.clone();
        version[4] = 9;
        assert_eq!(Gguf::parse(&version).unwrap_err(), GgufError::Version(9));
        // The Q8_0 tensor's offset moved past the end.
        let at = bytes.windows(8).rposition(|w| w == 256u64.to_le_bytes()).unwrap();
        let mut past = bytes.clone();
        past[at..at + 8].copy_from_slice(&300u64.to_le_bytes());
        assert!(matches!(Gguf::parse(&past), Err(GgufError::Tensor { .. })));
        past[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(Gguf::parse(&past), Err(GgufError::Tensor { .. })));
    }
}
