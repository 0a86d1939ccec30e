//! The one place the service layer's outcomes become status codes and bodies.

use axum::http::header::{RETRY_AFTER, WWW_AUTHENTICATE};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use crosstab_contract::ApiError;

use crate::service::ServiceError;

/// The cause of a 500, kept out of the body and logged by [`super::observe`].
#[derive(Debug, Clone)]
pub struct Fault(pub String);

/// The contract's envelope for `error`, with the status it names (and `Retry-After`
/// where the error says when to retry).
pub fn api_error_response(error: &ApiError) -> Response {
    let Ok(status) = StatusCode::from_u16(error.status()) else {
        return fault(format!("{error:?} names no HTTP status"));
    };
    let mut response = (status, Json(error.envelope())).into_response();
    if let Some(seconds) = error.retry_after_s() {
        response
            .headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from(seconds));
    }
    if status == StatusCode::UNAUTHORIZED {
        // A 401 names how to authenticate (RFC 9110): the key, or a token, in our header.
        response
            .headers_mut()
            .insert(WWW_AUTHENTICATE, HeaderValue::from_static(AUTHENTICATE));
    }
    response
}

/// The challenge of every 401: not `Bearer`, whose clients would send `Authorization`.
pub const AUTHENTICATE: &str = r#"ApiKey realm="crosstab", header="Service-Engine-Authorizer""#;

/// A 500 in the contract's envelope; `cause` goes to the log only.
pub fn fault(cause: String) -> Response {
    let mut response = (
        StatusCode::INTERNAL_SERVER_ERROR,
        Json(ApiError::Internal.envelope()),
    )
        .into_response();
    response.extensions_mut().insert(Fault(cause));
    response
}

impl IntoResponse for ServiceError {
    fn into_response(self) -> Response {
        match self {
            ServiceError::Rejected(error) => api_error_response(&error),
            // Never a `/v1` call's (one call); said as a fault if it ever were.
            fault_of_ours => fault(fault_of_ours.to_string()),
        }
    }
}
