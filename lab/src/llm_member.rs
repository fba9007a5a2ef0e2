//! The U-split through a member of a device group, for `llm-placements --member-front K`: the
//! edge (this process, the asker) keeps the embedding, blocks `0..K` and the head; a native
//! device agent runs blocks `K..--blocks`; the server the rest (docs/llm.md, "Through a device
//! group"). The agent is a laptop on a link of its own: it runs in a thread and runtime of its
//! own (as another device would), joins through its own link emulator, and opens its socket to
//! the server's `/llm` through that emulator too. The asker's frames go through the server's
//! relay (`/group`) over the asker's link, so every token crosses the asker's link and the
//! member's link twice each way in all: up to the relay and the member, on to the server's
//! blocks, back to the member, back through the relay.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use actix_web::web::Bytes;
use anyhow::{Context, Result, bail};
use awc::ws::{Frame, Message};
use device_agent::{Agent, AgentOptions, LlmMember};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use split_shared::group::relay::RelayFrame;

use crate::llm_placements::{Played, Setup, Wire, split};
use crate::loadgen::{Socket, connect};

/// Positions a conversation at the agent may reach.
const MEMBER_POSITIONS: u32 = 4096;

/// The asker's membership in a group with one agent that runs chat blocks.
pub(crate) struct Member {
    /// The asker's `/group` socket (through the asker's link).
    socket: Socket,
    /// The agent's peer number.
    peer: u32,
}

async fn next_json(socket: &mut Socket, timeout: Duration) -> Result<Value> {
    tokio::time::timeout(timeout, async {
        loop {
            match socket.next().await {
                Some(Ok(Frame::Text(t))) => return Ok(serde_json::from_slice(&t)?),
                Some(Ok(_)) => continue,
                Some(Err(e)) => bail!("the group socket: {e}"),
                None => bail!("the group socket closed"),
            }
        }
    })
    .await
    .context("no group message in time")?
}

impl Member {
    /// Start a group on `asker_group_url`, and an agent on `member_group_url` (another link)
    /// that joins it with the model `model` and runs chat blocks; wait until it is in.
    pub(crate) async fn start(
        asker_group_url: &str,
        member_group_url: String,
        model: PathBuf,
        timeout: Duration,
    ) -> Result<Self> {
        let mut socket = connect(asker_group_url).await?;
        let device = json!({ "id": "lab-asker", "name": "lab asker", "backend": "cpu", "msPerImage": 100.0 });
        let hello = json!({ "type": "create", "device": device });
        socket.send(Message::Text(hello.to_string().into())).await?;
        let joined = next_json(&mut socket, timeout).await?;
        let code = joined["code"].as_str().context("the group's join code")?.to_string();
        let weights = split_paths::weights_file();
        std::thread::spawn(move || {
            let ran = actix_web::rt::System::new().block_on(async move {
                let llm = LlmMember::load(&model, MEMBER_POSITIONS)?;
                let agent = Agent::load(&weights, None)?.with_llm(llm);
                let options = AgentOptions {
                    url: member_group_url,
                    code: Some(code),
                    id: "lab-member".into(),
                    name: "lab member".into(),
                    token: None,
                    on_joined: None,
                };
                device_agent::run(Arc::new(agent), options).await
            });
            if let Err(e) = ran {
                eprintln!("llm-placements: the member agent stopped: {e:#}");
            }
        });
        loop {
            let message = next_json(&mut socket, timeout).await?;
            if message["type"] == "members" {
                let members = message["members"].as_array().cloned().unwrap_or_default();
                if let Some(m) = members.iter().find(|m| m["llm"] == json!(true)) {
                    let peer = m["peer"].as_u64().context("the member's peer")? as u32;
                    return Ok(Self { socket, peer });
                }
            }
        }
    }

    async fn send_json(&mut self, message: Value) -> Result<()> {
        self.socket
            .send(Message::Text(message.to_string().into()))
            .await
            .context("the group socket")
    }
}

impl Wire for Member {
    async fn post_frame(&mut self, frame: Vec<u8>) -> Result<()> {
        let envelope = RelayFrame { peer: self.peer, payload: &frame }.to_bytes();
        self.socket.send(Message::Binary(envelope.into())).await.context("relaying a frame")
    }

    async fn next_frame(&mut self, timeout: Duration) -> Result<Bytes> {
        tokio::time::timeout(timeout, async {
            loop {
                match self.socket.next().await {
                    Some(Ok(Frame::Binary(b))) => {
                        let relayed = RelayFrame::parse(&b)?;
                        if relayed.peer == self.peer {
                            return Ok(Bytes::copy_from_slice(relayed.payload));
                        }
                    }
                    // The group's member lists and signals: not the conversation's.
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => bail!("the group socket: {e}"),
                    None => bail!("the group socket closed"),
                }
            }
        })
        .await
        .context("no reply from the member in time")?
    }
}

/// One conversation through the member: its stage ends at `s.blocks`, the edge keeps `front`.
pub(crate) async fn split_via(m: &mut Member, s: &Setup<'_>, front: usize) -> Result<Played> {
    // A heartbeat before each conversation keeps the asker in the group between them.
    m.send_json(json!({ "type": "status", "load": 0, "power": { "state": "unknown" } })).await?;
    let stage =
        json!({ "type": "signal", "to": m.peer, "data": { "llmStage": { "to": s.blocks } } });
    m.send_json(stage).await?;
    split(m, s, true, s.chunk, front).await
}
