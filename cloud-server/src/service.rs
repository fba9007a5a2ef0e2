//! The request service, free of any transport: one request frame in, one reply frame out.
//! The WebSocket loop calls it per message; tests and tools can call it without a socket.
//!
//! A frame's way through: [`Request::decode`], the model its header names among those hosted
//! ([`crate::hosted::HostedModels`]), then for features that model's
//! [`SplitModel::decode_features`] (codec, stream state, the shape checked once), the shared
//! result cache, and that model's queue ([`crate::Engine::submit`]). Nothing here knows which
//! model it serves. Feature
//! decoding and content hashing (milliseconds for a large frame) run on tokio's blocking pool,
//! not on the event loop that serves every other connection of this worker.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use split_shared::cache::ContentKey;
use split_shared::codec::StreamDecoder;
use split_shared::protocol::{
    MODEL_EFFICIENTNET_LITE0, NO_GAP, Reply, Request, ServerTimings, WireError, peek_model,
    peek_request_id,
};
use split_shared::runtime::SplitModel;

use crate::engine::{Engine, Outcome, Work};
use crate::error::ServeError;
use crate::state::{AppState, CACHE_ENTRY_COST, StreamBudget};

/// What one connection keeps between its frames.
#[derive(Debug)]
pub struct Session {
    /// Its camera-stream references (a reconnect starts with a keyframe).
    pub streams: StreamDecoder,
    /// Its cache scope: results it computed answer only its own repeats, unless the server
    /// shares its cache.
    scope: Option<u64>,
    /// The server's stream budget, and the bytes of it this session holds.
    budget: StreamBudget,
    held: usize,
    /// Refusals logged at `info` so far; beyond [`LOGGED_REFUSALS`] they go to `debug`, so a
    /// client sending garbage cannot flood the log.
    refusals: u32,
    /// Whether going over the server's stream budget was logged for this session.
    budget_warned: bool,
}

/// Refusals of one session logged at `info`.
const LOGGED_REFUSALS: u32 = 3;

/// What the server holds per byte of stream references' symbols, in tenths: a reference is
/// made on the blocking pool's thread that decoded its keyframe and freed on the session's, and
/// the allocator keeps its large blocks in per-thread pages rounded up, so the memory held runs
/// above the symbols counted. Measured under the attack suite's flood (100 sessions, stem
/// keyframes of 392 KiB): the server grew 83 MiB more with 64 MiB of symbols held than with
/// none (`cloud-server/tests/server/attacks.rs`), 1.3 per byte; `--stream-bytes-total` counts that.
const REFERENCE_COST_TENTHS: usize = 13;

/// The memory `symbols` bytes of stream references hold, as the server's budget counts it.
fn reference_cost(symbols: usize) -> usize {
    symbols.saturating_mul(REFERENCE_COST_TENTHS) / 10
}

impl Session {
    /// A new session on `state`'s server.
    pub fn new(state: &AppState) -> Self {
        let id = state.sessions.fetch_add(1, Ordering::Relaxed);
        Self {
            streams: StreamDecoder::with_budget(state.streams.per_session),
            scope: (!state.shared_cache).then_some(id),
            budget: state.streams.clone(),
            held: 0,
            refusals: 0,
            budget_warned: false,
        }
    }

    /// Count this session's stream references against the server's total after a decode, at
    /// what they hold ([`reference_cost`]); over the total, the session forgets its own (the
    /// one that pushed it over pays).
    fn account_streams(&mut self) {
        let now = reference_cost(self.streams.bytes());
        let held = &self.budget.held;
        let total = if now >= self.held {
            held.fetch_add(now - self.held, Ordering::Relaxed) + (now - self.held)
        } else {
            held.fetch_sub(self.held - now, Ordering::Relaxed) - (self.held - now)
        };
        self.held = now;
        if total > self.budget.total {
            if !self.budget_warned {
                // Once per session: the log must not become the flood.
                log::warn!(
                    "stream references over the server's {} bytes: a session forgets its own",
                    self.budget.total
                );
                self.budget_warned = true;
            }
            self.streams.clear();
            held.fetch_sub(now, Ordering::Relaxed);
            self.held = 0;
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.budget.held.fetch_sub(self.held, Ordering::Relaxed);
    }
}

/// Decode a request into work for `model`, and the content key its result is cached under:
/// the activations themselves (whatever codec carried them), or the image bytes, each with the
/// model's id.
fn prepare(
    model: &dyn SplitModel,
    request: Request,
    streams: &mut StreamDecoder,
) -> Result<(ContentKey, Work), ServeError> {
    let id = [model.spec().id];
    Ok(match request {
        Request::Features { frame, .. } => {
            let x = model.decode_features(&frame, streams)?;
            (x.content_key(), Work::Features(x))
        }
        Request::Image { payload, .. } => {
            (ContentKey::of(&[b"image", &id, &payload]), Work::Image(payload))
        }
        Request::Input { payload, .. } => {
            (ContentKey::of(&[b"input", &id, &payload]), Work::Input(payload))
        }
        Request::Ping { .. } => {
            return Err(ServeError::Internal("pings are answered without the model".into()));
        }
    })
}

/// [`prepare`] on the blocking pool, the session's stream state lent to it meanwhile.
async fn prepare_off_loop(
    state: &AppState,
    engine: &Engine,
    request: Request,
    session: &mut Session,
) -> Result<(ContentKey, Work), ServeError> {
    let model = Arc::clone(engine.model());
    let fresh = StreamDecoder::with_budget(state.streams.per_session);
    let mut streams = std::mem::replace(&mut session.streams, fresh);
    let task = tokio::task::spawn_blocking(move || {
        let prepared = prepare(&*model, request, &mut streams);
        (streams, prepared)
    });
    let prepared = match task.await {
        Ok((streams, prepared)) => {
            session.streams = streams;
            prepared
        }
        // A panic in the decoder: the session goes on without its stream references.
        Err(e) => Err(ServeError::Internal(format!("decoding failed: {e}"))),
    };
    session.account_streams();
    prepared
}

async fn serve_request(
    state: &AppState,
    engine: &Engine,
    request: Request,
    session: &mut Session,
) -> Result<Outcome, ServeError> {
    let start = std::time::Instant::now();
    let (key, work) = prepare_off_loop(state, engine, request, session).await?;
    let key = match session.scope {
        Some(scope) => key.scoped(scope),
        None => key,
    };
    let decode_us = start.elapsed().as_micros().min(u128::from(u32::MAX)) as u32;
    let hit = state.cache.lock().ok().and_then(|mut c| c.get(&key));
    if let Some((from, top)) = hit {
        let timings = ServerTimings { decode_us, cached: true, ..Default::default() };
        return Ok(Outcome { from, top, timings });
    }
    let mut outcome = engine.submit(work).await?;
    outcome.timings.decode_us += decode_us;
    if let Ok(mut c) = state.cache.lock() {
        c.insert(key, (outcome.from, outcome.top.clone()), CACHE_ENTRY_COST);
    }
    Ok(outcome)
}

/// The pong to a ping of `received` bytes: any model's, with the load of the one named, else
/// of the first. Its `gap_us` is the socket's to stamp ([`NO_GAP`] here).
fn pong(state: &AppState, id: u64, model: u8, received: usize) -> Reply {
    let engine = state.models.get(model).unwrap_or(state.engine());
    let load = state.priced(engine.load());
    Reply::Pong { id, received: received as u32, gap_us: NO_GAP, load }
}

/// The pong to `frame` when it is a well-formed ping, answered without waiting for the
/// session's request in progress (a ping needs nothing of the session); `None` for any other
/// frame, and for a malformed ping, which [`answer`] refuses in its turn.
pub fn answer_ping(state: &AppState, frame: &[u8]) -> Option<Reply> {
    if !split_shared::protocol::peek_is_ping(frame) {
        return None;
    }
    match Request::decode(frame) {
        Ok(Request::Ping { id, payload }) => {
            let model = peek_model(frame).unwrap_or(MODEL_EFFICIENTNET_LITE0);
            Some(pong(state, id, model, payload.len()))
        }
        _ => None,
    }
}

/// Answer one binary frame of `session`; never fails: every problem becomes an error reply.
/// The reply goes back under the frame's model byte ([`Reply::to_bytes_for`]).
pub async fn answer(state: &AppState, frame: &[u8], session: &mut Session) -> Reply {
    let id = peek_request_id(frame).unwrap_or(0);
    let model = peek_model(frame).unwrap_or(MODEL_EFFICIENTNET_LITE0);
    let engine = state.models.get(model);
    let start = std::time::Instant::now();
    let request = match Request::decode(frame) {
        Ok(Request::Ping { payload, .. }) => return pong(state, id, model, payload.len()),
        Ok(r) => Ok(r),
        Err(e) => Err(ServeError::from(e)),
    };
    let served = async {
        let engine = engine.ok_or(WireError::UnknownModel { id, model })?;
        let outcome = serve_request(state, engine, request?, session).await?;
        Ok::<_, ServeError>((engine, outcome))
    }
    .await;
    match &served {
        Ok((engine, o)) => {
            let spec = engine.model().spec();
            let from = spec.boundaries.get(usize::from(o.from)).map_or("?", |b| b.name.as_str());
            // Lite0's series keep their boundary names; another model's are prefixed with it.
            let label = if model == MODEL_EFFICIENTNET_LITE0 {
                from.to_owned()
            } else {
                format!("{}/{from}", spec.name)
            };
            state.metrics.answered(&label, start.elapsed().as_secs_f64(), o.timings.cached)
        }
        Err(e) => state.metrics.refused(e.code().name()),
    }
    match served {
        Ok((engine, o)) => {
            let load = state.priced(engine.load());
            Reply::Result { id, from: o.from, top: o.top, timings: o.timings, load }
        }
        Err(e @ ServeError::Internal(_)) => {
            log::error!("request {id}: {e}");
            Reply::error(id, e.code(), e.to_string())
        }
        Err(e) => {
            session.refusals = session.refusals.saturating_add(1);
            if session.refusals <= LOGGED_REFUSALS {
                let more = if session.refusals == LOGGED_REFUSALS {
                    " (this session's further refusals are logged at debug)"
                } else {
                    ""
                };
                log::info!("request {id} refused ({}): {e}{more}", e.code().name());
            } else {
                log::debug!("request {id} refused ({}): {e}", e.code().name());
            }
            Reply::error(id, e.code(), e.to_string())
        }
    }
}
