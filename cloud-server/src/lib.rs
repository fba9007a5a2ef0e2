//! The cloud half of split inference: an actix-web app that takes feature frames (or whole
//! images) over a WebSocket, runs the remaining stages of EfficientNet-Lite0 and answers with the
//! top-5 classes and its timings. It also serves the demo page, the wasm package and the weights.
//!
//! `main.rs` and the integration tests build the same app through [`config_app`].

//! Files: `config` (flags), `state` (what handlers share, loaded at start-up), `engine` (a
//! model's workers and their queue), `hosted` (the models served, by id), `service` (one frame
//! in, one reply out, no transport), `ws` (the socket loop), `routes` (HTTP), `static_files`
//! (what of the web folder is served), `tls`
//! (certificates), `info` (the `/api/info` contract), `shards` (weights and calibration cut per
//! boundary),
//! `metrics` (what `/metrics` counts), `groups` and `group_ws` (device groups: the registry and
//! the `/group` socket), `llm_ws` (a stateful model's blocks for a client's split: `/llm`),
//! `llm_models` (the stateful models `/llm` serves, any [`split_shared::runtime::SequenceModel`]),
//! `llm_batch` (their steps batched across conversations), `llm_budget` (the KV budget and
//! eviction).

mod config;
mod cors;
mod encrypted_ws;
mod engine;
mod error;
mod frame_guard;
mod group_ws;
pub mod groups;
pub mod hosted;
pub mod hosts;
mod info;
pub mod ipnet;
mod limits;
mod llm_batch;
mod llm_budget;
mod llm_edge;
mod llm_models;
mod llm_ws;
mod metrics;
pub mod price;
mod retime;
mod routes;
mod service;
mod shards;
pub mod site;
mod state;
mod static_files;
pub mod tls;
mod ws;

pub use config::{Config, DeviceChoice, Token};
pub use engine::{Engine, Outcome, Work};
pub use error::ServeError;
pub use info::{CalibrationInfo, LlmInfo, ModelInfo, SequenceModelInfo, ServerInfo};
pub use metrics::Metrics;
pub use routes::config_app;
pub use service::{Session, answer};
pub use shards::PartInfo;
pub use state::{AppState, EngineSettings};
pub use ws::{SUBPROTOCOL, TOKEN_SUBPROTOCOL_PREFIX};
