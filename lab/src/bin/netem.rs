//! `netem --upstream HOST:PORT --link <profile|trace> [--scale F]` (F shortens a trace's time): run the link emulator in front of a server
//! until killed; prints `netem: listening on ADDR` (the browser lab points its WebSocket there)
//! and, when the first connection starts the link's clock, `netem: clock started at <unix ms>`.

use anyhow::{Context, Result, bail};
use split_lab::netem::{Proxy, schedule};

const USAGE: &str = "usage: netem --upstream HOST:PORT --link <profile|trace> [--scale F]
Runs the link emulator in front of a server until killed (profiles: fast-wifi, 4g, 3g,
congested-uplink, rtt:<ms>; traces: degrading, outage; recorded traces: verizon-lte,
att-lte-driving, tmobile-umts-driving; F shortens a trace's time).";

#[actix_web::main]
async fn main() -> Result<()> {
    let (mut upstream, mut link, mut scale) = (None, None, 1.0f64);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--upstream" => upstream = Some(value()?),
            "--link" => link = Some(value()?),
            "--scale" => scale = value()?.parse()?,
            "--help" | "-h" => {
                println!("{USAGE}");
                return Ok(());
            }
            other => bail!("unknown flag {other}\n{USAGE}"),
        }
    }
    let upstream = upstream.context("--upstream HOST:PORT is required")?;
    let addr =
        std::net::ToSocketAddrs::to_socket_addrs(&upstream)?.next().context("upstream address")?;
    let schedule = schedule(link.as_deref().unwrap_or("4g"))?.scaled(scale);
    let proxy = Proxy::with_schedule(addr, schedule, |at| {
        let ms = at.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
        println!("netem: clock started at {ms}");
    })
    .await?;
    println!("netem: listening on {}", proxy.addr);
    std::future::pending::<()>().await;
    Ok(())
}
