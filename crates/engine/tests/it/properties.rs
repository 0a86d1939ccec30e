//! Property tests: random expressions over random surveys give the same respondents and
//! weights as a naive row-by-row evaluator.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Write as _;

use crosstab_contract::{CmpOp, Expr};
use crosstab_engine::{exact_sum, survey_from_csv, Bitset, Survey, Tally};
use proptest::prelude::*;

const VARS: [&str; 4] = ["A", "B", "C", "D"];

/// One respondent: weight, then A, B, C and D (None = missing).
type Row = (f64, Option<i32>, Option<i32>, Option<i32>, Option<i32>);

/// Random survey: rows of (weight, A, B, C, D) with small value ranges and missing
/// cells; C is wide so it uses 16-bit codes, D has at most three values so it is stored
/// in two bit planes.
fn arb_rows() -> impl Strategy<Value = Vec<Row>> {
    let cell = |min: i32, max: i32| proptest::option::weighted(0.85, min..max);
    proptest::collection::vec(
        (
            0.0f64..1000.0,
            cell(-2, 5),
            cell(-2, 3),
            cell(-2, 400),
            cell(-1, 2),
        ),
        1..200,
    )
}

/// The value of `var` in `row` as the test wrote it, not as the survey stores it.
fn cell(rows: &[Row], var: &str, row: usize) -> Option<f64> {
    let (_, a, b, c, d) = rows.get(row)?;
    let value = match var {
        "A" => a,
        "B" => b,
        "C" => c,
        "D" => d,
        _ => &None,
    };
    value.map(f64::from)
}

fn arb_expr() -> impl Strategy<Value = Expr> {
    let var = proptest::sample::select(&VARS[..]).prop_map(str::to_owned);
    // -0.0 too: it equals 0.0 in every comparison and list.
    let number = prop_oneof![9 => (-3i32..6).prop_map(f64::from), 1 => Just(-0.0)];
    let op = prop_oneof![
        Just(CmpOp::Eq),
        Just(CmpOp::Ne),
        Just(CmpOp::Lt),
        Just(CmpOp::Le),
        Just(CmpOp::Gt),
        Just(CmpOp::Ge)
    ];
    let leaf = prop_oneof![
        Just(Expr::All),
        Just(Expr::Code("K".into())),
        (var.clone(), op, number.clone()).prop_map(|(var, op, value)| Expr::Compare {
            var,
            op,
            value
        }),
        (var.clone(), proptest::collection::vec(number.clone(), 1..4))
            .prop_map(|(var, values)| Expr::In { var, values }),
        (var, number.clone(), number).prop_map(|(var, low, high)| Expr::Between { var, low, high }),
    ];
    leaf.prop_recursive(4, 24, 3, |inner| {
        prop_oneof![
            inner.clone().prop_map(|e| Expr::Not(Box::new(e))),
            proptest::collection::vec(inner.clone(), 2..4).prop_map(Expr::And),
            proptest::collection::vec(inner, 2..4).prop_map(Expr::Or),
        ]
    })
}

/// The named code every random survey defines.
const K: &str = "A >= 1 AND NOT B = 0";

/// The row-by-row truth on a random survey, whose one named code is [`K`].
fn naive(rows: &[Row], expr: &Expr, row: usize) -> bool {
    let value = |var: &str, row: usize| cell(rows, var, row);
    eval_row(&value, expr, row, &|_, row| {
        naive(rows, &Expr::parse(K).unwrap(), row)
    })
}

fn build(rows: &[Row]) -> Survey {
    let toml = format!(
        "code = \"P\"\nname = \"p\"\nrespondents = \"r.csv\"\nid_column = \"ID\"\nweight_column = \"W\"\n\
         [[codes]]\ncode = \"K\"\nexpr = \"{K}\"\n[[population_bases]]\ncode = \"ALL\"\nexpr = \"*\"\n"
    );
    let mut csv = String::from("ID,W,A,B,C,D\n");
    let cell = |v: &Option<i32>| v.map_or(String::new(), |v| v.to_string());
    for (i, (w, a, b, c, d)) in rows.iter().enumerate() {
        let _ = writeln!(
            csv,
            "r{i},{w},{},{},{},{}",
            cell(a),
            cell(b),
            cell(c),
            cell(d)
        );
    }
    survey_from_csv(&toml, &csv).unwrap()
}

/// The survey's tally of `expr` over everyone, checked against the naive evaluator: its
/// count, and its weight the true sum of the chosen weights rounded once (full-precision
/// and widely spread weights too).
fn checked_tally(rows: &[Row], survey: &Survey, expr: &Expr) -> Result<Tally, TestCaseError> {
    let tally = survey.tally(expr, &Bitset::full(survey.respondents()));
    let chosen: Vec<f64> = (0..survey.respondents())
        .filter(|row| naive(rows, expr, *row))
        .map(|row| survey.weights()[row])
        .collect();
    prop_assert_eq!(tally.count, chosen.len() as u64, "{}", expr);
    let weight = exact_sum(chosen);
    prop_assert_eq!(
        tally.weight.to_bits(),
        weight.to_bits(),
        "{} {} {}",
        expr,
        tally.weight,
        weight
    );
    Ok(tally)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn engine_matches_naive_evaluation(rows in arb_rows(), expr in arb_expr()) {
        let survey = build(&rows);
        let tally = checked_tally(&rows, &survey, &expr)?;
        let everyone = Bitset::full(survey.respondents());
        // The canonical text of the expression answers the same, on its first sight
        // (one fused pass), its second (its sets are made and kept) and later (cached).
        let reparsed = Expr::parse(&expr.to_string()).unwrap();
        for _ in 0..3 {
            prop_assert_eq!(survey.tally(&reparsed, &everyone), tally);
        }
    }

    /// Weights spread over more binary exponents than bit planes hold (here from ~1e-40
    /// to ~1e28) are summed member by member, exactly: the true sum rounded once too.
    #[test]
    fn widely_spread_weights_sum_exactly(
        rows in arb_rows(),
        scales in proptest::collection::vec(
            prop_oneof![Just(1e-40), Just(1.0), Just(1e25)],
            200,
        ),
        expr in arb_expr(),
    ) {
        let rows: Vec<Row> = rows
            .into_iter()
            .zip(scales)
            .map(|((w, a, b, c, d), scale)| (w * scale, a, b, c, d))
            .collect();
        checked_tally(&rows, &build(&rows), &expr)?;
    }

    /// Two targets in one request are summed in one pass, as each alone would be.
    #[test]
    fn two_targets_answer_as_each_alone(
        rows in arb_rows(),
        decimal in any::<bool>(),
        first in arb_expr(),
        second in arb_expr(),
    ) {
        let rows: Vec<Row> = rows
            .into_iter()
            .map(|(w, a, b, c, d)| {
                (if decimal { (w * 100.0).round() / 100.0 } else { w }, a, b, c, d)
            })
            .collect();
        let survey = build(&rows);
        let everyone = Bitset::full(survey.respondents());
        let request = crosstab_contract::validate_value(&serde_json::json!({
            "SurveyCode": "P",
            "PopulationBaseCode": "ALL",
            "TargetCodes": [first.to_string(), second.to_string()],
        }))
        .unwrap();
        let response = survey.crosstab(&request).unwrap();
        for (result, expr) in response.results.iter().zip([&first, &second]) {
            let alone = survey.tally(expr, &everyone);
            prop_assert_eq!(result.resps, alone.count, "{}", expr);
            let units = f64::from(survey.audience_report_units());
            prop_assert_eq!(result.wgt_aud.to_bits(), (alone.weight / units).to_bits(), "{}", expr);
        }
    }

    /// Two-decimal weights are summed exactly: the sum is the true sum of the decimals,
    /// rounded once, whichever way the target was evaluated.
    #[test]
    fn decimal_weights_sum_exactly(rows in arb_rows(), expr in arb_expr()) {
        let rows: Vec<Row> = rows
            .into_iter()
            .map(|(w, a, b, c, d)| ((w * 100.0).round() / 100.0, a, b, c, d))
            .collect();
        let survey = build(&rows);
        let everyone = Bitset::full(survey.respondents());
        let (mut count, mut cents) = (0u64, 0u64);
        for row in 0..survey.respondents() {
            if naive(&rows, &expr, row) {
                count += 1;
                cents += (survey.weights()[row] * 100.0).round() as u64;
            }
        }
        for _ in 0..3 {
            let tally = survey.tally(&expr, &everyone);
            prop_assert_eq!(tally.count, count, "{}", expr);
            prop_assert_eq!(tally.weight.to_bits(), (cents as f64 / 100.0).to_bits(), "{}", expr);
        }
    }
}

/// Block boundaries: a survey of several 16,384-respondent blocks answers like the naive
/// evaluator, for leaves, tables, NOT, AND/OR with early exits, and a group filter.
#[test]
fn multi_block_surveys_match_naive_evaluation() {
    let config = crosstab_engine::demo::DemoConfig {
        respondents: 40_001,
        flags: 6,
        seed: 3,
    };
    let survey = Survey::from_bytes(&crosstab_engine::demo::compile(&config).unwrap()).unwrap();
    let everyone = Bitset::full(survey.respondents());
    let mut region_one = Bitset::empty(survey.respondents());
    for row in 0..survey.respondents() {
        if survey.value("REGION", row) == Some(1.0) {
            region_one.insert(row);
        }
    }
    let naive_code = |name: &str, row: usize| -> bool {
        match name {
            "F2554" => {
                survey.value("GENDER", row) == Some(2.0)
                    && survey
                        .value("AGE", row)
                        .is_some_and(|a| (25.0..=54.0).contains(&a))
            }
            _ => unreachable!(),
        }
    };
    for text in [
        "AGE >= 60",
        "INCOME != 3",
        "HHSIZE IN (1, 3, 7)",
        "NOT SMOKER = 1",
        "GENDER = 2 AND AGE BETWEEN 25 AND 54 AND NOT INCOME IN (1, 2)",
        "AGE > 200 AND GENDER = 1",
        "GENDER = 1 OR GENDER = 2 OR SMOKER = 1",
        "F2554 OR (EDUCATION >= 4 AND NOT F2554)",
        "*",
    ] {
        let expr = Expr::parse(text).unwrap();
        for filter in [&everyone, &region_one] {
            let tally = survey.tally(&expr, filter);
            let chosen: Vec<f64> = (0..survey.respondents())
                .filter(|row| filter.contains(*row))
                .filter(|row| {
                    eval_row(&|var, row| survey.value(var, row), &expr, *row, &naive_code)
                })
                .map(|row| survey.weights()[row])
                .collect();
            assert_eq!(tally.count, chosen.len() as u64, "{text}");
            // The demo's weights are short decimals: the sum of their nearest f64s,
            // rounded once, is within an ulp or two of the decimals' own.
            let weight = exact_sum(chosen);
            assert!(
                (tally.weight - weight).abs() <= 4.0 * f64::EPSILON * weight.max(1.0),
                "{text}"
            );
        }
    }
}

/// Whether `row` matches `expr`, from each variable's `value` and each named `code`.
fn eval_row(
    value: &dyn Fn(&str, usize) -> Option<f64>,
    expr: &Expr,
    row: usize,
    code: &dyn Fn(&str, usize) -> bool,
) -> bool {
    match expr {
        Expr::All => true,
        Expr::Code(name) => code(name, row),
        Expr::Compare { var, op, value: c } => value(var, row).is_some_and(|v| op.holds(v, *c)),
        Expr::In { var, values } => value(var, row).is_some_and(|v| values.contains(&v)),
        Expr::Between { var, low, high } => {
            value(var, row).is_some_and(|v| *low <= v && v <= *high)
        }
        Expr::Not(inner) => !eval_row(value, inner, row, code),
        Expr::And(items) => items.iter().all(|e| eval_row(value, e, row, code)),
        Expr::Or(items) => items.iter().any(|e| eval_row(value, e, row, code)),
    }
}
