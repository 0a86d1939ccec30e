//! The outermost layer of every request: a fresh `X-Request-Id`, CORS origin headers on
//! `/v1`, the security headers ([`super::headers`]), one access-log line (method, path,
//! status, latency, client address, account and app user, calls billed, request id; never
//! a key or a body; client text escaped), and the cause of a 500 (a [`Fault`]), at most
//! one such line a second ([`super::paced`]).
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

/// Who a request was for, as the extractors find it (a request extension they fill in
/// once, read for the access log once the answer is made).
#[derive(Debug, Default)]
pub struct AccessNote(std::sync::OnceLock<Caller>);

#[derive(Debug, Default, Clone)]
struct Caller {
    account: Option<Arc<str>>,
    user: Option<Arc<str>>,
}

impl AccessNote {
    /// The request was made for `account`, by app user `user` if any (the first caller
    /// noted stands).
    pub fn caller(&self, account: &Arc<str>, user: Option<&str>) {
        let _ = self.0.set(Caller {
            account: Some(Arc::clone(account)),
            user: user.map(Arc::from),
        });
    }

    fn read(&self) -> Caller {
        self.0.get().cloned().unwrap_or_default()
    }
}

/// A client address as the access line shows it (`-` for none), without allocating.
struct Client(Option<std::net::IpAddr>);

impl std::fmt::Display for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(address) => address.fmt(f),
            None => f.write_str("-"),
        }
    }
}

/// The calls an answer billed (a response extension; none: 0), for the access log: its
/// `billed` fields, with the lines of bills whose client went away before the answer
/// ("billed, but the client went away") and of commits whose outcome was unknown, add up
/// to the ledger's bills.
#[derive(Debug, Clone, Copy)]
pub struct Billed(pub u64);

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
        let note = Arc::new(AccessNote::default());
        request.extensions_mut().insert(Arc::clone(&note));
        let method = request.method().clone();
        let path = request.uri().path().to_owned();
        let sender =
            super::extract::sender_of(request.headers(), request.extensions(), &self.state);
        request.extensions_mut().insert(sender);
        let client = sender.client;
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
                // At most a line a second: an outage fails every request (the access log
                // has each). A poisoned lock still counts: the count is all it guards.
                let due = state
                    .faults
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .occurred(Instant::now());
                if let Some(more) = due {
                    // Debug-formatted: a cause may quote what a client sent.
                    tracing::error!(
                        request_id = %id,
                        ?cause,
                        more,
                        "answered 500 (this one's cause; `more`: other 500s since the last such line)"
                    );
                }
            }
            let caller = note.read();
            let billed = response.extensions().get::<Billed>().map_or(0, |b| b.0);
            // Client text escaped: the path (which holds no space) by `escape_debug`, an
            // account or user name quoted as a string value.
            tracing::info!(
                target: "crosstab::access",
                method = %method,
                path = %path.escape_debug(),
                status = response.status().as_u16(),
                latency_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
                client = %Client(client),
                account = caller.account.as_deref().unwrap_or("-"),
                user = caller.user.as_deref().unwrap_or("-"),
                billed,
                request_id = %id,
            );
            Ok(response)
        })
    }
}
