//! `cargo xtask fuzz [seconds]`: run the libFuzzer target on the frame and codec decoders.
//!
//! Seeds the corpus with valid frames of every codec path ([`sample_frames`]), installs
//! `cargo-fuzz` into the cache if needed, and runs `cargo +nightly fuzz run decode_frame` for the
//! given time (default 60 s). Needs the nightly toolchain (`rustup toolchain install nightly`).

use std::process::Command;

use anyhow::{Context, Result};
use split_shared::codec::Calibration;
use split_shared::protocol::sample_frames;

use crate::{calibrate, paths};

/// The libFuzzer target on the frame and codec decoders (installs cargo-fuzz; needs nightly).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// How long to fuzz.
    #[arg(default_value_t = 60)]
    seconds: u64,
}

/// Run the fuzzer.
pub fn run(a: Args) -> Result<()> {
    let seconds = a.seconds;
    let calibration_path = calibrate::ensure_calibration()?;
    let calibration = Calibration::load(&calibration_path)?;
    let fuzz_dir = paths::repo_root().join("fuzz");
    let corpus = fuzz_dir.join("corpus/decode_frame");
    std::fs::create_dir_all(&corpus)?;
    let seeds = sample_frames(&calibration);
    for (i, frame) in seeds.iter().enumerate() {
        std::fs::write(corpus.join(format!("seed-{i:04}")), frame)?;
    }
    eprintln!("fuzz: {} seed frames in {}", seeds.len(), corpus.display());
    let tools = paths::tools_dir().join("cargo-fuzz");
    let bin = tools.join("bin/cargo-fuzz");
    if !bin.exists() {
        eprintln!("fuzz: installing cargo-fuzz into {}", tools.display());
        let ok =
            Command::new("cargo").args(["install", "cargo-fuzz", "--root"]).arg(&tools).status()?;
        anyhow::ensure!(ok.success(), "cargo install cargo-fuzz failed");
    }
    let status = Command::new(&bin)
        .args([
            "fuzz",
            "run",
            "decode_frame",
            "--",
            &format!("-max_total_time={seconds}"),
            "-max_len=262144",
        ])
        .current_dir(&fuzz_dir)
        .env("RUSTUP_TOOLCHAIN", "nightly")
        .env("SPLIT_CALIBRATION", &calibration_path)
        .env_remove("CARGO_TARGET_DIR")
        .status()
        .context("running cargo-fuzz (is the nightly toolchain installed?)")?;
    anyhow::ensure!(
        status.success(),
        "the fuzzer found a failure; see fuzz/artifacts/decode_frame"
    );
    Ok(())
}
