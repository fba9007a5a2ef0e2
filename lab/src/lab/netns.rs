//! Kernel rate limits for the lab: a network namespace joined to this one by a veth pair, with
//! `tc tbf` on each end (uplink on the namespace's side, downlink on the host's). This kernel has
//! no `netem`, so the round trip is added by the userspace proxy (`rtt:<ms>` link) inside the
//! namespace while the kernel does the serialization. Needs root and iproute2; everything is
//! removed on drop.

use std::process::Command;

use crate::netem::LinkProfile;
use anyhow::{Context, Result, bail};

/// A namespace with a veth pair: the host end is `host_ip`, the namespace end `ns_ip`.
pub struct Netns {
    /// `ip netns` name.
    pub name: String,
    host_if: String,
    ns_if: String,
    /// Address of the host end (where the lab's second server listens).
    pub host_ip: String,
}

fn ip(args: &[&str]) -> Result<()> {
    sh("ip", args)
}

fn sh(program: &str, args: &[&str]) -> Result<()> {
    let out = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("running {program} (iproute2)"))?;
    if !out.status.success() {
        bail!("{program} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

impl Netns {
    /// Create the namespace and the link (addresses 10.213.<n>.1/30 and .2/30, `n` from the pid).
    ///
    /// # Errors
    /// Without root or iproute2, or when the names are taken.
    pub fn create() -> Result<Self> {
        let id = std::process::id() % 250;
        let ns = Self {
            name: format!("splitlab{id}"),
            host_if: format!("slh{id}"),
            ns_if: format!("sln{id}"),
            host_ip: format!("10.213.{id}.1"),
        };
        let ns_ip = format!("10.213.{id}.2/30");
        ip(&["netns", "add", &ns.name])?;
        // From here on, drop removes what exists.
        ip(&["link", "add", &ns.host_if, "type", "veth", "peer", "name", &ns.ns_if])?;
        ip(&["link", "set", &ns.ns_if, "netns", &ns.name])?;
        ip(&["addr", "add", &format!("{}/30", ns.host_ip), "dev", &ns.host_if])?;
        ip(&["link", "set", &ns.host_if, "up"])?;
        ns.exec_ok("ip", &["addr", "add", &ns_ip, "dev", &ns.ns_if])?;
        ns.exec_ok("ip", &["link", "set", &ns.ns_if, "up"])?;
        ns.exec_ok("ip", &["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    fn exec_ok(&self, program: &str, args: &[&str]) -> Result<()> {
        let mut all = vec!["netns", "exec", &self.name, program];
        all.extend_from_slice(args);
        ip(&all)
    }

    /// A command that runs inside the namespace.
    pub fn command(&self, program: &std::path::Path) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).arg(program);
        c
    }

    /// Shape both directions with tbf at `link`'s rates (its RTT is not applied here).
    ///
    /// # Errors
    /// When tc refuses.
    pub fn shape(&self, link: &LinkProfile) -> Result<()> {
        // A burst of 5 ms of traffic (at least two full-size frames): tbf needs room for one
        // packet, and a larger bucket would let a whole feature frame through at line rate.
        let tbf = |kbps: f64| {
            let burst = ((kbps * 1000.0 / 8.0 * 0.005) as u64).max(3028);
            vec![
                "qdisc".to_string(),
                "replace".into(),
                "dev".into(),
                String::new(),
                "root".into(),
                "tbf".into(),
                "rate".into(),
                format!("{}kbit", kbps as u64),
                "burst".into(),
                burst.to_string(),
                "latency".into(),
                "5s".into(),
            ]
        };
        let mut up = tbf(link.up_kbps);
        up[3] = self.ns_if.clone();
        let mut all = vec!["netns".to_string(), "exec".into(), self.name.clone(), "tc".into()];
        all.extend(up);
        ip(&all.iter().map(String::as_str).collect::<Vec<_>>())?;
        let mut down = tbf(link.down_kbps);
        down[3] = self.host_if.clone();
        sh("tc", &down.iter().map(String::as_str).collect::<Vec<_>>())
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = ip(&["link", "del", &self.host_if]);
        let _ = ip(&["netns", "del", &self.name]);
    }
}
