//! The agent's life in a group: connect to `/group`, join (or start) a group, send status
//! heartbeats, answer relayed requests one at a time on a blocking thread, send the answers
//! back to whoever asked.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use awc::ws::{Frame, Message};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use split_shared::Boundary;
use split_shared::group::relay::RelayFrame;
use split_shared::group::{HEARTBEAT_INTERVAL_S, Hop, LlmStage, PowerState, Route};

use std::collections::{HashMap, VecDeque};

use split_shared::protocol::{ErrorCode, LlmErrorCode, LlmFrame, Reply, peek_llm_id};
use tokio::sync::mpsc;

use crate::Agent;
use crate::llm::{Conversations, Inbound};

/// Routes kept per sender before their frames arrive (a sender that sends routes and no
/// frames cannot grow this without end).
const MAX_ROUTES_PER_PEER: usize = 64;

/// What to send for one relayed request: its answer to the asker, or, as a middle stage, the
/// route and the features for the next stage.
async fn serve(
    agent: &Arc<Agent>,
    from: u32,
    request: Vec<u8>,
    route: Option<Route>,
) -> Result<Vec<Message>> {
    let id = split_shared::protocol::peek_request_id(&request).unwrap_or(0);
    let asker = route.as_ref().map_or(from, |r| r.answer_to);
    let worker = agent.clone();
    // Every hop from here goes through the relay. The last stage (or a request without a
    // route) is answered; a middle stage runs on and passes the rest of the route along.
    let last = route.as_ref().is_none_or(|r| r.stages[0].to == Boundary::LOGITS);
    if last {
        let reply = actix_web::rt::task::spawn_blocking(move || worker.answer(&request)).await?;
        let back = RelayFrame { peer: asker, payload: &reply.to_bytes() }.to_bytes();
        let mut out = Vec::new();
        if let Some(route) = &route {
            // The asker learns how every hop went, before the answer.
            let hops = route.hops_with(Hop::Relay);
            let report = json!({ "type": "signal", "to": asker, "data": { "hops": { "id": route.id, "list": hops } } });
            out.push(Message::Text(report.to_string().into()));
        }
        out.push(Message::Binary(back.into()));
        return Ok(out);
    }
    let route = route.context("a middle stage has a route")?;
    let (boundary, codec) = (route.stages[0].to, route.codec);
    let next = actix_web::rt::task::spawn_blocking(move || {
        worker.continue_request(&request, boundary, codec)
    })
    .await?;
    let onward = route.onward(Hop::Relay).context("a route with no stage after this one")?;
    let peer = onward.stages[0].peer;
    let next = match next {
        Ok(frame) => frame,
        Err(e) => {
            // The asker hears why, as a typed error of its request, instead of waiting.
            log::warn!("a pipeline stage failed: {e:#}");
            let reply = Reply::error(id, ErrorCode::Malformed, format!("pipeline stage: {e:#}"));
            let back = RelayFrame { peer: asker, payload: &reply.to_bytes() }.to_bytes();
            return Ok(vec![Message::Binary(back.into())]);
        }
    };
    let signal = json!({ "type": "signal", "to": peer, "data": { "route": onward } });
    Ok(vec![
        Message::Text(signal.to_string().into()),
        Message::Binary(RelayFrame { peer, payload: &next }.to_bytes().into()),
    ])
}

/// The peer numbers of a `members` list.
fn peers(members: &Value) -> Vec<u32> {
    members
        .as_array()
        .map(|list| list.iter().filter_map(|m| m["peer"].as_u64()).map(|p| p as u32).collect())
        .unwrap_or_default()
}

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
    let mut device = json!({
        "id": options.id, "name": options.name, "backend": "native", "msPerImage": ms_per_image,
    });
    if agent.llm().is_some() {
        device["llm"] = json!(true);
    }
    // Split chats' conversations, one per asker, and what they send back through the relay.
    let (out, mut replies) = mpsc::unbounded_channel::<Vec<u8>>();
    let mut chats = agent
        .llm()
        .map(|llm| Conversations::new(llm.clone(), &options.url, options.token.clone(), out));
    let hello = match &options.code {
        Some(code) => json!({ "type": "join", "code": code.to_uppercase(), "device": device }),
        None => json!({ "type": "create", "device": device }),
    };
    socket.send(Message::Text(hello.to_string().into())).await?;
    let mut tick = tokio::time::interval(Duration::from_secs(HEARTBEAT_INTERVAL_S));
    let mut joined = false;
    // Pipeline routes per sender, in order: the next frame from that sender follows the first.
    let mut routes: HashMap<u32, VecDeque<Route>> = HashMap::new();
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
                            Some("members") => {
                                if let Some(chats) = chats.as_mut() {
                                    chats.retain(&peers(&v["members"]));
                                }
                            }
                            Some("error") if !joined => {
                                bail!("the server refused to admit this device: {}: {}", v["code"], v["message"]);
                            }
                            Some("error") => log::warn!("the server refused a message: {}", v["message"]),
                            Some("signal") if v["data"]["route"].is_object() => {
                                let from = v["from"].as_u64().unwrap_or(0) as u32;
                                match Route::from_json(v["data"]["route"].clone()) {
                                    Ok(route) => {
                                        let queue = routes.entry(from).or_default();
                                        if queue.len() < MAX_ROUTES_PER_PEER {
                                            queue.push_back(route);
                                        }
                                    }
                                    Err(e) => {
                                        // The sender hears why instead of waiting for an answer.
                                        log::warn!("member {from} sent a bad {e}");
                                        let failed = json!({ "type": "signal", "to": from, "data": { "failed": {
                                            "id": v["data"]["route"]["id"], "code": "bad_route", "text": e } } });
                                        socket.send(Message::Text(failed.to_string().into())).await?;
                                    }
                                }
                            }
                            Some("signal") if v["data"]["llmStage"].is_object() => {
                                let from = v["from"].as_u64().unwrap_or(0) as u32;
                                match (LlmStage::from_json(v["data"]["llmStage"].clone()), chats.as_mut()) {
                                    (Ok(stage), Some(chats)) => chats.deliver(from, Inbound::Stage(stage.to)),
                                    // Without the model the open that follows is refused.
                                    (Ok(_), None) => {}
                                    (Err(e), _) => log::warn!("member {from} sent a bad {e}"),
                                }
                            }
                            Some("signal") if v["data"]["view"].is_object() => {
                                // No camera here: a fusion asking for this device's view hears so.
                                let failed = json!({ "type": "signal", "to": v["from"], "data": { "failed": {
                                    "id": v["data"]["view"]["id"], "code": "no_view",
                                    "text": "the native agent has no view to classify",
                                } } });
                                socket.send(Message::Text(failed.to_string().into())).await?;
                            }
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
                        if let Some(id) = peek_llm_id(&request) {
                            match chats.as_mut() {
                                Some(chats) => chats.deliver(from, Inbound::Frame(request)),
                                None => {
                                    let refused = LlmFrame::Error {
                                        id,
                                        code: LlmErrorCode::UnknownModel,
                                        message: "this member runs no language model (start the agent with --llm)".into(),
                                    };
                                    let back = RelayFrame { peer: from, payload: &refused.encode() }.to_bytes();
                                    socket.send(Message::Binary(back.into())).await?;
                                }
                            }
                            continue;
                        }
                        let route = routes.get_mut(&from).and_then(VecDeque::pop_front);
                        for message in serve(&agent, from, request, route).await? {
                            socket.send(message).await?;
                        }
                    }
                    Frame::Ping(p) => socket.send(Message::Pong(p)).await?,
                    Frame::Close(reason) => return Ok(format!("closed by the server: {reason:?}")),
                    _ => {}
                }
            }
            Some(bytes) = replies.recv() => socket.send(Message::Binary(bytes.into())).await?,
            _ = tick.tick() => {
                let status = json!({ "type": "status", "load": 0, "power": PowerState::Unknown });
                socket.send(Message::Text(status.to_string().into())).await?;
            }
        }
    }
}
