//! Where the project's fetched and generated files live on a machine.
//!
//! `./run.sh setup` writes the weights and the codec calibration into one cache outside the
//! clone, shared by every checkout; the server, the tools and the tests read them from there.
//! This crate is the only place that knows that layout and the environment variables that
//! override it, so `split-shared` (which also runs in the browser) reads no environment.
//!
//! | what | default | override |
//! | --- | --- | --- |
//! | cache root | `~/.cache/splitinfer` | `SPLIT_CACHE` |
//! | weights | `<cache>/weights/efficientnet-lite0.splw` | `SPLIT_WEIGHTS` |
//! | calibration | the weights path with extension `splc` | `SPLIT_CALIBRATION` |
//! | language model | `<cache>/weights/SmolLM2-135M-Instruct.Q4_1.gguf` | `SPLIT_LLM` |

use std::path::PathBuf;

/// Root of the cache: `$SPLIT_CACHE`, else `~/.cache/splitinfer`.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("SPLIT_CACHE") {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".cache").join("splitinfer")
}

/// The converted weights file: `$SPLIT_WEIGHTS`, else in the cache.
pub fn weights_file() -> PathBuf {
    if let Some(p) = std::env::var_os("SPLIT_WEIGHTS") {
        return p.into();
    }
    cache_dir().join("weights").join("efficientnet-lite0.splw")
}

/// The codec calibration: `$SPLIT_CALIBRATION`, else next to the weights.
pub fn calibration_file() -> PathBuf {
    if let Some(p) = std::env::var_os("SPLIT_CALIBRATION") {
        return p.into();
    }
    weights_file().with_extension("splc")
}

/// SmolLM2-135M-Instruct's GGUF file: `$SPLIT_LLM`, else in the cache.
pub fn llm_file() -> PathBuf {
    if let Some(p) = std::env::var_os("SPLIT_LLM") {
        return p.into();
    }
    cache_dir().join("weights").join("SmolLM2-135M-Instruct.Q4_1.gguf")
}
