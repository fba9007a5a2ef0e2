//! The socket loop: one WebSocket session, binary request frames in, reply frames out, with a
//! heartbeat. What a frame means is [`crate::service`]'s business.

use std::time::{Duration, Instant};

use actix_web::{HttpRequest, HttpResponse, rt, web};
use actix_ws::{AggregatedMessage, CloseCode, CloseReason};
use split_shared::protocol::{ErrorCode, MAX_FRAME_BYTES, NO_GAP, Reply};

use crate::frame_guard::{FrameGuard, is_overflow};
use crate::service::{Session, answer};
use crate::state::AppState;

/// How often the server pings; half or less of [`CLIENT_TIMEOUT`] so one lost pong is tolerated.
const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(5);
/// A client silent for this long (no message, no pong) is dropped.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether the page that opens this WebSocket may: no `Origin` (a native client), the server's
/// own host, or an origin the operator allowed. Browsers always send `Origin`, so another site's
/// page cannot drive this server through its visitors.
fn origin_allowed(req: &HttpRequest, state: &AppState) -> Result<(), String> {
    let Some(origin) = req.headers().get(actix_web::http::header::ORIGIN) else {
        return Ok(());
    };
    let origin = origin.to_str().unwrap_or_default();
    let host = req.connection_info().host().to_string();
    let same_host = origin.split_once("://").is_some_and(|(_, rest)| rest == host);
    let listed = crate::cors::listed(&state.allow_origins, origin);
    if same_host || listed {
        Ok(())
    } else {
        Err(format!(
            "origin {origin:?} may not open /ws on {host}; the operator can allow it with --allow-origin"
        ))
    }
}

/// The subprotocol a browser client offers (and the server selects) beside its token.
pub const SUBPROTOCOL: &str = "split.v1";
/// Prefix of the subprotocol that carries a browser's bearer token.
pub const TOKEN_SUBPROTOCOL_PREFIX: &str = "bearer.";

/// Whether the request carries the operator's token, when there is one: `Authorization:
/// Bearer TOKEN` or a `bearer.TOKEN` subprotocol. Every way of failing answers the same, so a
/// client learns nothing about a token it guessed wrong.
fn authorized(req: &HttpRequest, state: &AppState) -> bool {
    let Some(token) = &state.token else { return true };
    let headers = req.headers();
    let bearer = headers
        .get(actix_web::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let offered = headers
        .get_all(actix_web::http::header::SEC_WEBSOCKET_PROTOCOL)
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|p| p.trim().strip_prefix(TOKEN_SUBPROTOCOL_PREFIX));
    bearer.into_iter().chain(offered).any(|t| token.matches(t))
}

/// The client's address: the peer's, or — when the peer is a trusted proxy — the last address
/// in `X-Forwarded-For`, the one that proxy saw (earlier entries are whatever the client sent).
fn client_ip(req: &HttpRequest, state: &AppState) -> Option<std::net::IpAddr> {
    let peer = req.peer_addr()?.ip();
    if !state.trusted_proxies.iter().any(|net| net.contains(peer)) {
        return Some(peer);
    }
    let forwarded = req
        .headers()
        .get_all("x-forwarded-for")
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .last()
        .and_then(|a| a.trim().parse().ok());
    Some(forwarded.unwrap_or(peer))
}

/// The connection's raw bytes as actix-web boxes them.
pub(crate) type RawStream = std::pin::Pin<
    Box<dyn futures_util::Stream<Item = Result<web::Bytes, actix_web::error::PayloadError>>>,
>;

/// A socket that passed every check: its session, its messages, and its place among the open
/// connections (held for the session's life).
pub(crate) struct Upgraded {
    pub session: actix_ws::Session,
    pub stream: actix_ws::AggregatedMessageStream,
    pub admitted: crate::limits::Admitted,
}

/// The checks every WebSocket of this server passes (origin, draining, token, connection
/// limits) and the upgrade, with messages over `max_bytes` refused from their header. The
/// response, and the socket when it was accepted.
pub(crate) async fn checked_upgrade(
    req: &HttpRequest,
    body: web::Payload,
    state: &AppState,
    max_bytes: usize,
) -> actix_web::Result<(HttpResponse, Option<Upgraded>)> {
    if let Err(why) = origin_allowed(req, state) {
        log::warn!("refused a WebSocket from {:?}: {why}", req.peer_addr());
        state.metrics.refused("origin");
        return Ok((HttpResponse::Forbidden().body(why), None));
    }
    if state.draining() {
        state.metrics.refused("draining");
        let body = "this server is shutting down; connect again (to another replica)";
        return Ok((HttpResponse::ServiceUnavailable().body(body), None));
    }
    if !authorized(req, state) {
        state.metrics.refused("unauthorized");
        log::warn!("refused a WebSocket from {:?}: missing or wrong token", req.peer_addr());
        let response = HttpResponse::Unauthorized()
            .insert_header((actix_web::http::header::WWW_AUTHENTICATE, "Bearer"))
            .body(
                "this server requires a token: Authorization: Bearer, or subprotocol bearer.TOKEN",
            );
        return Ok((response, None));
    }
    let admitted = match state.connections.admit(client_ip(req, state)) {
        Ok(a) => a,
        Err(why) => {
            log::warn!("refused a WebSocket from {:?}: {why}", req.peer_addr());
            state.metrics.refused("connections");
            return Ok((HttpResponse::ServiceUnavailable().body(why), None));
        }
    };
    // A message over the limit is refused from its frame header (see `frame_guard`): actix-ws
    // alone would buffer the whole frame before comparing its length.
    let guarded = FrameGuard::new(body.into_inner(), max_bytes);
    let mut raw = actix_web::dev::Payload::Stream { payload: Box::pin(guarded) as RawStream };
    let body = <web::Payload as actix_web::FromRequest>::from_request(req, &mut raw).await?;
    // A browser that offered `split.v1` (with its token) must see it selected, or it drops the
    // connection; a client that offered nothing gets no subprotocol.
    let (response, session, stream) = actix_ws::handle_with_protocols(req, body, &[SUBPROTOCOL])?;
    let stream =
        stream.max_frame_size(max_bytes).aggregate_continuations().max_continuation_size(max_bytes);
    Ok((response, Some(Upgraded { session, stream, admitted })))
}

/// `GET /ws`: upgrade and serve the session on the current worker's event loop.
pub async fn websocket(
    req: HttpRequest,
    body: web::Payload,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let (response, upgraded) = checked_upgrade(&req, body, &state, MAX_FRAME_BYTES).await?;
    if let Some(Upgraded { session, stream, admitted }) = upgraded {
        rt::spawn(serve_session(session, stream, state.into_inner(), admitted));
    }
    Ok(response)
}

/// The close reason for a framing error on a socket whose messages may be `max_bytes` long.
pub(crate) fn framing_close(
    e: &actix_ws::ProtocolError,
    max_bytes: usize,
    state: &AppState,
) -> CloseReason {
    if is_overflow(e) {
        state.metrics.refused("too_large");
        log::warn!("closing a session that sent a message over {max_bytes} bytes");
        CloseReason {
            code: CloseCode::Size,
            description: Some(format!("message too large: the limit is {max_bytes} bytes")),
        }
    } else {
        CloseReason { code: CloseCode::Protocol, description: Some(e.to_string()) }
    }
}

/// What reading the socket gave: a message, a framing error, or the end of the connection.
pub(crate) type Incoming = Option<Result<AggregatedMessage, actix_ws::ProtocolError>>;

/// What a socket's loop does after a message that is not a binary frame.
pub(crate) enum Then {
    /// Read the next message.
    Go,
    /// Close with this reason (the client's close, or a framing error).
    Close(Option<CloseReason>),
    /// The connection is gone: nothing to close.
    Gone,
}

/// Every message but a binary frame, as each socket treats it: a text message answered with
/// `refusal` (the socket's own error frame), pings answered, pongs ignored, a close or a
/// framing error (over `max_bytes`, or malformed) ending the loop.
pub(crate) async fn other_message(
    session: &mut actix_ws::Session,
    msg: Incoming,
    refusal: impl FnOnce() -> Vec<u8>,
    max_bytes: usize,
    state: &AppState,
) -> Then {
    match msg {
        Some(Ok(AggregatedMessage::Text(_))) => {
            if send(session, refusal(), state).await {
                Then::Go
            } else {
                Then::Gone
            }
        }
        Some(Ok(AggregatedMessage::Ping(bytes))) => {
            if session.pong(&bytes).await.is_ok() {
                Then::Go
            } else {
                Then::Gone
            }
        }
        Some(Ok(AggregatedMessage::Pong(_) | AggregatedMessage::Binary(_))) => Then::Go,
        Some(Ok(AggregatedMessage::Close(reason))) => Then::Close(reason),
        Some(Err(e)) => {
            // Oversized or malformed WebSocket framing: the stream cannot be resynchronized.
            log::debug!("closing session: {e}");
            Then::Close(Some(framing_close(&e, max_bytes, state)))
        }
        None => Then::Gone,
    }
}

/// Send a binary message; false when the session is over (closed, or the client stopped
/// reading for the write timeout: the socket's buffers and the session's outbound queue are
/// full).
pub(crate) async fn send(
    session: &mut actix_ws::Session,
    bytes: Vec<u8>,
    state: &AppState,
) -> bool {
    state.metrics.sent(bytes.len());
    match tokio::time::timeout(state.write_timeout, session.binary(bytes)).await {
        Ok(Ok(())) => true,
        Ok(Err(_)) => false,
        Err(_) => {
            log::warn!("dropping a session that stopped reading its replies");
            false
        }
    }
}

/// Whether a message leaves the session going (anything but a close, an error or the end).
fn continues(msg: &Incoming) -> bool {
    matches!(msg, Some(Ok(m)) if !matches!(m, AggregatedMessage::Close(_)))
}

/// A pong stamped with the time since the connection's previous binary frame was read
/// ([`Reply::Pong`]'s `gap_us`: a padded ping's upload time when it follows a bare one); any
/// other reply as it is.
fn with_gap(mut reply: Reply, gap: Option<Duration>) -> Reply {
    if let Reply::Pong { gap_us, .. } = &mut reply {
        *gap_us = gap.map_or(NO_GAP, |g| g.as_micros().min(u128::from(NO_GAP - 1)) as u32);
    }
    reply
}

/// A binary frame read at `now`: the time since the one before it ([`with_gap`]'s `gap`), and
/// `now` kept as the last.
fn since_last(last_frame: &mut Option<Instant>, now: Instant) -> Option<Duration> {
    last_frame.replace(now).map(|before| now - before)
}

/// The model a frame addresses, which its reply echoes (Lite0's byte for an unreadable header).
fn model_of(frame: &[u8]) -> u8 {
    split_shared::protocol::peek_model(frame)
        .unwrap_or(split_shared::protocol::MODEL_EFFICIENTNET_LITE0)
}

async fn serve_session(
    mut session: actix_ws::Session,
    mut stream: actix_ws::AggregatedMessageStream,
    state: std::sync::Arc<AppState>,
    // Held for the session's life: its place among the open connections.
    admitted: crate::limits::Admitted,
) {
    let mut last_seen = Instant::now();
    // Stream references live as long as the connection: a reconnect starts with a keyframe.
    let mut client = Session::new(&state);
    let mut tick = tokio::time::interval(HEARTBEAT_INTERVAL);
    // One message read while a request was being answered, handled next, and when it was read.
    let mut ahead: Option<(Incoming, Instant)> = None;
    // When the last binary frame was read: a pong tells its ping's distance from it.
    let mut last_frame: Option<Instant> = None;
    let mut rate_warned = false;
    state.metrics.session_opened();
    // Shutting down: close between requests with 1012, which clients take as "reconnect now".
    let mut drain = state.drain.subscribe();
    let restart = || CloseReason {
        code: CloseCode::Restart,
        description: Some("server shutting down: reconnect".into()),
    };
    let close = loop {
        let (msg, arrived) = match ahead.take() {
            Some(read) => read,
            None if *drain.borrow_and_update() => break Some(restart()),
            None => tokio::select! {
                msg = stream.recv() => (msg, Instant::now()),
                Ok(()) = drain.changed() => continue,
                _ = tick.tick() => {
                    if last_seen.elapsed() > CLIENT_TIMEOUT {
                        break Some(CloseReason { code: CloseCode::Away, description: Some("heartbeat timeout".into()) });
                    }
                    if session.ping(b"").await.is_err() {
                        return;
                    }
                    continue;
                }
            },
        };
        last_seen = Instant::now();
        match msg {
            Some(Ok(AggregatedMessage::Binary(frame)))
                if !state.rate.allow(admitted.ip, Instant::now()) =>
            {
                since_last(&mut last_frame, arrived);
                state.metrics.received(frame.len());
                state.metrics.refused("rate_limited");
                let id = split_shared::protocol::peek_request_id(&frame).unwrap_or(0);
                let message = state.rate.refusal("requests");
                if !rate_warned {
                    // Once per session: the log must not become the flood.
                    log::warn!("rate-limiting requests from {:?}", admitted.ip);
                    rate_warned = true;
                }
                let reply = Reply::error(id, ErrorCode::RateLimited, message);
                if !send(&mut session, reply.to_bytes_for(model_of(&frame)), &state).await {
                    return;
                }
            }
            Some(Ok(AggregatedMessage::Binary(frame))) => {
                let gap = since_last(&mut last_frame, arrived);
                state.metrics.received(frame.len());
                // Keep reading while the request is answered: when the client closes or drops
                // the connection meanwhile, the answer is abandoned (the model skips queued work
                // nobody waits for); any other message waits for its turn.
                let work = answer(&state, &frame, &mut client);
                tokio::pin!(work);
                let reply = loop {
                    tokio::select! {
                        // A frame already read is looked at before the finished work: a ping
                        // sent behind a request is answered first even when both are ready.
                        biased;
                        next = stream.recv(), if ahead.is_none() => {
                            let arrived = Instant::now();
                            // A ping is answered now rather than after the request: its pong
                            // times the link, not this request's compute (a client planning
                            // on it would see the server's work as round trip).
                            // Only a ping spends a request of the rate here: any other frame
                            // spends it in its turn, once.
                            if let Some(Ok(AggregatedMessage::Binary(ping))) = &next
                                && let Some(pong) = crate::service::answer_ping(&state, ping)
                                && state.rate.allow(admitted.ip, Instant::now())
                            {
                                state.metrics.received(ping.len());
                                let pong = with_gap(pong, since_last(&mut last_frame, arrived));
                                if !send(&mut session, pong.to_bytes_for(model_of(ping)), &state).await {
                                    return;
                                }
                                continue;
                            }
                            let going = continues(&next);
                            ahead = Some((next, arrived));
                            if !going {
                                break None;
                            }
                        }
                        reply = &mut work => break Some(reply),
                    }
                };
                if let Some(reply) = reply
                    && !send(
                        &mut session,
                        with_gap(reply, gap).to_bytes_for(model_of(&frame)),
                        &state,
                    )
                    .await
                {
                    return;
                }
            }
            other => {
                let refusal = || {
                    state.metrics.refused("unsupported_message");
                    let message = "this endpoint takes binary frames only";
                    Reply::error(0, ErrorCode::UnsupportedMessage, message).to_bytes()
                };
                match other_message(&mut session, other, refusal, MAX_FRAME_BYTES, &state).await {
                    Then::Go => {}
                    Then::Close(reason) => break reason,
                    Then::Gone => return,
                }
            }
        }
    };
    let _ = session.close(close).await;
}
