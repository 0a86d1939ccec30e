//! Exact sums of f64 terms where bit planes can't hold them: weights spread over more
//! binary exponents than 127 bits span (or negative ones, which only a damaged file
//! holds), and the squares of weights that are not short decimals.
//!
//! Every finite f64 is an integer times a power of two (`m × 2^e`, `m` under 2^53), and
//! its square is `m² × 2^2e`. Each term's integer is added into a bin for its exponent;
//! at the end the bins are joined into one integer, which is rounded once to f64, ties to
//! even. Integer arithmetic throughout, so every platform gets the same figure: the true
//! sum (of the weights, or of their exact squares) rounded once.

/// The fraction bits of an f64.
const FRACTION: u64 = (1 << 52) - 1;

/// An f64 of exponent field `f` (1 to 2046) is its 53-bit integer times `2^(f - BIAS)`.
const BIAS: i64 = 1075;

/// `2^exponent` for an exponent of a normal f64 (-1022 to 1023).
pub(crate) fn power_of_two(exponent: i32) -> f64 {
    f64::from_bits(((exponent + 1023).clamp(1, 2046) as u64) << 52)
}

/// What is summed of each term.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Power {
    /// The terms themselves.
    One,
    /// Their squares, exact (not the squares rounded to f64).
    Two,
}

/// Terms a bin takes between spills: a square's integer is under 2^106, so 2^20 of them
/// stay under 2^126, where a bin's 128 bits read as signed are still right.
const SPILL_EVERY: u64 = 1 << 20;

/// A running exact sum of f64 terms, or of their squares.
#[derive(Debug, Clone)]
pub(crate) struct ExactSum {
    power: Power,
    /// The exponent field of `bins[0]` (and `spilled[0]`).
    low: u16,
    /// Per exponent field from `low`, the integers of its terms (or of their squares)
    /// since the last spill, in 128-bit two's complement: one add a term.
    bins: Vec<u128>,
    /// Per exponent field from `low`, what the bins spilled, as `[lo, hi]` worth
    /// `lo + hi × 2^64`: neither half can overflow for as many terms as a survey has.
    spilled: Vec<[i128; 2]>,
    /// Terms added since the last spill (an upper bound).
    pending: u64,
    /// Infinite and NaN terms (a damaged file's), added as f64: what IEEE makes of them.
    special: f64,
}

/// What one term adds.
enum Term {
    Zero,
    /// This integer (two's complement) to the bin of this exponent field.
    Bin(u16, u128),
    /// Infinite or NaN (its square, for squares).
    Special(f64),
}

impl ExactSum {
    /// A sum of terms.
    pub(crate) fn terms() -> ExactSum {
        ExactSum::new(Power::One)
    }

    /// A sum of the terms' exact squares.
    pub(crate) fn squares() -> ExactSum {
        ExactSum::new(Power::Two)
    }

    fn new(power: Power) -> ExactSum {
        ExactSum {
            power,
            low: 0,
            bins: Vec::new(),
            spilled: Vec::new(),
            pending: 0,
            special: 0.0,
        }
    }

    /// Adds the terms of `words`' members (bit `j` of word `i` is `terms[64 i + j]`; a
    /// bit past the last term adds nothing); returns how many bits were set.
    pub(crate) fn add_members(&mut self, words: &[u64], terms: &[f64]) -> u64 {
        // One loop per power, so the member loop itself never branches on it.
        match self.power {
            Power::One => self.add_each::<false>(words, terms),
            Power::Two => self.add_each::<true>(words, terms),
        }
    }

    fn add_each<const SQUARE: bool>(&mut self, words: &[u64], terms: &[f64]) -> u64 {
        let mut count = 0u64;
        for (index, &word) in words.iter().enumerate() {
            let members = u64::from(word.count_ones());
            count += members;
            if self.pending + members > SPILL_EVERY {
                self.spill();
            }
            self.pending += members;
            let chunk = terms.get(index * 64..).unwrap_or(&[]);
            let mut left = word;
            loop {
                left = add_word::<SQUARE>(&mut self.bins, self.low, left, chunk, &mut self.special);
                if left == 0 {
                    break;
                }
                // A member whose exponent has no bin yet stopped it: make one, go on.
                match chunk
                    .get(left.trailing_zeros() as usize)
                    .map(|t| term::<SQUARE>(*t))
                {
                    Some(Term::Bin(field, _)) => self.stretch(field),
                    // Never: only a term with a bin to find stops it.
                    _ => left &= left - 1,
                }
            }
        }
        count
    }

    /// Adds one term.
    #[cfg(test)]
    fn add(&mut self, term: f64) {
        let terms = [term];
        self.add_members(&[1], &terms);
    }

    /// Makes bins reach `field`: below the lowest, past the highest, or the first.
    #[cold]
    fn stretch(&mut self, field: u16) {
        if self.bins.is_empty() {
            self.low = field;
            self.bins.push(0);
            self.spilled.push([0; 2]);
        } else if field < self.low {
            let below = usize::from(self.low - field);
            self.bins.splice(0..0, std::iter::repeat_n(0, below));
            self.spilled
                .splice(0..0, std::iter::repeat_n([0; 2], below));
            self.low = field;
        } else {
            let len = usize::from(field - self.low) + 1;
            self.bins.resize(len, 0);
            self.spilled.resize(len, [0; 2]);
        }
    }

    /// Moves the bins into `spilled`, before they could overflow.
    fn spill(&mut self) {
        for (bin, [lo, hi]) in self.bins.iter_mut().zip(&mut self.spilled) {
            let value = std::mem::take(bin) as i128;
            *lo += i128::from(value as u64);
            *hi += value >> 64;
        }
        self.pending = 0;
    }

    /// The sum, rounded once to f64 (ties to even).
    pub(crate) fn finish(mut self) -> f64 {
        self.spill();
        let power: usize = match self.power {
            Power::One => 1,
            Power::Two => 2,
        };
        // Bin `i` is worth 2^(power × i) of the lowest bin's unit. The joined integer
        // needs the highest bin's shift, 64 + 128 bits of its `hi`, a few bits of carries
        // from the bins below and its sign.
        let shift = power * self.spilled.len().saturating_sub(1);
        let mut limbs = vec![0u64; (shift + 64 + 128 + 64) / 64 + 1];
        for (at, [lo, hi]) in self.spilled.iter().enumerate() {
            add_shifted(&mut limbs, *lo, power * at);
            add_shifted(&mut limbs, *hi, power * at + 64);
        }
        let negative = limbs.last().is_some_and(|top| top >> 63 == 1);
        if negative {
            negate(&mut limbs);
        }
        let unit = power as i64 * (i64::from(self.low) - BIAS);
        let magnitude = rounded(&limbs, unit);
        let sum = if negative { -magnitude } else { magnitude };
        if self.special == 0.0 {
            sum
        } else {
            sum + self.special
        }
    }
}

/// Adds the terms of the members `bits` (bit `j` is `chunk[j]`) to `bins` (the first of
/// exponent field `low`), until one's bin is missing: returns the members not added (that
/// one first), 0 once all are.
#[inline(always)]
fn add_word<const SQUARE: bool>(
    bins: &mut [u128],
    low: u16,
    mut bits: u64,
    chunk: &[f64],
    special: &mut f64,
) -> u64 {
    while bits != 0 {
        if let Some(t) = chunk.get(bits.trailing_zeros() as usize) {
            match term::<SQUARE>(*t) {
                Term::Bin(field, value) => match bins.get_mut(usize::from(field.wrapping_sub(low)))
                {
                    Some(bin) => *bin = bin.wrapping_add(value),
                    None => return bits,
                },
                Term::Zero => {}
                Term::Special(value) => *special += value,
            }
        }
        bits &= bits - 1;
    }
    0
}

/// What `t` (or its square) adds: `±m × 2^(field - BIAS)` (`m²` and twice that exponent
/// for a square), `field` at least 1 (subnormals share field 1's scale).
#[inline(always)]
fn term<const SQUARE: bool>(t: f64) -> Term {
    let bits = t.to_bits();
    let field = ((bits >> 52) & 0x7ff) as u16;
    let fraction = bits & FRACTION;
    let (mantissa, field) = match field {
        0x7ff => return Term::Special(if SQUARE { t * t } else { t }),
        0 if fraction == 0 => return Term::Zero,
        0 => (fraction, 1),
        _ => (fraction | 1 << 52, field),
    };
    let value = if SQUARE {
        u128::from(mantissa) * u128::from(mantissa)
    } else if bits >> 63 == 1 {
        u128::from(mantissa).wrapping_neg()
    } else {
        u128::from(mantissa)
    };
    Term::Bin(field, value)
}

/// Adds `value × 2^shift` to the two's complement integer `limbs` (least significant
/// first); whatever carries past the top is dropped, as two's complement wants.
fn add_shifted(limbs: &mut [u64], value: i128, shift: usize) {
    if value == 0 {
        return;
    }
    let fill = if value < 0 { u64::MAX } else { 0 };
    let bits = value as u128;
    let words = [bits as u64, (bits >> 64) as u64, fill, fill];
    let (first, offset) = (shift / 64, (shift % 64) as u32);
    let mut carry = false;
    for (at, limb) in limbs.iter_mut().enumerate().skip(first) {
        let k = at - first;
        let word = match (k, offset) {
            (0, _) => words[0] << offset,
            (1..=3, 0) => words[k],
            (1..=3, _) => words[k] << offset | words[k - 1] >> (64 - offset),
            _ => fill,
        };
        if k > 3 && word == 0 && !carry {
            break;
        }
        let (sum, over) = limb.overflowing_add(word);
        let (sum, over_carry) = sum.overflowing_add(u64::from(carry));
        *limb = sum;
        carry = over || over_carry;
    }
}

/// Two's complement negation in place.
fn negate(limbs: &mut [u64]) {
    let mut carry = true;
    for limb in limbs.iter_mut() {
        let (sum, over) = (!*limb).overflowing_add(u64::from(carry));
        *limb = sum;
        carry = over;
    }
}

/// The 64 bits of `limbs` from bit `at` up (zeros past the end).
fn bits_from(limbs: &[u64], at: usize) -> u64 {
    let (word, offset) = (at / 64, (at % 64) as u32);
    let low = limbs.get(word).copied().unwrap_or(0) >> offset;
    let high = match offset {
        0 => 0,
        _ => limbs.get(word + 1).copied().unwrap_or(0) << (64 - offset),
    };
    low | high
}

/// Whether bit `at` of `limbs` is set.
fn bit(limbs: &[u64], at: usize) -> bool {
    limbs
        .get(at / 64)
        .is_some_and(|word| word >> (at % 64) & 1 == 1)
}

/// Whether any bit of `limbs` below bit `at` is set.
fn any_below(limbs: &[u64], at: usize) -> bool {
    let (word, offset) = (at / 64, at % 64);
    let whole = limbs.iter().take(word).any(|limb| *limb != 0);
    let part = offset > 0
        && limbs
            .get(word)
            .is_some_and(|limb| limb & ((1u64 << offset) - 1) != 0);
    whole || part
}

/// The non-negative integer `limbs` times `2^unit`, rounded once to f64 (ties to even,
/// subnormal or infinite where the true value is).
fn rounded(limbs: &[u64], unit: i64) -> f64 {
    let Some(top) = limbs.iter().rposition(|limb| *limb != 0) else {
        return 0.0;
    };
    let highest = top as i64 * 64 + 63 - i64::from(limbs[top].leading_zeros());
    // The lowest bit kept: 53 bits from the highest, or the bit worth 2^-1074 where the
    // value is subnormal.
    let lowest = (highest - 52).max(-1074 - unit);
    if lowest <= 0 {
        // Every bit fits (the integer is under 2^53), and so does the value: exact.
        return scaled(limbs[0] as f64, unit);
    }
    let lowest = lowest as usize;
    let mut kept = bits_from(limbs, lowest) & ((1 << 53) - 1);
    if bit(limbs, lowest - 1) && (any_below(limbs, lowest - 1) || kept & 1 == 1) {
        kept += 1;
    }
    scaled(kept as f64, lowest as i64 + unit)
}

/// `value × 2^exponent` for an integer `value` up to 2^53 where the product is an f64
/// (exact) or past the largest (infinite), as [`rounded`] calls it.
fn scaled(mut value: f64, mut exponent: i64) -> f64 {
    while exponent > 1000 && value.is_finite() {
        value *= power_of_two(1000);
        exponent -= 1000;
    }
    while exponent < -1000 {
        value *= power_of_two(-1000);
        exponent += 1000;
    }
    value * power_of_two(exponent.clamp(-1022, 1023) as i32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::weights::exact_sum;

    fn sum(terms: &[f64]) -> f64 {
        let mut sum = ExactSum::terms();
        terms.iter().for_each(|t| sum.add(*t));
        sum.finish()
    }

    fn sum_of_squares(terms: &[f64]) -> f64 {
        let mut sum = ExactSum::squares();
        terms.iter().for_each(|t| sum.add(*t));
        sum.finish()
    }

    /// The true sum of the exact squares rounded once: each square is `p + e` exactly
    /// (`e` by a fused multiply-add) while neither under- nor overflows.
    fn reference_squares(terms: &[f64]) -> f64 {
        exact_sum(terms.iter().flat_map(|t| {
            let p = t * t;
            [p, t.mul_add(*t, -p)]
        }))
    }

    /// A random generator of its own, so the cases are the same on every run.
    struct Draw(u64);

    impl Draw {
        fn next(&mut self) -> u64 {
            // SplitMix64.
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }

        /// A value of random bits with its exponent within `span` of 2^0.
        fn value(&mut self, span: i32, signed: bool) -> f64 {
            let fraction = self.next() & FRACTION;
            let exponent = (self.next() % (2 * span as u64 + 1)) as i32 - span;
            let sign = if signed && self.next() & 1 == 1 {
                -1.0
            } else {
                1.0
            };
            sign * f64::from_bits(fraction | 1023 << 52) * 2f64.powi(exponent)
        }
    }

    #[test]
    fn sums_are_the_true_sums_rounded_once() {
        let mut draw = Draw(17);
        for case in 0..400 {
            let n = 1 + (draw.next() % 300) as usize;
            let span = [0, 3, 40, 300, 1000][case % 5];
            let signed = case % 2 == 1;
            // Every seventh case near and below the least normal f64.
            let terms: Vec<f64> = (0..n)
                .map(|_| match case % 7 {
                    0 => draw.value(20, signed) * 2f64.powi(-1040),
                    _ => draw.value(span, signed),
                })
                .collect();
            assert_eq!(
                sum(&terms).to_bits(),
                exact_sum(terms.iter().copied()).to_bits(),
                "case {case}: {terms:?}"
            );
        }
    }

    #[test]
    fn squares_are_the_true_sums_of_exact_squares_rounded_once() {
        let mut draw = Draw(29);
        for case in 0..400 {
            let n = 1 + (draw.next() % 300) as usize;
            let span = [0, 3, 40, 200, 450][case % 5];
            let terms: Vec<f64> = (0..n).map(|_| draw.value(span, case % 3 == 0)).collect();
            assert_eq!(
                sum_of_squares(&terms).to_bits(),
                reference_squares(&terms).to_bits(),
                "case {case}: {terms:?}"
            );
        }
    }

    #[test]
    fn cancellation_ties_and_the_ends_of_the_range_round_as_ieee_does() {
        // Cancelling exactly: zero; and what a naive sum loses entirely.
        assert_eq!(sum(&[1e300, 1.0, -1e300]), 1.0);
        assert_eq!(sum(&[0.1, -0.1]).to_bits(), 0.0f64.to_bits());
        // A tie between two f64s goes to the even one.
        let ulp = f64::EPSILON;
        assert_eq!(sum(&[1.0, ulp / 2.0]), 1.0);
        assert_eq!(sum(&[1.0 + ulp, ulp / 2.0]), 1.0 + 2.0 * ulp);
        // Just past the tie goes up.
        assert_eq!(sum(&[1.0, ulp / 2.0, ulp * ulp]), 1.0 + ulp);
        // Subnormals: exact sums, and a sum under half the least rounds to zero.
        let least = f64::from_bits(1);
        assert_eq!(sum(&[least, least, least]), 3.0 * least);
        assert_eq!(sum_of_squares(&[2f64.powi(-537)]), least);
        assert_eq!(sum_of_squares(&[2f64.powi(-538)]), 0.0);
        // 0.5625 of the least rounds up to it; a quarter of it, twice, is a tie between
        // zero and the least (zero is even), three times rounds up, four is the least.
        let quarter = 2f64.powi(-538);
        assert_eq!(sum_of_squares(&[1.5 * quarter]), least);
        assert_eq!(sum_of_squares(&[quarter; 2]), 0.0);
        assert_eq!(sum_of_squares(&[quarter; 3]), least);
        assert_eq!(sum_of_squares(&[quarter; 4]), least);
        assert_eq!(sum_of_squares(&[quarter; 6]), 2.0 * least);
        assert_eq!(sum_of_squares(&[quarter; 10]), 2.0 * least);
        // The largest f64 plus less than half its last place stays; half of it (a tie,
        // the largest's mantissa odd) and more go past it, to infinity.
        let top_ulp = 2f64.powi(971);
        assert_eq!(sum(&[f64::MAX, top_ulp / 4.0]), f64::MAX);
        assert_eq!(sum(&[f64::MAX, top_ulp / 2.0]), f64::INFINITY);
        assert_eq!(sum(&[f64::MAX, f64::MAX]), f64::INFINITY);
        assert_eq!(sum(&[f64::MAX, f64::MAX, -f64::MAX]), f64::MAX);
        assert_eq!(sum_of_squares(&[1e200]), f64::INFINITY);
        assert_eq!(sum(&[-f64::MAX, -f64::MAX]), f64::NEG_INFINITY);
        // Infinite and NaN terms as IEEE adds them.
        assert_eq!(sum(&[1.0, f64::INFINITY]), f64::INFINITY);
        assert!(sum(&[f64::INFINITY, f64::NEG_INFINITY]).is_nan());
        assert!(sum(&[1.0, f64::NAN]).is_nan());
        // Nothing, and zeros of either sign: zero.
        assert_eq!(sum(&[]).to_bits(), 0.0f64.to_bits());
        assert_eq!(sum(&[0.0, -0.0]).to_bits(), 0.0f64.to_bits());
    }

    #[test]
    fn bins_spill_before_they_overflow() {
        // 2^22 squares of integers just under 2^53, of one exponent: their bin would pass
        // 2^128 without spilling.
        let (a, b) = (2.0 - f64::EPSILON, 2.0 - 3.0 * f64::EPSILON);
        let n = 1usize << 22;
        let terms: Vec<f64> = (0..n).map(|i| if i % 2 == 0 { a } else { b }).collect();
        let mut squares = ExactSum::squares();
        assert_eq!(
            squares.add_members(&vec![u64::MAX; n / 64], &terms),
            n as u64
        );
        // Each square is `p + e` exactly; 2^21 of each scale exactly.
        let half = (n / 2) as f64;
        let pieces = [a, b].into_iter().flat_map(|w| {
            let p = w * w;
            [p * half, w.mul_add(w, -p) * half]
        });
        assert_eq!(squares.finish().to_bits(), exact_sum(pieces).to_bits());
    }

    #[test]
    fn bins_stretch_both_ways_in_any_order() {
        let terms = [1.0, 2f64.powi(-900), 2f64.powi(900), 3.5, 2f64.powi(-1070)];
        let mut forward = ExactSum::terms();
        let mut backward = ExactSum::terms();
        terms.iter().for_each(|t| forward.add(*t));
        terms.iter().rev().for_each(|t| backward.add(*t));
        let expected = exact_sum(terms.iter().copied());
        assert_eq!(forward.finish().to_bits(), expected.to_bits());
        assert_eq!(backward.finish().to_bits(), expected.to_bits());
    }

    #[test]
    fn members_are_the_set_bits_and_past_the_terms_add_nothing() {
        let terms: Vec<f64> = (0..100).map(|i| 0.1 * f64::from(i)).collect();
        let words = [u64::MAX, u64::MAX];
        let mut sum = ExactSum::terms();
        assert_eq!(sum.add_members(&words, &terms), 128);
        assert_eq!(
            sum.finish().to_bits(),
            exact_sum(terms.iter().copied()).to_bits()
        );
        let odd = [0xaaaa_aaaa_aaaa_aaaa_u64, 0x0f];
        let mut squares = ExactSum::squares();
        assert_eq!(squares.add_members(&odd, &terms), 36);
        let chosen: Vec<f64> = (0..68)
            .filter(|i| i % 2 == 1 && *i < 64 || (64..68).contains(i))
            .map(|i| terms[i])
            .collect();
        assert_eq!(
            squares.finish().to_bits(),
            reference_squares(&chosen).to_bits()
        );
    }
}
