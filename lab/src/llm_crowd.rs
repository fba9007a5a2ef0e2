//! `split-lab llm-crowd` (`./run.sh llm-crowd`): many split conversations with SmolLM2 on one
//! server at once — the server's side of issue 32's "32 concurrent split sessions".
//!
//! Each conversation is the U-shaped split the browser runs: the edge keeps the embedding, the
//! first `--blocks` blocks and the output projection, the server runs the other blocks on its
//! own KV cache. The tool first plays one whole conversation itself, both sides on this machine
//! with the same model code, and records the frames the edge sends (the prompt's hidden states,
//! then one row per generated token) and the rows the server must send back. Then each run opens
//! `--sessions` sockets at once and every one replays those frames, the next as soon as the
//! previous reply is in, checking every reply against the recording.
//!
//! What is timed is the server's part of a token: loopback, the server's scheduling and its
//! blocks. The edge's part (its blocks and the output projection, on each user's own device) is
//! not spent between frames, so the server gets its next frame sooner than from real clients: a
//! heavier load than the same number of browsers would make. Every conversation generates
//! `--tokens` tokens, past the end of the answer when it ends sooner, so that runs do equal
//! work.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use futures_util::SinkExt;
use serde::Serialize;
use split_shared::codec::HiddenCodec;
use split_shared::models::smollm2::{DEFAULT_CHAT_PRIVACY_FLOOR, KvCache, Message as Turn, argmax};
use split_shared::protocol::{LlmFrame, MAX_LLM_FRAME_BYTES, MODEL_SMOLLM2};
use split_studies::llm::{Chat, command_line, write_report};

use crate::loadgen::{Lost, Socket, connect, quantile, send_and_receive};

/// Many split conversations on one server at once.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// WebSocket URL of the server's language-model socket.
    #[arg(long, default_value = "ws://127.0.0.1:8080/llm")]
    url: String,
    /// Conversations at once, one run per number (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,8,32")]
    sessions: Vec<usize>,
    /// Blocks the edge keeps; the server runs the others.
    #[arg(long, default_value_t = DEFAULT_CHAT_PRIVACY_FLOOR)]
    blocks: usize,
    /// Tokens each conversation generates.
    #[arg(long, default_value_t = 64)]
    tokens: usize,
    /// How hidden states cross: f32, f16, bf16, q8 or q8o.
    #[arg(long, default_value = "f16")]
    codec: HiddenCodec,
    /// What the user says.
    #[arg(long, default_value = "Write a short story about a lighthouse keeper.")]
    message: String,
    /// The GGUF file (default: the one `./run.sh setup` fetched).
    #[arg(long)]
    model: Option<PathBuf>,
    /// The server's process id: its resident memory and CPU time are read from `/proc`.
    #[arg(long)]
    server_pid: Option<u32>,
    /// Seconds to wait for one reply.
    #[arg(long, default_value_t = 120)]
    timeout_s: u64,
    /// Write the report here as JSON.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// What every conversation of a run does, and where.
#[derive(Clone, Debug)]
pub struct Setup {
    /// WebSocket URL of the server's `/llm`.
    pub url: String,
    /// Blocks the edge keeps.
    pub blocks: usize,
    /// Tokens each conversation generates.
    pub tokens: usize,
    /// How hidden states cross.
    pub codec: HiddenCodec,
    /// What the user says.
    pub message: String,
    /// The server's process id, for its memory and CPU time.
    pub server_pid: Option<u32>,
    /// Longest wait for one reply.
    pub timeout: Duration,
}

/// One conversation played on this machine: what the edge sends, what the server must answer.
pub struct Recording {
    /// Frames in sending order (request id 0; each send sets its own).
    frames: Vec<Vec<u8>>,
    /// The rows each reply must hold, as decoded.
    replies: Vec<Vec<f32>>,
    /// Tokens of the prompt (the first frame's rows).
    prompt_tokens: usize,
    /// Positions a conversation needs.
    positions: u32,
    /// Bytes of one generated token's frame each way.
    frame_bytes: usize,
    /// The generated text (up to the end of the answer).
    pub answer: String,
    /// Blocks of the model (the server runs `blocks..layers`).
    layers: u16,
}

impl Recording {
    /// Frames each conversation sends after opening (the prompt's, then one a token).
    pub fn frames(&self) -> usize {
        self.frames.len()
    }

    /// Tokens of the prompt (the first frame's rows).
    pub fn prompt_tokens(&self) -> usize {
        self.prompt_tokens
    }
}

/// Play one conversation of `s` on this machine, both sides, and record its frames.
///
/// # Errors
/// A block count outside the model, or a prompt the model cannot take.
pub fn record(chat: &Chat, s: &Setup) -> Result<Recording> {
    chat.check_blocks(&[s.blocks])?;
    let m = &chat.model;
    let c = &m.config;
    let prompt = chat
        .template
        .encode(&chat.tokenizer, &[Turn { role: "user".into(), content: s.message.clone() }])?;
    let positions = prompt.len() + s.tokens;
    let mut edge = KvCache::new(c, 0..s.blocks, positions);
    let mut server = KvCache::new(c, s.blocks..c.layers, positions);
    let (mut frames, mut replies, mut answer) = (Vec::new(), Vec::new(), Vec::new());
    let mut ended = false;
    let mut tokens = prompt.clone();
    for _ in 0..s.tokens {
        let position = edge.len() as u32;
        let mut rows = m.embed(&tokens)?;
        m.forward_layers(0..s.blocks, &mut rows, &mut edge)?;
        let frame = LlmFrame::Hidden {
            id: 0,
            reply: false,
            position,
            width: c.dim as u32,
            codec: s.codec,
            values: rows.clone(),
        };
        frames.push(frame.encode());
        // What the server decodes, runs and sends back, and what the edge then decodes.
        let mut up = s.codec.round_trip(&rows, c.dim);
        m.forward_layers(s.blocks..c.layers, &mut up, &mut server)?;
        let down = s.codec.round_trip(&up[up.len() - c.dim..], c.dim);
        let next = argmax(&m.logits(&down)?);
        replies.push(down);
        ended |= next == chat.tokenizer.eos;
        if !ended {
            answer.push(next);
        }
        tokens = vec![next];
    }
    let frame_bytes = frames.last().map_or(0, Vec::len);
    Ok(Recording {
        frames,
        replies,
        prompt_tokens: prompt.len(),
        positions: positions as u32,
        frame_bytes,
        answer: chat.tokenizer.decode(&answer)?,
        layers: c.layers as u16,
    })
}

/// One run: `sessions` conversations at once.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CrowdRun {
    /// Conversations at once.
    pub sessions: usize,
    /// Conversations that generated every token.
    pub completed: usize,
    /// Conversations ended by an error frame, a timeout or a lost connection.
    pub failed: usize,
    /// The first failure's message.
    pub first_error: Option<String>,
    /// Replies whose rows equal the recording's exactly.
    pub replies_exact: usize,
    /// Replies received.
    pub replies: usize,
    /// The largest difference of any reply's value from the recording's.
    pub max_abs_diff: f32,
    /// The prompt's frame, sent to its reply, ms (the server's part of the time to first
    /// token): median over the conversations.
    pub first_token_p50_ms: f64,
    /// The same, 95th percentile.
    pub first_token_p95_ms: f64,
    /// One generated token's frame, sent to its reply, ms (the server's part of the
    /// inter-token latency): median over every token of every conversation.
    pub inter_token_p50_ms: f64,
    /// The same, 95th percentile.
    pub inter_token_p95_ms: f64,
    /// The same, 99th percentile.
    pub inter_token_p99_ms: f64,
    /// One conversation's tokens over its wall time, median over the conversations.
    pub tokens_per_s_per_session: f64,
    /// Every conversation's tokens over the run's wall time.
    pub tokens_per_s_total: f64,
    /// The run's wall time, s.
    pub wall_s: f64,
    /// The server's resident memory before the run, MiB (with `--server-pid`).
    pub server_rss_before_mib: Option<f64>,
    /// The most seen during the run (sampled every 20 ms), MiB.
    pub server_rss_peak_mib: Option<f64>,
    /// The server's CPU time per generated token, ms (with `--server-pid`).
    pub server_cpu_ms_per_token: Option<f64>,
}

/// The report `--out` writes.
#[derive(Debug, Serialize)]
struct Report {
    command: String,
    file: String,
    blocks_edge: usize,
    blocks_server: usize,
    codec: String,
    tokens: usize,
    prompt_tokens: usize,
    bytes_per_token_each_way: usize,
    answer: String,
    runs: Vec<CrowdRun>,
}

/// What one conversation measured.
#[derive(Default)]
struct Played {
    first_ms: f64,
    token_ms: Vec<f64>,
    wall_s: f64,
    exact: usize,
    replies: usize,
    max_abs_diff: f32,
}

// `connect` takes frames up to the image path's limit: the largest `/llm` frame fits.
const _: () = assert!(MAX_LLM_FRAME_BYTES <= split_shared::protocol::MAX_FRAME_BYTES);

async fn exchange(ws: &mut Socket, frame: Vec<u8>, timeout: Duration) -> Result<LlmFrame> {
    let bytes = send_and_receive(ws, frame, timeout).await.map_err(Lost::into_error)?;
    Ok(LlmFrame::decode(&bytes)?)
}

async fn converse(a: &Setup, rec: &Recording) -> Result<Played> {
    let timeout = a.timeout;
    let mut ws = connect(&a.url).await?;
    let open = LlmFrame::Open {
        id: 1,
        model: MODEL_SMOLLM2,
        first: a.blocks as u16,
        end: rec.layers,
        positions: rec.positions,
        head: None,
    };
    match exchange(&mut ws, open.encode(), timeout).await? {
        LlmFrame::Opened { .. } => {}
        LlmFrame::Error { code, message, .. } => bail!("open refused: {}: {message}", code.name()),
        other => bail!("open answered with {other:?}"),
    }
    let mut played = Played::default();
    let started = Instant::now();
    for (i, (frame, expected)) in rec.frames.iter().zip(&rec.replies).enumerate() {
        let id = i as u64 + 2;
        let mut frame = frame.clone();
        frame[8..16].copy_from_slice(&id.to_le_bytes());
        let sent = Instant::now();
        let reply = exchange(&mut ws, frame, timeout).await?;
        let ms = sent.elapsed().as_secs_f64() * 1e3;
        let values = match reply {
            LlmFrame::Hidden { id: got, reply: true, values, .. } if got == id => values,
            LlmFrame::Error { code, message, .. } => bail!("frame {i}: {}: {message}", code.name()),
            other => bail!("frame {i} answered with {other:?}"),
        };
        if values.len() != expected.len() {
            bail!("frame {i}: {} values back, {} expected", values.len(), expected.len());
        }
        let diff = values.iter().zip(expected).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max);
        played.max_abs_diff = played.max_abs_diff.max(diff);
        played.exact += usize::from(diff == 0.0);
        played.replies += 1;
        if i == 0 {
            played.first_ms = ms;
        } else {
            played.token_ms.push(ms);
        }
    }
    played.wall_s = started.elapsed().as_secs_f64();
    let _ = ws.close().await;
    Ok(played)
}

/// Resident memory of a process, MiB, from `/proc/PID/status` (Linux).
fn rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// `sessions` conversations of `rec` on the server at once, on the current actix runtime.
pub async fn crowd(a: &Setup, rec: &Recording, sessions: usize) -> CrowdRun {
    let mut run = CrowdRun { sessions, ..Default::default() };
    let cpu_before = a.server_pid.and_then(|p| crate::process_cpu_ms(p).ok());
    run.server_rss_before_mib = a.server_pid.and_then(rss_mib);
    // The server's memory sampled every 20 ms while the conversations run.
    let done = Arc::new(AtomicBool::new(false));
    let peak_kib = Arc::new(AtomicU64::new(0));
    let sampler = a.server_pid.map(|pid| {
        let (done, peak_kib) = (done.clone(), peak_kib.clone());
        actix_web::rt::spawn(async move {
            while !done.load(Ordering::Relaxed) {
                if let Some(mib) = rss_mib(pid) {
                    peak_kib.fetch_max((mib * 1024.0) as u64, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    });
    let started = Instant::now();
    let played = futures_util::future::join_all((0..sessions).map(|_| converse(a, rec))).await;
    run.wall_s = started.elapsed().as_secs_f64();
    done.store(true, Ordering::Relaxed);
    if let Some(s) = sampler {
        let _ = s.await;
        run.server_rss_peak_mib = Some(peak_kib.load(Ordering::Relaxed) as f64 / 1024.0);
    }
    let (mut first, mut tokens, mut rates) = (Vec::new(), Vec::new(), Vec::new());
    let mut generated = 0;
    for p in played {
        match p {
            Ok(p) => {
                run.completed += 1;
                run.replies += p.replies;
                run.replies_exact += p.exact;
                run.max_abs_diff = run.max_abs_diff.max(p.max_abs_diff);
                first.push(p.first_ms);
                generated += p.replies;
                rates.push(p.replies as f64 / p.wall_s);
                tokens.extend(p.token_ms);
            }
            Err(e) => {
                run.failed += 1;
                run.first_error.get_or_insert_with(|| format!("{e:#}"));
            }
        }
    }
    for v in [&mut first, &mut tokens, &mut rates] {
        v.sort_by(f64::total_cmp);
    }
    run.first_token_p50_ms = quantile(&first, 0.5);
    run.first_token_p95_ms = quantile(&first, 0.95);
    run.inter_token_p50_ms = quantile(&tokens, 0.5);
    run.inter_token_p95_ms = quantile(&tokens, 0.95);
    run.inter_token_p99_ms = quantile(&tokens, 0.99);
    run.tokens_per_s_per_session = quantile(&rates, 0.5);
    run.tokens_per_s_total = generated as f64 / run.wall_s;
    if let (Some(pid), Some(before)) = (a.server_pid, cpu_before) {
        run.server_cpu_ms_per_token =
            crate::process_cpu_ms(pid).ok().map(|after| (after - before) / generated.max(1) as f64);
    }
    run
}

/// Record one conversation, then run the crowds and print (and write) what they measured.
pub fn run(a: Args) -> Result<()> {
    if a.sessions.is_empty() || a.sessions.contains(&0) {
        bail!("--sessions: one or more numbers of conversations, each at least 1");
    }
    if a.tokens == 0 {
        bail!("--tokens: at least 1");
    }
    let chat = Chat::load(a.model.as_deref())?;
    let layers = chat.model.config.layers;
    let setup = Setup {
        url: a.url.clone(),
        blocks: a.blocks,
        tokens: a.tokens,
        codec: a.codec,
        message: a.message.clone(),
        server_pid: a.server_pid,
        timeout: Duration::from_secs(a.timeout_s),
    };
    let t = Instant::now();
    let rec = record(&chat, &setup)?;
    eprintln!(
        "llm-crowd: one conversation recorded in {:.1} s ({} prompt tokens, {} generated, {} \
         bytes a token each way in {}): {:?}",
        t.elapsed().as_secs_f64(),
        rec.prompt_tokens,
        rec.frames.len(),
        rec.frame_bytes,
        a.codec,
        rec.answer
    );
    let file = chat.file.clone();
    drop(chat);
    let mut runs = Vec::new();
    let system = actix_web::rt::System::new();
    for &sessions in &a.sessions {
        let r = system.block_on(crowd(&setup, &rec, sessions));
        eprintln!(
            "llm-crowd: {sessions} at once: {} completed, {} failed; first token p50 {:.0} ms p95 \
             {:.0}; per token p50 {:.1} ms p95 {:.1} p99 {:.1}; {:.1} tokens/s each, {:.1} in all; \
             replies exact {}/{} (largest difference {}){}",
            r.completed,
            r.failed,
            r.first_token_p50_ms,
            r.first_token_p95_ms,
            r.inter_token_p50_ms,
            r.inter_token_p95_ms,
            r.inter_token_p99_ms,
            r.tokens_per_s_per_session,
            r.tokens_per_s_total,
            r.replies_exact,
            r.replies,
            r.max_abs_diff,
            match (r.server_rss_before_mib, r.server_rss_peak_mib) {
                (Some(b), Some(p)) => format!("; server {b:.0} MiB before, {p:.0} at most"),
                _ => String::new(),
            }
        );
        if let Some(e) = &r.first_error {
            eprintln!("llm-crowd: first failure: {e}");
        }
        runs.push(r);
    }
    if let Some(out) = &a.out {
        let report = Report {
            command: command_line(),
            file,
            blocks_edge: a.blocks,
            blocks_server: layers - a.blocks,
            codec: a.codec.to_string(),
            tokens: a.tokens,
            prompt_tokens: rec.prompt_tokens,
            bytes_per_token_each_way: rec.frame_bytes,
            answer: rec.answer,
            runs,
        };
        write_report(out, &report)?;
    }
    Ok(())
}
