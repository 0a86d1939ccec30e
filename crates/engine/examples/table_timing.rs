//! Times a 20-row × 10-column table with every figure on the demo survey (50,000
//! respondents) and prints the figures: the first table (plans and the survey's squared
//! weights made) and the median of repeats. `cargo run --release -p crosstab-engine --example
//! table_timing [REPEATS]`; `scripts/bench-npm.sh` runs it beside the npm package's.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use crosstab_contract::app::{TableAxis, TableRequest};
use crosstab_engine::demo::{self, DemoConfig};
use crosstab_engine::Survey;

/// The benchmark's table: 20 product flags against region, gender, age bands and smoking.
pub fn request(survey: &Survey) -> TableRequest {
    let axis = |expression: String| TableAxis {
        expression,
        label: None,
    };
    let flags = survey
        .variable_names()
        .filter(|name| name.starts_with("P_"))
        .take(20)
        .map(|name| axis(format!("{name} = 1")))
        .collect();
    let columns = [
        "REGION = 1",
        "REGION = 2",
        "REGION = 3",
        "REGION = 4",
        "GENDER = 1",
        "GENDER = 2",
        "AGE BETWEEN 18 AND 34",
        "AGE BETWEEN 35 AND 54",
        "AGE >= 55",
        "SMOKER = 1",
    ];
    TableRequest {
        survey: survey.code().to_owned(),
        population_base: "ADULTS".into(),
        group: None,
        filter: None,
        rows: flags,
        columns: columns.iter().map(|c| axis((*c).to_owned())).collect(),
        confidence: Default::default(),
        bonferroni: false,
        holm: false,
    }
}

fn main() {
    let repeats: usize = std::env::args()
        .nth(1)
        .map_or(50, |n| n.parse().expect("REPEATS is a number"));
    let config = DemoConfig::default();
    let survey = Survey::from_bytes(&demo::compile(&config).unwrap()).unwrap();
    time_tables(&survey, "DEMO", repeats);
    // The same respondents with full-precision weights (each a third of the demo's), as
    // raking writes them: `Σw` from binary planes, `Σw²` member by member, both exact.
    let csv: String = demo::csv(&config)
        .lines()
        .enumerate()
        .map(|(line, text)| match (line, text.split_once(',')) {
            (1.., Some((id, rest))) => {
                let (weight, rest) = rest.split_once(',').unwrap_or((rest, ""));
                let third = weight.parse::<f64>().unwrap() / 3.0;
                format!("{id},{third},{rest}\n")
            }
            _ => format!("{text}\n"),
        })
        .collect();
    let thirds = crosstab_engine::survey_from_csv(&demo::definition(&config), &csv).unwrap();
    time_tables(&thirds, "DEMO, full-precision weights", repeats);
}

fn time_tables(survey: &Survey, what: &str, repeats: usize) {
    let valid = request(survey).validate().unwrap();
    assert_eq!((valid.rows.len(), valid.columns.len()), (20, 10));
    let start = Instant::now();
    let table = survey.table(&valid).unwrap();
    let first = start.elapsed();
    let mut times: Vec<f64> = (0..repeats)
        .map(|_| {
            let start = Instant::now();
            std::hint::black_box(survey.table(&valid).unwrap());
            start.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(f64::total_cmp);
    // A 1 x 1 table: the fixed part (the base's sums; the squared weights are kept).
    let mut small = request(survey);
    small.rows.truncate(1);
    small.columns.truncate(1);
    let small = small.validate().unwrap();
    let mut small_times: Vec<f64> = (0..repeats)
        .map(|_| {
            let start = Instant::now();
            std::hint::black_box(survey.table(&small).unwrap());
            start.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    small_times.sort_by(f64::total_cmp);
    println!(
        "native table 1x1 on {what} (the fixed part): median {:.2} ms",
        small_times[small_times.len() / 2]
    );
    println!(
        "native table 20x10 on {what} ({} respondents): first {:.2} ms, median {:.2} ms, min {:.2} ms over {repeats} (corner weight {}, corner weight² {})",
        survey.respondents(),
        first.as_secs_f64() * 1e3,
        times[times.len() / 2],
        times[0],
        table.total.weight,
        table.total.weight_squared
    );
}
