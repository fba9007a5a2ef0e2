//! The pretrained weights: a [`TensorFile`] under the magic "SPLW", read once into the network.
//!
//! The same file cut per stage gives the weight shards a browser downloads: a split at
//! `block5` needs the stem and blocks 0–5 (2% of the bytes), not the 1280-channel head and
//! the classifier (60%). A shard is a weights file itself (same magic, checksum and names),
//! holding the tensors of one stage.

#[cfg(feature = "model")]
use burn::tensor::Device;

use super::Boundary;
#[cfg(feature = "model")]
use super::EfficientNetLite0;
use crate::container::TensorFile;

/// First four bytes of a weights file.
pub const WEIGHTS_MAGIC: [u8; 4] = *b"SPLW";

/// The prefix of the tensor names of the stage ending at `end` (`"blocks.3."` for `block3`);
/// `None` for `input` and `pool`, which have no weights.
pub fn stage_prefix(end: Boundary) -> Option<String> {
    match end.index() {
        0 | 19 => None,
        1 => Some("stem.".into()),
        k @ 2..=17 => Some(format!("blocks.{}.", k - 2)),
        18 => Some("head.".into()),
        _ => Some("fc.".into()),
    }
}

/// The tensors of the stage ending at `end`, as a weights file of their own; `None` for a
/// stage without weights. A stage missing from `weights` gives an empty shard, which
/// [`EfficientNetLite0::load_stage`] refuses.
pub fn weight_shard(weights: &TensorFile, end: Boundary) -> Option<TensorFile> {
    let prefix = stage_prefix(end)?;
    let mut shard = TensorFile::new();
    for (name, dims, data) in weights.iter().filter(|(n, _, _)| n.starts_with(&prefix)) {
        shard.insert(name, dims.to_vec(), data.to_vec());
    }
    Some(shard)
}

/// Every stage with weights and its shard, in forward order (19 of the 20 stages: `pool`
/// has none).
pub fn weight_shards(weights: &TensorFile) -> Vec<(Boundary, TensorFile)> {
    Boundary::all().filter_map(|b| weight_shard(weights, b).map(|s| (b, s))).collect()
}

#[cfg(feature = "model")]
impl EfficientNetLite0 {
    /// The network from the bytes of a weights file (what the browser fetches).
    ///
    /// # Errors
    /// [`super::ModelError::BadWeights`] when the file is damaged or a tensor is missing or misshaped.
    pub fn from_weight_bytes(bytes: &[u8], device: &Device) -> super::Result<Self> {
        Self::from_weights(&TensorFile::from_bytes(bytes, WEIGHTS_MAGIC)?, device)
    }

    /// Load the stage ending at `end` from the bytes of a weights file: its shard, or a file
    /// that holds more (the whole weights).
    ///
    /// # Errors
    /// As [`Self::from_weight_bytes`], and [`Self::load_stage`]'s.
    pub fn load_stage_bytes(
        &mut self,
        end: Boundary,
        bytes: &[u8],
        device: &Device,
    ) -> super::Result<()> {
        self.load_stage(end, &TensorFile::from_bytes(bytes, WEIGHTS_MAGIC)?, device)
    }

    /// The network from a weights file on disk (native tools and the server).
    ///
    /// # Errors
    /// [`super::ModelError::Unreadable`] when the file cannot be read, else as
    /// [`Self::from_weight_bytes`].
    #[cfg(not(target_family = "wasm"))]
    pub fn load(path: &std::path::Path, device: &Device) -> super::Result<Self> {
        Self::from_weights(&read_weights(path)?, device)
    }
}

/// A weights file from disk, parsed (the server also cuts it into shards).
///
/// # Errors
/// [`super::ModelError::Unreadable`] when the file cannot be read,
/// [`super::ModelError::BadWeights`] when it is damaged.
#[cfg(not(target_family = "wasm"))]
pub fn read_weights(path: &std::path::Path) -> super::Result<TensorFile> {
    let bytes = std::fs::read(path).map_err(|e| super::ModelError::Unreadable {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    Ok(TensorFile::from_bytes(&bytes, WEIGHTS_MAGIC)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_partition_a_file_by_stage() {
        let mut file = TensorFile::new();
        for name in [
            "stem.weight",
            "blocks.0.depthwise.weight",
            "blocks.10.project.bias",
            "head.bias",
            "fc.weight",
        ] {
            file.insert(name, vec![1], vec![1.0]);
        }
        let shards = weight_shards(&file);
        assert_eq!(shards.len(), 19, "every stage but pool");
        let names = |b: &str| {
            let b: Boundary = b.parse().unwrap();
            let (_, s) = shards.iter().find(|(e, _)| *e == b).unwrap();
            s.names().map(str::to_string).collect::<Vec<_>>()
        };
        assert_eq!(names("block0"), ["blocks.0.depthwise.weight"]);
        assert_eq!(names("block1"), Vec::<String>::new(), "blocks.10 is not block 1");
        assert_eq!(names("block10"), ["blocks.10.project.bias"]);
        assert_eq!(names("logits"), ["fc.weight"]);
        let total: usize = shards.iter().map(|(_, s)| s.num_values()).sum();
        assert_eq!(total, file.num_values(), "no tensor lost or repeated");
        assert!(weight_shard(&file, Boundary::POOL).is_none());
        assert!(weight_shard(&file, Boundary::INPUT).is_none());
    }
}
