//! `loadgen`: concurrent native clients against a running server; prints a markdown table.
//! See `lab/src/loadgen.rs` for the flags.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use split_lab::netem::{Proxy, schedule};
use split_lab::{LoadConfig, LoadRun, Workload, process_cpu_ms, run};

const USAGE: &str = "usage: loadgen [--url ws://HOST:PORT/ws] [--clients 1,8,64] [--requests N]
               [--workload image|jpeg224|features:<boundary>[:<codec>]] [--image FILE]
               [--server-pid PID] [--link fast-wifi|4g|3g|congested-uplink|...] [--json]
Concurrent native clients against a running server; prints a markdown table (or JSON).
Start the server with --cache-entries 0, or repeats are answered from its cache.";

#[actix_web::main]
async fn main() -> Result<()> {
    let mut url = "ws://127.0.0.1:8080/ws".to_string();
    let mut clients = vec![1usize, 8, 64];
    let mut requests = 20usize;
    let mut workload: Workload = "image".parse()?;
    let mut image = concat!(env!("CARGO_MANIFEST_DIR"), "/../web/samples/chelsea.png").to_string();
    let mut server_pid: Option<u32> = None;
    let mut link: Option<String> = None;
    let mut json = false;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--url" => url = value()?,
            "--clients" => {
                clients = value()?.split(',').map(str::parse).collect::<Result<_, _>>()?
            }
            "--requests" => requests = value()?.parse()?,
            "--workload" => workload = value()?.parse()?,
            "--image" => image = value()?,
            "--server-pid" => server_pid = Some(value()?.parse()?),
            "--link" => link = Some(value()?),
            "--json" => json = true,
            "--help" | "-h" => {
                println!("{USAGE}");
                return Ok(());
            }
            other => bail!("unknown flag {other}\n{USAGE}"),
        }
    }
    // Through an emulated link: a proxy in front of the server, and the URL pointed at it.
    let _proxy = match &link {
        Some(name) => {
            let host = url.trim_start_matches("ws://").split('/').next().unwrap_or_default();
            let upstream =
                std::net::ToSocketAddrs::to_socket_addrs(host)?.next().context("server address")?;
            let proxy = Proxy::with_schedule(upstream, schedule(name)?, |_| {}).await?;
            url = url.replacen(host, &proxy.addr.to_string(), 1);
            Some(proxy)
        }
        None => None,
    };
    let bytes = std::fs::read(&image).with_context(|| format!("reading {image}"))?;
    let frame = workload.frame(&bytes)?;
    if !json {
        println!(
            "workload {workload:?}, {} bytes per request, {requests} requests per client, {url}",
            frame.len()
        );
        println!(
            "| clients | ok | errors | cached | req/s | p50 ms | p95 ms | p99 ms | server compute ms | server CPU ms/req |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|");
    }
    for c in clients {
        let config = LoadConfig {
            url: url.clone(),
            clients: c,
            requests,
            frame: frame.clone(),
            timeout: Duration::from_secs(120),
        };
        let cpu0 = server_pid.map(process_cpu_ms).transpose()?;
        let r = run(&config).await?;
        let cpu = match (server_pid, cpu0) {
            (Some(pid), Some(before)) => Some((process_cpu_ms(pid)? - before) / r.ok.max(1) as f64),
            _ => None,
        };
        if json {
            let line = LoadRun {
                workload: workload.to_string(),
                link: link.clone(),
                bytes: frame.len(),
                requests,
                report: r,
                server_cpu_ms_per_request: cpu,
            };
            println!("{}", serde_json::to_string(&line)?);
            continue;
        }
        let cpu = cpu.map_or_else(|| "–".to_string(), |c| format!("{c:.1}"));
        println!(
            "| {c} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {cpu} |",
            r.ok, r.errors, r.cached, r.rps, r.p50_ms, r.p95_ms, r.p99_ms, r.server_compute_ms
        );
    }
    Ok(())
}
