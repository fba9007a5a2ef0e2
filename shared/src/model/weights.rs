//! The pretrained weights: a [`TensorFile`] under the magic "SPLW", read once into the network.

use burn::tensor::Device;

use super::{EfficientNetLite0, Result};
use crate::container::TensorFile;

/// First four bytes of a weights file.
pub const WEIGHTS_MAGIC: [u8; 4] = *b"SPLW";

impl EfficientNetLite0 {
    /// The network from the bytes of a weights file (what the browser fetches).
    ///
    /// # Errors
    /// [`super::ModelError::BadWeights`] when the file is damaged or a tensor is missing or misshaped.
    pub fn from_weight_bytes(bytes: &[u8], device: &Device) -> Result<Self> {
        Self::from_weights(&TensorFile::from_bytes(bytes, WEIGHTS_MAGIC)?, device)
    }

    /// The network from a weights file on disk (native tools and the server).
    ///
    /// # Errors
    /// [`super::ModelError::Unreadable`] when the file cannot be read, else as
    /// [`Self::from_weight_bytes`].
    #[cfg(not(target_family = "wasm"))]
    pub fn load(path: &std::path::Path, device: &Device) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|e| super::ModelError::Unreadable {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        Self::from_weight_bytes(&bytes, device)
    }
}
