//! The public survey definition format: a TOML file beside a respondent-level file (CSV,
//! or with the `fs` feature SPSS `.sav`/`.zsav` or Parquet).

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
    /// Path of the respondent file, relative to the definition file.
    pub respondents: String,
    /// The respondent file's format; by default chosen by its extension.
    #[serde(default)]
    pub format: Option<SourceFormat>,
    /// Column holding each respondent's id (any string, unique).
    pub id_column: String,
    /// Column holding each respondent's projection weight (or, for an unweighted
    /// survey, none and `unweighted = true`).
    #[serde(default)]
    pub weight_column: Option<String>,
    /// Every respondent weighs 1 (`WgtAud` is a count of respondents): said outright, so
    /// a definition that forgot its weight column is refused rather than unweighted.
    #[serde(default)]
    pub unweighted: bool,
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

/// The format of a respondent file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceFormat {
    /// Comma-separated values with a header row.
    Csv,
    /// SPSS system file (uncompressed or bytecode-compressed).
    Sav,
    /// SPSS system file with zlib-compressed data.
    Zsav,
    /// Apache Parquet.
    Parquet,
}

impl SourceFormat {
    /// The format a file name implies (case-insensitive extension), if any.
    pub fn from_extension(path: &str) -> Option<SourceFormat> {
        let (_, extension) = path.rsplit_once('.')?;
        match extension.to_ascii_lowercase().as_str() {
            "csv" | "txt" => Some(SourceFormat::Csv),
            "sav" => Some(SourceFormat::Sav),
            "zsav" => Some(SourceFormat::Zsav),
            "parquet" => Some(SourceFormat::Parquet),
            _ => None,
        }
    }

    /// Its name as the definition and `survey list` write it.
    pub fn name(self) -> &'static str {
        match self {
            SourceFormat::Csv => "csv",
            SourceFormat::Sav => "sav",
            SourceFormat::Zsav => "zsav",
            SourceFormat::Parquet => "parquet",
        }
    }

    /// Whether it is an SPSS system file (both are read by one reader).
    pub fn is_spss(self) -> bool {
        matches!(self, SourceFormat::Sav | SourceFormat::Zsav)
    }
}

impl SurveyDefinition {
    /// The respondent file's format: `format` when given, else the file's extension,
    /// else CSV (as before formats existed).
    pub fn source_format(&self) -> SourceFormat {
        self.format
            .or_else(|| SourceFormat::from_extension(&self.respondents))
            .unwrap_or(SourceFormat::Csv)
    }
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
