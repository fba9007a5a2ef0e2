//! EfficientNet-Lite0 (Tan & Le, "EfficientNet: Rethinking Model Scaling for CNNs", ICML 2019;
//! the Lite variants drop squeeze-excite and use ReLU6 so they quantize and run well on edge
//! hardware), split at block boundaries.
//!
//! Conventions the pretrained weights need (each one costs accuracy when wrong):
//! TensorFlow "SAME" padding (asymmetric for stride 2), batch-norm eps 1e-3 (folded into the
//! convolutions when the weights are converted), ReLU6 except after the projection conv, and
//! input normalized as `(x - 127) / 128`.

mod arch;
mod boundary;
mod error;
mod features;
#[cfg(feature = "model")]
pub mod fused;
mod light;
#[cfg(feature = "model")]
mod network;
mod spec;
#[cfg(feature = "model")]
mod split;
mod weights;

pub use arch::{
    BlockSpec, BoundaryInfo, HEAD_CHANNELS, INPUT_SIZE, MAX_BATCH, MIN_INPUT_SIZE, NUM_CLASSES,
    blocks, boundary_table, macs_at,
};
pub use boundary::{Boundary, NUM_BOUNDARIES, PRIVACY_FLOOR};
pub use error::{ModelError, Result};
pub use features::{Features, check_shape};
pub use light::{DEFAULT_LIGHT, LightPrecision, light_shards};
#[cfg(feature = "model")]
pub use network::{Depthwise, EfficientNetLite0, MbConv, Pointwise, Stem, Steps};
pub use spec::{LITE0_NAME, lite0_spec};
#[cfg(feature = "model")]
pub use split::Lite0Split;
#[cfg(not(target_family = "wasm"))]
pub use weights::read_weights;
pub use weights::{WEIGHTS_MAGIC, stage_prefix, weight_shard, weight_shards};
