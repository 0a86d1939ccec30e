//! TypeScript-visible mirror of the engine's codebook (see [`crate::types`] for why
//! mirrors), and the survey errors that are not contract errors.

use serde::Serialize;
use tsify::Tsify;

use crosstab_engine::codebook as engine;

/// Error code for bytes that are not a compiled survey (`Survey.fromCompiled`).
pub const INVALID_SURVEY: &str = "invalid_survey";
/// Error code for a survey definition or CSV that does not import (`Survey.fromCsv`).
pub const INVALID_SURVEY_SOURCE: &str = "invalid_survey_source";

/// What a survey offers to query: variables, values, named codes, bases and groups.
#[derive(Debug, Clone, PartialEq, Serialize, Tsify)]
#[serde(rename_all = "camelCase")]
pub struct Codebook {
    /// The `SurveyCode`.
    pub code: String,
    /// Display name.
    pub name: String,
    /// Number of respondents.
    pub respondents: u64,
    /// Sum of all weights.
    pub weight_total: f64,
    /// Unit multiplier for `WgtAud`.
    pub audience_report_units: u32,
    /// `Stbl` is 1 when `Resps` is at most this.
    pub unstable_max_resps: u64,
    /// Authorization groups.
    pub groups: Vec<GroupEntry>,
    /// Population bases with their totals.
    pub bases: Vec<BaseEntry>,
    /// Named codes.
    pub codes: Vec<CodeEntry>,
    /// Variables and their values.
    pub variables: Vec<VariableEntry>,
}

/// One authorization group.
#[derive(Debug, Clone, PartialEq, Serialize, Tsify)]
#[serde(rename_all = "camelCase")]
pub struct GroupEntry {
    /// The value requests name in `AuthorizationGroup`.
    pub value: String,
    /// Display label.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[tsify(optional)]
    pub label: Option<String>,
}

/// One population base.
#[derive(Debug, Clone, PartialEq, Serialize, Tsify)]
#[serde(rename_all = "camelCase")]
pub struct BaseEntry {
    /// `PopulationBaseCode`.
    pub code: String,
    /// Display label.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[tsify(optional)]
    pub label: Option<String>,
    /// Its expression.
    pub expr: String,
    /// Unweighted respondents.
    pub respondents: u64,
    /// Weighted total, in absolute terms.
    pub weighted: f64,
}

/// One named code.
#[derive(Debug, Clone, PartialEq, Serialize, Tsify)]
#[serde(rename_all = "camelCase")]
pub struct CodeEntry {
    /// The target code.
    pub code: String,
    /// Display label.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[tsify(optional)]
    pub label: Option<String>,
    /// Its expression.
    pub expr: String,
}

/// One variable.
#[derive(Debug, Clone, PartialEq, Serialize, Tsify)]
#[serde(rename_all = "camelCase")]
pub struct VariableEntry {
    /// Name used in expressions.
    pub name: String,
    /// Display label.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[tsify(optional)]
    pub label: Option<String>,
    /// Number of distinct values.
    pub distinct: usize,
    /// Smallest value.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[tsify(optional)]
    pub min: Option<f64>,
    /// Largest value.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[tsify(optional)]
    pub max: Option<f64>,
    /// The values with their labels (empty past 200 distinct values).
    pub values: Vec<ValueEntry>,
}

/// One value of a variable.
#[derive(Debug, Clone, PartialEq, Serialize, Tsify)]
#[serde(rename_all = "camelCase")]
pub struct ValueEntry {
    /// The value.
    pub value: f64,
    /// Display label.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[tsify(optional)]
    pub label: Option<String>,
}

impl From<engine::Codebook> for Codebook {
    fn from(codebook: engine::Codebook) -> Self {
        let engine::Codebook {
            code,
            name,
            respondents,
            weight_total,
            audience_report_units,
            unstable_max_resps,
            groups,
            bases,
            codes,
            variables,
        } = codebook;
        Codebook {
            code,
            name,
            respondents,
            weight_total,
            audience_report_units,
            unstable_max_resps,
            groups: groups
                .into_iter()
                .map(|engine::GroupEntry { value, label }| GroupEntry { value, label })
                .collect(),
            bases: bases
                .into_iter()
                .map(
                    |engine::BaseEntry {
                         code,
                         label,
                         expr,
                         respondents,
                         weighted,
                     }| BaseEntry {
                        code,
                        label,
                        expr,
                        respondents,
                        weighted,
                    },
                )
                .collect(),
            codes: codes
                .into_iter()
                .map(|engine::CodeEntry { code, label, expr }| CodeEntry { code, label, expr })
                .collect(),
            variables: variables
                .into_iter()
                .map(
                    |engine::VariableEntry {
                         name,
                         label,
                         distinct,
                         min,
                         max,
                         values,
                     }| VariableEntry {
                        name,
                        label,
                        distinct,
                        min,
                        max,
                        values: values
                            .into_iter()
                            .map(|engine::ValueEntry { value, label }| ValueEntry { value, label })
                            .collect(),
                    },
                )
                .collect(),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crosstab_contract::{validate_body, vectors};

    fn vector_survey() -> crosstab_engine::Survey {
        let dir = vectors::dir().join("survey");
        let toml = std::fs::read_to_string(dir.join("survey.toml")).unwrap();
        let csv = std::fs::read_to_string(dir.join("respondents.csv")).unwrap();
        crosstab_engine::survey_from_csv(&toml, &csv).unwrap()
    }

    #[test]
    fn codebook_mirror_serializes_like_the_engine() {
        let codebook = vector_survey().codebook();
        assert_eq!(
            serde_json::to_value(&codebook).unwrap(),
            serde_json::to_value(Codebook::from(codebook)).unwrap()
        );
    }

    #[test]
    fn every_vector_through_crate_crosstab() {
        let survey = vector_survey();
        for (_, vector) in vectors::load() {
            let text = serde_json::to_vec(&vector.request).unwrap();
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
