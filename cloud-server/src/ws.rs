//! One WebSocket session: binary request frames in, reply frames out, with a heartbeat.

use std::time::{Duration, Instant};

use actix_web::{HttpRequest, HttpResponse, rt, web};
use actix_ws::{AggregatedMessage, CloseCode, CloseReason};
use split_shared::cache::ContentKey;
use split_shared::codec::{DecodeContext, StreamDecoder};
use split_shared::protocol::{ErrorCode, MAX_FRAME_BYTES, Reply, Request, peek_request_id};

use crate::engine::{Outcome, Work};
use crate::error::ServeError;
use crate::routes::{AppState, CACHE_ENTRY_COST};

/// How often the server pings; half or less of [`CLIENT_TIMEOUT`] so one lost pong is tolerated.
const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(5);
/// A client silent for this long (no message, no pong) is dropped.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);

/// `GET /ws`: upgrade and serve the session on the current worker's event loop.
pub async fn websocket(
    req: HttpRequest,
    body: web::Payload,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let (response, session, stream) = actix_ws::handle(&req, body)?;
    // Frames over the limit are refused by the codec before they are buffered.
    let stream = stream
        .max_frame_size(MAX_FRAME_BYTES)
        .aggregate_continuations()
        .max_continuation_size(MAX_FRAME_BYTES);
    rt::spawn(serve_session(session, stream, state.into_inner()));
    Ok(response)
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
    streams: &mut StreamDecoder,
) -> Result<Outcome, ServeError> {
    let start = std::time::Instant::now();
    let (key, work) = prepare(state, request, streams)?;
    let decode_us = start.elapsed().as_micros().min(u128::from(u32::MAX)) as u32;
    let hit = state.cache.lock().ok().and_then(|mut c| c.get(&key));
    if let Some((from, top)) = hit {
        let timings =
            split_shared::protocol::ServerTimings { decode_us, cached: true, ..Default::default() };
        return Ok(Outcome { from, top, timings });
    }
    let mut outcome = state.engine.submit(work).await?;
    outcome.timings.decode_us += decode_us;
    if let Ok(mut c) = state.cache.lock() {
        c.insert(key, (outcome.from, outcome.top.clone()), CACHE_ENTRY_COST);
    }
    Ok(outcome)
}

/// Answer one binary frame; never fails: every problem becomes an error reply.
async fn answer(state: &AppState, frame: &[u8], streams: &mut StreamDecoder) -> Reply {
    let id = peek_request_id(frame).unwrap_or(0);
    let request = match Request::decode(frame) {
        Ok(Request::Ping { payload, .. }) => {
            let received = payload.len() as u32;
            return Reply::Pong { id, received, load: state.engine.load() };
        }
        Ok(r) => Ok(r),
        Err(e) => Err(ServeError::from(e)),
    };
    match async { serve_request(state, request?, streams).await }.await {
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

async fn serve_session(
    mut session: actix_ws::Session,
    mut stream: actix_ws::AggregatedMessageStream,
    state: std::sync::Arc<AppState>,
) {
    let mut last_seen = Instant::now();
    // Stream references live as long as the connection: a reconnect starts with a keyframe.
    let mut streams = StreamDecoder::new();
    let mut tick = tokio::time::interval(HEARTBEAT_INTERVAL);
    let close = loop {
        tokio::select! {
            msg = stream.recv() => {
                last_seen = Instant::now();
                match msg {
                    Some(Ok(AggregatedMessage::Binary(frame))) => {
                        let reply = answer(&state, &frame, &mut streams).await;
                        if session.binary(reply.to_bytes()).await.is_err() {
                            return;
                        }
                    }
                    Some(Ok(AggregatedMessage::Text(_))) => {
                        let reply = Reply::error(0, ErrorCode::UnsupportedMessage, "this endpoint takes binary frames only");
                        if session.binary(reply.to_bytes()).await.is_err() {
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
                    Some(Err(e)) => {
                        // Oversized or malformed WebSocket framing: the stream cannot be resynchronized.
                        log::debug!("closing session: {e}");
                        let reason = match e {
                            actix_ws::ProtocolError::Overflow => CloseReason {
                                code: CloseCode::Size,
                                description: Some(format!("message too large: the limit is {MAX_FRAME_BYTES} bytes")),
                            },
                            other => CloseReason { code: CloseCode::Protocol, description: Some(other.to_string()) },
                        };
                        break Some(reason);
                    }
                    None => return,
                }
            }
            _ = tick.tick() => {
                if last_seen.elapsed() > CLIENT_TIMEOUT {
                    break Some(CloseReason { code: CloseCode::Away, description: Some("heartbeat timeout".into()) });
                }
                if session.ping(b"").await.is_err() {
                    return;
                }
            }
        }
    };
    let _ = session.close(close).await;
}
