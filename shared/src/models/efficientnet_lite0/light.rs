//! The light model: the same network with its weights in fewer bits, for answering on the
//! device when the link is down and the edge holds only its own stages.
//!
//! The edge of a split at block5 holds 2% of the weights; running the other 98% in f32 means
//! downloading 18 MB it may never use. The light shards carry the same stages quantized
//! ([`crate::container::quantize`]): a quarter of the bytes in 8 bits, an eighth in 4. They
//! load into the same network (dequantized, so the kernels are the ones the full model runs)
//! and are replaced stage by stage when the full shards arrive. A result computed through a
//! light stage is a *reduced* answer: the features at the split are kept to finish it on the
//! server later.

use std::fmt;
use std::str::FromStr;

#[cfg(feature = "model")]
use burn::tensor::Device;

#[cfg(feature = "model")]
use super::EfficientNetLite0;
use super::{Boundary, ModelError, Result, weight_shards};
#[cfg(feature = "model")]
use crate::container::dequantize;
use crate::container::{Quantization, TensorFile, quantize};

/// A light model's precision, by name: `int8` (one scale per output channel) or `int4-g<N>`
/// (one scale per N consecutive weights).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LightPrecision(pub Quantization);

/// The light model the server publishes unless told otherwise (chosen by the agreement and
/// bytes measured in docs/resilience.md).
pub const DEFAULT_LIGHT: LightPrecision = LightPrecision(Quantization::Int8PerChannel);

impl fmt::Display for LightPrecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Quantization::Int8PerChannel => f.write_str("int8"),
            Quantization::Int4Grouped { group } => write!(f, "int4-g{group}"),
        }
    }
}

impl FromStr for LightPrecision {
    type Err = ModelError;

    fn from_str(s: &str) -> Result<Self> {
        let bad = || ModelError::UnknownPrecision(s.to_string());
        if s == "int8" {
            return Ok(Self(Quantization::Int8PerChannel));
        }
        let group: usize = s.strip_prefix("int4-g").ok_or_else(bad)?.parse().map_err(|_| bad())?;
        if !(1..=4096).contains(&group) {
            return Err(bad());
        }
        Ok(Self(Quantization::Int4Grouped { group }))
    }
}

/// Every stage with weights and its light shard (the bytes of a quantized file), in forward
/// order: what the server publishes under `/weights/light/`.
pub fn light_shards(weights: &TensorFile, precision: LightPrecision) -> Vec<(Boundary, Vec<u8>)> {
    weight_shards(weights).into_iter().map(|(b, s)| (b, quantize(&s, precision.0))).collect()
}

#[cfg(feature = "model")]
impl EfficientNetLite0 {
    /// Load the stage ending at `end` from a light shard (see the module docs); loading its
    /// full shard later replaces it.
    ///
    /// # Errors
    /// [`ModelError::BadWeights`] when the file is damaged or the stage's tensors do not fit.
    pub fn load_light_stage_bytes(
        &mut self,
        end: Boundary,
        bytes: &[u8],
        device: &Device,
    ) -> Result<()> {
        self.load_stage(end, &dequantize(bytes)?, device)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precisions_read_back_their_names() {
        for name in ["int8", "int4-g32", "int4-g1"] {
            assert_eq!(name.parse::<LightPrecision>().unwrap().to_string(), name);
        }
        for bad in ["int4", "int4-g0", "int16", "int4-gx", ""] {
            assert!(
                matches!(bad.parse::<LightPrecision>(), Err(ModelError::UnknownPrecision(_))),
                "{bad}"
            );
        }
    }
}
