//! Request bodies: read whole within the contract's 64 KiB, or left unread with the
//! connection closed, so a client's next request on it is never misread.

use axum::body::{Body, Bytes};
use axum::http::header::{CONNECTION, CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::Response;
use crosstab_contract::limits::MAX_BODY_BYTES;
use crosstab_contract::ApiError;

use super::listener::BodyDeadline;

/// Why a request body was not read whole.
#[derive(Debug)]
pub enum BodyError {
    /// Declared or found to be over its limit (64 KiB but for app tables): the limit.
    TooLarge(usize),
    /// It did not arrive whole within its deadline.
    TimedOut,
    /// The stream broke off or was malformed before its end.
    Unreadable,
}

impl From<BodyError> for ApiError {
    fn from(error: BodyError) -> ApiError {
        match error {
            BodyError::TooLarge(_) => ApiError::PayloadTooLarge,
            BodyError::TimedOut => ApiError::RequestTimeout,
            BodyError::Unreadable => ApiError::InvalidRequest {
                field: None,
                message: "The request body could not be read to its end.".to_owned(),
                hint: Some("Send the whole JSON body, with a correct Content-Length.".to_owned()),
            },
        }
    }
}

/// The body, unless it is over 64 KiB (declared or as read) or breaks off.
pub async fn read(body: Body, headers: &HeaderMap) -> Result<Bytes, BodyError> {
    read_within(body, headers, MAX_BODY_BYTES).await
}

/// The body, unless it is over `limit` bytes (declared or as read) or breaks off.
pub async fn read_within(
    body: Body,
    headers: &HeaderMap,
    limit: usize,
) -> Result<Bytes, BodyError> {
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit as u64) {
        return Err(BodyError::TooLarge(limit));
    }
    axum::body::to_bytes(body, limit).await.map_err(|error| {
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&error);
        while let Some(error) = cause {
            if error.is::<http_body_util::LengthLimitError>() {
                return BodyError::TooLarge(limit);
            }
            if error.is::<BodyDeadline>() {
                return BodyError::TimedOut;
            }
            cause = error.source();
        }
        BodyError::Unreadable
    })
}

/// `response` to a request whose body was not needed: the body is read and dropped (up to
/// 64 KiB) so the connection can carry the client's next request; a larger or broken one
/// is left unread and the connection closed, saying so, so the client does not reuse it.
pub async fn unread(body: Body, headers: &HeaderMap, response: Response) -> Response {
    match read(body, headers).await {
        Ok(_) => response,
        Err(_) => closing(response),
    }
}

/// `response` with `Connection: close` (the request body was left unread).
pub fn closing(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Whether the body is declared as JSON (`application/json`), in UTF-8: a `charset`
/// parameter, if any, must say so (JSON is UTF-8; another charset would only fail to
/// parse, blamed on the body).
pub fn is_json(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let mut parts = value.split(';');
    let mime = parts.next().unwrap_or_default();
    mime.trim().eq_ignore_ascii_case("application/json")
        && parts.all(|parameter| match parameter.split_once('=') {
            Some((name, charset)) if name.trim().eq_ignore_ascii_case("charset") => {
                let charset = charset.trim().trim_matches('"');
                charset.eq_ignore_ascii_case("utf-8") || charset.eq_ignore_ascii_case("utf8")
            }
            _ => true,
        })
}
