//! Named little-endian tensors with a checksum: the file format of the weights and of the codec
//! calibration, each under its own magic so one is never loaded as the other. Values are f32,
//! or 16-bit unsigned integers where the writer says they are integers (the calibration's
//! probability tables: half the bytes).
//!
//! The setup step converts the PyTorch file once (folding batch norm into the convolutions);
//! server and browser then load this file, which needs no pickle parser and is served as-is.
//!
//! Layout (all integers little-endian):
//!
//! ```text
//! magic [4] | version u16 | reserved u16 | count u32
//! count x { name_len u16 | name utf-8 | ndim u8 | dims u32 x ndim | [storage u8] | values }
//! fnv1a-64 of every byte above, u64
//! ```
//!
//! Version 1 has no storage byte: every tensor is `f32 x prod(dims)`. Version 2 has it: 0 for
//! f32 values, 1 for `u16 x prod(dims)`. A file whose tensors are all f32 is written as version
//! 1, so the weights file keeps the layout every earlier build (and `tools/export_onnx.py`)
//! reads.

use std::collections::HashMap;

use super::{Cursor, Truncated};

/// Newest container layout version this build reads and writes (it reads every earlier one).
pub const TENSOR_FILE_VERSION: u16 = 2;
/// The layout of files whose tensors are all f32.
const F32_ONLY_VERSION: u16 = 1;
/// Guard against absurd headers: no tensor in this project has more dimensions, no file more
/// tensors.
const MAX_NDIM: usize = 4;
const MAX_TENSORS: usize = 4096;
const HEADER_LEN: usize = 12;
const CHECKSUM_LEN: usize = 8;

/// What is wrong with a tensor file, or with a tensor asked of it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ContainerError {
    /// The bytes do not start with the expected magic (or are too short to hold one).
    #[error("not a {expected} file (bad magic)")]
    BadMagic {
        /// The magic expected, as text.
        expected: String,
    },
    /// The checksum does not match: a corrupt or partial file.
    #[error("checksum mismatch: the file is corrupt or truncated")]
    Checksum,
    /// Written by another version of the container.
    #[error("container version {got}, this build reads {supported}")]
    Version {
        /// The file's version.
        got: u16,
        /// This build's.
        supported: u16,
    },
    /// The header or a tensor is inconsistent (the checksum matched, so it was written wrong).
    #[error("malformed: {0}")]
    Malformed(String),
    /// A tensor asked for is not in the file.
    #[error("tensor {0} is missing")]
    Missing(String),
    /// A tensor has another shape than asked for.
    #[error("tensor {name} has shape {have:?}, expected {expected:?}")]
    Shape {
        /// The tensor.
        name: String,
        /// Its shape in the file.
        have: Vec<usize>,
        /// The shape asked for.
        expected: Vec<usize>,
    },
}

impl From<Truncated> for ContainerError {
    fn from(e: Truncated) -> Self {
        Self::Malformed(format!("inconsistent lengths: {e}"))
    }
}

/// How a tensor's values are stored in the file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Storage {
    /// Little-endian f32.
    #[default]
    F32,
    /// Little-endian u16: integers from 0 to 65535.
    U16,
}

impl Storage {
    fn code(self) -> u8 {
        match self {
            Self::F32 => 0,
            Self::U16 => 1,
        }
    }

    fn width(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::U16 => 2,
        }
    }
}

/// Named tensors, in file order; values are read as f32 whatever their storage.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TensorFile {
    tensors: Vec<(String, Vec<usize>, Vec<f32>, Storage)>,
    index: HashMap<String, usize>,
}

/// A value of a text tensor as its byte: a whole number in `0..=255`.
fn byte(v: f32) -> Option<u8> {
    (v.fract() == 0.0 && (0.0..=255.0).contains(&v)).then_some(v as u8)
}

/// 64-bit FNV-1a: tiny, dependency-free, and enough to catch truncation and bit rot.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}

impl TensorFile {
    /// An empty set of tensors.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a tensor of f32 values; replaces one of the same name.
    pub fn insert(&mut self, name: impl Into<String>, dims: Vec<usize>, data: Vec<f32>) {
        self.put(name.into(), dims, data, Storage::F32);
    }

    /// Add a tensor of 16-bit integers, stored as such (read back as f32, exactly); replaces
    /// one of the same name.
    pub fn insert_u16(&mut self, name: impl Into<String>, dims: Vec<usize>, data: &[u16]) {
        self.put(name.into(), dims, data.iter().map(|v| f32::from(*v)).collect(), Storage::U16);
    }

    fn put(&mut self, name: String, dims: Vec<usize>, data: Vec<f32>, storage: Storage) {
        assert_eq!(dims.iter().product::<usize>(), data.len(), "dims and data disagree");
        match self.index.get(&name) {
            Some(&i) => self.tensors[i] = (name, dims, data, storage),
            None => {
                self.index.insert(name.clone(), self.tensors.len());
                self.tensors.push((name, dims, data, storage));
            }
        }
    }

    /// Tensor names in file order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.iter().map(|(n, ..)| n.as_str())
    }

    /// Total number of f32 values.
    pub fn num_values(&self) -> usize {
        self.tensors.iter().map(|(_, _, d, _)| d.len()).sum()
    }

    /// The data of tensor `name`, which must have exactly `dims`.
    ///
    /// # Errors
    /// [`ContainerError::Missing`] or [`ContainerError::Shape`].
    pub fn tensor(&self, name: &str, dims: &[usize]) -> Result<&[f32], ContainerError> {
        let &i = self.index.get(name).ok_or_else(|| ContainerError::Missing(name.into()))?;
        let (_, have, data, _) = &self.tensors[i];
        if have != dims {
            return Err(ContainerError::Shape {
                name: name.into(),
                have: have.clone(),
                expected: dims.to_vec(),
            });
        }
        Ok(data)
    }

    /// Add a text (UTF-8 bytes, one per 16-bit value): how a file records the command that
    /// made it.
    pub fn insert_text(&mut self, name: impl Into<String>, text: &str) {
        let bytes: Vec<u16> = text.bytes().map(u16::from).collect();
        self.insert_u16(name, vec![bytes.len()], &bytes);
    }

    /// A text added with [`Self::insert_text`].
    ///
    /// # Errors
    /// [`ContainerError::Missing`] without it; [`ContainerError::Malformed`] when its values
    /// are not UTF-8 bytes.
    pub fn text(&self, name: &str) -> Result<String, ContainerError> {
        let &i = self.index.get(name).ok_or_else(|| ContainerError::Missing(name.into()))?;
        let bytes: Option<Vec<u8>> = self.tensors[i].2.iter().map(|v| byte(*v)).collect();
        bytes
            .and_then(|b| String::from_utf8(b).ok())
            .ok_or_else(|| ContainerError::Malformed(format!("{name} is not a text")))
    }

    /// Every tensor as `(name, dims, data)`, in file order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[usize], &[f32])> {
        self.tensors.iter().map(|(n, d, v, _)| (n.as_str(), d.as_slice(), v.as_slice()))
    }

    /// Serialize to the layout in the module docs under `magic`.
    pub fn to_bytes(&self, magic: [u8; 4]) -> Vec<u8> {
        let mut out =
            Vec::with_capacity(HEADER_LEN + self.num_values() * 4 + 64 * self.tensors.len());
        let all_f32 = self.tensors.iter().all(|t| t.3 == Storage::F32);
        let version = if all_f32 { F32_ONLY_VERSION } else { TENSOR_FILE_VERSION };
        write_header(&mut out, magic, version, self.tensors.len());
        for (name, dims, data, storage) in &self.tensors {
            write_name_dims(&mut out, name, dims);
            if version > F32_ONLY_VERSION {
                out.push(storage.code());
            }
            match storage {
                Storage::F32 => data.iter().for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
                // Exact: `insert_u16` is the only way in.
                Storage::U16 => {
                    data.iter().for_each(|v| out.extend_from_slice(&(*v as u16).to_le_bytes()))
                }
            }
        }
        seal(out)
    }

    /// Parse and verify a file written by [`Self::to_bytes`] with `magic`.
    ///
    /// # Errors
    /// A [`ContainerError`] naming the first problem: wrong magic or version, a checksum
    /// mismatch (a corrupt or partial download), or an absurd header.
    pub fn from_bytes(bytes: &[u8], magic: [u8; 4]) -> Result<Self, ContainerError> {
        let (mut r, count, version) = open(bytes, magic, F32_ONLY_VERSION..=TENSOR_FILE_VERSION)?;
        let mut out = Self::new();
        for _ in 0..count {
            let (name, dims) = read_name_dims(&mut r)?;
            let storage = match version {
                F32_ONLY_VERSION => Storage::F32,
                _ => match r.u8()? {
                    0 => Storage::F32,
                    1 => Storage::U16,
                    other => {
                        return Err(ContainerError::Malformed(format!(
                            "tensor {name} has storage {other}"
                        )));
                    }
                },
            };
            let numel = dims.iter().try_fold(1usize, |a, d| a.checked_mul(*d));
            let nbytes = numel
                .and_then(|n| n.checked_mul(storage.width()))
                .filter(|n| *n <= r.remaining())
                .ok_or_else(|| {
                    ContainerError::Malformed(format!("tensor {name} {dims:?} does not fit"))
                })?;
            let bytes = r.take(nbytes)?;
            let data = match storage {
                Storage::F32 => bytes
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
                    .collect(),
                Storage::U16 => bytes
                    .chunks_exact(2)
                    .map(|c| f32::from(u16::from_le_bytes(c.try_into().expect("2 bytes"))))
                    .collect(),
            };
            out.put(name, dims, data, storage);
        }
        finish(r)?;
        Ok(out)
    }
}

// The layout both containers share (this one, and the quantized one in `quantized.rs`): a
// header of magic, version and tensor count; per tensor its name and dims; a checksum at the end.

/// Start a file: magic, version, a reserved u16, the tensor count.
pub(super) fn write_header(out: &mut Vec<u8>, magic: [u8; 4], version: u16, count: usize) {
    out.extend_from_slice(&magic);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&(count as u32).to_le_bytes());
}

/// A tensor's name and dims, before its values.
pub(super) fn write_name_dims(out: &mut Vec<u8>, name: &str, dims: &[usize]) {
    out.extend_from_slice(&(name.len() as u16).to_le_bytes());
    out.extend_from_slice(name.as_bytes());
    out.push(dims.len() as u8);
    for d in dims {
        out.extend_from_slice(&(*d as u32).to_le_bytes());
    }
}

/// End a file with the checksum of everything before it.
pub(super) fn seal(mut out: Vec<u8>) -> Vec<u8> {
    let sum = fnv1a64(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// Check a file's magic, checksum and version (one of `versions`); returns a reader at the
/// first tensor, the tensor count and the version.
pub(super) fn open(
    bytes: &[u8],
    magic: [u8; 4],
    versions: std::ops::RangeInclusive<u16>,
) -> Result<(Cursor<'_>, usize, u16), ContainerError> {
    if bytes.len() < HEADER_LEN + CHECKSUM_LEN || bytes[..4] != magic {
        return Err(ContainerError::BadMagic {
            expected: String::from_utf8_lossy(&magic).into_owned(),
        });
    }
    let (body, tail) = bytes.split_at(bytes.len() - CHECKSUM_LEN);
    let stored = u64::from_le_bytes(tail.try_into().expect("8 bytes"));
    if fnv1a64(body) != stored {
        return Err(ContainerError::Checksum);
    }
    let mut r = Cursor::new(&body[4..]);
    let got = r.u16()?;
    if !versions.contains(&got) {
        return Err(ContainerError::Version { got, supported: *versions.end() });
    }
    r.u16()?;
    let count = r.u32()? as usize;
    if count > MAX_TENSORS {
        return Err(ContainerError::Malformed(format!(
            "{count} tensors is more than the limit {MAX_TENSORS}"
        )));
    }
    Ok((r, count, got))
}

/// A tensor's name and dims.
pub(super) fn read_name_dims(r: &mut Cursor<'_>) -> Result<(String, Vec<usize>), ContainerError> {
    let len = r.u16()? as usize;
    let name = std::str::from_utf8(r.take(len)?)
        .map_err(|_| ContainerError::Malformed("tensor name is not utf-8".into()))?
        .to_string();
    let ndim = r.u8()? as usize;
    if ndim > MAX_NDIM {
        return Err(ContainerError::Malformed(format!("tensor {name} has {ndim} dimensions")));
    }
    let dims = (0..ndim).map(|_| r.u32().map(|d| d as usize)).collect::<Result<Vec<_>, _>>()?;
    Ok((name, dims))
}

/// Refuse bytes left after the last tensor.
pub(super) fn finish(r: Cursor<'_>) -> Result<(), ContainerError> {
    let extra = r.rest().len();
    if extra > 0 {
        return Err(ContainerError::Malformed(format!("{extra} bytes after the last tensor")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAGIC: [u8; 4] = *b"TEST";

    fn sample() -> TensorFile {
        let mut w = TensorFile::new();
        w.insert("a.weight", vec![2, 3], vec![1.0, -2.0, 3.5, 0.0, f32::MIN_POSITIVE, 7.25]);
        w.insert("a.bias", vec![2], vec![0.5, -0.5]);
        w
    }

    #[test]
    fn round_trip() {
        let w = sample();
        let back = TensorFile::from_bytes(&w.to_bytes(MAGIC), MAGIC).unwrap();
        assert_eq!(back, w);
        assert_eq!(back.tensor("a.bias", &[2]).unwrap(), &[0.5, -0.5]);
        assert!(matches!(back.tensor("a.bias", &[3]), Err(ContainerError::Shape { .. })));
        assert_eq!(back.tensor("missing", &[2]), Err(ContainerError::Missing("missing".into())));
    }

    /// A text goes into the file and comes back; a tensor of other values is not one.
    #[test]
    fn texts_round_trip() {
        let mut w = sample();
        w.insert_text("meta.command", "./run.sh train exits --seed 7 — ünïcode");
        let back = TensorFile::from_bytes(&w.to_bytes(MAGIC), MAGIC).unwrap();
        assert_eq!(back.text("meta.command").unwrap(), "./run.sh train exits --seed 7 — ünïcode");
        assert!(matches!(back.text("a.weight"), Err(ContainerError::Malformed(_))));
        assert_eq!(back.text("meta.none"), Err(ContainerError::Missing("meta.none".into())));
    }

    #[test]
    fn rejects_corruption_truncation_and_other_magic() {
        let bytes = sample().to_bytes(MAGIC);
        for cut in [0, 5, 12, bytes.len() - 9, bytes.len() - 1] {
            assert!(TensorFile::from_bytes(&bytes[..cut], MAGIC).is_err(), "cut {cut}");
        }
        let mut flipped = bytes.clone();
        flipped[20] ^= 0x40;
        assert_eq!(TensorFile::from_bytes(&flipped, MAGIC), Err(ContainerError::Checksum));
        assert!(matches!(
            TensorFile::from_bytes(&bytes, *b"SPLW"),
            Err(ContainerError::BadMagic { .. })
        ));
    }

    #[test]
    fn integer_tensors_take_two_bytes_and_f32_only_files_keep_version_1() {
        let f32_only = sample().to_bytes(MAGIC);
        assert_eq!(u16::from_le_bytes([f32_only[4], f32_only[5]]), 1);
        let mut w = sample();
        let counts: Vec<u16> = (0..1000u32).map(|i| (i * 65) as u16).collect();
        w.insert_u16("counts", vec![10, 100], &counts);
        let bytes = w.to_bytes(MAGIC);
        assert_eq!(u16::from_le_bytes([bytes[4], bytes[5]]), TENSOR_FILE_VERSION);
        // The f32 tensors as before plus a storage byte each; the integers at two bytes.
        let name_dims = 2 + "counts".len() + 1 + 2 * 4;
        assert_eq!(bytes.len(), f32_only.len() + 2 + name_dims + 1 + 2 * counts.len());
        let back = TensorFile::from_bytes(&bytes, MAGIC).unwrap();
        assert_eq!(back, w);
        assert_eq!(back.tensor("counts", &[10, 100]).unwrap()[999], 64935.0);
        // A storage this build does not know is malformed, not misread.
        let mut odd = bytes.clone();
        let at = f32_only.len() - 8 + 2 + name_dims;
        assert_eq!(odd[at], 1);
        odd[at] = 7;
        let n = odd.len() - 8;
        let sum = fnv1a64(&odd[..n]);
        odd[n..].copy_from_slice(&sum.to_le_bytes());
        assert!(matches!(TensorFile::from_bytes(&odd, MAGIC), Err(ContainerError::Malformed(_))));
    }

    #[test]
    fn rejects_other_versions() {
        let mut bytes = sample().to_bytes(MAGIC);
        bytes[4] = 9;
        let n = bytes.len() - 8;
        let sum = fnv1a64(&bytes[..n]);
        bytes[n..].copy_from_slice(&sum.to_le_bytes());
        assert_eq!(
            TensorFile::from_bytes(&bytes, MAGIC),
            Err(ContainerError::Version { got: 9, supported: TENSOR_FILE_VERSION })
        );
    }
}
