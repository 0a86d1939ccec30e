//! Evaluating target expressions to respondent sets, block by block.
//!
//! An expression is compiled to a [`Plan`] against the survey's columns (through
//! [`Source`]); the plan fills blocks of [`BLOCK_WORDS`] words, so a whole target is one
//! pass over its columns with every intermediate block in L1, and no set per leaf.

use std::sync::Arc;

use crosstab_contract::Expr;

use crate::bitset::Bitset;
use crate::cache::{SetCache, SetKey};

/// One variable's column: sorted distinct values and a code per respondent.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Column<'a> {
    pub dict: &'a [f64],
    pub codes: Codes<'a>,
}

/// Respondent codes at their stored width (0 = missing, k = `dict[k - 1]`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Codes<'a> {
    /// Bit 0 and bit 1 of each code, 64 respondents a word (codes 0 to 3).
    TwoBits {
        low: &'a [u64],
        high: &'a [u64],
    },
    U8(&'a [u8]),
    U16(&'a [u16]),
    U32(&'a [u32]),
}

impl Codes<'_> {
    pub(crate) fn get(&self, row: usize) -> u32 {
        match self {
            Codes::TwoBits { low, high } => {
                let bit = |plane: &[u64]| plane.get(row / 64).map_or(0, |w| (w >> (row % 64)) & 1);
                (bit(low) | bit(high) << 1) as u32
            }
            Codes::U8(codes) => codes.get(row).map_or(0, |c| u32::from(*c)),
            Codes::U16(codes) => codes.get(row).map_or(0, |c| u32::from(*c)),
            Codes::U32(codes) => codes.get(row).copied().unwrap_or(0),
        }
    }
}

/// What a plan needs from a survey.
pub(crate) trait Source {
    /// Position and column of a variable.
    fn column_named(&self, name: &str) -> Option<(usize, Column<'_>)>;
    /// The set of a named code.
    fn named_set(&self, name: &str) -> Option<&Bitset>;
    /// Where leaf sets are kept between queries.
    fn set_cache(&self) -> &SetCache;
    /// Number of respondents.
    fn universe(&self) -> usize;
}

/// Words a plan fills at a time (16,384 respondents): long enough for tight, vectorized
/// loops, short enough that each nesting level's scratch block stays in L1.
pub(crate) const BLOCK_WORDS: usize = 256;

/// Most code ranges a leaf is compared against directly; more go through a table.
const MAX_RANGES: usize = 4;

/// The codes a leaf matches as up to [`MAX_RANGES`] inclusive ranges `(lo, hi)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ranges {
    ranges: [(u32, u32); MAX_RANGES],
    len: usize,
}

impl Ranges {
    /// One range.
    pub(crate) fn one(lo: u32, hi: u32) -> Self {
        let mut ranges = [(0, 0); MAX_RANGES];
        ranges[0] = (lo, hi);
        Ranges { ranges, len: 1 }
    }

    fn as_slice(&self) -> &[(u32, u32)] {
        &self.ranges[..self.len]
    }

    #[inline(always)]
    fn holds(&self, code: u32) -> bool {
        self.as_slice()
            .iter()
            .any(|(lo, hi)| code.wrapping_sub(*lo) <= hi - lo)
    }

    /// Which of the codes 0 to 3 lie in the ranges: bit `k` for code `k`.
    fn matching(&self) -> u8 {
        two_bit_codes_where(|code| self.holds(code))
    }

    /// The ranges as `(lo, hi - lo)` bytes, when every bound fits one.
    #[cfg(any(
        target_arch = "x86_64",
        all(target_arch = "wasm32", target_feature = "simd128")
    ))]
    fn narrow_u8(&self) -> Option<[(u8, u8); MAX_RANGES]> {
        let mut out = [(0u8, 0u8); MAX_RANGES];
        for (slot, (lo, hi)) in out.iter_mut().zip(self.as_slice()) {
            u8::try_from(*hi).ok()?;
            *slot = (u8::try_from(*lo).ok()?, u8::try_from(hi - lo).ok()?);
        }
        Some(out)
    }
}

/// An expression compiled against one survey: each node fills a block of words (64
/// respondents each) on demand.
pub(crate) enum Plan<'a> {
    /// Every respondent.
    All,
    /// Nobody.
    Empty,
    /// A set computed earlier (a named code).
    Set(&'a Bitset),
    /// A leaf's or a target's set, cached by the survey.
    Cached(Arc<Bitset>),
    /// Codes in a few contiguous ranges, compared directly.
    Ranges { codes: Codes<'a>, ranges: Ranges },
    /// Codes listed in a table (many gaps).
    Table { codes: Codes<'a>, table: Vec<bool> },
    /// Complement within all respondents.
    Not(Box<Plan<'a>>),
    /// All of these.
    And(Vec<Plan<'a>>),
    /// Any of these.
    Or(Vec<Plan<'a>>),
}

/// How a plan's bits go into a block: replacing its words, or combined into them (so an
/// AND or OR needs no scratch block and no second pass over one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Write {
    /// `word = bits`.
    Set,
    /// `word &= bits`.
    And,
    /// `word |= bits`.
    Or,
}

impl Write {
    #[inline(always)]
    fn apply(self, word: &mut u64, bits: u64) {
        match self {
            Write::Set => *word = bits,
            Write::And => *word &= bits,
            Write::Or => *word |= bits,
        }
    }
}

impl Plan<'_> {
    /// Fills `out` (at most [`BLOCK_WORDS`]) with the bits of the respondents from word
    /// `first` on; bits past the last respondent may be set (callers AND with a filter or
    /// clear the tail).
    pub(crate) fn fill(&self, first: usize, out: &mut [u64]) {
        self.write(first, out, Write::Set);
    }

    /// [`Plan::fill`], the bits going into `out` as `write` says.
    pub(crate) fn write(&self, first: usize, out: &mut [u64], write: Write) {
        match (self, write) {
            (_, Write::Set) => self.set(first, out),
            (
                Plan::Ranges {
                    codes: Codes::U8(c),
                    ranges,
                },
                _,
            ) => fill_ranges_u8(rows(c, first, out.len()), ranges, out, write),
            (
                Plan::Ranges {
                    codes: Codes::TwoBits { low, high },
                    ranges,
                },
                _,
            ) => two_bit_words(low, high, first, ranges.matching(), out, write),
            (
                Plan::Table {
                    codes: Codes::TwoBits { low, high },
                    table,
                },
                _,
            ) => two_bit_words(low, high, first, table_matching(table), out, write),
            (Plan::Set(set), _) => write_words(set, first, out, write),
            (Plan::Cached(set), _) => write_words(set, first, out, write),
            (Plan::And(items), Write::And) => combine(items, first, out, write, Write::And, 0),
            (Plan::Or(items), Write::Or) => combine(items, first, out, write, Write::Or, u64::MAX),
            // The rest have no way of their own to combine: made whole, then combined.
            (_, Write::And | Write::Or) => {
                let mut scratch = [0u64; BLOCK_WORDS];
                let scratch = &mut scratch[..out.len()];
                self.set(first, scratch);
                for (word, bits) in out.iter_mut().zip(scratch.iter()) {
                    write.apply(word, *bits);
                }
            }
        }
    }

    /// [`Plan::fill`]: `out` replaced by the plan's words.
    fn set(&self, first: usize, out: &mut [u64]) {
        match self {
            Plan::All => out.fill(u64::MAX),
            Plan::Empty => out.fill(0),
            Plan::Set(set) => copy_words(set, first, out),
            Plan::Cached(set) => copy_words(set, first, out),
            Plan::Ranges { codes, ranges } => match codes {
                Codes::TwoBits { low, high } => {
                    two_bit_words(low, high, first, ranges.matching(), out, Write::Set);
                }
                Codes::U8(c) => fill_ranges_u8(rows(c, first, out.len()), ranges, out, Write::Set),
                Codes::U16(c) => pack_rows(rows(c, first, out.len()), out, |x| {
                    ranges.holds(u32::from(x))
                }),
                Codes::U32(c) => pack_rows(rows(c, first, out.len()), out, |x| ranges.holds(x)),
            },
            Plan::Table { codes, table } => {
                let hit = |x: u32| table.get(x as usize).copied().unwrap_or(false);
                match codes {
                    Codes::TwoBits { low, high } => {
                        two_bit_words(low, high, first, table_matching(table), out, Write::Set);
                    }
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
            Plan::And(items) => combine(items, first, out, Write::Set, Write::And, 0),
            Plan::Or(items) => combine(items, first, out, Write::Set, Write::Or, u64::MAX),
        }
    }

    /// The whole set over `universe` respondents.
    pub(crate) fn materialize(&self, universe: usize) -> Bitset {
        let mut words = vec![0u64; universe.div_ceil(64)];
        for (index, block) in words.chunks_mut(BLOCK_WORDS).enumerate() {
            self.fill(index * BLOCK_WORDS, block);
        }
        Bitset::from_words(words, universe)
    }
}

/// Compiles an expression whose names are all defined (unknown names match nobody).
pub(crate) fn plan<'a, S: Source>(source: &'a S, expr: &Expr) -> Plan<'a> {
    match expr {
        Expr::All => Plan::All,
        Expr::Code(name) => source.named_set(name).map_or(Plan::Empty, Plan::Set),
        Expr::Compare { var, op, value } => {
            let (op, value) = (*op, *value);
            leaf(source, var, move |v| op.holds(v, value))
        }
        Expr::In { var, values } => {
            // Sorted once, so each dictionary value is a binary search rather than a scan
            // of the list (a variable may have millions of values). `+ 0.0` makes -0.0
            // equal 0.0, as `==` has it; NaN equals nothing, as with `==`.
            let mut listed: Vec<f64> = values
                .iter()
                .filter(|v| !v.is_nan())
                .map(|v| v + 0.0)
                .collect();
            listed.sort_by(f64::total_cmp);
            leaf(source, var, move |v| {
                listed.binary_search_by(|x| x.total_cmp(&(v + 0.0))).is_ok()
            })
        }
        Expr::Between { var, low, high } => {
            let (low, high) = (*low, *high);
            leaf(source, var, move |v| low <= v && v <= high)
        }
        Expr::Not(inner) => Plan::Not(Box::new(plan(source, inner))),
        Expr::And(items) => Plan::And(items.iter().map(|item| plan(source, item)).collect()),
        Expr::Or(items) => Plan::Or(items.iter().map(|item| plan(source, item)).collect()),
    }
}

/// A comparison: the dictionary values it matches become code ranges (or a table), and
/// the leaf's set comes from the cache when the same codes were asked for before.
fn leaf<'a, S: Source>(source: &'a S, var: &str, predicate: impl Fn(f64) -> bool) -> Plan<'a> {
    let Some((index, Column { dict, codes })) = source.column_named(var) else {
        return Plan::Empty;
    };
    // Code k is dict[k - 1]; code 0 (missing) never matches. Dictionaries are sorted, so
    // an order comparison or BETWEEN is one run of codes, `!=` two.
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for (position, value) in dict.iter().enumerate() {
        if predicate(*value) {
            let code = position as u32 + 1;
            match runs.last_mut() {
                Some((_, hi)) if *hi + 1 == code => *hi = code,
                _ => runs.push((code, code)),
            }
        }
    }
    let (key, plan) = match runs.as_slice() {
        [] => return Plan::Empty,
        [(lo, hi)] => (
            SetKey::Range(index, *lo, *hi),
            Plan::Ranges {
                codes,
                ranges: Ranges::one(*lo, *hi),
            },
        ),
        few if few.len() <= MAX_RANGES => {
            let mut ranges = Ranges::one(few[0].0, few[0].1);
            for (slot, run) in ranges.ranges.iter_mut().zip(few) {
                *slot = *run;
            }
            ranges.len = few.len();
            (
                SetKey::Listed(index, listed_codes(few)),
                Plan::Ranges { codes, ranges },
            )
        }
        many => {
            let mut table = vec![false; dict.len() + 1];
            for (lo, hi) in many {
                for code in *lo..=*hi {
                    table[code as usize] = true;
                }
            }
            (
                SetKey::Listed(index, listed_codes(many)),
                Plan::Table { codes, table },
            )
        }
    };
    let universe = source.universe();
    match source
        .set_cache()
        .get_or_admit(key, || plan.materialize(universe))
    {
        Some(set) => Plan::Cached(set),
        None => plan,
    }
}

fn listed_codes(runs: &[(u32, u32)]) -> Vec<u32> {
    runs.iter().flat_map(|(lo, hi)| *lo..=*hi).collect()
}

/// The words of `set` from word `first` on combined into `out` by `write` (words past
/// the set's end count as 0).
fn write_words(set: &Bitset, first: usize, out: &mut [u64], write: Write) {
    let words = set.words();
    let start = first.min(words.len());
    let mut from = words[start..].iter();
    for word in out.iter_mut() {
        write.apply(word, from.next().copied().unwrap_or(0));
    }
}

fn copy_words(set: &Bitset, first: usize, out: &mut [u64]) {
    let words = set.words();
    let start = first.min(words.len());
    let have = (words.len() - start).min(out.len());
    out[..have].copy_from_slice(&words[start..start + have]);
    out[have..].fill(0);
}

/// Writes the first item into `out` as `write` says, then folds in the others with `op`
/// (`write` is `Set` or `op` itself); stops early once every word is `settled` (no later
/// item can change it).
fn combine(
    items: &[Plan<'_>],
    first: usize,
    out: &mut [u64],
    write: Write,
    op: Write,
    settled: u64,
) {
    let Some((head, rest)) = items.split_first() else {
        let empty = !settled;
        out.iter_mut().for_each(|word| write.apply(word, empty));
        return;
    };
    head.write(first, out, write);
    for item in rest {
        if out.iter().all(|word| *word == settled) {
            break;
        }
        item.write(first, out, op);
    }
}

/// The codes of the respondents in `words` words from word `first` on.
fn rows<T>(codes: &[T], first: usize, words: usize) -> &[T] {
    let start = (first * 64).min(codes.len());
    &codes[start..(start + words * 64).min(codes.len())]
}

/// Which of the codes 0 to 3 `table` marks: bit `k` for code `k`.
fn table_matching(table: &[bool]) -> u8 {
    two_bit_codes_where(|code| table.get(code as usize).copied().unwrap_or(false))
}

/// The codes 0 to 3 for which `hit` holds: bit `k` for code `k`.
fn two_bit_codes_where(hit: impl Fn(u32) -> bool) -> u8 {
    (0..4u32)
        .filter(|code| hit(*code))
        .fold(0, |bits, code| bits | 1 << code)
}

/// Two-bit codes against the set of codes `matching` (bit `k` for code `k`; code 0,
/// missing, never matches): each word is a function of one word of each plane, so 64
/// respondents cost a few instructions and a quarter of the bytes their byte codes would
/// read. Words past the planes get 0.
fn two_bit_words(
    low: &[u64],
    high: &[u64],
    first: usize,
    matching: u8,
    out: &mut [u64],
    write: Write,
) {
    let all_if = |code: u8| 0u64.wrapping_sub(u64::from(matching >> code & 1));
    let (one, two, three) = (all_if(1), all_if(2), all_if(3));
    let plane = |words: &[u64]| {
        let start = first.min(words.len());
        let end = (start + out.len()).min(words.len());
        (start, end)
    };
    let ((lo_start, lo_end), (hi_start, hi_end)) = (plane(low), plane(high));
    let pairs = low[lo_start..lo_end].iter().zip(&high[hi_start..hi_end]);
    let have = pairs.len();
    let bits = |(l, h): (&u64, &u64)| (one & l & !h) | (two & !l & h) | (three & l & h);
    // One loop per mode, so the word loop itself never branches on it.
    match write {
        Write::Set => out.iter_mut().zip(pairs).for_each(|(w, p)| *w = bits(p)),
        Write::And => out.iter_mut().zip(pairs).for_each(|(w, p)| *w &= bits(p)),
        Write::Or => out.iter_mut().zip(pairs).for_each(|(w, p)| *w |= bits(p)),
    }
    out[have..].iter_mut().for_each(|word| write.apply(word, 0));
}

/// Byte codes against up to four ranges: with AVX2 (or WebAssembly SIMD) each 32 (16)
/// codes are compared at once and their mask bits taken straight into the word.
fn fill_ranges_u8(rows: &[u8], ranges: &Ranges, out: &mut [u64], write: Write) {
    // One kernel per mode, so the word loop itself never branches on it.
    match write {
        Write::Set => ranges_u8(rows, ranges, out, |word, bits| *word = bits),
        Write::And => ranges_u8(rows, ranges, out, |word, bits| *word &= bits),
        Write::Or => ranges_u8(rows, ranges, out, |word, bits| *word |= bits),
    }
}

/// [`fill_ranges_u8`] with each word's bits going in by `write`.
#[inline(always)]
fn ranges_u8(rows: &[u8], ranges: &Ranges, out: &mut [u64], write: impl Fn(&mut u64, u64)) {
    #[cfg(target_arch = "x86_64")]
    if let Some(narrow) = ranges.narrow_u8() {
        if std::arch::is_x86_feature_detected!("avx2") {
            let narrow = &narrow[..ranges.len];
            // SAFETY: the CPU supports AVX2, checked just above.
            #[allow(unsafe_code)]
            return unsafe { x86::ranges_u8_avx2(rows, narrow, out, write) };
        }
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    if let Some(narrow) = ranges.narrow_u8() {
        return wasm::ranges_u8_simd128(rows, &narrow[..ranges.len], out, write);
    }
    pack_block(rows, out, |x| ranges.holds(u32::from(x)), write);
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::{
        __m256i, _mm256_cmpeq_epi8, _mm256_loadu_si256, _mm256_min_epu8, _mm256_movemask_epi8,
        _mm256_or_si256, _mm256_set1_epi8, _mm256_setzero_si256, _mm256_sub_epi8,
    };

    /// Whether each of 32 codes lies in one of `bounds` (`lo`, `span` vectors): `code -
    /// lo` wraps below `lo`, so one unsigned `<= span` (as `min(d, span) == d`) checks
    /// both ends.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn hits<const K: usize>(codes: __m256i, bounds: &[(__m256i, __m256i); K]) -> u32 {
        let mut hit = _mm256_setzero_si256();
        for (lo, span) in bounds {
            let d = _mm256_sub_epi8(codes, *lo);
            hit = _mm256_or_si256(hit, _mm256_cmpeq_epi8(_mm256_min_epu8(d, *span), d));
        }
        _mm256_movemask_epi8(hit) as u32
    }

    /// Byte codes against `ranges` (`lo`, `span`; at most [`super::MAX_RANGES`]).
    #[target_feature(enable = "avx2")]
    pub(super) fn ranges_u8_avx2(
        rows: &[u8],
        ranges: &[(u8, u8)],
        out: &mut [u64],
        write: impl Fn(&mut u64, u64),
    ) {
        // A kernel per count of ranges: its bounds stay in registers and the compare
        // loop is unrolled, where a loop over a slice reloads them for every 32 codes.
        match *ranges {
            [(lo, 0)] => {
                let lo = _mm256_set1_epi8(lo as i8);
                fill(rows, ranges, out, write, |codes| {
                    _mm256_movemask_epi8(_mm256_cmpeq_epi8(codes, lo)) as u32
                });
            }
            [_] => fill_bounds::<1>(rows, ranges, out, write),
            [_, _] => fill_bounds::<2>(rows, ranges, out, write),
            [_, _, _] => fill_bounds::<3>(rows, ranges, out, write),
            [_, _, _, _] => fill_bounds::<4>(rows, ranges, out, write),
            _ => fill(rows, &[], out, write, |_| 0),
        }
    }

    /// [`fill`] with the `K` ranges of `ranges` as vectors.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn fill_bounds<const K: usize>(
        rows: &[u8],
        ranges: &[(u8, u8)],
        out: &mut [u64],
        write: impl Fn(&mut u64, u64),
    ) {
        let mut bounds = [(_mm256_setzero_si256(), _mm256_setzero_si256()); K];
        for (slot, (lo, span)) in bounds.iter_mut().zip(ranges) {
            *slot = (_mm256_set1_epi8(*lo as i8), _mm256_set1_epi8(*span as i8));
        }
        fill(rows, ranges, out, write, |codes| hits(codes, &bounds));
    }

    /// [`super::fill_by_chunks`] with `hits` giving the mask of 32 codes.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn fill(
        rows: &[u8],
        ranges: &[(u8, u8)],
        out: &mut [u64],
        write: impl Fn(&mut u64, u64),
        hits: impl Fn(__m256i) -> u32,
    ) {
        super::fill_by_chunks(rows, ranges, out, write, |chunk| {
            // SAFETY: `chunk` holds 64 bytes: both 32-byte unaligned loads are inside it.
            #[allow(unsafe_code)]
            let (low, high) = unsafe {
                (
                    _mm256_loadu_si256(chunk.as_ptr().cast()),
                    _mm256_loadu_si256(chunk.as_ptr().add(32).cast()),
                )
            };
            u64::from(hits(low)) | u64::from(hits(high)) << 32
        });
    }
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod wasm {
    use std::arch::wasm32::{
        u8x16_bitmask, u8x16_eq, u8x16_le, u8x16_splat, u8x16_sub, v128, v128_load, v128_or,
    };

    #[inline(always)]
    pub(super) fn ranges_u8_simd128(
        rows: &[u8],
        ranges: &[(u8, u8)],
        out: &mut [u64],
        write: impl Fn(&mut u64, u64),
    ) {
        // One code, or `K` ranges with their bounds in locals (the compare loop unrolled),
        // not read from a list for every sixteen codes.
        match *ranges {
            [(lo, 0)] => {
                let lo = u8x16_splat(lo);
                fill(rows, ranges, out, write, |codes| u8x16_eq(codes, lo));
            }
            [_] => fill_bounds::<1>(rows, ranges, out, write),
            [_, _] => fill_bounds::<2>(rows, ranges, out, write),
            [_, _, _] => fill_bounds::<3>(rows, ranges, out, write),
            [_, _, _, _] => fill_bounds::<4>(rows, ranges, out, write),
            _ => fill(rows, &[], out, write, |_| u8x16_splat(0)),
        }
    }

    /// [`fill`] with the `K` ranges of `ranges` as vectors: `code - lo` wraps below `lo`,
    /// so one unsigned `<= span` checks both ends.
    #[inline(always)]
    fn fill_bounds<const K: usize>(
        rows: &[u8],
        ranges: &[(u8, u8)],
        out: &mut [u64],
        write: impl Fn(&mut u64, u64),
    ) {
        let zero = u8x16_splat(0);
        let mut bounds = [(zero, zero); K];
        for (slot, (lo, span)) in bounds.iter_mut().zip(ranges) {
            *slot = (u8x16_splat(*lo), u8x16_splat(*span));
        }
        fill(rows, ranges, out, write, |codes| {
            bounds.iter().fold(zero, |hit, (lo, span)| {
                v128_or(hit, u8x16_le(u8x16_sub(codes, *lo), *span))
            })
        });
    }

    /// [`super::fill_by_chunks`] with `hits` giving a true lane per matching code.
    #[inline(always)]
    fn fill(
        rows: &[u8],
        ranges: &[(u8, u8)],
        out: &mut [u64],
        write: impl Fn(&mut u64, u64),
        hits: impl Fn(v128) -> v128,
    ) {
        super::fill_by_chunks(rows, ranges, out, write, |chunk| {
            let mut bits = 0u64;
            for (quarter, sixteen) in chunk.chunks_exact(16).enumerate() {
                // SAFETY: `sixteen` is 16 readable bytes; v128.load takes any alignment.
                #[allow(unsafe_code)]
                let codes = unsafe { v128_load(sixteen.as_ptr().cast()) };
                bits |= u64::from(u8x16_bitmask(hits(codes))) << (quarter * 16);
            }
            bits
        });
    }
}

/// Each word of `out` from 64 of `rows`, `word` giving its bits from 64 codes (the tail,
/// fewer than 64 codes, checked against `ranges` one by one; words past the rows get 0):
/// the frame the SIMD compare kernels fill.
#[cfg(any(
    target_arch = "x86_64",
    all(target_arch = "wasm32", target_feature = "simd128")
))]
#[inline(always)]
fn fill_by_chunks(
    rows: &[u8],
    ranges: &[(u8, u8)],
    out: &mut [u64],
    write: impl Fn(&mut u64, u64),
    word: impl Fn(&[u8; 64]) -> u64,
) {
    let (chunks, tail) = rows.as_chunks::<64>();
    let mut words = out.iter_mut();
    for (chunk, out_word) in chunks.iter().zip(&mut words) {
        write(out_word, word(chunk));
    }
    if let Some(out_word) = words.next() {
        let bits = pack_word(tail, |x: u8| {
            ranges.iter().any(|(lo, span)| x.wrapping_sub(*lo) <= *span)
        });
        write(out_word, bits);
    }
    words.for_each(|out_word| write(out_word, 0));
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
    pack_block(rows, out, hit, |word, bits| *word = bits);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn pack_rows_avx2<T: Copy, F: Fn(T) -> bool>(rows: &[T], out: &mut [u64], hit: F) {
    pack_block(rows, out, hit, |word, bits| *word = bits);
}

/// Packs `hit(code)` of each row, 64 rows a word, into `out` by `write`; words past the
/// rows get 0.
#[inline(always)]
fn pack_block<T: Copy>(
    rows: &[T],
    out: &mut [u64],
    hit: impl Fn(T) -> bool,
    write: impl Fn(&mut u64, u64),
) {
    let mut chunks = rows.chunks(64);
    for word in out.iter_mut() {
        write(
            word,
            chunks.next().map_or(0, |chunk| pack_word(chunk, &hit)),
        );
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
mod tests {
    use super::*;

    fn portable(rows: &[u8], ranges: &Ranges) -> Vec<u64> {
        let mut out = vec![0u64; BLOCK_WORDS];
        pack_block(
            rows,
            &mut out,
            |x| ranges.holds(u32::from(x)),
            |w, bits| *w = bits,
        );
        out
    }

    #[test]
    fn byte_ranges_match_the_portable_packing() {
        let rows: Vec<u8> = (0..BLOCK_WORDS * 64 - 37)
            .map(|i| (i * 7919 % 251) as u8)
            .collect();
        // Every count of ranges the SIMD kernels have one for (none to four), and single
        // codes (their own kernel).
        let cases: [&[(u32, u32)]; 7] = [
            &[],
            &[(0, 0)],
            &[(3, 3)],
            &[(1, 100), (102, 250)],
            &[(5, 9), (20, 20), (200, 255)],
            &[(1, 2), (10, 10), (50, 60), (128, 200)],
            &[(0, 255)],
        ];
        for case in cases {
            let mut ranges = Ranges::one(0, 0);
            for (slot, run) in ranges.ranges.iter_mut().zip(case) {
                *slot = *run;
            }
            ranges.len = case.len();
            let mut out = vec![u64::MAX; BLOCK_WORDS];
            fill_ranges_u8(&rows, &ranges, &mut out, Write::Set);
            let expected = portable(&rows, &ranges);
            assert_eq!(out, expected, "{case:?}");
            // Combined into what a block holds: each word as the AND or the OR.
            let before: Vec<u64> = (0..BLOCK_WORDS as u64)
                .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
                .collect();
            for (write, op) in [
                (Write::And, (|a, b| a & b) as fn(u64, u64) -> u64),
                (Write::Or, |a, b| a | b),
            ] {
                let mut out = before.clone();
                fill_ranges_u8(&rows, &ranges, &mut out, write);
                let want: Vec<u64> = before
                    .iter()
                    .zip(&expected)
                    .map(|(a, b)| op(*a, *b))
                    .collect();
                assert_eq!(out, want, "{write:?} {case:?}");
            }
        }
    }

    #[test]
    fn every_byte_range_matches_the_portable_packing() {
        // Every code against one-byte ranges from every start, the ends included: the
        // SIMD paths compare bytes unsigned by wrapping, so 0, 0x7F/0x80 and 255 are edges.
        let rows: Vec<u8> = (0..=255u8)
            .chain(0..=255u8)
            .rev()
            .take(5 * 64 + 7)
            .collect();
        for lo in 0..=255u32 {
            for hi in (lo..=255).step_by(if lo % 17 == 0 { 1 } else { 13 }) {
                let ranges = Ranges::one(lo, hi);
                let mut out = vec![u64::MAX; BLOCK_WORDS];
                fill_ranges_u8(&rows, &ranges, &mut out, Write::Set);
                assert_eq!(out, portable(&rows, &ranges), "{lo}..={hi}");
            }
        }
    }

    #[test]
    fn two_bit_codes_match_their_rows_in_every_mode() {
        // 5 words of rows; blocks start at word 0 and 3, the second running past the end.
        let rows: Vec<u8> = (0..5 * 64 - 9).map(|i| (i * 7 % 13 % 4) as u8).collect();
        let words = rows.len().div_ceil(64);
        let (mut low, mut high) = (vec![0u64; words], vec![0u64; words]);
        for (row, code) in rows.iter().enumerate() {
            low[row / 64] |= u64::from(code & 1) << (row % 64);
            high[row / 64] |= u64::from(code >> 1) << (row % 64);
        }
        let codes = Codes::TwoBits {
            low: &low,
            high: &high,
        };
        for (row, code) in rows.iter().enumerate() {
            assert_eq!(codes.get(row), u32::from(*code));
        }
        for matching in 0..16u8 {
            for first in [0, 3] {
                let expected: Vec<u64> = (first..first + 4)
                    .map(|word| {
                        let rows = rows.get(word * 64..).unwrap_or(&[]);
                        rows.iter()
                            .take(64)
                            .enumerate()
                            .filter(|(_, code)| **code > 0 && matching >> **code & 1 == 1)
                            .fold(0u64, |bits, (i, _)| bits | 1 << i)
                    })
                    .collect();
                let before: Vec<u64> = (0..4u64)
                    .map(|i| (i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15))
                    .collect();
                for (write, op) in [
                    (Write::Set, (|_, b| b) as fn(u64, u64) -> u64),
                    (Write::And, |a, b| a & b),
                    (Write::Or, |a, b| a | b),
                ] {
                    let mut out = before.clone();
                    two_bit_words(&low, &high, first, matching, &mut out, write);
                    let want: Vec<u64> = before
                        .iter()
                        .zip(&expected)
                        .map(|(a, b)| op(*a, *b))
                        .collect();
                    assert_eq!(out, want, "{matching:04b} from word {first}, {write:?}");
                }
            }
        }
        let mut ranges = Ranges::one(1, 1);
        assert_eq!(ranges.matching(), 0b0010);
        ranges.ranges[1] = (3, 3);
        ranges.len = 2;
        assert_eq!(ranges.matching(), 0b1010);
        assert_eq!(table_matching(&[false, true, true]), 0b0110);
    }

    #[test]
    fn ranges_past_a_byte_are_compared_at_full_width() {
        let ranges = Ranges::one(200, 300);
        assert!(ranges.narrow_u8().is_none());
        let rows: Vec<u8> = (0..=255).collect();
        let mut out = vec![0u64; 4];
        fill_ranges_u8(&rows, &ranges, &mut out, Write::Set);
        assert_eq!(out, portable(&rows, &ranges)[..4]);
        assert_eq!(out.iter().map(|w| w.count_ones()).sum::<u32>(), 56);
    }
}
