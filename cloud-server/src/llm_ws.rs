//! `/llm`: the server's share of a language model split between a client and this server. In
//! the U-shaped split the client keeps the token embedding, its first blocks and the output
//! projection (so the text and the token ids stay with it) and sends hidden states; the server
//! runs the block range the client opened the conversation with, on the KV cache of those
//! blocks, and sends the hidden states back. A conversation opened with the head makes the
//! server finish the model and answer with tokens (plain split); one that also starts at block
//! 0 takes token ids and streams a whole answer (cloud-only). [`LlmFrame`] has the frames.
//!
//! The conversation's model is the one its `open` frame names by id, any the server hosts
//! ([`crate::llm_models`]; SmolLM2 when loaded).
//!
//! One socket is one conversation, served one frame at a time: the blocks run on the blocking
//! pool, never on the event loop, or with `--llm-batch` in batches with the other
//! conversations' frames ([`crate::llm_batch`]). While a generation streams, the socket is still read: `stop`
//! ends it after the token being computed, anything else is refused with `placement`. A conversation opens with the positions it may
//! reach (at most `--llm-positions`) and reserves KV cache from every conversation's budget
//! (`--llm-kv-mib`) as its cache fills, [`RESERVE_STEP`] positions × its blocks at a time: an
//! open or a frame that needs more than the budget has is refused with `kv_budget` (the
//! conversation stays open, its cache as it was), unless conversations idle for
//! `--llm-evict-after` free enough ([`crate::llm_budget`]: each gets `evicted` and its socket
//! closes). The reservation ends with the socket.
//! Frames count against the same per-address rate as `/ws` requests (`--rate-limit`); answers
//! and refusals go to `/metrics` as `/ws`'s do (answers under `from="llm"`).

use std::sync::Arc;
use std::time::Duration;

use actix_web::{HttpRequest, HttpResponse, rt, web};
use actix_ws::{AggregatedMessage, CloseCode, CloseReason};
use futures_util::StreamExt;
use split_shared::models::smollm2::{Sampler, Sampling, Smollm2};
use split_shared::protocol::{
    Finish, HeadSampling, LlmErrorCode, LlmFrame, MAX_LLM_FRAME_BYTES, peek_llm_id,
};
use split_shared::runtime::{SequenceError, check_hidden, check_position};

use crate::llm_batch::{Done, Input, Job, Output};
use crate::llm_budget::Reservation;
use crate::llm_models::{SequenceModels, Served, State};
use crate::state::AppState;
use crate::ws::{Then, Upgraded, checked_upgrade, other_message, send};

/// A conversation silent this long is closed (its KV cache freed).
const IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// SmolLM2 as this server loaded it from a GGUF file: the model ([`crate::llm_models`] serves
/// its conversations) and what browsers fetch of the file.
pub struct LlmHost {
    /// The model (weights shared by every conversation).
    pub model: Arc<Smollm2>,
    /// The token that ends an answer (a generation stops after sending it).
    pub end_token: u32,
    /// The file the model was read from (the edge's shares are cut from it).
    pub path: std::path::PathBuf,
    /// FNV-1a 64 of the file, in hex: what clients cache its shares under.
    pub file_id: String,
    /// Shares of the model made for browsers ([`crate::llm_edge`]).
    pub shares: crate::llm_edge::Shares,
    /// The file's metadata without its tensors: the tokenizer a cloud-only client needs.
    pub tokenizer: actix_web::web::Bytes,
    /// What a block and the head cost here, measured at load (`/api/info`'s `llm.costs`, for
    /// the clients' placement planners).
    pub costs: split_shared::plan::LlmSideCosts,
    /// Bytes of the share of `k` blocks, `k` = 0 ..= the model's blocks (`/llm/edge/{k}`).
    pub share_bytes: Vec<usize>,
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
                        "no language model at {}: /llm hosts no SmolLM2 (`./run.sh setup`)",
                        p.display()
                    );
                    return Ok(None);
                }
                p
            }
        };
        let bytes = std::fs::read(&path)
            .with_context(|| format!("reading the language model {}", path.display()))?;
        let (model, tokenizer) = Smollm2::load(&bytes)
            .with_context(|| format!("loading the language model {}", path.display()))?;
        let model = model.with_q8_activations(config.llm_q8);
        let start = std::time::Instant::now();
        let clock = || start.elapsed().as_secs_f64() * 1e3;
        let costs = split_shared::models::smollm2::measure_costs(&model, &clock)
            .context("timing the language model's blocks")?;
        log::info!(
            "language model from {} ({:.1} MB of weights{}; a block {:.2} ms a token, {:.3} a \
             prefill position; the head {:.2} ms)",
            path.display(),
            model.weight_bytes() as f64 / 1e6,
            if model.q8_activations() { ", 8-bit activations in decode" } else { "" },
            costs.block_token_ms,
            costs.block_prefill_ms,
            costs.head_ms
        );
        Ok(Some(LlmHost {
            model: Arc::new(model),
            end_token: tokenizer.eos,
            file_id: format!("{:016x}", split_shared::container::fnv1a64(&bytes)),
            tokenizer: split_shared::models::smollm2::tokenizer_share(&bytes)?.into(),
            path,
            shares: Default::default(),
            costs,
            share_bytes: split_shared::models::smollm2::share_sizes(&bytes)?,
        }))
    }
}

/// Positions a conversation's KV reservation grows by: at open, the first step (or the
/// positions it opened with, if fewer); then, when a frame needs more, enough steps for it.
/// A conversation holds the budget for what its cache holds, give or take a step, not for the
/// positions it may reach: 64 positions of 26 blocks are 2.4 MiB.
const RESERVE_STEP: u32 = 64;

/// An open conversation: its model, its blocks, its cache (absent while the blocks run), the
/// server's sampler when it runs the head, its budget.
struct Conversation {
    model: Arc<dyn Served>,
    first: u16,
    end: u16,
    cache: Option<State>,
    sampler: Option<Sampler>,
    reservation: Reservation,
    /// Positions of cache the reservation covers: a step ahead of what the cache holds, up
    /// to the positions the conversation opened with ([`RESERVE_STEP`]).
    reserved: u32,
    /// Counts it among the conversations a batch waits for (`--llm-batch`).
    _open: Option<crate::llm_batch::Open>,
}

/// What a frame gets.
enum Reply {
    /// One frame back.
    Frame(LlmFrame),
    /// Nothing (a `stop` after its generation ended).
    Nothing,
    /// A generation whose first token is chosen: [`stream_answer`] sends it and the rest.
    Generate(Generation),
}

/// A generation under way.
struct Generation {
    /// The tokens frame's id.
    id: u64,
    /// Tokens asked for.
    generate: u32,
    /// The next token to send, and where it goes.
    token: u32,
    position: u32,
}

/// How a streamed answer ended.
enum Streamed {
    /// Its `done` (or an error frame) is the last reply.
    Done(LlmFrame),
    /// The client closed the socket meanwhile.
    Closing(Option<CloseReason>),
    /// The socket is gone.
    Gone,
}

fn error(id: u64, code: LlmErrorCode, message: impl Into<String>) -> LlmFrame {
    LlmFrame::Error { id, code, message: message.into() }
}

/// The model's failure as the error frame the client gets: a token id past the vocabulary is
/// the client's; anything else the server's.
fn model_error(id: u64, e: &SequenceError) -> LlmFrame {
    let code = match e {
        SequenceError::Token { .. } => LlmErrorCode::BadValues,
        _ => LlmErrorCode::Internal,
    };
    error(id, code, e.to_string())
}

/// The sampler a conversation opened with `head` asks for, or why it is refused.
fn sampler(head: HeadSampling) -> Result<Sampler, String> {
    let HeadSampling { temperature, top_p, seed } = head;
    if !(temperature.is_finite() && temperature >= 0.0) {
        return Err(format!("temperature {temperature}: 0 (greedy) or above"));
    }
    if temperature == 0.0 {
        return Ok(Sampler::new(Sampling::Greedy));
    }
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(format!("top-p {top_p}: above 0, at most 1"));
    }
    Ok(Sampler::new(Sampling::TopP { temperature, top_p, seed }))
}

/// Run the conversation's blocks (and its head, with a sampler) on `input`: in the next batch
/// ([`crate::llm_batch`], `--llm-batch`), else on the blocking pool on its own. The cache and
/// the sampler go back into the conversation whatever happens, except when the computation
/// panicked (then the conversation is gone: `None`).
async fn compute(c: &mut Conversation, input: Input) -> Option<Result<Output, SequenceError>> {
    let Some(cache) = c.cache.take() else {
        return Some(Err(SequenceError::Shape("the conversation's cache was lost".into())));
    };
    let job = Job {
        layers: usize::from(c.first)..usize::from(c.end),
        input,
        cache,
        sampler: c.sampler.take(),
    };
    let Done { outcome, cache, sampler } = c.model.clone().compute(job).await?;
    c.cache = Some(cache);
    c.sampler = sampler;
    Some(outcome)
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
    let reason = 'serve: loop {
        let lease = conversation.as_ref().map(|c| c.reservation.lease().clone());
        let next = tokio::select! {
            next = tokio::time::timeout(IDLE_TIMEOUT, stream.next()) => next,
            () = crate::llm_budget::evicted(lease.as_deref()) => {
                // Its cache goes now; the client opens again and re-sends what it kept.
                drop(conversation.take());
                state.metrics.refused(LlmErrorCode::Evicted.name());
                let message = "the server took this idle conversation's KV cache for another; \
                               open again and send the kept hidden states to go on";
                let _ = send(&mut session, error(0, LlmErrorCode::Evicted, message).encode(), &state)
                    .await;
                break Some(CloseReason {
                    code: CloseCode::Again,
                    description: Some("evicted".into()),
                });
            }
        };
        let msg = match next {
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
                if let Some(lease) = &lease {
                    lease.set_busy(true);
                }
                // The same per-address bucket as `/ws`: frames per second, a second's worth at once.
                let reply = if !state.rate.allow(admitted.ip, started) {
                    let message = state.rate.refusal("frames");
                    error(peek_llm_id(&bytes).unwrap_or(0), LlmErrorCode::RateLimited, message)
                } else {
                    match answer(&state, &mut conversation, &bytes).await {
                        Reply::Frame(frame) => frame,
                        // A `stop` with nothing to stop: the generation it meant has ended.
                        // The conversation waits again (idle, so evictable).
                        Reply::Nothing => {
                            if let Some(c) = &conversation {
                                c.reservation.lease().set_busy(false);
                            }
                            continue;
                        }
                        Reply::Generate(g) => {
                            let c = conversation.as_mut().expect("a generation has a conversation");
                            match stream_answer(&mut session, &mut stream, &state, c, g).await {
                                Streamed::Done(done) => done,
                                Streamed::Closing(reason) => break 'serve reason,
                                Streamed::Gone => return,
                            }
                        }
                    }
                };
                match &reply {
                    LlmFrame::Error { code, .. } => state.metrics.refused(code.name()),
                    _ => state.metrics.answered("llm", started.elapsed().as_secs_f64(), false),
                }
                if !send(&mut session, reply.encode(), &state).await {
                    return;
                }
                if let Some(c) = &conversation {
                    c.reservation.lease().set_busy(false);
                }
            }
            other => {
                let refusal = || error(0, LlmErrorCode::BadFrame, "frames are binary").encode();
                match other_message(&mut session, other, refusal, MAX_LLM_FRAME_BYTES, &state).await
                {
                    Then::Go => {}
                    Then::Close(reason) => break reason,
                    Then::Gone => return,
                }
            }
        }
    };
    let _ = session.close(reason).await;
}

/// `position` is where the conversation's cache stands and `rows` more fit in it, then
/// `ahead` more (a generation's tokens, as many as fit), with the reservation grown to cover
/// them; or the error frame saying why not.
fn check_room(
    c: &mut Conversation,
    id: u64,
    position: u32,
    rows: usize,
    ahead: u32,
) -> Result<(), LlmFrame> {
    let Some(cache) = c.cache.as_ref() else {
        return Err(error(id, LlmErrorCode::Internal, "the conversation's cache was lost"));
    };
    check_position(cache, position, rows).map_err(|(code, why)| error(id, code, why))?;
    // Within the capacity, which is at most `--llm-positions` (a u32).
    let capacity = cache.capacity() as u32;
    let needed = (position + rows as u32).saturating_add(ahead).min(capacity);
    if needed > c.reserved {
        let to = needed.div_ceil(RESERVE_STEP).saturating_mul(RESERVE_STEP).min(capacity);
        let blocks = usize::from(c.end - c.first);
        let more = c.model.spec().state_bytes(blocks, (to - c.reserved) as usize);
        if let Err(why) = c.reservation.grow(more) {
            return Err(error(id, LlmErrorCode::KvBudget, why));
        }
        c.reserved = to;
    }
    Ok(())
}

/// One frame in: the frame back, or a generation to stream.
async fn answer(state: &AppState, conversation: &mut Option<Conversation>, bytes: &[u8]) -> Reply {
    let id = peek_llm_id(bytes).unwrap_or(0);
    let frame = match LlmFrame::decode(bytes) {
        Ok(f) => f,
        Err(e) => return Reply::Frame(error(id, LlmErrorCode::BadFrame, e.to_string())),
    };
    if state.sequences.is_empty() {
        return Reply::Frame(error(
            id,
            LlmErrorCode::UnknownModel,
            "this server hosts no language model (start it with --llm)",
        ));
    }
    match frame {
        LlmFrame::Open { id, model, first, end, positions, head } => Reply::Frame(open(
            &state.sequences,
            conversation,
            id,
            model,
            first..end,
            positions,
            head,
        )),
        LlmFrame::Hidden { id, reply: false, position, width, codec, values } => {
            let Some(c) = conversation.as_mut() else {
                return Reply::Frame(error(
                    id,
                    LlmErrorCode::NotOpen,
                    "open the conversation before sending hidden states",
                ));
            };
            let dim = c.model.spec().width;
            let rows = match check_hidden(dim, width, &values) {
                Ok(rows) => rows,
                Err((code, why)) => return Reply::Frame(error(id, code, why)),
            };
            if let Err(refused) = check_room(c, id, position, rows, 0) {
                return Reply::Frame(refused);
            }
            Reply::Frame(match compute(c, Input::Hidden(values)).await {
                // The last position only: the client's head needs no other.
                Some(Ok(Output::Hidden(values))) => LlmFrame::Hidden {
                    id,
                    reply: true,
                    position: position + rows as u32 - 1,
                    width,
                    codec,
                    values: values[values.len() - dim..].to_vec(),
                },
                Some(Ok(Output::Token(token))) => {
                    LlmFrame::Token { id, position: position + rows as u32, token }
                }
                Some(Err(e)) => model_error(id, &e),
                // The blocking task panicked: the cache is gone with it, so is the conversation.
                None => {
                    *conversation = None;
                    error(id, LlmErrorCode::Internal, "the blocks failed; open a new conversation")
                }
            })
        }
        LlmFrame::Tokens { id, position, generate, tokens } => {
            let Some(c) = conversation.as_mut() else {
                return Reply::Frame(error(
                    id,
                    LlmErrorCode::NotOpen,
                    "open the conversation before sending tokens",
                ));
            };
            if c.first != 0 {
                return Reply::Frame(error(
                    id,
                    LlmErrorCode::Placement,
                    format!(
                        "this conversation runs blocks {}..{} here: send hidden states, not token ids",
                        c.first, c.end
                    ),
                ));
            }
            if c.sampler.is_none() {
                return Reply::Frame(error(
                    id,
                    LlmErrorCode::Placement,
                    "token ids go to a conversation opened with the head (cloud-only)",
                ));
            }
            if tokens.is_empty() {
                return Reply::Frame(error(id, LlmErrorCode::BadValues, "no tokens"));
            }
            let rows = tokens.len();
            if let Err(refused) = check_room(c, id, position, rows, generate) {
                return Reply::Frame(refused);
            }
            let after = position + rows as u32;
            match compute(c, Input::Tokens(tokens)).await {
                Some(Ok(Output::Hidden(_))) => {
                    Reply::Frame(error(id, LlmErrorCode::Internal, "the head did not run"))
                }
                // Prefill only: the positions are in the cache, no token is asked for.
                Some(Ok(Output::Token(_))) if generate == 0 => {
                    Reply::Frame(LlmFrame::Done { id, generated: 0, finish: Finish::Count })
                }
                Some(Ok(Output::Token(token))) => {
                    Reply::Generate(Generation { id, generate, token, position: after })
                }
                Some(Err(e)) => Reply::Frame(model_error(id, &e)),
                None => {
                    *conversation = None;
                    Reply::Frame(error(
                        id,
                        LlmErrorCode::Internal,
                        "the blocks failed; open a new conversation",
                    ))
                }
            }
        }
        LlmFrame::Stop { .. } => Reply::Nothing,
        other => Reply::Frame(error(
            other.id(),
            LlmErrorCode::BadFrame,
            "a client sends open, hidden, tokens and stop frames only",
        )),
    }
}

/// Open the conversation: the reply to an `open` frame.
fn open(
    models: &SequenceModels,
    conversation: &mut Option<Conversation>,
    id: u64,
    model: u8,
    blocks: std::ops::Range<u16>,
    positions: u32,
    head: Option<HeadSampling>,
) -> LlmFrame {
    let (first, end) = (blocks.start, blocks.end);
    let Some(served) = models.get(model) else {
        let hosted = models.names();
        return error(
            id,
            LlmErrorCode::UnknownModel,
            format!("model {model} is not hosted; this server hosts {hosted}"),
        );
    };
    if conversation.is_some() {
        return error(id, LlmErrorCode::NotOpen, "this socket's conversation is already open");
    }
    let spec = served.spec();
    let layers = spec.blocks;
    if first >= end || usize::from(end) > layers {
        return error(
            id,
            LlmErrorCode::BadLayers,
            format!("blocks {first}..{end}: the model has 0..{layers}"),
        );
    }
    if head.is_some() && usize::from(end) != layers {
        return error(
            id,
            LlmErrorCode::BadLayers,
            format!(
                "the head runs after the last block: blocks {first}..{end} end before {layers}"
            ),
        );
    }
    let sampler = match head.map(sampler).transpose() {
        Ok(s) => s,
        Err(why) => return error(id, LlmErrorCode::BadValues, why),
    };
    let max_positions = models.max_positions(spec);
    if positions == 0 || positions > max_positions {
        return error(
            id,
            LlmErrorCode::KvBudget,
            format!("{positions} positions: a conversation may have 1..={max_positions}"),
        );
    }
    let reserved = positions.min(RESERVE_STEP);
    let blocks = usize::from(first)..usize::from(end);
    let bytes = spec.state_bytes(blocks.len(), reserved as usize);
    let reservation = match models.budget.reserve(bytes) {
        Ok(r) => r,
        Err(why) => return error(id, LlmErrorCode::KvBudget, why),
    };
    let width = spec.width as u32;
    *conversation = Some(Conversation {
        model: served.clone(),
        first,
        end,
        cache: Some(served.new_state(blocks, positions as usize)),
        sampler,
        reservation,
        reserved,
        _open: served.open(),
    });
    LlmFrame::Opened { id, first, end, positions, width, head: head.is_some() }
}

/// Stream a generation: each token as soon as it is chosen, the next computed meanwhile,
/// until the end token, the count asked for, the conversation's positions, or the client's
/// `stop`; then `done`. The socket is read while the blocks run.
async fn stream_answer(
    session: &mut actix_ws::Session,
    stream: &mut actix_ws::AggregatedMessageStream,
    state: &AppState,
    c: &mut Conversation,
    mut g: Generation,
) -> Streamed {
    let end_token = c.model.end_token();
    let mut generated = 0;
    let mut stop = false;
    let finish = loop {
        let token = LlmFrame::Token { id: g.id, position: g.position, token: g.token };
        if !send(session, token.encode(), state).await {
            return Streamed::Gone;
        }
        generated += 1;
        let capacity = c.cache.as_ref().map_or(0, |cache| cache.capacity());
        if Some(g.token) == end_token {
            break Finish::EndToken;
        } else if generated == g.generate {
            break Finish::Count;
        } else if stop {
            break Finish::Stopped;
        } else if g.position as usize >= capacity {
            break Finish::Positions;
        }
        let mut step = std::pin::pin!(compute(c, Input::Tokens(vec![g.token])));
        let outcome = loop {
            tokio::select! {
                outcome = &mut step => break outcome,
                msg = stream.next() => match msg {
                    Some(Ok(AggregatedMessage::Binary(bytes))) => {
                        state.metrics.received(bytes.len());
                        match LlmFrame::decode(&bytes) {
                            Ok(LlmFrame::Stop { .. }) => stop = true,
                            _ => {
                                let id = peek_llm_id(&bytes).unwrap_or(0);
                                let why = "a generation is under way: stop it first";
                                state.metrics.refused(LlmErrorCode::Placement.name());
                                let refused = error(id, LlmErrorCode::Placement, why);
                                if !send(session, refused.encode(), state).await {
                                    return Streamed::Gone;
                                }
                            }
                        }
                    }
                    Some(Ok(AggregatedMessage::Ping(bytes))) => {
                        if session.pong(&bytes).await.is_err() {
                            return Streamed::Gone;
                        }
                    }
                    Some(Ok(AggregatedMessage::Close(reason))) => return Streamed::Closing(reason),
                    Some(Ok(_)) => {}
                    Some(Err(e)) => {
                        return Streamed::Closing(Some(crate::ws::framing_close(&e, MAX_LLM_FRAME_BYTES, state)));
                    }
                    None => return Streamed::Gone,
                },
            }
        };
        match outcome {
            Some(Ok(Output::Token(next))) => {
                g.token = next;
                g.position += 1;
            }
            Some(Ok(Output::Hidden(_))) => {
                return Streamed::Done(error(g.id, LlmErrorCode::Internal, "the head did not run"));
            }
            Some(Err(e)) => return Streamed::Done(model_error(g.id, &e)),
            // The blocking task panicked with the cache: the conversation answers no more.
            None => {
                return Streamed::Done(error(
                    g.id,
                    LlmErrorCode::Internal,
                    "the blocks failed; open a new conversation",
                ));
            }
        }
    };
    Streamed::Done(LlmFrame::Done { id: g.id, generated, finish })
}
