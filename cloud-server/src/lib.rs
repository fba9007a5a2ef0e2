//! The cloud half of split inference: an actix-web app that takes feature frames (or whole
//! images) over a WebSocket, runs the remaining stages of EfficientNet-Lite0 and answers with the
//! top-5 classes and its timings. It also serves the demo page, the wasm package and the weights.
//!
//! `main.rs` and the integration tests build the same app through [`config_app`].

mod config;
mod engine;
mod error;
mod routes;
mod ws;

pub use config::{Config, DeviceChoice};
pub use engine::{Engine, Outcome, Work};
pub use error::ServeError;
pub use routes::{AppState, config_app};
