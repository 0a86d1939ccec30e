//! The outermost layer of every request: a fresh `X-Request-Id`, CORS origin headers on
//! `/v1`, the security headers ([`super::headers`]), one access-log line (method, path,
//! status, latency, account, request id; never a key or a body), and the cause of any 500
//! (a [`Fault`]).
//!
//! It wraps the whole router once ([`Observe`]), not each of its routes: a layer given to
//! `Router::layer` wraps every route in a boxed service of its own that each request
//! clones, and `from_fn` builds a `Next` besides.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::extract::Request;
use axum::http::header::ORIGIN;
use axum::http::HeaderValue;
use axum::response::Response;

use super::{Fault, HttpState};
use crate::service::RequestId;

/// The response header carrying the request id.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// The account a request was made for (a response extension, for the access log).
#[derive(Debug, Clone)]
pub struct AccountName(pub Arc<str>);

/// A service (the router), observed.
#[derive(Debug, Clone)]
pub struct Observe<S> {
    state: Arc<HttpState>,
    inner: S,
}

impl<S> Observe<S> {
    /// `inner`, each of its requests observed with `state`'s CORS and security headers.
    pub fn new(state: Arc<HttpState>, inner: S) -> Observe<S> {
        Observe { state, inner }
    }
}

impl<S> tower::Service<Request> for Observe<S>
where
    S: tower::Service<Request, Response = Response, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request) -> Self::Future {
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
        let answer = self.inner.call(request);
        let state = Arc::clone(&self.state);
        Box::pin(async move {
            let mut response = answer.await?;
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
            Ok(response)
        })
    }
}
