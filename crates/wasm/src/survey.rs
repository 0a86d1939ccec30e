//! The survey errors that are not contract errors, and the tests of `Survey` over the
//! shared vectors. (`Survey.codebook()` returns the contract's `Codebook`, whose
//! TypeScript declaration the contract derives.)

/// Error code for bytes that are not a compiled survey (`Survey.fromCompiled`).
pub const INVALID_SURVEY: &str = "invalid_survey";
/// Error code for a compiled survey too large for the memory left to the module
/// (`Survey.fromCompiled`; a WebAssembly page has 4 GiB at most).
pub const OUT_OF_MEMORY: &str = "out_of_memory";
/// Error code for a survey definition or CSV that does not import (`Survey.fromCsv`).
pub const INVALID_SURVEY_SOURCE: &str = "invalid_survey_source";

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use crosstab_contract::{validate_body, vectors};

    fn vector_survey() -> crosstab_engine::Survey {
        let dir = vectors::dir().join("survey");
        let toml = std::fs::read_to_string(dir.join("survey.toml")).unwrap();
        let csv = std::fs::read_to_string(dir.join("respondents.csv")).unwrap();
        crosstab_engine::survey_from_csv(&toml, &csv).unwrap()
    }

    #[test]
    fn every_vector_through_crate_crosstab() {
        let survey = vector_survey();
        for (_, vector) in vectors::load() {
            let text = vector.body_text().into_bytes();
            let (status, body) =
                match validate_body(&text).and_then(|valid| crate::crosstab(&survey, &valid)) {
                    Ok(response) => (200, serde_json::to_value(response).unwrap()),
                    Err(error) => (
                        error.status(),
                        serde_json::to_value(error.envelope()).unwrap(),
                    ),
                };
            assert_eq!(status, vector.expect.status, "{}", vector.name);
            assert!(
                vectors::matches(&vector.expect.body, &body),
                "{}: {body}",
                vector.name
            );
        }
    }

    #[test]
    fn a_table_is_answered_by_the_loaded_survey_when_it_names_none_or_that_one() {
        let survey = vector_survey();
        let asking = |survey: &str| {
            crate::table_request(&format!(
                r#"{{{survey} "populationBase": "ALL",
                    "rows": [{{"expression": "WOMEN", "label": "Women"}}],
                    "columns": [{{"expression": "SMOKER = 1"}}, {{"expression": "NOPE = 1"}}]}}"#
            ))
            .unwrap()
        };
        // Another survey named is refused, as `crosstab` refuses it.
        let error = survey
            .answer_table(asking(r#""survey": "OTHER","#))
            .unwrap_err();
        assert_eq!(error.code(), "forbidden_survey");
        let named = survey.answer_table(asking(r#""survey": "VEC","#)).unwrap();
        let request = asking("");
        let table = survey.answer_table(request).unwrap();
        assert_eq!(named, table);
        assert_eq!(table.survey, "VEC");
        assert_eq!(table.billed_calls, 0);
        assert_eq!(table.rows[0].label, "Women");
        assert!(table.columns[1].unknown && !table.columns[0].unknown);
        assert_eq!(table.cells[0].len(), 2);
        // Refusals are the server's envelopes.
        let error = crate::table_request(r#"{"rows": []}"#).unwrap_err();
        assert_eq!((error.status(), error.code()), (400, "invalid_request"));
        let empty = crate::table_request(r#"{"populationBase": "ALL", "rows": [], "columns": []}"#)
            .unwrap();
        let error = survey.answer_table(empty).unwrap_err();
        assert_eq!(
            error.envelope().error.unwrap().field.as_deref(),
            Some("rows")
        );
        let unknown_base = crate::table_request(
            r#"{"populationBase": "NOPE", "rows": [{"expression": "*"}], "columns": [{"expression": "*"}]}"#,
        )
        .unwrap();
        let error = survey.answer_table(unknown_base).unwrap_err();
        assert_eq!(error.code(), "invalid_population_base");
    }
}
