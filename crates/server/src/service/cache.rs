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
//! Bounded by entry count and by bytes (key + body), evicting the oldest insertions
//! first. `--response-cache-entries 0` disables it.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};

use axum::body::Bytes;
use crosstab_engine::Survey;

/// Default most entries.
pub const DEFAULT_ENTRIES: usize = 4096;
/// Default most bytes of keys and bodies held.
pub const DEFAULT_BYTES: usize = 32 << 20;
/// Bodies larger than this are never cached (they would evict too much).
const MAX_ENTRY_BYTES: usize = 1 << 20;

/// One cached answer.
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
    /// The serialized 200 body.
    pub body: Bytes,
}

impl Entry {
    /// A cacheable answer computed on `survey`.
    pub fn new(
        survey: &Arc<Survey>,
        group: Option<Arc<str>>,
        base: Arc<str>,
        targets: i64,
        body: Bytes,
    ) -> Entry {
        Entry {
            survey: Arc::downgrade(survey),
            survey_code: Arc::from(survey.code()),
            group,
            base,
            targets,
            body,
        }
    }

    /// Whether this answer was computed on exactly `survey` (the same loaded instance,
    /// not merely the same code).
    pub fn is_for(&self, survey: &Arc<Survey>) -> bool {
        std::ptr::eq(self.survey.as_ptr(), Arc::as_ptr(survey))
    }
}

#[derive(Debug, Default)]
struct Inner {
    map: HashMap<Bytes, Arc<Entry>>,
    order: VecDeque<Bytes>,
    bytes: usize,
}

/// The cache; shared by every request.
#[derive(Debug)]
pub struct ResponseCache {
    max_entries: usize,
    max_bytes: usize,
    inner: Mutex<Inner>,
}

impl ResponseCache {
    /// A cache of at most `max_entries` answers and `max_bytes` bytes (0 disables).
    pub fn new(max_entries: usize, max_bytes: usize) -> ResponseCache {
        ResponseCache {
            max_entries,
            max_bytes,
            inner: Mutex::new(Inner::default()),
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
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.map.get(key).map(Arc::clone)
    }

    /// Remembers `entry` as the answer to request body `key`, replacing any older one.
    pub fn insert(&self, key: Bytes, entry: Entry) {
        let size = key.len() + entry.body.len();
        if !self.enabled() || size > MAX_ENTRY_BYTES || size > self.max_bytes {
            return;
        }
        // A request body is often a slice of the connection's whole read buffer (up to
        // ~400 KiB): keep a copy of its own, or each entry would pin that buffer unseen.
        let key = Bytes::copy_from_slice(&key);
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let entry = Arc::new(entry);
        match inner.map.get_mut(&key) {
            Some(slot) => {
                let old = key.len() + slot.body.len();
                *slot = entry;
                inner.bytes = inner.bytes - old + size;
            }
            None => {
                inner.map.insert(key.clone(), entry);
                inner.order.push_back(key);
                inner.bytes += size;
            }
        }
        while inner.map.len() > self.max_entries || inner.bytes > self.max_bytes {
            let Some(oldest) = inner.order.pop_front() else {
                break;
            };
            if let Some(gone) = inner.map.remove(&oldest) {
                inner.bytes -= oldest.len() + gone.body.len();
            }
        }
    }

    /// Number of cached answers.
    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .map
            .len()
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

    fn entry(survey: &Arc<Survey>, body: &'static [u8]) -> Entry {
        Entry::new(survey, None, "ADULTS".into(), 1, Bytes::from_static(body))
    }

    #[test]
    fn a_key_sliced_from_a_larger_buffer_is_kept_as_a_copy() {
        let buffer = Bytes::from(vec![b'x'; 256 * 1024]);
        let body = buffer.slice(1000..1100);
        let cache = ResponseCache::new(8, 1 << 20);
        cache.insert(body.clone(), entry(&survey(1), b"answer"));
        let inner = cache.inner.lock().unwrap();
        let (key, _) = inner.map.iter().next().unwrap();
        let start = buffer.as_ptr() as usize;
        let kept = key.as_ptr() as usize;
        assert_eq!(key, &body);
        assert!(
            !(start..start + buffer.len()).contains(&kept),
            "the cache key pins the request's read buffer"
        );
    }

    #[test]
    fn an_entry_matches_only_its_own_survey_instance() {
        let (old, new) = (survey(1), survey(1));
        let cache = ResponseCache::new(8, 1 << 20);
        cache.insert(Bytes::from_static(b"k"), entry(&old, b"old"));
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
            cache.insert(Bytes::from_static(key), entry(&s, b"body"));
        }
        assert_eq!(cache.len(), 3);
        assert!(cache.get(b"a").is_none() && cache.get(b"b").is_none());
        assert!(cache.get(b"e").is_some());
        // Bytes bound: each entry is 1 + 4 bytes.
        let small = ResponseCache::new(100, 12);
        for key in keys {
            small.insert(Bytes::from_static(key), entry(&s, b"body"));
        }
        assert_eq!(small.len(), 2);
        // Replacing an entry does not grow the cache.
        small.insert(Bytes::from_static(b"e"), entry(&s, b"body"));
        assert_eq!(small.len(), 2);
        let off = ResponseCache::new(0, 1 << 20);
        off.insert(Bytes::from_static(b"a"), entry(&s, b"body"));
        assert!(off.is_empty() && off.get(b"a").is_none());
    }
}
