//! The service layer: what the server does, without HTTP. Handlers extract, call one of
//! these and map the outcome to a response; nothing here knows a status code, a header
//! or a cookie. Dependencies run one way: `http` → `service` → `store` / engine.

pub mod app;
pub mod auth;
pub mod cache;
pub mod crosstab;
pub mod limits;
pub mod principal;
pub mod upstream;
pub mod users;

use std::sync::Arc;

use crosstab_contract::ApiError;
use crosstab_engine::store::Catalog;

use crate::clock::Clock;
use crate::store::ledger::{Ledger, LedgerError, LedgerWriter};
use crate::store::{Database, DbError};
use auth::Authenticator;
use cache::ResponseCache;
use crosstab::Crosstab;
use limits::{AddressLimits, RateLimits};

/// A request's id, as sent back in `X-Request-Id` and recorded with its bill.
#[derive(Debug, Clone)]
pub struct RequestId(pub Arc<str>);

/// Why a call failed: a rule of the contract the caller broke, or a fault of ours (whose
/// cause is logged, never shown).
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// Rejected by a rule of the contract (validation, entitlement, ...).
    #[error(transparent)]
    Rejected(#[from] ApiError),
    /// The database failed.
    #[error(transparent)]
    Db(#[from] DbError),
    /// The bill could not be recorded.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// Anything else of ours (a task that died, a body that would not serialize).
    #[error("{0}")]
    Internal(String),
}

/// How the services behave (from `serve`'s flags).
#[derive(Debug)]
pub struct Settings {
    /// Whole answers kept.
    pub cache: ResponseCache,
    /// A query not answered within this is refused (503, not billed).
    pub query_deadline: std::time::Duration,
    /// Per-address paces.
    pub addresses: AddressLimits,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            cache: ResponseCache::new(cache::DEFAULT_ENTRIES, cache::DEFAULT_BYTES),
            query_deadline: std::time::Duration::from_secs(10),
            addresses: AddressLimits {
                failed_auth_per_minute: 60,
                sign_in_per_minute: 20,
            },
        }
    }
}

/// Everything the server's surfaces share.
#[derive(Debug)]
pub struct Services {
    /// The database (keys, grants, users, sessions, ledger).
    pub db: Database,
    /// The installed surveys, following re-imports.
    pub catalog: Arc<Catalog>,
    /// API key checks.
    pub auth: Authenticator,
    /// Queries and their bills.
    pub crosstab: Crosstab,
    /// Rates and quotas.
    pub limits: Arc<RateLimits>,
    /// Time.
    pub clock: Arc<dyn Clock>,
}

impl Services {
    /// The services over `db` and `catalog`, with the ledger writer started (finish the
    /// writer after the last request, once the services are dropped, to flush every bill).
    pub fn start(
        db: Database,
        catalog: Arc<Catalog>,
        settings: Settings,
        clock: Arc<dyn Clock>,
    ) -> (Arc<Services>, LedgerWriter) {
        let (ledger, writer) = Ledger::start(db.clone());
        let limits = Arc::new(RateLimits::new(
            db.clone(),
            Arc::clone(&clock),
            settings.addresses,
        ));
        let crosstab = Crosstab::new(
            Arc::clone(&catalog),
            settings.cache,
            ledger,
            Arc::clone(&limits),
            settings.query_deadline,
            Arc::clone(&clock),
        );
        let services = Services {
            auth: Authenticator::new(db.clone(), Arc::clone(&clock)),
            crosstab,
            limits,
            db,
            catalog,
            clock,
        };
        (Arc::new(services), writer)
    }
}
