//! What the server's tests share: a WebSocket client to an in-process server, the real server
//! binary for the tests that need its process (its `main`, its flags, its memory as the kernel
//! counts it), and a raw WebSocket handshake for the tests that must write frames no client
//! library would.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use awc::ws::Frame;
use futures_util::StreamExt;

/// A WebSocket as the tests hold it.
pub type Socket = actix_codec::Framed<awc::BoxedSocket, awc::ws::Codec>;

/// A WebSocket to `path` of `srv`, taking messages up to `max_frame_bytes`.
pub async fn connect(srv: &actix_test::TestServer, path: &str, max_frame_bytes: usize) -> Socket {
    let ws = awc::Client::new().ws(srv.url(path)).max_frame_size(max_frame_bytes);
    ws.connect().await.expect("websocket handshake").1
}

/// The next text, binary or close frame (pings and pongs skipped) within `within`.
pub async fn next_message(ws: &mut Socket, within: Duration) -> Frame {
    tokio::time::timeout(within, async {
        loop {
            match ws.next().await.expect("socket open").expect("valid frame") {
                Frame::Ping(_) | Frame::Pong(_) => continue,
                other => return other,
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("a message within {within:?}"))
}

/// The server binary, killed on drop.
pub struct Server(pub Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Server {
    /// A field of `/proc/PID/status` in KiB (`VmRSS`, `VmHWM`).
    pub fn status_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.0.id())).unwrap();
        let line = status.lines().find(|l| l.starts_with(field)).expect("field in status");
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }
}

/// Start the binary with `args` on a free port; its URL once it listens.
pub fn start(args: &[&str]) -> (Server, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cloud-server"))
        .args(["--port", "0"])
        .args(args)
        // Warnings only, unless asked: a line per request (hundreds under the attacks) buried
        // the failing test's own output in CI's log.
        .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()))
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting cloud-server");
    let stdout = child.stdout.take().unwrap();
    let server = Server(child);
    for line in BufReader::new(stdout).lines() {
        if let Some(url) = line.unwrap().strip_prefix("split-inference demo: ") {
            return (server, url.to_string());
        }
    }
    panic!("the server exited before listening");
}

/// Upgrade `tcp` to a WebSocket on `/ws` of `host` by hand; the server's response head.
pub async fn upgrade(tcp: &mut tokio::net::TcpStream, host: &str) -> std::io::Result<Vec<u8>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let handshake = format!(
        "GET /ws HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    tcp.write_all(handshake.as_bytes()).await?;
    let mut response = Vec::new();
    while !response.ends_with(b"\r\n\r\n") {
        response.push(tcp.read_u8().await?);
    }
    Ok(response)
}

/// The header of a masked binary frame announcing 1 GiB, as a client sends it.
pub fn gigabyte_frame_header() -> Vec<u8> {
    let mut header = vec![0x82, 0x80 | 127];
    header.extend_from_slice(&(1u64 << 30).to_be_bytes());
    header.extend_from_slice(&[1, 2, 3, 4]);
    header
}

/// The app in-process on a test server, with the state it shares (flags as an operator
/// passes them).
pub fn server_and_state(flags: &[&str]) -> (actix_test::TestServer, cloud_server::AppState) {
    let state = state(flags);
    (serve(state.clone()), state)
}

/// The server's state as `flags` load it, not yet serving.
pub fn state(flags: &[&str]) -> cloud_server::AppState {
    cloud_server::AppState::load(&cloud_server::Config::for_tests_with(flags))
        .expect("weights missing: run `cargo xtask setup` (or set SPLIT_WEIGHTS)")
}

/// The app on `state`, in-process on a test server.
pub fn serve(state: cloud_server::AppState) -> actix_test::TestServer {
    let app = move || actix_web::App::new().configure(cloud_server::config_app(state.clone()));
    actix_test::start(app)
}
