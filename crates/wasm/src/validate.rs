//! Request validation with exactly the server's rules (the contract's one validation
//! function), shaped for JS: `{ok: true, request}` or `{ok: false, status, body}`.

use serde::Serialize;
use tsify::Tsify;

use crosstab_contract::{validate_body, ApiError, CrosstabRequest, ErrorEnvelope, ValidRequest};

/// The outcome of validating a request body.
#[derive(Debug, Clone, PartialEq, Serialize, Tsify)]
#[serde(untagged)]
pub enum Validation {
    /// The request is valid; `request` is it as the server reads it (unknown members dropped).
    Valid {
        /// Always `true`.
        #[tsify(type = "true")]
        ok: bool,
        /// The request as the server reads it.
        request: CrosstabRequest,
    },
    /// The request is invalid; `status` and `body` are what the server answers.
    Invalid {
        /// Always `false`.
        #[tsify(type = "false")]
        ok: bool,
        /// The HTTP status the server answers with (equals `body.ResultCode`).
        status: u16,
        /// The error envelope the server answers with.
        body: ErrorEnvelope,
    },
}

impl Validation {
    /// Whether the request is valid.
    pub fn is_ok(&self) -> bool {
        matches!(self, Validation::Valid { .. })
    }
}

impl From<Result<ValidRequest, ApiError>> for Validation {
    fn from(outcome: Result<ValidRequest, ApiError>) -> Self {
        match outcome {
            Ok(valid) => Validation::Valid {
                ok: true,
                request: valid.request,
            },
            Err(error) => Validation::from(&error),
        }
    }
}

impl From<&ApiError> for Validation {
    fn from(error: &ApiError) -> Self {
        Validation::Invalid {
            ok: false,
            status: error.status(),
            body: error.envelope(),
        }
    }
}

/// Validates the JSON text a client would send (`None`: no body at all, as
/// `JSON.stringify(undefined)` gives) with the server's own function.
pub fn validate_text(body: Option<&str>) -> Result<ValidRequest, ApiError> {
    validate_body(body.unwrap_or("").as_bytes())
}

/// The error for a value JSON can't represent at all (`JSON.stringify` throws: a cyclic
/// object or a BigInt): no client could send it, so it gets the server's answer to a body
/// that is not JSON, with a message that says why.
pub fn unserializable(reason: &str) -> ApiError {
    ApiError::InvalidRequest {
        field: None,
        message: format!("The request can't be serialized as JSON ({reason})."),
        hint: Some(
            "Send a JSON object with SurveyCode, PopulationBaseCode, TargetCodes and optionally AuthorizationGroup."
                .to_owned(),
        ),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crosstab_contract::vectors;

    #[test]
    fn every_vector_through_the_text_path() {
        for (_, vector) in vectors::load() {
            let text = vector.body_text();
            let outcome = Validation::from(validate_text(Some(&text)));
            let json = serde_json::to_value(&outcome).unwrap();
            if vector.is_validation_error() {
                assert_eq!(json["ok"], false, "{}", vector.name);
                assert_eq!(json["status"], vector.expect.status, "{}", vector.name);
                assert!(
                    vectors::matches(&vector.expect.body, &json["body"]),
                    "{}: {json}",
                    vector.name
                );
            } else {
                assert!(outcome.is_ok(), "{}: {json}", vector.name);
            }
        }
    }

    #[test]
    fn no_body_is_what_the_server_says_to_an_empty_body() {
        let outcome = Validation::from(validate_text(None));
        let server = validate_body(b"").unwrap_err();
        assert_eq!(outcome, Validation::from(&server));
        let Validation::Invalid { status, body, .. } = Validation::from(&unserializable("x"))
        else {
            panic!("valid");
        };
        assert_eq!(status, 400);
        assert_eq!(body.error.unwrap().code, "invalid_request");
    }
}
