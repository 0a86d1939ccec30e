//! Dense respondent sets: one bit per respondent, in respondent order.
//!
//! Query evaluation works on dense words rather than compressed bitmaps because every
//! operand (code columns, bases, groups) is dense over the same respondents and the
//! final pass must read the weights in order anyway; word-wise AND/OR/NOT vectorize.

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

/// Number of partial sums kept apart; fixed so every platform adds in the same order.
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

    /// Count and weight sum of the members that are also in `filter`.
    pub fn tally(&self, filter: Option<&Bitset>, weights: &[f64]) -> Tally {
        match filter {
            Some(filter) => tally_words(
                self.words().iter().zip(filter.words()).map(|(a, b)| a & b),
                weights,
            ),
            None => tally_words(self.words().iter().copied(), weights),
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

/// Lane masks for one byte of a word: `BYTE_MASKS[b][k]` is all ones when bit `k` of `b`
/// is set. ANDing a weight with it keeps the weight or makes it +0.0, so partial words
/// sum with plain vector loads, ANDs and adds instead of a branch per bit.
static BYTE_MASKS: [[u64; LANES]; 256] = {
    let mut table = [[0u64; LANES]; 256];
    let mut byte = 0;
    while byte < 256 {
        let mut k = 0;
        while k < LANES {
            if (byte >> k) & 1 == 1 {
                table[byte][k] = u64::MAX;
            }
            k += 1;
        }
        byte += 1;
    }
    table
};

/// Below this many members a word is summed bit by bit.
const SPARSE_WORD: u32 = 8;

/// Sums the weights of the set bits. Lane `j % 8` takes bit `j` of every word, in word
/// order, and the lanes are folded in a fixed order; every path below adds the same
/// weights to the same lanes in the same order (a masked-out weight adds +0.0, which
/// leaves a non-negative sum unchanged), so the result is identical on every platform.
pub fn tally_words(mut words: impl Iterator<Item = u64>, weights: &[f64]) -> Tally {
    // Words arrive in small batches so the summing loop is a plain slice loop that can
    // be compiled for the CPU's widest vectors.
    const BATCH: usize = 256;
    let mut summer = Summer::default();
    let mut batch = [0u64; BATCH];
    let mut first = 0usize;
    loop {
        let mut filled = 0;
        for (slot, word) in batch.iter_mut().zip(&mut words) {
            *slot = word;
            filled += 1;
        }
        if filled == 0 {
            break;
        }
        summer.add(&batch[..filled], weights.get(first * 64..).unwrap_or(&[]));
        first += filled;
        if filled < BATCH {
            break;
        }
    }
    summer.finish()
}

/// Sums weights block by block, in the fixed lane order of [`tally_words`]. Blocks must
/// come in respondent order; a block with no members may be skipped.
#[derive(Debug, Default)]
pub(crate) struct Summer {
    lanes: [f64; LANES],
    count: u64,
}

impl Summer {
    /// Adds the members of `words`, whose first bit is the respondent of `weights[0]`.
    pub(crate) fn add(&mut self, words: &[u64], weights: &[f64]) {
        self.count += add_words(&mut self.lanes, words, weights);
    }

    /// The count and the folded sum.
    pub(crate) fn finish(self) -> Tally {
        Tally {
            count: self.count,
            weight: fold_lanes(&self.lanes),
        }
    }
}

/// Adds the weights of `words`' members into `lanes`; returns how many there were.
fn add_words(lanes: &mut [f64; LANES], words: &[u64], weights: &[f64]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, checked just above.
        #[allow(unsafe_code)]
        return unsafe { add_words_avx2(lanes, words, weights) };
    }
    add_words_portable(lanes, words, weights)
}

/// [`add_words_portable`] compiled for AVX2: the same code, so the same sums.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn add_words_avx2(lanes: &mut [f64; LANES], words: &[u64], weights: &[f64]) -> u64 {
    add_words_portable(lanes, words, weights)
}

#[inline(always)]
fn add_words_portable(lanes: &mut [f64; LANES], words: &[u64], weights: &[f64]) -> u64 {
    let mut count = 0u64;
    for (index, &word) in words.iter().enumerate() {
        if word == 0 {
            continue;
        }
        let members = word.count_ones();
        count += u64::from(members);
        let start = index * 64;
        let chunk = weights
            .get(start..weights.len().min(start + 64))
            .unwrap_or(&[]);
        if let (Ok(full), true) = (<&[f64; 64]>::try_from(chunk), members >= SPARSE_WORD) {
            for group in 0..8 {
                let masks = &BYTE_MASKS[((word >> (group * 8)) & 0xff) as usize];
                for k in 0..LANES {
                    lanes[k] += f64::from_bits(full[group * LANES + k].to_bits() & masks[k]);
                }
            }
        } else {
            let mut bits = word;
            while bits != 0 {
                let j = bits.trailing_zeros() as usize;
                if let Some(weight) = chunk.get(j) {
                    lanes[j % LANES] += weight;
                }
                bits &= bits - 1;
            }
        }
    }
    count
}

/// Sum of every weight, in the same lane order as [`tally_words`] over a full set.
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
    fn tally_matches_a_naive_sum_and_full_equals_sum_all() {
        let weights: Vec<f64> = (0..1000).map(|i| f64::from(i) * 0.37 + 1.0).collect();
        let mut set = Bitset::empty(1000);
        let mut expected = 0.0;
        for i in (0..1000).filter(|i| i % 3 == 0) {
            set.insert(i);
            expected += weights[i];
        }
        let tally = set.tally(None, &weights);
        assert_eq!(tally.count, 334);
        assert!((tally.weight - expected).abs() < 1e-9 * expected);
        let full = Bitset::full(1000).tally(None, &weights);
        assert_eq!(full.weight, sum_all(&weights));
        let mut filter = Bitset::empty(1000);
        filter.insert(3);
        filter.insert(4);
        let filtered = set.tally(Some(&filter), &weights);
        assert_eq!((filtered.count, filtered.weight), (1, weights[3]));
    }

    #[test]
    fn every_path_adds_in_the_same_order_bit_for_bit() {
        // Reference: bit j of word i goes to lane j % 8, in order; no masks, no skips.
        let weights: Vec<f64> = (0..640)
            .map(|i| (f64::from(i) * 1.618_033).sin().abs() * 1e7 + 0.1)
            .collect();
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        for density in [1u32, 4, 9, 32, 63, 64] {
            let words: Vec<u64> = (0..10)
                .map(|_| {
                    let mut word = 0u64;
                    for j in 0..64 {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        if (seed % 64) < u64::from(density) {
                            word |= 1 << j;
                        }
                    }
                    word
                })
                .collect();
            let mut lanes = [0.0f64; LANES];
            for (i, word) in words.iter().enumerate() {
                for j in 0..64 {
                    if word >> j & 1 == 1 {
                        lanes[j % LANES] += weights[i * 64 + j];
                    }
                }
            }
            let tally = tally_words(words.iter().copied(), &weights);
            assert_eq!(
                tally.weight.to_bits(),
                fold_lanes(&lanes).to_bits(),
                "density {density}"
            );
        }
    }
}
