//! The HTTP layer: routes, extractors, and the one place outcomes become status codes and
//! bodies. `/v1` is the public API ([`v1`]); beside it, the app's backend under `/app`
//! and the app's files at `/` ([`app`]). Every request first passes [`observe`].

pub mod app;
mod body;
pub mod cors;
mod error;
mod extract;
mod headers;
pub mod listener;
pub mod oauth;
pub mod observe;
mod paced;
pub mod proxy;
pub mod v1;

use std::any::Any;
use std::path::Path;
use std::sync::Arc;

use axum::body::Bytes;
use axum::response::{IntoResponse, Response};
use axum::Router;
use crosstab_contract::ApiError;
use tower_http::catch_panic::CatchPanicLayer;

use crate::service::app::AppService;
use crate::service::Services;
use cors::Cors;

pub use error::{api_error_response, Fault};

/// What every handler shares.
#[derive(Debug)]
pub struct HttpState {
    /// The service layer.
    pub services: Arc<Services>,
    /// The app backend.
    pub app: AppService,
    /// Allowed browser origins.
    pub cors: Cors,
    /// The OpenAPI document, serialized once.
    pub docs: Bytes,
    /// Whether clients reach the service over `https` (the session cookie is `Secure`).
    pub https: bool,
    /// The app's security headers.
    pub security: headers::SecurityHeaders,
    /// The proxy whose header names the client, if any.
    pub trusted_proxy: Option<proxy::TrustedProxy>,
    /// The 500s' cause lines, at most one a second (an outage fails every request).
    pub faults: std::sync::Mutex<paced::Paced>,
}

impl HttpState {
    /// The state over `services`, with `app` as the app backend.
    pub fn new(
        services: Arc<Services>,
        app: AppService,
        options: HttpOptions<'_>,
    ) -> Result<Arc<HttpState>, String> {
        Ok(Arc::new(HttpState {
            services,
            app,
            cors: options.cors,
            docs: Bytes::from(crosstab_contract::openapi::document_json()),
            https: options.https,
            security: headers::SecurityHeaders::new(options.app_dir, options.https)?,
            trusted_proxy: options.trusted_proxy,
            faults: std::sync::Mutex::new(paced::Paced::default()),
        }))
    }
}

/// How the HTTP surface is set up.
#[derive(Debug)]
pub struct HttpOptions<'a> {
    /// Allowed browser origins.
    pub cors: Cors,
    /// The built app, if served.
    pub app_dir: Option<&'a Path>,
    /// Whether clients reach the service over `https`.
    pub https: bool,
    /// The proxy whose header names the client, if any.
    pub trusted_proxy: Option<proxy::TrustedProxy>,
}

/// The whole HTTP surface as one service: the router, observed.
pub type HttpService = observe::Observe<Router>;

/// The whole HTTP surface: `/v1`, `/app`, and, given `app_dir`, the app's files at `/`.
pub fn router(state: Arc<HttpState>, app_dir: Option<&Path>) -> HttpService {
    // `/v1/` is outside the nest's match: without this, the app's page would answer it.
    let router = Router::new()
        .route("/ready", axum::routing::get(ready))
        .nest("/v1", v1::routes())
        .route("/v1/", axum::routing::any(not_found))
        .merge(app::routes(Arc::clone(&state), app_dir));
    let routes = router
        .layer(CatchPanicLayer::custom(panic_response))
        .with_state(Arc::clone(&state));
    observe::Observe::new(state, routes)
}

/// The readiness probe (outside `/v1`: no key, not billed): 200 when the database
/// answers and the ledger writer runs, else 503 saying which. `/v1/docs` stays the
/// contract's liveness probe.
async fn ready(axum::extract::State(state): axum::extract::State<Arc<HttpState>>) -> Response {
    match state.services.ready().await {
        Ok(()) => axum::Json(serde_json::json!({"ready": true})).into_response(),
        Err(reason) => (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(serde_json::json!({"ready": false, "reason": reason.to_string()})),
        )
            .into_response(),
    }
}

/// An unknown path under an API prefix (`/v1`, `/app`): 404 in the contract's envelope.
async fn not_found() -> Response {
    api_error_response(&ApiError::NotFound)
}

/// A panic in a handler answers 500 in the contract's envelope, with no internals; its
/// message goes to the log with the request's id (as the 500's cause).
fn panic_response(payload: Box<dyn Any + Send + 'static>) -> Response {
    let message = crate::logging::panic_message(payload.as_ref());
    let mut response = api_error_response(&ApiError::Internal);
    response
        .extensions_mut()
        .insert(Fault(format!("request handler panicked: {message}")));
    response
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_answers_the_contracts_500_and_logs_its_message() {
        for payload in [
            Box::new("boom") as Box<dyn Any + Send>,
            Box::new(String::from("boom")),
        ] {
            let response = panic_response(payload);
            assert_eq!(
                response.status(),
                axum::http::StatusCode::INTERNAL_SERVER_ERROR
            );
            let Fault(cause) = response.extensions().get::<Fault>().unwrap();
            assert_eq!(cause, "request handler panicked: boom");
        }
        let response = panic_response(Box::new(7_u8));
        let Fault(cause) = response.extensions().get::<Fault>().unwrap();
        assert!(cause.ends_with("not text"), "{cause}");
    }
}
