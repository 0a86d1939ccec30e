//! Respondent sets kept between queries: leaves (`GENDER = 2`) and whole composite targets.
//!
//! Survey data never changes, so an entry never goes stale. A set is kept only when its
//! key comes back: the first sight of a key is remembered by hash alone (a small
//! doorkeeper), so a query that is never repeated is evaluated in one fused pass and pays
//! nothing for caching, while a repeated one is materialized on its second sight and costs
//! what a named code does from then on. Within the byte budget the least recently used
//! sets make room, so a burst of one-off conditions cannot shut the popular ones out.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use crate::bitset::Bitset;

/// Identifies a cached set.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum SetKey {
    /// Codes `lo..=hi` of variable `index`.
    Range(usize, u32, u32),
    /// These codes of variable `index`.
    Listed(usize, Vec<u32>),
    /// A whole composite target, by its canonical text.
    Target(String),
}

impl SetKey {
    /// Bytes this key holds beyond its own size.
    fn heap_bytes(&self) -> usize {
        match self {
            SetKey::Range(..) => 0,
            SetKey::Listed(_, codes) => codes.len() * std::mem::size_of::<u32>(),
            SetKey::Target(text) => text.len(),
        }
    }

    fn fingerprint(&self) -> u64 {
        let mut hasher = DefaultHasher::new();
        self.hash(&mut hasher);
        hasher.finish()
    }
}

/// What the cache says about a key.
#[derive(Debug)]
pub(crate) enum Lookup {
    /// The set, kept earlier.
    Hit(Arc<Bitset>),
    /// Seen before but not kept: worth materializing and [`SetCache::insert`]ing.
    Admit,
    /// First sight (now remembered), or too large to keep: evaluate it inline.
    Pass,
}

/// First sights remembered before the doorkeeper starts over; a few hundred KiB at most.
const DOORKEEPER_KEYS: usize = 1 << 14;

/// Sets within a byte budget that counts keys as well as sets (a listed key can be long).
#[derive(Debug)]
pub(crate) struct SetCache {
    budget: usize,
    /// Bytes of one set (every set spans all respondents).
    set_bytes: usize,
    inner: Mutex<Entries>,
}

#[derive(Debug, Default)]
struct Entries {
    bytes: usize,
    /// Ticks on every hit and insert: an entry's `used` says how recently.
    clock: u64,
    map: HashMap<SetKey, Entry>,
    /// Fingerprints of keys seen once and not kept.
    seen: HashSet<u64>,
}

#[derive(Debug)]
struct Entry {
    set: Arc<Bitset>,
    bytes: usize,
    used: u64,
}

impl SetCache {
    /// A cache of sets over `respondents` that holds at most `budget` bytes of keys and
    /// sets.
    pub(crate) fn new(budget: usize, respondents: usize) -> Self {
        SetCache {
            budget,
            set_bytes: respondents.div_ceil(64) * 8,
            inner: Mutex::new(Entries::default()),
        }
    }

    fn entry_bytes(&self, key: &SetKey) -> usize {
        self.set_bytes + key.heap_bytes() + std::mem::size_of::<SetKey>()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        // A panic elsewhere cannot leave the map inconsistent: every update is one step.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Looks `key` up, remembering a first sight.
    pub(crate) fn get(&self, key: &SetKey) -> Lookup {
        let too_large = self.entry_bytes(key) > self.budget / 4;
        let mut guard = self.lock();
        let entries = &mut *guard;
        entries.clock += 1;
        if let Some(entry) = entries.map.get_mut(key) {
            entry.used = entries.clock;
            return Lookup::Hit(Arc::clone(&entry.set));
        }
        if too_large {
            return Lookup::Pass;
        }
        let fingerprint = key.fingerprint();
        if entries.seen.remove(&fingerprint) {
            return Lookup::Admit;
        }
        if entries.seen.len() >= DOORKEEPER_KEYS {
            entries.seen.clear();
        }
        entries.seen.insert(fingerprint);
        Lookup::Pass
    }

    /// Keeps `set` as `key`'s, pushing out the least recently used sets to make room;
    /// returns it shared. A set too large for the budget is returned without being kept.
    pub(crate) fn insert(&self, key: SetKey, set: Bitset) -> Arc<Bitset> {
        let set = Arc::new(set);
        let bytes = self.entry_bytes(&key);
        if bytes > self.budget / 4 {
            return set;
        }
        let mut guard = self.lock();
        let entries = &mut *guard;
        while entries.bytes + bytes > self.budget {
            let Some(oldest) = entries
                .map
                .iter()
                .min_by_key(|(_, entry)| entry.used)
                .map(|(key, _)| key.clone())
            else {
                break;
            };
            if let Some(gone) = entries.map.remove(&oldest) {
                entries.bytes -= gone.bytes;
            }
        }
        entries.clock += 1;
        let entry = Entry {
            set: Arc::clone(&set),
            bytes,
            used: entries.clock,
        };
        if let Some(replaced) = entries.map.insert(key, entry) {
            // A racing request kept the same set first.
            entries.bytes -= replaced.bytes;
        }
        entries.bytes += bytes;
        set
    }

    /// The set of `key`, computed with `make` and kept when the key was seen before;
    /// `None` when the caller should evaluate it inline.
    pub(crate) fn get_or_admit(
        &self,
        key: SetKey,
        make: impl FnOnce() -> Bitset,
    ) -> Option<Arc<Bitset>> {
        match self.get(&key) {
            Lookup::Hit(set) => Some(set),
            Lookup::Admit => Some(self.insert(key, make())),
            Lookup::Pass => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes of one range entry over 512 respondents.
    const RANGE_ENTRY: usize = 512 / 8 + std::mem::size_of::<SetKey>();

    /// A cache with room for exactly eight range entries over 512 respondents.
    fn eight_entry_cache() -> SetCache {
        SetCache::new(8 * RANGE_ENTRY, 512)
    }

    /// Asks for `key` twice (a first sight is never kept); whether it was computed.
    fn computed(cache: &SetCache, key: SetKey) -> bool {
        let mut made = false;
        let set = cache.get_or_admit(key.clone(), || {
            made = true;
            Bitset::empty(512)
        });
        if set.is_none() {
            assert!(!made);
            let again = cache.get_or_admit(key, || {
                made = true;
                Bitset::empty(512)
            });
            assert!(again.is_some());
        }
        made
    }

    fn range(n: u32) -> SetKey {
        SetKey::Range(0, n, n)
    }

    #[test]
    fn a_set_is_kept_on_its_second_sight() {
        let cache = eight_entry_cache();
        assert!(matches!(cache.get(&range(0)), Lookup::Pass));
        assert!(matches!(cache.get(&range(1)), Lookup::Pass));
        assert!(matches!(cache.get(&range(0)), Lookup::Admit));
        cache.insert(range(0), Bitset::full(512));
        match cache.get(&range(0)) {
            Lookup::Hit(set) => assert_eq!(set.count(), 512),
            other => panic!("expected a hit, got {other:?}"),
        }
        assert!(matches!(cache.get(&range(1)), Lookup::Admit));
    }

    #[test]
    fn the_least_recently_used_set_makes_room() {
        let cache = eight_entry_cache();
        for n in 0..8 {
            assert!(computed(&cache, range(n)));
        }
        assert!(!computed(&cache, range(0)), "kept");
        // Full: a ninth pushes out the least recently used (1, not 0 which was just used).
        assert!(computed(&cache, range(8)));
        assert!(!computed(&cache, range(0)));
        assert!(!computed(&cache, range(8)));
        assert!(computed(&cache, range(1)), "1 made room");
    }

    #[test]
    fn keys_count_toward_the_budget() {
        let cache = eight_entry_cache();
        // A key longer than a quarter of the budget is never kept, nor computed here.
        let long = SetKey::Listed(0, (0..200).collect());
        for _ in 0..3 {
            assert!(cache
                .get_or_admit(long.clone(), || unreachable!())
                .is_none());
        }
        // 16 listed codes take 64 bytes more than a range: with seven ranges after it the
        // budget overflows, and the listed key, least recently used, goes.
        let listed = SetKey::Listed(0, (0..16).collect());
        assert!(computed(&cache, listed.clone()));
        for n in 0..7 {
            assert!(computed(&cache, range(n)));
        }
        assert!(computed(&cache, listed), "counted at its full size");
    }

    #[test]
    fn the_doorkeeper_stays_bounded() {
        let cache = eight_entry_cache();
        for n in 0..(DOORKEEPER_KEYS as u32 + 10) {
            assert!(matches!(cache.get(&range(n)), Lookup::Pass));
        }
        assert!(cache.lock().seen.len() <= DOORKEEPER_KEYS);
    }
}
