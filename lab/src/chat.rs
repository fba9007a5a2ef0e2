//! `split-lab chat` (`./run.sh chat`): SmolLM2 answering one message natively, the answer
//! streamed as it is generated, then prefill and decode speed.
//!
//! Prefill runs the whole prompt as one batch; decode one token per forward. The speed lines
//! are what the anchors compare (llama.cpp on the same file and thread count).

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use split_shared::models::smollm2::{ChatTemplate, KvCache, Message, Sampler, Sampling, Smollm2};

/// Chat with SmolLM2-135M-Instruct on this machine's CPU and time it.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// What the user says.
    #[arg(default_value = "What is the capital of France?")]
    message: String,
    /// The GGUF file (default: the one `./run.sh setup` fetched).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Most tokens to generate.
    #[arg(long, default_value_t = 64)]
    max_tokens: usize,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Nucleus sampling's probability mass (with a temperature above 0).
    #[arg(long, default_value_t = 0.9)]
    top_p: f32,
    /// The sampler's seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Threads the kernels may use (0: every core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Generate the answer this many times and report each run's speed (the first warms up).
    #[arg(long, default_value_t = 1)]
    repeats: usize,
    /// Decode with activations quantized to 8 bits per value (integer dot products, as
    /// llama.cpp does): faster, and the answer may part from the reference's after a few tokens.
    #[arg(long)]
    q8: bool,
}

/// Load the model, answer the message `repeats` times and print the speed of each run.
pub fn run(a: Args) -> Result<()> {
    let path = a.model.unwrap_or_else(split_paths::llm_file);
    let bytes = std::fs::read(&path)
        .with_context(|| format!("reading {} (`./run.sh setup` fetches it)", path.display()))?;
    let started = Instant::now();
    let gguf = split_shared::container::Gguf::parse(&bytes)?;
    let template = ChatTemplate::from_gguf(&gguf)?;
    let (model, tok) = Smollm2::load(&bytes)?;
    let model = model.with_q8_activations(a.q8);
    drop(bytes);
    split_kernels::set_max_threads(a.threads);
    eprintln!(
        "chat: {} loaded in {:.0} ms ({:.1} MB of weights in memory, {} threads{})",
        path.display(),
        started.elapsed().as_secs_f64() * 1e3,
        model.weight_bytes() as f64 / 1e6,
        split_kernels::max_threads(),
        if a.q8 { ", 8-bit activations in decode" } else { "" }
    );
    let prompt =
        template.encode(&tok, &[Message { role: "user".into(), content: a.message.clone() }])?;
    let sampling = if a.temperature > 0.0 {
        Sampling::TopP { temperature: a.temperature, top_p: a.top_p, seed: a.seed }
    } else {
        Sampling::Greedy
    };
    for run in 0..a.repeats.max(1) {
        let mut sampler = Sampler::new(sampling);
        let mut cache =
            KvCache::new(&model.config, 0..model.config.layers, prompt.len() + a.max_tokens);
        let t0 = Instant::now();
        let logits = model.forward(&prompt, &mut cache)?;
        let prefill = t0.elapsed().as_secs_f64();
        let mut next = sampler.next(&logits);
        let mut answer = Vec::new();
        let t1 = Instant::now();
        let mut printed = 0;
        while answer.len() < a.max_tokens && next != tok.eos {
            answer.push(next);
            if run == 0 {
                // Print whole characters only: a token may end inside one.
                let text = tok.decode(&answer)?;
                let complete = text.trim_end_matches('\u{fffd}');
                print!("{}", &complete[printed.min(complete.len())..]);
                printed = complete.len();
                std::io::stdout().flush()?;
            }
            if answer.len() == a.max_tokens {
                break;
            }
            next = sampler.next(&model.forward(&[next], &mut cache)?);
        }
        let decode = t1.elapsed().as_secs_f64();
        if run == 0 {
            println!();
        }
        // The first answer token comes from the prefill's logits: decode made `len - 1` forwards.
        let steps = answer.len().saturating_sub(1).max(1);
        eprintln!(
            "chat: run {run}: prefill {} tokens in {:.1} ms ({:.1} tokens/s); decode {} tokens in {:.1} ms ({:.2} tokens/s)",
            prompt.len(),
            prefill * 1e3,
            prompt.len() as f64 / prefill,
            steps,
            decode * 1e3,
            steps as f64 / decode,
        );
    }
    Ok(())
}
