//! Checking a server answer against the contract and classifying it the way the spec
//! tells clients to, with the retry advice that goes with each class.

use serde::Serialize;
use serde_json::{Map, Value};
use tsify::Tsify;

use crosstab_contract::limits::{MAX_TARGET_CODES, MIN_TARGET_CODES};
use crosstab_contract::validate::kind_of;
use crosstab_contract::{
    CrosstabResponse, CrosstabResult, ErrorDetail, ErrorEnvelope, ResultCode, Stability,
};

/// What a client should do about an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Tsify)]
#[serde(rename_all = "camelCase")]
pub enum Retry {
    /// Don't retry: the same request fails identically (4xx but 401, 408 and 429) or needs
    /// no retry (200).
    Never,
    /// 401: don't retry with the same key; fetch a fresh key from the portal first.
    AfterFreshKey,
    /// 5xx, 408 (the body did not arrive in time, so was never read), or a 429 without a
    /// usable `Retry-After`: retry with exponential backoff and jitter (see `retryDelayMs`).
    Backoff,
    /// 429: retry once `retryAfterMs` (the `Retry-After` header) have passed.
    AfterDelay,
}

/// A server answer, classified. Every class carries the HTTP `status`, the `retry`
/// advice and `problems`: the ways the answer departs from the contract (empty when it
/// follows it).
#[derive(Debug, Clone, PartialEq, Serialize, Tsify)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum ParsedResponse {
    /// 200 with `ResultCode` 0.
    Success {
        /// HTTP status.
        status: u16,
        /// The response body.
        response: CrosstabResponse,
        /// `never`.
        retry: Retry,
        /// Departures from the contract that don't make the body unusable.
        problems: Vec<String>,
    },
    /// 200 with `ResultCode` greater than 0: a partial or conditional result.
    Partial {
        /// HTTP status.
        status: u16,
        /// The response body.
        response: CrosstabResponse,
        /// `ResultDescription`: what is partial about it.
        description: String,
        /// `never`.
        retry: Retry,
        /// Departures from the contract that don't make the body unusable.
        problems: Vec<String>,
    },
    /// 400 and any other 4xx but 401, 403 and 429: the request is wrong (never retry it), or,
    /// for a 408, did not arrive whole (`retry` is then `backoff`).
    BadRequest(ErrorAnswer),
    /// 401: the key is missing, malformed, invalid or expired; fetch a fresh key first.
    Unauthorized(ErrorAnswer),
    /// 403: valid key, no entitlement to the survey or group; never retry.
    Forbidden(ErrorAnswer),
    /// 429: over a rate or quota; retry after `retryAfterMs`.
    RateLimited(ErrorAnswer),
    /// 5xx: retry with exponential backoff.
    ServerError(ErrorAnswer),
    /// An answer the contract doesn't allow (unexpected status, or a 200 body that is not
    /// a usable `CrosstabResponse`): `problems` says why.
    Invalid {
        /// HTTP status.
        status: u16,
        /// `never`.
        retry: Retry,
        /// Why the answer is not usable.
        problems: Vec<String>,
    },
}

/// An error answer: its status, envelope (when it has the envelope's shape) and advice.
#[derive(Debug, Clone, PartialEq, Serialize, Tsify)]
pub struct ErrorAnswer {
    /// HTTP status.
    pub status: u16,
    /// The error envelope, when the body has its shape.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[tsify(optional)]
    pub envelope: Option<ErrorEnvelope>,
    /// `error.code` when present: clients branch on it (and otherwise on `ResultCode`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[tsify(optional)]
    pub code: Option<String>,
    /// What to do about it.
    pub retry: Retry,
    /// For a 429: milliseconds to wait before retrying, from its `Retry-After` header.
    #[serde(rename = "retryAfterMs", skip_serializing_if = "Option::is_none")]
    #[tsify(optional)]
    pub retry_after_ms: Option<f64>,
    /// Departures from the contract.
    pub problems: Vec<String>,
}

impl ParsedResponse {
    /// The retry advice of any class.
    pub fn retry(&self) -> Retry {
        match self {
            ParsedResponse::Success { retry, .. }
            | ParsedResponse::Partial { retry, .. }
            | ParsedResponse::Invalid { retry, .. } => *retry,
            ParsedResponse::BadRequest(answer)
            | ParsedResponse::Unauthorized(answer)
            | ParsedResponse::Forbidden(answer)
            | ParsedResponse::RateLimited(answer)
            | ParsedResponse::ServerError(answer) => answer.retry,
        }
    }

    /// The class name, as JS sees it in `kind`.
    pub fn kind(&self) -> &'static str {
        match self {
            ParsedResponse::Success { .. } => "success",
            ParsedResponse::Partial { .. } => "partial",
            ParsedResponse::BadRequest(_) => "badRequest",
            ParsedResponse::Unauthorized(_) => "unauthorized",
            ParsedResponse::Forbidden(_) => "forbidden",
            ParsedResponse::RateLimited(_) => "rateLimited",
            ParsedResponse::ServerError(_) => "serverError",
            ParsedResponse::Invalid { .. } => "invalid",
        }
    }

    /// Milliseconds to wait before retry number `attempt` (1 for the first), given a
    /// uniform `random` in `[0, 1)`: a 429's `Retry-After`, else the contract's backoff;
    /// `None` when the answer is not to be retried as it is.
    pub fn retry_delay_ms(&self, attempt: u32, random: f64) -> Option<f64> {
        match (self, self.retry()) {
            (ParsedResponse::RateLimited(answer), Retry::AfterDelay) => answer.retry_after_ms,
            (_, Retry::Backoff) => Some(crosstab_contract::retry::retry_delay_ms(attempt, random)),
            _ => None,
        }
    }
}

/// Classifies an answer and checks its body. `target_count` is the request's number of
/// `TargetCodes`, when known: `Results` must have exactly that many entries.
/// `retry_after` is the answer's `Retry-After` header, if any (a 429 says when to retry).
pub fn parse_response(
    status: u16,
    body: &Value,
    target_count: Option<usize>,
    retry_after: Option<&str>,
) -> ParsedResponse {
    match status {
        200 => parse_success(body, target_count),
        429 => {
            let mut answer = parse_error(status, body, Retry::AfterDelay);
            match retry_after.and_then(parse_retry_after) {
                Some(seconds) => answer.retry_after_ms = Some(seconds as f64 * 1000.0),
                None => {
                    answer.retry = Retry::Backoff;
                    answer.problems.push(
                        "A 429 should carry a Retry-After header of whole seconds; back off instead."
                            .to_owned(),
                    );
                }
            }
            ParsedResponse::RateLimited(answer)
        }
        400..=499 => {
            let retry = match status {
                401 => Retry::AfterFreshKey,
                // The body did not arrive in time: nothing was read, so nothing billed or
                // reserved, and the same request may go again.
                408 => Retry::Backoff,
                _ => Retry::Never,
            };
            let answer = parse_error(status, body, retry);
            match status {
                401 => ParsedResponse::Unauthorized(answer),
                403 => ParsedResponse::Forbidden(answer),
                _ => ParsedResponse::BadRequest(answer),
            }
        }
        500..=599 => ParsedResponse::ServerError(parse_error(status, body, Retry::Backoff)),
        _ => ParsedResponse::Invalid {
            status,
            retry: Retry::Never,
            problems: vec![format!(
                "HTTP status {status} is not one the crosstab operation answers with (200, 4xx or 5xx)."
            )],
        },
    }
}

/// An integer member within `range`, or a problem.
fn integer(
    object: &Map<String, Value>,
    name: &str,
    range: std::ops::RangeInclusive<i64>,
    problems: &mut Vec<String>,
) -> Option<i64> {
    match object.get(name) {
        None => problems.push(format!("{name} is missing.")),
        Some(Value::Number(n)) => match n.as_i64().filter(|v| range.contains(v)) {
            Some(v) => return Some(v),
            None => problems.push(format!(
                "{name} must be an integer from {} to {}, not {n}.",
                range.start(),
                range.end()
            )),
        },
        Some(other) => problems.push(format!(
            "{name} must be an integer, not {}.",
            kind_of(other)
        )),
    }
    None
}

fn string<'a>(
    object: &'a Map<String, Value>,
    name: &str,
    problems: &mut Vec<String>,
) -> Option<&'a str> {
    match object.get(name) {
        None => problems.push(format!("{name} is missing.")),
        Some(Value::String(text)) => return Some(text),
        Some(other) => problems.push(format!("{name} must be a string, not {}.", kind_of(other))),
    }
    None
}

fn parse_result(index: usize, value: &Value, problems: &mut Vec<String>) -> Option<CrosstabResult> {
    let Value::Object(object) = value else {
        problems.push(format!(
            "Results[{index}] must be an object, not {}.",
            kind_of(value)
        ));
        return None;
    };
    let before = problems.len();
    let wgt_aud = match object.get("WgtAud") {
        Some(Value::Number(n)) => match n.as_f64().filter(|v| v.is_finite() && *v >= 0.0) {
            Some(v) => Some(v),
            None => {
                problems.push(format!(
                    "Results[{index}].WgtAud must be a finite number of at least 0, not {n}."
                ));
                None
            }
        },
        None => {
            problems.push(format!("Results[{index}].WgtAud is missing."));
            None
        }
        Some(other) => {
            problems.push(format!(
                "Results[{index}].WgtAud must be a number, not {}.",
                kind_of(other)
            ));
            None
        }
    };
    let mut scoped = Vec::new();
    let resps = integer(object, "Resps", 0..=i64::MAX, &mut scoped);
    let stbl = integer(object, "Stbl", 0..=1, &mut scoped);
    problems.extend(scoped.into_iter().map(|p| format!("Results[{index}].{p}")));
    if problems.len() > before {
        return None;
    }
    Some(CrosstabResult {
        wgt_aud: wgt_aud?,
        resps: u64::try_from(resps?).ok()?,
        // `integer` kept Stbl within 0..=1.
        stbl: if stbl? == 0 {
            Stability::Stable
        } else {
            Stability::Unstable
        },
    })
}

fn parse_success(body: &Value, target_count: Option<usize>) -> ParsedResponse {
    let invalid = |problems| ParsedResponse::Invalid {
        status: 200,
        retry: Retry::Never,
        problems,
    };
    let Value::Object(object) = body else {
        return invalid(vec![format!(
            "A 200 body must be a CrosstabResponse object, not {}.",
            kind_of(body)
        )]);
    };
    let mut problems = Vec::new();
    let result_code = integer(object, "ResultCode", 0..=i64::MAX, &mut problems);
    let description = string(object, "ResultDescription", &mut problems).map(str::to_owned);
    let units = integer(
        object,
        "AudienceReportUnits",
        1..=i64::from(u32::MAX),
        &mut problems,
    );
    let mut results = Vec::new();
    match object.get("Results") {
        Some(Value::Array(items)) => {
            if !(MIN_TARGET_CODES..=MAX_TARGET_CODES).contains(&items.len()) {
                problems.push(format!(
                    "Results must have {MIN_TARGET_CODES} or {MAX_TARGET_CODES} entries, not {}.",
                    items.len()
                ));
            }
            if let Some(expected) = target_count {
                if items.len() != expected {
                    problems.push(format!(
                        "Results has {} entries but the request has {expected} TargetCodes.",
                        items.len()
                    ));
                }
            }
            for (index, item) in items.iter().enumerate() {
                if let Some(result) = parse_result(index, item, &mut problems) {
                    results.push(result);
                }
            }
        }
        None => problems.push("Results is missing.".to_owned()),
        Some(other) => problems.push(format!("Results must be an array, not {}.", kind_of(other))),
    }
    let (Some(result_code), Some(description), Some(units), true) =
        (result_code, description, units, problems.is_empty())
    else {
        return invalid(problems);
    };
    let response = CrosstabResponse {
        result_code,
        result_description: description.clone(),
        results,
        audience_report_units: u32::try_from(units).unwrap_or(u32::MAX),
    };
    if result_code == ResultCode::SUCCESS {
        if !description.is_empty() {
            problems.push("ResultDescription should be empty when ResultCode is 0.".to_owned());
        }
        ParsedResponse::Success {
            status: 200,
            response,
            retry: Retry::Never,
            problems,
        }
    } else {
        if description.is_empty() {
            problems.push(
                "ResultDescription should explain a partial result (ResultCode greater than 0)."
                    .to_owned(),
            );
        }
        ParsedResponse::Partial {
            status: 200,
            response,
            description,
            retry: Retry::Never,
            problems,
        }
    }
}

fn parse_error(status: u16, body: &Value, retry: Retry) -> ErrorAnswer {
    let mut problems = Vec::new();
    let envelope = match body {
        Value::Object(object) => envelope(status, object, &mut problems),
        other => {
            problems.push(format!(
                "A {status} body should be an error envelope object, not {}.",
                kind_of(other)
            ));
            None
        }
    };
    let code = envelope
        .as_ref()
        .and_then(|e| e.error.as_ref())
        .map(|d| d.code.clone());
    ErrorAnswer {
        status,
        envelope,
        code,
        retry,
        retry_after_ms: None,
        problems,
    }
}

/// A `Retry-After` header's delay in seconds (its delay-seconds form: the service sends
/// no other), capped at a day so a broken header can't park a client for ever.
pub fn parse_retry_after(value: &str) -> Option<u64> {
    const DAY_S: u64 = 24 * 60 * 60;
    let value = value.trim();
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // All digits: only overflow fails, and that is past the cap anyway.
    Some(value.parse::<u64>().map_or(DAY_S, |s| s.min(DAY_S)))
}

fn optional_string(
    object: &Map<String, Value>,
    name: &str,
    problems: &mut Vec<String>,
) -> Option<String> {
    match object.get(name) {
        None => None,
        Some(Value::String(text)) => Some(text.clone()),
        Some(other) => {
            problems.push(format!(
                "error.{name} must be a string when present, not {} (absent members are omitted, never null).",
                kind_of(other)
            ));
            None
        }
    }
}

fn envelope(
    status: u16,
    object: &Map<String, Value>,
    problems: &mut Vec<String>,
) -> Option<ErrorEnvelope> {
    let result_code = integer(object, "ResultCode", i64::MIN..=i64::MAX, problems);
    let description = string(object, "ResultDescription", problems).map(str::to_owned);
    let (result_code, description) = (result_code?, description?);
    if (400..500).contains(&status) && result_code != i64::from(status) {
        problems.push(format!(
            "ResultCode {result_code} should equal the HTTP status {status}."
        ));
    }
    let error = match object.get("error") {
        None => None,
        Some(Value::Object(detail)) => {
            let mut scoped = Vec::new();
            let code = string(detail, "code", &mut scoped).map(str::to_owned);
            let message = string(detail, "message", &mut scoped).map(str::to_owned);
            let field = optional_string(detail, "field", problems);
            let hint = optional_string(detail, "hint", problems);
            problems.extend(scoped.into_iter().map(|p| format!("error.{p}")));
            match (code, message) {
                (Some(code), Some(message)) => {
                    if message != description {
                        problems.push(
                            "error.message should have the same wording as ResultDescription."
                                .to_owned(),
                        );
                    }
                    Some(ErrorDetail {
                        code,
                        message,
                        field,
                        hint,
                    })
                }
                _ => None,
            }
        }
        Some(other) => {
            problems.push(format!(
                "error must be an object when present, not {} (absent members are omitted, never null).",
                kind_of(other)
            ));
            None
        }
    };
    Some(ErrorEnvelope {
        result_code,
        result_description: description,
        error,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crosstab_contract::ApiError;
    use serde_json::json;

    #[test]
    fn classifies_every_status_class() {
        let ok = json!({"ResultCode": 0, "ResultDescription": "", "Results": [{"WgtAud": 1.5, "Resps": 3, "Stbl": 1}], "AudienceReportUnits": 1000});
        let parsed = parse_response(200, &ok, Some(1), None);
        assert_eq!(parsed.kind(), "success");
        assert_eq!(parsed.retry(), Retry::Never);
        assert_eq!(parse_response(200, &ok, Some(2), None).kind(), "invalid");
        let partial = json!({"ResultCode": 1, "ResultDescription": "Partial", "Results": [{"WgtAud": 0, "Resps": 0, "Stbl": 1}], "AudienceReportUnits": 1000});
        let ParsedResponse::Partial { description, .. } = parse_response(200, &partial, None, None)
        else {
            panic!("not partial");
        };
        assert_eq!(description, "Partial");
        let bad_stbl = json!({"ResultCode": 0, "ResultDescription": "", "Results": [{"WgtAud": 1, "Resps": 3, "Stbl": 2}], "AudienceReportUnits": 1000});
        assert_eq!(parse_response(200, &bad_stbl, None, None).kind(), "invalid");
        for (error, kind, retry) in [
            (
                ApiError::InvalidPopulationBase { base: "X".into() },
                "badRequest",
                Retry::Never,
            ),
            (ApiError::Unauthorized, "unauthorized", Retry::AfterFreshKey),
            (ApiError::ForbiddenSurvey, "forbidden", Retry::Never),
            (ApiError::PayloadTooLarge, "badRequest", Retry::Never),
            (ApiError::Internal, "serverError", Retry::Backoff),
        ] {
            let body = serde_json::to_value(error.envelope()).unwrap();
            let parsed = parse_response(error.status(), &body, None, None);
            assert_eq!(parsed.kind(), kind);
            assert_eq!(parsed.retry(), retry);
            let json = serde_json::to_value(&parsed).unwrap();
            assert_eq!(json["code"], error.code());
            assert_eq!(json["problems"], json!([]), "{json}");
        }
        let garbage = parse_response(502, &json!("Bad gateway"), None, None);
        assert_eq!(garbage.kind(), "serverError");
        assert_eq!(garbage.retry(), Retry::Backoff);
        assert_eq!(
            parse_response(302, &Value::Null, None, None).kind(),
            "invalid"
        );
        let limited =
            serde_json::to_value(ApiError::RateLimited { retry_after_s: 7 }.envelope()).unwrap();
        let parsed = parse_response(429, &limited, None, Some(" 7 "));
        assert_eq!(parsed.kind(), "rateLimited");
        assert_eq!(parsed.retry(), Retry::AfterDelay);
        assert_eq!(parsed.retry_delay_ms(1, 0.5), Some(7000.0));
        let json = serde_json::to_value(&parsed).unwrap();
        assert_eq!(json["retryAfterMs"], 7000.0);
        assert_eq!(json["code"], "rate_limited");
        assert_eq!(json["problems"], json!([]));
        // Without a usable Retry-After, back off, and say the answer broke the contract.
        for header in [
            None,
            Some(""),
            Some("soon"),
            Some("-1"),
            Some("Wed, 21 Oct 2015 07:28:00 GMT"),
        ] {
            let parsed = parse_response(429, &limited, None, header);
            assert_eq!(parsed.retry(), Retry::Backoff, "{header:?}");
            assert_eq!(parsed.retry_delay_ms(1, 0.0), Some(125.0));
            let json = serde_json::to_value(&parsed).unwrap();
            assert_eq!(json["problems"].as_array().unwrap().len(), 1, "{json}");
        }
        assert_eq!(parse_retry_after("99999999999999999999999"), Some(86_400));
        assert_eq!(parse_retry_after("0"), Some(0));
        let forbidden = serde_json::to_value(ApiError::ForbiddenSurvey.envelope()).unwrap();
        assert_eq!(
            parse_response(403, &forbidden, None, Some("5")).retry_delay_ms(1, 0.5),
            None
        );
        let null_field = json!({"ResultCode": 403, "ResultDescription": "x", "error": {"code": "forbidden_survey", "message": "x", "field": null}});
        let json = serde_json::to_value(parse_response(403, &null_field, None, None)).unwrap();
        assert_eq!(json["problems"].as_array().unwrap().len(), 1, "{json}");
    }
}
