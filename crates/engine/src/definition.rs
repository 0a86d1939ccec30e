//! The public survey definition format: a TOML file beside a respondent-level CSV.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

use crosstab_contract::limits::{DEFAULT_AUDIENCE_REPORT_UNITS, DEFAULT_UNSTABLE_MAX_RESPS};

/// A survey definition as data teams write it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SurveyDefinition {
    /// The `SurveyCode`.
    pub code: String,
    /// Display name.
    pub name: String,
    /// Path of the respondent CSV, relative to the definition file.
    pub respondents: String,
    /// Column holding each respondent's id (any string, unique).
    pub id_column: String,
    /// Column holding each respondent's projection weight.
    pub weight_column: String,
    /// Column naming each respondent's authorization group.
    #[serde(default)]
    pub group_column: Option<String>,
    /// Unit multiplier for `WgtAud`.
    #[serde(default = "default_units")]
    pub audience_report_units: u32,
    /// `Stbl` is 1 when `Resps` is at most this.
    #[serde(default = "default_unstable")]
    pub unstable_max_resps: u64,
    /// Labels for group values.
    #[serde(default)]
    pub groups: BTreeMap<String, String>,
    /// Labels for variables and their values.
    #[serde(default)]
    pub variables: Vec<VariableDefinition>,
    /// Named codes.
    #[serde(default)]
    pub codes: Vec<ExprDefinition>,
    /// Population bases (at least one).
    #[serde(default)]
    pub population_bases: Vec<ExprDefinition>,
}

fn default_units() -> u32 {
    DEFAULT_AUDIENCE_REPORT_UNITS
}

fn default_unstable() -> u64 {
    DEFAULT_UNSTABLE_MAX_RESPS
}

/// Labels for one variable.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VariableDefinition {
    /// Column name.
    pub name: Spanned<String>,
    /// Display label.
    #[serde(default)]
    pub label: Option<String>,
    /// Labels by value (keys are numbers written as strings).
    #[serde(default)]
    pub values: BTreeMap<String, String>,
}

/// A named code or a population base.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExprDefinition {
    /// Its code.
    pub code: Spanned<String>,
    /// Display label.
    #[serde(default)]
    pub label: Option<String>,
    /// Its target expression.
    pub expr: Spanned<String>,
}

/// 1-based line of a byte offset in `text`.
pub(crate) fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()
        .iter()
        .take(offset)
        .filter(|b| **b == b'\n')
        .count()
        + 1
}
