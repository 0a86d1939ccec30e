//! Every error the service can answer with, and the one place each becomes its envelope.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::limits::MAX_BODY_BYTES;

/// A rejected request. `status()` is the HTTP status and equals the envelope's `ResultCode`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// Body not JSON, not an object, a required member missing or of the wrong type,
    /// or an identifier that breaks its format.
    #[error("{message}")]
    InvalidRequest {
        /// The request member at fault, when there is one.
        field: Option<String>,
        /// Human-readable text.
        message: String,
        /// How to fix it.
        hint: Option<String>,
    },
    /// `TargetCodes` has the wrong count, or a code is empty, too long or does not parse.
    #[error("{message}")]
    InvalidTargetCodes {
        /// Human-readable text.
        message: String,
        /// How to fix it; for a parse error, the position and what was expected.
        hint: String,
    },
    /// The population base is not defined in the survey.
    #[error("PopulationBaseCode '{base}' is not defined in this survey.")]
    InvalidPopulationBase {
        /// The base code the request named (already validated as a short identifier).
        base: String,
    },
    /// No usable API key.
    #[error("The Service-Engine-Authorizer header is missing, malformed, invalid or expired.")]
    Unauthorized,
    /// Valid key, no entitlement to the survey or group (also for unknown surveys:
    /// the two are indistinguishable on purpose).
    #[error("The API key is not entitled to the requested survey or authorization group.")]
    ForbiddenSurvey,
    /// The body is larger than the service reads.
    #[error("The request body is larger than {MAX_BODY_BYTES} bytes.")]
    PayloadTooLarge,
    /// The body is not declared as JSON, or as JSON in another charset than UTF-8.
    #[error("Content-Type must be application/json, in UTF-8.")]
    UnsupportedMediaType,
    /// No such path under the API (e.g. `POST /v1/crosstabs`).
    #[error("There is no such path in this API.")]
    NotFound,
    /// The path exists, the method does not (e.g. `GET /v1/crosstab`).
    #[error("This method is not allowed on this path.")]
    MethodNotAllowed,
    /// The request body did not arrive whole within the server's deadline.
    #[error("The request body did not arrive in time.")]
    RequestTimeout,
    /// Over the caller's request rate (or its address's pace); retry after
    /// `retry_after_s`.
    #[error("Too many requests: retry in {}.", seconds(*retry_after_s))]
    RateLimited {
        /// Seconds until a retry can succeed (the `Retry-After` header).
        retry_after_s: u64,
    },
    /// The account's daily quota of billed calls is used; retry after `retry_after_s`
    /// (the next UTC day, or a second when calls still in flight may give places back).
    /// The same `rate_limited` to clients, said apart in words.
    #[error("The account's daily quota of billed calls is used: retry in {}.", seconds(*retry_after_s))]
    OverDailyQuota {
        /// Seconds until a retry can succeed (the `Retry-After` header).
        retry_after_s: u64,
    },
    /// An `Idempotency-Key` the account already used with another request body.
    #[error("This Idempotency-Key was already used with another request body.")]
    IdempotencyKeyReused,
    /// The query did not finish within the server's compute deadline (not billed).
    #[error(
        "The query took longer than the server allows; retry later or ask a simpler question."
    )]
    DeadlineExceeded,
    /// Anything else; never carries internals.
    #[error("Internal server error.")]
    Internal,
}

/// A wait of `n` seconds in words: "1 second", "30 seconds", "5 minutes", "11 hours
/// 58 minutes" (rounded up: never sooner than `Retry-After`, which keeps the seconds).
fn seconds(n: u64) -> String {
    let plural = |n: u64, unit: &str| format!("{n} {unit}{}", if n == 1 { "" } else { "s" });
    if n < 120 {
        return plural(n, "second");
    }
    let minutes = n.div_ceil(60);
    match (minutes / 60, minutes % 60) {
        (0, m) => plural(m, "minute"),
        (h, 0) => plural(h, "hour"),
        (h, m) => format!("{} {}", plural(h, "hour"), plural(m, "minute")),
    }
}

impl ApiError {
    /// The HTTP status, which is also the envelope's `ResultCode`.
    pub fn status(&self) -> u16 {
        match self {
            ApiError::InvalidRequest { .. }
            | ApiError::InvalidTargetCodes { .. }
            | ApiError::InvalidPopulationBase { .. } => 400,
            ApiError::Unauthorized => 401,
            ApiError::ForbiddenSurvey => 403,
            ApiError::PayloadTooLarge => 413,
            ApiError::NotFound => 404,
            ApiError::MethodNotAllowed => 405,
            ApiError::RequestTimeout => 408,
            ApiError::UnsupportedMediaType => 415,
            ApiError::IdempotencyKeyReused => 422,
            ApiError::RateLimited { .. } | ApiError::OverDailyQuota { .. } => 429,
            ApiError::Internal => 500,
            ApiError::DeadlineExceeded => 503,
        }
    }

    /// The machine-readable `error.code`.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::InvalidRequest { .. } => "invalid_request",
            ApiError::InvalidTargetCodes { .. } => "invalid_target_codes",
            ApiError::InvalidPopulationBase { .. } => "invalid_population_base",
            ApiError::Unauthorized => "unauthorized",
            ApiError::ForbiddenSurvey => "forbidden_survey",
            ApiError::PayloadTooLarge => "payload_too_large",
            ApiError::NotFound => "not_found",
            ApiError::MethodNotAllowed => "method_not_allowed",
            ApiError::UnsupportedMediaType => "unsupported_media_type",
            ApiError::RequestTimeout => "request_timeout",
            ApiError::IdempotencyKeyReused => "idempotency_key_reused",
            ApiError::RateLimited { .. } | ApiError::OverDailyQuota { .. } => "rate_limited",
            ApiError::DeadlineExceeded => "deadline_exceeded",
            ApiError::Internal => "internal_error",
        }
    }

    /// Whether the spec tells clients to retry this (5xx with exponential backoff; 429
    /// after its `Retry-After`).
    pub fn retryable(&self) -> bool {
        self.status() >= 500 || self.retry_after_s().is_some()
    }

    /// Seconds a client must wait before retrying (the `Retry-After` header), if any.
    pub fn retry_after_s(&self) -> Option<u64> {
        match self {
            ApiError::RateLimited { retry_after_s }
            | ApiError::OverDailyQuota { retry_after_s } => Some(*retry_after_s),
            _ => None,
        }
    }

    fn field(&self) -> Option<String> {
        match self {
            ApiError::InvalidRequest { field, .. } => field.clone(),
            ApiError::InvalidTargetCodes { .. } => Some("TargetCodes".to_owned()),
            ApiError::InvalidPopulationBase { .. } => Some("PopulationBaseCode".to_owned()),
            ApiError::ForbiddenSurvey => Some("SurveyCode".to_owned()),
            _ => None,
        }
    }

    fn hint(&self) -> Option<String> {
        match self {
            ApiError::InvalidRequest { hint, .. } => hint.clone(),
            ApiError::InvalidTargetCodes { hint, .. } => Some(hint.clone()),
            ApiError::InvalidPopulationBase { .. } => Some(
                "Use a population base code defined by the survey's codebook.".to_owned(),
            ),
            ApiError::Unauthorized => Some(
                "Send a valid API key in the Service-Engine-Authorizer header. Do not retry with the same key: fetch a fresh key from the developer portal first."
                    .to_owned(),
            ),
            ApiError::ForbiddenSurvey => Some(
                "Ask your account administrator to license this survey and authorization group for your key.".to_owned(),
            ),
            ApiError::PayloadTooLarge => {
                Some(format!("Send a request body of at most {MAX_BODY_BYTES} bytes."))
            }
            ApiError::UnsupportedMediaType => {
                Some("Send the body as JSON in UTF-8 with 'Content-Type: application/json' (no charset, or charset=utf-8).".to_owned())
            }
            ApiError::NotFound => Some(
                "Check the path: GET /v1/docs describes the API's paths.".to_owned(),
            ),
            ApiError::MethodNotAllowed => Some(
                "Use a method the Allow header lists: POST /v1/crosstab, GET /v1/docs.".to_owned(),
            ),
            ApiError::RequestTimeout => {
                Some("Send the whole body promptly after the request's head.".to_owned())
            }
            ApiError::IdempotencyKeyReused => Some(
                "Send a new Idempotency-Key for a new request; reuse one only to retry the very same body."
                    .to_owned(),
            ),
            ApiError::RateLimited { .. } => Some(
                "Wait the Retry-After header's seconds, then retry; ask for a higher limit if this persists."
                    .to_owned(),
            ),
            ApiError::OverDailyQuota { .. } => Some(
                "Wait the Retry-After header's seconds, then retry; ask your account administrator for a larger quota if the day's calls are not enough."
                    .to_owned(),
            ),
            ApiError::DeadlineExceeded | ApiError::Internal => {
                Some("Retry with exponential backoff.".to_owned())
            }
        }
    }

    /// The error envelope for this error: the only place errors become wire bodies.
    pub fn envelope(&self) -> ErrorEnvelope {
        let message = self.to_string();
        ErrorEnvelope {
            result_code: i64::from(self.status()),
            result_description: message.clone(),
            error: Some(ErrorDetail {
                code: self.code().to_owned(),
                message,
                field: self.field(),
                hint: self.hint(),
            }),
        }
    }

    /// Shorthand for an `invalid_request` about one member.
    pub(crate) fn invalid(field: &str, message: String, hint: Option<String>) -> Self {
        ApiError::InvalidRequest {
            field: Some(field.to_owned()),
            message,
            hint,
        }
    }
}

/// Body of every failure response.
#[cfg_attr(feature = "ts", derive(tsify::Tsify))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorEnvelope {
    /// Numeric status; equals the HTTP status for 4xx and 5xx.
    #[serde(rename = "ResultCode")]
    pub result_code: i64,
    /// Human-readable text.
    #[serde(rename = "ResultDescription")]
    pub result_description: String,
    /// Machine-readable detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorDetail>,
}

/// Machine-readable part of the error envelope.
#[cfg_attr(feature = "ts", derive(tsify::Tsify))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail {
    /// Machine-readable code; clients branch on this.
    pub code: String,
    /// Same wording as `ResultDescription`.
    pub message: String,
    /// The request member at fault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// Advice on how to fix the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_envelope_has_matching_status_message_and_no_nulls() {
        let all = [
            ApiError::invalid("SurveyCode", "SurveyCode is required.".into(), None),
            ApiError::InvalidTargetCodes {
                message: "m".into(),
                hint: "h".into(),
            },
            ApiError::InvalidPopulationBase { base: "X".into() },
            ApiError::Unauthorized,
            ApiError::ForbiddenSurvey,
            ApiError::PayloadTooLarge,
            ApiError::UnsupportedMediaType,
            ApiError::NotFound,
            ApiError::MethodNotAllowed,
            ApiError::Internal,
        ];
        for error in all {
            let envelope = error.envelope();
            assert_eq!(envelope.result_code, i64::from(error.status()));
            let detail = envelope.error.as_ref().unwrap();
            assert_eq!(detail.message, envelope.result_description);
            let json = serde_json::to_string(&envelope).unwrap();
            assert!(!json.contains("null"), "{json}");
        }
        assert!(ApiError::Unauthorized
            .envelope()
            .error
            .unwrap()
            .field
            .is_none());
        assert_eq!(
            ApiError::ForbiddenSurvey
                .envelope()
                .error
                .unwrap()
                .field
                .as_deref(),
            Some("SurveyCode")
        );
        assert!(!ApiError::Internal.to_string().contains("panic"));
    }

    /// A rate and a daily quota are one code to clients, said apart in words, each with
    /// its wait in the header and in the text.
    #[test]
    fn a_rate_and_a_quota_are_one_code_said_apart() {
        let rate = ApiError::RateLimited { retry_after_s: 1 };
        let quota = ApiError::OverDailyQuota { retry_after_s: 3 };
        assert_eq!(rate.to_string(), "Too many requests: retry in 1 second.");
        let later = |s| ApiError::OverDailyQuota { retry_after_s: s }.to_string();
        assert!(later(119).ends_with("retry in 119 seconds."));
        assert!(later(121).ends_with("retry in 3 minutes."));
        assert!(later(3600).ends_with("retry in 1 hour."));
        assert!(later(43_141).ends_with("retry in 12 hours."));
        assert!(later(43_000).ends_with("retry in 11 hours 57 minutes."));
        assert_eq!(
            quota.to_string(),
            "The account's daily quota of billed calls is used: retry in 3 seconds."
        );
        for (error, wait) in [(rate, 1), (quota, 3)] {
            assert_eq!((error.status(), error.code()), (429, "rate_limited"));
            assert_eq!(error.retry_after_s(), Some(wait));
            assert!(error.retryable());
        }
    }
}
