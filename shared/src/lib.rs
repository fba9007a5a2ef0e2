//! What the browser edge and the cloud server must agree on, with no networking code:
//!
//! - [`model`]: EfficientNet-Lite0 in burn, split at 21 named [`Boundary`]s, with per-boundary
//!   metadata (shape, MACs, parameter bytes) and the project's weights file format;
//! - [`image`]: decoding and preprocessing, so both sides feed the network identical pixels;
//! - [`protocol`]: the versioned binary frames that cross the WebSocket;
//! - [`codec`]: quantization, projection, entropy coding and stream deltas for features, driven
//!   by a calibration artefact;
//! - [`cache`]: the content-keyed LRU both sides use to skip repeated work;
//! - [`plan`]: cost table, split planner, network monitor and adaptive controller;
//! - [`labels`]: ImageNet class names and top-k.
//!
//! Everything here builds for `wasm32-unknown-unknown` and natively.

pub mod cache;
pub mod codec;
pub mod error;
pub mod image;
pub mod labels;
pub mod model;
pub mod plan;
pub mod protocol;

pub use error::{Error, Result};
pub use model::{Boundary, EfficientNetLite0};
