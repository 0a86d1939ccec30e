//! One byte budget for every cache of a process: the sets each survey keeps and, in the
//! server, the response cache and the key cache draw on it.
//!
//! Each cache keeps its own entries and their last use on one clock the budget owns, so
//! when a cache needs room the budget can push out the least recently used entry of
//! whichever cache holds it. No cache lock is held while another cache evicts (room is
//! made before the asking cache takes its own lock), so two caches making room at once
//! can't deadlock.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// A cache whose entries can be given back to the budget, least recently used first.
pub trait Evict: Send + Sync + std::fmt::Debug {
    /// The last-use tick of the least recently used entry, `None` when it holds nothing
    /// it may give back.
    fn oldest_use(&self) -> Option<u64>;
    /// Drops the least recently used entry and gives its bytes back; false when there
    /// was none.
    fn evict_oldest(&self) -> bool;
}

/// The shared budget: a limit, what is taken, the use clock, and the caches to evict from.
#[derive(Debug)]
pub struct MemoryBudget {
    limit: AtomicUsize,
    used: AtomicUsize,
    clock: AtomicU64,
    caches: Mutex<Vec<Weak<dyn Evict>>>,
}

impl MemoryBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: usize) -> Arc<MemoryBudget> {
        Arc::new(MemoryBudget {
            limit: AtomicUsize::new(limit),
            used: AtomicUsize::new(0),
            clock: AtomicU64::new(0),
            caches: Mutex::new(Vec::new()),
        })
    }

    /// The limit in bytes now (the server moves it with what the rest of the process
    /// holds: [`MemoryBudget::set_limit`]).
    pub fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    /// Moves the limit to `bytes`, evicting the least recently used entries until what is
    /// taken fits (or nothing is left to evict).
    pub fn set_limit(&self, bytes: usize) {
        self.limit.store(bytes, Ordering::Relaxed);
        self.evict_to_limit();
    }

    /// Bytes taken now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// A new tick of the use clock (later uses have larger ticks).
    pub fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Lets the budget evict from `cache` when any cache needs room.
    pub fn register(&self, cache: Weak<dyn Evict>) {
        let mut caches = self.lock();
        caches.retain(|c| c.strong_count() > 0);
        caches.push(cache);
    }

    /// Takes `bytes`, evicting the least recently used entries of every registered cache
    /// until they fit; false (nothing taken) when even an empty budget can't hold them
    /// or nothing is left to evict.
    pub fn take(&self, bytes: usize) -> bool {
        if bytes > self.limit() {
            return false;
        }
        loop {
            if self.try_take(bytes) {
                return true;
            }
            if !self.evict_one() {
                return self.try_take(bytes);
            }
        }
    }

    /// Takes `bytes` whether or not they fit: for sets a survey's definition bounds (its
    /// bases, groups and named codes), which are counted so the evictable caches shrink
    /// to make room for them.
    pub fn take_anyway(&self, bytes: usize) {
        self.used.fetch_add(bytes, Ordering::Relaxed);
        self.evict_to_limit();
    }

    /// Gives `bytes` back.
    pub fn give_back(&self, bytes: usize) {
        // Never below zero, whatever a caller's arithmetic.
        let _ = self
            .used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                Some(used.saturating_sub(bytes))
            });
    }

    fn try_take(&self, bytes: usize) -> bool {
        self.used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(bytes)
                    .filter(|total| *total <= self.limit())
            })
            .is_ok()
    }

    /// Evicts the least recently used entries until what is taken fits the limit (or
    /// nothing is left to evict).
    fn evict_to_limit(&self) {
        while self.used() > self.limit() && self.evict_one() {}
    }

    /// Evicts the least recently used entry of all registered caches.
    fn evict_one(&self) -> bool {
        let caches: Vec<Arc<dyn Evict>> = self.lock().iter().filter_map(Weak::upgrade).collect();
        let oldest = caches
            .iter()
            .filter_map(|cache| cache.oldest_use().map(|used| (used, cache)))
            .min_by_key(|(used, _)| *used);
        match oldest {
            Some((_, cache)) => cache.evict_oldest(),
            None => false,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Weak<dyn Evict>>> {
        // The list is only pushed to and pruned: a panic elsewhere leaves it whole.
        self.caches.lock().unwrap_or_else(|p| p.into_inner())
    }
}
