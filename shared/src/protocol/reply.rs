//! Server -> client frames.
//!
//! Result body: `boundary u8 | k u8 | k x (class u16, prob f32) | queue_us u32 | decode_us u32 |
//! compute_us u32 | flags u8 (bit 0: cache hit) | queued u16 | workers u16 | recent_us u32 |
//! price_milli u32`. Error body: `code u16 | len u16 | message utf-8`. Pong body: `received u32
//! | gap_us u32 | queued u16 | workers u16 | recent_us u32 | price_milli u32`.

use super::{
    ErrorCode, MAX_MESSAGE_BYTES, MAX_TOP_K, MODEL_EFFICIENTNET_LITE0, WireError, kind,
    read_header, write_header,
};
use crate::container::Cursor;
use crate::labels::Prediction;

/// A pong's `gap_us` when no frame came before its ping on the connection.
pub const NO_GAP: u32 = u32::MAX;

/// Where the server spent its time on one request, in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ServerTimings {
    /// Waiting for the model worker.
    pub queue_us: u32,
    /// Decoding the frame payload (and the image, in cloud-only mode).
    pub decode_us: u32,
    /// Running the network's remaining stages and the softmax.
    pub compute_us: u32,
    /// Answered from the server's result cache: no compute ran.
    pub cached: bool,
}

/// How loaded the server was when it answered, so clients can plan around it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ServerLoad {
    /// Requests ahead of a new one: waiting for a worker, or taken into a worker's batch and
    /// not yet answered.
    pub queued: u16,
    /// Model workers.
    pub workers: u16,
    /// Recent compute time per request (moving average), microseconds.
    pub recent_us: u32,
    /// The server's congestion price × 1000: what a millisecond of its compute costs now
    /// (1000 on an idle server by day; smoothed over time, `cloud-server/src/price.rs`).
    pub price_milli: u32,
}

impl ServerLoad {
    /// Expected wait before a new request starts: the queue drained by the workers.
    pub fn expected_wait_ms(&self) -> f64 {
        f64::from(self.queued) * f64::from(self.recent_us) / 1e3 / f64::from(self.workers.max(1))
    }

    /// The congestion price (1.0 = an idle server's by day).
    pub fn price(&self) -> f64 {
        f64::from(self.price_milli) / 1e3
    }
}

/// A reply from the server.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// The classification.
    Result {
        /// Id of the request answered.
        id: u64,
        /// Index of the boundary the server started from, among the model's boundaries (0, the
        /// input, for an image).
        from: u8,
        /// Most probable classes, best first.
        top: Vec<Prediction>,
        /// Server-side timings.
        timings: ServerTimings,
        /// Server load at reply time.
        load: ServerLoad,
    },
    /// Answer to a ping.
    Pong {
        /// Id of the ping.
        id: u64,
        /// Probe bytes received.
        received: u32,
        /// Microseconds between the server reading the frame before this ping on the same
        /// connection and reading this ping ([`NO_GAP`] for a connection's first frame). A
        /// padded ping sent right behind a bare one arrives this long after it: its padding's
        /// upload time, on the server's clock, which no stall of the client's thread can skew.
        gap_us: u32,
        /// Server load now.
        load: ServerLoad,
    },
    /// The request was refused; the session stays open.
    Error {
        /// Id of the request refused (0 when the frame was unreadable).
        id: u64,
        /// What kind of failure.
        code: ErrorCode,
        /// Human-readable detail.
        message: String,
    },
}

impl Reply {
    /// An error reply; the message is cut to [`MAX_MESSAGE_BYTES`] at a character boundary.
    pub fn error(id: u64, code: ErrorCode, message: impl Into<String>) -> Self {
        let mut message = message.into();
        if message.len() > MAX_MESSAGE_BYTES {
            let mut end = MAX_MESSAGE_BYTES;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            message.truncate(end);
        }
        Self::Error { id, code, message }
    }

    /// The id of the request this answers.
    pub fn id(&self) -> u64 {
        match self {
            Self::Result { id, .. } | Self::Error { id, .. } | Self::Pong { id, .. } => *id,
        }
    }

    /// The encoded frame, from EfficientNet-Lite0.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.to_bytes_for(MODEL_EFFICIENTNET_LITE0)
    }

    /// The encoded frame, from the model whose id is `model` (the request's).
    pub fn to_bytes_for(&self, model: u8) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        match self {
            Self::Result { id, from, top, timings, load } => {
                write_header(&mut out, kind::RESULT, model, *id);
                let top = &top[..top.len().min(MAX_TOP_K)];
                out.extend_from_slice(&[*from, top.len() as u8]);
                for p in top {
                    out.extend_from_slice(&p.class.to_le_bytes());
                    out.extend_from_slice(&p.prob.to_le_bytes());
                }
                for t in [timings.queue_us, timings.decode_us, timings.compute_us] {
                    out.extend_from_slice(&t.to_le_bytes());
                }
                out.push(u8::from(timings.cached));
                write_load(&mut out, load);
            }
            Self::Pong { id, received, gap_us, load } => {
                write_header(&mut out, kind::PONG, model, *id);
                out.extend_from_slice(&received.to_le_bytes());
                out.extend_from_slice(&gap_us.to_le_bytes());
                write_load(&mut out, load);
            }
            Self::Error { id, code, message } => {
                write_header(&mut out, kind::ERROR, model, *id);
                out.extend_from_slice(&(*code as u16).to_le_bytes());
                out.extend_from_slice(&(message.len() as u16).to_le_bytes());
                out.extend_from_slice(message.as_bytes());
            }
        }
        out
    }

    /// Decode one reply frame.
    ///
    /// # Errors
    /// A [`WireError`] naming the first problem found.
    pub fn decode(frame: &[u8]) -> Result<Self, WireError> {
        let mut c = Cursor::new(frame);
        let header = read_header(&mut c)?;
        let id = header.id;
        let reply = match header.kind {
            kind::RESULT => {
                let from = c.u8()?;
                let k = c.u8()? as usize;
                if k > MAX_TOP_K {
                    return Err(WireError::TooManyDims(k as u8));
                }
                let top = (0..k)
                    .map(|_| Ok(Prediction { class: c.u16()?, prob: c.f32()? }))
                    .collect::<Result<Vec<_>, WireError>>()?;
                let (queue_us, decode_us, compute_us) = (c.u32()?, c.u32()?, c.u32()?);
                let flags = c.u8()?;
                if flags > 1 {
                    return Err(WireError::UnknownFlags(flags));
                }
                let timings = ServerTimings { queue_us, decode_us, compute_us, cached: flags == 1 };
                let load = read_load(&mut c)?;
                Self::Result { id, from, top, timings, load }
            }
            kind::PONG => {
                let (received, gap_us) = (c.u32()?, c.u32()?);
                Self::Pong { id, received, gap_us, load: read_load(&mut c)? }
            }
            kind::ERROR => {
                let code = ErrorCode::from_u16(c.u16()?);
                let len = c.u16()? as usize;
                if len > MAX_MESSAGE_BYTES {
                    return Err(WireError::BadText);
                }
                let message =
                    std::str::from_utf8(c.take(len)?).map_err(|_| WireError::BadText)?.to_string();
                Self::Error { id, code, message }
            }
            other => return Err(WireError::UnknownKind { id, kind: other }),
        };
        super::finish(c)?;
        Ok(reply)
    }
}

fn write_load(out: &mut Vec<u8>, load: &ServerLoad) {
    out.extend_from_slice(&load.queued.to_le_bytes());
    out.extend_from_slice(&load.workers.to_le_bytes());
    out.extend_from_slice(&load.recent_us.to_le_bytes());
    out.extend_from_slice(&load.price_milli.to_le_bytes());
}

fn read_load(c: &mut Cursor<'_>) -> Result<ServerLoad, WireError> {
    Ok(ServerLoad {
        queued: c.u16()?,
        workers: c.u16()?,
        recent_us: c.u32()?,
        price_milli: c.u32()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let result = Reply::Result {
            id: 9,
            from: crate::model::Boundary::block(3).unwrap().index(),
            top: vec![Prediction { class: 282, prob: 0.4 }, Prediction { class: 281, prob: 0.2 }],
            timings: ServerTimings { queue_us: 1, decode_us: 2, compute_us: 3, cached: true },
            load: ServerLoad { queued: 4, workers: 2, recent_us: 31_000, price_milli: 1_750 },
        };
        let error = Reply::error(7, ErrorCode::ShapeMismatch, "shape [1, 2] does not match");
        let pong = Reply::Pong {
            id: 8,
            received: 16_384,
            gap_us: 41_250,
            load: ServerLoad { queued: 1, workers: 1, recent_us: 9, price_milli: 1_000 },
        };
        for r in [result, error, pong] {
            let bytes = r.to_bytes();
            assert_eq!(Reply::decode(&bytes).unwrap(), r);
            for cut in 0..bytes.len() {
                assert!(Reply::decode(&bytes[..cut]).is_err());
            }
        }
    }

    #[test]
    fn long_messages_are_cut_at_a_char_boundary() {
        let Reply::Error { message, .. } =
            Reply::error(1, ErrorCode::Internal, "é".repeat(MAX_MESSAGE_BYTES))
        else {
            unreachable!()
        };
        assert!(message.len() <= MAX_MESSAGE_BYTES);
        assert!(Reply::decode(&Reply::error(1, ErrorCode::Internal, message).to_bytes()).is_ok());
    }
}
