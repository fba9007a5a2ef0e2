//! `crowd`: many browser-like clients on one server (or a balancer), one mode after another;
//! prints a markdown table (or JSON lines). See `lab/src/crowd.rs` for what a client does.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use split_lab::crowd::{self, CrowdConfig, Frames, Mode};
use split_lab::netem::{Proxy, schedule};
use split_lab::process_cpu_ms;
use split_shared::plan::{Constraints, ControllerConfig, CostTable, Placement};

const USAGE: &str =
    "usage: crowd [--url ws://HOST:PORT/ws] [--clients N] [--modes edge,cloud,block5:q6,auto]
             [--duration-s S] [--settle-s S] [--interval-ms MS] [--link 4g|none|...]
             [--edge-profile browser-wasm-cpu] [--edge-factor LO-HI] [--cost-table FILE]
             [--image FILE] [--server-pid PID[,PID...]] [--start-at UNIX_MS] [--gap-s S] [--json]
             [--queue-price-ms MS] [--load-switch-probability P] [--jump-factor F]
             [--goal latency|battery|data|balanced] [--radio wifi|lte|3g] [--no-price]
Browser-like clients (simulated device compute, real frames, each client on its own emulated
link) against a running server, one mode after another. Start the server with
--cache-entries 0 --rate-limit 0, or repeats are answered from its cache and refused.
--start-at: the first mode starts at this Unix time (ms), mode i at start + i x (duration + gap),
so that browser pages running the same schedule (web/tests/crowd-pages.mjs) join each mode.
--queue-price-ms, --load-switch-probability, --jump-factor: try another tuning of auto's
controller (ControllerConfig in shared/src/plan/controller.rs; the browser's default otherwise).
--goal, --radio: what auto's clients minimize (docs/adaptive.md, \"Goals beyond latency\"; their
requestIntervalMs is --interval-ms), and what the device mJ/req column prices (a model of the
measured compute, upload and wait times, not a measured energy);
--no-price: they ignore the server's published congestion price.";

struct Args {
    url: String,
    clients: usize,
    modes: Vec<Mode>,
    duration: Duration,
    settle: Duration,
    interval: Duration,
    link: Option<String>,
    edge_profile: String,
    edge_factor: (f64, f64),
    cost_table: String,
    image: String,
    server_pids: Vec<u32>,
    start_at_ms: Option<u64>,
    gap: Duration,
    controller: ControllerConfig,
    constraints: Constraints,
    use_price: bool,
    json: bool,
}

fn parse() -> Result<Option<Args>> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let mut a = Args {
        url: "ws://127.0.0.1:8080/ws".into(),
        clients: 8,
        modes: ["edge", "cloud", "block5:q6", "block11:q6", "auto"]
            .iter()
            .map(|m| m.parse())
            .collect::<Result<_>>()?,
        duration: Duration::from_secs(40),
        settle: Duration::from_secs(15),
        interval: Duration::from_millis(250),
        link: Some("4g".into()),
        edge_profile: "browser-wasm-cpu".into(),
        edge_factor: (2.0, 6.0),
        cost_table: format!("{root}/profiles/cost-table.json"),
        image: format!("{root}/web/samples/chelsea.png"),
        server_pids: Vec::new(),
        start_at_ms: None,
        gap: Duration::from_secs(2),
        controller: ControllerConfig::default(),
        constraints: Constraints::default(),
        use_price: true,
        json: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--url" => a.url = value()?,
            "--clients" => a.clients = value()?.parse()?,
            "--modes" => a.modes = value()?.split(',').map(str::parse).collect::<Result<_>>()?,
            "--duration-s" => a.duration = Duration::from_secs_f64(value()?.parse()?),
            "--settle-s" => a.settle = Duration::from_secs_f64(value()?.parse()?),
            "--interval-ms" => a.interval = Duration::from_secs_f64(value()?.parse::<f64>()? / 1e3),
            "--link" => a.link = Some(value()?).filter(|l| l != "none"),
            "--edge-profile" => a.edge_profile = value()?,
            "--edge-factor" => {
                let v = value()?;
                let (lo, hi) = v.split_once('-').unwrap_or((&v, &v));
                a.edge_factor = (lo.parse()?, hi.parse()?);
            }
            "--cost-table" => a.cost_table = value()?,
            "--image" => a.image = value()?,
            "--server-pid" => {
                a.server_pids = value()?.split(',').map(str::parse).collect::<Result<_, _>>()?;
            }
            "--start-at" => a.start_at_ms = Some(value()?.parse()?),
            "--gap-s" => a.gap = Duration::from_secs_f64(value()?.parse()?),
            "--queue-price-ms" => a.controller.queue_price_ms = value()?.parse()?,
            "--load-switch-probability" => {
                a.controller.load_switch_probability = value()?.parse()?;
            }
            "--jump-factor" => a.controller.jump_factor = value()?.parse()?,
            "--goal" => {
                a.constraints.objective.mode = serde_json::from_value(value()?.into())
                    .context("--goal: latency, battery, data or balanced")?;
            }
            "--radio" => {
                a.constraints.objective.radio =
                    serde_json::from_value(value()?.into()).context("--radio: wifi, lte or 3g")?;
            }
            "--no-price" => a.use_price = false,
            "--json" => a.json = true,
            "--help" | "-h" => {
                println!("{USAGE}");
                return Ok(None);
            }
            other => bail!("unknown flag {other}\n{USAGE}"),
        }
    }
    if a.clients == 0 || a.settle >= a.duration {
        bail!("need at least one client and a settling time shorter than the run\n{USAGE}");
    }
    // A client sends a frame every interval: the radio's tail after one request lasts only
    // until the next (the objective's `requestIntervalMs`, as a camera stream's page sets it).
    a.constraints.objective.request_interval_ms = Some(a.interval.as_secs_f64() * 1e3);
    Ok(Some(a))
}

fn server_cpu_ms(pids: &[u32]) -> Result<Option<f64>> {
    if pids.is_empty() {
        return Ok(None);
    }
    pids.iter().map(|&p| process_cpu_ms(p)).sum::<Result<f64>>().map(Some)
}

#[actix_web::main]
async fn main() -> Result<()> {
    let Some(a) = parse()? else { return Ok(()) };
    let text = std::fs::read_to_string(&a.cost_table)
        .with_context(|| format!("reading the cost table {}", a.cost_table))?;
    let table = CostTable::from_json(&text).map_err(anyhow::Error::msg)?;
    let mut candidates = table
        .candidates(&a.edge_profile)
        .with_context(|| format!("no edge profile {:?} in {}", a.edge_profile, a.cost_table))?;
    // The encrypted placement has its own socket and a key per session, and auto chooses it
    // only when asked: the crowd's clients never do.
    candidates.retain(|c| !matches!(c.placement, Placement::Encrypted { .. }));
    let image = std::fs::read(&a.image).with_context(|| format!("reading {}", a.image))?;
    let placements: Vec<Placement> = candidates.iter().map(|c| c.placement.clone()).collect();
    let frames = Frames::build(&image, &placements)?;
    // The policy prices the bytes this photo actually costs, as the page does.
    for c in &mut candidates {
        if let Some(f) = frames.get(&c.placement) {
            c.bytes = f.len() as f64;
        }
    }
    // Each client's connection gets its own emulated link (the proxy shapes per connection).
    let _proxy;
    let mut url = a.url.clone();
    if let Some(name) = &a.link {
        let host =
            url.trim_start_matches("ws://").split('/').next().unwrap_or_default().to_string();
        let upstream =
            std::net::ToSocketAddrs::to_socket_addrs(&host)?.next().context("server address")?;
        let proxy = Proxy::with_schedule(upstream, schedule(name)?, |_| {}).await?;
        url = url.replacen(&host, &proxy.addr.to_string(), 1);
        _proxy = proxy;
    }
    if !a.json {
        println!(
            "{} clients, a frame every {} ms each, device {}x{}..{}x, link {}, {} s ({} s settling)",
            a.clients,
            a.interval.as_millis(),
            a.edge_profile,
            a.edge_factor.0,
            a.edge_factor.1,
            a.link.as_deref().unwrap_or("none"),
            a.duration.as_secs_f64(),
            a.settle.as_secs_f64()
        );
        println!(
            "| mode | answers/s | server req/s | p50 ms | p95 ms | p99 ms | fallback | failed | device ms/req | bytes/req | device mJ/req (model) | server CPU ms/req | placements |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    }
    let unix_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    };
    for (i, mode) in a.modes.iter().enumerate() {
        if let Some(start) = a.start_at_ms {
            let at = start + i as u64 * (a.duration + a.gap).as_millis() as u64;
            tokio::time::sleep(Duration::from_millis(at.saturating_sub(unix_ms()))).await;
        }
        let cfg = CrowdConfig {
            url: url.clone(),
            mode: mode.clone(),
            edge_factors: crowd::spread(a.clients, a.edge_factor.0, a.edge_factor.1),
            candidates: candidates.clone(),
            frames: frames.clone(),
            interval: a.interval,
            duration: a.duration,
            timeout: Duration::from_secs(30),
            controller: a.controller,
            constraints: a.constraints.clone(),
            use_price: a.use_price,
            uplink_kbps: a
                .link
                .as_deref()
                .and_then(|l| split_lab::netem::profile(l).ok())
                .map(|p| p.up_kbps),
        };
        let cpu0 = server_cpu_ms(&a.server_pids)?;
        let (report, samples) = crowd::run(&cfg, a.settle).await;
        // Server CPU over the whole run, per request the server answered in the whole run.
        let answered = samples.iter().filter(|s| s.outcome == crowd::Outcome::Server).count();
        let cpu = server_cpu_ms(&a.server_pids)?
            .zip(cpu0)
            .filter(|_| answered > 0)
            .map(|(after, before)| (after - before) / answered as f64);
        if a.json {
            let line = serde_json::json!({ "report": report, "server_cpu_ms_per_request": cpu });
            println!("{line}");
            continue;
        }
        let top: Vec<String> =
            report.placements.iter().take(3).map(|(p, n)| format!("{p} {n}")).collect();
        println!(
            "| {} | {:.1} | {:.1} | {:.0} | {:.0} | {:.0} | {} | {} | {:.0} | {:.0} | {:.0} | {} | {} |",
            report.mode,
            report.answers_per_s,
            report.server_rps,
            report.p50_ms,
            report.p95_ms,
            report.p99_ms,
            report.fallback,
            report.failed,
            report.edge_ms_per_request,
            report.bytes_per_request,
            report.energy_mj_per_request,
            cpu.map_or_else(|| "–".into(), |c| format!("{c:.1}")),
            top.join(", ")
        );
    }
    Ok(())
}
