//! The project's build and setup tasks as a library: where things live, running cargo and
//! other programs, the browser modules' build, the server for the demo and the tests, the
//! weights and the shipped calibration. `cargo xtask` (this crate's binary) runs them; the
//! measuring tools (`split-lab`, `split-studies`) use them to prepare what they measure.

pub mod browser;
pub mod ci;
pub mod cluster;
pub mod cmd;
mod convert;
pub mod doc_links;
pub mod docs;
pub mod fuzz;
pub mod paths;
pub mod prune;
pub mod server;
pub mod setup;
pub mod toolchain;
mod torch_legacy;
pub mod wasm_build;
