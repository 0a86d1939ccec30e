//! TypeScript-visible mirrors of the contract's wire types.
//!
//! The contract crate stays free of WASM concerns, so the `.d.ts` declarations come from
//! these mirrors (derived with `tsify`). Each mirror has the same serde names as its
//! original, and the `From` conversions destructure exhaustively, so a field added to the
//! contract breaks this build instead of silently missing from the TypeScript types. A
//! unit test checks that both serialize to identical JSON.

use serde::{Deserialize, Serialize};
use tsify::Tsify;

use crosstab_contract as contract;

/// Body of `POST /crosstab`. Unknown members are ignored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Tsify)]
pub struct CrosstabRequest {
    /// The survey dataset. One survey per request.
    #[serde(rename = "SurveyCode")]
    pub survey_code: String,
    /// Authorization group filter; absent or `_ALL_` includes every group.
    #[serde(
        rename = "AuthorizationGroup",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[tsify(optional)]
    pub authorization_group: Option<String>,
    /// The population base. One base per request.
    #[serde(rename = "PopulationBaseCode")]
    pub population_base_code: String,
    /// One or two target codes: named codes or target expressions.
    #[serde(rename = "TargetCodes")]
    pub target_codes: Vec<String>,
}

impl From<contract::CrosstabRequest> for CrosstabRequest {
    fn from(request: contract::CrosstabRequest) -> Self {
        let contract::CrosstabRequest {
            survey_code,
            authorization_group,
            population_base_code,
            target_codes,
        } = request;
        CrosstabRequest {
            survey_code,
            authorization_group,
            population_base_code,
            target_codes,
        }
    }
}

/// One target's figures.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Tsify)]
pub struct CrosstabResult {
    /// Weighted projected audience, in `AudienceReportUnits`.
    #[serde(rename = "WgtAud")]
    pub wgt_aud: f64,
    /// Unweighted count of respondents matching the target.
    #[serde(rename = "Resps")]
    pub resps: u64,
    /// Stability flag: 0 stable, 1 unstable (low respondent count; use with caution).
    #[serde(rename = "Stbl")]
    #[tsify(type = "0 | 1")]
    pub stbl: u8,
}

impl From<contract::CrosstabResult> for CrosstabResult {
    fn from(result: contract::CrosstabResult) -> Self {
        let contract::CrosstabResult {
            wgt_aud,
            resps,
            stbl,
        } = result;
        CrosstabResult {
            wgt_aud,
            resps,
            stbl: stbl as u8,
        }
    }
}

impl CrosstabResult {
    /// The contract's view of this result; `None` when `Stbl` is not 0 or 1.
    pub fn to_contract(self) -> Option<contract::CrosstabResult> {
        let stbl = match self.stbl {
            0 => contract::Stability::Stable,
            1 => contract::Stability::Unstable,
            _ => return None,
        };
        Some(contract::CrosstabResult {
            wgt_aud: self.wgt_aud,
            resps: self.resps,
            stbl,
        })
    }
}

/// Body of a 200 response from `POST /crosstab`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Tsify)]
pub struct CrosstabResponse {
    /// 0 success; greater than 0 partial (see `ResultDescription`).
    #[serde(rename = "ResultCode")]
    pub result_code: i64,
    /// Empty on plain success; explains a partial result.
    #[serde(rename = "ResultDescription")]
    pub result_description: String,
    /// One entry per target code, in request order.
    #[serde(rename = "Results")]
    pub results: Vec<CrosstabResult>,
    /// Unit multiplier for `WgtAud`: 1000 means thousands.
    #[serde(rename = "AudienceReportUnits")]
    pub audience_report_units: u32,
}

impl From<contract::CrosstabResponse> for CrosstabResponse {
    fn from(response: contract::CrosstabResponse) -> Self {
        let contract::CrosstabResponse {
            result_code,
            result_description,
            results,
            audience_report_units,
        } = response;
        CrosstabResponse {
            result_code,
            result_description,
            results: results.into_iter().map(Into::into).collect(),
            audience_report_units,
        }
    }
}

/// Body of every failure response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Tsify)]
pub struct ErrorEnvelope {
    /// Numeric status; equals the HTTP status for 4xx and 5xx.
    #[serde(rename = "ResultCode")]
    pub result_code: i64,
    /// Human-readable text.
    #[serde(rename = "ResultDescription")]
    pub result_description: String,
    /// Machine-readable detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[tsify(optional)]
    pub error: Option<ErrorDetail>,
}

/// Machine-readable part of the error envelope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Tsify)]
pub struct ErrorDetail {
    /// Machine-readable code; clients branch on this.
    pub code: String,
    /// Same wording as `ResultDescription`.
    pub message: String,
    /// The request member at fault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[tsify(optional)]
    pub field: Option<String>,
    /// Advice on how to fix the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[tsify(optional)]
    pub hint: Option<String>,
}

impl From<contract::ErrorEnvelope> for ErrorEnvelope {
    fn from(envelope: contract::ErrorEnvelope) -> Self {
        let contract::ErrorEnvelope {
            result_code,
            result_description,
            error,
        } = envelope;
        ErrorEnvelope {
            result_code,
            result_description,
            error: error.map(|detail| {
                let contract::ErrorDetail {
                    code,
                    message,
                    field,
                    hint,
                } = detail;
                ErrorDetail {
                    code,
                    message,
                    field,
                    hint,
                }
            }),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn mirrors_serialize_like_the_contract() {
        let request = contract::CrosstabRequest {
            survey_code: "DEMO".into(),
            authorization_group: None,
            population_base_code: "ADULTS".into(),
            target_codes: vec!["F2554".into(), "GENDER = 2".into()],
        };
        let with_group = contract::CrosstabRequest {
            authorization_group: Some("_ALL_".into()),
            ..request.clone()
        };
        for request in [request, with_group] {
            assert_eq!(
                serde_json::to_value(&request).unwrap(),
                serde_json::to_value(CrosstabRequest::from(request)).unwrap()
            );
        }
        let response = contract::CrosstabResponse::new(
            vec![
                contract::CrosstabResult {
                    wgt_aud: 12.5,
                    resps: 14,
                    stbl: contract::Stability::Unstable,
                },
                contract::CrosstabResult {
                    wgt_aud: 28411.372,
                    resps: 5321,
                    stbl: contract::Stability::Stable,
                },
            ],
            1000,
            &["X".into()],
        );
        assert_eq!(
            serde_json::to_value(&response).unwrap(),
            serde_json::to_value(CrosstabResponse::from(response)).unwrap()
        );
        for error in [
            contract::ApiError::Unauthorized,
            contract::ApiError::ForbiddenSurvey,
            contract::ApiError::InvalidPopulationBase { base: "X".into() },
        ] {
            assert_eq!(
                serde_json::to_value(error.envelope()).unwrap(),
                serde_json::to_value(ErrorEnvelope::from(error.envelope())).unwrap()
            );
        }
    }
}
