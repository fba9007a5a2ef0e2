//! The socket loop: one WebSocket session, binary request frames in, reply frames out, with a
//! heartbeat. What a frame means is [`crate::service`]'s business.

use std::time::{Duration, Instant};

use actix_web::{HttpRequest, HttpResponse, rt, web};
use actix_ws::{AggregatedMessage, CloseCode, CloseReason};
use split_shared::codec::StreamDecoder;
use split_shared::protocol::{ErrorCode, MAX_FRAME_BYTES, Reply};

use crate::service::answer;
use crate::state::AppState;

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
