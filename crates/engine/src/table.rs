//! The researcher's table: every cell `(row) AND (column)` within a base (and group),
//! with the Total column, the Total row, and each cell's reliability, column test and
//! pairwise test against the columns it shares no respondent with.
//!
//! All sums come from one pass over the base's blocks (as `/v1`'s targets do): per
//! block, each row's and each column's words are made once within the filter, each
//! cell's are their AND, and every set's count, `Σw` (the same summer as `/v1`, so a
//! cell's weight is bit for bit what `/v1` answers for `(row) AND (column)`) and `Σw²`
//! are added.

use crosstab_contract::table::{
    Correction, Table, TableAxisKind, TableCell, TableRequest, ValidTable,
};
use crosstab_contract::{ApiError, Expr, Unknown};

use crate::bitset::Bitset;
use crate::error::QueryError;
use crate::eval::{Plan, BLOCK_WORDS};
use crate::query::{fill_within, for_each_filter_block};
use crate::stats::{column_test, share_z, two_sided_p, Figures, Moments};
use crate::survey::Survey;
use crate::weights::{BlockSum, SquareSum, Squares};

/// The sums of a table: what its figures are computed from.
#[derive(Debug, Clone, PartialEq)]
pub struct TableSums {
    /// Respondents of the group, or of the survey without one: the design's `n`, of
    /// which the base is a domain.
    pub sample: u64,
    /// The base (and group).
    pub base: Moments,
    /// Each row within the base: the Total column.
    pub rows: Vec<Moments>,
    /// Each column within the base: the Total row.
    pub columns: Vec<Moments>,
    /// The base outside each column: the other side of each column's test.
    pub complements: Vec<Moments>,
    /// `overlapping[a][b]`: whether columns `a` and `b` have a respondent in common
    /// within the base (then the pairwise test does not compare them).
    pub overlapping: Vec<Vec<bool>>,
    /// `cells[row][column]`.
    pub cells: Vec<Vec<Moments>>,
    /// Rows naming something the survey does not define (their sums are zero).
    pub unknown_rows: Vec<bool>,
    /// Columns naming something the survey does not define (their sums are zero).
    pub unknown_columns: Vec<bool>,
}

/// One set's running count, `Σw` and `Σw²`.
struct MomentSum<'a> {
    weight: BlockSum<'a>,
    square: SquareSum<'a>,
}

impl MomentSum<'_> {
    fn add(&mut self, block: usize, members: &[u64]) {
        self.weight.add(block, members);
        self.square.add(block, members);
    }

    fn finish(self) -> Moments {
        let tally = self.weight.finish();
        Moments {
            count: tally.count,
            weight: tally.weight,
            weight_squared: self.square.finish(),
        }
    }
}

/// One axis's plans (`None`: names the survey lacks) and its blocks of the current pass.
struct Axis<'a> {
    plans: Vec<Option<Plan<'a>>>,
    blocks: Vec<[u64; BLOCK_WORDS]>,
    /// Whether each entry has any member in the current block.
    present: Vec<bool>,
}

impl<'a> Axis<'a> {
    fn new(survey: &'a Survey, exprs: &[Expr]) -> Axis<'a> {
        let plans: Vec<Option<Plan<'a>>> = exprs
            .iter()
            .map(|expr| {
                survey
                    .unknown_names(expr)
                    .is_empty()
                    .then(|| survey.target_plan(expr))
            })
            .collect();
        Axis {
            blocks: vec![[0; BLOCK_WORDS]; plans.len()],
            present: vec![false; plans.len()],
            plans,
        }
    }

    /// Makes each entry's block `index` within `filter`.
    fn fill(&mut self, index: usize, filter: &[u64]) {
        for ((plan, block), present) in self
            .plans
            .iter()
            .zip(&mut self.blocks)
            .zip(&mut self.present)
        {
            let out = &mut block[..filter.len()];
            match plan {
                Some(plan) => fill_within(plan, index, filter, out),
                None => out.fill(0),
            }
            *present = out.iter().any(|word| *word != 0);
        }
    }

    /// Marks in `overlapping` the pairs of entries with a member in common in this block
    /// (the first `len` words); a pair found before is not looked at again, so only
    /// disjoint pairs are read whole.
    fn find_overlaps(&self, len: usize, overlapping: &mut [Vec<bool>]) {
        let present = |index: usize| self.present[index].then(|| &self.blocks[index][..len]);
        for (a, b) in pairs(self.blocks.len()) {
            if overlapping[a][b] {
                continue;
            }
            if let (Some(first), Some(second)) = (present(a), present(b)) {
                if first.iter().zip(second).any(|(x, y)| x & y != 0) {
                    overlapping[a][b] = true;
                    overlapping[b][a] = true;
                }
            }
        }
    }

    fn unknown(&self) -> Vec<bool> {
        self.plans.iter().map(Option::is_none).collect()
    }
}

impl TableSums {
    /// Whether the pairwise test compares column `c` with another: both have respondents
    /// in the base, and none in common.
    pub fn compared(&self, c: usize) -> bool {
        (0..self.columns.len()).any(|other| other != c && self.compares(c, other))
    }

    /// The pairs of columns the pairwise test compares and can test (each column's
    /// effective size one the test tests, [`Moments::tested_size`]): the corrections' `m`. A pair
    /// never tested is no comparison to correct for.
    pub fn compared_pairs(&self) -> usize {
        let tested = |column: usize| self.columns[column].tested_size().is_some();
        pairs(self.columns.len())
            .filter(|&(a, b)| self.compares(a, b) && tested(a) && tested(b))
            .count()
    }

    /// Whether the pairwise test compares columns `a` and `b`: both have respondents in
    /// the base, and none in common.
    fn compares(&self, a: usize, b: usize) -> bool {
        let peopled = |column: usize| self.columns[column].count > 0;
        peopled(a) && peopled(b) && !self.overlapping[a][b]
    }
}

/// For each column of a row (its cells `row_cells`), the columns (indices, ascending)
/// whose share of the row its share is significantly higher than (at level `alpha`,
/// corrected by `correction` for the table's `m` compared pairs), among those sharing no
/// respondent with it within the base. Each pair is tested once: the test is symmetric,
/// so one column's "higher" is the other's "lower".
fn higher_than(
    sums: &TableSums,
    row_cells: &[Moments],
    alpha: f64,
    correction: Correction,
    m: usize,
) -> Vec<Vec<u32>> {
    // Each pair this row tests, with its z and its two-sided p-value.
    let tested: Vec<(usize, usize, f64, f64)> = pairs(sums.columns.len())
        .filter(|&(a, b)| sums.compares(a, b))
        .filter_map(|(a, b)| {
            let z = share_z(
                row_cells[a].weight,
                sums.columns[a],
                row_cells[b].weight,
                sums.columns[b],
            )?;
            Some((a, b, z, two_sided_p(z)))
        })
        .collect();
    // Pairs a row does not test (a rare row) still count in `m`: the family is the
    // table's compared pairs, whatever a row's counts.
    let m = m.max(tested.len()).max(1) as f64;
    let apart: Vec<bool> = match correction {
        Correction::None => tested.iter().map(|&(.., p)| p < alpha).collect(),
        Correction::Bonferroni => tested.iter().map(|&(.., p)| p < alpha / m).collect(),
        Correction::Holm => {
            // Step down from the smallest p-value, the k-th (from 0) at α / (m − k); the
            // first not significant ends it, and every larger p-value is not either.
            let mut order: Vec<usize> = (0..tested.len()).collect();
            order.sort_by(|&i, &j| tested[i].3.total_cmp(&tested[j].3));
            let mut apart = vec![false; tested.len()];
            for (k, &i) in order.iter().enumerate() {
                if tested[i].3 >= alpha / (m - k as f64) {
                    break;
                }
                apart[i] = true;
            }
            apart
        }
    };
    let mut higher = vec![Vec::new(); sums.columns.len()];
    for (&(a, b, z, _), _) in tested.iter().zip(&apart).filter(|(_, apart)| **apart) {
        // A pair apart has a z other than 0 (its p-value would be 1): its sign says which.
        let (winner, loser) = if z > 0.0 { (a, b) } else { (b, a) };
        higher[winner].extend(u32::try_from(loser).ok());
    }
    higher
}

/// Every pair `(a, b)` of `count` entries with `a < b`, in order.
fn pairs(count: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..count).flat_map(move |a| (a + 1..count).map(move |b| (a, b)))
}

impl Survey {
    /// The sums of a table over population base `base` (and group `group`): each row,
    /// each column, each column's complement within the base, and each cell `(row) AND
    /// (column)`, all within `filter` too when there is one. Unknown base or group: the
    /// error `/v1` would give (the group checked first); a filter naming something the
    /// survey lacks is refused (it would empty the whole table). Rows and columns naming
    /// something the survey lacks sum to zero. `give_up` is asked before each block: once
    /// it says so, the sums stop there ([`QueryError::GaveUp`]).
    pub fn table_sums(
        &self,
        base: &str,
        group: Option<&str>,
        filter: Option<&Expr>,
        rows: &[Expr],
        columns: &[Expr],
        give_up: &dyn Fn() -> bool,
    ) -> Result<TableSums, QueryError> {
        let group = match group {
            Some(value) => Some(
                self.group_set(value)
                    .ok_or_else(|| QueryError::UnknownGroup(value.to_owned()))?,
            ),
            None => None,
        };
        let base = self
            .base_set(base)
            .ok_or_else(|| QueryError::UnknownPopulationBase(base.to_owned()))?;
        let Some(filter) = filter else {
            return self.sum_table(self.squares(), base, group, rows, columns, give_up);
        };
        self.check_filter(filter)?;
        let mut within = self.target_plan(filter).materialize(self.respondents());
        within.and_with(base);
        self.sum_table(self.squares(), &within, group, rows, columns, give_up)
    }

    /// A table's filter, refused when it names what this survey does not define (it
    /// would empty every cell).
    pub fn check_filter(&self, filter: &Expr) -> Result<(), QueryError> {
        let unknown = self.unknown_names(filter);
        if unknown.is_empty() {
            return Ok(());
        }
        Err(QueryError::UnknownInFilter {
            survey: self.code().to_owned(),
            reasons: Unknown::reasons(&unknown),
        })
    }

    fn sum_table(
        &self,
        squares: &Squares,
        base: &Bitset,
        group: Option<&Bitset>,
        rows: &[Expr],
        columns: &[Expr],
        give_up: &dyn Fn() -> bool,
    ) -> Result<TableSums, QueryError> {
        let source = self.weight_source();
        let moments = |_| MomentSum {
            weight: source.summer(),
            square: squares.summer(self.weights()),
        };
        let sums = |n: usize| (0..n).map(moments).collect::<Vec<_>>();
        let (mut row_axis, mut column_axis) = (Axis::new(self, rows), Axis::new(self, columns));
        let mut base_sum = moments(0);
        let (mut row_sums, mut column_sums) = (sums(rows.len()), sums(columns.len()));
        let mut complement_sums = sums(columns.len());
        let mut cell_sums: Vec<Vec<MomentSum<'_>>> =
            (0..rows.len()).map(|_| sums(columns.len())).collect();
        let mut scratch = [0u64; BLOCK_WORDS];
        let mut overlapping = vec![vec![false; columns.len()]; columns.len()];
        // A large table is many blocks of rows × columns each: asked block by block, so
        // one past its deadline stops within a block's work.
        let finished = for_each_filter_block(base, group, give_up, |index, filter| {
            let len = filter.len();
            base_sum.add(index, filter);
            row_axis.fill(index, filter);
            column_axis.fill(index, filter);
            for (sum, block) in row_sums.iter_mut().zip(&row_axis.blocks) {
                sum.add(index, &block[..len]);
            }
            for ((sum, complement), block) in column_sums
                .iter_mut()
                .zip(&mut complement_sums)
                .zip(&column_axis.blocks)
            {
                sum.add(index, &block[..len]);
                let outside = &mut scratch[..len];
                for ((word, keep), inside) in outside.iter_mut().zip(filter).zip(block) {
                    *word = keep & !inside;
                }
                complement.add(index, outside);
            }
            column_axis.find_overlaps(len, &mut overlapping);
            for (r, row_cells) in cell_sums.iter_mut().enumerate() {
                if !row_axis.present[r] {
                    continue;
                }
                let row = &row_axis.blocks[r][..len];
                for (c, cell) in row_cells.iter_mut().enumerate() {
                    if !column_axis.present[c] {
                        continue;
                    }
                    let both = &mut scratch[..len];
                    for ((word, a), b) in both.iter_mut().zip(row).zip(&column_axis.blocks[c]) {
                        *word = a & b;
                    }
                    cell.add(index, both);
                }
            }
        });
        if !finished {
            return Err(QueryError::GaveUp);
        }
        let finish = |sums: Vec<MomentSum<'_>>| sums.into_iter().map(MomentSum::finish).collect();
        Ok(TableSums {
            sample: group.map_or(self.respondents() as u64, Bitset::count),
            base: base_sum.finish(),
            rows: finish(row_sums),
            columns: finish(column_sums),
            complements: finish(complement_sums),
            overlapping,
            cells: cell_sums.into_iter().map(finish).collect(),
            unknown_rows: row_axis.unknown(),
            unknown_columns: column_axis.unknown(),
        })
    }

    /// Answers a validated table request as a whole-survey grant would see it: every
    /// figure of [`TableCell`], with `billedCalls` 0 (the server sets what it billed).
    pub fn table(&self, request: &ValidTable) -> Result<Table, QueryError> {
        self.table_until(request, &|| false)
    }

    /// A table request answered by this survey alone, as for a grant of the whole of it
    /// (the npm package's `Survey.table`, the app's tables from a local file): the survey
    /// left out is this one, and another named is refused (`forbidden_survey`) before
    /// the request is validated; an unknown base is `invalid_population_base`, an
    /// unknown group `forbidden_survey`; nothing is billed (`billedCalls` is 0).
    pub fn answer_table(&self, mut request: TableRequest) -> Result<Table, ApiError> {
        if request.survey.is_empty() {
            self.code().clone_into(&mut request.survey);
        } else if request.survey != self.code() {
            return Err(ApiError::ForbiddenSurvey);
        }
        let valid = request.validate()?;
        Ok(self.table(&valid)?)
    }

    /// [`Survey::table`], given up ([`QueryError::GaveUp`]) once `give_up` says so, as it
    /// is asked between blocks: a server past its deadline stops the work instead of
    /// finishing a table nobody will be sent.
    pub fn table_until(
        &self,
        request: &ValidTable,
        give_up: &dyn Fn() -> bool,
    ) -> Result<Table, QueryError> {
        let sums = self.table_sums(
            &request.request.population_base,
            request.group_filter(),
            request.filter.as_ref(),
            &request.rows,
            &request.columns,
            give_up,
        )?;
        let figures = Figures {
            sample: sums.sample,
            base: sums.base,
            audience_report_units: self.audience_report_units(),
            unstable_max_resps: self.unstable_max_resps(),
            confidence: request.request.confidence,
        };
        let alpha = request.request.confidence.alpha();
        let compared_pairs = sums.compared_pairs();
        // Either correction keeps the chance of any false letter in a row under α.
        let correction = request.request.correction();
        let headers = |axis, unknown: &[bool]| {
            let mut headers = request.headers(axis);
            for (header, unknown) in headers.iter_mut().zip(unknown) {
                header.unknown = *unknown;
            }
            headers
        };
        let mut columns = headers(TableAxisKind::Columns, &sums.unknown_columns);
        for (c, header) in columns.iter_mut().enumerate() {
            header.compared = sums.compared(c);
        }
        let cells: Vec<Vec<TableCell>> = sums
            .cells
            .iter()
            .zip(&sums.rows)
            .map(|(row_cells, row)| {
                row_cells
                    .iter()
                    .zip(&sums.columns)
                    .zip(&sums.complements)
                    .zip(higher_than(
                        &sums,
                        row_cells,
                        alpha,
                        correction,
                        compared_pairs,
                    ))
                    .map(|(((cell, column), complement), higher)| {
                        let test = column_test(*cell, *row, *column, *complement, alpha);
                        let mut out = figures.cell(*cell, *row, *column, test);
                        out.higher_than = higher;
                        out
                    })
                    .collect()
            })
            .collect();
        Ok(Table {
            survey: self.code().to_owned(),
            population_base: request.request.population_base.clone(),
            group: request.request.group.clone(),
            filter: request.request.filter.clone(),
            rows: headers(TableAxisKind::Rows, &sums.unknown_rows),
            columns,
            cells,
            row_totals: sums
                .rows
                .iter()
                .map(|row| figures.cell(*row, *row, sums.base, None))
                .collect(),
            column_totals: sums
                .columns
                .iter()
                .map(|column| figures.cell(*column, sums.base, *column, None))
                .collect(),
            total: figures.cell(sums.base, sums.base, sums.base, None),
            audience_report_units: self.audience_report_units(),
            unstable_max_resps: self.unstable_max_resps(),
            billed_calls: 0,
            confidence: request.request.confidence,
            bonferroni: request.request.bonferroni,
            holm: request.request.holm,
            compared_pairs: u32::try_from(compared_pairs).unwrap_or(u32::MAX),
        })
    }
}
