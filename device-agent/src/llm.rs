//! The language model's middle blocks for the group's split chats
//! ([`split_shared::group::llm_stage`]): an asker's `/llm` frames arrive in the relay envelope,
//! [`MemberStage`] runs this member's blocks on a KV cache of its own, and the rows go on to the
//! server's `/llm` over a socket this member opens for the asker's conversation (or, when this
//! member runs the rest, the last row goes back). The server's replies go back to the asker
//! unchanged.
//!
//! One conversation per asker, each a task of its own that takes the asker's frames in order,
//! so one asker's long prefill never holds another's tokens. A conversation ends when its
//! asker leaves the group, opens a new one, or this member leaves; when the server's socket
//! drops, the asker gets `evicted` (open again and send the kept hidden states again, as after
//! the server evicted it) and the next open connects again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use anyhow::{Context, Result};
use awc::ws::{Frame, Message};
use futures_util::SinkExt;
use futures_util::stream::{SplitSink, SplitStream, StreamExt};
use split_shared::group::relay::RelayFrame;
use split_shared::models::smollm2::Smollm2;
use split_shared::protocol::{LlmErrorCode, LlmFrame, MAX_LLM_FRAME_BYTES, peek_llm_id};
use split_shared::runtime::{MemberStage, StageAction};
use tokio::sync::mpsc;

/// Frames and signals one asker may have waiting at this member: an asker that sends faster
/// than the blocks run gets `rate_limited` for the frames past it.
pub const MAX_WAITING_PER_ASKER: usize = 64;

/// The model this member runs blocks of, and how long its conversations may grow.
pub struct LlmMember {
    model: Arc<Smollm2>,
    max_positions: u32,
}

impl LlmMember {
    /// Read SmolLM2's GGUF file.
    ///
    /// # Errors
    /// A missing or invalid file, with its path.
    pub fn load(path: &std::path::Path, max_positions: u32) -> Result<Self> {
        let bytes = std::fs::read(path)
            .with_context(|| format!("reading the language model {}", path.display()))?;
        let (model, _) = Smollm2::load(&bytes)
            .with_context(|| format!("loading the language model {}", path.display()))?;
        Ok(Self { model: Arc::new(model), max_positions })
    }
}

/// What an asker sent, in its order.
pub(crate) enum Inbound {
    /// An `llmStage` signal: where this member's stage of its next conversation ends.
    Stage(u16),
    /// An `/llm` frame.
    Frame(Vec<u8>),
}

/// One asker's conversation: the queue its task reads.
struct Handle {
    inbox: mpsc::Sender<Inbound>,
    task: actix_web::rt::task::JoinHandle<()>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        // The task owns the server's socket: ending it closes that too.
        self.task.abort();
    }
}

/// The askers' conversations at this member.
pub(crate) struct Conversations {
    member: Arc<LlmMember>,
    /// The server's `/llm` socket.
    url: String,
    token: Option<String>,
    /// Relay envelopes for the group socket.
    out: mpsc::UnboundedSender<Vec<u8>>,
    by_asker: HashMap<u32, Handle>,
}

/// The server's `/llm` beside its `/group`.
fn llm_url(group_url: &str) -> String {
    match group_url.strip_suffix("/group") {
        Some(base) => format!("{base}/llm"),
        None => format!("{}/llm", group_url.trim_end_matches('/')),
    }
}

fn envelope(peer: u32, frame: &LlmFrame) -> Vec<u8> {
    RelayFrame { peer, payload: &frame.encode() }.to_bytes()
}

fn error(id: u64, code: LlmErrorCode, message: impl Into<String>) -> LlmFrame {
    LlmFrame::Error { id, code, message: message.into() }
}

impl Conversations {
    pub(crate) fn new(
        member: Arc<LlmMember>,
        group_url: &str,
        token: Option<String>,
        out: mpsc::UnboundedSender<Vec<u8>>,
    ) -> Self {
        let url = llm_url(group_url);
        Self { member, url, token, out, by_asker: HashMap::new() }
    }

    /// Hand `item` to `asker`'s conversation, starting one for a new asker.
    pub(crate) fn deliver(&mut self, asker: u32, item: Inbound) {
        let handle = self.by_asker.entry(asker).or_insert_with(|| {
            let (inbox, rx) = mpsc::channel(MAX_WAITING_PER_ASKER);
            let stage = MemberStage::new(self.member.model.clone(), self.member.max_positions);
            let task = actix_web::rt::spawn(converse(
                stage,
                self.url.clone(),
                self.token.clone(),
                asker,
                rx,
                self.out.clone(),
            ));
            Handle { inbox, task }
        });
        if let Err(mpsc::error::TrySendError::Full(Inbound::Frame(frame))) =
            handle.inbox.try_send(item)
        {
            let id = peek_llm_id(&frame).unwrap_or(0);
            let why = format!("{MAX_WAITING_PER_ASKER} frames already wait at this member");
            let _ = self.out.send(envelope(asker, &error(id, LlmErrorCode::RateLimited, why)));
        }
    }

    /// Keep only the conversations of askers still in the group.
    pub(crate) fn retain(&mut self, present: &[u32]) {
        self.by_asker.retain(|asker, _| present.contains(asker));
    }
}

type Socket = actix_codec::Framed<awc::BoxedSocket, awc::ws::Codec>;
type Upstream = SplitSink<Socket, Message>;
type Replies = SplitStream<Socket>;

/// The server's part of one conversation: the socket's sending half and the task that passes
/// its replies to the asker.
struct Server {
    sink: Upstream,
    reader: actix_web::rt::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// Connect to the server's `/llm`, send `open`, and return the socket with the server's answer.
async fn connect(
    url: &str,
    token: Option<&str>,
    open: &LlmFrame,
) -> Result<(Upstream, Replies, LlmFrame)> {
    let mut request = awc::Client::new().ws(url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let (_, socket) = request
        .max_frame_size(MAX_LLM_FRAME_BYTES)
        .connect()
        .await
        .map_err(|e| anyhow::anyhow!("connecting to {url}: {e}"))?;
    let (mut sink, mut stream) = socket.split();
    sink.send(Message::Binary(open.encode().into())).await?;
    while let Some(frame) = stream.next().await {
        match frame? {
            Frame::Binary(bytes) => return Ok((sink, stream, LlmFrame::decode(&bytes)?)),
            Frame::Close(reason) => anyhow::bail!("{url} closed: {reason:?}"),
            _ => {}
        }
    }
    anyhow::bail!("{url} ended before answering the open")
}

/// Serve one asker's frames until it goes.
async fn converse(
    stage: MemberStage<Smollm2>,
    url: String,
    token: Option<String>,
    asker: u32,
    mut inbox: mpsc::Receiver<Inbound>,
    out: mpsc::UnboundedSender<Vec<u8>>,
) {
    let stage = Arc::new(Mutex::new(stage));
    let reply = |frame: &LlmFrame| {
        let _ = out.send(envelope(asker, frame));
    };
    let mut to = None;
    let mut server: Option<Server> = None;
    while let Some(item) = inbox.recv().await {
        let frame = match item {
            Inbound::Stage(end) => {
                to = Some(end);
                continue;
            }
            Inbound::Frame(frame) => frame,
        };
        let id = peek_llm_id(&frame).unwrap_or(0);
        let worker = stage.clone();
        let action = actix_web::rt::task::spawn_blocking(move || {
            worker.lock().unwrap_or_else(PoisonError::into_inner).handle(&frame, to)
        })
        .await;
        let action = match action {
            Ok(action) => action,
            Err(e) => {
                reply(&error(id, LlmErrorCode::Internal, format!("the blocks failed: {e}")));
                continue;
            }
        };
        match action {
            StageAction::Reply(frame) => {
                if let LlmFrame::Opened { first, end, .. } = frame {
                    to = None;
                    server = None;
                    log::info!("split chat of member {asker}: blocks {first}..{end} here");
                }
                reply(&frame);
            }
            StageAction::Nothing => {}
            StageAction::OpenUpstream { upstream, opened } => {
                to = None;
                server = None;
                match connect(&url, token.as_deref(), &upstream).await {
                    Ok((sink, stream, LlmFrame::Opened { first: to, end, .. })) => {
                        if let LlmFrame::Opened { first, .. } = opened {
                            log::info!(
                                "split chat of member {asker}: blocks {first}..{to} here, \
                                 {to}..{end} on the server"
                            );
                        }
                        let reader = actix_web::rt::spawn(pass_back(
                            stream,
                            stage.clone(),
                            asker,
                            out.clone(),
                        ));
                        server = Some(Server { sink, reader });
                        reply(&opened);
                    }
                    Ok((_, _, refused)) => {
                        // The server's refusal (its budget, its rate) is the asker's answer.
                        close(&stage);
                        reply(&refused);
                    }
                    Err(e) => {
                        close(&stage);
                        let why = format!("this member cannot reach the server's blocks: {e:#}");
                        reply(&error(id, LlmErrorCode::Internal, why));
                    }
                }
            }
            StageAction::Forward(frame) => {
                let sent = match server.as_mut() {
                    Some(s) => s.sink.send(Message::Binary(frame.encode().into())).await.is_ok(),
                    None => false,
                };
                if !sent {
                    server = None;
                    close(&stage);
                    reply(&lost(id));
                }
            }
        }
    }
}

fn close(stage: &Mutex<MemberStage<Smollm2>>) {
    stage.lock().unwrap_or_else(PoisonError::into_inner).close();
}

/// The refusal an asker gets once the server's part of its conversation is gone.
fn lost(id: u64) -> LlmFrame {
    error(
        id,
        LlmErrorCode::Evicted,
        "the server's part of this conversation was lost; open it again and send the kept \
         hidden states again",
    )
}

/// Pass the server's replies to the asker as they come; when the socket ends, the conversation
/// is over here too and the asker hears so.
async fn pass_back(
    mut stream: Replies,
    stage: Arc<Mutex<MemberStage<Smollm2>>>,
    asker: u32,
    out: mpsc::UnboundedSender<Vec<u8>>,
) {
    let mut told = false;
    while let Some(Ok(frame)) = stream.next().await {
        match frame {
            Frame::Binary(bytes) => {
                // The server's own `evicted` says it all: no second refusal after it.
                told = matches!(
                    LlmFrame::decode(&bytes),
                    Ok(LlmFrame::Error { code: LlmErrorCode::Evicted, .. })
                );
                let _ = out.send(RelayFrame { peer: asker, payload: &bytes }.to_bytes());
            }
            Frame::Close(_) => break,
            _ => {}
        }
    }
    close(&stage);
    if !told {
        let _ = out.send(envelope(asker, &lost(0)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_llm_socket_is_beside_the_group_socket() {
        assert_eq!(llm_url("ws://127.0.0.1:8080/group"), "ws://127.0.0.1:8080/llm");
        assert_eq!(llm_url("wss://example.org/split/group"), "wss://example.org/split/llm");
        assert_eq!(llm_url("ws://host:1/"), "ws://host:1/llm");
    }
}
