//! A table cell's figures from its sums: percentages, index, reliability (with-replacement
//! design with weights only, the base a domain of it, as R's `survey::svytotal` over
//! `subset(design, base)`) and the column test.

use crosstab_contract::table::{
    Confidence, Significance, TableCell, UnstableReason, MAX_STABLE_RSE, MIN_TESTED_EFFECTIVE_N,
    MIN_TESTED_EXPECTED,
};
use crosstab_contract::Stability;

/// Count, weighted total and sum of squared weights of a set of respondents.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Moments {
    /// Respondents.
    pub count: u64,
    /// `Σ w`.
    pub weight: f64,
    /// `Σ w²`.
    pub weight_squared: f64,
}

impl Moments {
    /// Kish's effective sample size `(Σw)² / Σw²`; `None` when `Σw²` is 0.
    pub fn effective_n(&self) -> Option<f64> {
        (self.weight_squared > 0.0).then(|| self.weight * self.weight / self.weight_squared)
    }

    /// The effective sample size when the tests test a side this size (at least
    /// [`MIN_TESTED_EFFECTIVE_N`]), else `None`.
    pub(crate) fn tested_size(&self) -> Option<f64> {
        self.effective_n().filter(|n| *n >= MIN_TESTED_EFFECTIVE_N)
    }
}

/// What every cell of one table is measured against.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Figures {
    /// Respondents of the group (or survey): the design's `n`.
    pub sample: u64,
    /// The base (and group), a domain of the design.
    pub base: Moments,
    pub audience_report_units: u32,
    pub unstable_max_resps: u64,
    /// Of the intervals.
    pub confidence: Confidence,
}

/// `part / whole × 100`, when `whole` has weight.
fn percent(part: f64, whole: f64) -> Option<f64> {
    (whole > 0.0).then(|| part / whole * 100.0)
}

impl Figures {
    /// The figures of `cell`, a part of both `row` and `column` (the base itself stands in
    /// for the row of the Total row and the column of the Total column).
    pub(crate) fn cell(
        &self,
        cell: Moments,
        row: Moments,
        column: Moments,
        significance: Option<Significance>,
    ) -> TableCell {
        let n = self.sample as f64;
        // Var(T) = n/(n−1) · Σ(z_i − z̄)², z_i = w_i·y_i over all n respondents of the
        // design (0 outside the base: a domain's total varies with how many of the sample
        // fall in the base); Σ(z_i − z̄)² = Σw²y − T²/n. Rounding may leave a hair below
        // 0: that is 0. Undefined for one respondent, as svytotal's n/(n−1).
        let variance = (self.sample >= 2).then(|| {
            (n / (n - 1.0) * (cell.weight_squared - cell.weight * cell.weight / n)).max(0.0)
        });
        let standard_error = variance.map(f64::sqrt);
        let interval = standard_error.map(|se| self.confidence.interval(cell.weight, se));
        let relative_standard_error = standard_error
            .filter(|_| cell.weight != 0.0)
            .map(|se| se / cell.weight);
        let vertical_pct = percent(cell.weight, column.weight);
        // A share `p = T/X` of a total `X` the cell is part of: Var(p) = n/(n−1) · Σ z_i²
        // with z_i = w_i·(y_i − p·x_i)/X (Σ z_i = 0), where Σ z_i² = ((1−p)²·Σw²y +
        // p²·(Σw²x − Σw²y)) / X²: the cell's members, then the rest of the total's.
        let share_se = |whole: Moments| {
            (self.sample >= 2 && whole.weight > 0.0).then(|| {
                let p = cell.weight / whole.weight;
                let rest = (whole.weight_squared - cell.weight_squared).max(0.0);
                let squares = (1.0 - p) * (1.0 - p) * cell.weight_squared + p * p * rest;
                100.0 * (n / (n - 1.0) * squares).sqrt() / whole.weight
            })
        };
        let row_share = percent(row.weight, self.base.weight).filter(|share| *share > 0.0);
        let index = vertical_pct
            .zip(row_share)
            .map(|(vertical, share)| vertical / share * 100.0);
        let mut unstable_reasons = Vec::new();
        if cell.count <= self.unstable_max_resps {
            unstable_reasons.push(UnstableReason::LowRespondents);
        }
        if relative_standard_error.is_none_or(|rse| rse > MAX_STABLE_RSE) {
            unstable_reasons.push(UnstableReason::HighRse);
        }
        TableCell {
            weight: cell.weight,
            weight_squared: cell.weight_squared,
            resps: cell.count,
            wgt_aud: cell.weight / f64::from(self.audience_report_units),
            vertical_pct,
            horizontal_pct: percent(cell.weight, row.weight),
            vertical_pct_se: share_se(column),
            horizontal_pct_se: share_se(row),
            index,
            effective_n: cell.effective_n(),
            standard_error,
            ci_low: interval.map(|(low, _)| low),
            ci_high: interval.map(|(_, high)| high),
            relative_standard_error,
            stability: if unstable_reasons.is_empty() {
                Stability::Stable
            } else {
                Stability::Unstable
            },
            unstable_reasons,
            significance,
            higher_than: Vec::new(),
        }
    }
}

/// The column test of a cell: is the row's share of this column, `p1 = cell / column`,
/// different (at level `alpha`) from its share of the rest of the base, `p2 = (row −
/// cell) / complement`? [`share_test`] of the two.
///
/// Why the rest of the base and not the Total column: the Total column contains this
/// column's own respondents, so the two shares are not independent samples and the
/// two-sample test's variance would be wrong; the column and its complement are disjoint,
/// so independent in a with-replacement design. The verdict reads the same way, since the
/// Total column's share is a weighted mean of `p1` and `p2`: `p1` is above it exactly when
/// it is above `p2`.
pub(crate) fn column_test(
    cell: Moments,
    row: Moments,
    column: Moments,
    complement: Moments,
    alpha: f64,
) -> Option<Significance> {
    share_test(
        cell.weight,
        column,
        (row.weight - cell.weight).max(0.0),
        complement,
        alpha,
    )
}

/// Whether the share `part1 / whole1` is significantly higher or lower than `part2 /
/// whole2`, the wholes disjoint (so independent samples), at level `alpha`: [`share_z`]'s
/// test, [`verdict`] on its z: the column test (the pairwise test corrects a row's pairs
/// together, from their z).
pub(crate) fn share_test(
    part1: f64,
    whole1: Moments,
    part2: f64,
    whole2: Moments,
    alpha: f64,
) -> Option<Significance> {
    verdict(share_z(part1, whole1, part2, whole2)?, alpha)
}

/// The z of a two-proportion test of the share `part1 / whole1` against `part2 / whole2`,
/// the wholes disjoint (so independent samples), with each side's effective sample size
/// and the pooled proportion; two-sided, its p-value is [`two_sided_p`].
///
/// `None` (no test) when either side's effective size is under [`MIN_TESTED_EFFECTIVE_N`]
/// (the normal approximation would call two respondents of five a difference), a side has
/// no weight, the pooled share is 0 or 1 (nothing to test), or the row's effective count
/// in or out of the two sides is under [`MIN_TESTED_EXPECTED`] (a rare row).
pub(crate) fn share_z(part1: f64, whole1: Moments, part2: f64, whole2: Moments) -> Option<f64> {
    let n1 = whole1.tested_size()?;
    let n2 = whole2.tested_size()?;
    if whole1.weight <= 0.0 || whole2.weight <= 0.0 {
        return None;
    }
    let p1 = part1 / whole1.weight;
    let p2 = part2 / whole2.weight;
    let pooled = (n1 * p1 + n2 * p2) / (n1 + n2);
    let both = n1 + n2;
    if (both * pooled).min(both * (1.0 - pooled)) < MIN_TESTED_EXPECTED {
        return None;
    }
    let variance = pooled * (1.0 - pooled) * (1.0 / n1 + 1.0 / n2);
    // Also refuses NaN: nothing to test.
    let deviation = Some(variance.sqrt()).filter(|d| *d > 0.0)?;
    Some((p1 - p2) / deviation).filter(|z| !z.is_nan())
}

/// The two-sided verdict of a test's `z` at level `alpha`: significant when its p-value
/// `2·P(Z > |z|)` is below `alpha`, higher or lower by its sign.
pub(crate) fn verdict(z: f64, alpha: f64) -> Option<Significance> {
    // Written so that a NaN z (a p-value of NaN) is no verdict.
    let significant = two_sided_p(z) < alpha;
    if !significant {
        None
    } else if z > 0.0 {
        Some(Significance::Higher)
    } else {
        Some(Significance::Lower)
    }
}

/// The standard normal's two-sided p-value of `z`, `2·P(Z > |z|) = erfc(|z|/√2)`: from
/// the complementary error function, so a tail of 1e-300 is not lost to `1 − Φ`.
pub(crate) fn two_sided_p(z: f64) -> f64 {
    libm::erfc(z.abs() / std::f64::consts::SQRT_2)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `count` respondents of weight 1.
    fn unweighted(count: u64) -> Moments {
        Moments {
            count,
            weight: count as f64,
            weight_squared: count as f64,
        }
    }

    #[test]
    fn the_column_test_needs_a_tested_base_on_both_sides() {
        // Half of the column in the row, against 5% of the rest of the base.
        let test = |column: u64, rest: u64| {
            let cell = unweighted(column / 2);
            let row = unweighted(column / 2 + rest / 20);
            column_test(cell, row, unweighted(column), unweighted(rest), 0.05)
        };
        assert_eq!(test(30, 1000), Some(Significance::Higher));
        // z is over 4 for 10 respondents too, but too few to test.
        assert_eq!(test(10, 1000), None);
        assert_eq!(test(1000, 28), None);
    }

    #[test]
    fn the_column_test_needs_a_row_of_five_in_and_out() {
        let (column, rest) = (unweighted(1000), unweighted(1000));
        // 4 of 1000 against none of 1000: z is 2.0 (Fisher's exact p is 0.12).
        assert_eq!(
            column_test(unweighted(4), unweighted(4), column, rest, 0.05),
            None
        );
        // 6 against none: z 2.45 (Fisher's p 0.031).
        assert_eq!(
            column_test(unweighted(6), unweighted(6), column, rest, 0.05),
            Some(Significance::Higher)
        );
        // Likewise out of the row: 996 of 1000 against all of them.
        assert_eq!(
            column_test(unweighted(996), unweighted(1996), column, rest, 0.05),
            None
        );
    }

    #[test]
    fn a_domain_varies_with_the_sample_and_one_respondent_has_no_error() {
        let figures = |sample| Figures {
            sample,
            base: unweighted(100),
            audience_report_units: 1,
            unstable_max_resps: 0,
            confidence: Confidence::NinetyFive,
        };
        let base = unweighted(100);
        // The base's own total varies once the base is a part of the sample: √(n/(n−1) ·
        // (100 − 100²/n)) for n = 1000 is √(1000/999 · 90) = 9.4916...
        assert_eq!(
            figures(100).cell(base, base, base, None).standard_error,
            Some(0.0)
        );
        let se = figures(1000)
            .cell(base, base, base, None)
            .standard_error
            .unwrap();
        assert!(
            (se - (1000.0_f64 / 999.0 * 90.0).sqrt()).abs() < 1e-12,
            "{se}"
        );
        let one = Figures {
            base: unweighted(1),
            ..figures(1)
        }
        .cell(unweighted(1), unweighted(1), unweighted(1), None);
        // Undefined, not 0: one respondent is no evidence that the total is exact.
        assert_eq!(one.standard_error, None);
        assert_eq!((one.ci_low, one.ci_high), (None, None));
        assert_eq!(one.relative_standard_error, None);
        assert_eq!(one.unstable_reasons, [UnstableReason::HighRse]);
        assert_eq!((one.vertical_pct_se, one.horizontal_pct_se), (None, None));
    }

    #[test]
    fn a_share_varies_as_a_domain_mean() {
        let figures = Figures {
            sample: 1000,
            base: unweighted(400),
            audience_report_units: 1,
            unstable_max_resps: 0,
            confidence: Confidence::NinetyNine,
        };
        // 25 of a column of 100 (a row of 200): with unit weights Σ z_i² is (0.75²·25 +
        // 0.25²·75) / 100², the textbook p(1−p)/m with m = 100 but for n/(n−1).
        let cell = figures.cell(unweighted(25), unweighted(200), unweighted(100), None);
        let expected = |p: f64, m: f64| 100.0 * (1000.0 / 999.0 * p * (1.0 - p) / m).sqrt();
        let near =
            |got: Option<f64>, want: f64| got.is_some_and(|got| (got - want).abs() < 1e-12 * want);
        assert!(
            near(cell.vertical_pct_se, expected(0.25, 100.0)),
            "{cell:?}"
        );
        assert!(
            near(cell.horizontal_pct_se, expected(0.125, 200.0)),
            "{cell:?}"
        );
        let z = Confidence::NinetyNine.z();
        // Wilson's at the effective size the SE implies, 100 · 999/1000, under the column's
        // 100 respondents (statsmodels' `proportion_confint(0.25 · 99.9, 99.9, alpha=0.01,
        // method="wilson")`).
        let column = figures.cell(unweighted(100), unweighted(400), unweighted(100), None);
        let (low, high) = cell
            .vertical_interval(&column, Confidence::NinetyNine)
            .unwrap();
        assert!((low - 15.639217663766445).abs() < 1e-9, "{low}");
        assert!((high - 37.4747369242167).abs() < 1e-9, "{high}");
        // The total's interval is at the figures' confidence too.
        let se = cell.standard_error.unwrap();
        assert_eq!(
            (cell.ci_low, cell.ci_high),
            (Some(25.0 - z * se), Some(25.0 + z * se))
        );

        // Weights count by their squares: one heavy member of the column's four.
        let heavy = Moments {
            count: 1,
            weight: 3.0,
            weight_squared: 9.0,
        };
        let column = Moments {
            count: 4,
            weight: 6.0,
            weight_squared: 12.0,
        };
        let se = figures.cell(heavy, heavy, column, None).vertical_pct_se;
        let squares = 0.5_f64.powi(2) * 9.0 + 0.5_f64.powi(2) * 3.0;
        assert!(
            near(se, 100.0 * (1000.0 / 999.0 * squares).sqrt() / 6.0),
            "{se:?}"
        );

        // A total's share of itself is exact; an empty column has no share.
        let whole = figures.cell(unweighted(100), unweighted(100), unweighted(100), None);
        assert_eq!(whole.vertical_pct_se, Some(0.0));
        let empty = figures.cell(unweighted(0), unweighted(5), unweighted(0), None);
        assert_eq!((empty.vertical_pct, empty.vertical_pct_se), (None, None));
    }

    #[test]
    fn each_confidence_is_its_quantile_and_tests_at_its_level() {
        for level in Confidence::ALL {
            // z is R's qnorm(1 − α/2): its two-sided p-value is α.
            let p = two_sided_p(level.z());
            assert!((p - level.alpha()).abs() < 1e-15, "{level:?}: {p}");
        }
        // 60 of 200 against 45 of 200: z = 1.70 (p 0.089): significant at 90% only.
        let (column, rest) = (unweighted(200), unweighted(200));
        let test = |alpha| column_test(unweighted(60), unweighted(105), column, rest, alpha);
        assert_eq!(test(0.10), Some(Significance::Higher));
        assert_eq!(test(0.05), None);
        // 70 of 200 against 45: z = 2.75 (p 0.0060): at 99%, and not at 99% corrected
        // for two comparisons (α/2 = 0.005).
        let test = |alpha| column_test(unweighted(70), unweighted(115), column, rest, alpha);
        assert_eq!(test(0.01), Some(Significance::Higher));
        assert_eq!(test(0.005), None);
        // Lower reads from the other side.
        assert_eq!(
            share_test(45.0, column, 70.0, rest, 0.01),
            Some(Significance::Lower)
        );
        // The far tail is not rounded away.
        assert!(two_sided_p(30.0) > 0.0 && two_sided_p(-30.0) == two_sided_p(30.0));
    }
}
