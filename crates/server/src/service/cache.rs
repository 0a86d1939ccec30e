//! A bounded cache of `POST /v1/crosstab` answers.
//!
//! A loaded survey is immutable: a re-import installs a new `Arc<Survey>` in the catalog
//! instead of changing the old one. So the 200 body for a given request body is a pure
//! function of (that body, the survey instance it was computed on), and can be reused
//! for as long as the catalog still serves that very instance.
//!
//! Entries are keyed by the raw request body (a valid body was validated once; validation
//! is a pure function of the bytes) and remember the survey instance by a [`Weak`]
//! pointer. A hit is used only when the catalog's current `Arc<Survey>` for the entry's
//! survey code is that same instance ([`Entry::is_for`]); the `Weak` keeps the
//! allocation reserved, so a new version can never reuse the old one's address and be
//! mistaken for it. After a re-import every old entry simply stops matching and is
//! replaced on the next miss.
//!
//! What a cache hit skips: JSON parsing, expression parsing, the engine and response
//! serialization. What it never skips: authentication, the Content-Type and size checks,
//! the entitlement check for the caller (grants differ per key) and the bill.
//!
//! An answer is kept on its body's second sight ([`Doorkeeper`]): a client that never asks
//! the same thing twice costs the cache one fingerprint a request, and pushes out no
//! answer that others ask again.
//!
//! Bounded by entry count and by bytes (key + body) drawn from the process's one
//! [`MemoryBudget`], evicting the least recently used answers first (or, when another
//! cache on the budget holds an older entry, that one). `--response-cache-entries 0`
//! disables it.

use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, HashSet};
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use axum::body::Bytes;
use crosstab_engine::{Doorkeeper, Evict, MemoryBudget, Survey, DOORKEEPER_BYTES};

/// Default most entries.
pub const DEFAULT_ENTRIES: usize = 4096;
/// Bodies larger than this are never cached (they would evict too much).
const MAX_ENTRY_BYTES: usize = 1 << 20;
/// Bytes an entry costs besides its request and answer: the shared entry (its header and
/// fields), the text's shared header, the survey code and base it keeps alive, its slot
/// in the map and in the use order (with their slack).
const ENTRY_OVERHEAD: usize = 320;

/// One cached answer.
///
/// The request body it answers and the answer itself are kept end to end in one block of
/// their own size: a kept answer is few blocks on the heap, so the answers evicted all day
/// leave few holes in the allocator's pages (resident memory the budget would not see).
#[derive(Debug)]
pub struct Entry {
    survey: Weak<Survey>,
    /// The survey code of the request.
    pub survey_code: Arc<str>,
    /// The group filter of the request (`None`: all groups).
    pub group: Option<Arc<str>>,
    /// The population base of the request.
    pub base: Arc<str>,
    /// Number of target codes (for the bill).
    pub targets: i64,
    /// The request body, then the serialized 200 body (empty until kept).
    text: Bytes,
    key_len: usize,
    /// The budget's tick of its last use (changed only under the cache's lock).
    used: AtomicU64,
}

impl Entry {
    /// A cacheable answer computed on `survey` for a request about `survey_code` (the
    /// answer itself is given to [`ResponseCache::insert`], which copies it only if kept).
    pub fn new(
        survey: &Arc<Survey>,
        survey_code: Arc<str>,
        group: Option<Arc<str>>,
        base: Arc<str>,
        targets: i64,
    ) -> Entry {
        Entry {
            survey: Arc::downgrade(survey),
            survey_code,
            group,
            base,
            targets,
            text: Bytes::new(),
            key_len: 0,
            used: AtomicU64::new(0),
        }
    }

    /// Whether this answer was computed on exactly `survey` (the same loaded instance,
    /// not merely the same code).
    pub fn is_for(&self, survey: &Arc<Survey>) -> bool {
        std::ptr::eq(self.survey.as_ptr(), Arc::as_ptr(survey))
    }

    /// The serialized 200 body (shares the entry's block: no copy).
    pub fn body(&self) -> Bytes {
        self.text.slice(self.key_len..)
    }

    /// The request body this answers.
    fn key(&self) -> &[u8] {
        &self.text[..self.key_len]
    }

    fn bytes(&self) -> usize {
        self.text.len() + ENTRY_OVERHEAD
    }
}

/// A kept entry as the map's key: hashed and compared by its request body, so a lookup by
/// body needs no second copy of it.
#[derive(Debug, Clone)]
struct Keyed(Arc<Entry>);

impl std::borrow::Borrow<[u8]> for Keyed {
    fn borrow(&self) -> &[u8] {
        self.0.key()
    }
}

impl PartialEq for Keyed {
    fn eq(&self, other: &Self) -> bool {
        self.0.key() == other.0.key()
    }
}

impl Eq for Keyed {}

impl std::hash::Hash for Keyed {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // As `[u8]` hashes, which `Borrow<[u8]>` requires.
        self.0.key().hash(state);
    }
}

#[derive(Debug)]
struct Slots {
    /// Each entry, found by its request body.
    map: HashSet<Keyed>,
    by_use: BTreeMap<u64, Arc<Entry>>,
    bytes: usize,
    /// Bodies answered once and not kept, by the map's hash (counted as
    /// [`DOORKEEPER_BYTES`] for the cache's life); none when the cache is disabled.
    seen: Option<Doorkeeper>,
}

/// The entries, evictable by the budget.
#[derive(Debug)]
struct Shared {
    budget: Arc<MemoryBudget>,
    /// The map's hasher, so a body's fingerprint is taken before the lock.
    hasher: RandomState,
    slots: Mutex<Slots>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Slots> {
        // Every update is one step under the lock: a panic elsewhere leaves it whole.
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Slots {
    /// Removes the least recently used entry; the bytes it held.
    fn pop_oldest(&mut self) -> Option<usize> {
        let (_, entry) = self.by_use.pop_first()?;
        if !self.map.remove(entry.key()) {
            return None;
        }
        let bytes = entry.bytes();
        self.bytes -= bytes;
        Some(bytes)
    }

    /// Removes the entry for `key`, if any; the bytes it held.
    fn remove(&mut self, key: &[u8]) -> Option<usize> {
        let Keyed(entry) = self.map.take(key)?;
        self.by_use.remove(&entry.used.load(Ordering::Relaxed));
        let bytes = entry.bytes();
        self.bytes -= bytes;
        Some(bytes)
    }
}

impl Evict for Shared {
    fn oldest_use(&self) -> Option<u64> {
        self.lock().by_use.keys().next().copied()
    }

    fn evict_oldest(&self) -> bool {
        let freed = self.lock().pop_oldest();
        if let Some(bytes) = freed {
            self.budget.give_back(bytes);
        }
        freed.is_some()
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let slots = self.lock();
        let doorkeeper = if slots.seen.is_some() {
            DOORKEEPER_BYTES
        } else {
            0
        };
        self.budget.give_back(slots.bytes + doorkeeper);
    }
}

/// The cache; shared by every request.
#[derive(Debug)]
pub struct ResponseCache {
    max_entries: usize,
    shared: Arc<Shared>,
}

impl ResponseCache {
    /// A cache of at most `max_entries` answers and `max_bytes` bytes of its own (0
    /// disables).
    pub fn new(max_entries: usize, max_bytes: usize) -> ResponseCache {
        ResponseCache::within(max_entries, &MemoryBudget::new(max_bytes))
    }

    /// A cache of at most `max_entries` answers drawing on `budget` (0 disables).
    pub fn within(max_entries: usize, budget: &Arc<MemoryBudget>) -> ResponseCache {
        let seen = (max_entries > 0).then(Doorkeeper::default);
        if seen.is_some() {
            budget.take_anyway(DOORKEEPER_BYTES);
        }
        let hasher = RandomState::new();
        let shared = Arc::new(Shared {
            budget: Arc::clone(budget),
            slots: Mutex::new(Slots {
                map: HashSet::with_hasher(hasher.clone()),
                by_use: BTreeMap::new(),
                bytes: 0,
                seen,
            }),
            hasher,
        });
        let evict: Arc<dyn Evict> = shared.clone();
        budget.register(Arc::downgrade(&evict));
        ResponseCache {
            max_entries,
            shared,
        }
    }

    /// Whether the cache holds anything at all.
    pub fn enabled(&self) -> bool {
        self.max_entries > 0
    }

    /// The answer cached for request body `key`, whatever survey instance it was for
    /// (check [`Entry::is_for`] against the catalog before using it).
    pub fn get(&self, key: &[u8]) -> Option<Arc<Entry>> {
        if !self.enabled() {
            return None;
        }
        let now = self.shared.budget.tick();
        let mut guard = self.shared.lock();
        let slots = &mut *guard;
        let Keyed(entry) = slots.map.get(key)?;
        let before = entry.used.swap(now, Ordering::Relaxed);
        if let Some(kept) = slots.by_use.remove(&before) {
            slots.by_use.insert(now, kept);
        }
        Some(Arc::clone(entry))
    }

    /// Remembers `answer` as `entry`'s answer to request body `key`, replacing any older
    /// one; a body not answered before is only remembered as seen.
    pub fn insert(&self, key: &[u8], answer: &[u8], mut entry: Entry) {
        let size = key.len() + answer.len() + ENTRY_OVERHEAD;
        if !self.enabled() || size > MAX_ENTRY_BYTES {
            return;
        }
        let budget = &self.shared.budget;
        let fingerprint = self.shared.hasher.hash_one(key);
        let mut guard = self.shared.lock();
        let slots = &mut *guard;
        // A replaced answer's room is given back first, so replacing never evicts.
        let replaced = slots.remove(key);
        let admitted = replaced.is_some()
            || slots
                .seen
                .as_mut()
                .is_some_and(|seen| seen.admits(fingerprint));
        drop(guard);
        if let Some(bytes) = replaced {
            budget.give_back(bytes);
        }
        if !admitted {
            return;
        }
        // A copy of exactly its own size: the request body is a slice of the connection's
        // read buffer (up to ~400 KiB), and the answer was written into a buffer grown by
        // doubling, neither of which the budget would see.
        let mut text = Vec::with_capacity(key.len() + answer.len());
        text.extend_from_slice(key);
        text.extend_from_slice(answer);
        entry.text = Bytes::from(text);
        entry.key_len = key.len();
        // Room is made before the lock is taken: making it may evict from here.
        if !budget.take(size) {
            return;
        }
        let used = budget.tick();
        entry.used = AtomicU64::new(used);
        let entry = Arc::new(entry);
        let mut guard = self.shared.lock();
        let slots = &mut *guard;
        // Another request may have kept the same answer meanwhile.
        if let Some(bytes) = slots.remove(key) {
            budget.give_back(bytes);
        }
        slots.map.insert(Keyed(Arc::clone(&entry)));
        slots.by_use.insert(used, entry);
        slots.bytes += size;
        while slots.map.len() > self.max_entries {
            match slots.pop_oldest() {
                Some(bytes) => budget.give_back(bytes),
                None => break,
            }
        }
    }

    /// Number of cached answers.
    pub fn len(&self) -> usize {
        self.shared.lock().map.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crosstab_engine::demo::{self, DemoConfig};

    fn survey(seed: u64) -> Arc<Survey> {
        let config = DemoConfig {
            respondents: 50,
            flags: 2,
            seed,
        };
        Arc::new(Survey::from_bytes(&demo::compile(&config).unwrap()).unwrap())
    }

    fn entry(survey: &Arc<Survey>) -> Entry {
        Entry::new(survey, "DEMO".into(), None, "ADULTS".into(), 1)
    }

    /// Answers `key` twice, so the second answer is kept.
    fn keep(cache: &ResponseCache, key: &[u8], answer: &[u8], survey: &Arc<Survey>) {
        cache.insert(key, answer, entry(survey));
        cache.insert(key, answer, entry(survey));
    }

    #[test]
    fn an_answer_is_kept_on_its_second_sight() {
        let s = survey(4);
        let budget = MemoryBudget::new(1 << 20);
        let cache = ResponseCache::within(8, &budget);
        assert_eq!(budget.used(), DOORKEEPER_BYTES);
        cache.insert(b"once", b"body", entry(&s));
        assert!(cache.is_empty() && cache.get(b"once").is_none());
        assert_eq!(
            budget.used(),
            DOORKEEPER_BYTES,
            "a first sight takes no room"
        );
        cache.insert(b"twice", b"body", entry(&s));
        cache.insert(b"twice", b"BODY", entry(&s));
        assert_eq!(cache.get(b"twice").unwrap().body(), &b"BODY"[..]);
        assert!(cache.get(b"once").is_none());
        // A kept body answered again (on a new survey version, say) is replaced at once.
        cache.insert(b"twice", b"newer", entry(&s));
        assert_eq!(cache.get(b"twice").unwrap().body(), &b"newer"[..]);
        // One-off answers by the thousand push out no kept answer.
        for n in 0..10_000u32 {
            cache.insert(&n.to_le_bytes(), b"body", entry(&s));
        }
        assert_eq!(cache.len(), 1);
        assert!(cache.get(b"twice").is_some());
        drop(cache);
        assert_eq!(budget.used(), 0, "the doorkeeper's room is given back too");
    }

    #[test]
    fn a_kept_answer_is_one_copy_of_its_own_size_of_the_request_and_the_answer() {
        let buffer = Bytes::from(vec![b'x'; 256 * 1024]);
        let request = buffer.slice(1000..1100);
        let mut answer = Vec::with_capacity(4096);
        answer.extend_from_slice(b"answer");
        let cache = ResponseCache::new(8, 1 << 20);
        keep(&cache, &request, &answer, &survey(1));
        let hit = cache.get(&request).unwrap();
        assert_eq!(hit.key(), &request[..]);
        assert_eq!(hit.body(), &b"answer"[..]);
        assert_eq!(hit.text.len(), 106, "no spare capacity kept");
        let start = buffer.as_ptr() as usize;
        let kept = hit.text.as_ptr() as usize;
        assert!(
            !(start..start + buffer.len()).contains(&kept),
            "the cache pins the request's read buffer"
        );
        assert_eq!(
            cache.shared.budget.used(),
            DOORKEEPER_BYTES + 106 + ENTRY_OVERHEAD,
            "counted as the request, the answer and the overhead"
        );
    }

    #[test]
    fn an_entry_matches_only_its_own_survey_instance() {
        let (old, new) = (survey(1), survey(1));
        let cache = ResponseCache::new(8, 1 << 20);
        keep(&cache, b"k", b"old", &old);
        let hit = cache.get(b"k").unwrap();
        assert!(hit.is_for(&old));
        // Same code, same data, but another loaded instance: not a match.
        assert!(!hit.is_for(&new));
        drop(old);
        // The old instance is gone; the entry can never match whatever comes next.
        assert!(!hit.is_for(&survey(1)));
    }

    #[test]
    fn the_cache_stays_within_its_bounds() {
        let s = survey(2);
        let cache = ResponseCache::new(3, 1 << 20);
        let keys: [&'static [u8]; 5] = [b"a", b"b", b"c", b"d", b"e"];
        for key in keys {
            keep(&cache, key, b"body", &s);
        }
        assert_eq!(cache.len(), 3);
        assert!(cache.get(b"a").is_none() && cache.get(b"b").is_none());
        assert!(cache.get(b"e").is_some());
        // Bytes bound: each entry is 1 + 4 bytes and the overhead.
        let small = ResponseCache::new(100, DOORKEEPER_BYTES + 2 * (5 + ENTRY_OVERHEAD) + 1);
        for key in keys {
            keep(&small, key, b"body", &s);
        }
        assert_eq!(small.len(), 2);
        // Replacing an entry does not grow the cache, and the new answer is the one kept.
        small.insert(b"e", b"BODY", entry(&s));
        assert_eq!(small.len(), 2);
        assert_eq!(small.get(b"e").unwrap().body(), &b"BODY"[..]);
        assert_eq!(
            small.shared.budget.used(),
            DOORKEEPER_BYTES + 2 * (5 + ENTRY_OVERHEAD)
        );
        let off = ResponseCache::new(0, 1 << 20);
        assert_eq!(
            off.shared.budget.used(),
            0,
            "a disabled cache takes no room"
        );
        keep(&off, b"a", b"body", &s);
        assert!(off.is_empty() && off.get(b"a").is_none());
    }

    #[test]
    fn answers_and_survey_sets_share_one_budget_least_recently_used_first() {
        let per = 5 + ENTRY_OVERHEAD;
        let budget = MemoryBudget::new(DOORKEEPER_BYTES + 3 * per);
        let cache = ResponseCache::within(100, &budget);
        let s = survey(3);
        for key in [&b"a"[..], b"b", b"c"] {
            keep(&cache, key, b"body", &s);
        }
        assert_eq!(budget.used(), DOORKEEPER_BYTES + 3 * per);
        // A hit makes "a" the most recently used: "b" goes first.
        assert!(cache.get(b"a").is_some());
        keep(&cache, b"d", b"body", &s);
        assert!(cache.get(b"b").is_none() && cache.get(b"a").is_some());
        // Another cache on the budget taking room for good pushes answers out.
        budget.take_anyway(2 * per);
        assert_eq!(cache.len(), 1);
        assert!(budget.used() <= budget.limit());
        drop(cache);
        assert_eq!(
            budget.used(),
            2 * per,
            "a dropped cache gives its bytes back, its doorkeeper's too"
        );
    }
}
