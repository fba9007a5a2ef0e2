//! `cargo xtask fuzz [seconds]`: run the libFuzzer targets: `decode_frame` (the frame and codec
//! decoders), `decode_image` (the image decoders and preprocessing an upload goes through),
//! `decode_weights` (the weights, light-model and calibration containers a browser downloads,
//! and the language model's GGUF file with the readers of its metadata) and `decode_encrypted`
//! (the encrypted classifier's readers of ciphertexts and keys, fhe.rs's).
//!
//! Seeds the corpora with valid frames of every codec path ([`sample_frames`]) and the sample
//! photos (whole, as JPEG, and cut short), installs the pinned `cargo-fuzz` into the cache and
//! the pinned nightly ([`crate::toolchain::NIGHTLY`]) if needed, and runs `cargo fuzz run
//! TARGET` on that nightly for the given time each (default 60 s), with the dependency
//! versions of `fuzz/Cargo.lock`.

use std::process::Command;

use anyhow::{Context, Result};
use split_shared::codec::Calibration;
use split_shared::protocol::sample_frames;

use crate::{paths, setup};

/// The libFuzzer targets on the decoders (installs cargo-fuzz and the pinned nightly).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// How long to fuzz each target, seconds.
    #[arg(default_value_t = 60)]
    seconds: u64,
    /// Which target: `decode_frame`, `decode_image`, `decode_weights`, `decode_encrypted`, or
    /// `all`.
    #[arg(long, default_value = "all", value_parser = ["all", "decode_frame", "decode_image", "decode_weights", "decode_encrypted"])]
    target: String,
}

/// Every target, in the order `all` runs them.
const TARGETS: [&str; 4] = ["decode_frame", "decode_image", "decode_weights", "decode_encrypted"];

/// Write the seed corpora: valid frames of every codec path, and the sample photos as PNG, as
/// JPEG and cut short.
fn seed(fuzz_dir: &std::path::Path, calibration: &Calibration) -> Result<()> {
    let frames = fuzz_dir.join("corpus/decode_frame");
    std::fs::create_dir_all(&frames)?;
    let seeds = sample_frames(&split_shared::model::lite0_spec(), calibration);
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
    // GGUF: the language model's header (its metadata: numbers, vocabulary, merges, chat
    // template), cut to what the fuzzer's inputs may hold.
    let llm = std::fs::read(setup::ensure_llm()?)?;
    let mut seed = vec![3u8];
    seed.extend_from_slice(&llm[..GGUF_SEED_BYTES]);
    std::fs::write(weights.join("smollm2-head"), seed)?;
    seed_encrypted(fuzz_dir, &file)?;
    eprintln!(
        "fuzz: {} seed frames, 9 seed images, 4 seed model files, 3 seeds of the encrypted \
         classifier in {}",
        seeds.len(),
        fuzz_dir.display()
    );
    Ok(())
}

/// The encrypted classifier's seeds, as `decode_encrypted` takes them (a kind byte, then the
/// bytes): one uploaded ciphertext, an evaluation key, an answer, made by the scheme with the
/// real classifier on a photo's pooled features.
fn seed_encrypted(
    fuzz_dir: &std::path::Path,
    file: &split_shared::container::TensorFile,
) -> Result<()> {
    use split_shared::encrypted::{
        DeviceKeys, EncryptedClassifier, QuantizedClassifier, quantize_features,
    };
    use split_shared::model::NUM_CLASSES;
    let dir = fuzz_dir.join("corpus/decode_encrypted");
    std::fs::create_dir_all(&dir)?;
    let mut rng = rand::rng();
    let keys = DeviceKeys::generate(&mut rng);
    let key = keys.evaluation_key(&mut rng)?;
    let head = split_shared::encrypted::layout::IN;
    let classifier = QuantizedClassifier::new(
        file.tensor("fc.weight", &[NUM_CLASSES, head])?,
        file.tensor("fc.bias", &[NUM_CLASSES])?,
    );
    // Pooled features of a made-up photo: the readers care for the bytes, not the picture.
    let pooled: Vec<f32> = (0..head).map(|i| (i % 7) as f32 * 0.5).collect();
    let parts = keys.encrypt(&quantize_features(&pooled), &mut rng)?;
    let slices: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
    let server = EncryptedClassifier::new(&classifier)?;
    let answer = server.evaluate(&slices, &EncryptedClassifier::read_key(&key)?)?;
    for (name, kind, bytes) in
        [("upload", 0u8, &parts[0]), ("key", 1, &key), ("answer", 2, &answer)]
    {
        let mut seed = vec![kind];
        seed.extend_from_slice(bytes);
        std::fs::write(dir.join(name), seed)?;
    }
    Ok(())
}

/// Bytes of the GGUF file's start in its seed (under the runs' `-max_len`).
const GGUF_SEED_BYTES: usize = 200_000;

/// The cargo-fuzz release the fuzzers run with (installed with its own lock file where the
/// registry still has every version it names: [`crate::cmd::cargo_install`]).
const CARGO_FUZZ_VERSION: &str = "0.13.2";

/// A short run of every target, as the test command does: `seconds` each.
pub fn quick(seconds: u64) -> Result<()> {
    run(Args { seconds, target: "all".into() })
}

/// The pinned nightly and cargo-fuzz, installed when missing; the cargo-fuzz binary.
fn ensure_cargo_fuzz() -> Result<std::path::PathBuf> {
    crate::toolchain::ensure_nightly(&[])?;
    let tools = paths::tools_dir().join(format!("cargo-fuzz-{CARGO_FUZZ_VERSION}"));
    let bin = tools.join("bin/cargo-fuzz");
    if !bin.exists() {
        eprintln!("fuzz: installing cargo-fuzz {CARGO_FUZZ_VERSION} into {}", tools.display());
        crate::cmd::cargo_install("cargo-fuzz", CARGO_FUZZ_VERSION, &tools)?;
    }
    Ok(bin)
}

/// `cargo fuzz` in `fuzz/` on the pinned nightly, with the instrumented build outside the
/// clone like the workspace's (a fresh clone reuses it).
///
/// Without AddressSanitizer (`--sanitizer none`; coverage instrumentation and debug assertions
/// stay): the fuzzed crates forbid `unsafe` (the workspace's lints), so what a run can find in
/// them is a panic, an overflow, a hang or runaway memory (libFuzzer's `-rss_limit_mb`), none
/// of which needs ASan. Its instrumentation made the build 3m28 of CPU instead of 2m27 (fresh
/// target directories, `time cargo fuzz build [-s none]`, image 0.25.10) and each execution
/// slower (12,686 runs of `decode_image` in 60 s against 5,849).
fn cargo_fuzz(bin: &std::path::Path, action: &str, target: Option<&str>) -> Command {
    let mut c = Command::new(bin);
    crate::cmd::without_lints(&mut c)
        .args(["fuzz", action])
        .args(target)
        .args(["--sanitizer", "none"])
        .arg("--target-dir")
        .arg(paths::cache_dir().join("fuzz-target"))
        .current_dir(paths::repo_root().join("fuzz"))
        .env("RUSTUP_TOOLCHAIN", crate::toolchain::NIGHTLY)
        .env_remove("CARGO_TARGET_DIR");
    c
}

/// Install the tools and build every target, without running them (the test command does
/// this beside its other builds).
pub fn build() -> Result<()> {
    let bin = ensure_cargo_fuzz()?;
    crate::cmd::run(&mut cargo_fuzz(&bin, "build", None))
}

/// Run the fuzzers.
pub fn run(a: Args) -> Result<()> {
    let calibration_path = setup::ensure_calibration()?;
    let calibration = Calibration::load(&calibration_path)?;
    let fuzz_dir = paths::repo_root().join("fuzz");
    seed(&fuzz_dir, &calibration)?;
    let bin = ensure_cargo_fuzz()?;
    let targets: &[&str] = match a.target.as_str() {
        "all" => &TARGETS,
        one => &[one][..],
    };
    for target in targets {
        eprintln!("fuzz: {target} for {} s", a.seconds);
        // An evaluation key is 335 kB: its seed whole, and room to grow.
        let max_len = if *target == "decode_encrypted" { 1 << 19 } else { 262_144 };
        let status = cargo_fuzz(&bin, "run", Some(target))
            .args(["--", &format!("-max_total_time={}", a.seconds), &format!("-max_len={max_len}")])
            .env("SPLIT_CALIBRATION", &calibration_path)
            .status()
            .context("running cargo-fuzz")?;
        anyhow::ensure!(
            status.success(),
            "the fuzzer found a failure; see fuzz/artifacts/{target}"
        );
    }
    Ok(())
}
