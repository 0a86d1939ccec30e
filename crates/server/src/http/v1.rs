//! The `/v1` routes: `GET /docs`, `OPTIONS /crosstab`, `POST /crosstab` and the token
//! endpoint `POST /oauth/token` ([`super::oauth`]). Handlers extract, call the service
//! and map; the rules live in [`crate::service::crosstab`] and [`crate::service::sso`].

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, ORIGIN};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Router};
use crosstab_contract::ApiError;

use super::body;
use super::error::api_error_response;
use super::extract::Authenticated;
use super::observe::Billed;
use super::HttpState;
use crate::service::crosstab::Answer;
use crate::service::{RequestId, ServiceError};

/// The `/v1` routes. Any other `/v1` path is a 404 of its own, never the app's page that
/// answers unknown paths beside it.
pub fn routes() -> Router<Arc<HttpState>> {
    Router::new()
        .route("/docs", get(docs))
        .route(
            "/crosstab",
            axum::routing::post(crosstab).options(preflight),
        )
        .route(
            "/oauth/token",
            axum::routing::post(super::oauth::token).options(super::oauth::preflight),
        )
        .fallback(super::not_found)
        .method_not_allowed_fallback(method_not_allowed)
}

/// A `/v1` path with another method than it serves: 405 in the contract's envelope (axum
/// adds the `Allow` header).
async fn method_not_allowed() -> Response {
    api_error_response(&ApiError::MethodNotAllowed)
}

/// A 200 with a serialized JSON body.
fn json_ok(body: impl Into<axum::body::Body>) -> Response {
    let mut response = (StatusCode::OK, body.into()).into_response();
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// The request's `Idempotency-Key`, if it sent one (a value that is not text is refused).
pub fn idempotency_key(headers: &HeaderMap) -> Result<Option<&str>, ApiError> {
    headers
        .get(IDEMPOTENCY_KEY)
        .map(|value| {
            value.to_str().map_err(|_| ApiError::InvalidRequest {
                field: Some("Idempotency-Key".to_owned()),
                message: "Idempotency-Key must be 1 to 255 printable ASCII characters.".to_owned(),
                hint: None,
            })
        })
        .transpose()
}

/// The 200 for `answer`, saying so when it is the one an earlier request got.
/// An answer is the caller's own, paid for: no cache along the way keeps it.
pub fn answer_response(answer: Answer) -> Response {
    let mut response = json_ok(answer.body);
    response
        .headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
        .extensions_mut()
        .insert(Billed(u64::from(answer.billed_calls)));
    if answer.replayed {
        response
            .headers_mut()
            .insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    }
    response
}

/// The request header naming a logical request, so its retries are billed once.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
/// The response header on an answer given before.
pub const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";

async fn docs(State(state): State<Arc<HttpState>>) -> Response {
    json_ok(state.docs.clone())
}

async fn preflight(State(state): State<Arc<HttpState>>, headers: HeaderMap) -> Response {
    let mut response = StatusCode::OK.into_response();
    state
        .cors
        .preflight(headers.get(ORIGIN), response.headers_mut());
    response
}

async fn crosstab(
    State(state): State<Arc<HttpState>>,
    Extension(request_id): Extension<RequestId>,
    caller: Result<Authenticated, ServiceError>,
    request: Request,
) -> Response {
    let (parts, request_body) = request.into_parts();
    let Authenticated(principal) = match caller {
        Ok(caller) => caller,
        Err(error) => {
            return body::unread(request_body, &parts.headers, error.into_response()).await
        }
    };
    let response = if !body::is_json(&parts.headers) {
        let response = api_error_response(&ApiError::UnsupportedMediaType);
        body::unread(request_body, &parts.headers, response).await
    } else {
        match body::read(request_body, &parts.headers).await {
            Ok(bytes) => {
                let key = match idempotency_key(&parts.headers) {
                    Ok(key) => key,
                    Err(error) => return api_error_response(&error),
                };
                let answered = state
                    .services
                    .crosstab
                    .answer(&principal, bytes, &request_id, key)
                    .await;
                match answered {
                    Ok(answer) => answer_response(answer),
                    Err(error) => error.into_response(),
                }
            }
            Err(error) => body::closing(api_error_response(&error.into())),
        }
    };
    response
}
