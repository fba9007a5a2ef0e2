//! `./run.sh cluster --replicas N`: N cloud-server replicas behind HAProxy, the way an operator
//! scales the cloud tier out on one machine (and the shape of a container deployment: see
//! `deploy/`).
//!
//! HAProxy balances new connections by least connections, checks each replica's `/readyz`
//! every half second (a replica that is saturated, shutting down or dead gets no new clients)
//! and passes WebSockets through. A session's state (stream references, cache scope) lives
//! on the replica its WebSocket landed on; when that replica goes away the client reconnects
//! through the balancer, lands on another one and starts its streams again from a keyframe.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};

use crate::server::{Server, start_server};

/// Flags every replica gets behind the balancer: every client reaches a replica from the
/// balancer's address, which adds `X-Forwarded-For` (`option forwardfor`); trusting it there
/// keeps the per-address limits per client.
const BEHIND_PROXY: [&str; 2] = ["--trusted-proxy", "127.0.0.1"];

/// `./run.sh cluster`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Server replicas behind the balancer.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=16))]
    replicas: u16,
    /// Port the balancer listens on (loopback).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Pin replica i (all its threads) to core i mod cores (taskset).
    #[arg(long)]
    pin: bool,
    /// Flags for every replica (`./run.sh demo -- --help` lists them).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    server_args: Vec<String>,
}

/// Replicas and the balancer in front of them; all stopped on drop.
pub struct Cluster {
    /// The replicas, in the order of `r1`, `r2`, … in the balancer's configuration.
    pub replicas: Vec<Server>,
    haproxy: Child,
    /// The balancer's URL, e.g. `http://127.0.0.1:8080/`.
    pub url: String,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.haproxy.kill();
        let _ = self.haproxy.wait();
    }
}

/// HAProxy's binary, installed from Debian's package when it is missing and this is root.
pub fn ensure_haproxy() -> Result<PathBuf> {
    let found = |p: &str| Path::new(p).exists().then(|| PathBuf::from(p));
    if let Some(p) = found("/usr/sbin/haproxy").or_else(|| found("/usr/bin/haproxy")) {
        return Ok(p);
    }
    let root = Command::new("id").arg("-u").output().map(|o| o.stdout.starts_with(b"0"));
    ensure!(
        root.unwrap_or(false),
        "HAProxy is not installed: `sudo apt-get install haproxy` (Debian/Ubuntu), then again"
    );
    eprintln!("cluster: installing HAProxy (apt-get install haproxy)");
    crate::browser::apt_install(&["haproxy"])?;
    found("/usr/sbin/haproxy").context("haproxy installed but not in /usr/sbin")
}

/// The balancer's configuration for replicas on `ports`, listening on `port`.
pub fn haproxy_config(port: u16, ports: &[u16]) -> String {
    let mut cfg = format!(
        "# Written by `./run.sh cluster`: {n} cloud-server replicas behind one address.
global
    maxconn 4096

defaults
    mode http
    timeout connect 2s
    timeout client 60s
    timeout server 60s
    # An upgraded WebSocket is a tunnel: idle up to an hour (the server pings every 5 s).
    timeout tunnel 1h
    # A replica that refuses a connection (dead, restarting): try another.
    retries 3
    option redispatch
    # The client's address for the replicas' per-address limits (they trust it from here).
    option forwardfor

frontend split
    bind 127.0.0.1:{port}
    default_backend replicas

backend replicas
    # New sessions go to the replica with the fewest open ones (sessions are long-lived).
    balance leastconn
    # Not ready (saturated queue, a dead worker, shutting down): no new sessions.
    option httpchk GET /readyz
    http-check expect status 200
    default-server check inter 500ms fall 1 rise 2
",
        n = ports.len()
    );
    for (i, p) in ports.iter().enumerate() {
        cfg.push_str(&format!("    server r{} 127.0.0.1:{p}\n", i + 1));
    }
    cfg
}

/// A port nothing listens on now (the balancer binds it a moment later).
pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn port_of(url: &str) -> Result<u16> {
    let rest = url.trim_end_matches('/').rsplit_once(':').context("a URL with a port")?.1;
    Ok(rest.parse()?)
}

/// `GET path` on `127.0.0.1:port`; the status code.
pub fn http_status(port: u16, path: &str) -> Result<u16> {
    let mut tcp = TcpStream::connect(("127.0.0.1", port))?;
    tcp.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(tcp, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n")?;
    let mut head = [0u8; 12];
    tcp.read_exact(&mut head)?;
    Ok(std::str::from_utf8(&head[9..12])?.parse()?)
}

/// Start `replicas` servers (on free ports, with `extra` flags) and HAProxy on `port` in
/// front of them; returns once the balancer answers `/readyz` through a replica.
pub fn start(replicas: usize, port: u16, pin: bool, extra: &[String]) -> Result<Cluster> {
    let haproxy = ensure_haproxy()?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut servers = Vec::with_capacity(replicas);
    for i in 0..replicas {
        let mut args: Vec<String> = BEHIND_PROXY.iter().map(|s| s.to_string()).collect();
        args.extend_from_slice(extra);
        let server = start_server(&args)?;
        if pin {
            // Every thread of the replica (its event loops and model worker) on one core.
            let core = (i % cores).to_string();
            let pid = server.pid().to_string();
            crate::cmd::run(Command::new("taskset").args(["-a", "-pc", &core, &pid]))?;
        }
        servers.push(server);
    }
    let ports = servers.iter().map(|s| port_of(&s.url)).collect::<Result<Vec<_>>>()?;
    let dir = split_paths::cache_dir().join("cluster");
    std::fs::create_dir_all(&dir)?;
    let cfg_path = dir.join(format!("haproxy-{port}.cfg"));
    std::fs::write(&cfg_path, haproxy_config(port, &ports))?;
    let child = Command::new(&haproxy)
        .arg("-db") // foreground, logs to stderr
        .arg("-f")
        .arg(&cfg_path)
        .stdout(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", haproxy.display()))?;
    let cluster =
        Cluster { replicas: servers, haproxy: child, url: format!("http://127.0.0.1:{port}/") };
    let deadline = Instant::now() + Duration::from_secs(20);
    while http_status(port, "/readyz").ok() != Some(200) {
        if Instant::now() > deadline {
            bail!(
                "HAProxy on port {port} did not answer /readyz within 20 s ({})",
                cfg_path.display()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(cluster)
}

/// `./run.sh cluster`: setup and builds as for the demo, then the cluster in the foreground.
pub fn run(a: Args) -> Result<()> {
    crate::setup::ensure_weights()?;
    crate::setup::ensure_calibration()?;
    crate::wasm_build::build()?;
    crate::cmd::build_server()?;
    let mut cluster = start(a.replicas.into(), a.port, a.pin, &a.server_args)?;
    println!(
        "split-inference cluster: {} ({} replicas behind HAProxy: {})",
        cluster.url,
        cluster.replicas.len(),
        cluster.replicas.iter().map(|s| s.url.as_str()).collect::<Vec<_>>().join(" ")
    );
    let status = cluster.haproxy.wait()?;
    bail!("HAProxy exited ({status})")
}

/// What the check reads of `loadgen --json`'s report (`split_lab::LoadReport`; this crate
/// builds, the lab measures, so the check reads the fields it needs from the JSON).
#[derive(serde::Deserialize)]
struct LoadReport {
    ok: usize,
    errors: usize,
    reconnects: usize,
    top1: Vec<u16>,
}

/// The test command's check: three replicas behind HAProxy. Under 8 native clients one replica
/// is killed (SIGKILL) mid-run: every request must still be answered (the clients on the dead
/// replica reconnect through the balancer and send again). Then a page in Chromium sends
/// requests while the replica holding its session is shut down (SIGTERM: 1012): every one must
/// come back right (`web/tests/reconnect.mjs`).
pub fn check(extra: &[String]) -> Result<()> {
    let port = free_port()?;
    let mut args = extra.to_vec();
    // Every request computes; the load generator's clients share one address, and this checks
    // fail-over, not the rate limit.
    args.extend(["--cache-entries", "0", "--rate-limit", "0"].map(String::from));
    let cluster = start(3, port, false, &args)?;
    let ws = format!("ws://127.0.0.1:{port}/ws");
    let (clients, requests) = (8, 30);
    let mut loadgen = Command::new(crate::cmd::target_dir().join("debug/loadgen"))
        .args(["--url", &ws, "--clients", &clients.to_string()])
        .args(["--requests", &requests.to_string(), "--workload", "image", "--json"])
        .arg("--image")
        .arg(crate::paths::repo_root().join("web/samples/chelsea.png"))
        .stdout(Stdio::piped())
        .spawn()
        .context("starting loadgen")?;
    // Let sessions land on both replicas and requests flow, then kill the first.
    std::thread::sleep(Duration::from_millis(700));
    let victim = cluster.replicas[0].pid().to_string();
    crate::cmd::run(Command::new("kill").args(["-KILL", &victim]))?;
    let mut out = String::new();
    loadgen.stdout.take().context("loadgen stdout")?.read_to_string(&mut out)?;
    ensure!(loadgen.wait()?.success(), "loadgen failed through the balancer");
    let run: serde_json::Value =
        serde_json::from_str(out.lines().last().context("loadgen printed nothing")?)?;
    let r: LoadReport = serde_json::from_value(run["report"].clone())
        .context("loadgen's JSON line has no report")?;
    ensure!(
        r.ok == clients * requests && r.errors == 0,
        "with a replica killed, {} of {} requests answered ({} errors)",
        r.ok,
        clients * requests,
        r.errors
    );
    ensure!(r.reconnects > 0, "no client reconnected: was the killed replica serving?");
    ensure!(r.top1.iter().all(|&c| (281..=285).contains(&c)), "wrong answers: {:?}", r.top1);
    // The browser across a graceful shutdown of the replica its session is on.
    let survivors = cluster.replicas[1..]
        .iter()
        .map(|s| Ok(format!("{}@{}", s.pid(), port_of(&s.url)?)))
        .collect::<Result<Vec<_>>>()?
        .join(",");
    let web = crate::paths::repo_root().join("web");
    crate::cmd::run(
        Command::new("node")
            .arg("tests/reconnect.mjs")
            .current_dir(&web)
            .env("SPLIT_URL", &cluster.url)
            .env("SPLIT_REPLICAS", survivors),
    )?;
    // One replica is left; the balancer still answers through it.
    ensure!(http_status(port, "/readyz")? == 200, "the balancer lost its last replica");
    eprintln!(
        "test: cluster check passed: {} requests through HAProxy with one of 3 replicas killed \
         ({} reconnects), and a page's requests across another's shutdown",
        r.ok, r.reconnects
    );
    Ok(())
}

/// The validator of `deploy/kubernetes/`: `kubernetes-validate` from PyPI (the API's schemas,
/// offline), in its own virtual environment under the cache.
const KUBERNETES_VALIDATE: &str = "kubernetes-validate==1.37.0";
/// The Kubernetes release the manifests are checked against.
const KUBERNETES_VERSION: &str = "1.32.0";

/// The validator's program, installed into its virtual environment when missing.
pub fn ensure_manifest_validator() -> Result<PathBuf> {
    let venv = split_paths::cache_dir().join("tools/kubernetes-validate");
    let bin = venv.join("bin/kubernetes-validate");
    if !bin.exists() {
        eprintln!("deploy: installing {KUBERNETES_VALIDATE} into {}", venv.display());
        crate::cmd::run(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
        crate::cmd::run(Command::new(venv.join("bin/pip")).args([
            "install",
            "--quiet",
            "--disable-pip-version-check",
            KUBERNETES_VALIDATE,
        ]))?;
    }
    Ok(bin)
}

/// Check the Kubernetes manifests against the API's schemas (strict: unknown fields fail).
/// No container runtime or cluster runs here, so this is what can be checked of them.
pub fn check_manifests() -> Result<()> {
    let bin = ensure_manifest_validator()?;
    let dir = crate::paths::repo_root().join("deploy/kubernetes");
    let mut manifests: Vec<PathBuf> = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    manifests.sort();
    ensure!(!manifests.is_empty(), "no manifests in {}", dir.display());
    crate::cmd::run(
        Command::new(&bin).args(["-k", KUBERNETES_VERSION, "--strict", "--quiet"]).args(&manifests),
    )
}
