//! The researcher's table: rows of targets against a banner of columns, every cell
//! `(row) AND (column)` within a population base (and group), with its reliability and a
//! column test. One definition for `POST /app/api/table` and the npm `Survey.table`.
//!
//! The statistics are those of a design with weights only, sampled with replacement, of
//! which the base is a domain, as R's `survey::svytotal(~y, subset(svydesign(ids = ~1,
//! weights = ~w), base))` over the `n` respondents of the group (or of the survey, without
//! one): each field's documentation gives its formula.
//! The engine computes them (`crosstab_engine::Survey::table`); this module only types
//! and validates.

use serde::{Deserialize, Serialize};

use crate::error::ApiError;
use crate::expr::Expr;
use crate::json::from_slice_strict;
use crate::limits::{MAX_TABLE_COLUMNS, MAX_TABLE_LABEL_CHARS, MAX_TABLE_ROWS};
use crate::validate::{check_identifier, parse_target, Refusal};
use crate::wire::{Stability, ALL_GROUPS};

/// Above this many billed calls the app asks before it runs a table on the server.
pub const TABLE_COST_PROMPT_THRESHOLD: u32 = 20;

/// The confidence of a table's intervals and tests, in percent: 90, 95 (the default) or
/// 99. Its tests are two-sided, at the level `1 − confidence` (10%, 5% or 1%). Read from
/// a JSON number (`95` or `95.0`; `null` is the default), written as a whole number.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(into = "u8")]
pub enum Confidence {
    /// 90%.
    Ninety,
    /// 95%.
    #[default]
    NinetyFive,
    /// 99%.
    NinetyNine,
}

impl Confidence {
    /// Every level, in order.
    pub const ALL: [Confidence; 3] = [
        Confidence::Ninety,
        Confidence::NinetyFive,
        Confidence::NinetyNine,
    ];

    /// In percent.
    pub fn percent(self) -> u8 {
        match self {
            Confidence::Ninety => 90,
            Confidence::NinetyFive => 95,
            Confidence::NinetyNine => 99,
        }
    }

    /// The tests' level `α`: the chance of calling a difference where there is none.
    pub fn alpha(self) -> f64 {
        match self {
            Confidence::Ninety => 0.10,
            Confidence::NinetyFive => 0.05,
            Confidence::NinetyNine => 0.01,
        }
    }

    /// The normal quantile of `1 − α/2` (R's `qnorm`): the interval's half-width in
    /// standard errors.
    pub fn z(self) -> f64 {
        match self {
            Confidence::Ninety => 1.644_853_626_951_472_2,
            Confidence::NinetyFive => 1.959_963_984_540_054,
            Confidence::NinetyNine => 2.575_829_303_548_900_4,
        }
    }

    /// The normal interval of an estimate with standard error `se`: `value ± z · se`
    /// (not clipped, as R's `confint`).
    pub fn interval(self, value: f64, se: f64) -> (f64, f64) {
        let z = self.z();
        (value - z * se, value + z * se)
    }
}

impl TryFrom<u8> for Confidence {
    type Error = String;

    fn try_from(percent: u8) -> Result<Self, Self::Error> {
        Confidence::ALL
            .into_iter()
            .find(|level| level.percent() == percent)
            .ok_or_else(|| format!("confidence is 90, 95 or 99 (percent), not {percent}"))
    }
}

impl<'de> Deserialize<'de> for Confidence {
    /// Whatever the value, a refusal that names the member and the levels.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        if value.is_null() {
            return Ok(Confidence::default());
        }
        value
            .as_f64()
            .and_then(|n| {
                Confidence::ALL
                    .into_iter()
                    .find(|l| f64::from(l.percent()) == n)
            })
            .ok_or_else(|| {
                let shown = match &value {
                    serde_json::Value::Number(number) => number.to_string(),
                    other => crate::validate::kind_of(other).to_owned(),
                };
                serde::de::Error::custom(format!(
                    "confidence is 90, 95 or 99 (percent), not {shown}"
                ))
            })
    }
}

impl From<Confidence> for u8 {
    fn from(level: Confidence) -> u8 {
        level.percent()
    }
}

/// A cell is unstable (also) when its relative standard error is above this.
pub const MAX_STABLE_RSE: f64 = 0.30;

/// The column test runs only where the column and the rest of the base each have at
/// least this effective sample size (the usual minimum base for significance testing).
pub const MIN_TESTED_EFFECTIVE_N: f64 = 30.0;

/// ... and where the row holds at least this many respondents of the two sides together,
/// and leaves as many out (their effective size times the pooled share, and times its
/// complement): the normal approximation otherwise calls a rare row a difference (four
/// respondents of a thousand against none of a thousand: z = 2.0, while Fisher's exact
/// test gives p = 0.12).
pub const MIN_TESTED_EXPECTED: f64 = 5.0;

/// What a table on the server costs, in billed calls: as many as `/v1` would take to ask
/// the same questions, one call per one or two targets. The targets are every cell
/// (`rows × columns`), each row's total and each column's total; the base total is not
/// counted, as the codebook already gives it unbilled (`bases[].weighted`,
/// `groupTotals`), unless the table is `filtered`: the filter's total is then one more.
pub fn billed_calls(rows: usize, columns: usize, filtered: bool) -> u32 {
    let targets = table_targets(rows, columns, filtered);
    u32::try_from(targets.div_ceil(2)).unwrap_or(u32::MAX)
}

/// The targets a table asks, as [`billed_calls`] counts them.
pub fn table_targets(rows: usize, columns: usize, filtered: bool) -> usize {
    rows.saturating_mul(columns)
        .saturating_add(rows)
        .saturating_add(columns)
        .saturating_add(usize::from(filtered))
}

/// Body of `POST /app/api/table`; `Survey.table` in the npm package takes the same
/// (its `survey` may be left out: the loaded survey answers). A member it does not have
/// is refused.
#[cfg_attr(feature = "ts", derive(tsify::Tsify))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
// A misspelt option (`confidance`) is refused, not answered as if it were not asked.
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TableRequest {
    /// The `SurveyCode`.
    #[serde(default)]
    #[cfg_attr(feature = "ts", tsify(optional))]
    pub survey: String,
    /// The `PopulationBaseCode`: every figure is within it.
    pub population_base: String,
    /// An authorization group to stay within; absent, `null` or `_ALL_`: every group.
    #[serde(default)]
    #[cfg_attr(feature = "ts", tsify(optional, type = "string | null"))]
    pub group: Option<String>,
    /// A target expression every figure is also within (the base AND the filter, as a
    /// base of its own would be); absent or `null`: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", tsify(optional, type = "string | null"))]
    pub filter: Option<String>,
    /// The rows, in order (1 to [`MAX_TABLE_ROWS`]).
    pub rows: Vec<TableAxis>,
    /// The columns (the banner), in order (1 to [`MAX_TABLE_COLUMNS`]); the Total column
    /// is added, not asked for.
    pub columns: Vec<TableAxis>,
    /// The confidence of the intervals and tests, in percent: 90, 95 or 99; absent: 95.
    #[serde(default)]
    #[cfg_attr(feature = "ts", tsify(optional, type = "90 | 95 | 99"))]
    pub confidence: Confidence,
    /// Whether the pairwise column test is corrected for its many comparisons
    /// (Bonferroni): each pair is tested at `α / m`, `m` the pairs of columns it
    /// compares ([`Table::compared_pairs`]); absent: `false` (each pair at `α`, unless
    /// `holm`).
    #[serde(default)]
    #[cfg_attr(feature = "ts", tsify(optional))]
    pub bonferroni: bool,
    /// Whether the pairwise column test is corrected by Holm's step-down method: in each
    /// row the pairs' p-values in ascending order, the `k`-th tested at `α / (m − k + 1)`
    /// until one is not significant (then it and the rest are not). The same guarantee as
    /// Bonferroni's, never fewer letters; not with `bonferroni`. Absent: `false`, and left
    /// out when `false`, so a request that does not ask for it reads as it did before.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    #[cfg_attr(feature = "ts", tsify(optional))]
    pub holm: bool,
}

/// How the pairwise column test's letters are corrected for a row's many comparisons.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Correction {
    /// Each pair at `α`.
    #[default]
    None,
    /// Each pair at `α / m`.
    Bonferroni,
    /// Holm's step-down: the `k`-th smallest p-value at `α / (m − k + 1)`.
    Holm,
}

impl Correction {
    /// Every correction, the default first.
    pub const ALL: [Correction; 3] = [Correction::None, Correction::Bonferroni, Correction::Holm];

    /// The correction of a request's (or a table's) two switches, Holm's when both are on
    /// (which a request is refused for).
    pub fn of(bonferroni: bool, holm: bool) -> Correction {
        match (bonferroni, holm) {
            (_, true) => Correction::Holm,
            (true, false) => Correction::Bonferroni,
            (false, false) => Correction::None,
        }
    }

    /// How a table's words name it (`None`: uncorrected).
    pub fn name(self) -> Option<&'static str> {
        match self {
            Correction::None => None,
            Correction::Bonferroni => Some("Bonferroni"),
            Correction::Holm => Some("Holm"),
        }
    }
}

/// One row or column of a [`TableRequest`].
#[cfg_attr(feature = "ts", derive(tsify::Tsify))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TableAxis {
    /// A target expression, as in `TargetCodes`: a named code or an expression.
    pub expression: String,
    /// What to show for it (such as `Women 25-54 · F2554`); absent: the expression.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", tsify(optional))]
    pub label: Option<String>,
}

/// A [`TableRequest`] that passed validation, with its expressions parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidTable {
    /// The request as received.
    pub request: TableRequest,
    /// The rows' expressions, parsed, in order.
    pub rows: Vec<Expr>,
    /// The columns' expressions, parsed, in order.
    pub columns: Vec<Expr>,
    /// The filter's expression, parsed.
    pub filter: Option<Expr>,
}

impl ValidTable {
    /// The group to stay within, or `None` for every group.
    pub fn group_filter(&self) -> Option<&str> {
        self.request
            .group
            .as_deref()
            .filter(|group| *group != ALL_GROUPS)
    }

    /// The headers of `axis` as a [`Table`] shows them, before the survey is known: each
    /// is `unknown: false` until the engine finds a name the survey lacks.
    pub fn headers(&self, axis: TableAxisKind) -> Vec<TableHeader> {
        let items = match axis {
            TableAxisKind::Rows => &self.request.rows,
            TableAxisKind::Columns => &self.request.columns,
        };
        items
            .iter()
            .map(|item| TableHeader {
                expression: item.expression.clone(),
                label: item
                    .label
                    .clone()
                    .unwrap_or_else(|| item.expression.clone()),
                unknown: false,
                compared: false,
            })
            .collect()
    }

    /// What computing it on the server costs: [`billed_calls`].
    pub fn billed_calls(&self) -> u32 {
        self.request.billed_calls()
    }

    /// The targets it asks: [`table_targets`].
    pub fn targets(&self) -> usize {
        self.request.targets()
    }
}

/// Rows or columns, as errors and headers name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TableAxisKind {
    /// `rows`.
    Rows,
    /// `columns`.
    Columns,
}

impl TableAxisKind {
    /// The member's name in a [`TableRequest`].
    pub fn as_str(self) -> &'static str {
        match self {
            TableAxisKind::Rows => "rows",
            TableAxisKind::Columns => "columns",
        }
    }

    /// Most entries allowed.
    pub fn max(self) -> usize {
        match self {
            TableAxisKind::Rows => MAX_TABLE_ROWS,
            TableAxisKind::Columns => MAX_TABLE_COLUMNS,
        }
    }
}

/// Why a [`TableRequest`] was refused. Each becomes a 400 `invalid_request` envelope
/// naming the member at fault (`From<TableError> for ApiError`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TableError {
    /// The body is no table request: not JSON, a member named twice, or a member of the
    /// wrong type.
    #[error("{message}")]
    Unreadable {
        /// What is wrong, and where.
        message: String,
        /// The table's own member named twice, to point at; none for any other fault.
        field: Option<&'static str>,
    },
    /// `survey`, `populationBase` or `group` is not an identifier.
    #[error("{message}")]
    InvalidIdentifier {
        /// The member: `survey`, `populationBase` or `group`.
        field: &'static str,
        /// What is wrong.
        message: String,
        /// How to fix it.
        hint: String,
    },
    /// No rows, or no columns.
    #[error("A table needs at least one entry in {}.", .axis.as_str())]
    EmptyAxis {
        /// The empty member.
        axis: TableAxisKind,
    },
    /// More rows or columns than a table may have.
    #[error("A table has at most {} {}, not {count}.", .axis.max(), .axis.as_str())]
    TooMany {
        /// The member over its limit.
        axis: TableAxisKind,
        /// How many were sent.
        count: usize,
    },
    /// A label longer than [`MAX_TABLE_LABEL_CHARS`].
    #[error("{}[{index}].label is longer than {MAX_TABLE_LABEL_CHARS} characters.", .axis.as_str())]
    LabelTooLong {
        /// Rows or columns.
        axis: TableAxisKind,
        /// Which entry.
        index: usize,
    },
    /// A filter that is empty, too long or does not parse.
    #[error("{message}")]
    InvalidFilter {
        /// What is wrong (`filter ...`).
        message: String,
        /// How to fix it.
        hint: String,
    },
    /// Both corrections of the pairwise test asked for.
    #[error("bonferroni and holm are two corrections of the column letters: ask for one.")]
    TwoCorrections,
    /// An expression that is empty, too long or does not parse.
    #[error("{message}")]
    InvalidExpression {
        /// Rows or columns.
        axis: TableAxisKind,
        /// Which entry.
        index: usize,
        /// What is wrong, naming the entry (`rows[3].expression ...`).
        message: String,
        /// How to fix it.
        hint: String,
    },
}

/// How to send a table, for a body that is no table request.
const TABLE_HINT: &str = "Send {\"survey\", \"populationBase\", \"group\", \"filter\", \
                          \"rows\": [{\"expression\", \"label\"}], \"columns\": [...], \
                          \"confidence\": 90 | 95 | 99, \"bonferroni\": true | false, \
                          \"holm\": true | false}.";

/// The members of a [`TableRequest`], as a body names them.
const TABLE_MEMBERS: [&str; 9] = [
    "survey",
    "populationBase",
    "group",
    "filter",
    "rows",
    "columns",
    "confidence",
    "bonferroni",
    "holm",
];

/// Longest reason a refusal quotes from serde, which may echo a member's value whole.
const MAX_REASON_CHARS: usize = 160;

impl TableError {
    /// The refusal of a value JSON cannot represent (a cyclic object, a BigInt), so no
    /// client could send it: `reason` says why.
    pub fn unserializable(reason: &str) -> TableError {
        TableError::Unreadable {
            message: format!("The table request can't be serialized as JSON ({reason})."),
            field: None,
        }
    }
}

impl From<TableError> for ApiError {
    fn from(error: TableError) -> ApiError {
        let message = error.to_string();
        let (field, hint) = match error {
            TableError::Unreadable { field, .. } => {
                return ApiError::InvalidRequest {
                    field: field.map(str::to_owned),
                    message,
                    hint: Some(TABLE_HINT.to_owned()),
                }
            }
            TableError::InvalidIdentifier { field, hint, .. } => (field, hint),
            TableError::EmptyAxis { axis } => (
                axis.as_str(),
                format!("Add at least one target to {}.", axis.as_str()),
            ),
            TableError::TooMany { axis, .. } => (
                axis.as_str(),
                format!(
                    "Split the table: at most {} {} per table.",
                    axis.max(),
                    axis.as_str()
                ),
            ),
            TableError::LabelTooLong { axis, .. } => (
                axis.as_str(),
                format!("Keep labels to at most {MAX_TABLE_LABEL_CHARS} characters."),
            ),
            TableError::InvalidFilter { hint, .. } => ("filter", hint),
            TableError::TwoCorrections => (
                "holm",
                "Send \"holm\": true for Holm's step-down (never fewer letters) or \
                 \"bonferroni\": true, not both."
                    .to_owned(),
            ),
            TableError::InvalidExpression { axis, hint, .. } => (axis.as_str(), hint),
        };
        ApiError::InvalidRequest {
            field: Some(field.to_owned()),
            message,
            hint: Some(hint),
        }
    }
}

impl TableRequest {
    /// What computing it on the server costs: [`billed_calls`] (counted as sent, before
    /// validation, as the workbench prices a table being built).
    pub fn billed_calls(&self) -> u32 {
        billed_calls(self.rows.len(), self.columns.len(), self.filter.is_some())
    }

    /// How its letters are to be corrected (a request asking both is refused by
    /// [`TableRequest::validate`]).
    pub fn correction(&self) -> Correction {
        Correction::of(self.bonferroni, self.holm)
    }

    /// The targets it asks: [`table_targets`].
    pub fn targets(&self) -> usize {
        table_targets(self.rows.len(), self.columns.len(), self.filter.is_some())
    }

    /// Reads a body as a table request, as strictly as `/v1` reads its own: JSON naming
    /// no member twice at any depth (a proxy and this service must never read two
    /// different requests), whose members have their types. Unknown members are ignored.
    pub fn from_json(body: &[u8]) -> Result<TableRequest, TableError> {
        let value = from_slice_strict(body).map_err(|error| {
            let (message, field) = error.refusal("The table request", &TABLE_MEMBERS);
            TableError::Unreadable { message, field }
        })?;
        serde_json::from_value(value).map_err(|error| {
            let reason = error.to_string();
            let reason = match reason.char_indices().nth(MAX_REASON_CHARS) {
                Some((end, _)) => format!("{}…", &reason[..end]),
                None => reason,
            };
            TableError::Unreadable {
                message: format!("The table request is not valid: {reason}."),
                field: None,
            }
        })
    }

    /// Checks the request in member order (survey, base, group, filter, rows, columns) and parses
    /// every expression with the contract's own rules for `TargetCodes`. Names the survey
    /// may not define are not errors here: the engine reports them per header.
    pub fn validate(self) -> Result<ValidTable, TableError> {
        let identifier = |field: &'static str, text: &str, is_group: bool| {
            check_identifier(field, text, is_group).map_err(|Refusal { message, hint }| {
                TableError::InvalidIdentifier {
                    field,
                    message,
                    hint,
                }
            })
        };
        identifier("survey", &self.survey, false)?;
        identifier("populationBase", &self.population_base, false)?;
        if let Some(group) = &self.group {
            identifier("group", group, true)?;
        }
        let filter = self
            .filter
            .as_deref()
            .map(|filter| {
                parse_target(&"filter", filter).map_err(|Refusal { message, hint }| {
                    TableError::InvalidFilter { message, hint }
                })
            })
            .transpose()?;
        let rows = parse_axis(TableAxisKind::Rows, &self.rows)?;
        let columns = parse_axis(TableAxisKind::Columns, &self.columns)?;
        if self.bonferroni && self.holm {
            return Err(TableError::TwoCorrections);
        }
        Ok(ValidTable {
            request: self,
            rows,
            columns,
            filter,
        })
    }
}

fn parse_axis(axis: TableAxisKind, items: &[TableAxis]) -> Result<Vec<Expr>, TableError> {
    if items.is_empty() {
        return Err(TableError::EmptyAxis { axis });
    }
    if items.len() > axis.max() {
        return Err(TableError::TooMany {
            axis,
            count: items.len(),
        });
    }
    items
        .iter()
        .enumerate()
        .map(|(index, item)| {
            if item
                .label
                .as_deref()
                .is_some_and(|label| label.chars().nth(MAX_TABLE_LABEL_CHARS).is_some())
            {
                return Err(TableError::LabelTooLong { axis, index });
            }
            parse_target(
                &format_args!("{}[{index}].expression", axis.as_str()),
                &item.expression,
            )
            .map_err(|Refusal { message, hint }| TableError::InvalidExpression {
                axis,
                index,
                message,
                hint,
            })
        })
        .collect()
}

/// The answer to a [`TableRequest`]: `cells[r][c]` is row `r` AND column `c` within the
/// base (and group); the totals are the Total column, the Total row and their corner.
#[cfg_attr(feature = "ts", derive(tsify::Tsify))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Table {
    /// The `SurveyCode` that answered.
    pub survey: String,
    /// The `PopulationBaseCode`.
    pub population_base: String,
    /// The group stayed within, as requested (`null`: every group).
    #[cfg_attr(feature = "ts", tsify(type = "string | null"))]
    pub group: Option<String>,
    /// The filter every figure is within, as requested (absent: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", tsify(optional))]
    pub filter: Option<String>,
    /// The rows, as requested and in order (the Total row is [`Table::column_totals`]).
    pub rows: Vec<TableHeader>,
    /// The columns, as requested and in order (the Total column is [`Table::row_totals`]).
    pub columns: Vec<TableHeader>,
    /// `cells[row][column]`: respondents in the row AND the column, within the base.
    pub cells: Vec<Vec<TableCell>>,
    /// The Total column: each row within the base, in row order.
    pub row_totals: Vec<TableCell>,
    /// The Total row: each column within the base, in column order.
    pub column_totals: Vec<TableCell>,
    /// The corner: the base (and group) itself.
    pub total: TableCell,
    /// Unit multiplier of `wgtAud`: 1000 means thousands.
    pub audience_report_units: u32,
    /// A cell with this many respondents or fewer is unstable.
    pub unstable_max_resps: u64,
    /// Calls billed for this table: [`billed_calls`] on the server, 0 when computed in
    /// the page.
    pub billed_calls: u32,
    /// The confidence of the intervals and tests, as requested (absent in a table kept
    /// from before it was asked: 95).
    #[serde(default)]
    #[cfg_attr(feature = "ts", tsify(type = "90 | 95 | 99"))]
    pub confidence: Confidence,
    /// Whether the pairwise test was corrected by Bonferroni's method, as requested.
    #[serde(default)]
    pub bonferroni: bool,
    /// Whether the pairwise test was corrected by Holm's step-down method, as requested
    /// (absent in a table kept from before it could be: `false`).
    #[serde(default)]
    pub holm: bool,
    /// The pairs of columns the pairwise test compares (both [`TableHeader::compared`]
    /// with each other) and can test (each column's effective size at least
    /// [`MIN_TESTED_EFFECTIVE_N`]): the corrections' `m`.
    #[serde(default)]
    pub compared_pairs: u32,
}

impl Table {
    /// How its letters were corrected.
    pub fn correction(&self) -> Correction {
        Correction::of(self.bonferroni, self.holm)
    }
}

/// One row or column of a [`Table`].
#[cfg_attr(feature = "ts", derive(tsify::Tsify))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TableHeader {
    /// The target expression, as requested.
    pub expression: String,
    /// The requested label, or the expression when none was given.
    pub label: String,
    /// The expression names a variable or code the survey does not define: its cells
    /// are all zero (as `/v1` answers a partial result).
    pub unknown: bool,
    /// A column the pairwise test compares with another (both have respondents in the
    /// base, and none in common): the columns a cell's `higherThan` may name. Always
    /// false for rows.
    #[serde(default)]
    #[cfg_attr(feature = "ts", tsify(optional))]
    pub compared: bool,
}

/// Why a cell is unstable.
#[cfg_attr(feature = "ts", derive(tsify::Tsify))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum UnstableReason {
    /// `resps` is at most the survey's `unstableMaxResps` (the rule of `/v1`'s `Stbl`).
    LowRespondents,
    /// The relative standard error is over [`MAX_STABLE_RSE`] (or undefined: the weighted
    /// total is zero, or the design has one respondent).
    HighRse,
}

/// The column test's verdict on a cell.
#[cfg_attr(feature = "ts", derive(tsify::Tsify))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Significance {
    /// The row's share of this column is significantly higher (at the table's
    /// confidence) than of the rest of the base.
    Higher,
    /// The row's share of this column is significantly lower (at the table's confidence)
    /// than of the rest of the base.
    Lower,
}

/// One cell's figures. `n` below is the number of respondents in the group (or in the
/// survey, without one), `w_i` their weights and `y_i` 1 for the cell's members (who are
/// all in the base), else 0; `T = Σ w_i·y_i`.
#[cfg_attr(feature = "ts", derive(tsify::Tsify))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TableCell {
    /// `T`: the weighted total, absolute (exactly as `/v1` sums it).
    pub weight: f64,
    /// `Σ w_i²·y_i`, the sum of the members' squared weights.
    pub weight_squared: f64,
    /// Unweighted respondents, `Σ y_i` (as `/v1`'s `Resps`).
    pub resps: u64,
    /// `weight / audienceReportUnits` (as `/v1`'s `WgtAud`).
    pub wgt_aud: f64,
    /// Share of the column, in percent: `weight / column total's weight × 100`; `null`
    /// when the column's weight is 0. On the Total column, the share of the base.
    #[cfg_attr(feature = "ts", tsify(type = "number | null"))]
    pub vertical_pct: Option<f64>,
    /// Share of the row, in percent: `weight / row total's weight × 100`; `null` when the
    /// row's weight is 0. On the Total row, the share of the base.
    #[cfg_attr(feature = "ts", tsify(type = "number | null"))]
    pub horizontal_pct: Option<f64>,
    /// Standard error of `verticalPct`, in percentage points: the share is the ratio
    /// `p = T / X` of the cell's and the column's weighted totals (`x_i` 1 for the
    /// column's members, else 0; `X = Σ w_i·x_i`), its variance linearized,
    /// `n/(n−1) · Σ z_i²` with `z_i = w_i·(y_i − p·x_i) / X` (R's
    /// `svyratio`, or `svymean` over the column as a domain); `null` with `verticalPct`
    /// or when `n < 2`. Its interval is Wilson's at the effective size this SE implies
    /// ([`TableCell::vertical_interval`]), within 0–100%.
    #[cfg_attr(feature = "ts", tsify(type = "number | null"))]
    pub vertical_pct_se: Option<f64>,
    /// Standard error of `horizontalPct`, in percentage points, as `verticalPctSe` with
    /// the row for the column.
    #[cfg_attr(feature = "ts", tsify(type = "number | null"))]
    pub horizontal_pct_se: Option<f64>,
    /// `verticalPct ÷ (row total's weight / base weight × 100) × 100`: 100 is the
    /// base's own rate; `null` when either share is undefined or the row is empty.
    #[cfg_attr(feature = "ts", tsify(type = "number | null"))]
    pub index: Option<f64>,
    /// Effective sample size `(Σ w_i y_i)² / Σ w_i² y_i`; `null` when `weightSquared`
    /// is 0.
    #[cfg_attr(feature = "ts", tsify(type = "number | null"))]
    pub effective_n: Option<f64>,
    /// Standard error of `T`, absolute: `√(n/(n−1) · Σ (z_i − z̄)²)` with `z_i = w_i y_i`,
    /// that is `√(n/(n−1) · (weightSquared − T²/n))`; `null` when `n < 2` (one
    /// respondent tells nothing of the spread: not an error of 0).
    #[cfg_attr(feature = "ts", tsify(type = "number | null"))]
    pub standard_error: Option<f64>,
    /// Lower end of the confidence interval, `T − z · SE`, `z` the normal quantile of the
    /// table's confidence ([`Confidence::z`]: 1.959963984540054 at 95%); it may be below
    /// 0: it is the normal interval, not clipped; `null` with the SE.
    #[cfg_attr(feature = "ts", tsify(type = "number | null"))]
    pub ci_low: Option<f64>,
    /// Upper end of the confidence interval, `T + z · SE`; `null` with the SE.
    #[cfg_attr(feature = "ts", tsify(type = "number | null"))]
    pub ci_high: Option<f64>,
    /// Relative standard error `SE / T`; `null` when `T` is 0 or `n < 2`.
    #[cfg_attr(feature = "ts", tsify(type = "number | null"))]
    pub relative_standard_error: Option<f64>,
    /// `1` (unstable) when there is any `unstableReasons`, else `0`. Note that `/v1`'s
    /// `Stbl` only knows the respondents' rule.
    #[cfg_attr(feature = "ts", tsify(type = "0 | 1"))]
    pub stability: Stability,
    /// Why the cell is unstable, in this order; empty when it is stable.
    pub unstable_reasons: Vec<UnstableReason>,
    /// The column test (two proportions with effective sample sizes, two-sided at the
    /// table's confidence): whether the row's share of this column differs from its
    /// share of the rest of the base.
    /// `null` when not significant or not testable (either side's effective size under
    /// [`MIN_TESTED_EFFECTIVE_N`], or the row's count in or out under [`MIN_TESTED_EXPECTED`]),
    /// and always on the Total column and the Total row.
    #[cfg_attr(feature = "ts", tsify(type = "Significance | null"))]
    pub significance: Option<Significance>,
    /// The pairwise column test (as the column test, between two columns, corrected as
    /// the table's `bonferroni` or `holm` says): the columns (their indices in `columns`) whose
    /// share of the row this column's is significantly higher than. Only columns with no
    /// respondent in common within the base are compared (the test needs independent
    /// samples: the values of one variable, say); absent when none, and always on the
    /// Total column and Total row.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "ts", tsify(optional))]
    pub higher_than: Vec<u32>,
}

impl TableCell {
    /// The interval of `verticalPct` at `confidence`, in percent: Wilson's score interval
    /// at the design's effective size (`share_interval`), `column` the cell's column
    /// total (on the Total column, the base's total); `None` with the share's SE.
    pub fn vertical_interval(
        &self,
        column: &TableCell,
        confidence: Confidence,
    ) -> Option<(f64, f64)> {
        let (share, se) = self.vertical_pct.zip(self.vertical_pct_se)?;
        share_interval(share, se, column, confidence)
    }

    /// The interval of `horizontalPct` at `confidence`, `row` the cell's row total (on
    /// the Total row, the base's total), as [`TableCell::vertical_interval`].
    pub fn horizontal_interval(
        &self,
        row: &TableCell,
        confidence: Confidence,
    ) -> Option<(f64, f64)> {
        let (share, se) = self.horizontal_pct.zip(self.horizontal_pct_se)?;
        share_interval(share, se, row, confidence)
    }
}

/// Wilson's score interval, in percent, of a share `share` (percent) of the total `whole`
/// with standard error `se` (points), taken at the effective sample size the design's
/// variance implies, `n* = p(1 − p) / SE²`, but no more than the whole's respondents (as
/// Korn and Graubard bound it: a design effect under 1 is taken as 1). Within 0–100%, it
/// holds the share, wider on the side away from the nearer end, where the normal `share ±
/// z · SE` would pass below 0% for a rare row.
///
/// A share of 0% or 100% has no spread to imply `n*`: it is taken at the whole's Kish
/// size `(Σw)² / Σw²`, so an empty cell of a large column still says how small its share
/// may be.
fn share_interval(
    share: f64,
    se: f64,
    whole: &TableCell,
    confidence: Confidence,
) -> Option<(f64, f64)> {
    if !share.is_finite() || !se.is_finite() {
        return None;
    }
    let p = (share / 100.0).clamp(0.0, 1.0);
    let variance = (se / 100.0) * (se / 100.0);
    let n = if p > 0.0 && p < 1.0 && variance > 0.0 {
        (p * (1.0 - p) / variance).min(whole.resps as f64)
    } else {
        whole.effective_n?
    };
    if !(n > 0.0 && n.is_finite()) {
        return None;
    }
    let z = confidence.z();
    let shrink = 1.0 + z * z / n;
    let middle = (p + z * z / (2.0 * n)) / shrink;
    let half = z / shrink * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt();
    let (low, high) = (middle - half, middle + half);
    (low.is_finite() && high.is_finite())
        .then(|| (100.0 * low.clamp(0.0, p), 100.0 * high.clamp(p, 1.0)))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn axis(expression: &str) -> TableAxis {
        TableAxis {
            expression: expression.into(),
            label: None,
        }
    }

    fn request() -> TableRequest {
        TableRequest {
            survey: "DEMO".into(),
            population_base: "ADULTS".into(),
            group: None,
            filter: None,
            rows: vec![
                TableAxis {
                    expression: "F2554".into(),
                    label: Some("Women 25-54 · F2554".into()),
                },
                axis("SMOKER = 1"),
            ],
            columns: vec![axis("REGION = 1"), axis("REGION = 2"), axis("REGION = 3")],
            confidence: Confidence::NinetyFive,
            bonferroni: false,
            holm: false,
        }
    }

    #[test]
    fn confidence_and_bonferroni_are_read_and_checked() {
        let body = |extra: &str| {
            format!(
                r#"{{"survey": "DEMO", "populationBase": "ADULTS", {extra}
                    "rows": [{{"expression": "F2554", "label": "Women 25-54 · F2554"}},
                             {{"expression": "SMOKER = 1"}}],
                    "columns": [{{"expression": "REGION = 1"}}, {{"expression": "REGION = 2"}},
                                {{"expression": "REGION = 3"}}]}}"#
            )
        };
        // Absent: 95%, uncorrected.
        assert_eq!(
            TableRequest::from_json(body("").as_bytes()).unwrap(),
            request()
        );
        for (percent, level) in [
            (90, Confidence::Ninety),
            (95, Confidence::NinetyFive),
            (99, Confidence::NinetyNine),
        ] {
            let read = TableRequest::from_json(
                body(&format!(r#""confidence": {percent}, "bonferroni": true,"#)).as_bytes(),
            )
            .unwrap();
            assert_eq!((read.confidence, read.bonferroni), (level, true));
            // Written back as the number it was read from.
            let written = serde_json::to_value(&read).unwrap();
            assert_eq!(written["confidence"], percent);
            assert_eq!(written["bonferroni"], true);
        }
        // A whole number written as a decimal is that number; null is the default.
        let read = |extra: &str| TableRequest::from_json(body(extra).as_bytes()).unwrap();
        assert_eq!(
            read(r#""confidence": 99.0,"#).confidence,
            Confidence::NinetyNine
        );
        assert_eq!(
            read(r#""confidence": null,"#).confidence,
            Confidence::NinetyFive
        );
        for (wrong, said) in [
            (r#""confidence": 80,"#, "not 80"),
            (r#""confidence": 95.5,"#, "not 95.5"),
            (r#""confidence": 300,"#, "not 300"),
            (r#""confidence": "95","#, "not a string"),
            (r#""confidence": [95],"#, "not an array"),
        ] {
            let (field, message) = unreadable(&body(wrong));
            assert_eq!(field, None, "{wrong}");
            assert!(
                message.starts_with(&format!(
                    "The table request is not valid: confidence is 90, 95 or 99 (percent), {said}"
                )),
                "{wrong}: {message}"
            );
        }
        let (field, _) = unreadable(&body(r#""bonferroni": true, "bonferroni": false,"#));
        assert_eq!(field.as_deref(), Some("bonferroni"));
        let (field, _) = unreadable(&body(r#""holm": true, "holm": false,"#));
        assert_eq!(field.as_deref(), Some("holm"));
        for level in Confidence::ALL {
            assert_eq!(Confidence::try_from(level.percent()), Ok(level));
        }
    }

    #[test]
    fn holm_is_read_and_refused_beside_bonferroni() {
        let read = |extra: &str| {
            let mut body = serde_json::to_value(request()).unwrap();
            let extra: serde_json::Value = serde_json::from_str(extra).unwrap();
            for (member, value) in extra.as_object().unwrap() {
                body[member] = value.clone();
            }
            TableRequest::from_json(body.to_string().as_bytes()).unwrap()
        };
        for (extra, correction) in [
            ("{}", Correction::None),
            (r#"{"holm": false}"#, Correction::None),
            (r#"{"bonferroni": true}"#, Correction::Bonferroni),
            (r#"{"holm": true}"#, Correction::Holm),
            (r#"{"holm": true, "bonferroni": false}"#, Correction::Holm),
        ] {
            let asked = read(extra);
            assert_eq!(asked.correction(), correction, "{extra}");
            assert!(asked.validate().is_ok(), "{extra}");
        }
        let both = read(r#"{"holm": true, "bonferroni": true}"#);
        let refused = ApiError::from(both.validate().unwrap_err());
        let ApiError::InvalidRequest {
            field,
            message,
            hint,
        } = refused
        else {
            panic!("not an invalid request: {refused:?}");
        };
        assert_eq!(field.as_deref(), Some("holm"));
        assert!(message.contains("ask for one"), "{message}");
        assert!(hint.unwrap().contains("not both"));
        // Written back as read, and left out when not asked (a request's body, which its
        // idempotency key is of, is what it was before Holm's method); a member of the
        // wrong type names itself.
        assert_eq!(
            serde_json::to_value(read(r#"{"holm": true}"#)).unwrap()["holm"],
            true
        );
        assert!(serde_json::to_value(read("{}"))
            .unwrap()
            .get("holm")
            .is_none());
        let mut wrong = serde_json::to_value(request()).unwrap();
        wrong["holm"] = json!("yes");
        let error = TableRequest::from_json(wrong.to_string().as_bytes()).unwrap_err();
        assert!(error.to_string().contains("expected a boolean"), "{error}");
        assert_eq!(Correction::Holm.name(), Some("Holm"));
        assert_eq!(Correction::None.name(), None);
    }

    #[test]
    fn cost_is_what_v1_would_bill() {
        // 1×1: the cell, the row total and the column total are three targets, two calls.
        assert_eq!(billed_calls(1, 1, false), 2);
        assert_eq!(billed_calls(1, 1, true), 2); // 4 targets
        assert_eq!(billed_calls(2, 3, true), 6); // 12 targets
        assert_eq!(billed_calls(2, 3, false), 6); // 6 + 2 + 3 = 11 targets
        assert_eq!(billed_calls(20, 10, false), 115); // 230 targets
        assert_eq!(billed_calls(20, 10, true), 116); // 231 targets
        assert_eq!(billed_calls(0, 0, false), 0);
        assert_eq!(billed_calls(usize::MAX, 2, true), u32::MAX);
    }

    /// `from_json`'s refusal of `body`, as the client sees it: (field, message).
    fn unreadable(body: &str) -> (Option<String>, String) {
        match ApiError::from(TableRequest::from_json(body.as_bytes()).unwrap_err()) {
            ApiError::InvalidRequest {
                field,
                message,
                hint,
            } => {
                assert_eq!(hint.as_deref(), Some(TABLE_HINT));
                (field, message)
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_body_is_read_strictly_and_its_refusals_say_why() {
        let body = r#"{"survey": "DEMO", "populationBase": "ADULTS",
            "rows": [{"expression": "F2554", "label": "Women 25-54 · F2554"},
                     {"expression": "SMOKER = 1"}],
            "columns": [{"expression": "REGION = 1"}, {"expression": "REGION = 2"},
                        {"expression": "REGION = 3"}]}"#;
        assert_eq!(TableRequest::from_json(body.as_bytes()).unwrap(), request());
        // A member it does not have (a misspelt option) is refused, not ignored.
        for unknown in [
            body.replacen(
                "\"populationBase\"",
                "\"confidance\": 99, \"populationBase\"",
                1,
            ),
            body.replacen("\"SMOKER = 1\"", "\"SMOKER = 1\", \"lable\": \"S\"", 1),
        ] {
            let (field, message) = unreadable(&unknown);
            assert_eq!(field, None);
            assert!(message.contains("unknown field"), "{message}");
        }

        // A member named twice, at any depth and inside an unknown member too.
        let (field, message) =
            unreadable(r#"{"populationBase": "A", "rows": [], "rows": [], "columns": []}"#);
        assert_eq!(field.as_deref(), Some("rows"));
        assert_eq!(
            message,
            "The table request names the member 'rows' more than once (line 1, column 42)."
        );
        let (field, message) = unreadable(
            r#"{"populationBase": "A", "rows": [{"expression": "X", "expression": "Y"}], "columns": []}"#,
        );
        assert_eq!(field, None, "a nested member is no field of the table");
        assert!(message.contains("'expression' more than once"), "{message}");
        let long = "m".repeat(5000);
        let (field, message) = unreadable(&format!(
            r#"{{"rows": [], "x": {{"{long}": 1, "{long}": 2}}}}"#
        ));
        assert_eq!(field, None);
        assert!(
            message.contains(&format!("'{}…'", "m".repeat(32))),
            "{message}"
        );
        assert!(message.len() < 200, "{message}");

        // Not JSON; and JSON of the wrong shape, its value echoed in part only.
        let (field, message) = unreadable("{\"rows\": [");
        assert_eq!(field, None);
        assert_eq!(
            message,
            "The table request is not valid JSON (line 1, column 10)."
        );
        let (_, message) = unreadable(r#"{"populationBase": "A", "rows": "x", "columns": []}"#);
        assert_eq!(
            message,
            "The table request is not valid: invalid type: string \"x\", expected a sequence."
        );
        let (_, message) = unreadable(&format!(
            r#"{{"populationBase": "A", "rows": "{}", "columns": []}}"#,
            "x".repeat(5000)
        ));
        assert!(message.chars().count() < 220, "{message}");
        assert!(
            message.ends_with("….") && message.contains("xxxx"),
            "{message}"
        );
        let (_, message) = unreadable("[]");
        assert!(
            message.starts_with("The table request is not valid: invalid"),
            "{message}"
        );
    }

    #[test]
    fn members_are_camel_case_and_optional_ones_may_be_left_out() {
        let parsed: TableRequest = serde_json::from_value(json!({
            "populationBase": "ADULTS",
            "rows": [{"expression": "F2554", "label": "Women 25-54 · F2554"}, {"expression": "SMOKER = 1"}],
            "columns": [{"expression": "REGION = 1"}, {"expression": "REGION = 2"}, {"expression": "REGION = 3"}]
        }))
        .unwrap();
        assert_eq!(
            parsed,
            TableRequest {
                survey: String::new(),
                ..request()
            }
        );
        let value = serde_json::to_value(request()).unwrap();
        assert_eq!(value["populationBase"], "ADULTS");
        assert_eq!(value["rows"][1], json!({"expression": "SMOKER = 1"}));
        let cell = TableCell {
            weight: 2.0,
            weight_squared: 4.0,
            resps: 1,
            wgt_aud: 0.002,
            vertical_pct: None,
            horizontal_pct: Some(50.0),
            vertical_pct_se: None,
            horizontal_pct_se: Some(10.0),
            index: None,
            effective_n: Some(1.0),
            standard_error: None,
            ci_low: None,
            ci_high: None,
            relative_standard_error: None,
            stability: Stability::Unstable,
            unstable_reasons: vec![UnstableReason::LowRespondents, UnstableReason::HighRse],
            significance: Some(Significance::Higher),
            higher_than: Vec::new(),
        };
        let value = serde_json::to_value(&cell).unwrap();
        assert_eq!(
            value,
            json!({"weight": 2.0, "weightSquared": 4.0, "resps": 1, "wgtAud": 0.002,
                   "verticalPct": null, "horizontalPct": 50.0,
                   "verticalPctSe": null, "horizontalPctSe": 10.0, "index": null,
                   "effectiveN": 1.0, "standardError": null, "ciLow": null, "ciHigh": null,
                   "relativeStandardError": null, "stability": 1,
                   "unstableReasons": ["lowRespondents", "highRse"],
                   "significance": "higher"})
        );
        assert_eq!(
            serde_json::from_value::<TableCell>(value.clone()).unwrap(),
            cell
        );
        // The whole: a row of 400 respondents.
        let row = TableCell {
            resps: 400,
            effective_n: Some(300.0),
            ..cell.clone()
        };
        assert_eq!(cell.vertical_interval(&row, Confidence::NinetyFive), None);
        // Wilson's at n* = 0.5 · 0.5 / 0.1² = 25, as statsmodels' `proportion_confint(12.5,
        // 25, method="wilson")` has it at each level.
        near(
            cell.horizontal_interval(&row, Confidence::NinetyFive)
                .unwrap(),
            (31.75224322423106, 68.24775677576895),
        );
        near(
            cell.horizontal_interval(&row, Confidence::NinetyNine)
                .unwrap(),
            (27.101666607827905, 72.89833339217209),
        );

        // A table kept before the shares' errors were (a replay) reads them as unknown.
        let mut older = value;
        for member in ["verticalPctSe", "horizontalPctSe"] {
            older.as_object_mut().unwrap().remove(member);
        }
        let read = serde_json::from_value::<TableCell>(older).unwrap();
        assert_eq!((read.vertical_pct_se, read.horizontal_pct_se), (None, None));

        // A table kept before its tests were chosen (a replay, the app's history) reads
        // as tested at 95%, uncorrected.
        let table = Table {
            survey: "DEMO".into(),
            population_base: "ADULTS".into(),
            group: None,
            filter: None,
            rows: Vec::new(),
            columns: Vec::new(),
            cells: Vec::new(),
            row_totals: Vec::new(),
            column_totals: Vec::new(),
            total: cell.clone(),
            audience_report_units: 1000,
            unstable_max_resps: 3,
            billed_calls: 0,
            confidence: Confidence::NinetyNine,
            bonferroni: true,
            holm: false,
            compared_pairs: 6,
        };
        let mut kept = serde_json::to_value(&table).unwrap();
        assert_eq!(
            (
                &kept["confidence"],
                &kept["bonferroni"],
                &kept["holm"],
                &kept["comparedPairs"]
            ),
            (&json!(99), &json!(true), &json!(false), &json!(6))
        );
        // Kept before Holm's method was offered: not corrected by it.
        kept.as_object_mut().unwrap().remove("holm");
        let read = serde_json::from_value::<Table>(kept.clone()).unwrap();
        assert_eq!(read.correction(), Correction::Bonferroni);
        for member in ["confidence", "bonferroni", "comparedPairs"] {
            kept.as_object_mut().unwrap().remove(member);
        }
        let read = serde_json::from_value::<Table>(kept).unwrap();
        assert_eq!(
            (read.confidence, read.correction(), read.compared_pairs),
            (Confidence::NinetyFive, Correction::None, 0)
        );

        // Columns a cell's share is higher than, when there are any.
        let higher = TableCell {
            higher_than: vec![0, 2],
            ..cell
        };
        let value = serde_json::to_value(&higher).unwrap();
        assert_eq!(value["higherThan"], json!([0, 2]));
        assert_eq!(serde_json::from_value::<TableCell>(value).unwrap(), higher);

        // A heading kept before `compared` was reads as not compared.
        let heading: TableHeader =
            serde_json::from_value(json!({"expression": "A = 1", "label": "A", "unknown": false}))
                .unwrap();
        assert!(!heading.compared);
        assert_eq!(serde_json::to_value(&heading).unwrap()["compared"], false);
    }

    /// Both ends of an interval within 1e-12 of `want`'s.
    fn near(got: (f64, f64), want: (f64, f64)) {
        assert!(
            (got.0 - want.0).abs() < 1e-12 && (got.1 - want.1).abs() < 1e-12,
            "{got:?} against {want:?}"
        );
    }

    /// A rare row's share: the normal interval 1.2 ± 1.96 · 0.9 would start at −0.56%.
    /// Wilson's (at n* = 0.012 · 0.988 / 0.009² ≈ 146.4) stays above 0, wider above the
    /// share than below it; n* is no more than the whole's respondents; a share of 0% or
    /// 100% (no spread) is taken at the whole's Kish size. statsmodels'
    /// `proportion_confint(p · n, n, method="wilson")` gives each.
    #[test]
    fn a_shares_interval_is_wilsons_within_0_and_100() {
        let cell = |share: f64, se: f64| TableCell {
            weight: 1.0,
            weight_squared: 1.0,
            resps: 1,
            wgt_aud: 1.0,
            vertical_pct: Some(share),
            horizontal_pct: Some(share),
            vertical_pct_se: Some(se),
            horizontal_pct_se: Some(se),
            index: None,
            effective_n: Some(1.0),
            standard_error: None,
            ci_low: None,
            ci_high: None,
            relative_standard_error: None,
            stability: Stability::Stable,
            unstable_reasons: Vec::new(),
            significance: None,
            higher_than: Vec::new(),
        };
        // A whole of `resps` respondents, of Kish size `kish`.
        let whole = |resps: u64, kish: f64| TableCell {
            resps,
            effective_n: Some(kish),
            ..cell(100.0, 0.0)
        };
        let large = whole(1000, 800.0);
        let rare = cell(1.2, 0.9);
        let (low, high) = rare
            .vertical_interval(&large, Confidence::NinetyFive)
            .unwrap();
        near((low, high), (0.30568227669342807, 4.590302113609501));
        assert!(1.2 - low < high - 1.2);
        assert_eq!(
            rare.horizontal_interval(&large, Confidence::NinetyFive),
            Some((low, high))
        );
        // A whole of 100 respondents: n* 146.4 is taken as 100.
        near(
            rare.vertical_interval(&whole(100, 90.0), Confidence::NinetyFive)
                .unwrap(),
            (0.24032433677897494, 5.7702410882228286),
        );
        // All of the whole, and none of it: at its Kish size, 12.5; 100 exactly.
        let small = whole(20, 12.5);
        let all = cell(100.0, 0.0)
            .vertical_interval(&small, Confidence::NinetyFive)
            .unwrap();
        near(all, (76.49255881715122, 100.0));
        assert_eq!(all.1, 100.0);
        let none = cell(0.0, 0.0)
            .vertical_interval(&small, Confidence::NinetyFive)
            .unwrap();
        near(none, (0.0, 23.507441182848787));
        assert_eq!(none.0, 0.0);
        // No share, or a whole of no weight: none.
        let unknown = TableCell {
            vertical_pct: None,
            ..cell(0.0, 0.0)
        };
        assert_eq!(
            unknown.vertical_interval(&small, Confidence::NinetyFive),
            None
        );
        let weightless = TableCell {
            effective_n: None,
            ..whole(3, 0.0)
        };
        assert_eq!(
            cell(0.0, 0.0).vertical_interval(&weightless, Confidence::NinetyFive),
            None
        );
        // Every share's interval holds the share and stays within 0–100%.
        for share in [0.0, 0.01, 0.5, 3.0, 20.0, 50.0, 80.0, 99.5, 99.99, 100.0] {
            for se in [0.0, 0.001, 0.3, 2.0, 9.0] {
                for confidence in Confidence::ALL {
                    let (low, high) = cell(share, se)
                        .vertical_interval(&whole(30, 30.0), confidence)
                        .unwrap();
                    assert!(
                        0.0 <= low && low <= share && share <= high && high <= 100.0,
                        "{share} ± {se} at {confidence:?}: {low} – {high}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_valid_request_parses_every_expression_and_labels_its_headers() {
        let valid = request().validate().unwrap();
        assert_eq!(valid.rows.len(), 2);
        assert_eq!(valid.columns[2], Expr::parse("REGION = 3").unwrap());
        let rows = valid.headers(TableAxisKind::Rows);
        assert_eq!(rows[0].label, "Women 25-54 · F2554");
        assert_eq!(rows[1].label, "SMOKER = 1");
        assert!(!rows[0].unknown);
        assert_eq!(valid.billed_calls(), billed_calls(2, 3, false));
        assert_eq!(valid.filter, None);
        assert_eq!(valid.group_filter(), None);
        let all = TableRequest {
            group: Some(ALL_GROUPS.into()),
            ..request()
        };
        assert_eq!(all.validate().unwrap().group_filter(), None);
        let one = TableRequest {
            group: Some("1".into()),
            ..request()
        };
        assert_eq!(one.validate().unwrap().group_filter(), Some("1"));
    }

    #[test]
    fn a_filter_is_parsed_as_a_target_and_its_total_is_billed() {
        let filtered = TableRequest {
            filter: Some("AGE >= 35".into()),
            ..request()
        };
        let valid = filtered.validate().unwrap();
        assert_eq!(valid.filter, Some(Expr::parse("AGE >= 35").unwrap()));
        assert_eq!(valid.targets(), 2 * 3 + 2 + 3 + 1);
        assert_eq!(valid.billed_calls(), 6);
        for bad in ["", "AGE >=", "(AGE = 1"] {
            let (field, message) = refused(TableRequest {
                filter: Some(bad.into()),
                ..request()
            });
            assert_eq!(field, "filter", "{bad:?}");
            assert!(message.starts_with("filter "), "{message}");
        }
        // Absent and null alike; written only when there is one.
        let body = serde_json::to_value(request()).unwrap();
        assert!(body.get("filter").is_none(), "{body}");
        let mut with_null = body.clone();
        with_null["filter"] = json!(null);
        let read = TableRequest::from_json(with_null.to_string().as_bytes()).unwrap();
        assert_eq!(read.filter, None);
    }

    /// The error `request` is refused with, as the envelope's field and message.
    fn refused(request: TableRequest) -> (String, String) {
        let error = ApiError::from(request.validate().unwrap_err());
        assert_eq!((error.code(), error.status()), ("invalid_request", 400));
        let detail = error.envelope().error.unwrap();
        assert!(detail.hint.is_some());
        (detail.field.unwrap(), detail.message)
    }

    #[test]
    fn refusals_name_the_member_at_fault() {
        let (field, message) = refused(TableRequest {
            survey: String::new(),
            ..request()
        });
        assert_eq!(
            (field.as_str(), message.as_str()),
            ("survey", "survey must not be empty.")
        );
        let (field, _) = refused(TableRequest {
            population_base: "A B".into(),
            ..request()
        });
        assert_eq!(field, "populationBase");
        let (field, _) = refused(TableRequest {
            group: Some(String::new()),
            ..request()
        });
        assert_eq!(field, "group");
        let (field, message) = refused(TableRequest {
            rows: vec![],
            ..request()
        });
        assert_eq!(field, "rows");
        assert_eq!(message, "A table needs at least one entry in rows.");
        let (field, message) = refused(TableRequest {
            columns: vec![axis("*"); MAX_TABLE_COLUMNS + 1],
            ..request()
        });
        assert_eq!(field, "columns");
        assert_eq!(message, "A table has at most 50 columns, not 51.");
        assert!(TableRequest {
            rows: vec![axis("*"); MAX_TABLE_ROWS],
            columns: vec![axis("*"); MAX_TABLE_COLUMNS],
            ..request()
        }
        .validate()
        .is_ok());
        let mut rows = request().rows;
        rows[1].expression = "GENDER = ".into();
        let (field, message) = refused(TableRequest { rows, ..request() });
        assert_eq!(field, "rows");
        assert!(
            message.starts_with("rows[1].expression is not a valid target expression"),
            "{message}"
        );
        let mut columns = request().columns;
        columns[0].expression = "  ".into();
        let (field, message) = refused(TableRequest {
            columns,
            ..request()
        });
        assert_eq!(
            (field.as_str(), message.as_str()),
            ("columns", "columns[0].expression is empty.")
        );
        let mut columns = request().columns;
        columns[2].label = Some("x".repeat(MAX_TABLE_LABEL_CHARS + 1));
        let (field, message) = refused(TableRequest {
            columns,
            ..request()
        });
        assert_eq!(field, "columns");
        assert!(
            message.starts_with("columns[2].label is longer"),
            "{message}"
        );
    }
}
