//! The survey errors that are not contract errors, and the tests of `Survey` over the
//! shared vectors. (`Survey.codebook()` returns the contract's `Codebook`, whose
//! TypeScript declaration the contract derives.)

/// Error code for bytes that are not a compiled survey (`Survey.fromCompiled`).
pub const INVALID_SURVEY: &str = "invalid_survey";
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
}
