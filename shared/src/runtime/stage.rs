//! A middle stage of a split conversation on a member of a device group
//! ([`crate::group::llm_stage`]): the `/llm` frames an asker sends the member, turned into what
//! the member does with them, for any [`SequenceModel`]. No networking here: the member (the
//! native agent, or a browser through the wasm module) carries the actions out.
//!
//! The stage checks every frame as the server's `/llm` does and answers a refusal with the same
//! typed error frame; the conversation stays as it was.

use std::ops::Range;
use std::sync::Arc;

use super::{SequenceModel, SequenceState};
use crate::protocol::{LlmErrorCode, LlmFrame, peek_llm_id};

/// What the member does with a frame.
#[derive(Debug, PartialEq)]
pub enum StageAction {
    /// Send the asker this frame.
    Reply(LlmFrame),
    /// Open the server's part of the conversation with `upstream`; when the server answers
    /// `opened`, send the asker `opened` (the range the asker opened), else its refusal.
    OpenUpstream {
        /// The open for the server's blocks.
        upstream: LlmFrame,
        /// The member's answer to the asker's open.
        opened: LlmFrame,
    },
    /// Send the server this frame; its reply goes to the asker unchanged.
    Forward(LlmFrame),
    /// Nothing to send (a `stop`: no generation runs at a middle stage; a reply, which is
    /// never answered).
    Nothing,
}

/// One asker's conversation through this member.
struct Conversation<S> {
    /// The member's blocks.
    blocks: Range<usize>,
    /// One past the last block of the whole range the asker opened (the server's end).
    end: u16,
    cache: S,
}

/// The stage of one asker's conversation on a member: its blocks' state (a KV cache) and
/// where its rows go next.
pub struct MemberStage<M: SequenceModel> {
    model: Arc<M>,
    max_positions: u32,
    conversation: Option<Conversation<M::State>>,
}

fn refuse(id: u64, code: LlmErrorCode, message: impl Into<String>) -> StageAction {
    StageAction::Reply(LlmFrame::Error { id, code, message: message.into() })
}

/// A refusal's code and message, before it is framed.
pub type Refusal = (LlmErrorCode, String);

/// What every side serving a hidden frame checks of its values before its blocks run (the
/// server's `/llm` and a member alike): rows of the model's width `dim`, at least one, all
/// finite. The number of rows.
///
/// # Errors
/// `bad_values`, saying which.
pub fn check_hidden(dim: usize, width: u32, values: &[f32]) -> Result<usize, Refusal> {
    if width as usize != dim || values.is_empty() {
        let why = format!("rows of {width} values; this model's are {dim}");
        return Err((LlmErrorCode::BadValues, why));
    }
    if values.iter().any(|v| !v.is_finite()) {
        return Err((LlmErrorCode::BadValues, "a hidden state holds NaN or infinity".into()));
    }
    Ok(values.len() / dim)
}

/// Whether `rows` positions from `position` on go next in `cache`: it holds exactly the
/// positions before them, and has room for them in the positions its conversation opened with.
///
/// # Errors
/// `position` or `kv_budget`, saying which.
pub fn check_position(
    cache: &(impl SequenceState + ?Sized),
    position: u32,
    rows: usize,
) -> Result<(), Refusal> {
    let held = cache.len();
    if position as usize != held {
        let why = format!("rows start at position {position}; the cache here holds {held}");
        return Err((LlmErrorCode::Position, why));
    }
    if held + rows > cache.capacity() {
        let capacity = cache.capacity();
        let why = format!(
            "{rows} more positions do not fit the {capacity} this conversation opened with"
        );
        return Err((LlmErrorCode::KvBudget, why));
    }
    Ok(())
}

impl<M: SequenceModel> MemberStage<M> {
    /// A stage of `model` whose conversations may reach `max_positions`.
    pub fn new(model: Arc<M>, max_positions: u32) -> Self {
        Self { model, max_positions, conversation: None }
    }

    /// The blocks the open conversation runs here, if one is open.
    pub fn blocks(&self) -> Option<Range<usize>> {
        self.conversation.as_ref().map(|c| c.blocks.clone())
    }

    /// Serve one frame from the asker. `to` is where the asker's last `llmStage` signal ended
    /// this member's stage (taken by an `open`; `None`: the open's whole range).
    pub fn handle(&mut self, bytes: &[u8], to: Option<u16>) -> StageAction {
        let id = peek_llm_id(bytes).unwrap_or(0);
        let frame = match LlmFrame::decode(bytes) {
            Ok(f) => f,
            Err(e) => return refuse(id, LlmErrorCode::BadFrame, e.to_string()),
        };
        match frame {
            LlmFrame::Open { id, model, first, end, positions, head } => {
                self.open(id, model, first..end, positions, head.is_some(), to)
            }
            LlmFrame::Hidden { id, reply: false, position, width, codec, values } => {
                let dim = self.model.sequence_spec().width;
                let Some(c) = self.conversation.as_mut() else {
                    return refuse(
                        id,
                        LlmErrorCode::NotOpen,
                        "open the conversation before sending hidden states",
                    );
                };
                let checked = check_hidden(dim, width, &values)
                    .and_then(|rows| check_position(&c.cache, position, rows).map(|()| rows));
                let rows = match checked {
                    Ok(rows) => rows,
                    Err((code, why)) => return refuse(id, code, why),
                };
                let mut values = values;
                if let Err(e) =
                    self.model.forward_blocks(c.blocks.clone(), &mut values, &mut c.cache)
                {
                    return refuse(id, LlmErrorCode::Internal, e.to_string());
                }
                if usize::from(c.end) == c.blocks.end {
                    // The last stage: the asker's head needs the last position only.
                    let last = values[values.len() - dim..].to_vec();
                    let position = position + rows as u32 - 1;
                    let reply =
                        LlmFrame::Hidden { id, reply: true, position, width, codec, values: last };
                    StageAction::Reply(reply)
                } else {
                    StageAction::Forward(LlmFrame::Hidden {
                        id,
                        reply: false,
                        position,
                        width,
                        codec,
                        values,
                    })
                }
            }
            LlmFrame::Tokens { id, .. } => refuse(
                id,
                LlmErrorCode::Placement,
                "a member runs hidden states through its blocks; token ids stay with the asker",
            ),
            LlmFrame::Stop { .. } => StageAction::Nothing,
            // A reply (a refusal included) is never answered: two members refusing each
            // other's refusals would never end.
            LlmFrame::Opened { .. }
            | LlmFrame::Hidden { reply: true, .. }
            | LlmFrame::Error { .. }
            | LlmFrame::Token { .. }
            | LlmFrame::Done { .. } => StageAction::Nothing,
        }
    }

    fn open(
        &mut self,
        id: u64,
        model: u8,
        range: Range<u16>,
        positions: u32,
        head: bool,
        to: Option<u16>,
    ) -> StageAction {
        let spec = self.model.sequence_spec();
        if model != spec.id {
            let why = format!("model {model} is not hosted here; {} is {}", spec.id, spec.name);
            return refuse(id, LlmErrorCode::UnknownModel, why);
        }
        if head {
            return refuse(
                id,
                LlmErrorCode::Placement,
                "a member runs blocks only: the head stays with the asker",
            );
        }
        let layers = spec.blocks;
        let (first, end) = (range.start, range.end);
        let to = to.unwrap_or(end);
        if first >= end || usize::from(end) > layers || to <= first || to > end {
            let why = format!(
                "blocks {first}..{end}, this member's to {to}: the model has 0..{layers}, and a \
                 member's stage ends after its first block and by the range's end"
            );
            return refuse(id, LlmErrorCode::BadLayers, why);
        }
        if positions == 0 || positions > self.max_positions {
            let why = format!(
                "{positions} positions: a conversation here may have 1..={}",
                self.max_positions
            );
            return refuse(id, LlmErrorCode::KvBudget, why);
        }
        let held = self.model.held_blocks();
        if usize::from(first) < held.start || usize::from(to) > held.end {
            let why = format!(
                "blocks {first}..{to} here: this member holds blocks {}..{}",
                held.start, held.end
            );
            return refuse(id, LlmErrorCode::BadLayers, why);
        }
        let blocks = usize::from(first)..usize::from(to);
        let cache = self.model.new_state(blocks.clone(), positions as usize);
        // A new open replaces the asker's earlier conversation (a reconnect starts over).
        self.conversation = Some(Conversation { blocks, end, cache });
        let width = self.model.sequence_spec().width as u32;
        let opened = LlmFrame::Opened { id, first, end, positions, width, head: false };
        if to == end {
            return StageAction::Reply(opened);
        }
        let upstream = LlmFrame::Open { id, model, first: to, end, positions, head: None };
        StageAction::OpenUpstream { upstream, opened }
    }

    /// Forget the conversation (the server's part was lost: the asker must open again).
    pub fn close(&mut self) {
        self.conversation = None;
    }
}
