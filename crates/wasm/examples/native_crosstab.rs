//! The native side of the npm package's parity tests and bench: the same engine and
//! validation as the WASM build, run natively.
//!
//! ```text
//! native_crosstab crosstab SURVEY.toml RESPONDENTS.csv REQUESTS.json
//!     answers each request of the JSON array: prints [{status, body}, ...]
//! native_crosstab table SURVEY.toml RESPONDENTS.csv REQUESTS.json
//!     computes each table request of the JSON array as `Survey.table` does: prints
//!     [{status, body}, ...]
//! native_crosstab table-shares SURVEY.toml RESPONDENTS.csv REQUESTS.json
//!     the same, with the shares' intervals the app draws beside each table:
//!     [{status, body, shareIntervals}, ...]
//! native_crosstab table-bench COMPILED REQUEST.json [ITERATIONS]
//!     prints {"tableMs": ms per table (median), "table": the table} for one request
//! native_crosstab demo OUT_DIR [RESPONDENTS]
//!     writes the demo survey's survey.toml, respondents.csv and survey.ctsv (compiled)
//! native_crosstab bench COMPILED REQUEST.json [ITERATIONS]
//!     prints {"engineUs": µs per Survey::crosstab, "validateAndEngineUs": µs per
//!     validate + crosstab} for one request on a compiled survey
//! ```

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use crosstab_contract::app::{TableCell, TableRequest};
use crosstab_contract::{validate_body, validate_value};
use crosstab_engine::{demo, import, survey_from_csv, Survey};
use serde_json::{json, Value};

#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error("{0}")]
    Usage(&'static str),
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Other(String),
}

fn read(path: &str) -> Result<String, Failure> {
    std::fs::read_to_string(path).map_err(|source| Failure::Io {
        path: path.to_owned(),
        source,
    })
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), Failure> {
    std::fs::write(path, bytes).map_err(|source| Failure::Io {
        path: path.display().to_string(),
        source,
    })
}

/// The answer to `request` sent as a body (its JSON text, as the server would read it).
fn answer(survey: &Survey, request: &Value) -> Value {
    let body = serde_json::to_vec(request).unwrap_or_default();
    match validate_body(&body).and_then(|valid| crosstab_wasm::crosstab(survey, &valid)) {
        Ok(response) => json!({"status": 200, "body": response}),
        Err(error) => json!({"status": error.status(), "body": error.envelope()}),
    }
}

/// The table for `request` as `Survey.table` computes it (from its JSON value, as JS
/// passes it).
fn computed(
    survey: &Survey,
    request: &Value,
) -> Result<crosstab_contract::app::Table, crosstab_contract::ApiError> {
    crosstab_wasm::table_request(&request.to_string())
        .and_then(|request| survey.answer_table(request))
}

/// The table for `request` as `Survey.table` answers it.
fn table(survey: &Survey, request: &Value) -> Value {
    match computed(survey, request) {
        Ok(table) => json!({"status": 200, "body": table}),
        Err(error) => json!({"status": error.status(), "body": error.envelope()}),
    }
}

/// [`table`]'s answer and beside it the shares' intervals the app draws from its cells
/// (`shareIntervals`: `cells`, `rowTotals`, `columnTotals` and `total` as the table has
/// them, each cell's `[vertical, horizontal]`, each `[low, high]` or `null`).
fn table_with_shares(survey: &Survey, request: &Value) -> Value {
    match computed(survey, request) {
        Ok(table) => {
            // A cell's shares' intervals, `column` and `row` its wholes.
            let intervals = |cell: &TableCell, column: &TableCell, row: &TableCell| {
                json!([
                    cell.vertical_interval(column, table.confidence),
                    cell.horizontal_interval(row, table.confidence)
                ])
            };
            let base = &table.total;
            let shares = json!({
                "cells": table.cells.iter().zip(&table.row_totals).map(|(cells, row)| {
                    cells.iter().zip(&table.column_totals)
                        .map(|(cell, column)| intervals(cell, column, row))
                        .collect::<Vec<_>>()
                }).collect::<Vec<_>>(),
                // The Total column's vertical shares are of the base; the Total row's
                // horizontal ones too.
                "rowTotals": table.row_totals.iter().map(|row| intervals(row, base, row)).collect::<Vec<_>>(),
                "columnTotals": table.column_totals.iter()
                    .map(|column| intervals(column, column, base)).collect::<Vec<_>>(),
                "total": intervals(base, base, base),
            });
            json!({"status": 200, "body": table, "shareIntervals": shares})
        }
        Err(error) => json!({"status": error.status(), "body": error.envelope()}),
    }
}

fn run(args: &[String]) -> Result<String, Failure> {
    const USAGE: &str = "usage: native_crosstab crosstab|table|table-shares SURVEY.toml RESPONDENTS.csv REQUESTS.json | demo OUT_DIR [RESPONDENTS] | bench|table-bench COMPILED REQUEST.json [ITERATIONS]";
    match args {
        [command, toml, csv, requests] if command == "table" || command == "table-shares" => {
            let survey = survey_from_csv(&read(toml)?, &read(csv)?)
                .map_err(|e| Failure::Other(e.to_string()))?;
            let requests: Vec<Value> = serde_json::from_str(&read(requests)?)
                .map_err(|e| Failure::Other(format!("{requests}: {e}")))?;
            let answer = if command == "table" {
                table
            } else {
                table_with_shares
            };
            let answers: Vec<Value> = requests.iter().map(|r| answer(&survey, r)).collect();
            Ok(Value::Array(answers).to_string())
        }
        [command, compiled, request, rest @ ..] if command == "table-bench" && rest.len() <= 1 => {
            let iterations: usize = match rest.first() {
                Some(n) => n
                    .parse()
                    .map_err(|_| Failure::Usage("ITERATIONS must be a number"))?,
                None => 50,
            };
            let bytes = std::fs::read(compiled).map_err(|source| Failure::Io {
                path: compiled.clone(),
                source,
            })?;
            let survey = Survey::from_bytes(&bytes).map_err(|e| Failure::Other(e.to_string()))?;
            let request: TableRequest = serde_json::from_str(&read(request)?)
                .map_err(|e| Failure::Other(format!("{request}: {e}")))?;
            let mut times = Vec::with_capacity(iterations);
            let mut answer = None;
            for _ in 0..iterations.max(1) {
                let start = Instant::now();
                let table = survey
                    .answer_table(request.clone())
                    .map_err(|e| Failure::Other(e.to_string()))?;
                times.push(start.elapsed().as_secs_f64() * 1e3);
                answer = Some(table);
            }
            times.sort_by(f64::total_cmp);
            Ok(json!({"tableMs": times[times.len() / 2], "table": answer}).to_string())
        }
        [command, toml, csv, requests] if command == "crosstab" => {
            let survey = survey_from_csv(&read(toml)?, &read(csv)?)
                .map_err(|e| Failure::Other(e.to_string()))?;
            let requests: Vec<Value> = serde_json::from_str(&read(requests)?)
                .map_err(|e| Failure::Other(format!("{requests}: {e}")))?;
            let answers: Vec<Value> = requests.iter().map(|r| answer(&survey, r)).collect();
            Ok(Value::Array(answers).to_string())
        }
        [command, out, rest @ ..] if command == "demo" && rest.len() <= 1 => {
            let mut config = demo::DemoConfig::default();
            if let Some(count) = rest.first() {
                config.respondents = count
                    .parse()
                    .map_err(|_| Failure::Usage("RESPONDENTS must be a number"))?;
            }
            let out = Path::new(out);
            std::fs::create_dir_all(out).map_err(|source| Failure::Io {
                path: out.display().to_string(),
                source,
            })?;
            let definition = demo::definition(&config);
            let csv = demo::csv(&config);
            let compiled = import::compile(
                &definition,
                "survey.toml",
                csv.as_bytes(),
                "respondents.csv",
            )
            .map_err(|e| Failure::Other(e.to_string()))?;
            write(&out.join("survey.toml"), definition.as_bytes())?;
            write(&out.join("respondents.csv"), csv.as_bytes())?;
            write(&out.join("survey.ctsv"), &compiled)?;
            Ok(
                json!({"respondents": config.respondents, "compiledBytes": compiled.len()})
                    .to_string(),
            )
        }
        [command, compiled, request, rest @ ..] if command == "bench" && rest.len() <= 1 => {
            let iterations: u32 = match rest.first() {
                Some(n) => n
                    .parse()
                    .map_err(|_| Failure::Usage("ITERATIONS must be a number"))?,
                None => 20_000,
            };
            let bytes = std::fs::read(compiled).map_err(|source| Failure::Io {
                path: compiled.clone(),
                source,
            })?;
            let survey = Survey::from_bytes(&bytes).map_err(|e| Failure::Other(e.to_string()))?;
            let request: Value = serde_json::from_str(&read(request)?)
                .map_err(|e| Failure::Other(format!("{request}: {e}")))?;
            let valid = validate_value(&request).map_err(|e| Failure::Other(e.to_string()))?;
            let time = |f: &dyn Fn() -> bool| {
                for _ in 0..iterations.min(1000) {
                    std::hint::black_box(f());
                }
                let start = Instant::now();
                for _ in 0..iterations {
                    std::hint::black_box(f());
                }
                start.elapsed().as_secs_f64() * 1e6 / f64::from(iterations.max(1))
            };
            let engine =
                time(&|| crosstab_wasm::crosstab(&survey, std::hint::black_box(&valid)).is_ok());
            let whole = time(&|| {
                validate_value(std::hint::black_box(&request))
                    .and_then(|valid| crosstab_wasm::crosstab(&survey, &valid))
                    .is_ok()
            });
            let response = crosstab_wasm::crosstab(&survey, &valid)
                .map_err(|e| Failure::Other(e.to_string()))?;
            Ok(
                json!({"engineUs": engine, "validateAndEngineUs": whole, "response": response})
                    .to_string(),
            )
        }
        _ => Err(Failure::Usage(USAGE)),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(output) => {
            println!("{output}");
            ExitCode::SUCCESS
        }
        Err(failure) => {
            eprintln!("native_crosstab: {failure}");
            ExitCode::FAILURE
        }
    }
}
