//! The server's integration tests, one binary: each module was a test binary of its own, and
//! every one of them compiled and linked the WebSocket client, the server and the model again
//! (15–32 s each in the test build, most of it the same generic code); together they share it.
//!
//! - `any_model`: a model defined in the test itself, hosted beside EfficientNet-Lite0 and run
//!   split over `/ws`;
//! - `any_sequence`: a stateful model defined in the test itself, hosted beside SmolLM2 and run
//!   split and cloud-only over `/llm`;
//! - `attacks`: the real server process under hostile clients, its memory as the kernel counts it;
//! - `engine`: the model worker pool, and `busy` when its queue is full;
//! - `groups`: device groups, signalling and relay over real sockets;
//! - `health`: `/livez`, `/readyz`, `/metrics` and a graceful shutdown;
//! - `llm`: the language model's `/llm` conversations, every placement;
//! - `service`: the request service without a socket, and `/api/info` as the client reads it;
//! - `tls`: the binary behind TLS, and its refusals to serve clear text;
//! - `ws`: the image protocol over `/ws`.

mod common;

mod any_model;
mod any_sequence;
mod attacks;
mod encrypted;
mod engine;
mod groups;
mod health;
mod llm;
mod service;
mod tls;
mod ws;
