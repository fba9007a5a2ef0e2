//! `split-studies <task>` (`./run.sh <task>`): the accuracy, calibration and privacy studies.

use anyhow::Result;
use clap::{Parser, Subcommand};
use split_studies::{
    calibrate, encrypted, eval, fusion, light, llm_codec, llm_invert, privacy, stream_eval, train,
};

/// The network's activations are multi-megabyte buffers allocated and freed on every forward;
/// glibc's allocator hands them back to the OS and page-faults them in again each time
/// (about 44 faults a forward), mimalloc keeps them for reuse: 3–6% of a forward (docs/kernels.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// What the split costs in answers and in privacy, measured on photos with the real weights.
#[derive(Parser, Debug)]
#[command(name = "split-studies", about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand, Debug)]
enum Task {
    /// Fit the codec's tables to a folder of images (what `profiles/calibration.splc` is).
    Calibrate(calibrate::Args),
    /// Accuracy and agreement of split inference over a folder of images.
    Eval(eval::Args),
    /// The encrypted classifier over a folder of images: agreement, time and bytes.
    Encrypted(encrypted::Args),
    /// Two devices' views of each photo, alone and fused (docs/multi-device.md).
    Fusion(fusion::Args),
    /// The light model's candidates: bytes, agreement with the full model, time.
    Light(light::Args),
    /// Bytes per frame of a synthetic camera pan with and without stream residuals.
    StreamEval(stream_eval::Args),
    /// Reconstruct photos from the features the server receives (white-box inversion): PSNR,
    /// SSIM and layout kept per boundary, codec and noise (builds with burn's autodiff).
    Invert(privacy::InvertArgs),
    /// Adversarial photos crafted against the public model, with and without the feature
    /// noise's random draw (builds with burn's autodiff).
    Adversarial(privacy::AdversarialArgs),
    /// Name the prompt's tokens from the hidden states a chat split sends the server
    /// (nearest embedding, logit lens, a learned linear map) per boundary.
    LlmInvert(llm_invert::Args),
    /// The chat split's answers with its hidden states coded each way (f32, f16, bf16, q8, q8o),
    /// against the unsplit model's, per boundary.
    LlmCodec(llm_codec::Args),
    /// Train from the whole network: `exits` (early-exit heads), `bottleneck` (a learned
    /// bottleneck at a boundary). Builds with burn's autodiff.
    Train(train::Args),
}

fn main() -> Result<()> {
    match Cli::parse().task {
        Task::Calibrate(a) => calibrate::run(a),
        Task::Eval(a) => eval::run(a),
        Task::Encrypted(a) => encrypted::run(a),
        Task::Fusion(a) => fusion::run(a),
        Task::Light(a) => light::run(a),
        Task::StreamEval(a) => stream_eval::run(a),
        Task::Invert(a) => privacy::invert(a),
        Task::Train(a) => train::run(a),
        Task::Adversarial(a) => privacy::adversarial(a),
        Task::LlmInvert(a) => llm_invert::run(a),
        Task::LlmCodec(a) => llm_codec::run(a),
    }
}
