//! `/encrypted`: the classifier computed on features the server cannot read
//! ([`split_shared::encrypted`]). One socket is one session: the client's evaluation key, held
//! within the server's key budget (`--encrypted-key-mib`; an idle session's key may be taken
//! for a new one after `--encrypted-evict-after` seconds, and that session is told `evicted`),
//! then classify frames, each evaluated on a blocking thread, one evaluation at a time per
//! server, at most `--queue` waiting (`busy` past that).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use actix_web::{HttpRequest, HttpResponse, rt, web};
use actix_ws::{AggregatedMessage, CloseCode, CloseReason};
use futures_util::StreamExt;
use split_shared::encrypted::{EncryptedClassifier, EncryptedError, QuantizedClassifier};
use split_shared::protocol::{
    EncryptedErrorCode as Code, EncryptedFrame, MAX_ENCRYPTED_FRAME_BYTES, PARAMETERS_ID,
    peek_encrypted_id,
};

use crate::llm_budget::{KvBudget, Reservation};
use crate::state::AppState;
use crate::ws::{Then, Upgraded, checked_upgrade, other_message, send};

/// A session with no frame for this long is closed.
const IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// The server's half of the encrypted classifier, shared by every session.
pub struct EncryptedHost {
    classifier: QuantizedClassifier,
    /// The classifier's diagonals encoded for the scheme, made at the first evaluation
    /// (0.3 s, about 66 MB) so that a server nobody asks does not pay for them.
    encoded: OnceLock<Result<EncryptedClassifier, EncryptedError>>,
    keys: Arc<KvBudget>,
    /// Evaluations running or waiting.
    queued: AtomicUsize,
    queue: usize,
    one_at_a_time: tokio::sync::Semaphore,
}

impl EncryptedHost {
    /// The host of `classifier`, with `key_bytes` for all sessions' keys, idle keys evictable
    /// after `evict_after`, at most `queue` evaluations waiting.
    pub fn new(
        classifier: QuantizedClassifier,
        key_bytes: usize,
        evict_after: Option<Duration>,
        queue: usize,
    ) -> Self {
        Self {
            classifier,
            encoded: OnceLock::new(),
            keys: KvBudget::new(key_bytes, evict_after),
            queued: AtomicUsize::new(0),
            queue,
            one_at_a_time: tokio::sync::Semaphore::new(1),
        }
    }
}

impl EncryptedHost {
    /// The classifier's weight step (`/api/info`): what turns the integer logits a client
    /// decrypts into the network's.
    pub fn weight_step(&self) -> f32 {
        self.classifier.weight_step
    }
}

/// A session's key as it came (checked once), and its hold on the budget. Read, a key takes
/// about 17 times its bytes (5.7 MiB for 335 kB: fhe.rs keeps its key-switching keys and the
/// expansion's monomials in both NTT forms; the attack suite measured 100 held keys at +566
/// MiB), so the server keeps the bytes and reads them again for each evaluation (about 9 ms
/// beside its 32).
struct HeldKey {
    bytes: Arc<Vec<u8>>,
    reservation: Reservation,
}

/// `GET /encrypted`: upgrade and serve the session.
pub async fn encrypted_socket(
    req: HttpRequest,
    body: web::Payload,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let (response, upgraded) =
        checked_upgrade(&req, body, &state, MAX_ENCRYPTED_FRAME_BYTES).await?;
    if let Some(Upgraded { session, stream, admitted }) = upgraded {
        rt::spawn(serve(session, stream, state.into_inner(), admitted));
    }
    Ok(response)
}

fn error(id: u64, code: Code, message: impl Into<String>) -> EncryptedFrame {
    EncryptedFrame::Error { id, code, message: message.into() }
}

async fn serve(
    mut session: actix_ws::Session,
    mut stream: actix_ws::AggregatedMessageStream,
    state: Arc<AppState>,
    admitted: crate::limits::Admitted,
) {
    let mut held: Option<HeldKey> = None;
    let reason = loop {
        let lease = held.as_ref().map(|h| h.reservation.lease().clone());
        let next = tokio::select! {
            next = tokio::time::timeout(IDLE_TIMEOUT, stream.next()) => next,
            () = crate::llm_budget::evicted(lease.as_deref()) => {
                held = None;
                state.metrics.refused(Code::Evicted.name());
                let message = "the server took this idle session's evaluation key for another \
                               session's; send the key again to go on";
                let frame = error(0, Code::Evicted, message);
                if !send(&mut session, frame.encode(), &state).await {
                    return;
                }
                continue;
            }
        };
        let Ok(msg) = next else {
            break Some(CloseReason { code: CloseCode::Normal, description: Some("idle".into()) });
        };
        match msg {
            Some(Ok(AggregatedMessage::Binary(bytes))) => {
                state.metrics.received(bytes.len());
                let started = std::time::Instant::now();
                if let Some(lease) = &lease {
                    lease.set_busy(true);
                }
                let reply = if !state.rate.allow(admitted.ip, started) {
                    let message = state.rate.refusal("frames");
                    error(peek_encrypted_id(&bytes).unwrap_or(0), Code::RateLimited, message)
                } else {
                    answer(&state, &mut held, &bytes).await
                };
                match &reply {
                    EncryptedFrame::Error { code, .. } => state.metrics.refused(code.name()),
                    EncryptedFrame::Answer { .. } => {
                        state.metrics.answered("encrypted", started.elapsed().as_secs_f64(), false)
                    }
                    _ => {}
                }
                if !send(&mut session, reply.encode(), &state).await {
                    return;
                }
                if let Some(h) = &held {
                    h.reservation.lease().set_busy(false);
                }
            }
            other => {
                let refusal = || error(0, Code::BadFrame, "frames are binary").encode();
                let max = MAX_ENCRYPTED_FRAME_BYTES;
                match other_message(&mut session, other, refusal, max, &state).await {
                    Then::Go => {}
                    Then::Close(reason) => break reason,
                    Then::Gone => return,
                }
            }
        }
    };
    let _ = session.close(reason).await;
}

fn refusal(id: u64, e: &EncryptedError) -> EncryptedFrame {
    let code = match e {
        EncryptedError::Scheme(_) => Code::Internal,
        _ => Code::Malformed,
    };
    error(id, code, e.to_string())
}

/// One frame in, its reply out.
async fn answer(state: &AppState, held: &mut Option<HeldKey>, bytes: &[u8]) -> EncryptedFrame {
    let id = peek_encrypted_id(bytes).unwrap_or(0);
    let host = Arc::clone(&state.encrypted);
    let frame = match EncryptedFrame::decode(bytes) {
        Ok(f) => f,
        Err(e) => return error(id, Code::BadFrame, e.to_string()),
    };
    match frame {
        EncryptedFrame::Key { id, parameters, key } => {
            if parameters != PARAMETERS_ID {
                return wrong_parameters(id, parameters);
            }
            // The old key goes first: a session holds one.
            *held = None;
            let reservation = match host.keys.reserve(key.len()) {
                Ok(r) => r,
                Err(why) => return error(id, Code::KeyBudget, why),
            };
            let key = Arc::new(key);
            let checked = Arc::clone(&key);
            match web::block(move || EncryptedClassifier::read_key(&checked).map(drop)).await {
                Ok(Ok(())) => {
                    *held = Some(HeldKey { bytes: key, reservation });
                    EncryptedFrame::KeyAccepted { id }
                }
                Ok(Err(e)) => refusal(id, &e),
                Err(_) => error(id, Code::Internal, "reading the key failed"),
            }
        }
        EncryptedFrame::Classify { id, parameters, parts } => {
            if parameters != PARAMETERS_ID {
                return wrong_parameters(id, parameters);
            }
            let Some(h) = held.as_ref() else {
                return error(id, Code::NoKey, "send the evaluation key (a key frame) first");
            };
            if host.queued.fetch_add(1, Ordering::AcqRel) >= host.queue {
                host.queued.fetch_sub(1, Ordering::AcqRel);
                return error(id, Code::Busy, "too many encrypted requests waiting; retry later");
            }
            let reply = evaluate(&host, Arc::clone(&h.bytes), parts, id).await;
            host.queued.fetch_sub(1, Ordering::AcqRel);
            reply
        }
        other => error(other.id(), Code::BadFrame, "a reply's kind, sent to the server"),
    }
}

fn wrong_parameters(id: u64, parameters: u8) -> EncryptedFrame {
    error(
        id,
        Code::Parameters,
        format!("parameter set {parameters}: this server uses {PARAMETERS_ID}"),
    )
}

/// Evaluate on a blocking thread, one at a time.
async fn evaluate(
    host: &Arc<EncryptedHost>,
    key: Arc<Vec<u8>>,
    parts: Vec<Vec<u8>>,
    id: u64,
) -> EncryptedFrame {
    let waited = std::time::Instant::now();
    let Ok(_turn) = host.one_at_a_time.acquire().await else {
        return error(id, Code::Internal, "the evaluator is gone");
    };
    let queue_us = micros(waited.elapsed());
    let host = Arc::clone(host);
    let result = web::block(move || {
        let started = std::time::Instant::now();
        let encoded = host.encoded.get_or_init(|| EncryptedClassifier::new(&host.classifier));
        let encoded = encoded.as_ref().map_err(Clone::clone)?;
        let key = EncryptedClassifier::read_key(&key)?;
        let slices: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        encoded.evaluate(&slices, &key).map(|c| (c, micros(started.elapsed())))
    })
    .await;
    match result {
        Ok(Ok((ciphertext, server_us))) => {
            EncryptedFrame::Answer { id, queue_us, server_us, ciphertext }
        }
        Ok(Err(e)) => refusal(id, &e),
        Err(_) => error(id, Code::Internal, "the evaluation failed"),
    }
}

/// A duration in whole microseconds, at most `u32::MAX` (71 minutes).
fn micros(d: std::time::Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}
