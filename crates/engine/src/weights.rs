//! Weighted sums of respondent sets.
//!
//! Survey weights are usually decimals of bounded precision (`1234.56`). Such weights are
//! also stored as exact integers (`weight × 10^decimals`) in bit planes: plane `b` holds
//! bit `b` of every respondent's integer, one bit per respondent in the set layout. The
//! sum over a set is then `Σ_b 2^b · popcount(set ∧ plane_b)`: integer arithmetic,
//! exact, the same on every CPU, and it reads `bits / 64` of the weight column (about a
//! quarter for two-decimal weights) with no per-respondent work. The one rounding is the
//! final division by `10^decimals`, so the sum is the true sum of the decimals rounded
//! once to f64. Weights that are not such decimals are summed as f64 ([`Summer`]).

use crate::bitset::{ones, Summer, Tally};
use crate::eval::BLOCK_WORDS;

/// Most decimals tried; weights with more are summed as f64.
pub(crate) const MAX_DECIMALS: u32 = 9;

/// Integer sums up to this are exact in f64 (and cannot overflow a u64 accumulator).
const EXACT_LIMIT: u64 = 1 << 53;

/// `10^d` for every `d` up to [`MAX_DECIMALS`], each exact in f64.
const POWERS: [f64; MAX_DECIMALS as usize + 1] = [
    1.0,
    10.0,
    100.0,
    1_000.0,
    10_000.0,
    100_000.0,
    1_000_000.0,
    10_000_000.0,
    100_000_000.0,
    1_000_000_000.0,
];

/// Weights as bit planes, laid out block by block: block `k`'s plane `b` is the
/// [`BLOCK_WORDS`] words from `(k × bits + b) × BLOCK_WORDS`; words past the last
/// respondent are zero.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Planes {
    pub decimals: u32,
    pub bits: u32,
    pub words: Vec<u64>,
}

/// Number of words the planes of `respondents` take at `bits` bits.
pub(crate) fn plane_words(respondents: u64, bits: u32) -> Option<u64> {
    respondents
        .div_ceil(64 * BLOCK_WORDS as u64)
        .checked_mul(u64::from(bits))?
        .checked_mul(BLOCK_WORDS as u64)
}

/// The integer `weight × 10^decimals` when the weight is that decimal rounded to f64.
fn scaled(weight: f64, decimals: u32) -> Option<u64> {
    let power = POWERS[decimals as usize];
    let integer = (weight * power).round();
    // The division is correctly rounded, so equality says `weight` is the f64 nearest
    // to `integer / 10^decimals`: the decimal the source wrote.
    (integer >= 0.0 && integer < EXACT_LIMIT as f64 && integer / power == weight)
        .then_some(integer as u64)
}

/// Bit planes of `weights` when every weight is a non-negative decimal of at most
/// [`MAX_DECIMALS`] places and their scaled sum stays exact; `None` otherwise.
pub(crate) fn planes(weights: &[f64]) -> Option<Planes> {
    let mut decimals = 0;
    for weight in weights {
        while scaled(*weight, decimals).is_none() {
            decimals += 1;
            if decimals > MAX_DECIMALS {
                return None;
            }
        }
    }
    let mut integers = Vec::with_capacity(weights.len());
    let mut total = 0u64;
    for weight in weights {
        let integer = scaled(*weight, decimals)?;
        total = total.checked_add(integer).filter(|t| *t <= EXACT_LIMIT)?;
        integers.push(integer);
    }
    let (bits, words) = lay_out(integers.iter().map(|i| u128::from(*i)), integers.len())?;
    Some(Planes {
        decimals,
        bits,
        words,
    })
}

/// The planes of `count` integers, in the block layout of [`Planes`], with as many
/// planes as the largest needs.
fn lay_out(integers: impl Iterator<Item = u128> + Clone, count: usize) -> Option<(u32, Vec<u64>)> {
    let largest = integers.clone().max().unwrap_or(0);
    let bits = (u128::BITS - largest.leading_zeros()).max(1);
    let len = usize::try_from(plane_words(count as u64, bits)?).ok()?;
    let mut words = vec![0u64; len];
    let block_rows = 64 * BLOCK_WORDS;
    for (row, integer) in integers.enumerate() {
        let (block, within) = (row / block_rows, row % block_rows);
        let (word, bit) = (within / 64, within % 64);
        let mut rest = integer;
        while rest != 0 {
            let plane = rest.trailing_zeros() as usize;
            let at = (block * bits as usize + plane) * BLOCK_WORDS + word;
            words[at] |= 1 << bit;
            rest &= rest - 1;
        }
    }
    Some((bits, words))
}

/// Every respondent's squared weight, for sums of `w²` (the table's reliability
/// figures; `/v1` never needs them). Made from the weights when a table first needs
/// them and kept with the survey (counted against its memory budget), not in the file. With decimal weights the squares are exact integers
/// `(w × 10^decimals)²` (below 2^106) in bit planes, summed in `u128` and divided once
/// by `10^(2 × decimals)`; otherwise f64 squares summed in [`Summer`]'s lane order.
/// Either way the same on every platform.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Squares {
    Planes {
        decimals: u32,
        bits: u32,
        words: Vec<u64>,
    },
    Floats(Vec<f64>),
}

impl Squares {
    /// The squares of `weights`, exact when `source` sums them from planes.
    pub(crate) fn new(source: Weights<'_>, weights: &[f64]) -> Squares {
        if let Weights::Planes { decimals, .. } = source {
            let square = |w: &f64| scaled(*w, decimals).map(|i| u128::from(i) * u128::from(i));
            // Planes were made at these decimals, so every weight scales; checked anyway.
            if weights.iter().all(|w| square(w).is_some()) {
                let squares = weights.iter().map(|w| square(w).unwrap_or(0));
                if let Some((bits, words)) = lay_out(squares, weights.len()) {
                    return Squares::Planes {
                        decimals,
                        bits,
                        words,
                    };
                }
            }
        }
        Squares::Floats(weights.iter().map(|w| w * w).collect())
    }

    /// Heap bytes held.
    pub(crate) fn bytes(&self) -> usize {
        match self {
            Squares::Planes { words, .. } => std::mem::size_of_val(words.as_slice()),
            Squares::Floats(squares) => std::mem::size_of_val(squares.as_slice()),
        }
    }

    pub(crate) fn summer(&self) -> SquareSum<'_> {
        match self {
            Squares::Planes {
                decimals,
                bits,
                words,
            } => SquareSum::Planes {
                decimals: *decimals,
                bits: *bits as usize,
                words,
                sum: 0,
            },
            Squares::Floats(squares) => SquareSum::Floats {
                squares,
                summer: Summer::default(),
            },
        }
    }
}

/// Sums the squared weights of the members of blocks, as [`BlockSum`] sums weights.
#[derive(Debug)]
pub(crate) enum SquareSum<'a> {
    Planes {
        decimals: u32,
        bits: usize,
        words: &'a [u64],
        sum: u128,
    },
    Floats {
        squares: &'a [f64],
        summer: Summer,
    },
}

impl SquareSum<'_> {
    /// Adds the members of block `block` (at most [`BLOCK_WORDS`] words).
    pub(crate) fn add(&mut self, block: usize, members: &[u64]) {
        match self {
            SquareSum::Planes {
                bits, words, sum, ..
            } => {
                let start = block * *bits * BLOCK_WORDS;
                let planes = words.get(start..start + *bits * BLOCK_WORDS).unwrap_or(&[]);
                *sum += wide_plane_sum(members, planes);
            }
            SquareSum::Floats { squares, summer } => {
                let first = block * BLOCK_WORDS * 64;
                summer.add(members, squares.get(first..).unwrap_or(&[]));
            }
        }
    }

    /// The sum of the squares.
    pub(crate) fn finish(self) -> f64 {
        match self {
            // 10^(2 × decimals) ≤ 10^18 is exact in f64: the integer's rounding and the
            // division's are the only two.
            SquareSum::Planes { decimals, sum, .. } => {
                sum as f64 / (POWERS[decimals as usize] * POWERS[decimals as usize])
            }
            SquareSum::Floats { summer, .. } => summer.finish().weight,
        }
    }
}

/// Whether the planes' whole sum, `Σ_b 2^b · popcount(plane_b)` over every block, is at
/// most 2^53, as [`planes`] makes them: then no subset's sum, nor any partial sum on the
/// way, overflows a `u64`, and dividing it rounds once.
pub(crate) fn planes_fit(words: &[u64], bits: u32) -> bool {
    let mut total = 0u128;
    for block in words.chunks(bits as usize * BLOCK_WORDS) {
        for (bit, plane) in block.chunks(BLOCK_WORDS).enumerate() {
            let ones: u64 = plane.iter().map(|word| u64::from(word.count_ones())).sum();
            total += u128::from(ones) << bit;
        }
    }
    total <= 1 << 53
}

/// `Σ_b 2^b · popcount(members ∧ plane_b)` in `u128`, for planes of up to 128 bits.
fn wide_plane_sum(members: &[u64], planes: &[u64]) -> u128 {
    if members.iter().all(|word| *word == 0) {
        return 0;
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512vpopcntdq")
        && std::arch::is_x86_feature_detected!("popcnt")
    {
        // SAFETY: the CPU supports AVX-512F, VPOPCNTDQ and POPCNT, checked just above.
        #[allow(unsafe_code)]
        return unsafe { wide_plane_sum_avx512(members, planes) };
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("popcnt")
    {
        // SAFETY: the CPU supports AVX2 and POPCNT, checked just above.
        #[allow(unsafe_code)]
        return unsafe { wide_plane_sum_avx2(members, planes) };
    }
    wide_plane_sum_portable(members, planes)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vpopcntdq,popcnt")]
fn wide_plane_sum_avx512(members: &[u64], planes: &[u64]) -> u128 {
    wide_plane_sum_portable(members, planes)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,popcnt")]
fn wide_plane_sum_avx2(members: &[u64], planes: &[u64]) -> u128 {
    wide_plane_sum_portable(members, planes)
}

#[inline(always)]
fn wide_plane_sum_portable(members: &[u64], planes: &[u64]) -> u128 {
    let mut sum = 0u128;
    for (bit, plane) in planes.chunks_exact(BLOCK_WORDS).enumerate() {
        let ones: u64 = members
            .iter()
            .zip(plane)
            .map(|(m, p)| u64::from((m & p).count_ones()))
            .sum();
        sum += u128::from(ones) << bit;
    }
    sum
}

/// Where a survey's weights are summed from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Weights<'a> {
    /// Exact integers in bit planes.
    Planes {
        decimals: u32,
        bits: u32,
        words: &'a [u64],
    },
    /// f64 per respondent.
    Floats(&'a [f64]),
}

/// Sums the members of blocks, in respondent order; a block with no members may be
/// skipped.
#[derive(Debug)]
pub(crate) enum BlockSum<'a> {
    Planes {
        decimals: u32,
        bits: usize,
        words: &'a [u64],
        count: u64,
        sum: u64,
    },
    Floats {
        weights: &'a [f64],
        summer: Summer,
    },
}

impl<'a> Weights<'a> {
    pub(crate) fn summer(self) -> BlockSum<'a> {
        match self {
            Weights::Planes {
                decimals,
                bits,
                words,
            } => BlockSum::Planes {
                decimals,
                bits: bits as usize,
                words,
                count: 0,
                sum: 0,
            },
            Weights::Floats(weights) => BlockSum::Floats {
                weights,
                summer: Summer::default(),
            },
        }
    }
}

impl BlockSum<'_> {
    /// Adds the members of block `block` (at most [`BLOCK_WORDS`] words).
    pub(crate) fn add(&mut self, block: usize, members: &[u64]) {
        match self {
            BlockSum::Planes {
                bits,
                words,
                count,
                sum,
                ..
            } => {
                let start = block * *bits * BLOCK_WORDS;
                let planes = words.get(start..start + *bits * BLOCK_WORDS).unwrap_or(&[]);
                let (c, s) = plane_sums(members, planes);
                *count += c;
                *sum += s;
            }
            BlockSum::Floats { weights, summer } => {
                let first = block * BLOCK_WORDS * 64;
                summer.add(members, weights.get(first..).unwrap_or(&[]));
            }
        }
    }

    pub(crate) fn finish(self) -> Tally {
        match self {
            BlockSum::Planes {
                decimals,
                count,
                sum,
                ..
            } => Tally {
                count,
                // Exact integer (below 2^53) over an exact power of ten: one rounding.
                weight: sum as f64 / POWERS[decimals as usize],
            },
            BlockSum::Floats { summer, .. } => summer.finish(),
        }
    }
}

/// Adds block `block` of each target (the first `len` words of each of `members`) to its
/// sum. Two targets over planes share one read of the planes.
pub(crate) fn add_blocks(
    sums: &mut [BlockSum<'_>],
    block: usize,
    members: &[[u64; BLOCK_WORDS]],
    len: usize,
) {
    if let (
        [BlockSum::Planes {
            bits,
            words,
            count: c0,
            sum: s0,
            ..
        }, BlockSum::Planes {
            count: c1, sum: s1, ..
        }],
        [m0, m1],
    ) = (&mut *sums, members)
    {
        let start = block * *bits * BLOCK_WORDS;
        let planes = words.get(start..start + *bits * BLOCK_WORDS).unwrap_or(&[]);
        let [(a, b), (c, d)] = plane_sums_pair(&m0[..len], &m1[..len], planes);
        (*c0, *s0, *c1, *s1) = (*c0 + a, *s0 + b, *c1 + c, *s1 + d);
        return;
    }
    for (sum, words) in sums.iter_mut().zip(members) {
        sum.add(block, &words[..len]);
    }
}

/// [`plane_sums`] of two targets' blocks at once.
fn plane_sums_pair(first: &[u64], second: &[u64], planes: &[u64]) -> [(u64, u64); 2] {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512vpopcntdq")
        && std::arch::is_x86_feature_detected!("popcnt")
    {
        // SAFETY: the CPU supports AVX-512F, VPOPCNTDQ and POPCNT, checked just above.
        #[allow(unsafe_code)]
        return unsafe { plane_sums_pair_avx512(first, second, planes) };
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("popcnt")
    {
        // SAFETY: the CPU supports AVX2 and POPCNT, checked just above.
        #[allow(unsafe_code)]
        return unsafe { plane_sums_pair_avx2(first, second, planes) };
    }
    plane_sums_pair_tree(first, second, planes)
}

/// [`plane_sums_pair`] by [`carry_save`]'s tree.
fn plane_sums_pair_tree(first: &[u64], second: &[u64], planes: &[u64]) -> [(u64, u64); 2] {
    let len = first.len().min(second.len());
    let (first, second) = (&first[..len], &second[..len]);
    let [s0, s1] = carry_save([first, second], planes);
    [(ones(first), s0), (ones(second), s1)]
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vpopcntdq,popcnt")]
fn plane_sums_pair_avx512(first: &[u64], second: &[u64], planes: &[u64]) -> [(u64, u64); 2] {
    plane_sums_pair_portable(first, second, planes)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,popcnt")]
fn plane_sums_pair_avx2(first: &[u64], second: &[u64], planes: &[u64]) -> [(u64, u64); 2] {
    plane_sums_pair_portable(first, second, planes)
}

/// Both targets' sums reading each plane word once: compiled for AVX2 or AVX-512 the
/// compiler counts bits in vectors (nibble lookups, or VPOPCNTDQ), as fast there as
/// [`carry_save`]'s tree or faster (measured), and it is the tests' reference.
#[cfg(any(target_arch = "x86_64", test))]
#[inline(always)]
fn plane_sums_pair_portable(first: &[u64], second: &[u64], planes: &[u64]) -> [(u64, u64); 2] {
    let (mut s0, mut s1) = (0u64, 0u64);
    for (bit, plane) in planes.chunks_exact(BLOCK_WORDS).enumerate() {
        let (mut o0, mut o1) = (0u64, 0u64);
        for ((a, b), p) in first.iter().zip(second).zip(plane) {
            o0 += u64::from((a & p).count_ones());
            o1 += u64::from((b & p).count_ones());
        }
        s0 += o0 << bit;
        s1 += o1 << bit;
    }
    [(ones(first), s0), (ones(second), s1)]
}

/// Count and scaled weight sum of `members` over one block's planes.
fn plane_sums(members: &[u64], planes: &[u64]) -> (u64, u64) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512vpopcntdq")
        && std::arch::is_x86_feature_detected!("popcnt")
    {
        // SAFETY: the CPU supports AVX-512F, VPOPCNTDQ and POPCNT, checked just above.
        #[allow(unsafe_code)]
        return unsafe { plane_sums_avx512(members, planes) };
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("popcnt")
    {
        // SAFETY: the CPU supports AVX2 and POPCNT, checked just above.
        #[allow(unsafe_code)]
        return unsafe { plane_sums_avx2(members, planes) };
    }
    plane_sums_tree(members, planes)
}

/// [`plane_sums`] by [`carry_save`]'s tree.
fn plane_sums_tree(members: &[u64], planes: &[u64]) -> (u64, u64) {
    let count = ones(members);
    if count == 0 {
        return (0, 0);
    }
    let [sum] = carry_save([members], planes);
    (count, sum)
}

/// [`plane_sums_portable`] compiled for AVX2: the compiler counts bits in vectors.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,popcnt")]
fn plane_sums_avx2(members: &[u64], planes: &[u64]) -> (u64, u64) {
    plane_sums_portable(members, planes)
}

/// [`plane_sums_portable`] compiled for AVX-512: eight words counted per instruction.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vpopcntdq,popcnt")]
fn plane_sums_avx512(members: &[u64], planes: &[u64]) -> (u64, u64) {
    plane_sums_portable(members, planes)
}

/// [`plane_sums_pair_portable`] for one target.
#[cfg(any(target_arch = "x86_64", test))]
#[inline(always)]
fn plane_sums_portable(members: &[u64], planes: &[u64]) -> (u64, u64) {
    let count = ones(members);
    if count == 0 {
        return (0, 0);
    }
    let mut sum = 0u64;
    for (bit, plane) in planes.chunks_exact(BLOCK_WORDS).enumerate() {
        let ones: u64 = members
            .iter()
            .zip(plane)
            .map(|(m, p)| u64::from((m & p).count_ones()))
            .sum();
        sum += ones << bit;
    }
    (count, sum)
}

/// Vectors a plane's adder tree takes in a round before it counts bits once.
const ROUND: usize = 4;

/// What the adder tree needs of a vector of [`LANES`] words.
trait Vector: Copy + Default {
    /// The first [`LANES`] of `words` (which has at least that many).
    fn load(words: &[u64]) -> Self;
    fn and(self, other: Self) -> Self;
    fn xor(self, other: Self) -> Self;
    fn or(self, other: Self) -> Self;
    /// Bits set.
    fn count(self) -> u64;
}

/// Words a vector holds: four, which the compiler may keep in one register.
#[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
const LANES: usize = 4;
#[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
type Lanes = [u64; LANES];

#[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
impl Vector for [u64; LANES] {
    #[inline(always)]
    fn load(words: &[u64]) -> Self {
        std::array::from_fn(|i| words[i])
    }
    #[inline(always)]
    fn and(self, other: Self) -> Self {
        std::array::from_fn(|i| self[i] & other[i])
    }
    #[inline(always)]
    fn xor(self, other: Self) -> Self {
        std::array::from_fn(|i| self[i] ^ other[i])
    }
    #[inline(always)]
    fn or(self, other: Self) -> Self {
        std::array::from_fn(|i| self[i] | other[i])
    }
    #[inline(always)]
    fn count(self) -> u64 {
        ones(&self)
    }
}

/// One WebAssembly SIMD vector: the compiler does not make word arrays into them.
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
const LANES: usize = 2;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
type Lanes = Wasm;

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
#[derive(Clone, Copy)]
struct Wasm(std::arch::wasm32::v128);

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
impl Default for Wasm {
    fn default() -> Self {
        Wasm(std::arch::wasm32::u64x2_splat(0))
    }
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
impl Vector for Wasm {
    #[inline(always)]
    fn load(words: &[u64]) -> Self {
        let words = &words[..LANES];
        // SAFETY: `words` is two u64s, 16 readable bytes; v128.load takes any alignment.
        #[allow(unsafe_code)]
        unsafe {
            Wasm(std::arch::wasm32::v128_load(words.as_ptr().cast()))
        }
    }
    #[inline(always)]
    fn and(self, other: Self) -> Self {
        Wasm(std::arch::wasm32::v128_and(self.0, other.0))
    }
    #[inline(always)]
    fn xor(self, other: Self) -> Self {
        Wasm(std::arch::wasm32::v128_xor(self.0, other.0))
    }
    #[inline(always)]
    fn or(self, other: Self) -> Self {
        Wasm(std::arch::wasm32::v128_or(self.0, other.0))
    }
    #[inline(always)]
    fn count(self) -> u64 {
        use std::arch::wasm32::u64x2_extract_lane;
        u64::from(u64x2_extract_lane::<0>(self.0).count_ones())
            + u64::from(u64x2_extract_lane::<1>(self.0).count_ones())
    }
}

/// The carry-save adder: the high (carry) and low (sum) bits of `a + b + c`, lane by lane.
#[inline(always)]
fn csa<V: Vector>(a: V, b: V, c: V) -> (V, V) {
    let u = a.xor(b);
    (a.and(b).or(u.and(c)), u.xor(c))
}

/// The bit counters of one member set on one plane: `ones + 2·twos` bits not yet
/// counted, plus `fours` counted.
#[derive(Clone, Copy, Default)]
struct Counters<V> {
    ones: V,
    twos: V,
    fours: u64,
}

impl<V: Vector> Counters<V> {
    /// Adds the four vectors `input(0..4)` (Harley and Seal's adder tree, in its smallest
    /// round): three carry-save adds and one bit count, where counting each vector would
    /// take four. Larger rounds count less often, but V8 then spills their counters.
    #[inline(always)]
    fn add(&mut self, input: impl Fn(usize) -> V) {
        let (twos_a, ones) = csa(self.ones, input(0), input(1));
        let (twos_b, ones) = csa(ones, input(2), input(3));
        let (fours, twos) = csa(self.twos, twos_a, twos_b);
        *self = Counters {
            ones,
            twos,
            fours: self.fours + fours.count(),
        };
    }

    #[inline(always)]
    fn total(&self) -> u64 {
        4 * self.fours + 2 * self.twos.count() + self.ones.count()
    }
}

/// The scaled weight sum of each of the `K` member sets (what [`plane_sums_portable`]
/// sums) by carry-save adds: each round of four vectors of a plane goes through an adder
/// tree, one per set, and only its carries out of the top are counted; the words past the
/// last whole round are counted one by one. Integer sums, so every path agrees.
#[inline(always)]
fn carry_save<const K: usize>(members: [&[u64]; K], planes: &[u64]) -> [u64; K] {
    let len = members
        .iter()
        .map(|m| m.len())
        .min()
        .unwrap_or(0)
        .min(BLOCK_WORDS);
    let mut sums = [0u64; K];
    let rounds = members.map(|words| words[..len].as_chunks::<{ LANES * ROUND }>());
    for (bit, plane) in planes.chunks_exact(BLOCK_WORDS).enumerate() {
        let (plane_rounds, plane_rest) = plane[..len].as_chunks::<{ LANES * ROUND }>();
        let mut counters = [Counters::<Lanes>::default(); K];
        for (at, p) in plane_rounds.iter().enumerate() {
            // The plane's vectors are loaded once for every set.
            let p: [Lanes; ROUND] = std::array::from_fn(|v| Lanes::load(&p[v * LANES..]));
            for (counter, (sets, _)) in counters.iter_mut().zip(&rounds) {
                let m = &sets[at];
                counter.add(|v| Lanes::load(&m[v * LANES..]).and(p[v]));
            }
        }
        for ((sum, counter), (_, rest)) in sums.iter_mut().zip(&counters).zip(&rounds) {
            let rest: u64 = rest
                .iter()
                .zip(plane_rest)
                .map(|(m, p)| u64::from((m & p).count_ones()))
                .sum();
            *sum += (counter.total() + rest) << bit;
        }
    }
    sums
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weights(n: usize) -> Vec<f64> {
        (0..n)
            .map(|i| (((i * 7919 % 100_003) as f64 * 1.37).round() + 1.0) / 100.0)
            .collect()
    }

    #[test]
    fn decimals_become_exact_integers() {
        let made = planes(&[1.5, 2.25, 0.0, 1000.0]).unwrap();
        assert_eq!(made.decimals, 2);
        assert_eq!(made.bits, 17); // 100000 < 2^17
        assert!(planes(&[0.1 + 0.2]).is_none(), "not a short decimal");
        assert!(planes(&[f64::MAX]).is_none(), "too large to be exact");
        assert_eq!(planes(&[3.0, 4.0]).unwrap().decimals, 0);
    }

    #[test]
    fn plane_sums_are_the_exact_decimal_sums_on_every_path() {
        let weights = weights(3 * 64 * BLOCK_WORDS + 100);
        let made = planes(&weights).unwrap();
        let n = weights.len();
        let mut members = vec![0u64; n.div_ceil(64)];
        let mut exact = 0u64;
        let mut count = 0;
        for row in (0..n).filter(|r| r % 3 == 0 || r % 7 == 1) {
            members[row / 64] |= 1 << (row % 64);
            exact += (weights[row] * 100.0).round() as u64;
            count += 1;
        }
        let source = Weights::Planes {
            decimals: made.decimals,
            bits: made.bits,
            words: &made.words,
        };
        let mut sum = source.summer();
        for (block, words) in members.chunks(BLOCK_WORDS).enumerate() {
            sum.add(block, words);
        }
        let tally = sum.finish();
        assert_eq!(tally.count, count);
        assert_eq!(tally.weight, exact as f64 / 100.0);
        let bits = made.bits as usize;
        for (block, words) in members.chunks(BLOCK_WORDS).enumerate() {
            let slice = &made.words[block * bits * BLOCK_WORDS..][..bits * BLOCK_WORDS];
            assert_eq!(
                plane_sums(words, slice),
                plane_sums_portable(words, slice),
                "block {block}"
            );
        }
    }

    #[test]
    fn the_adder_tree_counts_what_counting_each_word_counts() {
        let weights = weights(64 * BLOCK_WORDS);
        let made = planes(&weights).unwrap();
        let first: Vec<u64> = (0..BLOCK_WORDS as u64)
            .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
            .collect();
        let second: Vec<u64> = first.iter().map(|w| !w.rotate_left(7)).collect();
        let full = vec![u64::MAX; BLOCK_WORDS];
        // Every member in every plane, so every counter of the tree carries.
        let dense = vec![u64::MAX; made.words.len()];
        // Whole rounds, a rest past them, a rest alone, and nothing.
        for len in [BLOCK_WORDS, 200, LANES * ROUND, LANES * ROUND + 3, 5, 0] {
            let (a, b) = (&first[..len], &second[..len]);
            let reference = plane_sums_pair_portable(a, b, &made.words);
            assert_eq!(plane_sums_pair_tree(a, b, &made.words), reference, "{len}");
            assert_eq!(plane_sums_pair(a, b, &made.words), reference, "{len}");
            assert_eq!(plane_sums_tree(a, &made.words), reference[0], "{len}");
            assert_eq!(plane_sums_tree(b, &made.words), reference[1], "{len}");
            let all = &full[..len];
            let reference = plane_sums_portable(all, &dense);
            assert_eq!(plane_sums_tree(all, &dense), reference, "{len}");
            assert_eq!(plane_sums_pair_tree(all, a, &dense)[0], reference, "{len}");
        }
    }
}
