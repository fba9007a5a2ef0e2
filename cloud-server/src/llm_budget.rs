//! The KV budget of `/llm`: what every conversation's cache holds (its positions × its
//! blocks, reserved a step of positions ahead as it fills), against the server's total
//! (`--llm-kv-mib`). A conversation that does not fit
//! may take the cache of conversations idle for `--llm-evict-after` seconds, the least
//! recently active first, and only when that makes room: each one evicted is told
//! ([`Lease::evicted`]), frees its cache and closes with `evicted`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// The server's KV budget and the conversations holding it.
pub struct KvBudget {
    total: usize,
    held: AtomicUsize,
    /// Idle time after which a conversation may be evicted; `None`: never.
    evict_after: Option<Duration>,
    leases: Mutex<Vec<Weak<Lease>>>,
}

/// One conversation's hold on the budget, shared between it and the budget's list.
pub struct Lease {
    /// Bytes held; 0 once evicted.
    bytes: AtomicUsize,
    /// When it last received or answered a frame.
    last_active: Mutex<Instant>,
    /// Whether a frame of it is being answered (never evicted then).
    busy: AtomicBool,
    evicted: AtomicBool,
    wake: tokio::sync::Notify,
}

impl Lease {
    /// Mark the conversation as answering a frame (`true`) or waiting for one (`false`, which
    /// also restarts its idle time).
    pub fn set_busy(&self, busy: bool) {
        self.busy.store(busy, Ordering::Release);
        if let Ok(mut t) = self.last_active.lock() {
            *t = Instant::now();
        }
    }

    /// Wait until the budget takes this conversation's cache back (at once if it already did).
    pub async fn evicted(&self) {
        while !self.evicted.load(Ordering::Acquire) {
            self.wake.notified().await;
        }
    }
}

/// Until the budget takes `lease` back (at once if it already did); never without one (a
/// socket holding nothing yet).
pub async fn evicted(lease: Option<&Lease>) {
    match lease {
        Some(lease) => lease.evicted().await,
        None => std::future::pending().await,
    }
}

/// A conversation's reservation: the budget comes back when it is dropped.
pub struct Reservation {
    budget: Arc<KvBudget>,
    lease: Arc<Lease>,
}

impl Reservation {
    /// Its lease.
    pub fn lease(&self) -> &Arc<Lease> {
        &self.lease
    }

    /// Hold `bytes` more (a conversation's cache growing), evicting idle conversations if that
    /// makes room (never this one while it is busy, as it is while a frame of it is answered),
    /// or say why not; a refusal holds nothing more.
    pub fn grow(&self, bytes: usize) -> Result<(), String> {
        self.budget.take(bytes)?;
        self.lease.bytes.fetch_add(bytes, Ordering::AcqRel);
        Ok(())
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.held.fetch_sub(self.lease.bytes.swap(0, Ordering::AcqRel), Ordering::AcqRel);
    }
}

impl KvBudget {
    /// `total` bytes for all conversations; idle ones evictable after `evict_after` (`None`:
    /// never).
    pub fn new(total: usize, evict_after: Option<Duration>) -> Arc<Self> {
        Arc::new(Self {
            total,
            held: AtomicUsize::new(0),
            evict_after,
            leases: Mutex::new(Vec::new()),
        })
    }

    /// Bytes reserved now.
    #[cfg(test)]
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    /// Reserve `bytes`, evicting idle conversations if that makes room, or say why not.
    pub fn reserve(self: &Arc<Self>, bytes: usize) -> Result<Reservation, String> {
        self.take(bytes)?;
        let lease = Arc::new(Lease {
            bytes: AtomicUsize::new(bytes),
            last_active: Mutex::new(Instant::now()),
            busy: AtomicBool::new(false),
            evicted: AtomicBool::new(false),
            wake: tokio::sync::Notify::new(),
        });
        if let Ok(mut leases) = self.leases.lock() {
            leases.retain(|l| l.strong_count() > 0);
            leases.push(Arc::downgrade(&lease));
        }
        Ok(Reservation { budget: self.clone(), lease })
    }

    /// Count `bytes` more as held, evicting idle conversations if that makes room, or say why
    /// not.
    fn take(&self, bytes: usize) -> Result<(), String> {
        let mut held = self.held.load(Ordering::Acquire);
        loop {
            let after = held.saturating_add(bytes);
            if after > self.total {
                if self.evict(after - self.total) {
                    held = self.held.load(Ordering::Acquire);
                    continue;
                }
                let held_by = match self.evict_after {
                    Some(_) => "by conversations not idle long enough to evict",
                    None => "by open conversations",
                };
                return Err(format!(
                    "the server's KV budget is {} MiB, {} MiB are held {held_by}; this \
                     conversation asks for {:.1} MiB more",
                    self.total >> 20,
                    held >> 20,
                    bytes as f64 / (1 << 20) as f64
                ));
            }
            match self.held.compare_exchange(held, after, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok(()),
                Err(now) => held = now,
            }
        }
    }

    /// Take back at least `needed` bytes from conversations idle long enough, least recently
    /// active first; nobody is evicted unless together they free enough. Whether it did.
    fn evict(&self, needed: usize) -> bool {
        let Some(after) = self.evict_after else { return false };
        let Ok(leases) = self.leases.lock() else { return false };
        let now = Instant::now();
        let idle_since = |l: &Lease| l.last_active.lock().map_or(now, |t| *t);
        let mut idle: Vec<(Instant, Arc<Lease>)> = leases
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|l| !l.busy.load(Ordering::Acquire) && l.bytes.load(Ordering::Acquire) > 0)
            .map(|l| (idle_since(&l), l))
            .filter(|(since, _)| now.duration_since(*since) >= after)
            .collect();
        if idle.iter().map(|(_, l)| l.bytes.load(Ordering::Acquire)).sum::<usize>() < needed {
            return false;
        }
        idle.sort_by_key(|(since, _)| *since);
        let mut freed = 0;
        for (_, lease) in idle {
            if freed >= needed {
                break;
            }
            let bytes = lease.bytes.swap(0, Ordering::AcqRel);
            self.held.fetch_sub(bytes, Ordering::AcqRel);
            freed += bytes;
            lease.evicted.store(true, Ordering::Release);
            lease.wake.notify_one();
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_conversations_make_room_oldest_first_and_only_when_that_suffices() {
        let budget = KvBudget::new(100, Some(Duration::ZERO));
        let a = budget.reserve(40).unwrap();
        let b = budget.reserve(40).unwrap();
        b.lease().set_busy(true);
        // 70 more: 50 must be freed, `a` alone is idle and holds 40; nobody is evicted.
        assert!(budget.reserve(70).is_err());
        assert!(!a.lease().evicted.load(Ordering::Acquire));
        assert_eq!(budget.held(), 80);
        // 50 more: `a`'s 40 with the 20 free make room; busy `b` is not touched.
        let c = budget.reserve(50).unwrap();
        assert!(a.lease().evicted.load(Ordering::Acquire));
        assert!(!b.lease().evicted.load(Ordering::Acquire));
        assert_eq!(budget.held(), 90);
        // The evicted one's end gives nothing back twice.
        drop(a);
        assert_eq!(budget.held(), 90);
        b.lease().set_busy(false);
        c.lease().set_busy(false);
        std::thread::sleep(Duration::from_millis(2));
        b.lease().set_busy(false); // b is now the more recent: c goes first
        let d = budget.reserve(50).unwrap();
        assert!(c.lease().evicted.load(Ordering::Acquire));
        assert!(!b.lease().evicted.load(Ordering::Acquire));
        drop((b, c, d));
        assert_eq!(budget.held(), 0);
    }

    #[test]
    fn without_eviction_a_full_budget_refuses() {
        let budget = KvBudget::new(100, None);
        let a = budget.reserve(80).unwrap();
        let Err(why) = budget.reserve(30) else { panic!("over the budget") };
        assert!(why.contains("KV budget is"), "{why}");
        drop(a);
        assert!(budget.reserve(30).is_ok());
    }

    #[test]
    fn a_reservation_grows_while_the_budget_has_room_and_gives_everything_back() {
        let budget = KvBudget::new(100, Some(Duration::ZERO));
        let a = budget.reserve(30).unwrap();
        a.lease().set_busy(true);
        a.grow(40).unwrap();
        assert_eq!((a.lease.bytes.load(Ordering::Acquire), budget.held()), (70, 70));
        // Past the budget: refused, nothing more held, and a busy conversation is not evicted
        // to make room for its own growth.
        let Err(why) = a.grow(31) else { panic!("over the budget") };
        assert!(why.contains("KV budget is"), "{why}");
        assert_eq!((a.lease.bytes.load(Ordering::Acquire), budget.held()), (70, 70));
        assert!(!a.lease().evicted.load(Ordering::Acquire));
        // An idle other conversation makes room for it.
        let b = budget.reserve(30).unwrap();
        b.lease().set_busy(false);
        a.grow(20).unwrap();
        assert!(b.lease().evicted.load(Ordering::Acquire));
        assert_eq!(budget.held(), 90);
        drop((a, b));
        assert_eq!(budget.held(), 0);
    }

    #[test]
    fn a_conversation_is_not_evicted_before_its_idle_time() {
        let budget = KvBudget::new(100, Some(Duration::from_secs(60)));
        let a = budget.reserve(80).unwrap();
        assert!(budget.reserve(30).is_err());
        assert!(!a.lease().evicted.load(Ordering::Acquire));
    }
}
