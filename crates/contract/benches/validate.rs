//! What validation costs a request before the engine sees it (criterion): a body as the
//! server and the npm engine read it, and the target expressions alone.
//!
//! `cargo bench -p crosstab-contract --bench validate`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use criterion::Criterion;
use crosstab_contract::{validate_body, Expr};

/// Targets of the cold benches' shapes (`scripts/bench-npm-cold.mjs`,
/// `crates/engine/benches/peers.rs`), named for the bench's output. Every number has at
/// most 15 digits, so the general float parser's fallback is not measured.
const TARGETS: [(&str, &str); 4] = [
    ("between_and_flag", "AGE BETWEEN 25 AND 54 AND P_0017 = 1"),
    (
        "compare_and_between",
        "GENDER = 2 AND AGE BETWEEN 18 AND 34",
    ),
    ("in_or_compare", "HHSIZE IN (2, 3, 4) OR EDUCATION > 3"),
    (
        "not_or_and_code",
        "NOT (AGE < 30 OR INCOME >= 4.5) AND F2554",
    ),
];

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let body = format!(
        r#"{{"SurveyCode":"DEMO","PopulationBaseCode":"ADULTS","TargetCodes":["{}","{}"]}}"#,
        TARGETS[0].1, TARGETS[1].1
    );
    assert!(validate_body(body.as_bytes()).is_ok());
    c.bench_function("validate_body/two_targets", |b| {
        b.iter(|| validate_body(black_box(body.as_bytes())).unwrap())
    });
    for (name, target) in TARGETS {
        c.bench_function(&format!("parse/{name}"), |b| {
            b.iter(|| Expr::parse(black_box(target)).unwrap())
        });
    }
    c.final_summary();
}
