//! `split-lab llm-placements` (`./run.sh llm-placements`): where SmolLM2 runs, timed on each of
//! the lab's links, every placement in the same run — issue 32's comparison of the U-split with
//! edge-only and cloud-only.
//!
//! - **edge-only**: the whole model here, no link;
//! - **U-split**: the edge keeps the embedding, the first `--blocks` blocks, the final norm and the
//!   output projection and chooses the token; the server runs the blocks between, one hidden
//!   state up and one back a token; **pipelined**, the prompt goes up in frames of
//!   `--prefill-chunk` positions, each as soon as the edge has it, so that the edge, the link
//!   and the server work on the prompt at once;
//! - **plain split**: the same blocks at the edge, the server runs the rest with the head and
//!   answers each hidden state with the next token;
//! - **cloud-only**: token ids up, the server runs everything and streams the answer;
//! - with `--member-front K`, **the pipelined U-split through a member**: the edge keeps `K`
//!   blocks, a device agent of a group runs on to `--blocks` over a link of its own
//!   (`--member-link`), the server the rest ([`crate::llm_member`]).
//!
//! The edge is this process, natively, on `--edge-threads` of the kernels' threads: it stands
//! in for the browser's module (the same model code compiled for wasm runs slower, and a phone
//! slower still: the edge's own figures are a lower bound). The link is the lab's userspace
//! emulator (`netem.rs`), one per link profile, on a thread of its own between this process and
//! the server. The socket opens before the clock starts (the page opens it with the chat). The
//! time to first token runs from the user's message to the first token in the client's hand,
//! the edge's own work included; tokens/s counts the tokens after the first over the time from
//! the first to the last. Every placement is greedy and must give edge-only's tokens (the
//! report says whether it did); a conversation stops at the model's end token or `--tokens`.
//!
//! Beside each measured row the report puts the placement planner's prediction for it
//! ([`split_shared::plan::estimate_llm`]) from the costs each side measured of itself: this
//! process's edge ([`measure_costs`], on the same kernel threads) and the server's, which its
//! `/api/info` publishes, and the link's round trip measured with WebSocket pings through the
//! emulator (as a page measures its own). The two disagree by what the planner's model of time
//! leaves out.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::Serialize;
use split_shared::codec::{DEFAULT_HIDDEN_CODEC, HiddenCodec};
use split_shared::models::smollm2::{
    DEFAULT_CHAT_PRIVACY_FLOOR, KvCache, Message as Turn, argmax, edge_share, measure_costs,
    tokenizer_share,
};
use split_shared::plan::{
    LlmLink, LlmPlacement, LlmShape, LlmSideCosts, LlmWorkload, estimate_llm,
};
use split_shared::protocol::{HeadSampling, LlmFrame, MODEL_SMOLLM2};
use split_studies::llm::{Chat, command_line, write_report};
use tokio::sync::oneshot;

use crate::loadgen::{Lost, Socket, connect, quantile, receive};
use crate::netem::{LinkProfile, Proxy, profile};
use actix_web::web::Bytes;
use awc::ws::Message;
use futures_util::SinkExt;

/// The language model's placements timed against each other over the lab's links.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// WebSocket URL of the server's language-model socket (the link emulator goes in front).
    #[arg(long, default_value = "ws://127.0.0.1:8080/llm")]
    url: String,
    /// Link profiles, comma-separated (fast-wifi, 4g, 3g, congested-uplink).
    #[arg(long, value_delimiter = ',', default_value = "fast-wifi,4g,3g")]
    links: Vec<String>,
    /// Blocks the edge keeps in the two splits.
    #[arg(long, default_value_t = DEFAULT_CHAT_PRIVACY_FLOOR)]
    blocks: usize,
    /// Most tokens each answer generates.
    #[arg(long, default_value_t = 32)]
    tokens: usize,
    /// How hidden states cross: f32, f16, bf16, q8 or q8o.
    #[arg(long, default_value_t = DEFAULT_HIDDEN_CODEC)]
    codec: HiddenCodec,
    /// What the user says.
    #[arg(long, default_value = "Write a short story about a lighthouse keeper.")]
    message: String,
    /// Positions a frame of the pipelined U-split's prefill holds.
    #[arg(long, default_value_t = 8)]
    prefill_chunk: usize,
    /// Conversations per placement and link; figures are medians over them.
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Threads the edge's kernels may use (a phone gives a page about one fast core).
    #[arg(long, default_value_t = 1)]
    edge_threads: usize,
    /// The GGUF file (default: the one `./run.sh setup` fetched).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Seconds to wait for one reply.
    #[arg(long, default_value_t = 120)]
    timeout_s: u64,
    /// Also time the pipelined U-split with a device agent between (docs/llm.md, "Through a
    /// device group"): the edge keeps this many blocks, the agent runs on to `--blocks`.
    #[arg(long)]
    member_front: Option<usize>,
    /// The agent's own link to the server (its frames to the relay and to `/llm` cross it).
    #[arg(long, default_value = "fast-wifi")]
    member_link: String,
    /// Write the report here (`data.json`, and `README.md` beside it).
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Where the model runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    /// The whole model at the edge.
    EdgeOnly,
    /// Edge: embedding, first blocks, head; server: the blocks between.
    USplit,
    /// The U-split with the prompt sent in chunks, each as soon as the edge has it.
    USplitPipelined,
    /// Edge: embedding, first blocks; server: the rest and the head.
    PlainSplit,
    /// The whole model on the server.
    CloudOnly,
    /// The pipelined U-split with a device agent between: the edge keeps `--member-front`
    /// blocks, the agent runs on to `--blocks` over a link of its own, the server the rest.
    USplitViaMember,
}

impl Placement {
    /// The report's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Placement::EdgeOnly => "edge-only",
            Placement::USplit => "U-split",
            Placement::USplitPipelined => "U-split, prefill pipelined",
            Placement::PlainSplit => "plain split",
            Placement::CloudOnly => "cloud-only",
            Placement::USplitViaMember => "U-split through a member, prefill pipelined",
        }
    }
}

/// One conversation.
#[derive(Debug, Default)]
pub(crate) struct Played {
    first_token_ms: f64,
    /// From the first token to the last, s.
    decode_s: f64,
    tokens: Vec<u32>,
    bytes_up: usize,
    bytes_down: usize,
}

/// One placement on one link: medians over the repeats.
#[derive(Debug, Serialize)]
pub struct Row {
    /// Where the model runs.
    pub placement: Placement,
    /// Blocks at the edge (all of them for edge-only, none for cloud-only).
    pub edge_blocks: usize,
    /// What the edge downloads before its first answer, bytes (its share of the model file).
    pub edge_download_bytes: usize,
    /// The user's message to the first token in hand, ms (median).
    pub first_token_ms: f64,
    /// Tokens after the first, per second (median).
    pub tokens_per_s: f64,
    /// Tokens generated.
    pub tokens: usize,
    /// Bytes sent up over the conversation (WebSocket payloads, the open frame not counted).
    pub bytes_up: usize,
    /// Bytes received.
    pub bytes_down: usize,
    /// Whether every repeat gave edge-only's tokens.
    pub same_tokens_as_unsplit: bool,
    /// Time to first token over cloud-only's on the same link.
    pub first_token_vs_cloud: f64,
    /// Cloud-only's tokens/s over this one's on the same link.
    pub token_time_vs_cloud: f64,
    /// The planner's prediction of the first token from the sides' measured costs, ms (none
    /// when the server publishes no costs).
    pub predicted_first_token_ms: Option<f64>,
    /// ... and of the tokens a second after it.
    pub predicted_tokens_per_s: Option<f64>,
}

/// Every placement on one link.
#[derive(Debug, Serialize)]
pub struct LinkRun {
    /// The link.
    pub link: LinkProfile,
    /// A WebSocket ping's round trip through it to the server and back, ms (median of
    /// [`PINGS`]): the link's delay and what the emulator, the sockets and the server's
    /// reading add to each exchange, as a page measures its link with a request. The
    /// predictions use it.
    pub measured_rtt_ms: f64,
    /// One row a placement.
    pub rows: Vec<Row>,
}

/// The report `--out` writes.
#[derive(Debug, Serialize)]
pub struct Report {
    /// How it was made.
    pub command: String,
    /// The model file.
    pub file: String,
    /// Its size, bytes.
    pub file_bytes: usize,
    /// Blocks of the model.
    pub layers: usize,
    /// Blocks the edge keeps in the splits.
    pub blocks: usize,
    /// Positions a frame of the pipelined prefill holds.
    pub prefill_chunk: usize,
    /// How hidden states crossed.
    pub codec: String,
    /// Tokens of the prompt.
    pub prompt_tokens: usize,
    /// Threads of the edge's kernels.
    pub edge_threads: usize,
    /// What a block and the head cost this process's edge (measured here).
    pub edge_costs: LlmSideCosts,
    /// What they cost the server (its `/api/info`), when it says.
    pub server_costs: Option<LlmSideCosts>,
    /// Conversations per placement and link.
    pub repeats: usize,
    /// Blocks the edge kept in the row through a member (`--member-front`), when there is one.
    pub member_front: Option<usize>,
    /// The member's own link (`--member-link`), when there is a member.
    pub member_link: Option<LinkProfile>,
    /// The answer, up to `--tokens` tokens.
    pub answer: String,
    /// One entry a link.
    pub links: Vec<LinkRun>,
}

pub(crate) struct Setup<'a> {
    chat: &'a Chat,
    prompt: Vec<u32>,
    /// Blocks the edge keeps (where a member's stage ends).
    pub(crate) blocks: usize,
    tokens: usize,
    codec: HiddenCodec,
    /// Positions a frame of a pipelined prefill holds.
    pub(crate) chunk: usize,
    timeout: Duration,
}

impl Setup<'_> {
    fn positions(&self) -> usize {
        self.prompt.len() + self.tokens
    }
}

/// The whole model here: the reference tokens and edge-only's times.
fn edge_only(s: &Setup) -> Result<Played> {
    let m = &s.chat.model;
    let mut cache = KvCache::new(&m.config, 0..m.config.layers, s.positions());
    let mut played = Played::default();
    let start = Instant::now();
    let mut input = s.prompt.clone();
    let mut first = 0.0;
    while played.tokens.len() < s.tokens {
        let mut rows = m.embed(&input)?;
        m.forward_layers(0..m.config.layers, &mut rows, &mut cache)?;
        let next = argmax(&m.logits(&rows[rows.len() - m.config.dim..])?);
        if played.tokens.is_empty() {
            first = start.elapsed().as_secs_f64();
        }
        played.tokens.push(next);
        if next == s.chat.tokenizer.eos {
            break;
        }
        input = vec![next];
    }
    played.first_token_ms = first * 1e3;
    played.decode_s = start.elapsed().as_secs_f64() - first;
    Ok(played)
}

/// Where a conversation's frames go: the server's socket, or a member of a device group
/// through the server's relay ([`crate::llm_member::Member`]).
pub(crate) trait Wire {
    /// Send a frame.
    async fn post_frame(&mut self, frame: Vec<u8>) -> Result<()>;
    /// The next frame back, within `timeout`.
    async fn next_frame(&mut self, timeout: Duration) -> Result<Bytes>;
}

impl Wire for Socket {
    async fn post_frame(&mut self, frame: Vec<u8>) -> Result<()> {
        self.send(Message::Binary(frame.into())).await.context("sending a frame")
    }

    async fn next_frame(&mut self, timeout: Duration) -> Result<Bytes> {
        receive(self, timeout).await.map_err(Lost::into_error)
    }
}

async fn call(
    ws: &mut impl Wire,
    frame: &LlmFrame,
    t: Duration,
    p: &mut Played,
) -> Result<LlmFrame> {
    let bytes = frame.encode();
    p.bytes_up += bytes.len();
    ws.post_frame(bytes).await?;
    let reply = ws.next_frame(t).await?;
    p.bytes_down += reply.len();
    Ok(LlmFrame::decode(&reply)?)
}

async fn open(ws: &mut impl Wire, s: &Setup<'_>, first: usize, head: bool) -> Result<()> {
    let open = LlmFrame::Open {
        id: 1,
        model: MODEL_SMOLLM2,
        first: first as u16,
        end: s.chat.model.config.layers as u16,
        positions: s.positions() as u32,
        head: head.then_some(HeadSampling::GREEDY),
    };
    // The open frame is not the answer's: its bytes are not counted.
    match call(ws, &open, s.timeout, &mut Played::default()).await? {
        LlmFrame::Opened { .. } => Ok(()),
        LlmFrame::Error { code, message, .. } => bail!("open refused: {}: {message}", code.name()),
        other => bail!("open answered with {other:?}"),
    }
}

/// A split: the edge's blocks here, one hidden state a token up; the U-split's reply is the
/// server's hidden state (the head runs here), the plain split's the next token.
///
/// The prompt goes up in frames of `chunk` positions (0: one frame), each sent as soon as the
/// edge's blocks have run on it, without waiting for the reply to the one before: the server
/// computes a chunk while the link carries the next and the edge computes the one after (the
/// server takes a conversation's frames in order). Only the last chunk's reply is used.
pub(crate) async fn split(
    ws: &mut impl Wire,
    s: &Setup<'_>,
    u_shaped: bool,
    chunk: usize,
    front: usize,
) -> Result<Played> {
    let m = &s.chat.model;
    open(ws, s, front, !u_shaped).await?;
    let mut edge = KvCache::new(&m.config, 0..front, s.positions());
    let mut played = Played::default();
    let start = Instant::now();
    let chunk = if chunk == 0 { s.prompt.len() } else { chunk };
    let mut id = 1;
    for part in s.prompt.chunks(chunk) {
        id += 1;
        send_rows(ws, s, &mut edge, part, id, &mut played).await?;
    }
    // The replies to every chunk but the last: read, checked, not used.
    for earlier in 2..id {
        next_token(ws, s, earlier, u_shaped, false, &mut played).await?;
    }
    let mut next = next_token(ws, s, id, u_shaped, true, &mut played).await?;
    let first = start.elapsed().as_secs_f64();
    loop {
        played.tokens.push(next);
        if next == s.chat.tokenizer.eos || played.tokens.len() == s.tokens {
            break;
        }
        id += 1;
        send_rows(ws, s, &mut edge, &[next], id, &mut played).await?;
        next = next_token(ws, s, id, u_shaped, true, &mut played).await?;
    }
    played.first_token_ms = first * 1e3;
    played.decode_s = start.elapsed().as_secs_f64() - first;
    Ok(played)
}

/// The edge's blocks on `tokens`, their hidden states sent (no reply awaited).
async fn send_rows(
    ws: &mut impl Wire,
    s: &Setup<'_>,
    edge: &mut KvCache,
    tokens: &[u32],
    id: u64,
    played: &mut Played,
) -> Result<()> {
    let m = &s.chat.model;
    let position = edge.len() as u32;
    let mut rows = m.embed(tokens)?;
    m.forward_layers(0..edge_blocks(edge), &mut rows, edge)?;
    let frame = LlmFrame::Hidden {
        id,
        reply: false,
        position,
        width: m.config.dim as u32,
        codec: s.codec,
        values: rows,
    }
    .encode();
    played.bytes_up += frame.len();
    ws.post_frame(frame).await
}

/// The blocks an edge cache was made for (0..n).
fn edge_blocks(edge: &KvCache) -> usize {
    edge.blocks().end
}

/// The reply to frame `id`: the next token (the U-split's chosen here with the head, when
/// `head`; 0 without it).
async fn next_token(
    ws: &mut impl Wire,
    s: &Setup<'_>,
    id: u64,
    u_shaped: bool,
    head: bool,
    played: &mut Played,
) -> Result<u32> {
    let m = &s.chat.model;
    let bytes = ws.next_frame(s.timeout).await?;
    played.bytes_down += bytes.len();
    match LlmFrame::decode(&bytes)? {
        LlmFrame::Hidden { id: got, reply: true, values, .. } if u_shaped && got == id => {
            if values.len() != m.config.dim {
                bail!(
                    "frame {id}: {} values back, one row of {} expected",
                    values.len(),
                    m.config.dim
                );
            }
            Ok(if head { argmax(&m.logits(&values)?) } else { 0 })
        }
        LlmFrame::Token { id: got, token, .. } if !u_shaped && got == id => Ok(token),
        LlmFrame::Error { code, message, .. } => bail!("frame {id}: {}: {message}", code.name()),
        other => bail!("frame {id} answered with {other:?}"),
    }
}

/// Cloud-only: the prompt's token ids up, the answer streamed back a token a frame.
async fn cloud_only(ws: &mut Socket, s: &Setup<'_>) -> Result<Played> {
    open(ws, s, 0, true).await?;
    let mut played = Played::default();
    let ask = LlmFrame::Tokens {
        id: 2,
        position: 0,
        generate: s.tokens as u32,
        tokens: s.prompt.clone(),
    };
    let start = Instant::now();
    let mut first = 0.0;
    let mut reply = call(ws, &ask, s.timeout, &mut played).await?;
    loop {
        match reply {
            LlmFrame::Token { id: 2, token, .. } => {
                if played.tokens.is_empty() {
                    first = start.elapsed().as_secs_f64();
                }
                played.tokens.push(token);
            }
            LlmFrame::Done { id: 2, .. } => break,
            LlmFrame::Error { code, message, .. } => bail!("{}: {message}", code.name()),
            other => bail!("the answer held {other:?}"),
        }
        let bytes = receive(ws, s.timeout).await.map_err(Lost::into_error)?;
        played.bytes_down += bytes.len();
        reply = LlmFrame::decode(&bytes)?;
    }
    if played.tokens.is_empty() {
        bail!("the answer ended without a token");
    }
    played.first_token_ms = first * 1e3;
    // The last token's time is the last `token` frame's, not the `done` after it: close
    // enough (they leave together), and what a reader of the stream sees.
    played.decode_s = start.elapsed().as_secs_f64() - first;
    Ok(played)
}

async fn over_link(url: &str, s: &Setup<'_>, placement: Placement) -> Result<Played> {
    let mut ws = connect(url).await?;
    let played = match placement {
        Placement::USplit => split(&mut ws, s, true, 0, s.blocks).await,
        Placement::USplitPipelined => split(&mut ws, s, true, s.chunk, s.blocks).await,
        Placement::PlainSplit => split(&mut ws, s, false, 0, s.blocks).await,
        Placement::CloudOnly => cloud_only(&mut ws, s).await,
        Placement::EdgeOnly | Placement::USplitViaMember => {
            unreachable!("edge-only uses no link, a member its own")
        }
    };
    let _ = ws.close().await;
    played
}

/// Pings timed for a link's round trip.
const PINGS: usize = 7;

/// The median round trip of [`PINGS`] WebSocket pings to `url`'s server, ms, one at a time on
/// one socket.
async fn round_trip_ms(url: &str) -> Result<f64> {
    use awc::ws::Frame;
    use futures_util::StreamExt;
    let mut ws = connect(url).await?;
    let mut times = Vec::with_capacity(PINGS);
    for i in 0..PINGS {
        let sent = Instant::now();
        ws.send(Message::Ping(Bytes::from(vec![i as u8]))).await.context("sending a ping")?;
        loop {
            match tokio::time::timeout(Duration::from_secs(10), ws.next()).await {
                Ok(Some(Ok(Frame::Pong(_)))) => break,
                Ok(Some(Ok(_))) => continue,
                Ok(Some(Err(e))) => bail!("waiting for a pong: {e}"),
                Ok(None) => bail!("the server closed the socket before a pong"),
                Err(_) => bail!("no pong within 10 s"),
            }
        }
        times.push(sent.elapsed().as_secs_f64() * 1e3);
    }
    let _ = ws.close().await;
    Ok(median(times))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    quantile(&v, 0.5)
}

fn row(
    placement: Placement,
    edge_blocks: usize,
    download: usize,
    runs: &[Played],
    reference: &[u32],
) -> Row {
    let rate = |p: &Played| {
        if p.tokens.len() > 1 { (p.tokens.len() - 1) as f64 / p.decode_s } else { 0.0 }
    };
    Row {
        placement,
        edge_blocks,
        edge_download_bytes: download,
        first_token_ms: median(runs.iter().map(|p| p.first_token_ms).collect()),
        tokens_per_s: median(runs.iter().map(rate).collect()),
        tokens: runs[0].tokens.len(),
        bytes_up: runs[0].bytes_up,
        bytes_down: runs[0].bytes_down,
        same_tokens_as_unsplit: runs.iter().all(|p| p.tokens == reference),
        first_token_vs_cloud: 0.0,
        token_time_vs_cloud: 0.0,
        predicted_first_token_ms: None,
        predicted_tokens_per_s: None,
    }
}

/// The server's measured costs from its `/api/info` (`llm.costs`); `None` from a server that
/// does not publish them.
async fn server_costs(url: &str) -> Result<Option<LlmSideCosts>> {
    let (host, _) = host_and_path(url)?;
    let info: serde_json::Value = awc::Client::new()
        .get(format!("http://{host}/api/info"))
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("GET /api/info: {e}"))?
        .json()
        .limit(1 << 20)
        .await
        .map_err(|e| anyhow::anyhow!("/api/info: {e}"))?;
    match info.pointer("/llm/costs") {
        Some(costs) => Ok(Some(serde_json::from_value(costs.clone()).context("llm.costs")?)),
        None => Ok(None),
    }
}

/// The planner's prediction for each row measured on `link`, whose round trip measured
/// `rtt_ms` (as the page predicts from the round trip it measured).
fn predict(
    rows: &mut [Row],
    s: &Setup,
    edge: &LlmSideCosts,
    server: &LlmSideCosts,
    link: &LinkProfile,
    rtt_ms: f64,
) {
    let layers = s.chat.model.config.layers;
    let mut share_bytes = vec![f64::NAN; layers + 1];
    let mut tokenizer_bytes = f64::NAN;
    for r in rows.iter() {
        match r.placement {
            Placement::CloudOnly => tokenizer_bytes = r.edge_download_bytes as f64,
            _ => share_bytes[r.edge_blocks.min(layers)] = r.edge_download_bytes as f64,
        }
    }
    let shape = LlmShape {
        layers,
        row_bytes: s.codec.row_bytes(s.chat.model.config.dim) as f64,
        share_bytes,
        tokenizer_bytes,
    };
    let link = LlmLink { rtt_ms, up_kbps: link.up_kbps, down_kbps: link.down_kbps };
    for r in rows {
        let (placement, chunk) = match r.placement {
            Placement::EdgeOnly => (LlmPlacement::Edge, 0),
            Placement::USplit => (LlmPlacement::Split { blocks: r.edge_blocks }, 0),
            Placement::USplitPipelined => (LlmPlacement::Split { blocks: r.edge_blocks }, s.chunk),
            Placement::PlainSplit => (LlmPlacement::Plain { blocks: r.edge_blocks }, 0),
            Placement::CloudOnly => (LlmPlacement::Cloud, 0),
            // The planner has no model of a member yet.
            Placement::USplitViaMember => continue,
        };
        let work = LlmWorkload {
            prompt_tokens: s.prompt.len(),
            answer_tokens: r.tokens,
            prefill_chunk: chunk,
            count_download: false,
            cached_shares: Vec::new(),
            cached_tokenizer: false,
        };
        let e = estimate_llm(&shape, edge, server, &link, &work, placement);
        r.predicted_first_token_ms = Some(e.first_token_ms);
        r.predicted_tokens_per_s = Some(1e3 / e.token_ms);
    }
}

/// A `ws://host:port/path` URL's host and path (`/llm` when it has none).
fn host_and_path(url: &str) -> Result<(&str, &str)> {
    let rest = url.strip_prefix("ws://").context("--url: a ws:// URL (the emulator speaks TCP)")?;
    Ok(rest.find('/').map_or((rest, "/llm"), |i| rest.split_at(i)))
}

/// `url` with its path replaced by `path` (the server's `/group` beside its `/llm`).
fn with_path(url: &str, path: &str) -> Result<String> {
    let (host, _) = host_and_path(url)?;
    Ok(format!("ws://{host}{path}"))
}

/// The URL through `proxy` instead of the server.
fn through(url: &str, proxy: SocketAddr) -> Result<String> {
    let (_, path) = host_and_path(url)?;
    Ok(format!("ws://{proxy}{path}"))
}

/// The server's address.
fn upstream(url: &str) -> Result<SocketAddr> {
    use std::net::ToSocketAddrs;
    let (host, _) = host_and_path(url)?;
    host.to_socket_addrs()
        .with_context(|| format!("--url: resolving {host}"))?
        .next()
        .with_context(|| format!("--url: {host} resolves to no address"))
}

/// The link emulator in front of `upstream`, on a thread and runtime of its own, so that the
/// edge's compute in this thread never holds up the bytes in flight. Returns where clients
/// connect, and the sender whose drop stops it.
fn emulate(upstream: SocketAddr, link: LinkProfile) -> Result<(SocketAddr, oneshot::Sender<()>)> {
    let (started, address) = std::sync::mpsc::channel();
    let (stop, stopped) = oneshot::channel::<()>();
    std::thread::spawn(move || {
        let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(r) => r,
            Err(e) => return drop(started.send(Err(anyhow::Error::from(e)))),
        };
        runtime.block_on(async move {
            match Proxy::start(upstream, link).await {
                Ok(proxy) => {
                    let _ = started.send(Ok(proxy.addr));
                    let _ = stopped.await;
                }
                Err(e) => drop(started.send(Err(e))),
            }
        });
    });
    let addr = address.recv().context("the link emulator's thread ended")??;
    Ok((addr, stop))
}

/// Run every placement on every link, print the rows and write the report.
pub fn run(a: Args) -> Result<()> {
    if a.repeats == 0 || a.tokens < 2 {
        bail!("--repeats at least 1 and --tokens at least 2 (tokens/s needs two)");
    }
    if a.prefill_chunk == 0 {
        bail!("--prefill-chunk: at least 1 position a frame");
    }
    let links = a.links.iter().map(|n| profile(n)).collect::<Result<Vec<_>>>()?;
    let member_link = profile(&a.member_link)?;
    if let Some(front) = a.member_front
        && front >= a.blocks
    {
        bail!(
            "--member-front {front} must be fewer than --blocks ({}): the member runs the blocks between",
            a.blocks
        );
    }
    let upstream = upstream(&a.url)?;
    // Through the emulator an absent server is only a reset connection: ask it directly first.
    std::net::TcpStream::connect_timeout(&upstream, Duration::from_secs(5))
        .with_context(|| format!("no server at {} (start one: ./run.sh demo)", a.url))?;
    let chat = Chat::load(a.model.as_deref())?;
    chat.check_blocks(&[a.blocks])?;
    let path = a.model.clone().unwrap_or_else(split_paths::llm_file);
    let file = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    let layers = chat.model.config.layers;
    let downloads = [file.len(), edge_share(&file, a.blocks)?.len(), tokenizer_share(&file)?.len()];
    let member_download =
        a.member_front.map(|k| edge_share(&file, k).map(|s| s.len())).transpose()?;
    drop(file);
    split_kernels::set_max_threads(a.edge_threads);
    let start = Instant::now();
    let edge_costs = measure_costs(&chat.model, &|| start.elapsed().as_secs_f64() * 1e3)?;
    let prompt = chat
        .template
        .encode(&chat.tokenizer, &[Turn { role: "user".into(), content: a.message.clone() }])?;
    let s = Setup {
        chat: &chat,
        prompt,
        blocks: a.blocks,
        tokens: a.tokens,
        codec: a.codec,
        chunk: a.prefill_chunk,
        timeout: Duration::from_secs(a.timeout_s),
    };

    // Edge-only, the reference: no link, so measured once for every link's table.
    let local = (0..a.repeats).map(|_| edge_only(&s)).collect::<Result<Vec<_>>>()?;
    let reference = local[0].tokens.clone();
    let answer = chat.tokenizer.decode(&reference)?;
    eprintln!("llm-placements: {} prompt tokens; the answer: {answer:?}", s.prompt.len());

    let client = actix_web::rt::System::new();
    let server = client.block_on(server_costs(&a.url))?;
    eprintln!("llm-placements: costs measured here {edge_costs:?}, by the server {server:?}");
    let mut runs = Vec::new();
    for link in links {
        let (addr, emulator) = emulate(upstream, link)?;
        let url = through(&a.url, addr)?;
        let measured_rtt_ms = client.block_on(round_trip_ms(&url))?;
        let mut rows = vec![row(Placement::EdgeOnly, layers, downloads[0], &local, &reference)];
        for (placement, blocks, download) in [
            (Placement::USplit, a.blocks, downloads[1]),
            (Placement::USplitPipelined, a.blocks, downloads[1]),
            (Placement::PlainSplit, a.blocks, downloads[1]),
            (Placement::CloudOnly, 0, downloads[2]),
        ] {
            let mut played = Vec::new();
            for _ in 0..a.repeats {
                let p = client
                    .block_on(over_link(&url, &s, placement))
                    .with_context(|| format!("{} on {}", placement.name(), link.name))?;
                played.push(p);
            }
            rows.push(row(placement, blocks, download, &played, &reference));
        }
        if let (Some(front), Some(download)) = (a.member_front, member_download) {
            // The member's own link to the server, for its group socket and its `/llm`.
            let (member_addr, member_emulator) = emulate(upstream, member_link)?;
            let asker_group = through(&with_path(&a.url, "/group")?, addr)?;
            let member_group = through(&with_path(&a.url, "/group")?, member_addr)?;
            let played = client
                .block_on(async {
                    let mut m = crate::llm_member::Member::start(
                        &asker_group,
                        member_group,
                        path.clone(),
                        s.timeout,
                    )
                    .await?;
                    let mut played = Vec::new();
                    for _ in 0..a.repeats {
                        played.push(crate::llm_member::split_via(&mut m, &s, front).await?);
                    }
                    anyhow::Ok(played)
                })
                .with_context(|| format!("through a member on {}", link.name))?;
            rows.push(row(Placement::USplitViaMember, front, download, &played, &reference));
            drop(member_emulator);
        }
        let cloud = rows
            .iter()
            .find(|r| r.placement == Placement::CloudOnly)
            .map(|r| (r.first_token_ms, r.tokens_per_s));
        if let Some((first, rate)) = cloud {
            for r in &mut rows {
                r.first_token_vs_cloud = r.first_token_ms / first;
                r.token_time_vs_cloud = rate / r.tokens_per_s;
            }
        }
        if let Some(server) = &server {
            predict(&mut rows, &s, &edge_costs, server, &link, measured_rtt_ms);
        }
        for r in &rows {
            eprintln!(
                "llm-placements: {} {}: first token {:.0} ms ({:.2}x cloud-only), {:.1} tokens/s \
                 ({:.2}x cloud-only's time a token), {} up / {} down, same tokens: {}",
                link.name,
                r.placement.name(),
                r.first_token_ms,
                r.first_token_vs_cloud,
                r.tokens_per_s,
                r.token_time_vs_cloud,
                r.bytes_up,
                r.bytes_down,
                r.same_tokens_as_unsplit
            );
        }
        drop(emulator);
        runs.push(LinkRun { link, measured_rtt_ms, rows });
    }
    let report = Report {
        command: command_line(),
        file: chat.file.clone(),
        file_bytes: downloads[0],
        layers,
        blocks: a.blocks,
        prefill_chunk: a.prefill_chunk,
        codec: a.codec.to_string(),
        prompt_tokens: s.prompt.len(),
        edge_threads: a.edge_threads,
        edge_costs,
        server_costs: server,
        repeats: a.repeats,
        member_front: a.member_front,
        member_link: a.member_front.map(|_| member_link),
        answer,
        links: runs,
    };
    if let Some(out) = &a.out {
        write_report(&out.join("data.json"), &report)?;
        std::fs::write(out.join("README.md"), markdown(&report))
            .with_context(|| format!("writing {}", out.join("README.md").display()))?;
    }
    Ok(())
}

/// The report as the tables `README.md` holds.
pub fn markdown(r: &Report) -> String {
    let mut s = format!(
        "# SmolLM2's placements on the lab's links\n\n\
         Made by `{}` (`data.json` holds every figure). {} ({:.1} MB), {} prompt tokens, greedy, \
         at most {} tokens an answer; the splits keep {} of {} blocks at the edge, hidden states \
         in `{}`; the pipelined U-split sends the prompt in frames of {} positions. The edge \
         is the lab's process on {} kernel thread(s), natively: the browser's module is \
         slower, so the edge's part is a lower bound. Medians of {} conversations; \
         the time to first token runs from the user's message, the edge's work included; \
         tokens/s counts those after the first.\n\n\
         The answer: {:?}\n",
        r.command,
        r.file,
        r.file_bytes as f64 / 1e6,
        r.prompt_tokens,
        r.links.first().and_then(|l| l.rows.first()).map_or(0, |row| row.tokens),
        r.blocks,
        r.layers,
        r.codec,
        r.prefill_chunk,
        r.edge_threads,
        r.repeats,
        r.answer,
    );
    if let (Some(front), Some(link)) = (r.member_front, &r.member_link) {
        s += &format!(
            "\nThrough a member: the edge keeps {front} blocks, a device agent runs blocks \
             {front}..{} (natively, in a thread of the tool's own with the same kernel threads) \
             over a link of its own to the server ({}: {} kbit/s up, {} down, {} ms round trip) \
             and the server the rest; the edge's frames go through the server's relay (12 \
             bytes of envelope a frame, not counted below), the agent's on to `/llm`.\n",
            r.blocks, link.name, link.up_kbps, link.down_kbps, link.rtt_ms
        );
    }
    for l in &r.links {
        s += &format!(
            "\n## {}: {} kbit/s up, {} down, {} ms round trip ({:.1} measured)\n\n\
             | placement | edge downloads | first token | × cloud-only | tokens/s | time a token × cloud-only | predicted first token, tokens/s | bytes up | bytes down | edge-only's tokens |\n\
             | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
            l.link.name, l.link.up_kbps, l.link.down_kbps, l.link.rtt_ms, l.measured_rtt_ms
        );
        for row in &l.rows {
            s += &format!(
                "| {} | {:.1} MB ({:.0}%) | {:.0} ms | {:.2} | {:.1} | {:.2} | {} | {} | {} | {} |\n",
                row.placement.name(),
                row.edge_download_bytes as f64 / 1e6,
                100.0 * row.edge_download_bytes as f64 / r.file_bytes as f64,
                row.first_token_ms,
                row.first_token_vs_cloud,
                row.tokens_per_s,
                row.token_time_vs_cloud,
                match (row.predicted_first_token_ms, row.predicted_tokens_per_s) {
                    (Some(f), Some(t)) => format!("{f:.0} ms, {t:.1}"),
                    _ => "–".into(),
                },
                row.bytes_up,
                row.bytes_down,
                if row.same_tokens_as_unsplit { "yes" } else { "no" },
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_goes_through_the_proxy() {
        let proxy: SocketAddr = "127.0.0.1:4000".parse().unwrap();
        assert_eq!(through("ws://127.0.0.1:8080/llm", proxy).unwrap(), "ws://127.0.0.1:4000/llm");
        assert_eq!(through("ws://localhost:8080", proxy).unwrap(), "ws://127.0.0.1:4000/llm");
        assert!(through("wss://example.org/llm", proxy).is_err());
        assert_eq!(upstream("ws://127.0.0.1:8080/llm").unwrap(), "127.0.0.1:8080".parse().unwrap());
    }

    #[test]
    fn ratios_are_against_cloud_only() {
        let p = |ms: f64, s: f64| Played {
            first_token_ms: ms,
            decode_s: s,
            tokens: vec![1, 2, 3],
            ..Played::default()
        };
        let r = row(
            Placement::USplit,
            12,
            10,
            &[p(300.0, 1.0), p(100.0, 0.5), p(200.0, 2.0)],
            &[1, 2, 3],
        );
        assert_eq!(r.first_token_ms, 200.0);
        assert_eq!(r.tokens_per_s, 2.0);
        assert!(r.same_tokens_as_unsplit);
        let other = row(Placement::USplit, 12, 10, &[p(1.0, 1.0)], &[1, 2]);
        assert!(!other.same_tokens_as_unsplit);
    }
}
