//! The project's weights file: named little-endian f32 tensors with a checksum.
//!
//! The setup step converts the PyTorch file once (folding batch norm into the convolutions);
//! server and browser then load this file, which needs no pickle parser and is served as-is.
//!
//! Layout (all integers little-endian):
//!
//! ```text
//! magic "SPLW" | version u16 | reserved u16 | count u32
//! count x { name_len u16 | name utf-8 | ndim u8 | dims u32 x ndim | f32 x prod(dims) }
//! fnv1a-64 of every byte above, u64
//! ```

use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::protocol::WireError;
use crate::protocol::cursor::Cursor;

/// First four bytes of a weights file.
pub const WEIGHTS_MAGIC: [u8; 4] = *b"SPLW";
/// Format version this build reads and writes.
pub const WEIGHTS_VERSION: u16 = 1;
/// Guard against absurd headers: no tensor in this model has more dimensions or elements.
const MAX_NDIM: usize = 4;
const MAX_TENSORS: usize = 4096;
const HEADER_LEN: usize = 12;
const CHECKSUM_LEN: usize = 8;

/// Where native tools look for the weights: `$SPLIT_WEIGHTS`, else
/// `$SPLIT_CACHE/weights/efficientnet-lite0.splw`, with `~/.cache/splitinfer` as the default cache
/// (the file `cargo xtask setup` writes). Browsers get the file from the server instead.
pub fn default_weights_path() -> std::path::PathBuf {
    use std::path::PathBuf;
    if let Some(p) = std::env::var_os("SPLIT_WEIGHTS") {
        return p.into();
    }
    let cache = std::env::var_os("SPLIT_CACHE").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| ".".into()))
            .join(".cache/splitinfer")
    });
    cache.join("weights/efficientnet-lite0.splw")
}

/// Named f32 tensors, in file order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WeightsFile {
    tensors: Vec<(String, Vec<usize>, Vec<f32>)>,
    index: HashMap<String, usize>,
}

/// 64-bit FNV-1a: tiny, dependency-free, and enough to catch truncation and bit rot.
pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}

impl WeightsFile {
    /// An empty set of tensors.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a tensor; replaces one of the same name.
    pub fn insert(&mut self, name: impl Into<String>, dims: Vec<usize>, data: Vec<f32>) {
        assert_eq!(dims.iter().product::<usize>(), data.len(), "dims and data disagree");
        let name = name.into();
        match self.index.get(&name) {
            Some(&i) => self.tensors[i] = (name, dims, data),
            None => {
                self.index.insert(name.clone(), self.tensors.len());
                self.tensors.push((name, dims, data));
            }
        }
    }

    /// Tensor names in file order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.iter().map(|(n, _, _)| n.as_str())
    }

    /// Total number of f32 values.
    pub fn num_values(&self) -> usize {
        self.tensors.iter().map(|(_, _, d)| d.len()).sum()
    }

    /// The data of tensor `name`, which must have exactly `dims`.
    ///
    /// # Errors
    /// [`Error::BadWeights`] when it is missing or shaped differently.
    pub fn tensor(&self, name: &str, dims: &[usize]) -> Result<&[f32]> {
        let &i = self
            .index
            .get(name)
            .ok_or_else(|| Error::BadWeights(format!("tensor {name} is missing")))?;
        let (_, have, data) = &self.tensors[i];
        if have != dims {
            return Err(Error::BadWeights(format!(
                "tensor {name} has shape {have:?}, expected {dims:?}"
            )));
        }
        Ok(data)
    }

    /// Every tensor as `(name, dims, data)`, in file order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[usize], &[f32])> {
        self.tensors.iter().map(|(n, d, v)| (n.as_str(), d.as_slice(), v.as_slice()))
    }

    /// Serialize to the file layout described in the module docs.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.to_bytes_with_magic(WEIGHTS_MAGIC)
    }

    /// The same layout under another magic: other artefacts (the codec calibration) reuse the
    /// container, and the magic keeps one from being loaded as the other.
    pub fn to_bytes_with_magic(&self, magic: [u8; 4]) -> Vec<u8> {
        let mut out =
            Vec::with_capacity(HEADER_LEN + self.num_values() * 4 + 64 * self.tensors.len());
        out.extend_from_slice(&magic);
        out.extend_from_slice(&WEIGHTS_VERSION.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u32).to_le_bytes());
        for (name, dims, data) in &self.tensors {
            out.extend_from_slice(&(name.len() as u16).to_le_bytes());
            out.extend_from_slice(name.as_bytes());
            out.push(dims.len() as u8);
            for d in dims {
                out.extend_from_slice(&(*d as u32).to_le_bytes());
            }
            for v in data {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        let sum = fnv1a64(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        out
    }

    /// Parse and verify a weights file.
    ///
    /// # Errors
    /// [`Error::BadWeights`] naming the first problem: wrong magic or version, truncation, a
    /// checksum mismatch (a corrupt or partial download), or an absurd header.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        Self::from_bytes_with_magic(bytes, WEIGHTS_MAGIC)
    }

    /// Parse a container written by [`Self::to_bytes_with_magic`] with `magic`.
    ///
    /// # Errors
    /// As [`Self::from_bytes`].
    pub fn from_bytes_with_magic(bytes: &[u8], magic: [u8; 4]) -> Result<Self> {
        if bytes.len() < HEADER_LEN + CHECKSUM_LEN || bytes[..4] != magic {
            let what = String::from_utf8_lossy(&magic).into_owned();
            return Err(Error::BadWeights(format!(
                "not a {what} file (bad magic); run `cargo xtask setup` to create one"
            )));
        }
        let (body, tail) = bytes.split_at(bytes.len() - CHECKSUM_LEN);
        let stored = u64::from_le_bytes(tail.try_into().expect("8 bytes"));
        if fnv1a64(body) != stored {
            return Err(Error::BadWeights(
                "checksum mismatch: the file is corrupt or truncated; delete it and run `cargo xtask setup`".into(),
            ));
        }
        let mut r = Cursor::new(&body[4..]);
        // The checksum already matched, so a short read means a file written wrong, not damaged.
        let short = |e: WireError| Error::BadWeights(format!("inconsistent lengths: {e}"));
        let version = r.u16().map_err(short)?;
        if version != WEIGHTS_VERSION {
            return Err(Error::BadWeights(format!(
                "format version {version}, this build reads {WEIGHTS_VERSION}; re-run `cargo xtask setup`"
            )));
        }
        r.u16().map_err(short)?;
        let count = r.u32().map_err(short)? as usize;
        if count > MAX_TENSORS {
            return Err(Error::BadWeights(format!(
                "{count} tensors is more than the limit {MAX_TENSORS}"
            )));
        }
        let mut out = Self::new();
        for _ in 0..count {
            let len = r.u16().map_err(short)? as usize;
            let name = std::str::from_utf8(r.take(len).map_err(short)?)
                .map_err(|_| Error::BadWeights("tensor name is not utf-8".into()))?
                .to_string();
            let ndim = r.u8().map_err(short)? as usize;
            if ndim > MAX_NDIM {
                return Err(Error::BadWeights(format!("tensor {name} has {ndim} dimensions")));
            }
            let dims = (0..ndim)
                .map(|_| r.u32().map(|d| d as usize).map_err(short))
                .collect::<Result<Vec<_>>>()?;
            let numel = dims.iter().try_fold(1usize, |a, d| a.checked_mul(*d));
            let nbytes = numel
                .and_then(|n| n.checked_mul(4))
                .filter(|n| *n <= r.remaining())
                .ok_or_else(|| {
                    Error::BadWeights(format!("tensor {name} {dims:?} does not fit in the file"))
                })?;
            let data = r
                .take(nbytes)
                .map_err(short)?
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
                .collect();
            out.insert(name, dims, data);
        }
        r.finish().map_err(|e| Error::BadWeights(format!("after the last tensor: {e}")))?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> WeightsFile {
        let mut w = WeightsFile::new();
        w.insert("a.weight", vec![2, 3], vec![1.0, -2.0, 3.5, 0.0, f32::MIN_POSITIVE, 7.25]);
        w.insert("a.bias", vec![2], vec![0.5, -0.5]);
        w
    }

    #[test]
    fn round_trip() {
        let w = sample();
        let back = WeightsFile::from_bytes(&w.to_bytes()).unwrap();
        assert_eq!(back, w);
        assert_eq!(back.tensor("a.bias", &[2]).unwrap(), &[0.5, -0.5]);
        assert!(back.tensor("a.bias", &[3]).is_err());
        assert!(back.tensor("missing", &[2]).is_err());
    }

    #[test]
    fn rejects_corruption_and_truncation() {
        let bytes = sample().to_bytes();
        for cut in [0, 5, 12, bytes.len() - 9, bytes.len() - 1] {
            assert!(
                matches!(WeightsFile::from_bytes(&bytes[..cut]), Err(Error::BadWeights(_))),
                "cut {cut}"
            );
        }
        let mut flipped = bytes.clone();
        flipped[20] ^= 0x40;
        let err = WeightsFile::from_bytes(&flipped).unwrap_err().to_string();
        assert!(err.contains("checksum"), "{err}");
    }

    #[test]
    fn rejects_other_versions() {
        let mut bytes = sample().to_bytes();
        bytes[4] = 9;
        let n = bytes.len() - 8;
        let sum = fnv1a64(&bytes[..n]);
        bytes[n..].copy_from_slice(&sum.to_le_bytes());
        let err = WeightsFile::from_bytes(&bytes).unwrap_err().to_string();
        assert!(err.contains("version 9"), "{err}");
    }
}
