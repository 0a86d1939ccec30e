//! Tables: every figure of every cell against values computed here, independently, by
//! plain loops over the respondents of a small survey written in the test (the
//! with-replacement formulas of R's `survey::svytotal` spelled out the long way); and
//! every cell of a demo table against `/v1`'s answer for `(row) AND (column)`.

use crosstab_contract::app::{
    Confidence, Correction, Significance, Table, TableAxis, TableCell, TableRequest, UnstableReason,
};
use crosstab_contract::{validate_value, Stability};
use crosstab_engine::demo::{self, DemoConfig};
use crosstab_engine::{exact_sum, QueryError, Survey};
use serde_json::json;

/// R's qnorm(1 − α/2) of each confidence, written out here rather than taken from the
/// contract.
fn critical_z(confidence: Confidence) -> f64 {
    match confidence.percent() {
        90 => 1.644_853_626_951_472_2,
        95 => 1.959_963_984_540_054,
        99 => 2.575_829_303_548_900_4,
        other => panic!("no quantile written for {other}%"),
    }
}

/// The two-sided p-value of a z: 2·P(Z > |z|).
fn two_sided_p(z: f64) -> f64 {
    libm::erfc(z.abs() / std::f64::consts::SQRT_2)
}

struct Respondent {
    weight: f64,
    group: &'static str,
    gender: u8,
    age: Option<u32>,
    region: u8,
    flag: Option<u8>,
}

type Test = fn(&Respondent) -> bool;

/// The rows and columns as expressions, each with the same test written in Rust.
const ROWS: [(&str, Test); 5] = [
    ("GENDER = 1", |r| r.gender == 1),
    ("WOMEN", |r| r.gender == 2),
    ("AGE BETWEEN 18 AND 34", |r| {
        r.age.is_some_and(|a| (18..=34).contains(&a))
    }),
    ("FLAG = 1", |r| r.flag == Some(1)),
    ("NOPE = 1", |_| false),
];
const COLUMNS: [(&str, Test); 4] = [
    ("REGION = 1", |r| r.region == 1),
    ("REGION = 2", |r| r.region == 2),
    ("REGION IN (3, 4)", |r| r.region >= 3),
    ("FLAG = 1 OR AGE >= 50", |r| {
        r.flag == Some(1) || r.age.is_some_and(|a| a >= 50)
    }),
];

/// 400 respondents (enough for columns the column test tests); FLAG goes with region 1
/// and against region 2, so the test has something to find in both directions.
/// `weight(i)` picks the weights.
fn respondents(weight: fn(usize) -> f64) -> Vec<Respondent> {
    (0..400)
        .map(|i| {
            let region = [1, 1, 2, 3, 2, 4, 1, 2, 3, 1][i % 10];
            let flag = match (region, i % 7) {
                (_, 6) => None,
                (1, k) => Some(u8::from(k != 3)),
                (2, _) => Some(0),
                (_, k) => Some(u8::from(k % 3 == 0)),
            };
            Respondent {
                weight: weight(i),
                group: if i % 3 == 0 { "B" } else { "A" },
                gender: 1 + (i * 7 % 5 % 2) as u8,
                age: (i % 11 != 4).then_some(16 + (i as u32 * 13 % 60)),
                region,
                flag,
            }
        })
        .collect()
}

/// Two-decimal weights: summed from the exact bit planes.
fn decimal_weight(i: usize) -> f64 {
    0.25 * (1 + i * 37 % 23) as f64 + 0.01 * (i % 3) as f64
}

/// Full-precision weights (thirds): summed from binary planes, their squares member by
/// member, both exactly.
fn float_weight(i: usize) -> f64 {
    (1 + i * 5 % 13) as f64 / 3.0
}

fn survey_of(people: &[Respondent]) -> Survey {
    let definition = r#"
code = "TAB"
name = "Table test survey"
respondents = "respondents.csv"
id_column = "ID"
weight_column = "W"
group_column = "G"
audience_report_units = 100
unstable_max_resps = 3

[groups]
"A" = "Group A"
"B" = "Group B"

[[variables]]
name = "GENDER"
values = { "1" = "Male", "2" = "Female" }

[[codes]]
code = "WOMEN"
expr = "GENDER = 2"

[[population_bases]]
code = "ALL"
expr = "*"

[[population_bases]]
code = "ADULTS"
expr = "AGE >= 18"
"#;
    let mut csv = String::from("ID,W,G,GENDER,AGE,REGION,FLAG\n");
    let text = |value: Option<String>| value.unwrap_or_default();
    for (i, r) in people.iter().enumerate() {
        csv.push_str(&format!(
            "r{i},{},{},{},{},{},{}\n",
            r.weight,
            r.group,
            r.gender,
            text(r.age.map(|a| a.to_string())),
            r.region,
            text(r.flag.map(|f| f.to_string())),
        ));
    }
    crosstab_engine::survey_from_csv(definition, &csv).unwrap()
}

fn request(base: &str, group: Option<&str>) -> TableRequest {
    let axis = |(expression, _): &(&str, Test)| TableAxis {
        expression: (*expression).to_owned(),
        label: Some(format!("label of {expression}")),
    };
    TableRequest {
        survey: "TAB".into(),
        population_base: base.into(),
        group: group.map(str::to_owned),
        filter: None,
        rows: ROWS.iter().map(axis).collect(),
        columns: COLUMNS.iter().map(axis).collect(),
        confidence: Confidence::NinetyFive,
        bonferroni: false,
        holm: false,
    }
}

/// Equal to 1e-9 relative (and exactly when expected to be 0).
fn close(what: &str, got: f64, expected: f64) {
    let scale = got.abs().max(expected.abs());
    assert!(
        (got - expected).abs() <= 1e-9 * scale,
        "{what}: got {got}, expected {expected}"
    );
}

fn close_opt(what: &str, got: Option<f64>, expected: Option<f64>) {
    match (got, expected) {
        (Some(got), Some(expected)) => close(what, got, expected),
        (None, None) => {}
        _ => panic!("{what}: got {got:?}, expected {expected:?}"),
    }
}

/// The figures of one set of respondents (`member`), measured the long way over the base
/// (`design`), a domain of the `n` respondents of the group or survey (`sample`).
struct Reference<'a> {
    design: Vec<&'a Respondent>,
    sample: Vec<&'a Respondent>,
    base: Test,
    /// Whether `Σw` and `Σw²` must be the true sums of the f64 weights (and of their
    /// exact squares) rounded once, bit for bit: so with full-precision weights. Decimal
    /// weights are summed as the decimals they were written as, a hair from their f64s.
    exact: bool,
    /// The intervals' half-width in standard errors and the column test's critical z.
    z: f64,
}

impl Reference<'_> {
    fn weight(&self, member: &dyn Fn(&Respondent) -> bool) -> f64 {
        self.design
            .iter()
            .filter(|r| member(r))
            .map(|r| r.weight)
            .sum()
    }

    fn squares(&self, member: &dyn Fn(&Respondent) -> bool) -> f64 {
        self.design
            .iter()
            .filter(|r| member(r))
            .map(|r| r.weight * r.weight)
            .sum()
    }

    /// The members' `Σw` and `Σw²`, each the true sum rounded once: a weight's square is
    /// `p + e` exactly, `p` its f64 square and `e` the rest (by a fused multiply-add).
    fn exact_sums(&self, member: &dyn Fn(&Respondent) -> bool) -> (f64, f64) {
        let weights = || self.design.iter().filter(|r| member(r)).map(|r| r.weight);
        let squares = weights().flat_map(|w| {
            let p = w * w;
            [p, w.mul_add(w, -p)]
        });
        (exact_sum(weights()), exact_sum(squares))
    }

    fn count(&self, member: &dyn Fn(&Respondent) -> bool) -> u64 {
        self.design.iter().filter(|r| member(r)).count() as u64
    }

    fn effective_n(&self, member: &dyn Fn(&Respondent) -> bool) -> Option<f64> {
        let squares = self.squares(member);
        (squares > 0.0).then(|| self.weight(member).powi(2) / squares)
    }

    /// svytotal's standard error of a domain: √(n/(n−1) Σ (z_i − z̄)²) over the whole
    /// sample, z_i = w_i y_i (0 outside the base), two passes.
    fn standard_error(&self, member: &dyn Fn(&Respondent) -> bool) -> f64 {
        let n = self.sample.len() as f64;
        let z: Vec<f64> = self
            .sample
            .iter()
            .map(|r| {
                if (self.base)(r) && member(r) {
                    r.weight
                } else {
                    0.0
                }
            })
            .collect();
        let mean = z.iter().sum::<f64>() / n;
        let squares: f64 = z.iter().map(|z| (z - mean) * (z - mean)).sum();
        (n / (n - 1.0) * squares).sqrt()
    }

    /// The standard error of the share `member / whole` in points, the long way: the
    /// ratio's linearized variance, n/(n−1) Σ (z_i − z̄)², z_i = w_i (y_i − p x_i) / X over
    /// the whole sample (0 outside the base).
    fn share_se(
        &self,
        member: &dyn Fn(&Respondent) -> bool,
        whole: &dyn Fn(&Respondent) -> bool,
    ) -> Option<f64> {
        let total = self.weight(whole);
        if total <= 0.0 {
            return None;
        }
        let p = self.weight(member) / total;
        let n = self.sample.len() as f64;
        let z: Vec<f64> = self
            .sample
            .iter()
            .map(|r| {
                let inside = |test: &dyn Fn(&Respondent) -> bool| {
                    f64::from(u8::from((self.base)(r) && test(r)))
                };
                r.weight * (inside(member) - p * inside(whole)) / total
            })
            .collect();
        let mean = z.iter().sum::<f64>() / n;
        let squares: f64 = z.iter().map(|z| (z - mean) * (z - mean)).sum();
        Some(100.0 * (n / (n - 1.0) * squares).sqrt())
    }

    /// The pairwise test's z of the row's share of column `a` against column `b`, when
    /// the two have no respondent in common in the design and both are tested.
    fn pair_z(&self, row: Test, a: Test, b: Test) -> Option<f64> {
        if self.count(&|r| a(r) && b(r)) > 0 {
            return None;
        }
        let (n1, n2) = (self.effective_n(&a)?, self.effective_n(&b)?);
        if n1 < 30.0 || n2 < 30.0 {
            return None;
        }
        let p1 = self.weight(&|r| row(r) && a(r)) / self.weight(&a);
        let p2 = self.weight(&|r| row(r) && b(r)) / self.weight(&b);
        let p = (n1 * p1 + n2 * p2) / (n1 + n2);
        if (n1 + n2) * p.min(1.0 - p) < 5.0 {
            return None;
        }
        let variance = p * (1.0 - p) * (1.0 / n1 + 1.0 / n2);
        (variance > 0.0).then(|| (p1 - p2) / variance.sqrt())
    }

    /// The two-proportion z of the column test: the row's share of the column against
    /// its share of the rest of the design, effective sizes, pooled share.
    fn z(&self, row: Test, column: Test) -> Option<f64> {
        let inside = |r: &Respondent| column(r);
        let outside = |r: &Respondent| !column(r);
        let n1 = self.effective_n(&inside)?;
        let n2 = self.effective_n(&outside)?;
        if n1 < 30.0 || n2 < 30.0 {
            return None;
        }
        let p1 = self.weight(&|r| row(r) && column(r)) / self.weight(&inside);
        let p2 = self.weight(&|r| row(r) && !column(r)) / self.weight(&outside);
        let p = (n1 * p1 + n2 * p2) / (n1 + n2);
        let variance = p * (1.0 - p) * (1.0 / n1 + 1.0 / n2);
        (variance > 0.0).then(|| (p1 - p2) / variance.sqrt())
    }

    /// Checks every figure of `got`, the cell of `member` whose column is `column` and
    /// whose row is `row`, against the long way.
    fn check(
        &self,
        what: &str,
        got: &TableCell,
        member: &dyn Fn(&Respondent) -> bool,
        row: &dyn Fn(&Respondent) -> bool,
        column: &dyn Fn(&Respondent) -> bool,
        threshold: u64,
    ) {
        let weight = self.weight(member);
        let squares = self.squares(member);
        let count = self.count(member);
        assert_eq!(got.resps, count, "{what}: resps");
        close(&format!("{what}: weight"), got.weight, weight);
        close(&format!("{what}: weight²"), got.weight_squared, squares);
        if self.exact {
            let (weight, squares) = self.exact_sums(member);
            assert_eq!(
                got.weight.to_bits(),
                weight.to_bits(),
                "{what}: exact weight"
            );
            assert_eq!(
                got.weight_squared.to_bits(),
                squares.to_bits(),
                "{what}: exact weight²"
            );
        }
        close(&format!("{what}: wgtAud"), got.wgt_aud, weight / 100.0);
        close_opt(
            &format!("{what}: effective n"),
            got.effective_n,
            self.effective_n(member),
        );
        let se = self.standard_error(member);
        close_opt(&format!("{what}: SE"), got.standard_error, Some(se));
        close_opt(
            &format!("{what}: CI low"),
            got.ci_low,
            Some(weight - self.z * se),
        );
        close_opt(
            &format!("{what}: CI high"),
            got.ci_high,
            Some(weight + self.z * se),
        );
        let rse = (weight != 0.0).then(|| se / weight);
        close_opt(&format!("{what}: RSE"), got.relative_standard_error, rse);
        let (row_weight, column_weight) = (self.weight(row), self.weight(column));
        let base_weight = self.weight(&|_| true);
        let vertical = (column_weight > 0.0).then(|| 100.0 * weight / column_weight);
        close_opt(&format!("{what}: vertical %"), got.vertical_pct, vertical);
        let horizontal = (row_weight > 0.0).then(|| 100.0 * weight / row_weight);
        close_opt(
            &format!("{what}: horizontal %"),
            got.horizontal_pct,
            horizontal,
        );
        if self.sample.len() >= 2 {
            close_opt(
                &format!("{what}: vertical % SE"),
                got.vertical_pct_se,
                self.share_se(member, column),
            );
            close_opt(
                &format!("{what}: horizontal % SE"),
                got.horizontal_pct_se,
                self.share_se(member, row),
            );
        }
        let index = vertical
            .filter(|_| row_weight > 0.0)
            .map(|v| v / (100.0 * row_weight / base_weight) * 100.0);
        close_opt(&format!("{what}: index"), got.index, index);
        let mut reasons = vec![];
        if count <= threshold {
            reasons.push(UnstableReason::LowRespondents);
        }
        if rse.is_none_or(|rse| rse > 0.3) {
            reasons.push(UnstableReason::HighRse);
        }
        assert_eq!(got.unstable_reasons, reasons, "{what}: reasons");
        let stability = if reasons.is_empty() {
            Stability::Stable
        } else {
            Stability::Unstable
        };
        assert_eq!(got.stability, stability, "{what}: stability");
    }
}

/// What [`check_table`] saw of the tests.
#[derive(Default)]
struct Seen {
    /// The column test's verdicts.
    verdicts: Vec<Significance>,
    /// Pairs of columns the pairwise test found apart.
    pairs: usize,
    /// Pairs apart at the table's level that Bonferroni's correction took back.
    corrected_away: usize,
}

/// Checks a whole table, at its confidence and with its correction, against the long
/// way.
fn check_table(
    people: &[Respondent],
    table: &Table,
    base: Test,
    group: Option<&str>,
    exact: bool,
) -> Seen {
    let sample: Vec<&Respondent> = people
        .iter()
        .filter(|r| group.is_none_or(|g| r.group == g))
        .collect();
    let z_critical = critical_z(table.confidence);
    let reference = Reference {
        design: sample.iter().copied().filter(|r| base(r)).collect(),
        sample,
        base,
        exact,
        z: z_critical,
    };
    // The corrections' m: the pairs of columns with no respondent in common, each of an
    // effective size the test tests (30 or more).
    let tested = |column: Test| reference.effective_n(&column).is_some_and(|n| n >= 30.0);
    let compared_pairs = (0..COLUMNS.len())
        .flat_map(|a| (a + 1..COLUMNS.len()).map(move |b| (a, b)))
        .filter(|&(a, b)| {
            let (first, second) = (COLUMNS[a].1, COLUMNS[b].1);
            tested(first) && tested(second) && reference.count(&|r| first(r) && second(r)) == 0
        })
        .count();
    assert_eq!(table.compared_pairs as usize, compared_pairs);
    let alpha = match table.confidence.percent() {
        90 => 0.10,
        95 => 0.05,
        99 => 0.01,
        other => panic!("no level written for {other}%"),
    };
    let correction = Correction::of(table.bonferroni, table.holm);
    let mut corrected_away = 0;
    let threshold = 3;
    let all = |_: &Respondent| true;
    let mut verdicts = vec![];
    let mut pairs = vec![];
    for (r, (row_expr, row)) in ROWS.iter().enumerate() {
        // The row's pairs apart, by adjusted p-values (statsmodels' `multipletests`),
        // each pair (a, b) with its z and whether it is apart.
        let row_pairs: Vec<(usize, usize, f64)> = (0..COLUMNS.len())
            .flat_map(|a| (a + 1..COLUMNS.len()).map(move |b| (a, b)))
            .filter_map(|(a, b)| {
                let z = reference.pair_z(*row, COLUMNS[a].1, COLUMNS[b].1)?;
                Some((a, b, z))
            })
            .collect();
        let adjusted = adjusted_p(
            &row_pairs
                .iter()
                .map(|p| two_sided_p(p.2))
                .collect::<Vec<_>>(),
            compared_pairs,
            correction,
        );
        let mut apart = |c: usize, other: usize| -> bool {
            row_pairs
                .iter()
                .zip(&adjusted)
                .find(|((a, b, _), _)| (*a, *b) == (c.min(other), c.max(other)))
                .is_some_and(|(&(a, _, z), &p)| {
                    assert!((p / alpha - 1.0).abs() > 1e-6, "pair p {p} on the edge");
                    let z = if a == c { z } else { -z };
                    if z > 0.0 && p >= alpha && two_sided_p(z) < alpha {
                        corrected_away += 1;
                    }
                    z > 0.0 && p < alpha
                })
        };
        assert_eq!(table.rows[r].expression, *row_expr);
        assert_eq!(table.rows[r].label, format!("label of {row_expr}"));
        assert_eq!(table.rows[r].unknown, *row_expr == "NOPE = 1");
        for (c, (column_expr, column)) in COLUMNS.iter().enumerate() {
            let what = format!("[{row_expr}] x [{column_expr}]");
            let got = &table.cells[r][c];
            reference.check(&what, got, &|p| row(p) && column(p), row, column, threshold);
            let expected = reference.z(*row, *column).and_then(|z| {
                // Far enough from the edge that rounding can't decide the verdict.
                assert!(
                    (z.abs() - z_critical).abs() > 1e-6,
                    "{what}: z {z} on the edge"
                );
                if z > z_critical {
                    Some(Significance::Higher)
                } else if z < -z_critical {
                    Some(Significance::Lower)
                } else {
                    None
                }
            });
            assert_eq!(got.significance, expected, "{what}: significance");
            verdicts.extend(expected);
            let higher: Vec<u32> = (0..COLUMNS.len())
                .filter(|&other| other != c && apart(c, other))
                .map(|other| other as u32)
                .collect();
            assert_eq!(got.higher_than, higher, "{what}: higher than");
            pairs.extend(higher.iter().map(|other| (c as u32, *other)));
        }
        let got = &table.row_totals[r];
        reference.check(
            &format!("[{row_expr}] total"),
            got,
            row,
            row,
            &all,
            threshold,
        );
        assert_eq!(got.significance, None);
        assert!(got.higher_than.is_empty());
    }
    for (c, (column_expr, column)) in COLUMNS.iter().enumerate() {
        assert!(!table.columns[c].unknown);
        // The regions share no respondent; the last column shares some with each.
        assert_eq!(table.columns[c].compared, c < 3, "{column_expr}");
        assert!(table.rows.iter().all(|row| !row.compared));
        let got = &table.column_totals[c];
        reference.check(
            &format!("total x [{column_expr}]"),
            got,
            column,
            &all,
            column,
            threshold,
        );
        assert_eq!(got.significance, None);
    }
    reference.check("total", &table.total, &all, &all, &all, threshold);
    // Only the regions are compared: the last column shares respondents with each.
    assert!(pairs.iter().all(|(a, b)| *a < 3 && *b < 3), "{pairs:?}");
    Seen {
        verdicts,
        pairs: pairs.len(),
        corrected_away,
    }
}

#[test]
fn every_figure_matches_the_long_way_with_exact_and_float_weights() {
    let adults: Test = |r| r.age.is_some_and(|a| a >= 18);
    let everyone: Test = |_| true;
    // What each confidence and correction saw, over every table.
    let mut seen: Vec<((Confidence, Correction), Seen)> = vec![];
    for (weight, exact) in [
        (decimal_weight as fn(usize) -> f64, false),
        (float_weight, true),
    ] {
        let people = respondents(weight);
        let survey = survey_of(&people);
        for (base_code, base, group) in [
            ("ALL", everyone, None),
            ("ADULTS", adults, Some("A")),
            ("ALL", everyone, Some("B")),
        ] {
            for setting in [
                (Confidence::NinetyFive, Correction::None),
                (Confidence::Ninety, Correction::None),
                (Confidence::NinetyNine, Correction::None),
                (Confidence::NinetyFive, Correction::Bonferroni),
                (Confidence::NinetyFive, Correction::Holm),
                (Confidence::Ninety, Correction::Holm),
            ] {
                let (confidence, correction) = setting;
                let valid = TableRequest {
                    confidence,
                    bonferroni: correction == Correction::Bonferroni,
                    holm: correction == Correction::Holm,
                    ..request(base_code, group)
                }
                .validate()
                .unwrap();
                let table = survey.table(&valid).unwrap();
                assert_eq!(
                    (table.survey.as_str(), table.population_base.as_str()),
                    ("TAB", base_code)
                );
                assert_eq!(table.group.as_deref(), group);
                assert_eq!(
                    (table.audience_report_units, table.unstable_max_resps),
                    (100, 3)
                );
                assert_eq!(table.billed_calls, 0, "computed locally");
                assert_eq!((table.confidence, table.correction()), setting);
                let found = check_table(&people, &table, base, group, exact);
                match seen.iter_mut().find(|(s, _)| *s == setting) {
                    Some((_, all)) => {
                        all.verdicts.extend(found.verdicts);
                        all.pairs += found.pairs;
                        all.corrected_away += found.corrected_away;
                    }
                    None => seen.push((setting, found)),
                }
                // The unknown row sums to nothing anywhere.
                assert!(table.cells[4]
                    .iter()
                    .all(|cell| cell.weight == 0.0 && cell.resps == 0));
            }
        }
    }
    let of =
        |setting: (Confidence, Correction)| &seen.iter().find(|(s, _)| *s == setting).unwrap().1;
    // The data make the column test find something both ways, so the test tests it.
    let at_95 = of((Confidence::NinetyFive, Correction::None));
    assert!(
        at_95.verdicts.contains(&Significance::Higher),
        "{:?}",
        at_95.verdicts
    );
    assert!(
        at_95.verdicts.contains(&Significance::Lower),
        "{:?}",
        at_95.verdicts
    );
    assert!(at_95.pairs > 0, "the pairwise test finds regions apart");
    // ... and the levels and the correction decide some verdicts, so they are tested.
    let count = |setting| of(setting).verdicts.len();
    assert!(count((Confidence::Ninety, Correction::None)) > at_95.verdicts.len());
    assert!(count((Confidence::NinetyNine, Correction::None)) < at_95.verdicts.len());
    // A correction takes back exactly the pairs it should (none in these data: see
    // `bonferroni_takes_back_a_pair_apart_at_its_level_alone` and
    // `holm_steps_down_from_the_smallest_p_value` for some that are), and Holm's never
    // fewer than Bonferroni's.
    for correction in [Correction::Bonferroni, Correction::Holm] {
        let corrected = of((Confidence::NinetyFive, correction));
        assert_eq!(corrected.pairs + corrected.corrected_away, at_95.pairs);
    }
    assert!(
        of((Confidence::NinetyFive, Correction::Holm)).pairs
            >= of((Confidence::NinetyFive, Correction::Bonferroni)).pairs
    );
}

/// The p-values of a row's pairs as `correction` adjusts them for a family of `m`, to be
/// read against α: Bonferroni's `min(1, m·p)`; Holm's `max over j ≤ k of min(1, (m − j)·p₍ⱼ₎)`
/// for the `k`-th smallest (from 0), as statsmodels' `multipletests` computes them.
fn adjusted_p(p: &[f64], m: usize, correction: Correction) -> Vec<f64> {
    let m = m as f64;
    match correction {
        Correction::None => p.to_vec(),
        Correction::Bonferroni => p.iter().map(|p| (m * p).min(1.0)).collect(),
        Correction::Holm => {
            let mut order: Vec<usize> = (0..p.len()).collect();
            order.sort_by(|&i, &j| p[i].total_cmp(&p[j]));
            let mut adjusted = vec![0.0; p.len()];
            let mut running: f64 = 0.0;
            for (k, &i) in order.iter().enumerate() {
                running = running.max(((m - k as f64) * p[i]).min(1.0));
                adjusted[i] = running;
            }
            adjusted
        }
    }
}

/// A table of three regions of 200 unweighted respondents each, its rows flags `X`, `Y`, …
/// held by `held[row][region]` of each region's, at `confidence` and corrected by
/// `correction`.
fn three_regions(held: &[[usize; 3]], confidence: Confidence, correction: Correction) -> Table {
    let definition = r#"
code = "REGIONS"
name = "Three regions"
respondents = "respondents.csv"
id_column = "ID"
weight_column = "W"

[[population_bases]]
code = "ALL"
expr = "*"
"#;
    let flags: Vec<String> = (0..held.len())
        .map(|row| char::from(b'X' + row as u8).to_string())
        .collect();
    let mut csv = format!("ID,W,REGION,{}\n", flags.join(","));
    for region in 0..3 {
        for i in 0..200 {
            let cells: Vec<String> = held
                .iter()
                .map(|row| u8::from(i < row[region]).to_string())
                .collect();
            csv.push_str(&format!(
                "r{region}_{i},1,{},{}\n",
                region + 1,
                cells.join(",")
            ));
        }
    }
    let survey = crosstab_engine::survey_from_csv(definition, &csv).unwrap();
    let axis = |expression: String| TableAxis {
        expression,
        label: None,
    };
    let request = TableRequest {
        survey: "REGIONS".into(),
        population_base: "ALL".into(),
        group: None,
        filter: None,
        rows: flags
            .iter()
            .map(|flag| axis(format!("{flag} = 1")))
            .collect(),
        columns: (1..=3).map(|r| axis(format!("REGION = {r}"))).collect(),
        confidence,
        bonferroni: correction == Correction::Bonferroni,
        holm: correction == Correction::Holm,
    };
    let table = survey.table(&request.validate().unwrap()).unwrap();
    assert_eq!((table.compared_pairs, table.correction()), (3, correction));
    table
}

/// Each row's letters: for each column, the columns it is higher than.
fn letters(table: &Table) -> Vec<Vec<Vec<u32>>> {
    table
        .cells
        .iter()
        .map(|row| row.iter().map(|c| c.higher_than.clone()).collect())
        .collect()
}

#[test]
fn bonferroni_takes_back_a_pair_apart_at_its_level_alone() {
    // The row holds 64, 45 and 55 of the regions' 200. 32% against 22.5% is z = 2.13,
    // p = 0.033: apart at 95%, not at 95% over three pairs (0.05 / 3); the other pairs are
    // apart at neither.
    let table = |confidence, correction| three_regions(&[[64, 45, 55]], confidence, correction);
    let uncorrected = table(Confidence::NinetyFive, Correction::None);
    assert_eq!(letters(&uncorrected), [[vec![1], vec![], vec![]]]);
    let corrected = table(Confidence::NinetyFive, Correction::Bonferroni);
    assert!(letters(&corrected).concat().iter().all(Vec::is_empty));
    // The column tests are not corrected: at 90% regions 1 and 2 differ from the rest
    // (p 0.070 and 0.060), corrected or not (α/3 would take both back).
    let arrows = |table: &Table| -> Vec<Option<Significance>> {
        table.cells[0].iter().map(|c| c.significance).collect()
    };
    let at_90 = table(Confidence::Ninety, Correction::Bonferroni);
    assert_eq!(
        arrows(&at_90),
        [Some(Significance::Higher), Some(Significance::Lower), None]
    );
    assert_eq!(
        arrows(&at_90),
        arrows(&table(Confidence::Ninety, Correction::None))
    );
    // At 90%, corrected, the pair is apart again: α/3 = 0.0333 is just above its p, 0.0329.
    assert_eq!(letters(&at_90), [[vec![1], vec![], vec![]]]);
}

#[test]
fn holm_steps_down_from_the_smallest_p_value() {
    // Row X holds 40, 46 and 67 of the regions' 200: regions 3 and 1 are apart at
    // p = 0.0023, regions 3 and 2 at p = 0.0197, regions 1 and 2 at p = 0.47. Row Y holds
    // 43, 63 and 64: regions 1 and 3 at p = 0.0177, 1 and 2 at p = 0.0235. Row Z, rare,
    // holds 1, 3 and 8: regions 1 and 2 too few for a test (4 of 400 in the row), regions
    // 1 and 3 at p = 0.0183, 2 and 3 at p = 0.126.
    let held = [[40, 46, 67], [43, 63, 64], [1, 3, 8]];
    let letters = |correction| letters(&three_regions(&held, Confidence::NinetyFive, correction));
    // Uncorrected (α = 0.05): region 3 above both others in X; regions 2 and 3 above
    // region 1 in Y; region 3 above region 1 in Z.
    assert_eq!(
        letters(Correction::None),
        [
            [vec![], vec![], vec![0, 1]],
            [vec![], vec![0], vec![0]],
            [vec![], vec![], vec![0]]
        ]
    );
    // Bonferroni (each at 0.05 / 3 = 0.0167): only X's smallest p-value stays.
    assert_eq!(
        letters(Correction::Bonferroni),
        [
            [vec![], vec![], vec![0]],
            [vec![], vec![], vec![]],
            [vec![], vec![], vec![]]
        ]
    );
    // Holm: X's smallest at 0.0167 stays, so its next is tested at 0.05 / 2 = 0.025 and
    // stays too; Y's smallest (0.0177) is not under 0.0167, so the step-down stops there,
    // though Y's next (0.0235) is under 0.025. Z's pair too few for a test still counts
    // in m, so its smallest p-value (0.0183) is tested at 0.05 / 3, not at 0.05 / 2.
    assert_eq!(
        letters(Correction::Holm),
        [
            [vec![], vec![], vec![0, 1]],
            [vec![], vec![], vec![]],
            [vec![], vec![], vec![]]
        ]
    );
}

#[test]
fn a_table_names_the_same_unknown_base_and_group_as_v1() {
    let survey = survey_of(&respondents(decimal_weight));
    let table =
        |base: &str, group: Option<&str>| survey.table(&request(base, group).validate().unwrap());
    assert_eq!(
        table("NOPE", None).unwrap_err(),
        QueryError::UnknownPopulationBase("NOPE".into())
    );
    // The group first, as `/v1` answers 403 before 400.
    assert_eq!(
        table("NOPE", Some("C")).unwrap_err(),
        QueryError::UnknownGroup("C".into())
    );
    assert!(table("ALL", Some("_ALL_")).is_ok());
}

#[test]
fn demo_cells_are_what_v1_answers_for_row_and_column() {
    let survey = Survey::from_bytes(
        &demo::compile(&DemoConfig {
            respondents: 20_000,
            flags: 30,
            seed: 5,
        })
        .unwrap(),
    )
    .unwrap();
    let rows = [
        "F2554",
        "M2554",
        "SMOKERS",
        "COLLEGE AND NOT SMOKERS",
        "HHI100K",
        "NOPE",
    ];
    let columns = ["REGION = 1", "REGION = 2", "REGION IN (3, 4)", "AGE >= 55"];
    // A filter is the base AND the filter, as /v1 asks it of each target.
    let filter = "AGE >= 35 AND NOT SMOKERS";
    for (base, group, filter) in [
        ("ADULTS", None, None),
        ("WOMEN", Some("2"), None),
        ("ADULTS", None, Some(filter)),
        ("WOMEN", Some("2"), Some(filter)),
    ] {
        let within = |target: String| match filter {
            Some(filter) => format!("({filter}) AND ({target})"),
            None => target,
        };
        let request = TableRequest {
            survey: "DEMO".into(),
            population_base: base.into(),
            group: group.map(str::to_owned),
            filter: filter.map(str::to_owned),
            rows: rows
                .iter()
                .map(|e| TableAxis {
                    expression: (*e).into(),
                    label: None,
                })
                .collect(),
            columns: columns
                .iter()
                .map(|e| TableAxis {
                    expression: (*e).into(),
                    label: None,
                })
                .collect(),
            confidence: Default::default(),
            bonferroni: false,
            holm: false,
        };
        let table = survey.table(&request.clone().validate().unwrap()).unwrap();
        let v1 = |targets: Vec<String>| {
            let valid = validate_value(&json!({
                "SurveyCode": "DEMO", "PopulationBaseCode": base,
                "AuthorizationGroup": group, "TargetCodes": targets
            }))
            .unwrap();
            survey.crosstab(&valid).unwrap().results[0]
        };
        let same = |what: &str, cell: &TableCell, answer: crosstab_contract::CrosstabResult| {
            assert_eq!(cell.resps, answer.resps, "{what}");
            assert_eq!(cell.wgt_aud.to_bits(), answer.wgt_aud.to_bits(), "{what}");
        };
        for (r, row) in rows.iter().enumerate() {
            assert_eq!(table.rows[r].unknown, *row == "NOPE");
            assert_eq!(table.rows[r].label, *row, "no label: the expression");
            for (c, column) in columns.iter().enumerate() {
                let answer = v1(vec![within(format!("({row}) AND ({column})"))]);
                same(&format!("{row} x {column}"), &table.cells[r][c], answer);
            }
            same(
                row,
                &table.row_totals[r],
                v1(vec![within((*row).to_owned())]),
            );
        }
        for (c, column) in columns.iter().enumerate() {
            same(
                column,
                &table.column_totals[c],
                v1(vec![within((*column).to_owned())]),
            );
        }
        let total = filter.map_or_else(|| "*".to_owned(), str::to_owned);
        same("total", &table.total, v1(vec![total]));
        assert_eq!(table.filter.as_deref(), filter);
        if filter.is_some() {
            let unfiltered = survey
                .table(
                    &TableRequest {
                        filter: None,
                        ..request.clone()
                    }
                    .validate()
                    .unwrap(),
                )
                .unwrap();
            assert!(table.total.resps < unfiltered.total.resps);
        }
        // The regions split the base: their weights add up to the base's.
        let regions: f64 = table.column_totals[..3].iter().map(|c| c.weight).sum();
        assert!((regions - table.total.weight).abs() <= 1e-9 * table.total.weight);
    }
}

/// A table given up (its caller's deadline passed) stops at the next block and says so;
/// one never given up is the table.
#[test]
fn a_table_given_up_stops_at_the_next_block() {
    // 40,000 respondents: three blocks of 16,384.
    let survey = Survey::from_bytes(
        &demo::compile(&DemoConfig {
            respondents: 40_000,
            flags: 4,
            seed: 5,
        })
        .unwrap(),
    )
    .unwrap();
    let axis = |expression: &str| TableAxis {
        expression: expression.into(),
        label: None,
    };
    let valid = TableRequest {
        survey: "DEMO".into(),
        population_base: "ADULTS".into(),
        group: None,
        filter: None,
        rows: vec![axis("GENDER = 1"), axis("SMOKER = 1")],
        columns: vec![axis("REGION = 1"), axis("AGE >= 55")],
        confidence: Default::default(),
        bonferroni: false,
        holm: false,
    }
    .validate()
    .unwrap();
    assert_eq!(
        survey.table_until(&valid, &|| true),
        Err(crosstab_engine::QueryError::GaveUp)
    );
    let asked = std::cell::Cell::new(0);
    let after_one = || {
        asked.set(asked.get() + 1);
        asked.get() > 1
    };
    assert_eq!(
        survey.table_until(&valid, &after_one),
        Err(crosstab_engine::QueryError::GaveUp)
    );
    assert_eq!(asked.get(), 2, "not asked again once given up");
    assert_eq!(survey.table_until(&valid, &|| false), survey.table(&valid));
    assert_eq!(
        crosstab_contract::ApiError::from(crosstab_engine::QueryError::GaveUp),
        crosstab_contract::ApiError::DeadlineExceeded
    );
}

/// Overlaps are found in any block, the last partial one too, and only within the base:
/// 20,000 respondents (two blocks), X on the even ones and Y on the odd ones but for one
/// respondent near the end with both; Z with X only on a respondent outside the base.
#[test]
fn columns_overlap_only_where_they_share_a_respondent_of_the_base() {
    let definition = r#"
code = "OVL"
name = "Overlaps"
respondents = "respondents.csv"
id_column = "ID"
weight_column = "W"

[[population_bases]]
code = "IN"
expr = "OUT = 0"
"#;
    let both = 19_990;
    let outside = 5;
    let mut csv = String::from("ID,W,X,Y,Z,OUT\n");
    for i in 0..20_000usize {
        let x = u8::from(i % 2 == 0);
        let y = u8::from(i % 2 == 1 || i == both);
        let z = u8::from(i == outside || (i % 2 == 1 && i < 2_000));
        let out = u8::from(i == outside);
        csv.push_str(&format!("r{i},1.5,{x},{y},{z},{out}\n"));
    }
    let survey = crosstab_engine::survey_from_csv(definition, &csv).unwrap();
    let columns: Vec<_> = ["X = 1", "Y = 1", "Z = 1"]
        .iter()
        .map(|e| crosstab_contract::Expr::parse(e).unwrap())
        .collect();
    let sums = survey
        .table_sums("IN", None, None, &columns[..1], &columns, &|| false)
        .unwrap();
    // X and Y share respondent 19,990 alone, in the second block; X and Z share
    // respondent 5 alone, outside the base; Y and Z share the odd ones below 2,000.
    assert_eq!(
        sums.overlapping,
        [
            [false, true, false],
            [true, false, true],
            [false, true, false]
        ]
    );
    // X and Z are compared; Y, sharing respondents with both, with neither.
    assert_eq!(
        (sums.compared(0), sums.compared(1), sums.compared(2)),
        (true, false, true)
    );
    // Without the one respondent in common, X and Y would be compared.
    let apart = crosstab_engine::survey_from_csv(
        definition,
        &csv.replace(&format!("r{both},1.5,1,1,"), &format!("r{both},1.5,1,0,")),
    )
    .unwrap();
    let sums = apart
        .table_sums("IN", None, None, &columns[..1], &columns, &|| false)
        .unwrap();
    assert!(!sums.overlapping[0][1] && !sums.overlapping[1][0]);
}
