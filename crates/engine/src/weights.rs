//! Weighted sums of respondent sets.
//!
//! Survey weights are usually decimals of bounded precision (`1234.56`). Such weights are
//! also stored as exact integers (`weight × 10^decimals`) in bit planes: plane `b` holds
//! bit `b` of every respondent's integer, one bit per respondent in the set layout. The
//! sum over a set is then `Σ_b 2^b · popcount(set ∧ plane_b)`: integer arithmetic,
//! exact, the same on every CPU, and it reads `bits / 64` of the weight column (about a
//! quarter for two-decimal weights) with no per-respondent work. The one rounding is the
//! final division by `10^decimals`, so the sum is the true sum of the decimals rounded
//! once to f64. Weights that are not such decimals become exact binary integers
//! (`weight × 2^-e`, [`BinaryPlanes`]) in the same layout, made in memory on first use,
//! and are summed the same way, rounded once too. Weights spread over more binary
//! exponents than 127 bits hold (or negative ones) are summed term by term, exactly
//! ([`ExactSum`]), and rounded once as well.

use crate::bitset::{ones, Bitset, Tally};
use crate::eval::BLOCK_WORDS;
use crate::exact::{power_of_two, ExactSum};

/// Most decimals tried; weights with more become binary planes, or are summed member by
/// member ([`ExactSum`]).
pub(crate) const MAX_DECIMALS: u32 = 9;

/// Integer sums up to this are exact in f64 (and cannot overflow a u64 accumulator).
const EXACT_LIMIT: u64 = 1 << 53;

/// The most a survey's weights may add up to: every figure made from its sums (squared
/// sums, their products, variances times the sample size) then stays a finite number.
pub(crate) const MAX_WEIGHT_TOTAL: f64 = 1e100;

/// Why a column of weights can't be a survey's.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub(crate) enum BadWeights {
    /// The 0-based respondent whose weight is negative, NaN or infinite.
    #[error("respondent {0}'s weight is not a finite number of 0 or more")]
    Weight(usize),
    /// Each weight is finite, but together they are too large for figures made from them.
    #[error(
        "the weights add up to {0:e}, past the most a survey's may ({MAX_WEIGHT_TOTAL:e}): \
         rescale them"
    )]
    Total(f64),
}

/// Checks that every weight is a finite number of 0 or more and that all of them add up
/// to no more than [`MAX_WEIGHT_TOTAL`].
pub(crate) fn check(weights: &[f64]) -> Result<(), BadWeights> {
    if let Some(row) = weights.iter().position(|w| !(w.is_finite() && *w >= 0.0)) {
        return Err(BadWeights::Weight(row));
    }
    // Rounding can't carry a total of non-negative terms across the bound by anything
    // that matters at 1e100.
    let total: f64 = weights.iter().sum();
    if total > MAX_WEIGHT_TOTAL {
        return Err(BadWeights::Total(total));
    }
    Ok(())
}

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

/// Weights as the integers `weight × 10^decimals` in bit planes ([`Laid`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Planes {
    pub decimals: u32,
    pub laid: Laid,
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
    // to `integer / 10^decimals`: a decimal of that many places the source could have
    // written (the one it wrote while `integer` is below 2^52, where neighbouring
    // decimals' doubles differ).
    (integer >= 0.0 && integer < EXACT_LIMIT as f64 && integer / power == weight)
        .then_some(integer as u64)
}

/// How short decimals scale to exact integers: `weight × 10^decimals`, the largest
/// taking `bits` bits. Found from the weights alone (one pass, plus the weights before
/// the last one to need more decimals a second time), before any planes are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DecimalScale {
    pub decimals: u32,
    pub bits: u32,
}

impl DecimalScale {
    /// The scale of `weights` when every weight is a non-negative decimal of at most
    /// [`MAX_DECIMALS`] places and their scaled sum stays exact; `None` otherwise.
    pub(crate) fn of(weights: &[f64]) -> Option<DecimalScale> {
        // One pass; when a weight needs more decimals, those before it are counted again
        // at the new scale once the pass is over.
        let (mut decimals, mut total, mut largest, mut again) = (0, 0u64, 0u64, 0);
        for (at, weight) in weights.iter().enumerate() {
            let integer = loop {
                if let Some(integer) = scaled(*weight, decimals) {
                    break integer;
                }
                decimals += 1;
                if decimals > MAX_DECIMALS {
                    return None;
                }
                (total, largest, again) = (0, 0, at);
            };
            total = total.checked_add(integer).filter(|t| *t <= EXACT_LIMIT)?;
            largest = largest.max(integer);
        }
        for weight in &weights[..again] {
            let integer = scaled(*weight, decimals)?;
            total = total.checked_add(integer).filter(|t| *t <= EXACT_LIMIT)?;
            largest = largest.max(integer);
        }
        Some(DecimalScale {
            decimals,
            bits: significant_bits(u128::from(largest)),
        })
    }

    /// The planes of `weights` (those this scale was found for); `None` for a weight
    /// that is not such a decimal or needs more bits.
    pub(crate) fn lay_out(self, weights: &[f64]) -> Option<Planes> {
        let integers = weights
            .iter()
            .map(|weight| scaled(*weight, self.decimals).map(u128::from));
        Some(Planes {
            decimals: self.decimals,
            laid: lay_out_at(self.bits, integers, weights.len())?,
        })
    }
}

/// Bit planes of `weights` when every weight is a non-negative decimal of at most
/// [`MAX_DECIMALS`] places and their scaled sum stays exact; `None` otherwise.
pub(crate) fn planes(weights: &[f64]) -> Option<Planes> {
    DecimalScale::of(weights)?.lay_out(weights)
}

/// Weights that are not short decimals as exact binary integers: every finite f64 is an
/// integer times a power of two, so `weight × 2^-exponent` is an integer for every weight
/// once `exponent` is the lowest bit any weight has. Made in memory from the weights when
/// a survey's sums first need them (the file is not changed), in the layout of
/// [`Laid`]; summed in `u128` and scaled by `2^exponent` (exact), so the one rounding
/// is the integer's to f64.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BinaryPlanes {
    pub exponent: i32,
    pub laid: Laid,
}

/// Planes made in memory from a survey's f64 weights, when its file holds none: decimal
/// planes when the weights are short decimals (as the file would have held them), else
/// binary ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MadePlanes {
    Decimal(Planes),
    Binary(BinaryPlanes),
}

impl MadePlanes {
    /// The planes of `weights`, if any kind fits them.
    pub(crate) fn of(weights: &[f64]) -> Option<MadePlanes> {
        planes(weights)
            .map(MadePlanes::Decimal)
            .or_else(|| binary_planes(weights).map(MadePlanes::Binary))
    }

    /// Heap bytes held.
    pub(crate) fn bytes(&self) -> usize {
        match self {
            MadePlanes::Decimal(planes) => planes.laid.bytes(),
            MadePlanes::Binary(planes) => planes.laid.bytes(),
        }
    }

    pub(crate) fn source(&self) -> Weights<'_> {
        match self {
            MadePlanes::Decimal(planes) => Weights::Planes {
                decimals: planes.decimals,
                planes: planes.laid.view(),
            },
            MadePlanes::Binary(planes) => Weights::Binary {
                exponent: planes.exponent,
                planes: planes.laid.view(),
            },
        }
    }
}

/// Whether the compiled file holds weight planes of `plane_bytes` beside `rest_bytes` of
/// everything else: only when they add at most a tenth to it. Planes are laid out in
/// whole blocks, so a survey just past a whole number of blocks (its last block mostly
/// padding), or one with few variables beside its weights, would grow by more; its
/// planes are made in memory on first use instead (about 1 ms per 50,000 respondents),
/// exact all the same.
pub(crate) fn planes_belong_in_file(plane_bytes: u64, rest_bytes: u64) -> bool {
    plane_bytes.saturating_mul(10) <= rest_bytes
}

/// `weight` as `(m, e)` with `weight = m × 2^e` and `m` odd (`(0, 0)` for zero); `None`
/// for a negative or non-finite weight.
fn binary_parts(weight: f64) -> Option<(u64, i32)> {
    if !weight.is_finite() || weight.is_sign_negative() && weight != 0.0 {
        return None;
    }
    let bits = weight.to_bits();
    let field = ((bits >> 52) & 0x7ff) as i32;
    let fraction = bits & ((1 << 52) - 1);
    let (mantissa, exponent) = match field {
        0 => (fraction, -1074),
        _ => (fraction | 1 << 52, field - 1075),
    };
    if mantissa == 0 {
        return Some((0, 0));
    }
    let zeros = mantissa.trailing_zeros();
    Some((mantissa >> zeros, exponent + zeros as i32))
}

/// The binary planes of `weights` when every weight is finite and non-negative and their
/// integers, and their whole sum, stay below 2^127 (the weights' binary exponents spread
/// over at most some 70 bits, for millions of respondents); `None` otherwise.
pub(crate) fn binary_planes(weights: &[f64]) -> Option<BinaryPlanes> {
    let mut lowest = i32::MAX;
    for weight in weights {
        let (mantissa, exponent) = binary_parts(*weight)?;
        if mantissa != 0 {
            lowest = lowest.min(exponent);
        }
    }
    // Zero weights only: any exponent will do. Below -1022 the scale is not a normal f64.
    let exponent = if lowest == i32::MAX { 0 } else { lowest };
    if exponent < -1022 {
        return None;
    }
    let integer = move |weight: &f64| -> Option<u128> {
        let (mantissa, own) = binary_parts(*weight)?;
        if mantissa == 0 {
            // Zero at any exponent (its own, 0, may lie below the lowest).
            return Some(0);
        }
        let shift = u32::try_from(own - exponent).ok()?;
        let width = u64::BITS - mantissa.leading_zeros();
        (width + shift < 127).then(|| u128::from(mantissa) << shift)
    };
    let mut total = 0u128;
    for weight in weights {
        total = total
            .checked_add(integer(weight)?)
            .filter(|total| *total < 1 << 127)?;
    }
    let integers = weights.iter().map(move |w| integer(w).unwrap_or(0));
    let laid = lay_out(integers, weights.len())?;
    Some(BinaryPlanes { exponent, laid })
}

/// The true sum of `values` rounded once to f64 (ties to even), whatever their order
/// and exponents: Shewchuk's exact partial sums, rounded as CPython's `math.fsum` does.
/// The reference the engine's sums are checked against; slow (a few ns a value).
pub fn exact_sum(values: impl IntoIterator<Item = f64>) -> f64 {
    let mut partials: Vec<f64> = Vec::new();
    for value in values {
        let mut x = value;
        let mut kept = 0;
        for j in 0..partials.len() {
            let mut y = partials[j];
            if x.abs() < y.abs() {
                std::mem::swap(&mut x, &mut y);
            }
            let hi = x + y;
            let lo = y - (hi - x);
            if lo != 0.0 {
                partials[kept] = lo;
                kept += 1;
            }
            x = hi;
        }
        partials.truncate(kept);
        partials.push(x);
    }
    let Some(mut n) = partials.len().checked_sub(1) else {
        return 0.0;
    };
    let (mut hi, mut lo) = (partials[n], 0.0);
    while n > 0 {
        let x = hi;
        n -= 1;
        let y = partials[n];
        hi = x + y;
        lo = y - (hi - x);
        if lo != 0.0 {
            break;
        }
    }
    if n > 0 && (lo < 0.0 && partials[n - 1] < 0.0 || lo > 0.0 && partials[n - 1] > 0.0) {
        let y = lo * 2.0;
        let x = hi + y;
        if y == x - hi {
            hi = x;
        }
    }
    hi
}

/// Integers in bit planes, block by block: block `k`'s plane `b` is the `stride` words
/// from `(k × bits + b) × stride`, bit `r` of a block's plane holding the `r`th
/// respondent of the block; words past the last respondent are zero. `stride` is
/// [`BLOCK_WORDS`], or the words of one survey smaller than a block (no padding).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Laid {
    pub bits: u32,
    pub stride: usize,
    pub words: Vec<u64>,
}

impl Laid {
    pub(crate) fn view(&self) -> PlaneView<'_> {
        PlaneView {
            bits: self.bits as usize,
            stride: self.stride,
            words: &self.words,
        }
    }

    /// Heap bytes held.
    pub(crate) fn bytes(&self) -> usize {
        std::mem::size_of_val(self.words.as_slice())
    }
}

/// Planes an integer up to `largest` needs (one at least).
fn significant_bits(largest: u128) -> u32 {
    (u128::BITS - largest.leading_zeros()).max(1)
}

/// Words a plane of `count` respondents takes in a block: [`BLOCK_WORDS`], or fewer for
/// a survey smaller than a block.
pub(crate) fn plane_stride(count: usize) -> usize {
    count.div_ceil(64).clamp(1, BLOCK_WORDS)
}

/// The planes of `count` integers, in the layout of [`Laid`], with as many planes as the
/// largest needs.
fn lay_out(integers: impl Iterator<Item = u128> + Clone, count: usize) -> Option<Laid> {
    let bits = significant_bits(integers.clone().max().unwrap_or(0));
    lay_out_at(bits, integers.map(Some), count)
}

/// [`lay_out`] in `bits` planes; `None` if an integer is missing or needs more.
fn lay_out_at(
    bits: u32,
    integers: impl Iterator<Item = Option<u128>>,
    count: usize,
) -> Option<Laid> {
    let stride = plane_stride(count);
    let blocks = count.div_ceil(64 * BLOCK_WORDS).max(1);
    let len = blocks.checked_mul(bits as usize)?.checked_mul(stride)?;
    let mut words = vec![0u64; len];
    let block_rows = 64 * BLOCK_WORDS;
    for (row, integer) in integers.enumerate() {
        let (block, within) = (row / block_rows, row % block_rows);
        let (word, bit) = (within / 64, within % 64);
        let mut rest = integer.filter(|i| significant_bits(*i) <= bits)?;
        while rest != 0 {
            let plane = rest.trailing_zeros() as usize;
            let at = (block * bits as usize + plane) * stride + word;
            words[at] |= 1 << bit;
            rest &= rest - 1;
        }
    }
    Some(Laid {
        bits,
        stride,
        words,
    })
}

/// How a survey's squared weights are summed, for sums of `w²` (the table's reliability
/// figures; `/v1` never needs them). With decimal weights the squares are exact integers
/// `(w × 10^decimals)²` (below 2^106) in bit planes, made from the weights when a table
/// first needs them and kept with the survey (counted against its memory budget), summed
/// in `u128` and divided once by `10^(2 × decimals)`; otherwise each member's exact square
/// is summed from the weights themselves ([`ExactSum`]), nothing kept. Either way the true
/// sum of the squares rounded once, the same on every platform.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Squares {
    Planes { decimals: u32, laid: Laid },
    Column,
}

impl Squares {
    /// The squares of `weights`, in planes when `source` sums them from decimal planes.
    pub(crate) fn new(source: Weights<'_>, weights: &[f64]) -> Squares {
        if let Weights::Planes { decimals, .. } = source {
            let square = |w: &f64| scaled(*w, decimals).map(|i| u128::from(i) * u128::from(i));
            // Planes were made at these decimals, so every weight scales; checked anyway.
            if weights.iter().all(|w| square(w).is_some()) {
                let squares = weights.iter().map(|w| square(w).unwrap_or(0));
                if let Some(laid) = lay_out(squares, weights.len()) {
                    return Squares::Planes { decimals, laid };
                }
            }
        }
        Squares::Column
    }

    /// Heap bytes held.
    pub(crate) fn bytes(&self) -> usize {
        match self {
            Squares::Planes { laid, .. } => laid.bytes(),
            Squares::Column => 0,
        }
    }

    /// A sum of squares of members, `weights` being the survey's (the squares' source).
    pub(crate) fn summer<'a>(&'a self, weights: &'a [f64]) -> SquareSum<'a> {
        match self {
            Squares::Planes { decimals, laid } => SquareSum::Planes {
                decimals: *decimals,
                planes: laid.view(),
                sum: 0,
            },
            Squares::Column => SquareSum::Column {
                weights,
                sum: ExactSum::squares(),
            },
        }
    }
}

/// Sums the squared weights of the members of blocks, as [`BlockSum`] sums weights.
#[derive(Debug)]
pub(crate) enum SquareSum<'a> {
    Planes {
        decimals: u32,
        planes: PlaneView<'a>,
        sum: u128,
    },
    Column {
        weights: &'a [f64],
        sum: ExactSum,
    },
}

impl SquareSum<'_> {
    /// Adds the members of block `block` (at most [`BLOCK_WORDS`] words).
    pub(crate) fn add(&mut self, block: usize, members: &[u64]) {
        match self {
            SquareSum::Planes { planes, sum, .. } => {
                *sum += wide_plane_sum(members, planes.block(block), planes.stride);
            }
            SquareSum::Column { weights, sum } => {
                let first = block * BLOCK_WORDS * 64;
                sum.add_members(members, weights.get(first..).unwrap_or(&[]));
            }
        }
    }

    /// The sum of the squares.
    pub(crate) fn finish(self) -> f64 {
        match self {
            SquareSum::Planes { decimals, sum, .. } => rounded_ratio(sum, 10u64.pow(2 * decimals)),
            SquareSum::Column { sum, .. } => sum.finish(),
        }
    }
}

/// `numerator / denominator` rounded once to the nearest f64 (ties to even), however
/// many bits the numerator has: the quotient is taken by long division until it holds 55
/// bits or more, the remainder folded into its lowest bit, and converted once.
fn rounded_ratio(numerator: u128, denominator: u64) -> f64 {
    if denominator == 0 {
        return f64::NAN;
    }
    let denominator = u128::from(denominator);
    let (mut quotient, mut remainder) = (numerator / denominator, numerator % denominator);
    if quotient == 0 && remainder == 0 {
        return 0.0;
    }
    // Each step doubles the quotient and brings one more bit of it down (the remainder
    // stays below the denominator, so doubling it cannot overflow).
    let mut shift = 0u64;
    while quotient < 1 << 54 {
        remainder <<= 1;
        quotient <<= 1;
        if remainder >= denominator {
            remainder -= denominator;
            quotient |= 1;
        }
        shift += 1;
    }
    // With 55 bits or more, the lowest is below the rounding bit: setting it when
    // anything is left over decides a tie as the true quotient would, and nothing else.
    let sticky = quotient | u128::from(remainder != 0);
    // 2^-shift (at most 2^-114), a normal f64: the product is exact.
    sticky as f64 * f64::from_bits((1023 - shift) << 52)
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
fn wide_plane_sum(members: &[u64], planes: &[u64], stride: usize) -> u128 {
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
        return unsafe { wide_plane_sum_avx512(members, planes, stride) };
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("popcnt")
    {
        // SAFETY: the CPU supports AVX2 and POPCNT, checked just above.
        #[allow(unsafe_code)]
        return unsafe { wide_plane_sum_avx2(members, planes, stride) };
    }
    wide_plane_sum_portable(members, planes, stride)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vpopcntdq,popcnt")]
fn wide_plane_sum_avx512(members: &[u64], planes: &[u64], stride: usize) -> u128 {
    wide_plane_sum_portable(members, planes, stride)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,popcnt")]
fn wide_plane_sum_avx2(members: &[u64], planes: &[u64], stride: usize) -> u128 {
    wide_plane_sum_portable(members, planes, stride)
}

#[inline(always)]
fn wide_plane_sum_portable(members: &[u64], planes: &[u64], stride: usize) -> u128 {
    let mut sum = 0u128;
    for (bit, plane) in planes.chunks_exact(stride).enumerate() {
        let ones: u64 = members
            .iter()
            .zip(plane)
            .map(|(m, p)| u64::from((m & p).count_ones()))
            .sum();
        sum += u128::from(ones) << bit;
    }
    sum
}

/// Integers in bit planes, borrowed: `bits` planes a block, each `stride` words (a whole
/// block's [`BLOCK_WORDS`], or fewer for planes of a survey smaller than a block).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PlaneView<'a> {
    pub bits: usize,
    pub stride: usize,
    pub words: &'a [u64],
}

impl<'a> PlaneView<'a> {
    /// Block `block`'s planes (empty past the last).
    fn block(&self, block: usize) -> &'a [u64] {
        let len = self.bits * self.stride;
        self.words
            .get(block * len..(block + 1) * len)
            .unwrap_or(&[])
    }
}

/// Where a survey's weights are summed from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Weights<'a> {
    /// Exact integers `weight × 10^decimals` in bit planes.
    Planes {
        decimals: u32,
        planes: PlaneView<'a>,
    },
    /// Exact binary integers `weight × 2^-exponent` in bit planes ([`BinaryPlanes`]).
    Binary {
        exponent: i32,
        planes: PlaneView<'a>,
    },
    /// The f64 weight of each respondent, each member's added exactly ([`ExactSum`]).
    Column(&'a [f64]),
}

/// Sums the members of blocks, in respondent order; a block with no members may be
/// skipped.
#[derive(Debug)]
pub(crate) enum BlockSum<'a> {
    Planes {
        decimals: u32,
        planes: PlaneView<'a>,
        count: u64,
        sum: u64,
    },
    Binary {
        exponent: i32,
        planes: PlaneView<'a>,
        count: u64,
        sum: u128,
    },
    Column {
        weights: &'a [f64],
        count: u64,
        sum: ExactSum,
    },
}

impl<'a> Weights<'a> {
    pub(crate) fn summer(self) -> BlockSum<'a> {
        match self {
            Weights::Planes { decimals, planes } => BlockSum::Planes {
                decimals,
                planes,
                count: 0,
                sum: 0,
            },
            Weights::Binary { exponent, planes } => BlockSum::Binary {
                exponent,
                planes,
                count: 0,
                sum: 0,
            },
            Weights::Column(weights) => BlockSum::Column {
                weights,
                count: 0,
                sum: ExactSum::terms(),
            },
        }
    }
}

impl BlockSum<'_> {
    /// Adds the members of block `block` (at most [`BLOCK_WORDS`] words).
    pub(crate) fn add(&mut self, block: usize, members: &[u64]) {
        match self {
            BlockSum::Planes {
                planes, count, sum, ..
            } => {
                let (c, s) = plane_sums(members, planes.block(block), planes.stride);
                *count += c;
                *sum += s;
            }
            BlockSum::Binary {
                planes, count, sum, ..
            } => {
                *count += ones(members);
                // The whole sum is below 2^127, so no subset's overflows.
                *sum += wide_plane_sum(members, planes.block(block), planes.stride);
            }
            BlockSum::Column {
                weights,
                count,
                sum,
            } => {
                let first = block * BLOCK_WORDS * 64;
                *count += sum.add_members(members, weights.get(first..).unwrap_or(&[]));
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
            BlockSum::Binary {
                exponent,
                count,
                sum,
                ..
            } => Tally {
                count,
                // The integer rounded once; scaling by a power of two rounds nothing (a
                // sum of at least one weight is at least 2^exponent, a normal f64).
                weight: sum as f64 * power_of_two(exponent),
            },
            BlockSum::Column { count, sum, .. } => Tally {
                count,
                weight: sum.finish(),
            },
        }
    }
}

/// The sum of all `respondents`' weights, by the summer any set's sum goes through.
pub(crate) fn total(source: Weights<'_>, respondents: usize) -> f64 {
    let mut sum = source.summer();
    let everyone = Bitset::full(respondents);
    for (block, members) in everyone.words().chunks(BLOCK_WORDS).enumerate() {
        sum.add(block, members);
    }
    sum.finish().weight
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
            planes,
            count: c0,
            sum: s0,
            ..
        }, BlockSum::Planes {
            count: c1, sum: s1, ..
        }],
        [m0, m1],
    ) = (&mut *sums, members)
    {
        let [(a, b), (c, d)] =
            plane_sums_pair(&m0[..len], &m1[..len], planes.block(block), planes.stride);
        (*c0, *s0, *c1, *s1) = (*c0 + a, *s0 + b, *c1 + c, *s1 + d);
        return;
    }
    for (sum, words) in sums.iter_mut().zip(members) {
        sum.add(block, &words[..len]);
    }
}

/// [`plane_sums`] of two targets' blocks at once.
fn plane_sums_pair(
    first: &[u64],
    second: &[u64],
    planes: &[u64],
    stride: usize,
) -> [(u64, u64); 2] {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512vpopcntdq")
        && std::arch::is_x86_feature_detected!("popcnt")
    {
        // SAFETY: the CPU supports AVX-512F, VPOPCNTDQ and POPCNT, checked just above.
        #[allow(unsafe_code)]
        return unsafe { plane_sums_pair_avx512(first, second, planes, stride) };
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("popcnt")
    {
        // SAFETY: the CPU supports AVX2 and POPCNT, checked just above.
        #[allow(unsafe_code)]
        return unsafe { plane_sums_pair_avx2(first, second, planes, stride) };
    }
    plane_sums_pair_tree(first, second, planes, stride)
}

/// [`plane_sums_pair`] by [`carry_save`]'s tree.
fn plane_sums_pair_tree(
    first: &[u64],
    second: &[u64],
    planes: &[u64],
    stride: usize,
) -> [(u64, u64); 2] {
    let len = first.len().min(second.len());
    let (first, second) = (&first[..len], &second[..len]);
    let [s0, s1] = carry_save([first, second], planes, stride);
    [(ones(first), s0), (ones(second), s1)]
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vpopcntdq,popcnt")]
fn plane_sums_pair_avx512(
    first: &[u64],
    second: &[u64],
    planes: &[u64],
    stride: usize,
) -> [(u64, u64); 2] {
    plane_sums_pair_portable(first, second, planes, stride)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,popcnt")]
fn plane_sums_pair_avx2(
    first: &[u64],
    second: &[u64],
    planes: &[u64],
    stride: usize,
) -> [(u64, u64); 2] {
    plane_sums_pair_portable(first, second, planes, stride)
}

/// Both targets' sums reading each plane word once: compiled for AVX2 or AVX-512 the
/// compiler counts bits in vectors (nibble lookups, or VPOPCNTDQ), as fast there as
/// [`carry_save`]'s tree or faster (measured), and it is the tests' reference.
#[cfg(any(target_arch = "x86_64", test))]
#[inline(always)]
fn plane_sums_pair_portable(
    first: &[u64],
    second: &[u64],
    planes: &[u64],
    stride: usize,
) -> [(u64, u64); 2] {
    let (mut s0, mut s1) = (0u64, 0u64);
    for (bit, plane) in planes.chunks_exact(stride).enumerate() {
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
fn plane_sums(members: &[u64], planes: &[u64], stride: usize) -> (u64, u64) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512vpopcntdq")
        && std::arch::is_x86_feature_detected!("popcnt")
    {
        // SAFETY: the CPU supports AVX-512F, VPOPCNTDQ and POPCNT, checked just above.
        #[allow(unsafe_code)]
        return unsafe { plane_sums_avx512(members, planes, stride) };
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("popcnt")
    {
        // SAFETY: the CPU supports AVX2 and POPCNT, checked just above.
        #[allow(unsafe_code)]
        return unsafe { plane_sums_avx2(members, planes, stride) };
    }
    plane_sums_tree(members, planes, stride)
}

/// [`plane_sums`] by [`carry_save`]'s tree.
fn plane_sums_tree(members: &[u64], planes: &[u64], stride: usize) -> (u64, u64) {
    let count = ones(members);
    if count == 0 {
        return (0, 0);
    }
    let [sum] = carry_save([members], planes, stride);
    (count, sum)
}

/// [`plane_sums_portable`] compiled for AVX2: the compiler counts bits in vectors.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,popcnt")]
fn plane_sums_avx2(members: &[u64], planes: &[u64], stride: usize) -> (u64, u64) {
    plane_sums_portable(members, planes, stride)
}

/// [`plane_sums_portable`] compiled for AVX-512: eight words counted per instruction.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vpopcntdq,popcnt")]
fn plane_sums_avx512(members: &[u64], planes: &[u64], stride: usize) -> (u64, u64) {
    plane_sums_portable(members, planes, stride)
}

/// [`plane_sums_pair_portable`] for one target.
#[cfg(any(target_arch = "x86_64", test))]
#[inline(always)]
fn plane_sums_portable(members: &[u64], planes: &[u64], stride: usize) -> (u64, u64) {
    let count = ones(members);
    if count == 0 {
        return (0, 0);
    }
    let mut sum = 0u64;
    for (bit, plane) in planes.chunks_exact(stride).enumerate() {
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
fn carry_save<const K: usize>(members: [&[u64]; K], planes: &[u64], stride: usize) -> [u64; K] {
    let len = members
        .iter()
        .map(|m| m.len())
        .min()
        .unwrap_or(0)
        .min(stride);
    let mut sums = [0u64; K];
    let rounds = members.map(|words| words[..len].as_chunks::<{ LANES * ROUND }>());
    for (bit, plane) in planes.chunks_exact(stride).enumerate() {
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

    /// The quotient as a decimal string parsed: Rust's parser rounds once, correctly.
    fn parsed_ratio(numerator: u128, decimals: u32) -> f64 {
        let digits = format!("{numerator:0>width$}", width = decimals as usize + 1);
        let (whole, fraction) = digits.split_at(digits.len() - decimals as usize);
        format!("{whole}.{fraction}0").parse().unwrap_or(f64::NAN)
    }

    #[test]
    fn ratios_are_rounded_once() {
        // Quotients just off and on the midpoint between two neighbouring f64s, where a
        // numerator rounded to f64 first, then divided, lands on the wrong side.
        let mut cases = vec![(0u128, 4u32), (1, 18), (u128::MAX, 18), (u128::MAX, 0)];
        for decimals in [0, 2, 4, 9, 18] {
            let power = 10u128.pow(decimals);
            // f64s of 53 to 80 bits: a mantissa shifted; the midpoint is half a step up.
            for exponent in [0u32, 1, 7, 20, 27] {
                for mantissa in [
                    1u128 << 52,
                    (1 << 53) - 1,
                    0x1a_2b3c_4d5e_6f71,
                    0x15_5555_5555_5555,
                ] {
                    let midpoint = (2 * mantissa + 1) << exponent;
                    for offset in [-1i128, 0, 1] {
                        // The midpoint times the power, give or take one.
                        let numerator = midpoint
                            .checked_mul(power)
                            .and_then(|n| n.checked_add_signed(offset));
                        cases.extend(numerator.map(|n| (n, decimals)));
                    }
                }
            }
        }
        // Midpoints below 2^53, a fraction of a unit apart: 10^18 has 2^18 as a factor.
        for fraction_bits in [1u32, 9, 18] {
            for mantissa in [1u128 << 52, 0x1a_2b3c_4d5e_6f71] {
                let midpoint = ((2 * mantissa + 1) * 10u128.pow(18)) >> fraction_bits;
                for offset in [-1i128, 0, 1] {
                    cases.extend(midpoint.checked_add_signed(offset).map(|n| (n, 18)));
                }
            }
        }
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..2_000 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            let bits = state >> 57;
            let numerator = (u128::from(state) << 64 | u128::from(state.rotate_left(17))) >> bits;
            cases.push((numerator, (state % 19) as u32));
        }
        for (numerator, decimals) in cases {
            assert_eq!(
                rounded_ratio(numerator, 10u64.pow(decimals)).to_bits(),
                parsed_ratio(numerator, decimals).to_bits(),
                "{numerator} / 10^{decimals}"
            );
        }
    }

    fn weights(n: usize) -> Vec<f64> {
        (0..n)
            .map(|i| (((i * 7919 % 100_003) as f64 * 1.37).round() + 1.0) / 100.0)
            .collect()
    }

    #[test]
    fn decimals_become_exact_integers() {
        let made = planes(&[1.5, 2.25, 0.0, 1000.0]).unwrap();
        assert_eq!(made.decimals, 2);
        assert_eq!(made.laid.bits, 17); // 100000 < 2^17
        assert!(planes(&[0.1 + 0.2]).is_none(), "not a short decimal");
        assert!(planes(&[f64::MAX]).is_none(), "too large to be exact");
        assert_eq!(planes(&[3.0, 4.0]).unwrap().decimals, 0);
    }

    /// The scale by its definition, in two passes: the fewest decimals every weight has,
    /// then the total and the largest integer at that scale.
    fn two_pass_scale(weights: &[f64]) -> Option<(u32, u32)> {
        let decimals =
            (0..=MAX_DECIMALS).find(|d| weights.iter().all(|w| scaled(*w, *d).is_some()))?;
        let integers: Vec<u64> = weights
            .iter()
            .map(|w| scaled(*w, decimals))
            .collect::<Option<_>>()?;
        let total: u128 = integers.iter().map(|i| u128::from(*i)).sum();
        let largest = integers.iter().copied().max().unwrap_or(0);
        (total <= u128::from(EXACT_LIMIT))
            .then(|| (decimals, significant_bits(u128::from(largest))))
    }

    #[test]
    fn a_scale_in_one_pass_is_the_scale_by_its_definition() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let (mut found, mut none) = (0, 0);
        for case in 0..400 {
            let len = 1 + (next() % 40) as usize;
            let weights: Vec<f64> = (0..len)
                .map(|_| {
                    // Now and then more places than the scale takes, or integers whose
                    // total passes 2^53.
                    let places = (next() % 4) as i32 + if case % 7 == 0 { 8 } else { 0 };
                    let magnitude = [10u64, 1_000, 1_000_000_000_000, 4_000_000_000_000_000]
                        [(next() % 4) as usize];
                    (next() % magnitude) as f64 / 10f64.powi(places)
                })
                .collect();
            let scale = DecimalScale::of(&weights).map(|s| (s.decimals, s.bits));
            assert_eq!(scale, two_pass_scale(&weights), "{weights:?}");
            if scale.is_some() {
                found += 1
            } else {
                none += 1
            }
        }
        assert!(found > 50 && none > 50, "{found} scales found, {none} not");
    }

    /// The builder sizes planes from the scale before laying them out: the two agree.
    #[test]
    fn a_scale_sizes_its_planes_before_they_are_laid_out() {
        let block = 64 * BLOCK_WORDS;
        for weights in [
            vec![0.0; 3],
            vec![1.5, 2.25, 0.0, 1000.0],
            weights(block),
            weights(3 * block + 1),
            (0..2 * block).map(|i| (i % 9) as f64 * 0.5).collect(),
        ] {
            let scale = DecimalScale::of(&weights).unwrap();
            let laid = scale.lay_out(&weights).unwrap();
            assert_eq!(planes(&weights), Some(laid.clone()));
            assert_eq!(
                (scale.decimals, scale.bits),
                (laid.decimals, laid.laid.bits)
            );
            assert_eq!(laid.laid.stride, plane_stride(weights.len()));
            if laid.laid.stride == BLOCK_WORDS {
                let words = plane_words(weights.len() as u64, scale.bits).unwrap();
                assert_eq!(words * 8, laid.laid.bytes() as u64);
            }
        }
        let scale = DecimalScale::of(&[1.5, 2.0]).unwrap();
        assert_eq!((scale.decimals, scale.bits), (1, 5)); // 20 < 2^5
        assert!(scale.lay_out(&[1.25]).is_none(), "not at this scale");
        assert!(
            scale.lay_out(&[100.0]).is_none(),
            "more bits than the scale"
        );
        assert!(DecimalScale::of(&[0.1 + 0.2]).is_none());
        // More decimals part way: the weights before count again at the new scale.
        let scale = DecimalScale::of(&[100.0, 2.5, 3.25, 1.0]).unwrap();
        assert_eq!((scale.decimals, scale.bits), (2, 14)); // 10000 < 2^14
        assert!(
            DecimalScale::of(&[4e15, 0.5]).is_none(),
            "4e16 tenths: past 2^53"
        );
        // Those before count again at the new scale: 1e16 + 5 tenths in all, past 2^53;
        // and only there: 9e15 + 5 tenths is within it, 9e14 counted once.
        assert!(DecimalScale::of(&[5e14, 5e14, 0.5]).is_none());
        assert!(DecimalScale::of(&[9e14, 0.5]).is_some());
        assert!(DecimalScale::of(&[4e15, 4e15]).is_some());
        assert!(
            DecimalScale::of(&[4e15, 4e15, 4e15]).is_none(),
            "sum past 2^53"
        );
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
            planes: made.laid.view(),
        };
        let mut sum = source.summer();
        for (block, words) in members.chunks(BLOCK_WORDS).enumerate() {
            sum.add(block, words);
        }
        let tally = sum.finish();
        assert_eq!(tally.count, count);
        assert_eq!(tally.weight, exact as f64 / 100.0);
        let bits = made.laid.bits as usize;
        for (block, words) in members.chunks(BLOCK_WORDS).enumerate() {
            let slice = &made.laid.words[block * bits * BLOCK_WORDS..][..bits * BLOCK_WORDS];
            assert_eq!(
                plane_sums(words, slice, BLOCK_WORDS),
                plane_sums_portable(words, slice, BLOCK_WORDS),
                "block {block}"
            );
        }
    }

    #[test]
    fn the_total_counts_every_respondent_once_at_every_block_edge() {
        let block = 64 * BLOCK_WORDS;
        for n in [0, 1, 63, 64, 65, block - 1, block, block + 1, 3 * block + 7] {
            let decimals: Vec<f64> = (0..n)
                .map(|i| f64::from((i % 997) as u32) / 100.0)
                .collect();
            let thirds: Vec<f64> = (0..n)
                .map(|i| f64::from((i % 89) as u32 + 1) / 3.0)
                .collect();
            let spread: Vec<f64> = thirds
                .iter()
                .enumerate()
                .map(|(i, w)| if i % 5 == 0 { w * 1e-40 } else { *w })
                .collect();
            for weights in [&decimals, &thirds, &spread] {
                let made = MadePlanes::of(weights);
                let source = match &made {
                    Some(planes) => planes.source(),
                    None => Weights::Column(weights),
                };
                let expected = match source {
                    // Decimal planes sum the decimals written: the cents, exactly.
                    Weights::Planes { decimals, .. } => {
                        let cents: u64 =
                            weights.iter().map(|w| scaled(*w, decimals).unwrap()).sum();
                        cents as f64 / POWERS[decimals as usize]
                    }
                    _ => exact_sum(weights.iter().copied()),
                };
                assert_eq!(
                    total(source, n).to_bits(),
                    expected.to_bits(),
                    "{n} respondents"
                );
            }
        }
    }

    #[test]
    fn any_weights_become_binary_integers() {
        assert_eq!(binary_parts(6.0), Some((3, 1)));
        assert_eq!(binary_parts(0.375), Some((3, -3)));
        assert_eq!(binary_parts(0.0), Some((0, 0)));
        assert_eq!(binary_parts(-0.0), Some((0, 0)));
        assert_eq!(binary_parts(f64::from_bits(1)), Some((1, -1074)));
        assert_eq!(binary_parts(-1.0), None);
        assert_eq!(binary_parts(f64::NAN), None);
        let made = binary_planes(&[0.1, 3.0, 0.0]).unwrap();
        // 0.1 is an odd 52-bit integer times 2^-55: 3 × 2^55 needs 57 bits.
        assert_eq!((made.exponent, made.laid.bits), (-55, 57));
        // Three respondents: one word a plane, no block's padding.
        assert_eq!(made.laid.words.len(), 57);
        // Too spread out for 127 bits, or negative: summed member by member instead.
        assert!(binary_planes(&[1e-30, 1e10]).is_none());
        assert!(binary_planes(&[1.0, -1.0]).is_none());
        assert!(binary_planes(&[f64::MIN_POSITIVE / 4.0]).is_none());
        assert_eq!(binary_planes(&[0.0, 0.0]).unwrap().laid.bits, 1);
        // Zeros beside weights whose lowest bit is above 2^0 (even integers past 2^53).
        let even = binary_planes(&[0.0, 2f64.powi(60) + 2048.0, 0.0]).unwrap();
        assert_eq!((even.exponent, even.laid.bits), (11, 50));
    }

    #[test]
    fn binary_plane_sums_are_the_true_sums_rounded_once() {
        // Raking-like weights of every exponent from 2^-9 to 2^9, full precision.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let n = 3 * 64 * BLOCK_WORDS + 100;
        let weights: Vec<f64> = (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let unit = (state >> 11) as f64 / (1u64 << 53) as f64;
                (unit * 18.0 - 9.0).exp2()
            })
            .collect();
        let made = binary_planes(&weights).unwrap();
        let source = Weights::Binary {
            exponent: made.exponent,
            planes: made.laid.view(),
        };
        for (modulus, rest) in [(1, 0), (3, 1), (7, 2), (1000, 999)] {
            let chosen: Vec<usize> = (0..n).filter(|row| row % modulus == rest).collect();
            let mut members = vec![0u64; n.div_ceil(64)];
            for row in &chosen {
                members[row / 64] |= 1 << (row % 64);
            }
            let mut sum = source.summer();
            for (block, words) in members.chunks(BLOCK_WORDS).enumerate() {
                sum.add(block, words);
            }
            let tally = sum.finish();
            assert_eq!(tally.count, chosen.len() as u64);
            let truth = exact_sum(chosen.iter().map(|row| weights[*row]));
            assert_eq!(tally.weight.to_bits(), truth.to_bits(), "every {modulus}th");
        }
    }

    #[test]
    fn the_adder_tree_counts_what_counting_each_word_counts() {
        let first: Vec<u64> = (0..BLOCK_WORDS as u64)
            .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
            .collect();
        let second: Vec<u64> = first.iter().map(|w| !w.rotate_left(7)).collect();
        let full = vec![u64::MAX; BLOCK_WORDS];
        // A whole block's planes, and a small survey's (200 words a plane, unpadded).
        for respondents in [64 * BLOCK_WORDS, 64 * 200 - 5] {
            let made = planes(&weights(respondents)).unwrap().laid;
            let (words, stride) = (&made.words[..], made.stride);
            assert_eq!(stride, respondents.div_ceil(64));
            // Every member in every plane, so every counter of the tree carries.
            let dense = vec![u64::MAX; words.len()];
            // Whole rounds, a rest past them, a rest alone, and nothing.
            for len in [stride, 200, LANES * ROUND, LANES * ROUND + 3, 5, 0] {
                let (a, b) = (&first[..len], &second[..len]);
                let reference = plane_sums_pair_portable(a, b, words, stride);
                assert_eq!(
                    plane_sums_pair_tree(a, b, words, stride),
                    reference,
                    "{len}"
                );
                assert_eq!(plane_sums_pair(a, b, words, stride), reference, "{len}");
                assert_eq!(plane_sums_tree(a, words, stride), reference[0], "{len}");
                assert_eq!(plane_sums_tree(b, words, stride), reference[1], "{len}");
                let all = &full[..len];
                let reference = plane_sums_portable(all, &dense, stride);
                assert_eq!(plane_sums_tree(all, &dense, stride), reference, "{len}");
                assert_eq!(
                    plane_sums_pair_tree(all, a, &dense, stride)[0],
                    reference,
                    "{len}"
                );
                assert_eq!(
                    wide_plane_sum(all, &dense, stride),
                    u128::from(reference.1),
                    "{len}"
                );
            }
        }
    }
}
