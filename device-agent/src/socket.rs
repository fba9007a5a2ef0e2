//! The agent's life in a group: connect to `/group`, join (or start) a group, send status
//! heartbeats, answer relayed requests one at a time on a blocking thread, send the answers
//! back to whoever asked.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use awc::ws::{Frame, Message};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use split_shared::group::relay::RelayFrame;
use split_shared::group::{HEARTBEAT_INTERVAL_S, PowerState};

use crate::Agent;

/// A callback with the group's join code.
pub type OnJoined = Arc<dyn Fn(&str) + Send + Sync>;

/// Where to connect and who to be.
#[derive(Clone)]
pub struct AgentOptions {
    /// The server's `/group` URL (`ws://host:port/group`).
    pub url: String,
    /// The group's join code; `None` starts a new group.
    pub code: Option<String>,
    /// Device id in the group.
    pub id: String,
    /// Name people see.
    pub name: String,
    /// The server's bearer token, when it requires one.
    pub token: Option<String>,
    /// Called with the group's code once joined.
    pub on_joined: Option<OnJoined>,
}

/// Join and serve until the connection ends; the close reason when the server closed it.
///
/// # Errors
/// The server unreachable, the join refused (with the server's code and message).
pub async fn run(agent: Arc<Agent>, options: AgentOptions) -> Result<String> {
    let ms_per_image = {
        let agent = agent.clone();
        actix_web::rt::task::spawn_blocking(move || agent.measure()).await??
    };
    log::info!("this device runs the network in {ms_per_image:.1} ms");
    let mut request = awc::Client::new().ws(options.url.as_str());
    if let Some(token) = &options.token {
        request = request.bearer_auth(token);
    }
    let (_, mut socket) = request
        .max_frame_size(split_shared::group::relay::MAX_RELAY_BYTES)
        .connect()
        .await
        .map_err(|e| anyhow::anyhow!("connecting to {}: {e}", options.url))?;
    let device = json!({
        "id": options.id, "name": options.name, "backend": "native", "ms_per_image": ms_per_image,
    });
    let hello = match &options.code {
        Some(code) => json!({ "type": "join", "code": code.to_uppercase(), "device": device }),
        None => json!({ "type": "create", "device": device }),
    };
    socket.send(Message::Text(hello.to_string().into())).await?;
    let mut tick = tokio::time::interval(Duration::from_secs(HEARTBEAT_INTERVAL_S));
    let mut joined = false;
    loop {
        tokio::select! {
            msg = socket.next() => {
                let Some(msg) = msg else { return Ok("the connection ended".into()) };
                match msg.context("reading the group socket")? {
                    Frame::Text(text) => {
                        let v: Value = serde_json::from_slice(&text).context("a control message")?;
                        match v["type"].as_str() {
                            Some("joined") => {
                                joined = true;
                                let code = v["code"].as_str().unwrap_or_default();
                                log::info!("in group {code} as peer {}", v["you"]);
                                if let Some(f) = &options.on_joined {
                                    f(code);
                                }
                            }
                            Some("error") if !joined => {
                                bail!("the server refused to admit this device: {}: {}", v["code"], v["message"]);
                            }
                            Some("error") => log::warn!("the server refused a message: {}", v["message"]),
                            // No WebRTC here: a peer's offer goes unanswered and it relays.
                            _ => {}
                        }
                    }
                    Frame::Binary(bytes) => {
                        let envelope = match RelayFrame::parse(&bytes) {
                            Ok(e) => e,
                            Err(e) => {
                                log::warn!("ignoring a relayed message: {e}");
                                continue;
                            }
                        };
                        let (from, request) = (envelope.peer, envelope.payload.to_vec());
                        let worker = agent.clone();
                        let reply = actix_web::rt::task::spawn_blocking(move || worker.answer(&request)).await?;
                        let back = RelayFrame { peer: from, payload: &reply.to_bytes() }.to_bytes();
                        socket.send(Message::Binary(back.into())).await?;
                    }
                    Frame::Ping(p) => socket.send(Message::Pong(p)).await?,
                    Frame::Close(reason) => return Ok(format!("closed by the server: {reason:?}")),
                    _ => {}
                }
            }
            _ = tick.tick() => {
                let status = json!({ "type": "status", "load": 0, "power": PowerState::Unknown });
                socket.send(Message::Text(status.to_string().into())).await?;
            }
        }
    }
}
