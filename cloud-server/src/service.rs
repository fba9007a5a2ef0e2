//! The request service, free of any transport: one request frame in, one reply frame out.
//! The WebSocket loop calls it per message; tests and tools can call it without a socket.
//!
//! A frame's way through: [`Request::decode`], then for features
//! [`split_shared::protocol::FeaturesFrame::decode`] (codec, stream state, the shape checked
//! once), the shared result cache, and the model queue ([`crate::Engine::submit`]).

use split_shared::cache::ContentKey;
use split_shared::codec::{DecodeContext, StreamDecoder};
use split_shared::protocol::{Reply, Request, ServerTimings, peek_request_id};

use crate::engine::{Outcome, Work};
use crate::error::ServeError;
use crate::state::{AppState, CACHE_ENTRY_COST};

/// What one connection keeps between its frames.
#[derive(Debug)]
pub struct Session {
    /// Its camera-stream references (a reconnect starts with a keyframe).
    pub streams: StreamDecoder,
    /// Its cache scope: results it computed answer only its own repeats, unless the server
    /// shares its cache.
    scope: Option<u64>,
}

impl Session {
    /// A new session on `state`'s server.
    pub fn new(state: &AppState) -> Self {
        let id = state.sessions.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Self { streams: StreamDecoder::new(), scope: (!state.shared_cache).then_some(id) }
    }
}

/// Decode a request into work for the model, and the content key its result is cached under:
/// the activations themselves (whatever codec carried them), or the image bytes.
fn prepare(
    state: &AppState,
    request: Request,
    streams: &mut StreamDecoder,
) -> Result<(ContentKey, Work), ServeError> {
    Ok(match request {
        Request::Features { frame, .. } => {
            let calibration = state.calibration.as_ref().map(|(c, _)| c.as_ref());
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

async fn serve_request(
    state: &AppState,
    request: Request,
    session: &mut Session,
) -> Result<Outcome, ServeError> {
    let start = std::time::Instant::now();
    let (key, work) = prepare(state, request, &mut session.streams)?;
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
    let request = match Request::decode(frame) {
        Ok(Request::Ping { payload, .. }) => {
            let received = payload.len() as u32;
            return Reply::Pong { id, received, load: state.engine.load() };
        }
        Ok(r) => Ok(r),
        Err(e) => Err(ServeError::from(e)),
    };
    match async { serve_request(state, request?, session).await }.await {
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
            log::debug!("request {id} refused: {e}");
            Reply::error(id, e.code(), e.to_string())
        }
    }
}
