//! What the agent's tests share: reading the group socket as a member does.

use std::time::Duration;

use actix_codec::Framed;
use awc::BoxedSocket;
use awc::ws::{Codec, Frame};
use futures_util::StreamExt;
use serde_json::Value;

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
