//! Camera streams: a keyframe, then residuals against the previous frame's symbols.
//!
//! Residuals live in the quantized domain: the encoder sends `q_t - r` (mod the level count)
//! where `r` is exactly what the decoder holds, and updates `r` the same way the decoder will.
//! So both sides always hold identical references and cannot drift. A dead zone turns changes of
//! at most `deadzone` levels into "keep", which makes residuals of a still scene almost all zero
//! while bounding the error at `deadzone` steps. Sequence numbers make a lost, repeated or
//! reordered frame visible; the decoder then drops the stream and asks for a keyframe.

use std::collections::VecDeque;

use super::{CodecError, QuantSetting};

/// Frames between keyframes unless one is forced.
pub const DEFAULT_KEYFRAME_INTERVAL: u32 = 30;
/// Most streams a decoder tracks; the least recently used is forgotten beyond that.
pub const MAX_STREAMS: usize = 8;

/// What a reference was coded with; a delta must match it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Context {
    /// The boundary's name.
    boundary: String,
    setting: QuantSetting,
    calibration: u64,
}

/// The encoder's side of one stream.
#[derive(Clone, Debug)]
pub struct StreamEncoder {
    id: u32,
    next_seq: u32,
    keyframe_interval: u32,
    deadzone: u8,
    since_key: u32,
    reference: Option<(Context, Vec<u8>)>,
}

/// How a frame of a stream was coded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamPos {
    /// Stream id (never 0: 0 means "not a stream").
    pub stream: u32,
    /// Sequence number, +1 per frame.
    pub seq: u32,
    /// A residual against the previous frame rather than a keyframe.
    pub delta: bool,
}

impl StreamEncoder {
    /// A new stream `id` (non-zero) with a keyframe every `keyframe_interval` frames and a dead
    /// zone of `deadzone` quantization levels (0 for lossless residuals).
    pub fn new(id: u32, keyframe_interval: u32, deadzone: u8) -> Self {
        assert_ne!(id, 0, "stream id 0 means no stream");
        Self {
            id,
            next_seq: 0,
            keyframe_interval: keyframe_interval.max(1),
            deadzone,
            since_key: 0,
            reference: None,
        }
    }

    /// Make the next frame a keyframe (after a reconnect or a `keyframe_required` reply).
    pub fn force_keyframe(&mut self) {
        self.reference = None;
    }

    /// Turn `symbols` into what to send for this frame (residuals, or unchanged for a
    /// keyframe) and advance the stream.
    pub(crate) fn code(
        &mut self,
        boundary: &str,
        setting: QuantSetting,
        calibration: u64,
        symbols: &mut [u8],
    ) -> StreamPos {
        let ctx = Context { boundary: boundary.to_string(), setting, calibration };
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        let levels = setting.levels() as i16;
        let delta = match &mut self.reference {
            Some((c, reference))
                if *c == ctx
                    && self.since_key + 1 < self.keyframe_interval
                    && reference.len() == symbols.len() =>
            {
                let dz = i16::from(self.deadzone);
                for (s, r) in symbols.iter_mut().zip(reference.iter_mut()) {
                    let d = i16::from(*s) - i16::from(*r);
                    if d.abs() <= dz {
                        *s = 0;
                    } else {
                        *r = *s;
                        *s = d.rem_euclid(levels) as u8;
                    }
                }
                self.since_key += 1;
                true
            }
            _ => {
                self.reference = Some((ctx, symbols.to_vec()));
                self.since_key = 0;
                false
            }
        };
        StreamPos { stream: self.id, seq, delta }
    }
}

/// The decoder's side: references of the streams of one connection, at most [`MAX_STREAMS`]
/// and at most a byte budget of them (a stem keyframe is 392 KiB of symbols).
#[derive(Debug)]
pub struct StreamDecoder {
    streams: VecDeque<(u32, u32, Context, Vec<u8>)>,
    budget: usize,
}

impl Default for StreamDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl StreamDecoder {
    /// No streams yet, no byte budget beyond [`MAX_STREAMS`].
    pub fn new() -> Self {
        Self::with_budget(usize::MAX)
    }

    /// No streams yet; references kept total at most `bytes`. A keyframe evicts the least
    /// recently used streams to fit; one larger than the whole budget decodes but is not kept,
    /// so the deltas after it get [`CodecError::KeyframeRequired`].
    pub fn with_budget(bytes: usize) -> Self {
        Self { streams: VecDeque::new(), budget: bytes }
    }

    /// Bytes of references held.
    pub fn bytes(&self) -> usize {
        self.streams.iter().map(|s| s.3.len()).sum()
    }

    /// Forget every stream (their next deltas get [`CodecError::KeyframeRequired`]).
    pub fn clear(&mut self) {
        self.streams.clear();
    }

    /// Streams currently tracked.
    pub fn len(&self) -> usize {
        self.streams.len()
    }

    /// Whether no stream is tracked.
    pub fn is_empty(&self) -> bool {
        self.streams.is_empty()
    }

    /// Apply a received frame's `symbols` (residuals for a delta) and leave the frame's real
    /// symbols in place.
    ///
    /// # Errors
    /// [`CodecError::KeyframeRequired`] for a delta without a matching reference or out of
    /// sequence; the stream is forgotten so only a keyframe restarts it.
    pub(crate) fn apply(
        &mut self,
        pos: StreamPos,
        boundary: &str,
        setting: QuantSetting,
        calibration: u64,
        symbols: &mut [u8],
    ) -> Result<(), CodecError> {
        let ctx = Context { boundary: boundary.to_string(), setting, calibration };
        let found = self.streams.iter().position(|s| s.0 == pos.stream);
        let entry = found.and_then(|i| self.streams.remove(i));
        if !pos.delta {
            if symbols.len() > self.budget {
                return Ok(());
            }
            while self.streams.len() >= MAX_STREAMS
                || (!self.streams.is_empty() && self.bytes() + symbols.len() > self.budget)
            {
                self.streams.pop_front();
            }
            self.streams.push_back((pos.stream, pos.seq.wrapping_add(1), ctx, symbols.to_vec()));
            return Ok(());
        }
        let need_key = |reason: String| CodecError::KeyframeRequired { stream: pos.stream, reason };
        let (_, expected, have, mut reference) =
            entry.ok_or_else(|| need_key("no keyframe received for this stream".into()))?;
        if pos.seq != expected {
            return Err(need_key(format!("expected frame {expected}, got {}", pos.seq)));
        }
        if have != ctx || reference.len() != symbols.len() {
            return Err(need_key(
                "the delta's boundary or setting differs from its keyframe's".into(),
            ));
        }
        let levels = setting.levels() as u16;
        for (s, r) in symbols.iter_mut().zip(reference.iter_mut()) {
            *r = ((u16::from(*r) + u16::from(*s)) % levels) as u8;
            *s = *r;
        }
        self.streams.push_back((pos.stream, pos.seq.wrapping_add(1), ctx, reference));
        Ok(())
    }
}
