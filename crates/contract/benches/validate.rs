//! What validation costs a request before the engine sees it (criterion): a body as the
//! server and the npm engine read it, and the target expressions alone.
//!
//! `cargo bench -p crosstab-contract --bench validate`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use criterion::Criterion;
use crosstab_contract::{validate_body, Expr};

/// Targets of the cold benches' shapes (`scripts/bench-npm-cold.mjs`, the peers bench).
const TARGETS: [&str; 4] = [
    "AGE BETWEEN 25 AND 54 AND P_0017 = 1",
    "GENDER = 2 AND AGE BETWEEN 18 AND 34",
    "HHSIZE IN (2, 3, 4) OR EDUCATION > 3",
    "NOT (AGE < 30 OR INCOME >= 4.5) AND F2554",
];

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let body = format!(
        r#"{{"SurveyCode":"DEMO","PopulationBaseCode":"ADULTS","TargetCodes":["{}","{}"]}}"#,
        TARGETS[0], TARGETS[1]
    );
    assert!(validate_body(body.as_bytes()).is_ok());
    c.bench_function("validate_body/two_targets", |b| {
        b.iter(|| validate_body(black_box(body.as_bytes())).unwrap())
    });
    for (index, target) in TARGETS.iter().enumerate() {
        c.bench_function(&format!("parse/{index}"), |b| {
            b.iter(|| Expr::parse(black_box(target)).unwrap())
        });
    }
    c.final_summary();
}
