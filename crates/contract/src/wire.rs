//! Wire types with the spec's exact JSON member names.

use crate::expr::{Expr, NameKind};
use serde::{Deserialize, Serialize};
use serde_repr::{Deserialize_repr, Serialize_repr};
use utoipa::ToSchema;

/// The `AuthorizationGroup` value that includes every group.
pub const ALL_GROUPS: &str = "_ALL_";

/// Body of `POST /crosstab`. Unknown members are ignored.
#[cfg_attr(feature = "ts", derive(tsify::Tsify))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({
    "SurveyCode": "DEMO",
    "AuthorizationGroup": "_ALL_",
    "PopulationBaseCode": "ADULTS",
    "TargetCodes": ["F2554", "GENDER = 2 AND AGE BETWEEN 25 AND 54"]
}))]
pub struct CrosstabRequest {
    /// The survey dataset. One survey per request.
    #[serde(rename = "SurveyCode")]
    #[schema(min_length = 1, max_length = 64, pattern = "^[A-Za-z0-9_.-]+$")]
    pub survey_code: String,
    /// Authorization group filter; absent or `_ALL_` includes every group.
    #[serde(
        rename = "AuthorizationGroup",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(min_length = 1, max_length = 64, pattern = "^[A-Za-z0-9_.-]+$")]
    pub authorization_group: Option<String>,
    /// The population base. One base per request.
    #[serde(rename = "PopulationBaseCode")]
    #[schema(min_length = 1, max_length = 64, pattern = "^[A-Za-z0-9_.-]+$")]
    pub population_base_code: String,
    /// One or two target codes: named codes or target expressions.
    #[serde(rename = "TargetCodes")]
    #[schema(min_items = 1, max_items = 2)]
    pub target_codes: Vec<String>,
}

impl CrosstabRequest {
    /// The named group to filter by, or `None` when every group is included.
    pub fn group_filter(&self) -> Option<&str> {
        self.authorization_group
            .as_deref()
            .filter(|group| *group != ALL_GROUPS)
    }
}

/// Stability of one result: `0` stable, `1` unstable (low respondent count).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize_repr, Deserialize_repr, ToSchema)]
#[repr(u8)]
pub enum Stability {
    /// Enough respondents.
    Stable = 0,
    /// Low respondent count; use with caution.
    Unstable = 1,
}

/// One target's figures.
#[cfg_attr(feature = "ts", derive(tsify::Tsify))]
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CrosstabResult {
    /// Weighted projected audience, in `AudienceReportUnits`.
    #[serde(rename = "WgtAud")]
    pub wgt_aud: f64,
    /// Unweighted count of respondents matching the target.
    #[serde(rename = "Resps")]
    pub resps: u64,
    /// Stability flag: 0 stable, 1 unstable.
    #[serde(rename = "Stbl")]
    #[cfg_attr(feature = "ts", tsify(type = "0 | 1"))]
    pub stbl: Stability,
}

impl CrosstabResult {
    /// The entry for a target code the survey does not define.
    pub const UNKNOWN: CrosstabResult = CrosstabResult {
        wgt_aud: 0.0,
        resps: 0,
        stbl: Stability::Unstable,
    };

    /// The weighted audience in absolute terms: `WgtAud × AudienceReportUnits`.
    pub fn absolute_audience(&self, units: u32) -> f64 {
        self.wgt_aud * f64::from(units)
    }
}

/// `ResultCode` values on HTTP 200.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResultCode;

impl ResultCode {
    /// Normal success; `ResultDescription` is empty.
    pub const SUCCESS: i64 = 0;
    /// Partial: one or more target codes name a variable or code the survey does not define.
    /// Those entries are `{WgtAud: 0, Resps: 0, Stbl: 1}` and `ResultDescription` names them.
    pub const PARTIAL: i64 = 1;
}

/// Body of a 200 response from `POST /crosstab`.
#[cfg_attr(feature = "ts", derive(tsify::Tsify))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({
    "ResultCode": 0,
    "ResultDescription": "",
    "Results": [
        {"WgtAud": 28411.372, "Resps": 5321, "Stbl": 0},
        {"WgtAud": 12.5, "Resps": 14, "Stbl": 1}
    ],
    "AudienceReportUnits": 1000
}))]
pub struct CrosstabResponse {
    /// 0 success; 1 partial (see `ResultDescription`).
    #[serde(rename = "ResultCode")]
    pub result_code: i64,
    /// Empty on plain success; explains a partial result.
    #[serde(rename = "ResultDescription")]
    pub result_description: String,
    /// One entry per target code, in request order.
    #[serde(rename = "Results")]
    #[schema(min_items = 1, max_items = 2)]
    pub results: Vec<CrosstabResult>,
    /// Unit multiplier for `WgtAud`: 1000 means thousands.
    #[serde(rename = "AudienceReportUnits")]
    pub audience_report_units: u32,
}

/// A name a target uses that the survey does not define as it is used there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unknown {
    /// Neither a variable nor a named code of the survey.
    Undefined(String),
    /// A variable named alone, as a code is (`GENDER` for `GENDER = 2`).
    VariableAlone(String),
    /// A named code compared, as a variable is (`F2554 = 1` for `F2554`).
    CodeCompared(String),
}

impl Unknown {
    /// Every name in `expr` a survey does not define as it is used there (`is_variable`
    /// and `is_code` say what it defines: a variable named alone, a code compared, or
    /// neither), without repeats, in order.
    pub fn in_expr(
        expr: &Expr,
        is_variable: impl Fn(&str) -> bool,
        is_code: impl Fn(&str) -> bool,
    ) -> Vec<Unknown> {
        let mut unknown: Vec<Unknown> = Vec::new();
        expr.visit_names(&mut |kind, name| {
            let (variable, code) = (is_variable(name), is_code(name));
            let found = match kind {
                NameKind::Variable if !variable && code => Unknown::CodeCompared(name.to_owned()),
                NameKind::Code if !code && variable => Unknown::VariableAlone(name.to_owned()),
                NameKind::Variable if !variable => Unknown::Undefined(name.to_owned()),
                NameKind::Code if !code => Unknown::Undefined(name.to_owned()),
                NameKind::Variable | NameKind::Code => return,
            };
            if !unknown.contains(&found) {
                unknown.push(found);
            }
        });
        unknown
    }

    /// Why `unknown` (not empty) are not as the survey defines them, in words: "the survey
    /// does not define 'X'; 'GENDER' is a variable, to compare (…), not a named code".
    pub fn reasons(unknown: &[Unknown]) -> String {
        let of = |keep: fn(&Unknown) -> bool| -> Vec<&str> {
            unknown
                .iter()
                .filter(|u| keep(u))
                .map(Unknown::name)
                .collect()
        };
        let undefined = of(|u| matches!(u, Unknown::Undefined(_)));
        let alone = of(|u| matches!(u, Unknown::VariableAlone(_)));
        let compared = of(|u| matches!(u, Unknown::CodeCompared(_)));
        let mut reasons = Vec::new();
        if !undefined.is_empty() {
            reasons.push(format!(
                "the survey does not define {}",
                listed(undefined.into_iter())
            ));
        }
        // `'A' is a variable, …` / `'A', 'B' are variables, …`.
        let mut are = |names: &[&str], kind: &str, instead: &str| {
            if !names.is_empty() {
                let (verb, plural) = if names.len() == 1 {
                    ("is a", "")
                } else {
                    ("are", "s")
                };
                let listed = listed(names.iter().copied());
                reasons.push(format!("{listed} {verb} {kind}{plural}, {instead}"));
            }
        };
        are(
            &alone,
            "variable",
            "to compare (as in 'GENDER = 2'), not a named code",
        );
        are(
            &compared,
            "named code",
            "to name alone (as in 'F2554'), not a variable",
        );
        reasons.join("; ")
    }

    fn name(&self) -> &str {
        match self {
            Unknown::Undefined(name)
            | Unknown::VariableAlone(name)
            | Unknown::CodeCompared(name) => name,
        }
    }
}

/// `'A', 'B' and 3 more`: names as every message names what a caller sent, shortened, and
/// a long list cut (a 1,024-character target may name a hundred things).
fn listed<'a>(names: impl ExactSizeIterator<Item = &'a str>) -> String {
    const LISTED: usize = 10;
    let count = names.len();
    let mut text = names
        .take(LISTED)
        .map(|name| format!("'{}'", crate::expr::shorten(name)))
        .collect::<Vec<_>>()
        .join(", ");
    if count > LISTED {
        text.push_str(&format!(" and {} more", count - LISTED));
    }
    text
}

impl CrosstabResponse {
    /// Builds the response for `results` (request order), given the names the survey
    /// does not define as used (each in the order first met). Any makes it partial.
    pub fn new(results: Vec<CrosstabResult>, units: u32, unknown: &[Unknown]) -> Self {
        let (result_code, result_description) = if unknown.is_empty() {
            (ResultCode::SUCCESS, String::new())
        } else {
            (
                ResultCode::PARTIAL,
                format!(
                    "Partial result: {}; those targets are reported as 0 respondents.",
                    Unknown::reasons(unknown)
                ),
            )
        };
        CrosstabResponse {
            result_code,
            result_description,
            results,
            audience_report_units: units,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_partial_says_how_each_name_is_unknown() {
        let unknown = [
            Unknown::Undefined("X".into()),
            Unknown::VariableAlone("GENDER".into()),
            Unknown::CodeCompared("F2554".into()),
            Unknown::VariableAlone("AGE".into()),
        ];
        let partial = CrosstabResponse::new(vec![CrosstabResult::UNKNOWN], 1, &unknown);
        assert_eq!(
            partial.result_description,
            "Partial result: the survey does not define 'X'; 'GENDER', 'AGE' are variables, \
             to compare (as in 'GENDER = 2'), not a named code; 'F2554' is a named code, to \
             name alone (as in 'F2554'), not a variable; those targets are reported as 0 \
             respondents."
        );
        let alone = [Unknown::VariableAlone("GENDER".into())];
        let partial = CrosstabResponse::new(vec![CrosstabResult::UNKNOWN], 1, &alone);
        assert_eq!(
            partial.result_description,
            "Partial result: 'GENDER' is a variable, to compare (as in 'GENDER = 2'), not a \
             named code; those targets are reported as 0 respondents."
        );
    }

    #[test]
    fn a_partial_names_the_unknown_short_and_at_most_ten() {
        let names: Vec<Unknown> = (0..12)
            .map(|i| Unknown::Undefined(format!("N{i}")))
            .collect();
        let partial = CrosstabResponse::new(vec![CrosstabResult::UNKNOWN], 1, &names);
        assert_eq!(partial.result_code, ResultCode::PARTIAL);
        assert_eq!(
            partial.result_description,
            "Partial result: the survey does not define 'N0', 'N1', 'N2', 'N3', 'N4', 'N5', \
             'N6', 'N7', 'N8', 'N9' and 2 more; those targets are reported as 0 respondents."
        );
        let long = [Unknown::Undefined("X".repeat(40))];
        let partial = CrosstabResponse::new(vec![CrosstabResult::UNKNOWN], 1, &long);
        assert!(partial
            .result_description
            .contains(&format!("'{}…'", "X".repeat(32))));
        let success = CrosstabResponse::new(vec![CrosstabResult::UNKNOWN], 1, &[]);
        assert_eq!(
            (success.result_code, success.result_description.as_str()),
            (ResultCode::SUCCESS, "")
        );
    }
}
