//! The performance lab's native client: many concurrent WebSocket clients sending real frames
//! (an image upload, or features computed and coded with the shared code) to a running server,
//! with latency percentiles, throughput and the server's CPU time per request.
//!
//! ```text
//! cargo run --release -p split-lab --bin loadgen -- --url ws://127.0.0.1:8080/ws \
//!     --clients 1,8,64 --requests 20 --workload features:block5:q6 [--server-pid PID] \
//!     [--link fast-wifi|4g|3g|congested-uplink]
//! ```
//!
//! Workloads: `image` (the file as is), `jpeg224` (a quality-90 JPEG of the 224x224 input, what a
//! plain app uploads), `features:<boundary>[:<codec>]`. `--link` puts the emulated link of
//! [`crate::netem`] between the clients and the server.
//!
//! Start the server with `--cache-entries 0` for throughput runs: every request repeats the same
//! content, which its cache would otherwise answer without compute (the report counts such hits).

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use awc::ws::{Frame, Message};
use futures_util::{SinkExt, StreamExt};
use split_shared::protocol::Reply;

/// One load run.
#[derive(Clone, Debug)]
pub struct LoadConfig {
    /// WebSocket URL of the server (`ws://host:port/ws`).
    pub url: String,
    /// Concurrent connections, each with one request in flight.
    pub clients: usize,
    /// Requests per connection.
    pub requests: usize,
    /// What each request sends.
    pub frame: Vec<u8>,
    /// Per-request timeout.
    pub timeout: Duration,
}

/// What a run measured.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct LoadReport {
    /// Connections.
    pub clients: usize,
    /// Results received.
    pub ok: usize,
    /// Error replies, timeouts and dropped connections.
    pub errors: usize,
    /// Results the server answered from its cache.
    pub cached: usize,
    /// Wall time of the run, s.
    #[serde(deserialize_with = "crate::measure::null_as_nan")]
    pub wall_s: f64,
    /// Results per second.
    #[serde(deserialize_with = "crate::measure::null_as_nan")]
    pub rps: f64,
    /// Latency percentiles, ms.
    #[serde(deserialize_with = "crate::measure::null_as_nan")]
    pub p50_ms: f64,
    /// 95th percentile, ms.
    #[serde(deserialize_with = "crate::measure::null_as_nan")]
    pub p95_ms: f64,
    /// 99th percentile, ms.
    #[serde(deserialize_with = "crate::measure::null_as_nan")]
    pub p99_ms: f64,
    /// Server compute per result as reported in replies, ms (mean).
    #[serde(deserialize_with = "crate::measure::null_as_nan")]
    pub server_compute_ms: f64,
    /// Top-1 classes seen (to check answers stay right under load).
    pub top1: Vec<u16>,
    /// Connections opened again after the server closed or lost one (each request is then
    /// sent again, as the browser client does).
    #[serde(default)]
    pub reconnects: usize,
}

/// One line of `loadgen --json`: a run at one client count. The lab reads these back with the
/// same type, so the two cannot drift apart.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct LoadRun {
    /// The workload (`image`, `jpeg224`, `features:<split>:<codec>`).
    pub workload: String,
    /// The emulated link profile, if any.
    pub link: Option<String>,
    /// Bytes of one request frame.
    pub bytes: usize,
    /// Requests per connection.
    pub requests: usize,
    /// What the run measured.
    pub report: LoadReport,
    /// Server CPU per answered request, ms, when the server's pid was given.
    pub server_cpu_ms_per_request: Option<f64>,
}

/// The `q`-quantile (0..=1) of sorted values.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

pub(crate) type Socket = actix_codec::Framed<awc::BoxedSocket, awc::ws::Codec>;

pub(crate) async fn connect(url: &str) -> Result<Socket> {
    let (_, ws) = awc::Client::new()
        .ws(url)
        .max_frame_size(split_shared::protocol::MAX_FRAME_BYTES + 1024)
        .connect()
        .await
        .map_err(|e| anyhow::anyhow!("connecting to {url}: {e}"))?;
    Ok(ws)
}

/// Why a request got no reply on its connection.
pub(crate) enum Lost {
    /// The connection ended (closed, reset, or a close frame: a server shutting down sends
    /// 1012): reconnect and send it again.
    Connection(anyhow::Error),
    /// No reply within the timeout, or a reply that does not decode: give up on it.
    Request(anyhow::Error),
}

impl Lost {
    /// The reason, whichever kind.
    pub(crate) fn into_error(self) -> anyhow::Error {
        match self {
            Lost::Connection(e) | Lost::Request(e) => e,
        }
    }
}

/// Send `frame` and wait up to `timeout` for the binary message that answers it.
pub(crate) async fn send_and_receive(
    ws: &mut Socket,
    frame: Vec<u8>,
    timeout: Duration,
) -> Result<actix_web::web::Bytes, Lost> {
    ws.send(Message::Binary(frame.into()))
        .await
        .map_err(|e| Lost::Connection(anyhow::anyhow!("sending: {e}")))?;
    receive(ws, timeout).await
}

/// Wait up to `timeout` for the next binary message (pings and pongs skipped).
pub(crate) async fn receive(
    ws: &mut Socket,
    timeout: Duration,
) -> Result<actix_web::web::Bytes, Lost> {
    let reply = tokio::time::timeout(timeout, async {
        loop {
            match ws.next().await {
                Some(Ok(Frame::Binary(b))) => return Ok(b),
                Some(Ok(Frame::Ping(_) | Frame::Pong(_))) => continue,
                Some(Ok(Frame::Close(reason))) => {
                    return Err(Lost::Connection(anyhow::anyhow!("closed: {reason:?}")));
                }
                Some(Ok(other)) => {
                    return Err(Lost::Request(anyhow::anyhow!("unexpected frame {other:?}")));
                }
                Some(Err(e)) => return Err(Lost::Connection(anyhow::anyhow!("websocket: {e}"))),
                None => return Err(Lost::Connection(anyhow::anyhow!("connection closed"))),
            }
        }
    })
    .await;
    reply.unwrap_or_else(|_| Err(Lost::Request(anyhow::anyhow!("request timed out"))))
}

async fn exchange(ws: &mut Socket, frame: &[u8], timeout: Duration) -> Result<Reply, Lost> {
    let bytes = send_and_receive(ws, frame.to_vec(), timeout).await?;
    Reply::decode(&bytes).map_err(|e| Lost::Request(e.into()))
}

/// Connections one client may open again for one request, as a browser client reconnects
/// when its server goes away (to another replica behind a balancer).
const RECONNECTS_PER_REQUEST: u32 = 5;

async fn client(config: &LoadConfig, index: usize) -> Result<(Vec<(f64, Reply)>, usize)> {
    let mut ws = Some(connect(&config.url).await?);
    let mut out = Vec::with_capacity(config.requests);
    let mut reconnects = 0;
    let mut frame = config.frame.clone();
    for r in 0..config.requests {
        let id = (index * config.requests + r + 1) as u64;
        frame[8..16].copy_from_slice(&id.to_le_bytes());
        let sent = Instant::now();
        let mut attempt = 0;
        let reply = loop {
            let socket = match ws.as_mut() {
                Some(s) => s,
                None => {
                    tokio::time::sleep(Duration::from_millis(50 << attempt.min(4))).await;
                    reconnects += 1;
                    match connect(&config.url).await {
                        Ok(s) => ws.insert(s),
                        Err(_) if attempt < RECONNECTS_PER_REQUEST => {
                            attempt += 1;
                            continue;
                        }
                        Err(e) => return Err(e),
                    }
                }
            };
            match exchange(socket, &frame, config.timeout).await {
                Ok(reply) => break reply,
                Err(Lost::Connection(e)) => {
                    ws = None;
                    if attempt >= RECONNECTS_PER_REQUEST {
                        return Err(e.context(format!("request {id}: connection lost")));
                    }
                    attempt += 1;
                }
                Err(Lost::Request(e)) => return Err(e.context(format!("request {id}"))),
            }
        };
        out.push((sent.elapsed().as_secs_f64() * 1e3, reply));
    }
    if let Some(mut ws) = ws {
        let _ = ws.close().await;
    }
    Ok((out, reconnects))
}

/// Run `config.clients` connections concurrently on the current actix runtime.
///
/// # Errors
/// When no connection could be made at all.
pub async fn run(config: &LoadConfig) -> Result<LoadReport> {
    let start = Instant::now();
    let results =
        futures_util::future::join_all((0..config.clients).map(|i| client(config, i))).await;
    let wall_s = start.elapsed().as_secs_f64();
    let mut report = LoadReport { clients: config.clients, wall_s, ..Default::default() };
    let mut latencies = Vec::new();
    let mut compute = 0.0;
    let mut first_error = None;
    for r in results {
        match r {
            Ok((replies, reconnects)) => {
                report.reconnects += reconnects;
                for (ms, reply) in replies {
                    match reply {
                        Reply::Result { top, timings, .. } => {
                            report.ok += 1;
                            report.cached += usize::from(timings.cached);
                            compute += f64::from(timings.compute_us) / 1e3;
                            latencies.push(ms);
                            report.top1.push(top[0].class);
                        }
                        _ => report.errors += 1,
                    }
                }
            }
            Err(e) => {
                report.errors += config.requests;
                first_error.get_or_insert(e);
            }
        }
    }
    if report.ok == 0
        && let Some(e) = first_error
    {
        return Err(e);
    }
    latencies.sort_by(f64::total_cmp);
    report.rps = report.ok as f64 / wall_s;
    report.p50_ms = quantile(&latencies, 0.50);
    report.p95_ms = quantile(&latencies, 0.95);
    report.p99_ms = quantile(&latencies, 0.99);
    report.server_compute_ms = compute / report.ok.max(1) as f64;
    Ok(report)
}

/// CPU time (user + system) a process has used, ms, from `/proc/PID/stat` (Linux).
///
/// # Errors
/// When the process does not exist or the file is not readable.
pub fn process_cpu_ms(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // Fields after the parenthesized command name; utime and stime are the 12th and 13th.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).context("unexpected /proc stat format")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields.get(11).context("utime")?.parse::<f64>()?
        + fields.get(12).context("stime")?.parse::<f64>()?;
    // The kernel's USER_HZ is 100 on every Linux ABI Rust targets.
    Ok(ticks * 10.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_pick_ranks() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), 51.0);
        assert_eq!(quantile(&v, 0.99), 99.0);
        assert_eq!(quantile(&v, 0.0), 1.0);
        assert!(quantile(&[], 0.5).is_nan());
    }

    #[test]
    fn reads_this_process_cpu_time() {
        let before = process_cpu_ms(std::process::id()).unwrap();
        let mut x = 0u64;
        for i in 0..50_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        assert!(x > 0);
        assert!(process_cpu_ms(std::process::id()).unwrap() >= before);
    }

    #[test]
    fn load_runs_round_trip_through_json_even_with_nothing_measured() {
        let run = LoadRun {
            workload: "features:block5:q6".into(),
            link: Some("3g".into()),
            bytes: 10_393,
            requests: 3,
            report: LoadReport {
                clients: 2,
                rps: f64::NAN,
                top1: vec![282],
                ..LoadReport::default()
            },
            server_cpu_ms_per_request: None,
        };
        let line = serde_json::to_string(&run).unwrap();
        let back: LoadRun = serde_json::from_str(&line).unwrap();
        assert!(back.report.rps.is_nan());
        assert_eq!((back.bytes, back.report.top1, back.link), (10_393, vec![282], run.link));
    }
}
