//! What a survey offers to query: variables, values, named codes, bases and groups.

use serde::Serialize;

use crate::survey::Survey;

/// Variables with more distinct values than this list a range instead of each value.
const MAX_LISTED_VALUES: usize = 200;

/// The survey's codebook, for catalogs and query builders.
#[derive(Debug, Clone, Serialize, PartialEq)]
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
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GroupEntry {
    /// The value requests name.
    pub value: String,
    /// Display label.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// One population base.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BaseEntry {
    /// `PopulationBaseCode`.
    pub code: String,
    /// Display label.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Its expression.
    pub expr: String,
    /// Unweighted respondents.
    pub respondents: u64,
    /// Weighted total, in absolute terms.
    pub weighted: f64,
}

/// One named code.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CodeEntry {
    /// The target code.
    pub code: String,
    /// Display label.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Its expression.
    pub expr: String,
}

/// One variable.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VariableEntry {
    /// Name used in expressions.
    pub name: String,
    /// Display label.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Number of distinct values.
    pub distinct: usize,
    /// Smallest value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    /// Largest value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    /// The values with their labels (omitted past 200 distinct values).
    pub values: Vec<ValueEntry>,
}

/// One value of a variable.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ValueEntry {
    /// The value.
    pub value: f64,
    /// Display label.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

impl Survey {
    /// The survey's codebook, with each base's totals.
    pub fn codebook(&self) -> Codebook {
        let header = self.header();
        let variables = header
            .variables
            .iter()
            .enumerate()
            .map(|(index, variable)| {
                let dict = self.column(index).dict;
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
            weight_total: crate::bitset::sum_all(self.weights()),
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
