//! `netem --upstream HOST:PORT --link <profile>`: run the link emulator in front of a server
//! until killed; prints `netem: listening on ADDR` (the browser lab points its WebSocket there).

use anyhow::{Context, Result, bail};
use split_perf::netem::{Proxy, profile};

#[actix_web::main]
async fn main() -> Result<()> {
    let (mut upstream, mut link) = (None, None);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--upstream" => upstream = Some(value()?),
            "--link" => link = Some(value()?),
            other => {
                bail!("unknown flag {other}; usage: netem --upstream HOST:PORT --link <profile>")
            }
        }
    }
    let upstream = upstream.context("--upstream HOST:PORT is required")?;
    let addr =
        std::net::ToSocketAddrs::to_socket_addrs(&upstream)?.next().context("upstream address")?;
    let proxy = Proxy::start(addr, profile(link.as_deref().unwrap_or("4g"))?).await?;
    println!("netem: listening on {}", proxy.addr);
    std::future::pending::<()>().await;
    Ok(())
}
