//! `cargo xtask fuzz [seconds]`: run the libFuzzer targets: `decode_frame` (the frame and codec
//! decoders), `decode_image` (the image decoders and preprocessing an upload goes through) and
//! `decode_weights` (the weights, light-model and calibration containers a browser downloads).
//!
//! Seeds the corpora with valid frames of every codec path ([`sample_frames`]) and the sample
//! photos (whole, as JPEG, and cut short), installs `cargo-fuzz` into the cache if needed, and
//! runs `cargo +nightly fuzz run TARGET` for the given time each (default 60 s). Needs the
//! nightly toolchain (`rustup toolchain install nightly`).

use std::process::Command;

use anyhow::{Context, Result};
use split_shared::codec::Calibration;
use split_shared::protocol::sample_frames;

use crate::{calibrate, paths};

/// The libFuzzer targets on the decoders (installs cargo-fuzz; needs nightly).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// How long to fuzz each target, seconds.
    #[arg(default_value_t = 60)]
    seconds: u64,
    /// Which target: `decode_frame`, `decode_image`, `decode_weights`, or `all`.
    #[arg(long, default_value = "all", value_parser = ["all", "decode_frame", "decode_image", "decode_weights"])]
    target: String,
}

/// Write the seed corpora: valid frames of every codec path, and the sample photos as PNG, as
/// JPEG and cut short.
fn seed(fuzz_dir: &std::path::Path, calibration: &Calibration) -> Result<()> {
    let frames = fuzz_dir.join("corpus/decode_frame");
    std::fs::create_dir_all(&frames)?;
    let seeds = sample_frames(calibration);
    for (i, frame) in seeds.iter().enumerate() {
        std::fs::write(frames.join(format!("seed-{i:04}")), frame)?;
    }
    let images = fuzz_dir.join("corpus/decode_image");
    std::fs::create_dir_all(&images)?;
    for name in ["chelsea", "coffee", "camera"] {
        let png = std::fs::read(paths::repo_root().join(format!("web/samples/{name}.png")))?;
        let small = split_shared::image::preprocess(&png)?;
        let jpeg = split_shared::image::encode_jpeg(&small, 80)?;
        std::fs::write(images.join(format!("{name}.png")), &png)?;
        std::fs::write(images.join(format!("{name}.jpg")), &jpeg)?;
        std::fs::write(images.join(format!("{name}-cut.jpg")), &jpeg[..jpeg.len() / 2])?;
    }
    // Containers as the target takes them: a kind byte, then the file without its magic and
    // checksum (the target puts them back). The smallest stage, in f32, int8 and int4.
    let weights = fuzz_dir.join("corpus/decode_weights");
    std::fs::create_dir_all(&weights)?;
    let file = split_shared::model::read_weights(&crate::setup::ensure_weights()?)?;
    let block0 = "block0".parse()?;
    let shard = split_shared::model::weight_shard(&file, block0).context("block0 has weights")?;
    let quantized = |how| split_shared::container::quantize(&shard, how);
    use split_shared::container::Quantization::{Int4Grouped, Int8PerChannel};
    for (name, kind, bytes) in [
        ("f32", 0u8, shard.to_bytes(split_shared::model::WEIGHTS_MAGIC)),
        ("int8", 1, quantized(Int8PerChannel)),
        ("int4", 1, quantized(Int4Grouped { group: 32 })),
    ] {
        let mut seed = vec![kind];
        seed.extend_from_slice(&bytes[4..bytes.len() - 8]);
        std::fs::write(weights.join(format!("block0-{name}")), seed)?;
    }
    eprintln!(
        "fuzz: {} seed frames, 9 seed images, 3 seed weight files in {}",
        seeds.len(),
        fuzz_dir.display()
    );
    Ok(())
}

/// Whether the nightly toolchain the fuzzers need is installed.
pub fn nightly_available() -> bool {
    Command::new("cargo")
        .args(["+nightly", "--version"])
        .env_remove("RUSTUP_TOOLCHAIN")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A short run of every target, as the test command does: `seconds` each.
pub fn quick(seconds: u64) -> Result<()> {
    run(Args { seconds, target: "all".into() })
}

/// Run the fuzzers.
pub fn run(a: Args) -> Result<()> {
    let calibration_path = calibrate::ensure_calibration()?;
    let calibration = Calibration::load(&calibration_path)?;
    let fuzz_dir = paths::repo_root().join("fuzz");
    seed(&fuzz_dir, &calibration)?;
    let tools = paths::tools_dir().join("cargo-fuzz");
    let bin = tools.join("bin/cargo-fuzz");
    if !bin.exists() {
        eprintln!("fuzz: installing cargo-fuzz into {}", tools.display());
        let ok =
            Command::new("cargo").args(["install", "cargo-fuzz", "--root"]).arg(&tools).status()?;
        anyhow::ensure!(ok.success(), "cargo install cargo-fuzz failed");
    }
    let targets: &[&str] = match a.target.as_str() {
        "all" => &["decode_frame", "decode_image", "decode_weights"],
        one => &[one][..],
    };
    for target in targets {
        eprintln!("fuzz: {target} for {} s", a.seconds);
        let status = Command::new(&bin)
            .args(["fuzz", "run", target, "--target-dir"])
            // Outside the clone, like the workspace's: a fresh clone reuses the instrumented
            // build (8–9 minutes from nothing on two cores).
            .arg(paths::cache_dir().join("fuzz-target"))
            .args(["--", &format!("-max_total_time={}", a.seconds), "-max_len=262144"])
            .current_dir(&fuzz_dir)
            .env("RUSTUP_TOOLCHAIN", "nightly")
            .env("SPLIT_CALIBRATION", &calibration_path)
            .env_remove("CARGO_TARGET_DIR")
            .status()
            .context("running cargo-fuzz (is the nightly toolchain installed?)")?;
        anyhow::ensure!(
            status.success(),
            "the fuzzer found a failure; see fuzz/artifacts/{target}"
        );
    }
    Ok(())
}
