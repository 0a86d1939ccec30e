//! Evaluating target expressions to respondent sets.

use crosstab_contract::Expr;

use crate::bitset::Bitset;
use crate::survey::{Codes, Column, Survey};

/// Which codes of a column satisfy a predicate, as a lookup over code values.
struct CodeMatch {
    /// `matches[k]` for code k; code 0 (missing) never matches.
    matches: Vec<bool>,
}

impl CodeMatch {
    fn new(dict: &[f64], predicate: impl Fn(f64) -> bool) -> Self {
        let mut matches = Vec::with_capacity(dict.len() + 1);
        matches.push(false);
        matches.extend(dict.iter().map(|v| predicate(*v)));
        CodeMatch { matches }
    }

    /// The matching codes as one inclusive range, when they are contiguous.
    fn single_range(&self) -> Option<(u32, u32)> {
        let first = self.matches.iter().position(|m| *m)?;
        let last = self.matches.iter().rposition(|m| *m)?;
        self.matches[first..=last]
            .iter()
            .all(|m| *m)
            .then_some((first as u32, last as u32))
    }
}

/// Identifies a leaf's respondents: a variable and the codes it matches.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum LeafKey {
    /// Codes `lo..=hi` of variable `index`.
    Range(usize, u32, u32),
    /// These codes of variable `index`.
    Listed(usize, Vec<u32>),
    /// A whole composite target, by its canonical text.
    Target(String),
}

/// Leaf sets computed once and kept within a byte budget: repeated leaves (`GENDER = 2`, a
/// popular flag) then cost no scan. Survey data never changes, so an entry never goes
/// stale; when a new set does not fit, the least recently used ones make room, so a burst
/// of one-off conditions cannot shut the popular ones out for good. The budget counts
/// keys as well as sets (a listed key can be long).
#[derive(Debug)]
pub(crate) struct LeafCache {
    budget: usize,
    /// Bytes of one set (every set spans all respondents).
    set_bytes: usize,
    inner: std::sync::Mutex<LeafEntries>,
}

#[derive(Debug, Default)]
struct LeafEntries {
    bytes: usize,
    /// Ticks on every hit and insert: an entry's `used` says how recently.
    clock: u64,
    map: std::collections::HashMap<LeafKey, LeafEntry>,
}

#[derive(Debug)]
struct LeafEntry {
    set: std::sync::Arc<Bitset>,
    bytes: usize,
    used: u64,
}

impl LeafKey {
    /// Bytes this key holds beyond its own size.
    fn heap_bytes(&self) -> usize {
        match self {
            LeafKey::Range(..) => 0,
            LeafKey::Listed(_, codes) => codes.len() * std::mem::size_of::<u32>(),
            LeafKey::Target(text) => text.len(),
        }
    }
}

impl LeafCache {
    /// A cache of sets over `respondents` that holds at most `budget` bytes of keys and
    /// sets.
    pub(crate) fn new(budget: usize, respondents: usize) -> Self {
        LeafCache {
            budget,
            set_bytes: respondents.div_ceil(64) * 8,
            inner: std::sync::Mutex::new(LeafEntries::default()),
        }
    }

    /// The cached set of `key`, computing (and keeping) it with `make` when missing; `None`
    /// for an entry too large to keep without pushing out much else (the caller scans).
    pub(crate) fn get_or_insert(
        &self,
        key: LeafKey,
        make: impl FnOnce() -> Bitset,
    ) -> Option<std::sync::Arc<Bitset>> {
        let bytes = self.set_bytes + key.heap_bytes() + std::mem::size_of::<LeafKey>();
        {
            let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            let entries = &mut *guard;
            entries.clock += 1;
            if let Some(entry) = entries.map.get_mut(&key) {
                entry.used = entries.clock;
                return Some(std::sync::Arc::clone(&entry.set));
            }
        }
        if bytes > self.budget / 4 {
            return None;
        }
        // Computed outside the lock; two racing requests may both compute it, harmlessly.
        let set = std::sync::Arc::new(make());
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
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
        let entry = LeafEntry {
            set: std::sync::Arc::clone(&set),
            bytes,
            used: entries.clock,
        };
        if let Some(replaced) = entries.map.insert(key, entry) {
            // A racing request kept the same set first.
            entries.bytes -= replaced.bytes;
        }
        entries.bytes += bytes;
        Some(set)
    }
}

/// Words a plan fills at a time (16,384 respondents): long enough for tight, vectorized
/// loops, short enough that each nesting level's scratch block stays in L1.
pub(crate) const BLOCK_WORDS: usize = 256;

/// An expression compiled against one survey: each node fills a block of words (64
/// respondents each) on demand, so a whole target evaluates block by block in one pass
/// over its columns, without materializing a set per leaf.
pub(crate) enum Plan<'a> {
    /// Every respondent.
    All,
    /// Nobody.
    Empty,
    /// A set computed earlier (a named code).
    Set(&'a Bitset),
    /// A leaf's set, cached by the survey.
    Cached(std::sync::Arc<Bitset>),
    /// Codes in one contiguous range.
    Range { codes: Codes<'a>, lo: u32, hi: u32 },
    /// Codes listed in a table (`!=`, `IN` with gaps).
    Table { codes: Codes<'a>, table: Vec<bool> },
    /// Complement within all respondents.
    Not(Box<Plan<'a>>),
    /// All of these.
    And(Vec<Plan<'a>>),
    /// Any of these.
    Or(Vec<Plan<'a>>),
}

impl Plan<'_> {
    /// Fills `out` (at most [`BLOCK_WORDS`]) with the bits of the respondents from word
    /// `first` on; bits past the last respondent may be set (callers AND with a filter or
    /// clear the tail).
    pub(crate) fn fill(&self, first: usize, out: &mut [u64]) {
        match self {
            Plan::All => out.fill(u64::MAX),
            Plan::Empty => out.fill(0),
            Plan::Set(set) => copy_words(set, first, out),
            Plan::Cached(set) => copy_words(set, first, out),
            Plan::Range { codes, lo, hi } => {
                let span = hi.wrapping_sub(*lo);
                match codes {
                    // Compare at the codes' own width: u8 lanes are 4x denser than u32.
                    Codes::U8(c) => match (u8::try_from(*lo), u8::try_from(span)) {
                        (Ok(lo), Ok(span)) => {
                            pack_rows(rows(c, first, out.len()), out, move |x: u8| {
                                x.wrapping_sub(lo) <= span
                            })
                        }
                        _ => pack_rows(rows(c, first, out.len()), out, |x: u8| {
                            u32::from(x).wrapping_sub(*lo) <= span
                        }),
                    },
                    Codes::U16(c) => match (u16::try_from(*lo), u16::try_from(span)) {
                        (Ok(lo), Ok(span)) => {
                            pack_rows(rows(c, first, out.len()), out, move |x: u16| {
                                x.wrapping_sub(lo) <= span
                            })
                        }
                        _ => pack_rows(rows(c, first, out.len()), out, |x: u16| {
                            u32::from(x).wrapping_sub(*lo) <= span
                        }),
                    },
                    Codes::U32(c) => pack_rows(rows(c, first, out.len()), out, |x: u32| {
                        x.wrapping_sub(*lo) <= span
                    }),
                }
            }
            Plan::Table { codes, table } => {
                let hit = |x: u32| table.get(x as usize).copied().unwrap_or(false);
                match codes {
                    Codes::U8(c) => {
                        pack_rows(rows(c, first, out.len()), out, |x| hit(u32::from(x)))
                    }
                    Codes::U16(c) => {
                        pack_rows(rows(c, first, out.len()), out, |x| hit(u32::from(x)))
                    }
                    Codes::U32(c) => pack_rows(rows(c, first, out.len()), out, hit),
                }
            }
            Plan::Not(inner) => {
                inner.fill(first, out);
                out.iter_mut().for_each(|word| *word = !*word);
            }
            Plan::And(items) => combine(items, first, out, |a, b| a & b, 0),
            Plan::Or(items) => combine(items, first, out, |a, b| a | b, u64::MAX),
        }
    }
}

fn copy_words(set: &Bitset, first: usize, out: &mut [u64]) {
    let words = set.words();
    let start = first.min(words.len());
    let have = (words.len() - start).min(out.len());
    out[..have].copy_from_slice(&words[start..start + have]);
    out[have..].fill(0);
}

/// Fills `out` with the first item, then folds in the others; stops early once every
/// word is `settled` (no later item can change it).
fn combine(
    items: &[Plan<'_>],
    first: usize,
    out: &mut [u64],
    op: fn(u64, u64) -> u64,
    settled: u64,
) {
    let Some((head, rest)) = items.split_first() else {
        out.fill(!settled);
        return;
    };
    head.fill(first, out);
    let mut scratch = [0u64; BLOCK_WORDS];
    for item in rest {
        if out.iter().all(|word| *word == settled) {
            break;
        }
        let scratch = &mut scratch[..out.len()];
        item.fill(first, scratch);
        for (word, other) in out.iter_mut().zip(scratch.iter()) {
            *word = op(*word, *other);
        }
    }
}

/// The codes of the respondents in `words` words from word `first` on.
fn rows<T>(codes: &[T], first: usize, words: usize) -> &[T] {
    let start = (first * 64).min(codes.len());
    &codes[start..(start + words * 64).min(codes.len())]
}

/// Packs `hit(code)` of each row into `out`, with the CPU's widest vectors when it has
/// AVX2 (the same code either way, so the same bits).
fn pack_rows<T: Copy, F: Fn(T) -> bool>(rows: &[T], out: &mut [u64], hit: F) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, checked just above.
        #[allow(unsafe_code)]
        return unsafe { pack_rows_avx2(rows, out, hit) };
    }
    pack_block(rows, out, hit);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn pack_rows_avx2<T: Copy, F: Fn(T) -> bool>(rows: &[T], out: &mut [u64], hit: F) {
    pack_block(rows, out, hit);
}

/// Packs `hit(code)` of each row into `out`, 64 rows a word; words past the rows are 0.
#[inline(always)]
fn pack_block<T: Copy>(rows: &[T], out: &mut [u64], hit: impl Fn(T) -> bool) {
    let mut chunks = rows.chunks(64);
    for word in out.iter_mut() {
        *word = chunks.next().map_or(0, |chunk| pack_word(chunk, &hit));
    }
}

impl Survey {
    /// Compiles an expression whose names are all defined (unknown names match nobody).
    pub(crate) fn plan(&self, expr: &Expr) -> Plan<'_> {
        match expr {
            Expr::All => Plan::All,
            Expr::Code(name) => self.code_set(name).map_or(Plan::Empty, Plan::Set),
            Expr::Compare { var, op, value } => {
                let (op, value) = (*op, *value);
                self.leaf(var, move |v| op.holds(v, value))
            }
            Expr::In { var, values } => {
                // Sorted once, so each dictionary value is a binary search rather than a
                // scan of the list (a variable may have millions of values). `+ 0.0` makes
                // -0.0 equal 0.0, as `==` has it; NaN equals nothing, as with `==`.
                let mut listed: Vec<f64> = values
                    .iter()
                    .filter(|v| !v.is_nan())
                    .map(|v| v + 0.0)
                    .collect();
                listed.sort_by(f64::total_cmp);
                self.leaf(var, move |v| {
                    listed.binary_search_by(|x| x.total_cmp(&(v + 0.0))).is_ok()
                })
            }
            Expr::Between { var, low, high } => {
                let (low, high) = (*low, *high);
                self.leaf(var, move |v| low <= v && v <= high)
            }
            Expr::Not(inner) => Plan::Not(Box::new(self.plan(inner))),
            Expr::And(items) => Plan::And(items.iter().map(|item| self.plan(item)).collect()),
            Expr::Or(items) => Plan::Or(items.iter().map(|item| self.plan(item)).collect()),
        }
    }

    fn leaf(&self, var: &str, predicate: impl Fn(f64) -> bool) -> Plan<'_> {
        let Some(index) = self.variable_position(var) else {
            return Plan::Empty;
        };
        let Column { dict, codes } = self.column(index);
        let matching = CodeMatch::new(dict, predicate);
        let (key, plan) = match matching.single_range() {
            Some((lo, hi)) => (LeafKey::Range(index, lo, hi), Plan::Range { codes, lo, hi }),
            None if !matching.matches.contains(&true) => return Plan::Empty,
            None => {
                let listed = matching
                    .matches
                    .iter()
                    .enumerate()
                    .filter(|(_, m)| **m)
                    .map(|(code, _)| code as u32)
                    .collect();
                (
                    LeafKey::Listed(index, listed),
                    Plan::Table {
                        codes,
                        table: matching.matches,
                    },
                )
            }
        };
        match self
            .leaf_sets()
            .get_or_insert(key, || self.materialize(&plan))
        {
            Some(set) => Plan::Cached(set),
            None => plan,
        }
    }

    pub(crate) fn materialize(&self, plan: &Plan<'_>) -> Bitset {
        let n = self.respondents();
        let mut words = vec![0u64; n.div_ceil(64)];
        for (index, block) in words.chunks_mut(BLOCK_WORDS).enumerate() {
            plan.fill(index * BLOCK_WORDS, block);
        }
        Bitset::from_words(words, n)
    }

    /// Evaluates an expression whose names are all defined to a respondent set.
    pub(crate) fn evaluate_known(&self, expr: &Expr) -> Bitset {
        self.materialize(&self.plan(expr))
    }
}

/// Bits for up to 64 codes: each becomes a 0/1 byte, and eight such bytes pack into
/// eight bits with one multiply; both steps vectorize, unlike shifting each compare into
/// the word.
#[inline(always)]
fn pack_word<T: Copy>(codes: &[T], hit: impl Fn(T) -> bool) -> u64 {
    // Multiplying eight 0/1 bytes by this gathers byte k's bit into bit 56 + k.
    const GATHER: u64 = 0x0102_0408_1020_4080;
    if let Ok(full) = <&[T; 64]>::try_from(codes) {
        let mut hits = [0u8; 64];
        for (slot, code) in hits.iter_mut().zip(full) {
            *slot = u8::from(hit(*code));
        }
        let mut word = 0u64;
        for (group, bytes) in hits.chunks_exact(8).enumerate() {
            let mut eight = [0u8; 8];
            eight.copy_from_slice(bytes);
            word |= (u64::from_le_bytes(eight).wrapping_mul(GATHER) >> 56) << (group * 8);
        }
        word
    } else {
        codes
            .iter()
            .enumerate()
            .fold(0u64, |word, (j, code)| word | u64::from(hit(*code)) << j)
    }
}

#[cfg(test)]
mod leaf_cache_tests {
    use super::*;

    /// Bytes of one range entry over 512 respondents.
    const RANGE_ENTRY: usize = 512 / 8 + std::mem::size_of::<LeafKey>();

    /// A cache with room for exactly eight range entries over 512 respondents.
    fn eight_entry_cache() -> LeafCache {
        LeafCache::new(8 * RANGE_ENTRY, 512)
    }

    /// Whether `key` was computed (a miss) rather than found.
    fn computed(cache: &LeafCache, key: LeafKey) -> bool {
        let mut made = false;
        let set = cache.get_or_insert(key, || {
            made = true;
            Bitset::empty(512)
        });
        assert!(set.is_some());
        made
    }

    fn range(n: u32) -> LeafKey {
        LeafKey::Range(0, n, n)
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
        let long = LeafKey::Listed(0, (0..200).collect());
        assert!(cache.get_or_insert(long, || unreachable!()).is_none());
        // 16 listed codes take 64 bytes more than a range: with seven ranges after it the
        // budget overflows, and the listed key, least recently used, goes.
        let listed = LeafKey::Listed(0, (0..16).collect());
        assert!(computed(&cache, listed.clone()));
        for n in 0..7 {
            assert!(computed(&cache, range(n)));
        }
        assert!(computed(&cache, listed), "counted at its full size");
    }
}
