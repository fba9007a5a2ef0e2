//! A bounded least-recently-used cache keyed by content hash, used on both sides: the browser
//! skips edge compute and transmission for a frame it has already classified, the server skips
//! compute for features it has already seen.
//!
//! Keys are SHA-256 digests of everything the answer depends on (see [`ContentKey`]), so a hit
//! for different content would need a SHA-256 collision.

use std::collections::{BTreeMap, HashMap};

use sha2::{Digest, Sha256};

/// A SHA-256 digest of a request's content and of everything else its answer depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContentKey([u8; 32]);

impl ContentKey {
    /// Hash `parts` in order, each length-prefixed so that `("ab", "c")` and `("a", "bc")`
    /// differ.
    pub fn of(parts: &[&[u8]]) -> Self {
        let mut h = Sha256::new();
        for p in parts {
            h.update((p.len() as u64).to_le_bytes());
            h.update(p);
        }
        Self(h.finalize().into())
    }

    /// This key within `scope` (a session): equal content in two scopes gets two keys.
    pub fn scoped(self, scope: u64) -> Self {
        Self::of(&[b"scope", &scope.to_le_bytes(), &self.0])
    }

    /// Hash whatever `feed` writes, for content too large to gather into slices first.
    pub fn of_stream(feed: impl FnOnce(&mut dyn FnMut(&[u8]))) -> Self {
        let mut h = Sha256::new();
        feed(&mut |bytes| h.update(bytes));
        Self(h.finalize().into())
    }

    /// The key of a tensor: `tag`, the small `header` bytes (what it belongs to), each
    /// dimension, then the values' little-endian bytes, fed in blocks (no copy of the values).
    pub fn of_tensor(tag: &[u8], header: &[u8], dims: &[usize], values: &[f32]) -> Self {
        Self::of_stream(|feed| {
            feed(tag);
            feed(header);
            for d in dims {
                feed(&(*d as u64).to_le_bytes());
            }
            let mut block = [0u8; 1024];
            for chunk in values.chunks(block.len() / 4) {
                for (dst, v) in block.chunks_exact_mut(4).zip(chunk) {
                    dst.copy_from_slice(&v.to_le_bytes());
                }
                feed(&block[..chunk.len() * 4]);
            }
        })
    }
}

/// Bounded by entry count and by the total `cost` of its entries (bytes, roughly).
#[derive(Debug)]
pub struct LruCache<V> {
    entries: HashMap<ContentKey, (V, usize, u64)>,
    order: BTreeMap<u64, ContentKey>,
    tick: u64,
    cost: usize,
    max_entries: usize,
    max_cost: usize,
    hits: u64,
    misses: u64,
}

impl<V: Clone> LruCache<V> {
    /// At most `max_entries` entries and `max_cost` total cost; 0 entries disables it.
    pub fn new(max_entries: usize, max_cost: usize) -> Self {
        Self {
            entries: HashMap::new(),
            order: BTreeMap::new(),
            tick: 0,
            cost: 0,
            max_entries,
            max_cost,
            hits: 0,
            misses: 0,
        }
    }

    /// The value for `key`, marking it most recently used.
    pub fn get(&mut self, key: &ContentKey) -> Option<V> {
        self.tick += 1;
        let Some((value, _, used)) = self.entries.get_mut(key) else {
            self.misses += 1;
            return None;
        };
        self.order.remove(used);
        *used = self.tick;
        self.order.insert(self.tick, *key);
        self.hits += 1;
        Some(value.clone())
    }

    /// Insert or replace, then evict least recently used entries until within bounds. A value
    /// costlier than the whole budget is not stored.
    pub fn insert(&mut self, key: ContentKey, value: V, cost: usize) {
        self.remove(&key);
        if self.max_entries == 0 || cost > self.max_cost {
            return;
        }
        self.tick += 1;
        self.entries.insert(key, (value, cost, self.tick));
        self.order.insert(self.tick, key);
        self.cost += cost;
        while self.entries.len() > self.max_entries || self.cost > self.max_cost {
            let Some((_, oldest)) = self.order.pop_first() else { break };
            if let Some((_, c, _)) = self.entries.remove(&oldest) {
                self.cost -= c;
            }
        }
    }

    /// Drop `key` if present.
    pub fn remove(&mut self, key: &ContentKey) {
        if let Some((_, cost, used)) = self.entries.remove(key) {
            self.order.remove(&used);
            self.cost -= cost;
        }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Total cost held.
    pub fn cost(&self) -> usize {
        self.cost
    }

    /// `(hits, misses)` since creation.
    pub fn stats(&self) -> (u64, u64) {
        (self.hits, self.misses)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u32) -> ContentKey {
        ContentKey::of(&[&i.to_le_bytes()])
    }

    #[test]
    fn keys_separate_their_parts() {
        assert_ne!(ContentKey::of(&[b"ab", b"c"]), ContentKey::of(&[b"a", b"bc"]));
        assert_eq!(ContentKey::of(&[b"ab", b"c"]), ContentKey::of(&[b"ab", b"c"]));
    }

    #[test]
    fn evicts_the_least_recently_used() {
        let mut c = LruCache::new(3, 1000);
        for i in 0..3 {
            c.insert(key(i), i, 1);
        }
        assert_eq!(c.get(&key(0)), Some(0)); // 1 is now the oldest
        c.insert(key(3), 3, 1);
        assert_eq!(c.get(&key(1)), None);
        assert_eq!((c.get(&key(0)), c.get(&key(2)), c.get(&key(3))), (Some(0), Some(2), Some(3)));
        assert_eq!(c.len(), 3);
        assert_eq!(c.stats(), (4, 1));
    }

    #[test]
    fn stays_within_its_cost_budget() {
        let mut c = LruCache::new(100, 10);
        c.insert(key(0), 'a', 4);
        c.insert(key(1), 'b', 4);
        c.insert(key(2), 'c', 4); // 12 > 10: drops key 0
        assert_eq!((c.len(), c.cost()), (2, 8));
        assert_eq!(c.get(&key(0)), None);
        c.insert(key(3), 'd', 11); // larger than the budget: not stored, nothing evicted
        assert_eq!((c.len(), c.get(&key(3))), (2, None));
        c.insert(key(1), 'B', 1); // replacing updates the cost
        assert_eq!((c.cost(), c.get(&key(1))), (5, Some('B')));
    }

    #[test]
    fn zero_capacity_stores_nothing() {
        let mut c = LruCache::new(0, 100);
        c.insert(key(0), 0, 1);
        assert!(c.is_empty());
    }
}
