//! The request service, free of any transport: one request frame in, one reply frame out.
//! The WebSocket loop calls it per message; tests and tools can call it without a socket.
//!
//! A frame's way through: [`Request::decode`], then for features
//! [`split_shared::protocol::FeaturesFrame::decode`] (codec, stream state, the shape checked
//! once), the shared result cache, and the model queue ([`crate::Engine::submit`]). Feature
//! decoding and content hashing (milliseconds for a large frame) run on tokio's blocking pool,
//! not on the event loop that serves every other connection of this worker.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use split_shared::cache::ContentKey;
use split_shared::codec::{Calibration, DecodeContext, StreamDecoder};
use split_shared::protocol::{Reply, Request, ServerTimings, peek_request_id};

use crate::engine::{Outcome, Work};
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

/// Decode a request into work for the model, and the content key its result is cached under:
/// the activations themselves (whatever codec carried them), or the image bytes.
fn prepare(
    calibration: Option<&Calibration>,
    request: Request,
    streams: &mut StreamDecoder,
) -> Result<(ContentKey, Work), ServeError> {
    Ok(match request {
        Request::Features { frame, .. } => {
            let ctx = DecodeContext::new(calibration).with_streams(Some(streams));
            let features = frame.decode(ctx)?;
            (features.content_key(), Work::Features(features))
        }
        Request::Image { payload, .. } => {
            (ContentKey::of(&[b"image", &payload]), Work::Image(payload))
        }
        Request::Input { payload, .. } => {
            (ContentKey::of(&[b"input", &payload]), Work::Input(payload))
        }
        Request::Ping { .. } => {
            return Err(ServeError::Internal("pings are answered without the model".into()));
        }
    })
}

/// [`prepare`] on the blocking pool, the session's stream state lent to it meanwhile.
async fn prepare_off_loop(
    state: &AppState,
    request: Request,
    session: &mut Session,
) -> Result<(ContentKey, Work), ServeError> {
    let calibration = state.calibration.as_ref().map(|(c, _)| Arc::clone(c));
    let fresh = StreamDecoder::with_budget(state.streams.per_session);
    let mut streams = std::mem::replace(&mut session.streams, fresh);
    let task = tokio::task::spawn_blocking(move || {
        let prepared = prepare(calibration.as_deref(), request, &mut streams);
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
    request: Request,
    session: &mut Session,
) -> Result<Outcome, ServeError> {
    let start = std::time::Instant::now();
    let (key, work) = prepare_off_loop(state, request, session).await?;
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
    let mut outcome = state.engine.submit(work).await?;
    outcome.timings.decode_us += decode_us;
    if let Ok(mut c) = state.cache.lock() {
        c.insert(key, (outcome.from, outcome.top.clone()), CACHE_ENTRY_COST);
    }
    Ok(outcome)
}

/// Answer one binary frame of `session`; never fails: every problem becomes an error reply.
pub async fn answer(state: &AppState, frame: &[u8], session: &mut Session) -> Reply {
    let id = peek_request_id(frame).unwrap_or(0);
    let start = std::time::Instant::now();
    let request = match Request::decode(frame) {
        Ok(Request::Ping { payload, .. }) => {
            let received = payload.len() as u32;
            return Reply::Pong { id, received, load: state.engine.load() };
        }
        Ok(r) => Ok(r),
        Err(e) => Err(ServeError::from(e)),
    };
    let served = async { serve_request(state, request?, session).await }.await;
    match &served {
        Ok(o) => {
            state.metrics.answered(o.from.name(), start.elapsed().as_secs_f64(), o.timings.cached)
        }
        Err(e) => state.metrics.refused(e.code().name()),
    }
    match served {
        Ok(o) => Reply::Result {
            id,
            from: o.from,
            top: o.top,
            timings: o.timings,
            load: state.engine.load(),
        },
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
