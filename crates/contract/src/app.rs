//! The `/app` contract: the bodies the researcher app and its backend exchange.
//!
//! One definition for both ends: the server (`crosstab serve`, `/app/...`) serialises
//! these types and the Leptos app (`web/`) deserialises them, so a renamed member breaks
//! the build instead of the app. Member names are camelCase, as the app's JSON always was.
//! `POST /app/api/crosstab` carries the `/v1` types ([`crate::CrosstabRequest`] in,
//! [`crate::CrosstabResponse`] or [`crate::ErrorEnvelope`] out) unchanged, and every
//! failure is an [`crate::ErrorEnvelope`] whose `error.code` is an [`AppErrorCode`] or a
//! contract error code.
//!
//! Serde only (feature `app`), so it builds for `wasm32-unknown-unknown`; with feature
//! `ts` the codebook types also derive their TypeScript declarations (the npm package's
//! `Survey.codebook()` returns a [`Codebook`]).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

pub use crate::table::{
    billed_calls, Confidence, Correction, Significance, Table, TableAxis, TableAxisKind, TableCell,
    TableError, TableHeader, TableRequest, UnstableReason, ValidTable, TABLE_COST_PROMPT_THRESHOLD,
};

/// The paths of the `/app` routes, as the browser calls them.
pub mod paths {
    /// `POST`: sign in with [`super::Credentials`]; answers [`super::Me`] and sets the
    /// session cookie.
    pub const LOGIN: &str = "/app/login";
    /// `POST`: sign out; answers 204 and clears the cookie.
    pub const LOGOUT: &str = "/app/logout";
    /// `GET`: the signed-in user, [`super::Me`].
    pub const ME: &str = "/app/api/me";
    /// `GET`: the surveys the account may query, `[`[`super::SurveySummary`]`]`.
    pub const SURVEYS: &str = "/app/api/surveys";
    /// `GET` (query [`super::CodebookQuery`]): a survey's [`super::Codebook`]; the route
    /// pattern, see [`codebook`] for a concrete path.
    pub const CODEBOOK: &str = "/app/api/surveys/{code}/codebook";
    /// `POST`: a `/v1` crosstab through the backend, which adds the API key.
    pub const CROSSTAB: &str = "/app/api/crosstab";
    /// `POST` a [`super::TableRequest`]: the [`super::Table`], computed in one request
    /// and billed [`super::billed_calls`].
    pub const TABLE: &str = "/app/api/table";
    /// `GET`: `[`[`super::KeyInfo`]`]`; `POST` a [`super::NewKeyRequest`]: [`super::NewKey`].
    pub const KEYS: &str = "/app/api/keys";
    /// `DELETE`: revokes one key (204); the route pattern, see [`key`].
    pub const KEY: &str = "/app/api/keys/{id}";
    /// `GET` (query [`super::UsageQuery`]): billed calls, a [`super::UsageReport`].
    pub const USAGE: &str = "/app/api/usage";

    /// The codebook path of survey `code` (survey codes need no escaping).
    pub fn codebook(code: &str) -> String {
        format!("/app/api/surveys/{code}/codebook")
    }

    /// The path of key `id` (key ids need no escaping).
    pub fn key(id: &str) -> String {
        format!("/app/api/keys/{id}")
    }
}

/// Body of `POST /app/login`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credentials {
    /// The app user's name.
    pub username: String,
    /// The password, checked against its argon2 hash.
    pub password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_with_secret(f, "Credentials", ("username", &self.username), "password")
    }
}

/// `name { field: value, secret: "<redacted>" }`: the `Debug` of a body that carries a
/// secret, which logs and panic messages must never show.
fn debug_with_secret(
    f: &mut fmt::Formatter<'_>,
    name: &str,
    (field, value): (&str, &str),
    secret: &str,
) -> fmt::Result {
    f.debug_struct(name)
        .field(field, &value)
        .field(secret, &"<redacted>")
        .finish()
}

/// The signed-in user: `GET /app/api/me`, and the 200 of `POST /app/login`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Me {
    /// The app user's name.
    pub username: String,
    /// The account whose grants and keys the user works with.
    pub account: String,
}

/// One survey the account may query: an element of `GET /app/api/surveys`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SurveySummary {
    /// The `SurveyCode`.
    pub code: String,
    /// Display name.
    pub name: String,
    /// Number of respondents.
    pub respondents: u64,
    /// Whether every group is granted (so `_ALL_` may be used).
    pub all_groups: bool,
}

/// Query string of `GET /app/api/surveys/{code}/codebook`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CodebookQuery {
    /// Keeps only the codes and variables whose name, label, expression or a value's label
    /// contains this text (case-insensitive); absent or blank keeps everything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub q: Option<String>,
}

/// What a survey offers to query: variables, values, named codes, bases and groups.
///
/// The engine builds it (also the npm package's `Survey.codebook()`);
/// `GET /app/api/surveys/{code}/codebook` serves it as the account may see it: granted
/// groups only, with each base's `groupTotals`.
#[cfg_attr(feature = "ts", derive(tsify::Tsify))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// What identifies the survey's data (32 hex digits, its compiled file's checksum):
    /// the same while the survey is as it was compiled, another once it is compiled from
    /// other respondents, labels, codes or bases. Absent for a file compiled before
    /// checksums.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_version: Option<String>,
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

impl Codebook {
    /// Every name in `expr` this survey does not define as it is used there (what the
    /// engine reports of the same survey).
    pub fn unknown_names(&self, expr: &crate::expr::Expr) -> Vec<crate::wire::Unknown> {
        crate::wire::Unknown::in_expr(
            expr,
            |name| self.variables.iter().any(|v| v.name == name),
            |name| self.codes.iter().any(|c| c.code == name),
        )
    }

    /// What to tell a user before running a table whose filter, rows or columns use
    /// names this survey does not define as used there (their cells would all be
    /// zeros, and a server table bills them): each such entry, up to five, with why.
    /// `None` when every name is known.
    pub fn unknown_in_table(&self, table: &ValidTable) -> Option<String> {
        const SAID: usize = 5;
        let rows = table
            .rows
            .iter()
            .enumerate()
            .map(|(i, expr)| ("row", i, expr));
        let columns = table.columns.iter().enumerate();
        let filter = table.filter.iter().map(|expr| ("filter", None, expr));
        let unknown: Vec<String> = filter
            .chain(rows.map(|(axis, i, expr)| (axis, Some(i), expr)))
            .chain(columns.map(|(i, expr)| ("column", Some(i), expr)))
            .filter_map(|(axis, index, expr)| {
                let unknown = self.unknown_names(expr);
                (!unknown.is_empty()).then(|| {
                    let place = index.map_or(String::new(), |i| format!(" {}", i + 1));
                    format!(
                        "{axis}{place} ({}): {}",
                        crate::expr::shorten(&expr.to_string()),
                        crate::wire::Unknown::reasons(&unknown)
                    )
                })
            })
            .collect();
        let (first, more) = unknown.split_at(unknown.len().min(SAID));
        let more = match more.len() {
            0 => String::new(),
            n => format!("; and {n} more"),
        };
        (!first.is_empty()).then(|| {
            format!(
                "Not in survey {}: {}{more}. Correct or remove them to run the table.",
                table.request.survey,
                first.join("; ")
            )
        })
    }
}

impl CodebookQuery {
    /// The search to apply, if `q` has any text.
    pub fn search(&self) -> Option<CodebookSearch> {
        self.q.as_deref().and_then(CodebookSearch::new)
    }
}

/// Text to find in a codebook: its words, each compared without regard to case, found
/// when every one is somewhere in an entry (`coffee 01` finds "Coffee: brand 01"). One
/// rule for the backend's `?q=` and the app's search box.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodebookSearch {
    words: Vec<String>,
}

impl CodebookSearch {
    /// The search for `text`; `None` when it is blank (a blank search finds everything).
    pub fn new(text: &str) -> Option<CodebookSearch> {
        let words: Vec<String> = text.split_whitespace().map(str::to_lowercase).collect();
        (!words.is_empty()).then_some(CodebookSearch { words })
    }

    /// Whether every word is in one of `texts`.
    pub fn finds_in(&self, texts: &[&str]) -> bool {
        let texts: Vec<String> = texts.iter().map(|t| t.to_lowercase()).collect();
        self.words
            .iter()
            .all(|word| texts.iter().any(|text| text.contains(word.as_str())))
    }

    /// Whether every word is in `text`.
    pub fn finds(&self, text: &str) -> bool {
        self.finds_in(&[text])
    }

    /// Whether a named code matches: its code, label and expression together.
    pub fn matches_code(&self, code: &CodeEntry) -> bool {
        self.finds_in(&[&code.code, code.label.as_deref().unwrap_or(""), &code.expr])
    }

    /// Whether a variable itself matches: its name and label (not its values').
    pub fn matches_variable(&self, variable: &VariableEntry) -> bool {
        self.finds_in(&[&variable.name, variable.label.as_deref().unwrap_or("")])
    }

    /// Whether one value of a variable matches: the variable's name and label with the
    /// value and its label (`coffee yes`).
    pub fn matches_value(&self, variable: &VariableEntry, value: &ValueEntry) -> bool {
        self.finds_in(&[
            &variable.name,
            variable.label.as_deref().unwrap_or(""),
            value.label.as_deref().unwrap_or(""),
            &value.value.to_string(),
        ])
    }

    /// Keeps only the codes that match and the variables that match or have a value whose
    /// label does (what `GET /app/api/surveys/{code}/codebook?q=` serves).
    pub fn retain_in(&self, book: &mut Codebook) {
        book.codes.retain(|code| self.matches_code(code));
        book.variables.retain(|variable| {
            self.matches_variable(variable)
                || variable
                    .values
                    .iter()
                    .any(|value| self.matches_value(variable, value))
        });
    }
}

/// One authorization group of a `Codebook`.
#[cfg_attr(feature = "ts", derive(tsify::Tsify))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupEntry {
    /// The value requests name in `AuthorizationGroup`.
    pub value: String,
    /// Display label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// One population base of a `Codebook`.
#[cfg_attr(feature = "ts", derive(tsify::Tsify))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BaseEntry {
    /// `PopulationBaseCode`.
    pub code: String,
    /// Display label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Its expression.
    pub expr: String,
    /// Unweighted respondents (within the granted groups, when served by `/app`).
    pub respondents: u64,
    /// Weighted total, in absolute terms (within the granted groups, when served by `/app`).
    pub weighted: f64,
    /// The base's totals within each granted group, by group value: added by
    /// `/app`, absent from the engine's codebook (which knows no grants).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", tsify(type = "Record<string, Totals>"))]
    pub group_totals: Option<BTreeMap<String, Totals>>,
}

/// Unweighted and weighted totals of a set of respondents.
#[cfg_attr(feature = "ts", derive(tsify::Tsify))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    /// Unweighted respondents.
    pub respondents: u64,
    /// Weighted total, in absolute terms.
    pub weighted: f64,
}

/// One named code of a `Codebook`.
#[cfg_attr(feature = "ts", derive(tsify::Tsify))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CodeEntry {
    /// The target code.
    pub code: String,
    /// Display label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Its expression.
    pub expr: String,
}

/// One variable of a `Codebook`.
#[cfg_attr(feature = "ts", derive(tsify::Tsify))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariableEntry {
    /// Name used in expressions.
    pub name: String,
    /// Display label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Number of distinct values.
    pub distinct: usize,
    /// Smallest value (absent when every answer is missing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    /// Largest value (absent when every answer is missing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    /// The values with their labels (empty past 200 distinct values).
    pub values: Vec<ValueEntry>,
}

/// One value of a variable (`VariableEntry`).
#[cfg_attr(feature = "ts", derive(tsify::Tsify))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ValueEntry {
    /// The value.
    pub value: f64,
    /// Display label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// An API key's metadata (never the key itself): an element of `GET /app/api/keys`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyInfo {
    /// The key id.
    pub id: String,
    /// `live` or `test`.
    pub env: String,
    /// Creation time, RFC 3339 in UTC to the second.
    pub created_at: String,
    /// Expiry, RFC 3339; `null` when the key never expires.
    #[serde(default)]
    pub expires_at: Option<String>,
    /// Revocation time, RFC 3339; `null` while the key is not revoked.
    #[serde(default)]
    pub revoked_at: Option<String>,
}

/// Body of `POST /app/api/keys`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewKeyRequest {
    /// `live` or `test`.
    pub env: String,
    /// Days until the key expires (at most 36525: 100 years); `null`, absent or 0 for
    /// no expiry.
    #[serde(default)]
    pub expires_in_days: Option<u32>,
}

/// The 200 of `POST /app/api/keys`: the only time the key itself is shown.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewKey {
    /// The key id.
    pub id: String,
    /// The whole key, for the `Service-Engine-Authorizer` header.
    pub key: String,
}

impl fmt::Debug for NewKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_with_secret(f, "NewKey", ("id", &self.id), "key")
    }
}

/// Query string of `GET /app/api/usage`: the UTC days to report, `YYYY-MM-DD`, both
/// included. `to` defaults to today, `from` to [`USAGE_DEFAULT_DAYS`] days ending at `to`;
/// a period longer than [`USAGE_MAX_DAYS`], or ending before it starts, is a 400.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageQuery {
    /// The first day.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// The last day.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
}

/// Days `GET /app/api/usage` reports when not told which: today and the 30 before.
pub const USAGE_DEFAULT_DAYS: u32 = 31;
/// The longest period `GET /app/api/usage` reports at once, in days (a leap year).
pub const USAGE_MAX_DAYS: u32 = 366;

/// `GET /app/api/usage`'s answer: the period reported (UTC days, `YYYY-MM-DD`, both
/// included) and its billed calls, newest day first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageReport {
    /// The first day.
    pub from: String,
    /// The last day.
    pub to: String,
    /// Billed calls per day, survey and caller.
    pub rows: Vec<UsageRow>,
    /// The account's daily quota and what today has used of it (absent: no quota).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<DailyQuota>,
}

/// An account's quota of billed calls per UTC day, and today's use of it (every caller
/// of the account, on every replica).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DailyQuota {
    /// Today (UTC), `YYYY-MM-DD`: the quota starts again at its end.
    pub day: String,
    /// Billed calls the account may make in a day.
    pub calls: u64,
    /// Billed calls made today.
    pub used: u64,
}

impl DailyQuota {
    /// Calls left today.
    pub fn left(&self) -> u64 {
        self.calls.saturating_sub(self.used)
    }
}

/// Billed calls on one day for one survey (and user, where known): a row of
/// [`UsageReport`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageRow {
    /// The UTC day, `YYYY-MM-DD`.
    pub day: String,
    /// The `SurveyCode`.
    pub survey: String,
    /// The app user who ran the queries; absent for calls made with an API key or a token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The identity provider whose bearer tokens made the calls (single sign-on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idp: Option<String>,
    /// Billed calls.
    pub calls: u64,
}

/// The `error.code` of the app backend's own failures (contract failures keep the
/// contract's codes). The HTTP status and `ResultCode` are [`AppErrorCode::status`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AppErrorCode {
    /// 401: no live session (never signed in, expired, or signed out elsewhere).
    NotSignedIn,
    /// 401: wrong username or password.
    InvalidCredentials,
    /// 429: locked after too many failed sign-ins, or too many session cookies naming no
    /// session from the address (with `Retry-After`).
    TooManyAttempts,
    /// 403: a non-GET request from an origin that is neither the server nor allowed.
    ForbiddenOrigin,
    /// 404: nothing here by that name.
    NotFound,
    /// 400: a malformed body for an `/app` route, or a table of more billed calls than
    /// the account's whole daily quota.
    InvalidRequest,
    /// 503: the server has no key for its upstream, so it runs no queries.
    NotConfigured,
    /// 502: the upstream could not be reached, even after retries.
    UpstreamUnreachable,
    /// 409: the account holds as many usable keys as the app creates.
    TooManyKeys,
    /// 413: a body over the route's limit (64 KiB; a table's 1 MiB).
    PayloadTooLarge,
}

impl AppErrorCode {
    /// The code as it appears in `error.code`.
    pub fn as_str(self) -> &'static str {
        match self {
            AppErrorCode::NotSignedIn => "not_signed_in",
            AppErrorCode::InvalidCredentials => "invalid_credentials",
            AppErrorCode::TooManyAttempts => "too_many_attempts",
            AppErrorCode::ForbiddenOrigin => "forbidden_origin",
            AppErrorCode::NotFound => "not_found",
            AppErrorCode::InvalidRequest => "invalid_request",
            AppErrorCode::NotConfigured => "not_configured",
            AppErrorCode::UpstreamUnreachable => "upstream_unreachable",
            AppErrorCode::TooManyKeys => "too_many_keys",
            AppErrorCode::PayloadTooLarge => "payload_too_large",
        }
    }

    /// The HTTP status (and `ResultCode`) that goes with the code.
    pub fn status(self) -> u16 {
        match self {
            AppErrorCode::NotSignedIn | AppErrorCode::InvalidCredentials => 401,
            AppErrorCode::TooManyAttempts => 429,
            AppErrorCode::ForbiddenOrigin => 403,
            AppErrorCode::NotFound => 404,
            AppErrorCode::InvalidRequest => 400,
            AppErrorCode::NotConfigured => 503,
            AppErrorCode::UpstreamUnreachable => 502,
            AppErrorCode::TooManyKeys => 409,
            AppErrorCode::PayloadTooLarge => 413,
        }
    }

    /// Whether `envelope` is the backend's own "sign in first" (not an upstream 401 about
    /// the app's key, which is passed through with its own code).
    pub fn is_session_ended(envelope: &crate::ErrorEnvelope) -> bool {
        envelope.result_code == i64::from(AppErrorCode::NotSignedIn.status())
            && envelope
                .error
                .as_ref()
                .is_some_and(|detail| detail.code == AppErrorCode::NotSignedIn.as_str())
    }
}

impl fmt::Display for AppErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde::de::DeserializeOwned;
    use serde_json::{json, Value};

    /// `value` serialises to exactly `expected`, and `expected` reads back as `value`.
    fn pinned<T>(value: &T, expected: Value)
    where
        T: Serialize + DeserializeOwned + PartialEq + fmt::Debug,
    {
        assert_eq!(serde_json::to_value(value).unwrap(), expected);
        assert_eq!(&serde_json::from_value::<T>(expected).unwrap(), value);
    }

    fn codebook() -> Codebook {
        Codebook {
            code: "DEMO".into(),
            name: "Demo".into(),
            respondents: 8,
            weight_total: 12.5,
            data_version: Some("0123456789abcdef0123456789abcdef".into()),
            audience_report_units: 1000,
            unstable_max_resps: 60,
            groups: vec![
                GroupEntry {
                    value: "N".into(),
                    label: Some("North".into()),
                },
                GroupEntry {
                    value: "S".into(),
                    label: None,
                },
            ],
            bases: vec![BaseEntry {
                code: "ADULTS".into(),
                label: Some("Adults".into()),
                expr: "*".into(),
                respondents: 8,
                weighted: 12.5,
                group_totals: None,
            }],
            codes: vec![CodeEntry {
                code: "F2554".into(),
                label: None,
                expr: "GENDER = 2".into(),
            }],
            variables: vec![
                VariableEntry {
                    name: "GENDER".into(),
                    label: Some("Gender".into()),
                    distinct: 2,
                    min: Some(1.0),
                    max: Some(2.0),
                    values: vec![
                        ValueEntry {
                            value: 1.0,
                            label: Some("Male".into()),
                        },
                        ValueEntry {
                            value: 2.0,
                            label: None,
                        },
                    ],
                },
                VariableEntry {
                    name: "EMPTY".into(),
                    label: None,
                    distinct: 0,
                    min: None,
                    max: None,
                    values: vec![],
                },
            ],
        }
    }

    /// The app refuses to run a table naming what the survey lacks, saying which entry
    /// and why, as the engine would classify it.
    #[test]
    fn a_table_naming_what_the_survey_lacks_is_said_before_it_runs() {
        use crate::table::{TableAxis, TableRequest};
        let axis = |expression: &str| TableAxis {
            expression: expression.into(),
            label: None,
        };
        let table = |rows: Vec<TableAxis>| {
            TableRequest {
                survey: "DEMO".into(),
                population_base: "ADULTS".into(),
                group: None,
                filter: None,
                rows,
                columns: vec![axis("GENDER = 1"), axis("GENDR = 2 OR F2554")],
                confidence: Default::default(),
                bonferroni: false,
                holm: false,
            }
            .validate()
            .unwrap()
        };
        let book = codebook();
        assert_eq!(
            book.unknown_in_table(&table(vec![axis("F2554"), axis("EMPTY >= 1")])),
            Some(
                "Not in survey DEMO: column 2 (GENDR = 2 OR F2554): the survey does not \
                 define 'GENDR'. Correct or remove them to run the table."
                    .into()
            )
        );
        let said = book
            .unknown_in_table(&table(vec![axis("GENDER"), axis("F2554 = 1 AND NOPE = 1")]))
            .unwrap();
        assert_eq!(
            said,
            "Not in survey DEMO: row 1 (GENDER): 'GENDER' is a variable, to compare (as in \
             'GENDER = 2'), not a named code; row 2 (F2554 = 1 AND NOPE = 1): the survey \
             does not define 'NOPE'; 'F2554' is a named code, to name alone (as in \
             'F2554'), not a variable; column 2 (GENDR = 2 OR F2554): the survey does not \
             define 'GENDR'. Correct or remove them to run the table."
        );
        let many = table((0..7).map(|i| axis(&format!("X{i} = 1"))).collect());
        let said = book.unknown_in_table(&many).unwrap();
        assert!(
            said.contains("row 5 (X4 = 1)") && !said.contains("row 6"),
            "{said}"
        );
        assert!(said.ends_with("; and 3 more. Correct or remove them to run the table."));
        let known = TableRequest {
            columns: vec![axis("GENDER = 1")],
            ..table(vec![axis("F2554")]).request
        };
        assert_eq!(
            book.unknown_in_table(&known.clone().validate().unwrap()),
            None
        );
        // The filter first: it would empty every cell.
        let filtered = TableRequest {
            filter: Some("AGEE >= 35".into()),
            ..known
        };
        assert_eq!(
            book.unknown_in_table(&filtered.validate().unwrap()),
            Some(
                "Not in survey DEMO: filter (AGEE >= 35): the survey does not define 'AGEE'. \
                 Correct or remove them to run the table."
                    .into()
            )
        );
    }

    #[test]
    fn codebook_members() {
        pinned(
            &codebook(),
            json!({
                "code": "DEMO", "name": "Demo", "respondents": 8, "weightTotal": 12.5,
                "dataVersion": "0123456789abcdef0123456789abcdef",
                "audienceReportUnits": 1000, "unstableMaxResps": 60,
                "groups": [{"value": "N", "label": "North"}, {"value": "S"}],
                "bases": [{"code": "ADULTS", "label": "Adults", "expr": "*",
                           "respondents": 8, "weighted": 12.5}],
                "codes": [{"code": "F2554", "expr": "GENDER = 2"}],
                "variables": [
                    {"name": "GENDER", "label": "Gender", "distinct": 2, "min": 1.0, "max": 2.0,
                     "values": [{"value": 1.0, "label": "Male"}, {"value": 2.0}]},
                    {"name": "EMPTY", "distinct": 0, "values": []}
                ]
            }),
        );
    }

    #[test]
    fn served_codebook_carries_group_totals() {
        let mut book = codebook();
        book.bases[0].group_totals = Some(BTreeMap::from([(
            "N".to_owned(),
            Totals {
                respondents: 3,
                weighted: 4.25,
            },
        )]));
        let value = serde_json::to_value(&book).unwrap();
        assert_eq!(
            value["bases"][0]["groupTotals"],
            json!({"N": {"respondents": 3, "weighted": 4.25}})
        );
        assert_eq!(serde_json::from_value::<Codebook>(value).unwrap(), book);
        // A served codebook whose survey has no groups carries an empty map, not none.
        book.bases[0].group_totals = Some(BTreeMap::new());
        assert_eq!(
            serde_json::to_value(&book).unwrap()["bases"][0]["groupTotals"],
            json!({})
        );
    }

    #[test]
    fn search_is_trimmed_and_case_blind() {
        assert_eq!(CodebookSearch::new("  "), None);
        assert_eq!(CodebookQuery::default().search(), None);
        let search = CodebookQuery {
            q: Some(" gEnDeR ".into()),
        }
        .search()
        .unwrap();
        assert!(search.finds("GENDER = 2"));
        assert!(!search.finds("AGE"));
        let mut book = codebook();
        search.retain_in(&mut book);
        // The code whose expression names GENDER stays; so does the GENDER variable.
        assert_eq!(book.codes.len(), 1);
        let names: Vec<&str> = book.variables.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["GENDER"]);
        // A value's label keeps its variable, though the variable itself does not match.
        let mut book = codebook();
        CodebookSearch::new("male").unwrap().retain_in(&mut book);
        assert!(book.codes.is_empty());
        assert_eq!(book.variables.len(), 1);
        assert!(!CodebookSearch::new("male")
            .unwrap()
            .matches_variable(&book.variables[0]));
    }

    /// Words are found each on its own, in any order, across an entry's parts.
    #[test]
    fn a_search_finds_every_word_anywhere_in_an_entry() {
        let search = |text: &str| CodebookSearch::new(text).unwrap();
        assert!(search("brand 01 coffee").finds("Coffee: brand 01"));
        assert!(!search("coffee tea").finds("Coffee: brand 01"));
        assert!(search("women 25").finds_in(&["F2554", "Women 25-54"]));
        let book = codebook();
        let gender = &book.variables[0];
        let male = &gender.values[0];
        assert_eq!(male.label.as_deref(), Some("Male"));
        assert!(search("male gender").matches_value(gender, male));
        assert!(!search("male gender").matches_variable(gender));
        assert!(!search("male gender").matches_value(gender, &gender.values[1]));
    }

    #[test]
    fn session_and_survey_members() {
        pinned(
            &Credentials {
                username: "ana".into(),
                password: "pw".into(),
            },
            json!({"username": "ana", "password": "pw"}),
        );
        pinned(
            &Me {
                username: "ana".into(),
                account: "acme".into(),
            },
            json!({"username": "ana", "account": "acme"}),
        );
        pinned(
            &SurveySummary {
                code: "DEMO".into(),
                name: "Demo".into(),
                respondents: 8,
                all_groups: true,
            },
            json!({"code": "DEMO", "name": "Demo", "respondents": 8, "allGroups": true}),
        );
        pinned(&CodebookQuery::default(), json!({}));
        pinned(
            &CodebookQuery {
                q: Some("gender".into()),
            },
            json!({"q": "gender"}),
        );
    }

    #[test]
    fn key_members() {
        pinned(
            &KeyInfo {
                id: "k1".into(),
                env: "live".into(),
                created_at: "2026-01-02T03:04:05Z".into(),
                expires_at: None,
                revoked_at: Some("2026-02-01T00:00:00Z".into()),
            },
            json!({"id": "k1", "env": "live", "createdAt": "2026-01-02T03:04:05Z",
                   "expiresAt": null, "revokedAt": "2026-02-01T00:00:00Z"}),
        );
        pinned(
            &NewKeyRequest {
                env: "test".into(),
                expires_in_days: None,
            },
            json!({"env": "test", "expiresInDays": null}),
        );
        pinned(
            &NewKeyRequest {
                env: "test".into(),
                expires_in_days: Some(30),
            },
            json!({"env": "test", "expiresInDays": 30}),
        );
        // The backend accepts a request without `expiresInDays`.
        assert_eq!(
            serde_json::from_value::<NewKeyRequest>(json!({"env": "live"})).unwrap(),
            NewKeyRequest {
                env: "live".into(),
                expires_in_days: None,
            }
        );
        pinned(
            &NewKey {
                id: "k1".into(),
                key: "ctx_live_k1_secret".into(),
            },
            json!({"id": "k1", "key": "ctx_live_k1_secret"}),
        );
    }

    #[test]
    fn usage_members() {
        let mut row = UsageRow {
            day: "2026-01-02".into(),
            survey: "DEMO".into(),
            user: None,
            idp: None,
            calls: 7,
        };
        pinned(
            &row,
            json!({"day": "2026-01-02", "survey": "DEMO", "calls": 7}),
        );
        row.user = Some("ana".into());
        pinned(
            &row,
            json!({"day": "2026-01-02", "survey": "DEMO", "user": "ana", "calls": 7}),
        );
        row.user = None;
        row.idp = Some("corp".into());
        pinned(
            &row,
            json!({"day": "2026-01-02", "survey": "DEMO", "idp": "corp", "calls": 7}),
        );
        let mut report = UsageReport {
            from: "2026-01-01".into(),
            to: "2026-01-31".into(),
            rows: vec![row],
            quota: None,
        };
        pinned(
            &report,
            json!({"from": "2026-01-01", "to": "2026-01-31", "rows": [
                {"day": "2026-01-02", "survey": "DEMO", "idp": "corp", "calls": 7}]}),
        );
        let quota = DailyQuota {
            day: "2026-01-31".into(),
            calls: 500,
            used: 37,
        };
        assert_eq!(quota.left(), 463);
        assert_eq!(
            DailyQuota {
                used: 501,
                ..quota.clone()
            }
            .left(),
            0
        );
        report.quota = Some(quota);
        pinned(
            &report,
            json!({"from": "2026-01-01", "to": "2026-01-31", "rows": [
                {"day": "2026-01-02", "survey": "DEMO", "idp": "corp", "calls": 7}],
                "quota": {"day": "2026-01-31", "calls": 500, "used": 37}}),
        );
        pinned(&UsageQuery::default(), json!({}));
        pinned(
            &UsageQuery {
                from: Some("2026-01-01".into()),
                to: None,
            },
            json!({"from": "2026-01-01"}),
        );
    }

    #[test]
    fn secrets_stay_out_of_debug() {
        let credentials = Credentials {
            username: "ana".into(),
            password: "hunter2".into(),
        };
        let key = NewKey {
            id: "k1".into(),
            key: "ctx_live_k1_secret".into(),
        };
        let shown = format!("{credentials:?} {key:?}");
        assert!(shown.contains("ana") && shown.contains("k1"), "{shown}");
        assert!(
            !shown.contains("hunter2") && !shown.contains("secret"),
            "{shown}"
        );
    }

    #[test]
    fn error_codes_serialise_as_their_names() {
        for code in [
            AppErrorCode::NotSignedIn,
            AppErrorCode::InvalidCredentials,
            AppErrorCode::TooManyAttempts,
            AppErrorCode::ForbiddenOrigin,
            AppErrorCode::NotFound,
            AppErrorCode::InvalidRequest,
            AppErrorCode::NotConfigured,
            AppErrorCode::UpstreamUnreachable,
            AppErrorCode::TooManyKeys,
        ] {
            pinned(&code, Value::String(code.as_str().to_owned()));
            assert!((400..600).contains(&code.status()), "{code}");
        }
    }

    #[test]
    fn session_ended_is_the_backends_own_401() {
        let envelope = |status: i64, code: &str| crate::ErrorEnvelope {
            result_code: status,
            result_description: "x".into(),
            error: Some(crate::ErrorDetail {
                code: code.into(),
                message: "x".into(),
                field: None,
                hint: None,
            }),
        };
        assert!(AppErrorCode::is_session_ended(&envelope(
            401,
            "not_signed_in"
        )));
        // The upstream's 401 about the app's own key is not the user's session.
        assert!(!AppErrorCode::is_session_ended(&envelope(
            401,
            "unauthorized"
        )));
        assert!(!AppErrorCode::is_session_ended(&envelope(
            403,
            "not_signed_in"
        )));
    }
}
