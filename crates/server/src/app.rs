//! The application: shared state and the router. `/v1` is the public API; later
//! surfaces (the app backend under `/app`) nest beside it on the same state.

use std::any::Any;
use std::sync::Arc;

use axum::body::Bytes;
use axum::response::Response;
use axum::Router;
use crosstab_contract::ApiError;
use crosstab_engine::store::Catalog;
use tower_http::catch_panic::CatchPanicLayer;

use crate::api;
use crate::auth::Authenticator;
use crate::cache::ResponseCache;
use crate::cors::Cors;
use crate::db::Database;
use crate::ledger::{Ledger, LedgerWriter};
use crate::observe;

/// What every request handler shares.
#[derive(Debug)]
pub struct AppState {
    /// The database (keys, grants, ledger).
    pub db: Database,
    /// The installed surveys, following re-imports.
    pub catalog: Arc<Catalog>,
    /// API key checks.
    pub auth: Authenticator,
    /// Billing.
    pub ledger: Ledger,
    /// Allowed browser origins.
    pub cors: Cors,
    /// The OpenAPI document, serialized once.
    pub docs: Bytes,
    /// Answers already computed, per loaded survey instance.
    pub cache: ResponseCache,
}

impl AppState {
    /// The state over `db` and `catalog`, with its ledger writer started (finish the
    /// writer after the last request, once the state is dropped, to flush every bill).
    pub fn new(db: Database, catalog: Arc<Catalog>, cors: Cors) -> (Arc<AppState>, LedgerWriter) {
        let (ledger, writer) = Ledger::start(db.clone());
        let state = AppState {
            auth: Authenticator::new(db.clone()),
            db,
            catalog,
            ledger,
            cors,
            docs: Bytes::from(crosstab_contract::openapi::document_json()),
            cache: ResponseCache::from_env(),
        };
        (Arc::new(state), writer)
    }
}

/// The `/v1` API alone.
pub fn router(state: Arc<AppState>) -> Router {
    router_with(state, None)
}

/// The whole HTTP surface: `/v1`, and the app (its `/app` backend and its files at `/`)
/// when given.
pub fn router_with(state: Arc<AppState>, app: Option<Router<Arc<AppState>>>) -> Router {
    // `/v1/` is outside the nest's match: without this, the app's page would answer it.
    let mut router = Router::new()
        .nest("/v1", api::routes())
        .route("/v1/", axum::routing::any(api::not_found));
    if let Some(app) = app {
        router = router.merge(app);
    }
    router
        .layer(CatchPanicLayer::custom(panic_response))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            observe::observe,
        ))
        .with_state(state)
}

/// A panic in a handler answers 500 in the contract's envelope, with no internals.
fn panic_response(_: Box<dyn Any + Send + 'static>) -> Response {
    tracing::error!("request handler panicked");
    api::error_response(&ApiError::Internal)
}
