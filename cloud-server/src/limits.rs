//! How many WebSockets may be open: in all, and from one client address. Each open session may
//! buffer up to one maximum-size message, so these caps bound the memory a crowd of
//! connections can pin (`max_connections × MAX_FRAME_BYTES` at worst). And how many requests
//! one client address may send per second ([`RateLimiter`]), so a few clients cannot fill the
//! model's queue for everyone.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Open-connection counts, shared by every worker.
#[derive(Debug)]
pub struct ConnectionLimits {
    max_total: usize,
    max_per_ip: usize,
    open: Mutex<(usize, HashMap<IpAddr, usize>)>,
}

/// One admitted connection; dropping it frees its place.
#[derive(Debug)]
pub struct Admitted {
    limits: Arc<ConnectionLimits>,
    /// The client's address, when the transport has one.
    pub ip: Option<IpAddr>,
}

impl ConnectionLimits {
    /// At most `max_total` connections, `max_per_ip` from one address.
    pub fn new(max_total: usize, max_per_ip: usize) -> Arc<Self> {
        Arc::new(Self { max_total, max_per_ip, open: Mutex::new((0, HashMap::new())) })
    }

    /// A place for a connection from `ip`, or why there is none.
    pub fn admit(self: &Arc<Self>, ip: Option<IpAddr>) -> Result<Admitted, String> {
        let mut open = self.open.lock().map_err(|_| "connection table poisoned".to_string())?;
        if open.0 >= self.max_total {
            return Err(format!(
                "the server has its {} connections open; retry later",
                self.max_total
            ));
        }
        if let Some(ip) = ip {
            let n = open.1.entry(ip).or_insert(0);
            if *n >= self.max_per_ip {
                return Err(format!(
                    "{ip} has {} connections open, the most one address may",
                    self.max_per_ip
                ));
            }
            *n += 1;
        }
        open.0 += 1;
        Ok(Admitted { limits: Arc::clone(self), ip })
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.lock().map_or(0, |open| open.0)
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        if let Ok(mut open) = self.limits.open.lock() {
            open.0 = open.0.saturating_sub(1);
            if let Some(ip) = self.ip
                && let Some(n) = open.1.get_mut(&ip)
            {
                *n -= 1;
                if *n == 0 {
                    open.1.remove(&ip);
                }
            }
        }
    }
}

/// A token bucket per client address: `rate` requests per second, up to one second's worth
/// saved (the burst). Buckets that have filled up again are forgotten, so the table holds only
/// recently busy addresses.
#[derive(Debug)]
pub struct RateLimiter {
    rate: f64,
    buckets: Mutex<HashMap<IpAddr, (f64, Instant)>>,
}

/// Addresses tracked before full buckets are swept out.
const SWEEP_AT: usize = 4096;

impl RateLimiter {
    /// `rate` requests per second per address; 0 lets everything through.
    pub fn new(rate: u32) -> Arc<Self> {
        Arc::new(Self { rate: f64::from(rate), buckets: Mutex::new(HashMap::new()) })
    }

    /// Take a token for one request from `ip` at `now`; false when its bucket is empty.
    pub fn allow(&self, ip: Option<IpAddr>, now: Instant) -> bool {
        let (Some(ip), true) = (ip, self.rate > 0.0) else { return true };
        let Ok(mut buckets) = self.buckets.lock() else { return true };
        let rate = self.rate;
        let refill = |(tokens, at): (f64, Instant)| {
            (tokens + now.saturating_duration_since(at).as_secs_f64() * rate).min(rate)
        };
        if buckets.len() >= SWEEP_AT {
            buckets.retain(|_, b| refill(*b) < rate);
        }
        let bucket = buckets.entry(ip).or_insert((rate, now));
        let tokens = refill(*bucket);
        let allowed = tokens >= 1.0;
        *bucket = (if allowed { tokens - 1.0 } else { tokens }, now);
        allowed
    }

    /// Requests per second per address (0: no limit).
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// What a refused client is told, its messages named `what` (requests, frames): the same
    /// words on every socket.
    pub fn refusal(&self, what: &str) -> String {
        format!("over {} {what} per second from this address; retry later", self.rate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn each_address_gets_its_rate_and_a_second_of_burst() {
        let limiter = RateLimiter::new(10);
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let t0 = Instant::now();
        assert_eq!((0..15).filter(|_| limiter.allow(Some(a), t0)).count(), 10, "the burst");
        assert!(limiter.allow(Some(b), t0), "another address has its own bucket");
        let later = t0 + Duration::from_millis(500);
        assert_eq!((0..15).filter(|_| limiter.allow(Some(a), later)).count(), 5, "half a second");
        assert!(RateLimiter::new(0).allow(Some(a), t0), "0: no limit");
        assert!(limiter.allow(None, t0), "no address (a test transport): no limit");
    }

    #[test]
    fn places_are_counted_per_address_and_freed_on_drop() {
        let limits = ConnectionLimits::new(3, 2);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let first = limits.admit(Some(a)).unwrap();
        let _second = limits.admit(Some(a)).unwrap();
        assert!(limits.admit(Some(a)).is_err(), "a third from one address");
        let _third = limits.admit(Some(b)).unwrap();
        assert!(limits.admit(Some(b)).is_err(), "a fourth in all");
        drop(first);
        assert!(limits.admit(Some(a)).is_ok(), "a place freed");
    }
}
