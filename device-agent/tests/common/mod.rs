//! What the agent's tests share: reading the group socket as a member does.

use std::time::Duration;

use actix_codec::Framed;
use awc::BoxedSocket;
use awc::ws::{Codec, Frame, Message};
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use split_shared::group::relay::RelayFrame;

/// A member's `/group` socket.
pub type Socket = Framed<BoxedSocket, Codec>;

/// The next message (pings and pongs skipped), within 120 s.
pub async fn next(ws: &mut Socket) -> Frame {
    tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            match ws.next().await.expect("socket open").expect("valid frame") {
                Frame::Ping(_) | Frame::Pong(_) => continue,
                other => return other,
            }
        }
    })
    .await
    .expect("a message within 120 s")
}

/// The next control message (JSON text), relayed frames before it skipped.
pub async fn next_json(ws: &mut Socket) -> Value {
    loop {
        if let Frame::Text(t) = next(ws).await {
            return serde_json::from_slice(&t).unwrap();
        }
    }
}

/// The next frame relayed from member `peer` (control messages before it skipped), out of its
/// envelope.
pub async fn relayed(ws: &mut Socket, peer: u32) -> Vec<u8> {
    loop {
        if let Frame::Binary(b) = next(ws).await {
            let relayed = RelayFrame::parse(&b).unwrap();
            assert_eq!(relayed.peer, peer, "the reply names who sent it");
            return relayed.payload.to_vec();
        }
    }
}

/// Relay `frame` to member `peer` and wait for its reply.
pub async fn relay(ws: &mut Socket, peer: u32, frame: &[u8]) -> Vec<u8> {
    let envelope = RelayFrame { peer, payload: frame }.to_bytes();
    ws.send(Message::Binary(envelope.into())).await.unwrap();
    relayed(ws, peer).await
}
