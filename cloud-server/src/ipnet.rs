//! Addresses and networks of trusted proxies (`--trusted-proxy 10.0.0.0/8`): a load balancer's
//! pods or an ingress controller's get addresses from a range, not one fixed address.

use std::net::IpAddr;
use std::str::FromStr;

/// One address (`127.0.0.1`, `::1`) or a network in CIDR notation (`10.0.0.0/8`, `fd00::/8`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpNet {
    addr: IpAddr,
    prefix: u8,
}

/// Why a `--trusted-proxy` value was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IpNetError {
    /// The part before `/` is not an IPv4 or IPv6 address.
    #[error("{0:?} is not an IP address (use 10.0.0.1 or 10.0.0.0/8)")]
    Address(String),
    /// The prefix length is not a number of bits the address has.
    #[error("prefix /{prefix} is longer than the address's {max} bits")]
    Prefix {
        /// What was given.
        prefix: String,
        /// 32 for IPv4, 128 for IPv6.
        max: u8,
    },
}

impl FromStr for IpNet {
    type Err = IpNetError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (addr, prefix) =
            s.trim().split_once('/').map_or((s.trim(), None), |(a, p)| (a, Some(p)));
        let addr: IpAddr = addr.parse().map_err(|_| IpNetError::Address(addr.to_string()))?;
        let addr = addr.to_canonical();
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|&n| n <= max)
                .ok_or_else(|| IpNetError::Prefix { prefix: p.to_string(), max })?,
        };
        Ok(Self { addr, prefix })
    }
}

impl std::fmt::Display for IpNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl IpNet {
    /// Whether `ip` is in this network (an IPv4 peer seen as `::ffff:a.b.c.d` counts as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let bits = |a: IpAddr| match a {
            IpAddr::V4(v4) => (u128::from(u32::from(v4)) << 96, 32u8),
            IpAddr::V6(v6) => (u128::from(v6), 128u8),
        };
        let (net, width) = bits(self.addr);
        let (other, other_width) = bits(ip.to_canonical());
        if width != other_width {
            return false;
        }
        let mask = if self.prefix == 0 { 0 } else { u128::MAX << (128 - u32::from(self.prefix)) };
        net & mask == other & mask
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn single_addresses_and_networks_match_what_they_should() {
        let one: IpNet = "127.0.0.1".parse().unwrap();
        assert!(one.contains(ip("127.0.0.1")));
        assert!(one.contains(ip("::ffff:127.0.0.1")), "a dual-stack socket's view of IPv4");
        assert!(!one.contains(ip("127.0.0.2")));
        let pods: IpNet = "10.244.0.0/16".parse().unwrap();
        assert!(pods.contains(ip("10.244.3.7")));
        assert!(!pods.contains(ip("10.245.0.1")));
        assert!(!pods.contains(ip("::1")), "families never mix");
        let v6: IpNet = "fd00::/8".parse().unwrap();
        assert!(v6.contains(ip("fd12:3456::1")) && !v6.contains(ip("fe80::1")));
        let any: IpNet = "0.0.0.0/0".parse().unwrap();
        assert!(any.contains(ip("203.0.113.9")) && !any.contains(ip("::1")));
        assert_eq!(pods.to_string(), "10.244.0.0/16");
    }

    #[test]
    fn bad_values_say_what_is_wrong() {
        assert_eq!(
            "10.0.0.0/33".parse::<IpNet>(),
            Err(IpNetError::Prefix { prefix: "33".into(), max: 32 })
        );
        assert!(matches!("proxy.local".parse::<IpNet>(), Err(IpNetError::Address(_))));
        assert!("::1/129".parse::<IpNet>().is_err());
        assert!("10.0.0.0/x".parse::<IpNet>().is_err());
    }
}
