//! Respondent sets kept between queries: leaves (`GENDER = 2`) and whole composite targets.
//!
//! Survey data never changes, so an entry never goes stale. A set is kept only when its
//! key comes back: the first sight of a key is remembered by hash alone (a small
//! doorkeeper), so a query that is never repeated is evaluated in one fused pass and pays
//! nothing for caching, while a repeated one is materialized on its second sight and costs
//! what a named code does from then on. The sets draw on the process's one
//! [`MemoryBudget`]: the least recently used entries of any cache make room, so a burst of
//! one-off conditions cannot shut the popular ones out.

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex};

use crosstab_contract::Expr;

use crate::bitset::Bitset;
use crate::budget::{Evict, MemoryBudget};
use crate::doorkeeper::{Doorkeeper, DOORKEEPER_BYTES};

/// Identifies a cached set.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum SetKey {
    /// Codes `lo..=hi` of variable `index`.
    Range(usize, u32, u32),
    /// These codes of variable `index`.
    Listed(usize, Vec<u32>),
    /// A whole composite target, by [`SetKey::target`]'s bytes.
    Target(Vec<u8>),
}

impl SetKey {
    /// The key of composite target `expr`: bytes that are equal exactly when the
    /// expressions are (a tag per node, names and lists with their lengths, numbers by
    /// their bits). Bytes rather than the canonical text, whose number formatting would
    /// cost more than the rest of keying.
    pub(crate) fn target(expr: &Expr) -> SetKey {
        let mut bytes = Vec::with_capacity(64);
        encode(expr, &mut bytes);
        // The budget counts the key's length: hold no more than that.
        bytes.shrink_to_fit();
        SetKey::Target(bytes)
    }

    /// Bytes this key holds beyond its own size.
    fn heap_bytes(&self) -> usize {
        match self {
            SetKey::Range(..) => 0,
            SetKey::Listed(_, codes) => codes.len() * std::mem::size_of::<u32>(),
            SetKey::Target(bytes) => bytes.len(),
        }
    }
}

/// Appends `expr`'s key bytes to `out` (see [`SetKey::target`]): every part is fixed in
/// width or preceded by its length, so no two expressions write the same bytes.
fn encode(expr: &Expr, out: &mut Vec<u8>) {
    fn name(text: &str, out: &mut Vec<u8>) {
        length(text.len(), out);
        out.extend_from_slice(text.as_bytes());
    }
    fn length(n: usize, out: &mut Vec<u8>) {
        out.extend_from_slice(&(n as u64).to_le_bytes());
    }
    fn number(value: f64, out: &mut Vec<u8>) {
        // -0 becomes 0, which it equals (and so selects the same respondents).
        out.extend_from_slice(&(value + 0.0).to_bits().to_le_bytes());
    }
    fn list(tag: u8, items: &[Expr], out: &mut Vec<u8>) {
        out.push(tag);
        length(items.len(), out);
        items.iter().for_each(|item| encode(item, out));
    }
    match expr {
        Expr::All => out.push(0),
        Expr::Code(code) => {
            out.push(1);
            name(code, out);
        }
        Expr::Compare { var, op, value } => {
            out.push(2);
            name(var, out);
            out.push(*op as u8);
            number(*value, out);
        }
        Expr::In { var, values } => {
            out.push(3);
            name(var, out);
            length(values.len(), out);
            values.iter().for_each(|&value| number(value, out));
        }
        Expr::Between { var, low, high } => {
            out.push(4);
            name(var, out);
            number(*low, out);
            number(*high, out);
        }
        Expr::Not(inner) => {
            out.push(5);
            encode(inner, out);
        }
        Expr::And(items) => list(6, items, out),
        Expr::Or(items) => list(7, items, out),
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

/// Bytes an entry costs besides its set and keys: the entry, the `Arc`'s header and
/// `Bitset`, the use tick and the maps' slack.
const ENTRY_OVERHEAD: usize = 128;

/// Sets within the shared byte budget, which counts keys as well as sets (a listed key can
/// be long).
#[derive(Debug)]
pub(crate) struct SetCache {
    budget: Arc<MemoryBudget>,
    /// Bytes of one set (every set spans all respondents).
    set_bytes: usize,
    inner: Mutex<Entries>,
}

/// Keys hash with foldhash, seeded per cache (keys come from requests): a cold query
/// hashes every leaf's key twice, and SipHash cost it about half a microsecond.
type KeyHash = foldhash::fast::RandomState;

#[derive(Debug, Default)]
struct Entries {
    bytes: usize,
    map: HashMap<SetKey, Entry, KeyHash>,
    /// The keys by last use (the budget's clock ticks on every hit and insert).
    by_use: BTreeMap<u64, SetKey>,
    /// Keys seen once and not kept, by the map's hash (counted as [`DOORKEEPER_BYTES`]).
    seen: Doorkeeper,
}

#[derive(Debug)]
struct Entry {
    set: Arc<Bitset>,
    bytes: usize,
    used: u64,
}

impl SetCache {
    /// A cache of sets over `respondents` drawing on `budget` (and evictable by it).
    pub(crate) fn new(budget: &Arc<MemoryBudget>, respondents: usize) -> Arc<Self> {
        budget.take_anyway(DOORKEEPER_BYTES);
        let cache = Arc::new(SetCache {
            budget: Arc::clone(budget),
            set_bytes: respondents.div_ceil(64) * 8,
            inner: Mutex::new(Entries::default()),
        });
        let evict: Arc<dyn Evict> = cache.clone();
        budget.register(Arc::downgrade(&evict));
        cache
    }

    /// Bytes of one set.
    pub(crate) fn set_bytes(&self) -> usize {
        self.set_bytes
    }

    /// The budget the sets draw on.
    pub(crate) fn budget(&self) -> &MemoryBudget {
        &self.budget
    }

    /// Sets larger than this never enter (they would push out too much at once).
    fn largest_entry(&self) -> usize {
        self.budget.limit() / 4
    }

    fn entry_bytes(&self, key: &SetKey) -> usize {
        let words = self.set_bytes / std::mem::size_of::<u64>();
        // The key is held twice (the map and the use order), beside the entry and the
        // shared set's header.
        Bitset::footprint(words)
            + 2 * (key.heap_bytes() + std::mem::size_of::<SetKey>())
            + ENTRY_OVERHEAD
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        // A panic elsewhere cannot leave the map inconsistent: every update is one step.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Looks `key` up, remembering a first sight.
    pub(crate) fn get(&self, key: &SetKey) -> Lookup {
        let too_large = self.entry_bytes(key) > self.largest_entry();
        let now = self.budget.tick();
        let mut guard = self.lock();
        let entries = &mut *guard;
        if let Some(entry) = entries.map.get_mut(key) {
            entries.by_use.remove(&entry.used);
            entry.used = now;
            entries.by_use.insert(now, key.clone());
            return Lookup::Hit(Arc::clone(&entry.set));
        }
        if too_large {
            return Lookup::Pass;
        }
        if entries.seen.admits(entries.map.hasher().hash_one(key)) {
            Lookup::Admit
        } else {
            Lookup::Pass
        }
    }

    /// Keeps `set` as `key`'s, pushing out the least recently used entries (of any cache
    /// on the budget) to make room; returns it shared. A set the budget can't hold is
    /// returned without being kept.
    pub(crate) fn insert(&self, key: SetKey, set: Bitset) -> Arc<Bitset> {
        let bytes = self.entry_bytes(&key);
        // Room is made before this cache's lock is taken: making it may evict from here.
        if bytes > self.largest_entry() || !self.budget.take(bytes) {
            return Arc::new(set);
        }
        let set = Arc::new(set.into_own_pages());
        let used = self.budget.tick();
        let mut guard = self.lock();
        let entries = &mut *guard;
        let entry = Entry {
            set: Arc::clone(&set),
            bytes,
            used,
        };
        entries.by_use.insert(used, key.clone());
        if let Some(replaced) = entries.map.insert(key, entry) {
            // A racing request kept the same set first.
            entries.by_use.remove(&replaced.used);
            entries.bytes -= replaced.bytes;
            self.budget.give_back(replaced.bytes);
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

impl Evict for SetCache {
    fn oldest_use(&self) -> Option<u64> {
        self.lock().by_use.keys().next().copied()
    }

    fn evict_oldest(&self) -> bool {
        let mut guard = self.lock();
        let entries = &mut *guard;
        let Some((_, key)) = entries.by_use.pop_first() else {
            return false;
        };
        if let Some(gone) = entries.map.remove(&key) {
            entries.bytes -= gone.bytes;
            self.budget.give_back(gone.bytes);
        }
        true
    }
}

impl Drop for SetCache {
    fn drop(&mut self) {
        let bytes = self.lock().bytes;
        self.budget.give_back(bytes + DOORKEEPER_BYTES);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes of one range entry over 512 respondents.
    const RANGE_ENTRY: usize = 512 / 8 + 2 * std::mem::size_of::<SetKey>() + ENTRY_OVERHEAD;

    /// A cache with room for exactly eight range entries over 512 respondents.
    fn eight_entry_cache() -> Arc<SetCache> {
        SetCache::new(&MemoryBudget::new(8 * RANGE_ENTRY + DOORKEEPER_BYTES), 512)
    }

    /// [`eight_entry_cache`] holding ranges 0 to 7, 0 the least recently used.
    fn full_eight_entry_cache() -> Arc<SetCache> {
        let cache = eight_entry_cache();
        for n in 0..8 {
            assert!(computed(&cache, range(n)));
        }
        cache
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
    fn target_keys_are_equal_exactly_for_equal_expressions() {
        let key = |text: &str| SetKey::target(&Expr::parse(text).unwrap());
        let texts = [
            "A AND B",
            "B AND A",
            "A OR B",
            "AB AND C",
            "A AND BC",
            "A AND B AND C",
            "(A AND B) AND C",
            "NOT (A AND B)",
            "NOT A AND B",
            "AGE = 1 AND A",
            "AGE = 2 AND A",
            "AGE >= 1 AND A",
            "AGE BETWEEN 1 AND 2 AND A",
            "AGE BETWEEN 1 AND 3 AND A",
            "AGE IN (1, 2) AND A",
            "AGE IN (1, 2, 3) AND A",
            "AGE IN (2, 1) AND A",
            "AGEX IN (1, 2) AND A",
            "* OR A",
        ];
        let keys: Vec<SetKey> = texts.iter().map(|text| key(text)).collect();
        for (i, a) in keys.iter().enumerate() {
            for (j, b) in keys.iter().enumerate() {
                let same = Expr::parse(texts[i]).unwrap() == Expr::parse(texts[j]).unwrap();
                assert_eq!(a == b, same, "{} / {}", texts[i], texts[j]);
            }
        }
        // The same expression written differently has the same key.
        assert_eq!(key("AGE = 1.0 AND (A)"), key("AGE = 1 AND A"));
        assert_eq!(key("AGE = -0 AND A"), key("AGE = 0 AND A"));
        assert_eq!(key("AGE in (1,2) and A"), key("AGE IN (1, 2) AND A"));
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
        let cache = full_eight_entry_cache();
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
        let long = SetKey::Listed(0, (0..20_000).collect());
        for _ in 0..3 {
            assert!(cache
                .get_or_admit(long.clone(), || unreachable!())
                .is_none());
        }
        // 16 listed codes take 128 bytes more than a range (the key is held twice): with
        // seven ranges after it the budget overflows, and the listed key, least recently
        // used, goes.
        let listed = SetKey::Listed(0, (0..16).collect());
        assert!(computed(&cache, listed.clone()));
        for n in 0..7 {
            assert!(computed(&cache, range(n)));
        }
        assert!(computed(&cache, listed), "counted at its full size");
    }

    #[test]
    fn caches_on_one_budget_make_room_for_each_other_least_recently_used_first() {
        let budget = MemoryBudget::new(8 * RANGE_ENTRY + 2 * DOORKEEPER_BYTES);
        let (a, b) = (SetCache::new(&budget, 512), SetCache::new(&budget, 512));
        for n in 0..4 {
            assert!(computed(&a, range(n)));
            assert!(computed(&b, range(n)));
        }
        assert_eq!(budget.used(), 8 * RANGE_ENTRY + 2 * DOORKEEPER_BYTES);
        assert!(!computed(&a, range(0)), "kept");
        // b's newcomer pushes out the least recently used set of either cache: b's 0
        // (a's 0 was just used).
        assert!(computed(&b, range(9)));
        assert!(!computed(&a, range(0)));
        assert!(computed(&b, range(0)), "b's 0 made room");
        // ... and b's 0 coming back pushed out a's 1, the oldest of either now.
        assert!(budget.used() <= budget.limit());
        assert!(computed(&a, range(1)));
        // A dropped cache gives its bytes back: a keeps 0, 2, 3 and 1 (which pushed out
        // b's 1).
        drop(b);
        assert_eq!(budget.used(), 4 * RANGE_ENTRY + DOORKEEPER_BYTES);
    }

    #[test]
    fn sets_kept_for_good_shrink_the_evictable_ones() {
        let cache = full_eight_entry_cache();
        let budget = cache.budget();
        budget.take_anyway(3 * RANGE_ENTRY);
        assert!(budget.used() <= budget.limit());
        assert_eq!(cache.lock().map.len(), 5, "three evicted");
        assert!(computed(&cache, range(0)), "the oldest went first");
    }

    #[test]
    fn a_lowered_limit_evicts_the_least_recently_used_until_they_fit() {
        let cache = full_eight_entry_cache();
        let budget = cache.budget();
        budget.set_limit(5 * RANGE_ENTRY + DOORKEEPER_BYTES);
        assert_eq!(budget.used(), 5 * RANGE_ENTRY + DOORKEEPER_BYTES);
        assert!(!computed(&cache, range(3)), "the newest five stay");
        assert!(computed(&cache, range(2)), "the oldest three went");
        assert_eq!(cache.lock().map.len(), 5, "2 came back in 4's place");
        // Raised again, the room is there for new sets without evicting.
        budget.set_limit(8 * RANGE_ENTRY + DOORKEEPER_BYTES);
        assert!(computed(&cache, range(8)));
        assert_eq!(cache.lock().map.len(), 6);
    }

    #[cfg(feature = "fs")]
    #[test]
    fn a_kept_set_has_pages_of_its_own_and_is_counted_in_whole_pages() {
        let budget = MemoryBudget::new(1 << 20);
        let cache = SetCache::new(&budget, 40_000);
        assert_eq!(budget.used(), DOORKEEPER_BYTES);
        let set = cache.insert(range(0), Bitset::full(40_000));
        assert!(set.on_own_pages());
        assert_eq!(set.count(), 40_000);
        // 5,000 bytes of words take two pages.
        let entry = 8192 + 2 * std::mem::size_of::<SetKey>() + ENTRY_OVERHEAD;
        assert_eq!(budget.used(), DOORKEEPER_BYTES + entry);
        drop(cache);
        assert_eq!(budget.used(), 0, "all given back");
    }
}
