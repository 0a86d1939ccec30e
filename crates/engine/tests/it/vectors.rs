//! Every shared vector end to end through validation and the engine, on the vector survey.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use crosstab_contract::{validate_body, vectors};
use crosstab_engine::{import, respond, Survey};
use serde_json::Value;

fn vector_survey() -> Survey {
    let path = vectors::dir().join("survey/survey.toml");
    let bytes = import::compile_file(Path::new(&path)).unwrap();
    Survey::from_bytes(&bytes).unwrap()
}

#[test]
fn every_vector_end_to_end() {
    let survey = vector_survey();
    let mut failures = Vec::new();
    let vectors = vectors::load();
    assert!(vectors.len() >= 40, "only {} vectors", vectors.len());
    for (path, vector) in vectors {
        // The request as a body (its JSON text), as the server reads it.
        let text = vector.body_text().into_bytes();
        let (status, body): (u16, Value) = match validate_body(&text).and_then(|valid| {
            let named = (valid.request.survey_code == survey.code()).then_some(&survey);
            respond(named, &valid)
        }) {
            Ok(response) => (200, serde_json::to_value(response).unwrap()),
            Err(error) => (
                error.status(),
                serde_json::to_value(error.envelope()).unwrap(),
            ),
        };
        if status != vector.expect.status {
            failures.push(format!("{}: status {status}, body {body}", vector.name));
            continue;
        }
        if vectors::blessing() && status != 200 {
            // Only wording is blessed: the hand-written code and field must already agree.
            let code = |v: &Value| v.pointer("/error/code").cloned();
            let field = |v: &Value| v.pointer("/error/field").cloned();
            assert_eq!(code(&vector.expect.body), code(&body), "{}", vector.name);
            assert_eq!(field(&vector.expect.body), field(&body), "{}", vector.name);
            vectors::bless(&path, &body);
            continue;
        }
        if !vectors::matches(&vector.expect.body, &body) {
            failures.push(format!(
                "{}:\n  expected {}\n  actual   {body}",
                vector.name, vector.expect.body
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failing vectors:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
