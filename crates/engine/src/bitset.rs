//! Dense respondent sets: one bit per respondent, in respondent order.
//!
//! Query evaluation works on dense words rather than compressed bitmaps because every
//! operand (code columns, bases, groups) is dense over the same respondents and the
//! final pass must read the weights in order anyway; word-wise AND/OR/NOT vectorize.

use crate::exact::ExactSum;

/// A set of respondents `0..len`.
#[derive(Debug)]
pub struct Bitset {
    words: Words,
    len: usize,
}

/// Where a set's words live.
#[derive(Debug)]
enum Words {
    Heap(Vec<u64>),
    /// Pages of their own (see [`Bitset::into_own_pages`]).
    #[cfg(feature = "fs")]
    Pages(memmap2::MmapMut),
}

impl Words {
    fn as_slice(&self) -> &[u64] {
        match self {
            Words::Heap(words) => words,
            // A map is page-aligned and was made a whole number of words long.
            #[cfg(feature = "fs")]
            Words::Pages(map) => bytemuck::cast_slice(map),
        }
    }

    fn as_mut_slice(&mut self) -> &mut [u64] {
        match self {
            Words::Heap(words) => words,
            #[cfg(feature = "fs")]
            Words::Pages(map) => bytemuck::cast_slice_mut(map),
        }
    }
}

impl Clone for Bitset {
    fn clone(&self) -> Self {
        Bitset {
            words: Words::Heap(self.words().to_vec()),
            len: self.len,
        }
    }
}

impl PartialEq for Bitset {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.words() == other.words()
    }
}

impl Eq for Bitset {}

/// Bytes of a page; sets smaller than this stay on the heap.
#[cfg(feature = "fs")]
const PAGE: usize = 4096;

/// Partial sums [`sum_all`] keeps apart, so the compiler can add them in vectors.
const LANES: usize = 8;

/// The set bits in `words`. Inlined always, so a caller compiled with wider instructions
/// (AVX-512's VPOPCNTDQ, WebAssembly SIMD) counts with them.
#[inline(always)]
pub(crate) fn ones(words: &[u64]) -> u64 {
    words.iter().map(|w| u64::from(w.count_ones())).sum()
}

impl Bitset {
    /// The empty set over `len` respondents.
    pub fn empty(len: usize) -> Self {
        Bitset {
            words: Words::Heap(vec![0; len.div_ceil(64)]),
            len,
        }
    }

    /// Every respondent.
    pub fn full(len: usize) -> Self {
        let mut set = Bitset {
            words: Words::Heap(vec![u64::MAX; len.div_ceil(64)]),
            len,
        };
        set.clear_tail();
        set
    }

    /// Builds a set from whole words (bits past `len` are cleared).
    pub fn from_words(words: Vec<u64>, len: usize) -> Self {
        debug_assert_eq!(words.len(), len.div_ceil(64));
        let mut set = Bitset {
            words: Words::Heap(words),
            len,
        };
        set.clear_tail();
        set
    }

    /// Bytes the set's words take in memory: whole pages once moved to pages of their own.
    pub(crate) fn footprint(words: usize) -> usize {
        let bytes = words * std::mem::size_of::<u64>();
        #[cfg(feature = "fs")]
        if bytes >= PAGE {
            return bytes.next_multiple_of(PAGE);
        }
        bytes
    }

    /// Whether the set lives on pages of its own.
    #[cfg(test)]
    pub(crate) fn on_own_pages(&self) -> bool {
        !matches!(self.words, Words::Heap(_))
    }

    /// The same set, moved to pages of its own when it spans at least one page, so that
    /// dropping it gives its memory back to the system at once. A cache that keeps and
    /// evicts sets all day would otherwise leave the allocator's pages dotted with the few
    /// sets still kept, resident far beyond what the cache counts. Stays on the heap when
    /// the system refuses a map (e.g. at its limit on maps per process).
    pub(crate) fn into_own_pages(self) -> Bitset {
        #[cfg(feature = "fs")]
        {
            let bytes = std::mem::size_of_val(self.words());
            if bytes >= PAGE {
                if let Ok(mut map) = memmap2::MmapMut::map_anon(bytes) {
                    map.copy_from_slice(bytemuck::cast_slice(self.words()));
                    return Bitset {
                        words: Words::Pages(map),
                        len: self.len,
                    };
                }
            }
        }
        self
    }

    fn clear_tail(&mut self) {
        let rem = self.len % 64;
        if rem != 0 {
            if let Some(last) = self.words.as_mut_slice().last_mut() {
                *last &= (1u64 << rem) - 1;
            }
        }
    }

    /// Number of respondents the set covers (members or not).
    pub fn universe(&self) -> usize {
        self.len
    }

    /// The words, 64 respondents each.
    pub fn words(&self) -> &[u64] {
        self.words.as_slice()
    }

    /// Whether respondent `index` is a member.
    pub fn contains(&self, index: usize) -> bool {
        index < self.len && self.words()[index / 64] >> (index % 64) & 1 == 1
    }

    /// Adds respondent `index`.
    pub fn insert(&mut self, index: usize) {
        if index < self.len {
            self.words.as_mut_slice()[index / 64] |= 1 << (index % 64);
        }
    }

    /// Number of members.
    pub fn count(&self) -> u64 {
        ones(self.words())
    }

    /// Keeps the members also in `other`.
    pub fn and_with(&mut self, other: &Bitset) {
        self.words
            .as_mut_slice()
            .iter_mut()
            .zip(other.words())
            .for_each(|(a, b)| *a &= b);
    }

    /// Adds the members of `other`.
    pub fn or_with(&mut self, other: &Bitset) {
        self.words
            .as_mut_slice()
            .iter_mut()
            .zip(other.words())
            .for_each(|(a, b)| *a |= b);
    }

    /// Complement within the universe.
    pub fn negate(&mut self) {
        self.words.as_mut_slice().iter_mut().for_each(|w| *w = !*w);
        self.clear_tail();
    }

    /// Count and weight sum of the members that are also in `filter`: the true sum of
    /// their weights rounded once, as every sum the engine answers is.
    pub fn tally(&self, filter: Option<&Bitset>, weights: &[f64]) -> Tally {
        // Filtered words are made a batch at a time, so no set-sized copy is needed.
        const BATCH: usize = 256;
        let mut sum = ExactSum::terms();
        let mut count = 0;
        let mut batch = [0u64; BATCH];
        for (at, words) in self.words().chunks(BATCH).enumerate() {
            let members = match filter {
                Some(filter) => {
                    let others = filter.words().get(at * BATCH..).unwrap_or(&[]);
                    let batch = &mut batch[..words.len()];
                    for (slot, (a, b)) in batch
                        .iter_mut()
                        .zip(words.iter().zip(others.iter().chain(std::iter::repeat(&0))))
                    {
                        *slot = a & b;
                    }
                    &*batch
                }
                None => words,
            };
            count += sum.add_members(members, weights.get(at * BATCH * 64..).unwrap_or(&[]));
        }
        Tally {
            count,
            weight: sum.finish(),
        }
    }
}

/// Count and weighted sum of a set of respondents.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tally {
    /// Number of respondents.
    pub count: u64,
    /// Sum of their weights.
    pub weight: f64,
}

/// The f64 sum of every weight, in [`LANES`] partial sums: one read of the weight column,
/// the floor the benches measure queries against. Not exact (answers' sums are: see
/// [`Bitset::tally`] and `Survey::tally`).
pub fn sum_all(weights: &[f64]) -> f64 {
    let mut lanes = [0.0f64; LANES];
    for group in weights.chunks(LANES) {
        for (lane, weight) in lanes.iter_mut().zip(group) {
            *lane += weight;
        }
    }
    fold_lanes(&lanes)
}

fn fold_lanes(lanes: &[f64; LANES]) -> f64 {
    ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3]))
        + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "fs")]
    #[test]
    fn a_set_on_pages_of_its_own_is_the_same_set() {
        let mut set = Bitset::empty(100_000);
        for index in (0..100_000).step_by(7) {
            set.insert(index);
        }
        let paged = set.clone().into_own_pages();
        assert!(paged.on_own_pages());
        assert_eq!(paged, set);
        assert_eq!(paged.count(), set.count());
        let weights = vec![0.5; 100_000];
        assert_eq!(paged.tally(None, &weights), set.tally(None, &weights));
        let mut negated = paged.clone();
        negated.negate();
        assert_eq!(negated.count(), 100_000 - set.count());
        assert_eq!(
            Bitset::footprint(set.words().len()),
            16_384,
            "12,504 bytes: four whole pages"
        );
        // Smaller than a page: left on the heap, counted by its bytes.
        let small = Bitset::full(1000).into_own_pages();
        assert!(!small.on_own_pages());
        assert_eq!(Bitset::footprint(small.words().len()), 128);
    }

    #[test]
    fn set_operations_respect_the_universe() {
        let mut a = Bitset::empty(70);
        a.insert(0);
        a.insert(69);
        a.insert(70); // outside: ignored
        assert_eq!(a.count(), 2);
        a.negate();
        assert_eq!(a.count(), 68);
        assert!(!a.contains(69) && a.contains(1));
        let full = Bitset::full(70);
        assert_eq!(full.count(), 70);
        let mut b = full.clone();
        b.and_with(&a);
        assert_eq!(b, a);
    }

    #[test]
    fn a_tally_is_the_exact_sum_rounded_once() {
        // Weights where a running f64 sum drifts from the true sum.
        let weights: Vec<f64> = (0..1000)
            .map(|i| (f64::from(i) * 1.618_033).sin().abs() * 1e7 + 0.1)
            .collect();
        let mut set = Bitset::empty(1000);
        for i in (0..1000).filter(|i| i % 3 == 0) {
            set.insert(i);
        }
        let members = |filter: &dyn Fn(usize) -> bool| -> Vec<f64> {
            (0..1000)
                .filter(|&i| i % 3 == 0 && filter(i))
                .map(|i| weights[i])
                .collect()
        };
        let tally = set.tally(None, &weights);
        assert_eq!(tally.count, 334);
        let all = members(&|_| true);
        assert_eq!(
            tally.weight.to_bits(),
            crate::exact_sum(all.clone()).to_bits()
        );
        assert_ne!(
            tally.weight,
            all.iter().sum::<f64>(),
            "a running sum drifts"
        );
        let full = Bitset::full(1000).tally(None, &weights);
        assert_eq!(
            full.weight.to_bits(),
            crate::exact_sum(weights.iter().copied()).to_bits()
        );
        // A filter.
        let mut filter = Bitset::empty(1000);
        for i in [3, 4, 600, 999] {
            filter.insert(i);
        }
        let filtered = set.tally(Some(&filter), &weights);
        assert_eq!(filtered.count, 3);
        assert_eq!(
            filtered.weight.to_bits(),
            crate::exact_sum(members(&|i| [3, 600, 999].contains(&i))).to_bits()
        );
        // Words past the first batch of 256, each member its own weight; a filter shorter
        // and one longer than the set; weights that end before the set does.
        let n = 40_000;
        let weights: Vec<f64> = (0..n).map(|i| f64::from(i) * 1.1 + 0.3).collect();
        let mut big = Bitset::empty(n as usize);
        for i in (0..n).step_by(5) {
            big.insert(i as usize);
        }
        let picked = |filter_len: u32, weights_len: u32| {
            (0..n.min(filter_len).min(weights_len))
                .step_by(5)
                .map(|i| weights[i as usize])
                .collect::<Vec<_>>()
        };
        for (filter_len, weights_len, count) in [
            (20_000, n, 4_000),
            (n, n, 8_000),
            (60_000, n, 8_000),
            (n, 30_000, 8_000),
        ] {
            let filter = Bitset::full(filter_len as usize);
            let tally = big.tally(Some(&filter), &weights[..weights_len as usize]);
            let expected = crate::exact_sum(picked(filter_len, weights_len));
            assert_eq!(
                (tally.count, tally.weight.to_bits()),
                (count, expected.to_bits()),
                "filter of {filter_len}, {weights_len} weights"
            );
        }
    }
}
