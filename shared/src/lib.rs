//! What the browser edge and the cloud server must agree on, with no networking code.
//!
//! Layers, each using only the ones below it:
//!
//! - [`runtime`]: what any model implements to run split ([`runtime::SplitModel`]: named
//!   boundaries, a forward over a range, its frames' decoding) and the [`runtime::Registry`] of
//!   the models a process hosts; it names no model;
//! - [`protocol`]: the versioned binary frames that cross the WebSocket, and the
//!   activations ↔ frame step both sides run ([`protocol::FeaturesFrame`]);
//! - [`codec`]: quantization, projection, entropy coding and stream deltas for features, driven
//!   by a calibration artefact; [`plan`]: cost table, split planner, network monitor and adaptive
//!   controller;
//! - [`model`] (`models/efficientnet_lite0/`, re-exported under the name every crate uses):
//!   EfficientNet-Lite0 in burn, split at 21 named [`Boundary`]s, and the [`model::Features`]
//!   that cross a split; [`image`]: decoding and preprocessing, so both sides
//!   feed the network identical pixels;
//! - [`models`]: every model in a folder of its own: EfficientNet-Lite0, and SmolLM2-135M-Instruct,
//!   a language model read from GGUF, with its tokenizer and sampler;
//! - [`container`]: byte reading and the tensor file the weights and calibration are stored in;
//!   [`cache`]: the content-keyed LRU both sides use to skip repeated work; [`labels`]: ImageNet
//!   class names and top-k; [`rng`]: the seedable stream of draws whatever must repeat from a
//!   seed uses.
//!
//! Everything here builds for `wasm32-unknown-unknown` and natively, and reads no environment:
//! where files live is the tools' and the server's business. The network itself (burn, the
//! fused kernels, tensors in and out) is the `model` feature, on by default; without it the
//! crate is the formats alone, which the build tasks use without compiling burn.

/// `Serialize`/`Deserialize` as the value's name (`Display` / `FromStr`): how boundaries and
/// codec settings appear in JSON (the cost table, placements handed to JavaScript).
macro_rules! serde_by_name {
    ($t:ty, $what:literal) => {
        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let name = String::deserialize(d)?;
                name.parse().map_err(|e| serde::de::Error::custom(format!("{}: {e}", $what)))
            }
        }
    };
}
pub(crate) use serde_by_name;

pub mod cache;
pub mod codec;
pub mod container;
pub mod encrypted;
pub mod error;
pub mod group;
pub mod image;
pub mod labels;
/// EfficientNet-Lite0 ([`models::efficientnet_lite0`]) under its older, shorter path.
pub use models::efficientnet_lite0 as model;
pub mod models;
pub mod plan;
pub mod protocol;
pub mod rng;
pub mod runtime;

pub use error::{Error, Result};
#[cfg(feature = "model")]
pub use model::EfficientNetLite0;
pub use model::{Boundary, Features};
