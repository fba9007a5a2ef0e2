//! `GET /group`: a device's socket in a device group. Control messages are JSON text
//! ([`split_shared::group::message`]); binary messages are frames for another member, in the
//! relay envelope ([`split_shared::group::relay`]), passed on with the sender's peer number in
//! place of the recipient's.
//!
//! A refused message is answered with an `error` and changes nothing: the connection, its group
//! and every other group go on. A device silent for [`HEARTBEAT_TIMEOUT_S`] seconds (no status,
//! no message) is dropped and leaves its group.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::{HttpRequest, HttpResponse, rt, web};
use actix_ws::{AggregatedMessage, CloseCode, CloseReason};
use split_shared::group::relay::{MAX_RELAY_BYTES, RelayFrame};
use split_shared::group::{
    ClientMessage, GroupErrorCode, HEARTBEAT_INTERVAL_S, HEARTBEAT_TIMEOUT_S, ServerMessage,
};
use tokio::sync::mpsc;

use crate::groups::{OUTBOX, Outbound, Refusal, Seat};
use crate::state::AppState;
use crate::ws::{Upgraded, checked_upgrade, framing_close, send};

/// `GET /group`: upgrade (with every check `/ws` makes) and serve the device.
pub async fn group_socket(
    req: HttpRequest,
    body: web::Payload,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let (response, upgraded) = checked_upgrade(&req, body, &state, MAX_RELAY_BYTES).await?;
    if let Some(upgraded) = upgraded {
        rt::spawn(serve_device(upgraded, state.into_inner()));
    }
    Ok(response)
}

/// One device's connection.
struct Device {
    session: actix_ws::Session,
    state: Arc<AppState>,
    outbox: mpsc::Sender<Outbound>,
    seat: Option<Seat>,
}

impl Device {
    async fn text(&mut self, message: &ServerMessage) -> bool {
        self.send_text(message.to_json()).await
    }

    /// Send a text message; false when the session is over (closed, or not reading for the
    /// write timeout).
    async fn send_text(&mut self, text: String) -> bool {
        self.state.metrics.sent(text.len());
        let sent = tokio::time::timeout(self.state.write_timeout, self.session.text(text));
        matches!(sent.await, Ok(Ok(())))
    }

    fn rate_limited(&self) -> Refusal {
        let message = format!(
            "over {} messages per second from this address; retry later",
            self.state.rate.rate()
        );
        (GroupErrorCode::RateLimited, message)
    }

    async fn refuse(&mut self, (code, message): Refusal) -> bool {
        self.state.metrics.refused(code.as_str());
        self.text(&ServerMessage::error(code, message)).await
    }

    fn not_joined() -> Refusal {
        (GroupErrorCode::NotJoined, "create or join a group first".into())
    }

    /// Handle a control message; false when the socket is gone.
    async fn control(&mut self, text: &str) -> bool {
        let message = match ClientMessage::parse(text) {
            Ok(m) => m,
            Err(refusal) => return self.refuse(refusal).await,
        };
        let now = Instant::now();
        let groups = self.state.groups.clone();
        match message {
            ClientMessage::Create { .. } | ClientMessage::Join { .. } if self.seat.is_some() => {
                let code = self.seat.as_ref().map(|s| s.code.clone()).unwrap_or_default();
                self.refuse((
                    GroupErrorCode::AlreadyJoined,
                    format!("this connection is in group {code}; leave it first"),
                ))
                .await
            }
            ClientMessage::Create { device } => {
                match groups.create(device, self.outbox.clone(), now) {
                    Ok((seat, joined)) => {
                        log::info!("device group {} started", seat.code);
                        self.seat = Some(seat);
                        self.text(&joined).await
                    }
                    Err(refusal) => self.refuse(refusal).await,
                }
            }
            ClientMessage::Join { code, device } => {
                match groups.join(&code, device, self.outbox.clone(), now) {
                    Ok((seat, joined)) => {
                        self.seat = Some(seat);
                        self.text(&joined).await
                    }
                    Err(refusal) => self.refuse(refusal).await,
                }
            }
            ClientMessage::Status { load, power, ms_per_image } => match &self.seat {
                Some(seat) => {
                    groups.status(seat, load, power, ms_per_image, now);
                    true
                }
                None => self.refuse(Self::not_joined()).await,
            },
            ClientMessage::Signal { to, data } => {
                let Some(seat) = self.seat.clone() else {
                    return self.refuse(Self::not_joined()).await;
                };
                let text = ServerMessage::Signal { from: seat.peer, data }.to_json();
                match groups.send_to(&seat, to, Outbound::Text(text)) {
                    Ok(()) => true,
                    Err(refusal) => self.refuse(refusal).await,
                }
            }
            ClientMessage::Leave => match self.seat.take() {
                Some(seat) => {
                    groups.leave(&seat, now);
                    true
                }
                None => self.refuse(Self::not_joined()).await,
            },
        }
    }

    /// Pass a relayed frame on; false when the socket is gone.
    async fn relay(&mut self, bytes: &[u8]) -> bool {
        let frame = match RelayFrame::parse(bytes) {
            Ok(f) => f,
            Err(e) => return self.refuse((GroupErrorCode::BadMessage, e.to_string())).await,
        };
        let Some(seat) = self.seat.clone() else {
            return self.refuse(Self::not_joined()).await;
        };
        let on = RelayFrame::readdressed(bytes, seat.peer);
        match self.state.groups.send_to(&seat, frame.peer, Outbound::Binary(on)) {
            Ok(()) => true,
            Err(refusal) => self.refuse(refusal).await,
        }
    }
}

async fn serve_device(upgraded: Upgraded, state: Arc<AppState>) {
    let Upgraded { session, mut stream, admitted } = upgraded;
    let (outbox, mut inbox) = mpsc::channel(OUTBOX);
    let mut device = Device { session, state: state.clone(), outbox, seat: None };
    let mut last_heard = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_secs(HEARTBEAT_INTERVAL_S));
    let mut drain = state.drain.subscribe();
    let close = loop {
        if *drain.borrow_and_update() {
            break Some(CloseReason {
                code: CloseCode::Restart,
                description: Some("server shutting down: reconnect".into()),
            });
        }
        tokio::select! {
            msg = stream.recv() => {
                let heard = Instant::now();
                let going = match msg {
                    Some(Ok(AggregatedMessage::Text(text))) => {
                        state.metrics.received(text.len());
                        last_heard = heard;
                        if let Some(seat) = &device.seat {
                            state.groups.seen(seat, heard);
                        }
                        if state.rate.allow(admitted.ip, heard) {
                            device.control(&text).await
                        } else {
                            device.refuse(device.rate_limited()).await
                        }
                    }
                    Some(Ok(AggregatedMessage::Binary(bytes))) => {
                        state.metrics.received(bytes.len());
                        last_heard = heard;
                        if state.rate.allow(admitted.ip, heard) {
                            device.relay(&bytes).await
                        } else {
                            device.refuse(device.rate_limited()).await
                        }
                    }
                    Some(Ok(AggregatedMessage::Ping(bytes))) => device.session.pong(&bytes).await.is_ok(),
                    Some(Ok(AggregatedMessage::Pong(_))) => true,
                    Some(Ok(AggregatedMessage::Close(reason))) => break reason,
                    Some(Err(e)) => break Some(framing_close(&e, MAX_RELAY_BYTES, &state)),
                    None => break None,
                };
                if !going {
                    break None;
                }
            }
            Some(out) = inbox.recv() => {
                let ok = match out {
                    Outbound::Text(text) => device.send_text(text).await,
                    Outbound::Binary(bytes) => send(&mut device.session, bytes, &state).await,
                };
                if !ok {
                    break None;
                }
            }
            _ = tick.tick() => {
                if last_heard.elapsed() > Duration::from_secs(HEARTBEAT_TIMEOUT_S) {
                    break Some(CloseReason {
                        code: CloseCode::Away,
                        description: Some(format!("no message for {HEARTBEAT_TIMEOUT_S} s: send status heartbeats")),
                    });
                }
                if device.session.ping(b"").await.is_err() {
                    break None;
                }
            }
            Ok(()) = drain.changed() => continue,
        }
    };
    if let Some(seat) = device.seat.take() {
        state.groups.leave(&seat, Instant::now());
    }
    drop(admitted);
    let _ = device.session.close(close).await;
}
