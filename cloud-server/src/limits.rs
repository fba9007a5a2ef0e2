//! How many WebSockets may be open: in all, and from one client address. Each open session may
//! buffer up to one maximum-size message, so these caps bound the memory a crowd of
//! connections can pin (`max_connections × MAX_FRAME_BYTES` at worst).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

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
    ip: Option<IpAddr>,
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

#[cfg(test)]
mod tests {
    use super::*;

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
