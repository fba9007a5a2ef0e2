//! `split-studies llm-codec` (`./run.sh llm-codec`): what coding the chat's hidden states costs
//! in answers and saves in bytes.
//!
//! The U-shaped split sends, per position, the hidden state after the browser's blocks `0..k`
//! up and the state after the server's blocks `k..30` back down. Each [`HiddenCodec`] is applied
//! to both crossings, at every position of the prompt and of the answer, exactly as the two
//! sides would; the answer is compared with the unsplit model's greedy answer of `--tokens`
//! tokens. Agreement is measured teacher-forced: at every step the split model is fed the
//! unsplit model's tokens so far and must name its next one. A prompt whose every step agrees
//! gets the unsplit answer token for token when generating on its own.
//!
//! Nothing is fitted (the codecs have no tables), so the prompts are the privacy study's
//! (`reports/llm-privacy/prompts.txt`).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use serde::Serialize;
use split_shared::codec::HiddenCodec;
use split_shared::models::smollm2::{KvCache, Message, Smollm2, argmax};

use crate::llm::{Chat, command_line, read_prompts, write_report};

/// Greedy answers through the split with each hidden-state codec, against the unsplit model's.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The GGUF file (default: the one `./run.sh setup` fetched).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Blocks kept in the browser (the boundaries measured).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,12,16")]
    blocks: Vec<usize>,
    /// The encodings measured.
    #[arg(long, value_delimiter = ',', default_value = "f32,f16,bf16,q8,q8o")]
    codecs: Vec<HiddenCodec>,
    /// Which crossings are coded: both (what the chat does), or only one, to see which costs
    /// the agreement.
    #[arg(long, value_enum, default_value_t = Crossing::Both)]
    crossing: Crossing,
    /// Answer tokens per prompt.
    #[arg(long, default_value_t = 64)]
    tokens: usize,
    /// The prompts, one per line.
    #[arg(long, default_value = "reports/llm-privacy/prompts.txt")]
    prompts: PathBuf,
    /// Where the results go (JSON).
    #[arg(long, default_value = "reports/llm-codec/data.json")]
    out: PathBuf,
}

/// The hidden states a run codes.
#[derive(clap::ValueEnum, Serialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Crossing {
    /// Up to the server and back down.
    Both,
    /// Only the states the browser sends.
    Up,
    /// Only the states the server returns.
    Down,
}

/// One boundary and codec.
#[derive(Serialize, Debug)]
struct Row {
    blocks: usize,
    codec: HiddenCodec,
    /// Bytes of one position's hidden state on the wire (each way).
    row_bytes: usize,
    /// Steps whose next token was the unsplit model's (teacher-forced).
    steps_agreeing: usize,
    steps: usize,
    /// Prompts whose whole answer was the unsplit model's.
    prompts_identical: usize,
    /// Largest magnitude that crossed (f16 overflows past 65,504).
    max_abs: f32,
    /// At the steps that disagreed, the largest lead of the split's choice over the unsplit
    /// model's token in the split's own logits: small when the two were all but tied.
    worst_margin: f32,
}

#[derive(Serialize, Debug)]
struct Report {
    command: String,
    model: String,
    prompts: usize,
    tokens: usize,
    crossing: Crossing,
    rows: Vec<Row>,
}

/// Run the study, print a table and write the JSON report.
pub fn run(a: Args) -> Result<()> {
    let chat = Chat::load(a.model.as_deref())?;
    let model = &chat.model;
    chat.check_blocks(&a.blocks)?;
    let prompts: Vec<Vec<u32>> = read_prompts(&a.prompts)?
        .into_iter()
        .map(|content| {
            let message = Message { role: "user".into(), content };
            chat.template.encode(&chat.tokenizer, &[message])
        })
        .collect::<Result<_, _>>()?;
    let started = Instant::now();
    let references: Vec<Vec<u32>> =
        prompts.iter().map(|p| greedy(model, p, a.tokens)).collect::<Result<_>>()?;
    eprintln!(
        "llm-codec: {} unsplit answers of {} tokens in {:.1} s",
        prompts.len(),
        a.tokens,
        started.elapsed().as_secs_f64()
    );

    println!(
        "| blocks in the browser | codec | bytes per position | next token agreeing | answers identical | largest margin where not |"
    );
    println!("| ---: | --- | ---: | ---: | ---: | ---: |");
    let mut rows = Vec::new();
    for &k in &a.blocks {
        for &codec in &a.codecs {
            let mut row = Row {
                blocks: k,
                codec,
                row_bytes: codec.row_bytes(model.config.dim),
                steps_agreeing: 0,
                steps: 0,
                prompts_identical: 0,
                max_abs: 0.0,
                worst_margin: 0.0,
            };
            for (prompt, reference) in prompts.iter().zip(&references) {
                let agreeing =
                    teacher_forced(model, k, codec, a.crossing, prompt, reference, &mut row)?;
                row.steps_agreeing += agreeing;
                row.steps += reference.len();
                row.prompts_identical += usize::from(agreeing == reference.len());
            }
            println!(
                "| {k} | {codec} | {} | {:.2}% | {} of {} | {:.3} |",
                row.row_bytes,
                100.0 * row.steps_agreeing as f64 / row.steps as f64,
                row.prompts_identical,
                prompts.len(),
                row.worst_margin
            );
            rows.push(row);
        }
    }
    let report = Report {
        command: command_line(),
        model: chat.file.clone(),
        prompts: prompts.len(),
        tokens: a.tokens,
        crossing: a.crossing,
        rows,
    };
    write_report(&a.out, &report)?;
    eprintln!("llm-codec: wrote {} ({:.0} s)", a.out.display(), started.elapsed().as_secs_f64());
    Ok(())
}

/// The unsplit model's greedy answer: `n` tokens after the prompt (stopping at none).
fn greedy(model: &Smollm2, prompt: &[u32], n: usize) -> Result<Vec<u32>> {
    let mut cache = KvCache::new(&model.config, 0..model.config.layers, prompt.len() + n);
    let mut logits = model.forward(prompt, &mut cache)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let next = argmax(&logits);
        out.push(next);
        logits = model.forward(&[next], &mut cache)?;
    }
    Ok(out)
}

/// Steps of `reference` the split at `k` with `codec` on its crossings predicts, fed the
/// reference's own tokens.
fn teacher_forced(
    model: &Smollm2,
    k: usize,
    codec: HiddenCodec,
    crossing: Crossing,
    prompt: &[u32],
    reference: &[u32],
    row: &mut Row,
) -> Result<usize> {
    let (dim, layers) = (model.config.dim, model.config.layers);
    let capacity = prompt.len() + reference.len();
    let mut edge = KvCache::new(&model.config, 0..k, capacity);
    let mut server = KvCache::new(&model.config, k..layers, capacity);
    let mut max_abs = row.max_abs;
    let mut cross = |hidden: &mut Vec<f32>| {
        max_abs = hidden.iter().fold(max_abs, |m, v| m.max(v.abs()));
        *hidden = codec.round_trip(hidden, dim);
    };
    let mut agreeing = 0;
    let mut input = prompt.to_vec();
    for &expected in reference {
        let mut hidden = model.embed(&input)?;
        model.forward_layers(0..k, &mut hidden, &mut edge)?;
        if crossing != Crossing::Down {
            cross(&mut hidden);
        }
        model.forward_layers(k..layers, &mut hidden, &mut server)?;
        if crossing != Crossing::Up {
            cross(&mut hidden);
        }
        let logits = model.logits(&hidden[hidden.len() - dim..])?;
        let chosen = argmax(&logits);
        if chosen == expected {
            agreeing += 1;
        } else {
            let lead = logits[chosen as usize] - logits[expected as usize];
            row.worst_margin = row.worst_margin.max(lead);
        }
        input = vec![expected];
    }
    row.max_abs = row.max_abs.max(max_abs);
    Ok(agreeing)
}
