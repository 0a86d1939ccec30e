//! The outermost layer of every request: a fresh `X-Request-Id`, CORS origin headers on
//! `/v1`, the security headers ([`super::headers`]; one layer fewer to pass than a
//! middleware of their own), one access-log line (method, path, status, latency, account, request id;
//! never a key or a body), and the cause of any 500 (a [`Fault`]).

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::header::ORIGIN;
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;

use super::{Fault, HttpState};
use crate::service::RequestId;

/// The response header carrying the request id.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// The account a request was made for (a response extension, for the access log).
#[derive(Debug, Clone)]
pub struct AccountName(pub Arc<str>);

/// The middleware.
pub async fn observe(
    State(state): State<Arc<HttpState>>,
    mut request: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    // A v4 UUID from the thread's CSPRNG (seeded by the OS), not a `getrandom` call each.
    let random: [u8; 16] = rand::Rng::gen(&mut rand::thread_rng());
    let id: Arc<str> = Arc::from(
        uuid::Builder::from_random_bytes(random)
            .into_uuid()
            .simple()
            .to_string(),
    );
    request.extensions_mut().insert(RequestId(Arc::clone(&id)));
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let origin = request.headers().get(ORIGIN).cloned();
    let mut response = next.run(request).await;
    let api = path.starts_with("/v1/");
    if api {
        state.cors.decorate(origin.as_ref(), response.headers_mut());
    }
    state.security.apply(api, response.headers_mut());
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(REQUEST_ID_HEADER, value);
    }
    if let Some(Fault(cause)) = response.extensions().get::<Fault>() {
        tracing::error!(request_id = %id, %cause, "answered 500");
    }
    let account = response
        .extensions()
        .get::<AccountName>()
        .map(|a| Arc::clone(&a.0));
    tracing::info!(
        target: "crosstab::access",
        method = %method,
        path = %path,
        status = response.status().as_u16(),
        latency_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
        account = account.as_deref().unwrap_or("-"),
        request_id = %id,
    );
    response
}
