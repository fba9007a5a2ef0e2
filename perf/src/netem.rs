//! A userspace network emulator: a TCP proxy that adds one-way delay and serializes each
//! direction at a fixed rate, for the link profiles the lab compares (this kernel has no
//! `netem`). Each direction is a FIFO: a chunk leaves after the link finished sending the chunks
//! before it (`bytes / rate`) plus the one-way delay, like a router queue with a propagation
//! delay. Between two loopback endpoints it is the whole network.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// A link: rates in kbit/s and the round-trip time.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct LinkProfile {
    /// Name used in reports.
    pub name: &'static str,
    /// Client → server, kbit/s.
    pub up_kbps: f64,
    /// Server → client, kbit/s.
    pub down_kbps: f64,
    /// Round trip added by the link, ms (half each way).
    pub rtt_ms: f64,
}

/// The profiles of the lab: fast Wi-Fi, 4G, 3G-like and a congested uplink.
pub const PROFILES: [LinkProfile; 4] = [
    LinkProfile { name: "fast-wifi", up_kbps: 20_000.0, down_kbps: 50_000.0, rtt_ms: 10.0 },
    LinkProfile { name: "4g", up_kbps: 5_000.0, down_kbps: 20_000.0, rtt_ms: 50.0 },
    LinkProfile { name: "3g", up_kbps: 750.0, down_kbps: 1_600.0, rtt_ms: 150.0 },
    LinkProfile { name: "congested-uplink", up_kbps: 250.0, down_kbps: 10_000.0, rtt_ms: 80.0 },
];

/// A profile by name.
///
/// # Errors
/// For an unknown name, listing the known ones.
pub fn profile(name: &str) -> Result<LinkProfile> {
    match PROFILES.iter().find(|p| p.name == name) {
        Some(p) => Ok(*p),
        None => bail!("unknown link profile {name:?}; known: {:?}", PROFILES.map(|p| p.name)),
    }
}

/// Move bytes from `from` to `to` through a link of `kbps` and `delay`.
async fn direction(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    kbps: f64,
    delay: Duration,
) {
    let (tx, mut rx) = mpsc::channel::<(Instant, Vec<u8>)>(256);
    let reader = async move {
        let mut free_at = Instant::now();
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let serialize = Duration::from_secs_f64(n as f64 * 8.0 / (kbps * 1000.0));
            free_at = free_at.max(Instant::now()) + serialize;
            if tx.send((free_at + delay, buf[..n].to_vec())).await.is_err() {
                break;
            }
        }
    };
    let writer = async move {
        while let Some((at, chunk)) = rx.recv().await {
            tokio::time::sleep_until(at).await;
            if to.write_all(&chunk).await.is_err() {
                break;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(reader, writer);
}

/// A running proxy; dropping it stops accepting new connections.
pub struct Proxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Proxy {
    /// Listen on a free loopback port and forward every connection to `upstream` through `link`.
    ///
    /// # Errors
    /// When no port can be bound.
    pub async fn start(upstream: SocketAddr, link: LinkProfile) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await.context("binding the proxy")?;
        let addr = listener.local_addr()?;
        let half = Duration::from_secs_f64(link.rtt_ms / 2000.0);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(upstream).await else { return };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::join!(
                        direction(cr, sw, link.up_kbps, half),
                        direction(sr, cw, link.down_kbps, half)
                    );
                });
            }
        });
        Ok(Self { addr, task })
    }
}
