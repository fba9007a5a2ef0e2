//! `/llm`: the server's share of a language model split between a client and this server. The
//! client keeps the token embedding, its first blocks and the output projection (so the text and
//! the token ids stay with it) and sends hidden states; the server runs the block range the
//! client opened the conversation with, on the KV cache of those blocks, and sends the hidden
//! states back ([`LlmFrame`] has the frames).
//!
//! One socket is one conversation, served one frame at a time: the blocks run on the blocking
//! pool, never on the event loop. KV cache is reserved when a conversation opens (its
//! positions × its blocks), against the conversation's limit (`--llm-positions`) and every
//! conversation's together (`--llm-kv-mib`); a conversation over either is refused with
//! `kv_budget` and other conversations are not touched. The reservation ends with the socket.
//! Frames count against the same per-address rate as `/ws` requests (`--rate-limit`); answers
//! and refusals go to `/metrics` as `/ws`'s do (answers under `from="llm"`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use actix_web::{HttpRequest, HttpResponse, rt, web};
use actix_ws::{AggregatedMessage, CloseCode, CloseReason};
use futures_util::StreamExt;
use split_shared::models::smollm2::{KvCache, Smollm2};
use split_shared::protocol::{
    LlmErrorCode, LlmFrame, MAX_LLM_FRAME_BYTES, MODEL_SMOLLM2, peek_llm_id,
};

use crate::state::AppState;
use crate::ws::{Upgraded, checked_upgrade, send};

/// A conversation silent this long is closed (its KV cache freed).
const IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// The loaded model and what its conversations may hold.
pub struct LlmHost {
    /// The model (weights shared by every conversation).
    pub model: Smollm2,
    /// Positions one conversation may reserve.
    pub max_positions: u32,
    /// Bytes of KV cache all conversations may reserve.
    pub budget_bytes: usize,
    /// Bytes reserved now.
    pub held: AtomicUsize,
    /// The file the model was read from (the edge's shares are cut from it).
    pub path: std::path::PathBuf,
    /// FNV-1a 64 of the file, in hex: what clients cache its shares under.
    pub file_id: String,
    /// Shares of the model made for browsers ([`crate::llm_edge`]).
    pub shares: crate::llm_edge::Shares,
}

impl LlmHost {
    /// The model named by `--llm`, or the cached one when it is there.
    ///
    /// # Errors
    /// A file named by `--llm` that is missing or does not load as a model.
    pub fn load(config: &crate::Config) -> anyhow::Result<Option<Self>> {
        use anyhow::Context;
        let path = match &config.llm {
            Some(p) => p.clone(),
            None => {
                let p = split_paths::llm_file();
                if !p.exists() {
                    log::warn!(
                        "no language model at {}: /llm refuses conversations (`./run.sh setup`)",
                        p.display()
                    );
                    return Ok(None);
                }
                p
            }
        };
        let bytes = std::fs::read(&path)
            .with_context(|| format!("reading the language model {}", path.display()))?;
        let (model, _) = Smollm2::load(&bytes)
            .with_context(|| format!("loading the language model {}", path.display()))?;
        log::info!(
            "language model from {} ({:.1} MB of weights)",
            path.display(),
            model.weight_bytes() as f64 / 1e6
        );
        Ok(Some(LlmHost {
            model,
            max_positions: config.llm_positions,
            budget_bytes: config.llm_kv_mib.saturating_mul(1 << 20),
            held: AtomicUsize::new(0),
            file_id: format!("{:016x}", split_shared::container::fnv1a64(&bytes)),
            path,
            shares: Default::default(),
        }))
    }

    /// Bytes of KV cache `positions` of blocks `first..end` take.
    fn cache_bytes(&self, first: u16, end: u16, positions: u32) -> usize {
        let per_position = self.model.config.kv_dim() * 2 * 4;
        usize::from(end.saturating_sub(first)) * per_position * positions as usize
    }

    /// Reserve `bytes` of the budget, or say why not.
    fn reserve(self: &Arc<Self>, bytes: usize) -> Result<Reservation, String> {
        let mut held = self.held.load(Ordering::Relaxed);
        loop {
            let after = held.saturating_add(bytes);
            if after > self.budget_bytes {
                return Err(format!(
                    "the server's KV budget is {} MiB, {} MiB are held; this conversation needs {:.1} MiB",
                    self.budget_bytes >> 20,
                    held >> 20,
                    bytes as f64 / (1 << 20) as f64
                ));
            }
            match self.held.compare_exchange(held, after, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return Ok(Reservation { host: self.clone(), bytes }),
                Err(now) => held = now,
            }
        }
    }
}

/// Budget held by one conversation, given back when it ends.
struct Reservation {
    host: Arc<LlmHost>,
    bytes: usize,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.host.held.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// An open conversation: its blocks, its cache (absent while the blocks run), its budget.
struct Conversation {
    first: u16,
    end: u16,
    cache: Option<KvCache>,
    _reservation: Reservation,
}

fn error(id: u64, code: LlmErrorCode, message: impl Into<String>) -> LlmFrame {
    LlmFrame::Error { id, code, message: message.into() }
}

/// `GET /llm`: the same admission as `/ws` (origin, token, connection limits), then one
/// conversation.
pub async fn llm_socket(
    req: HttpRequest,
    body: web::Payload,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let (response, upgraded) = checked_upgrade(&req, body, &state, MAX_LLM_FRAME_BYTES).await?;
    if let Some(Upgraded { session, stream, admitted }) = upgraded {
        // `admitted` holds the connection's place in the limits until the conversation ends.
        rt::spawn(serve(session, stream, state.into_inner(), admitted));
    }
    Ok(response)
}

async fn serve(
    mut session: actix_ws::Session,
    mut stream: actix_ws::AggregatedMessageStream,
    state: Arc<AppState>,
    admitted: crate::limits::Admitted,
) {
    let mut conversation: Option<Conversation> = None;
    let reason = loop {
        let msg = match tokio::time::timeout(IDLE_TIMEOUT, stream.next()).await {
            Err(_) => {
                break Some(CloseReason {
                    code: CloseCode::Normal,
                    description: Some("idle".into()),
                });
            }
            Ok(m) => m,
        };
        match msg {
            Some(Ok(AggregatedMessage::Binary(bytes))) => {
                state.metrics.received(bytes.len());
                let started = std::time::Instant::now();
                // The same per-address bucket as `/ws`: frames per second, a second's worth at once.
                let reply = if state.rate.allow(admitted.ip, started) {
                    answer(&state, &mut conversation, &bytes).await
                } else {
                    let message = format!(
                        "over {} frames per second from this address; retry later",
                        state.rate.rate()
                    );
                    error(peek_llm_id(&bytes).unwrap_or(0), LlmErrorCode::RateLimited, message)
                };
                match &reply {
                    LlmFrame::Error { code, .. } => state.metrics.refused(code.name()),
                    _ => state.metrics.answered("llm", started.elapsed().as_secs_f64(), false),
                }
                if !send(&mut session, reply.encode(), &state).await {
                    return;
                }
            }
            Some(Ok(AggregatedMessage::Text(_))) => {
                let reply = error(0, LlmErrorCode::BadFrame, "frames are binary");
                if !send(&mut session, reply.encode(), &state).await {
                    return;
                }
            }
            Some(Ok(AggregatedMessage::Ping(bytes))) => {
                if session.pong(&bytes).await.is_err() {
                    return;
                }
            }
            Some(Ok(AggregatedMessage::Pong(_))) => {}
            Some(Ok(AggregatedMessage::Close(reason))) => break reason,
            Some(Err(e)) => break Some(crate::ws::framing_close(&e, MAX_LLM_FRAME_BYTES, &state)),
            None => return,
        }
    };
    let _ = session.close(reason).await;
}

/// One frame in, one frame out.
async fn answer(
    state: &AppState,
    conversation: &mut Option<Conversation>,
    bytes: &[u8],
) -> LlmFrame {
    let id = peek_llm_id(bytes).unwrap_or(0);
    let frame = match LlmFrame::decode(bytes) {
        Ok(f) => f,
        Err(e) => return error(id, LlmErrorCode::BadFrame, e.to_string()),
    };
    let Some(host) = state.llm.clone() else {
        return error(
            id,
            LlmErrorCode::UnknownModel,
            "this server hosts no language model (start it with --llm)",
        );
    };
    match frame {
        LlmFrame::Open { id, model, first, end, positions } => {
            if model != MODEL_SMOLLM2 {
                return error(
                    id,
                    LlmErrorCode::UnknownModel,
                    format!("model {model} is not hosted; {MODEL_SMOLLM2} is SmolLM2"),
                );
            }
            if conversation.is_some() {
                return error(
                    id,
                    LlmErrorCode::NotOpen,
                    "this socket's conversation is already open",
                );
            }
            let layers = host.model.config.layers;
            if first >= end || usize::from(end) > layers {
                return error(
                    id,
                    LlmErrorCode::BadLayers,
                    format!("blocks {first}..{end}: the model has 0..{layers}"),
                );
            }
            if positions == 0 || positions > host.max_positions {
                return error(
                    id,
                    LlmErrorCode::KvBudget,
                    format!(
                        "{positions} positions: a conversation may have 1..={}",
                        host.max_positions
                    ),
                );
            }
            let reservation = match host.reserve(host.cache_bytes(first, end, positions)) {
                Ok(r) => r,
                Err(why) => return error(id, LlmErrorCode::KvBudget, why),
            };
            let cache = KvCache::new(
                &host.model.config,
                usize::from(first)..usize::from(end),
                positions as usize,
            );
            *conversation =
                Some(Conversation { first, end, cache: Some(cache), _reservation: reservation });
            let width = host.model.config.dim as u32;
            LlmFrame::Opened { id, first, end, positions, width }
        }
        LlmFrame::Hidden { id, reply: false, position, width, codec, mut values } => {
            let Some(c) = conversation.as_mut() else {
                return error(
                    id,
                    LlmErrorCode::NotOpen,
                    "open the conversation before sending hidden states",
                );
            };
            let dim = host.model.config.dim;
            if width as usize != dim || values.is_empty() {
                return error(
                    id,
                    LlmErrorCode::BadValues,
                    format!("rows of {width} values; this model's are {dim}"),
                );
            }
            if values.iter().any(|v| !v.is_finite()) {
                return error(id, LlmErrorCode::BadValues, "a hidden state holds NaN or infinity");
            }
            let Some(mut cache) = c.cache.take() else {
                return error(id, LlmErrorCode::Internal, "the conversation's cache was lost");
            };
            if position as usize != cache.len() {
                let expected = cache.len();
                c.cache = Some(cache);
                return error(
                    id,
                    LlmErrorCode::Position,
                    format!(
                        "rows start at position {position}; the server's cache holds {expected}"
                    ),
                );
            }
            let rows = values.len() / dim;
            if cache.len() + rows > cache.capacity() {
                let capacity = cache.capacity();
                c.cache = Some(cache);
                return error(
                    id,
                    LlmErrorCode::KvBudget,
                    format!(
                        "{rows} more positions do not fit the {capacity} this conversation reserved"
                    ),
                );
            }
            let range = usize::from(c.first)..usize::from(c.end);
            let worker = host.clone();
            let run = web::block(move || {
                let outcome = worker.model.forward_layers(range, &mut values, &mut cache);
                (outcome, values, cache)
            })
            .await;
            match run {
                Ok((Ok(()), values, cache)) => {
                    c.cache = Some(cache);
                    LlmFrame::Hidden { id, reply: true, position, width, codec, values }
                }
                Ok((Err(e), _, cache)) => {
                    c.cache = Some(cache);
                    error(id, LlmErrorCode::Internal, e.to_string())
                }
                // The blocking task panicked: the cache is gone with it, so is the conversation.
                Err(_) => {
                    *conversation = None;
                    error(id, LlmErrorCode::Internal, "the blocks failed; open a new conversation")
                }
            }
        }
        other => {
            error(other.id(), LlmErrorCode::BadFrame, "a client sends open and hidden frames only")
        }
    }
}
