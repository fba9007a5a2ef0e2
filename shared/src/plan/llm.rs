//! Where the language model runs for a conversation: the U-shaped split, the plain split,
//! cloud-only or the whole model in the browser, and how many blocks the browser keeps.
//!
//! The image planner's counterpart ([`super::plan`]) for a model that answers token by token:
//! what a user waits for is the first token and then the time between tokens, and a split pays
//! a round trip per token where cloud-only streams. Each placement is predicted from what each
//! side's compute costs per block ([`LlmSideCosts`], measured on that side), the link
//! ([`LlmLink`]) and the frames the `/llm` protocol sends (`crate::protocol::llm`: a 16-byte
//! header, 12 more for hidden rows or token ids), then the privacy floor and the memory budget
//! ([`LlmLimits`]) say which placements may run and the fastest answer among them wins.
//!
//! The model of time (every term in milliseconds):
//!
//! - a prefill sent in parts of `chunk` positions is a three-stage pipeline (the edge's blocks,
//!   the uplink, the server's blocks): the first part through all three, then the slowest stage
//!   once per further part, then a round trip and the reply;
//! - a U-split token: the edge's blocks, a hidden row up, a round trip, the server's blocks, a
//!   row down, the head at the edge; a plain split's: the same with the head at the server and
//!   a token frame down;
//! - cloud-only: the prompt's ids up, the server's prefill and head, then tokens streamed at
//!   the server's pace (no round trip between them);
//! - edge-only: every block and the head here, nothing on the link.
//!
//! The byte counts are exact (they are what the protocol frames); the times are as good as the
//! costs given, which is why both sides measure their own
//! ([`crate::models::smollm2::measure_costs`]; the server publishes its in `/api/info`).
//!
//! The inputs are snake_case in JSON, as `/api/info` and the lab's data files write them; the
//! estimates, which go to the page, camelCase.

use serde::{Deserialize, Serialize};

/// Bytes of every `/llm` frame's header.
const HEADER_BYTES: f64 = 16.0;
/// A hidden frame's header after the common one: position, rows, width.
const HIDDEN_HEADER_BYTES: f64 = 12.0;
/// A tokens frame's header after the common one: position, generate, count.
const TOKENS_HEADER_BYTES: f64 = 12.0;
/// A token frame: the header, position u32 and token id u32.
const TOKEN_FRAME_BYTES: f64 = HEADER_BYTES + 8.0;
/// A done frame: the header, tokens u32 and why u8.
const DONE_FRAME_BYTES: f64 = HEADER_BYTES + 5.0;
/// Bytes of a token id in a tokens frame.
const TOKEN_ID_BYTES: f64 = 4.0;

/// What one side's compute costs, measured there, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LlmSideCosts {
    /// One decode step (one new position) through one block.
    pub block_token_ms: f64,
    /// One position of a prefill through one block (a prompt's positions go through a block
    /// together, so each costs less than a decode step).
    pub block_prefill_ms: f64,
    /// The final norm, the output projection and the sampler, once a token.
    pub head_ms: f64,
}

/// The model's sizes as the placements need them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LlmShape {
    /// Blocks of the model (SmolLM2-135M: 30).
    pub layers: usize,
    /// Bytes of one hidden row in the conversation's codec (SmolLM2 in `f16`: 1,152).
    pub row_bytes: f64,
    /// What the browser downloads to run `k` blocks (`k` = 0 ..= `layers`): the tokenizer, the
    /// embedding, the final norm and blocks `0..k`; at `layers` the whole model.
    pub share_bytes: Vec<f64>,
    /// What a cloud-only client downloads: the tokenizer alone.
    pub tokenizer_bytes: f64,
}

impl LlmShape {
    fn share(&self, placement: LlmPlacement) -> f64 {
        match placement {
            LlmPlacement::Cloud => self.tokenizer_bytes,
            LlmPlacement::Edge => self.share_bytes.get(self.layers).copied().unwrap_or(f64::NAN),
            LlmPlacement::Split { blocks } | LlmPlacement::Plain { blocks } => {
                self.share_bytes.get(blocks).copied().unwrap_or(f64::NAN)
            }
        }
    }
}

/// The link between the browser and the server.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LlmLink {
    /// Round trip, ms.
    pub rtt_ms: f64,
    /// Uplink, kbit/s.
    pub up_kbps: f64,
    /// Downlink, kbit/s.
    pub down_kbps: f64,
}

impl LlmLink {
    fn up_ms(&self, bytes: f64) -> f64 {
        bytes * 8.0 / self.up_kbps
    }

    fn down_ms(&self, bytes: f64) -> f64 {
        bytes * 8.0 / self.down_kbps
    }
}

/// Where the model runs. The JSON form is the one `SplitChat.create({ placement, blocks })`
/// takes: `{"placement": "split", "blocks": 12}`, `{"placement": "cloud"}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "placement", rename_all = "lowercase")]
pub enum LlmPlacement {
    /// The U-shaped split: the browser keeps the embedding, blocks `0..blocks` and the head.
    Split {
        /// Blocks the browser runs.
        blocks: usize,
    },
    /// The browser runs the embedding and blocks `0..blocks`; the server the rest and the head.
    Plain {
        /// Blocks the browser runs.
        blocks: usize,
    },
    /// The server runs everything; the browser only tokenizes.
    Cloud,
    /// The browser runs everything.
    Edge,
}

impl LlmPlacement {
    /// Blocks the browser runs (`layers` for edge-only).
    pub fn edge_blocks(self, layers: usize) -> usize {
        match self {
            Self::Split { blocks } | Self::Plain { blocks } => blocks,
            Self::Cloud => 0,
            Self::Edge => layers,
        }
    }
}

/// What the conversation's next answer asks of the placement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LlmWorkload {
    /// Positions to prefill (the chat-formatted history).
    pub prompt_tokens: usize,
    /// Tokens the answer is expected to have.
    pub answer_tokens: usize,
    /// A split's prompt goes in parts of this many positions, each sent as soon as the edge has
    /// run it (0: in one frame).
    pub prefill_chunk: usize,
    /// Count each placement's download in its answer's time, except what the browser holds
    /// already (`cached_shares`, `cached_tokenizer`).
    pub count_download: bool,
    /// The shares the browser holds already, by their blocks (the model's block count: the
    /// whole model).
    #[serde(default)]
    pub cached_shares: Vec<usize>,
    /// Whether it holds cloud-only's tokenizer.
    #[serde(default)]
    pub cached_tokenizer: bool,
}

impl LlmWorkload {
    fn downloads(&self, placement: LlmPlacement, layers: usize) -> bool {
        self.count_download
            && match placement {
                LlmPlacement::Cloud => !self.cached_tokenizer,
                p => !self.cached_shares.contains(&p.edge_blocks(layers)),
            }
    }
}

/// One placement's prediction.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LlmEstimate {
    /// The placement predicted.
    #[serde(flatten)]
    pub placement: LlmPlacement,
    /// From the user's message to the first token in the browser's hand, ms.
    pub first_token_ms: f64,
    /// Between two tokens after that, ms.
    pub token_ms: f64,
    /// The download before the first answer (0 when it is not counted), ms.
    pub download_ms: f64,
    /// The whole answer: the download if counted, the first token, then the rest, ms.
    pub answer_ms: f64,
    /// What the browser downloads for this placement.
    pub download_bytes: f64,
    /// Bytes the answer sends up and receives.
    pub bytes_up: f64,
    /// Bytes received.
    pub bytes_down: f64,
}

/// Predict one placement's answer.
pub fn estimate_llm(
    shape: &LlmShape,
    edge: &LlmSideCosts,
    server: &LlmSideCosts,
    link: &LlmLink,
    work: &LlmWorkload,
    placement: LlmPlacement,
) -> LlmEstimate {
    let layers = shape.layers;
    let p = work.prompt_tokens.max(1) as f64;
    let later = work.answer_tokens.max(1) as f64 - 1.0;
    let row = HEADER_BYTES + HIDDEN_HEADER_BYTES + shape.row_bytes;
    let (first, token, up, down) = match placement {
        LlmPlacement::Edge => {
            let first = layers as f64 * edge.block_prefill_ms * p + edge.head_ms;
            (first, layers as f64 * edge.block_token_ms + edge.head_ms, 0.0, 0.0)
        }
        LlmPlacement::Cloud => {
            let prompt = HEADER_BYTES + TOKENS_HEADER_BYTES + TOKEN_ID_BYTES * p;
            let compute = layers as f64 * server.block_prefill_ms * p + server.head_ms;
            let first =
                link.up_ms(prompt) + link.rtt_ms + compute + link.down_ms(TOKEN_FRAME_BYTES);
            let streamed = (layers as f64 * server.block_token_ms + server.head_ms)
                .max(link.down_ms(TOKEN_FRAME_BYTES));
            let down = TOKEN_FRAME_BYTES * (later + 1.0) + DONE_FRAME_BYTES;
            (first, streamed, prompt, down)
        }
        LlmPlacement::Split { blocks } | LlmPlacement::Plain { blocks } => {
            let k = blocks.min(layers) as f64;
            let rest = layers as f64 - k;
            let head_here = matches!(placement, LlmPlacement::Split { .. });
            let parts = match work.prefill_chunk {
                0 => 1.0,
                c => (p / c as f64).ceil(),
            };
            let per_part = p / parts;
            // The prompt's pipeline: edge blocks, uplink, server blocks per part.
            let stages = [
                k * edge.block_prefill_ms * per_part,
                link.up_ms(HEADER_BYTES + HIDDEN_HEADER_BYTES + per_part * shape.row_bytes),
                rest * server.block_prefill_ms * per_part,
            ];
            let pipeline = stages.iter().sum::<f64>()
                + (parts - 1.0) * stages.iter().copied().fold(0.0, f64::max);
            let (reply, head) = if head_here {
                (link.down_ms(row), edge.head_ms)
            } else {
                (link.down_ms(TOKEN_FRAME_BYTES), server.head_ms)
            };
            let first = pipeline + link.rtt_ms + reply + head;
            let token = k * edge.block_token_ms
                + link.up_ms(row)
                + link.rtt_ms
                + rest * server.block_token_ms
                + reply
                + head;
            let up =
                parts * (HEADER_BYTES + HIDDEN_HEADER_BYTES) + p * shape.row_bytes + later * row;
            let down =
                if head_here { (parts + later) * row } else { (later + 1.0) * TOKEN_FRAME_BYTES };
            (first, token, up, down)
        }
    };
    let download_bytes = shape.share(placement);
    let download_ms =
        if work.downloads(placement, layers) { link.down_ms(download_bytes) } else { 0.0 };
    LlmEstimate {
        placement,
        first_token_ms: first,
        token_ms: token,
        download_ms,
        answer_ms: download_ms + first + later * token,
        download_bytes,
        bytes_up: up,
        bytes_down: down,
    }
}

/// What may run: the privacy floor and the browser's memory.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LlmLimits {
    /// Blocks the text must go through in the browser before anything leaves it (0: none). A
    /// positive floor also rules out the plain split (the server would see the answer's
    /// tokens) and cloud-only (the whole conversation).
    pub privacy_floor: usize,
    /// Most bytes of the model the browser may hold (`None`: no limit).
    pub memory_bytes: Option<f64>,
}

/// Why a placement may not run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LlmRefusal {
    /// It sends text, token ids or hidden states from before the privacy floor.
    PrivacyFloor,
    /// Its share is over the memory budget.
    Memory,
    /// It names more blocks than the model has.
    NoSuchSplit,
}

/// The planner's answer: the chosen placement, every allowed one fastest first, and the
/// refused ones with why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LlmPlan {
    /// The fastest allowed answer.
    pub chosen: LlmEstimate,
    /// Every allowed placement, fastest answer first.
    pub ranked: Vec<LlmEstimate>,
    /// The placements that may not run.
    pub refused: Vec<(LlmPlacement, LlmRefusal)>,
}

/// Nothing may run.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("no placement of the language model fits: {0:?}")]
pub struct LlmPlanError(pub Vec<(LlmPlacement, LlmRefusal)>);

/// Whether `placement` may run under `limits`.
pub fn llm_refusal(
    shape: &LlmShape,
    limits: &LlmLimits,
    placement: LlmPlacement,
) -> Option<LlmRefusal> {
    let floor = limits.privacy_floor;
    match placement {
        LlmPlacement::Split { blocks } | LlmPlacement::Plain { blocks }
            if blocks == 0 || blocks >= shape.layers =>
        {
            return Some(LlmRefusal::NoSuchSplit);
        }
        LlmPlacement::Split { blocks } if blocks < floor => return Some(LlmRefusal::PrivacyFloor),
        LlmPlacement::Plain { .. } | LlmPlacement::Cloud if floor > 0 => {
            return Some(LlmRefusal::PrivacyFloor);
        }
        _ => {}
    }
    match limits.memory_bytes {
        Some(budget) if shape.share(placement) > budget => Some(LlmRefusal::Memory),
        _ => None,
    }
}

/// Choose among `candidates` the fastest answer the limits allow.
///
/// # Errors
/// [`LlmPlanError`] with every candidate's refusal when none may run.
pub fn plan_llm(
    shape: &LlmShape,
    edge: &LlmSideCosts,
    server: &LlmSideCosts,
    link: &LlmLink,
    work: &LlmWorkload,
    limits: &LlmLimits,
    candidates: &[LlmPlacement],
) -> Result<LlmPlan, LlmPlanError> {
    let mut refused = Vec::new();
    let mut ranked = Vec::new();
    for &placement in candidates {
        match llm_refusal(shape, limits, placement) {
            Some(why) => refused.push((placement, why)),
            None => ranked.push(estimate_llm(shape, edge, server, link, work, placement)),
        }
    }
    ranked.sort_by(|a, b| a.answer_ms.total_cmp(&b.answer_ms));
    match ranked.first().copied() {
        Some(chosen) => Ok(LlmPlan { chosen, ranked, refused }),
        None => Err(LlmPlanError(refused)),
    }
}

/// The placements a browser is offered: both splits at each of `blocks`, cloud-only and
/// edge-only.
pub fn llm_candidates(blocks: &[usize]) -> Vec<LlmPlacement> {
    let mut out: Vec<LlmPlacement> = blocks
        .iter()
        .flat_map(|&b| [LlmPlacement::Split { blocks: b }, LlmPlacement::Plain { blocks: b }])
        .collect();
    out.extend([LlmPlacement::Cloud, LlmPlacement::Edge]);
    out
}

#[cfg(test)]
mod tests;
