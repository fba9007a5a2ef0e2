//! Refusing an oversized WebSocket message from its header, before its bytes arrive.
//!
//! actix-ws compares a frame's length with its limit only once the whole frame is buffered, so
//! a client that announces a gigabyte and streams it grows the server by a gigabyte. This
//! adapter sits between the connection's raw byte stream and actix-ws: it follows the frame
//! headers (RFC 6455 §5.2) and fails the stream as soon as a header, or the messages it
//! continues, declares more than the limit. Nothing is buffered here; bytes pass through.

use std::pin::Pin;
use std::task::{Context, Poll};

use actix_web::error::PayloadError;
use actix_web::web::Bytes;
use futures_util::Stream;

/// The client → server byte stream of one WebSocket, checked frame by frame.
pub struct FrameGuard<S> {
    inner: S,
    max_message: u64,
    header: [u8; 14],
    have: usize,
    need: usize,
    /// Payload bytes of the current frame still to pass.
    remaining: u64,
    /// Bytes of the data message being assembled from continuation frames.
    message: u64,
    failed: bool,
}

impl<S> FrameGuard<S> {
    /// Guard `inner`: no data message (all its continuation frames together) above
    /// `max_message` bytes.
    pub fn new(inner: S, max_message: usize) -> Self {
        Self {
            inner,
            max_message: max_message as u64,
            header: [0; 14],
            have: 0,
            need: 2,
            remaining: 0,
            message: 0,
            failed: false,
        }
    }

    /// Follow `chunk`; false once a header declares too much.
    fn follow(&mut self, chunk: &[u8]) -> bool {
        let mut i = 0;
        while i < chunk.len() {
            if self.remaining > 0 {
                let take = self.remaining.min((chunk.len() - i) as u64);
                self.remaining -= take;
                i += take as usize;
                continue;
            }
            self.header[self.have] = chunk[i];
            self.have += 1;
            i += 1;
            if self.have == 2 {
                let extended = match self.header[1] & 0x7f {
                    126 => 2,
                    127 => 8,
                    _ => 0,
                };
                let mask = if self.header[1] & 0x80 != 0 { 4 } else { 0 };
                self.need = 2 + extended + mask;
            }
            if self.have >= 2 && self.have == self.need {
                let len = match self.header[1] & 0x7f {
                    126 => u64::from(u16::from_be_bytes([self.header[2], self.header[3]])),
                    127 => u64::from_be_bytes(self.header[2..10].try_into().expect("8 bytes")),
                    n => u64::from(n),
                };
                let fin = self.header[0] & 0x80 != 0;
                // Data and continuation frames (opcodes 0, 1, 2) add up to one message;
                // control frames are small by the protocol and checked by actix-ws.
                if self.header[0] & 0x0f <= 2 {
                    self.message = self.message.saturating_add(len);
                    if self.message > self.max_message {
                        return false;
                    }
                    if fin {
                        self.message = 0;
                    }
                }
                self.remaining = len;
                self.have = 0;
                self.need = 2;
            }
        }
        true
    }
}

impl<S> Stream for FrameGuard<S>
where
    S: Stream<Item = Result<Bytes, PayloadError>> + Unpin,
{
    type Item = Result<Bytes, PayloadError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.failed {
            return Poll::Ready(None);
        }
        match Pin::new(&mut self.inner).poll_next(cx) {
            Poll::Ready(Some(Ok(chunk))) => {
                if self.follow(&chunk) {
                    Poll::Ready(Some(Ok(chunk)))
                } else {
                    self.failed = true;
                    Poll::Ready(Some(Err(PayloadError::Overflow)))
                }
            }
            other => other,
        }
    }
}

/// Whether a WebSocket stream error is this guard's refusal.
pub fn is_overflow(e: &actix_ws::ProtocolError) -> bool {
    match e {
        actix_ws::ProtocolError::Overflow => true,
        actix_ws::ProtocolError::Io(io) => io
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<PayloadError>())
            .is_some_and(|p| matches!(p, PayloadError::Overflow)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(opcode: u8, fin: bool, len: u64) -> Vec<u8> {
        let mut h = vec![opcode | if fin { 0x80 } else { 0 }];
        match len {
            0..=125 => h.push(0x80 | len as u8),
            126..=0xffff => {
                h.push(0x80 | 126);
                h.extend_from_slice(&(len as u16).to_be_bytes());
            }
            _ => {
                h.push(0x80 | 127);
                h.extend_from_slice(&len.to_be_bytes());
            }
        }
        h.extend_from_slice(&[1, 2, 3, 4]);
        h
    }

    #[test]
    fn frames_within_the_limit_pass_byte_by_byte() {
        let mut g = FrameGuard::new((), 1000);
        let mut bytes = header(2, true, 600);
        bytes.extend(vec![7; 600]);
        bytes.extend(header(9, true, 3));
        bytes.extend([1, 2, 3]);
        bytes.extend(header(2, false, 500));
        bytes.extend(vec![7; 500]);
        bytes.extend(header(0, true, 501));
        bytes.extend(vec![7; 501]);
        assert!(
            !bytes.chunks(1).all(|c| g.follow(c)),
            "500 continued by 501 is one message too many"
        );
        let mut g = FrameGuard::new((), 1000);
        let ok: Vec<u8> =
            [header(2, true, 1000), vec![0; 1000], header(1, true, 10), vec![0; 10]].concat();
        assert!(ok.chunks(7).all(|c| g.follow(c)));
    }

    #[test]
    fn a_huge_declared_length_is_refused_from_the_header() {
        let mut g = FrameGuard::new((), 8 << 20);
        assert!(!g.follow(&header(2, true, 1 << 30)), "refused before any payload byte");
    }
}
