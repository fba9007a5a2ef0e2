//! Writing GGUF: a parsed file again, with only some of its tensors and with metadata added.
//! This is how a server hands a browser the share of a language model the browser runs (the
//! tokenizer, the embedding and the first blocks) without the rest.

use super::gguf::{DEFAULT_ALIGNMENT, MAGIC};
use super::{GgmlType, Gguf, GgufError, GgufValue};

impl<'a> Gguf<'a> {
    /// The file as GGUF version 3 with every metadata entry (those named in `extra` replaced
    /// or added, in that order at the end) and the tensors `keep` accepts, in file order, at
    /// offsets of their own. The result parses to the same values and bytes.
    pub fn write_subset(
        &self,
        keep: impl Fn(&str) -> bool,
        extra: &[(&str, GgufValue)],
    ) -> Result<Vec<u8>, GgufError> {
        let layout = self.layout(keep, extra)?;
        let mut out = layout.head;
        out.reserve(layout.len - out.len());
        for (at, bytes) in layout.data {
            out.resize(layout.data_start + at, 0);
            out.extend_from_slice(bytes);
        }
        Ok(out)
    }

    /// The length [`Self::write_subset`] would return, without copying a tensor (what a
    /// server says its shares weigh before anyone asks for one).
    pub fn subset_len(
        &self,
        keep: impl Fn(&str) -> bool,
        extra: &[(&str, GgufValue)],
    ) -> Result<usize, GgufError> {
        Ok(self.layout(keep, extra)?.len)
    }

    /// The header of the subset (metadata and tensor infos, padded to the alignment) and where
    /// each kept tensor's bytes go after it.
    fn layout(
        &self,
        keep: impl Fn(&str) -> bool,
        extra: &[(&str, GgufValue)],
    ) -> Result<Layout<'a>, GgufError> {
        let tensors: Vec<_> = self.tensors.iter().filter(|t| keep(&t.name)).collect();
        let metadata: Vec<(&str, &GgufValue)> = self
            .metadata
            .iter()
            .filter(|(k, _)| !extra.iter().any(|(e, _)| e == k))
            .map(|(k, v)| (k.as_str(), v))
            .chain(extra.iter().map(|(k, v)| (*k, v)))
            .collect();
        let alignment = metadata
            .iter()
            .find(|(k, _)| *k == "general.alignment")
            .and_then(|(_, v)| v.as_u64())
            .unwrap_or(DEFAULT_ALIGNMENT) as usize;
        let mut head = Vec::new();
        head.extend_from_slice(MAGIC);
        head.extend_from_slice(&3u32.to_le_bytes());
        head.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
        head.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
        for (key, value) in &metadata {
            string(&mut head, key);
            head.extend_from_slice(&type_id(value).to_le_bytes());
            write_value(&mut head, value);
        }
        let mut data = Vec::with_capacity(tensors.len());
        let mut offset = 0usize;
        for t in &tensors {
            let bytes = self.tensor_bytes(t)?;
            string(&mut head, &t.name);
            head.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                head.extend_from_slice(&d.to_le_bytes());
            }
            head.extend_from_slice(&ggml_id(t.kind).to_le_bytes());
            head.extend_from_slice(&(offset as u64).to_le_bytes());
            data.push((offset, bytes));
            offset = (offset + bytes.len()).div_ceil(alignment) * alignment;
        }
        let data_start = head.len().div_ceil(alignment) * alignment;
        head.resize(data_start, 0);
        let len = data.last().map_or(data_start, |(at, bytes)| data_start + at + bytes.len());
        Ok(Layout { head, data_start, data, len })
    }
}

/// A subset's bytes before they are written.
struct Layout<'a> {
    /// Everything before the tensors' data, padded.
    head: Vec<u8>,
    /// Where the data starts (the head's length).
    data_start: usize,
    /// Each tensor's offset in the data and its bytes.
    data: Vec<(usize, &'a [u8])>,
    /// The whole file's length.
    len: usize,
}

fn ggml_id(kind: GgmlType) -> u32 {
    match kind {
        GgmlType::F32 => 0,
        GgmlType::F16 => 1,
        GgmlType::Q4_1 => 3,
        GgmlType::Q8_0 => 8,
        GgmlType::Other(id) => id,
    }
}

fn type_id(v: &GgufValue) -> u32 {
    match v {
        GgufValue::U8(_) => 0,
        GgufValue::I8(_) => 1,
        GgufValue::U16(_) => 2,
        GgufValue::I16(_) => 3,
        GgufValue::U32(_) => 4,
        GgufValue::I32(_) => 5,
        GgufValue::F32(_) => 6,
        GgufValue::Bool(_) => 7,
        GgufValue::Str(_) => 8,
        GgufValue::Array(_) => 9,
        GgufValue::U64(_) => 10,
        GgufValue::I64(_) => 11,
        GgufValue::F64(_) => 12,
    }
}

fn string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn write_value(out: &mut Vec<u8>, v: &GgufValue) {
    match v {
        GgufValue::U8(x) => out.push(*x),
        GgufValue::I8(x) => out.push(*x as u8),
        GgufValue::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::Bool(x) => out.push(u8::from(*x)),
        GgufValue::Str(s) => string(out, s),
        GgufValue::Array(items) => {
            // The parser keeps no element type: an empty array is written as one of u32s.
            let inner = items.first().map_or(4, type_id);
            out.extend_from_slice(&inner.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                write_value(out, item);
            }
        }
        GgufValue::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::gguf::tests::sample;
    use super::*;

    #[test]
    fn a_subset_parses_to_the_same_values_and_bytes() {
        let bytes = sample();
        let g = Gguf::parse(&bytes).unwrap();
        let all = g.write_subset(|_| true, &[]).unwrap();
        let again = Gguf::parse(&all).unwrap();
        assert_eq!(again.metadata, g.metadata);
        assert_eq!(again.tensors.len(), 2);
        for t in &g.tensors {
            let u = again.tensor(&t.name).unwrap();
            assert_eq!((&u.dims, u.kind), (&t.dims, t.kind));
            assert_eq!(again.tensor_bytes(u).unwrap(), g.tensor_bytes(t).unwrap());
        }

        let extra = [
            ("split.first_block", GgufValue::U32(0)),
            ("general.architecture", GgufValue::Str("x".into())),
        ];
        let part = g.write_subset(|name| name == "q", &extra).unwrap();
        let p = Gguf::parse(&part).unwrap();
        assert!(p.tensor("w").is_none());
        assert_eq!(p.tensor_bytes(p.tensor("q").unwrap()).unwrap(), &[7; 34]);
        assert_eq!(p.get("split.first_block"), Some(&GgufValue::U32(0)));
        assert_eq!(p.get("general.architecture"), Some(&GgufValue::Str("x".into())));
        assert_eq!(p.metadata.len(), 3);
        assert!(part.len() < bytes.len());
        // The lengths without the copies.
        assert_eq!(g.subset_len(|_| true, &[]).unwrap(), all.len());
        assert_eq!(g.subset_len(|name| name == "q", &extra).unwrap(), part.len());
        let none = g.write_subset(|_| false, &[]).unwrap();
        assert_eq!(g.subset_len(|_| false, &[]).unwrap(), none.len());
    }
}
