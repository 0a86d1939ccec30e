//! What a survey offers to query: variables, values, named codes, bases and groups.
//!
//! The types are the `/app` contract's ([`crosstab_contract::app`]), so the server, the
//! app and the npm package read the one codebook this module builds.

pub use crosstab_contract::app::{
    BaseEntry, CodeEntry, Codebook, GroupEntry, ValueEntry, VariableEntry,
};

use crate::survey::Survey;

/// Variables with more distinct values than this list a range instead of each value.
const MAX_LISTED_VALUES: usize = 200;

impl Survey {
    /// The survey's codebook, with each base's totals.
    pub fn codebook(&self) -> Codebook {
        let header = self.header();
        let variables = header
            .variables
            .iter()
            .map(|variable| {
                let dict = self.column_of(variable).dict;
                let label_of = |value: f64| {
                    variable
                        .value_labels
                        .iter()
                        .find(|(v, _)| *v == value)
                        .map(|(_, label)| label.clone())
                };
                let values = if dict.len() <= MAX_LISTED_VALUES {
                    dict.iter()
                        .map(|value| ValueEntry {
                            value: *value,
                            label: label_of(*value),
                        })
                        .collect()
                } else {
                    Vec::new()
                };
                VariableEntry {
                    name: variable.name.clone(),
                    label: variable.label.clone(),
                    distinct: dict.len(),
                    min: dict.first().copied(),
                    max: dict.last().copied(),
                    values,
                }
            })
            .collect();
        Codebook {
            code: header.code.clone(),
            name: header.name.clone(),
            respondents: header.respondents,
            weight_total: crate::weights::total(self.weight_source(), self.weights().len()),
            data_version: self.data_version(),
            audience_report_units: header.audience_report_units,
            unstable_max_resps: header.unstable_max_resps,
            groups: header
                .groups
                .iter()
                .map(|g| GroupEntry {
                    value: g.value.clone(),
                    label: g.label.clone(),
                })
                .collect(),
            bases: header
                .bases
                .iter()
                .map(|b| {
                    let totals = self.base_totals(&b.code);
                    BaseEntry {
                        code: b.code.clone(),
                        label: b.label.clone(),
                        expr: b.expr.clone(),
                        respondents: totals.map_or(0, |t| t.count),
                        weighted: totals.map_or(0.0, |t| t.weight),
                        // Per-group totals depend on a caller's grant: `/app` adds them.
                        group_totals: None,
                    }
                })
                .collect(),
            codes: header
                .codes
                .iter()
                .map(|c| CodeEntry {
                    code: c.code.clone(),
                    label: c.label.clone(),
                    expr: c.expr.clone(),
                })
                .collect(),
            variables,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use crosstab_contract::vectors;
    use serde_json::json;

    /// The engine's codebook of the test-vector survey, member by member: what the npm
    /// package's `Survey.codebook()` returns and what `/app` starts from.
    #[test]
    fn vector_survey_codebook() {
        let dir = vectors::dir().join("survey");
        let toml = std::fs::read_to_string(dir.join("survey.toml")).unwrap();
        let csv = std::fs::read_to_string(dir.join("respondents.csv")).unwrap();
        let survey = crate::survey_from_csv(&toml, &csv).unwrap();
        let mut book = survey.codebook();
        assert!(book.bases.iter().all(|b| b.group_totals.is_none()));
        // The file's checksum, which the format's tests pin down.
        let version = book.data_version.take().unwrap();
        assert_eq!(Some(&version), survey.data_version().as_ref());
        assert!(version.len() == 32 && version.bytes().all(|b| b.is_ascii_hexdigit()));
        let value = |v: f64, label: Option<&str>| match label {
            Some(label) => json!({"value": v, "label": label}),
            None => json!({"value": v}),
        };
        assert_eq!(
            serde_json::to_value(&book).unwrap(),
            json!({
                "code": "VEC", "name": "Test-vector survey", "respondents": 8,
                "weightTotal": 15500.0, "audienceReportUnits": 1000, "unstableMaxResps": 2,
                "groups": [{"value": "N", "label": "North"}, {"value": "S", "label": "South"}],
                "bases": [
                    {"code": "ALL", "label": "Everyone", "expr": "*",
                     "respondents": 8, "weighted": 15500.0},
                    {"code": "A35PLUS", "label": "Aged 35 and over", "expr": "AGE >= 35",
                     "respondents": 5, "weighted": 9500.0}
                ],
                "codes": [
                    {"code": "WOMEN", "label": "Women", "expr": "GENDER = 2"},
                    {"code": "F2554", "label": "Women 25-54",
                     "expr": "GENDER = 2 AND AGE BETWEEN 25 AND 54"}
                ],
                "variables": [
                    {"name": "GENDER", "label": "Gender", "distinct": 2, "min": 1.0, "max": 2.0,
                     "values": [value(1.0, Some("Male")), value(2.0, Some("Female"))]},
                    {"name": "AGE", "distinct": 8, "min": 20.0, "max": 60.0,
                     "values": ([20.0, 25.0, 30.0, 35.0, 40.0, 50.0, 54.0, 60.0]
                         .map(|v| value(v, None)))},
                    {"name": "SMOKER", "label": "Smokes", "distinct": 2, "min": 0.0, "max": 1.0,
                     "values": [value(0.0, Some("No")), value(1.0, Some("Yes"))]}
                ]
            })
        );
    }
}
