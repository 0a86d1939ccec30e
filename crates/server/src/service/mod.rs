//! The service layer: what the server does, without HTTP. Handlers extract, call one of
//! these and map the outcome to a response; nothing here knows a status code, a header
//! or a cookie. Dependencies run one way: `http` → `service` → `store` / engine.

pub mod app;
pub mod auth;
pub mod cache;
pub mod crosstab;
pub mod limits;
pub mod memory;
pub mod principal;
pub mod replicas;
pub mod sso;
pub mod transport;
pub mod upstream;
pub mod usage;
pub mod users;

use std::sync::Arc;

use crosstab_contract::ApiError;
use crosstab_engine::store::Catalog;
use crosstab_engine::MemoryBudget;

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
    /// A request of more billed calls (an app table) than the account's whole daily
    /// quota: no wait admits it. (A `/v1` call, one call, is never this.)
    #[error("{calls} billed calls is more than the daily quota of {quota}")]
    OverQuota {
        /// What the request would bill.
        calls: u64,
        /// The account's daily quota.
        quota: u64,
    },
}

/// How the services behave (from `serve`'s flags).
#[derive(Debug)]
pub struct Settings {
    /// The one byte budget of every cache: answers, and each survey's sets.
    pub memory: Arc<MemoryBudget>,
    /// Whole answers kept (drawing on `memory`).
    pub cache: ResponseCache,
    /// A query not answered within this is refused (503, not billed).
    pub query_deadline: std::time::Duration,
    /// Per-address paces.
    pub addresses: AddressLimits,
    /// The address clients reach the service at: the issuer and audience of its own
    /// access tokens, and the audience identity providers' tokens must name by default.
    pub public_url: String,
    /// What the server's own token-signing keys are sealed with in the database (`None`:
    /// stored unsealed).
    pub token_key_secret: Option<sso::sealing::KeySecret>,
}

/// The public URL when none is given: the default listen address.
pub const DEFAULT_PUBLIC_URL: &str = "http://127.0.0.1:8080";

impl Default for Settings {
    fn default() -> Settings {
        let memory = MemoryBudget::new(Catalog::DEFAULT_BUDGET);
        Settings {
            cache: ResponseCache::within(cache::DEFAULT_ENTRIES, &memory),
            memory,
            query_deadline: std::time::Duration::from_secs(10),
            addresses: AddressLimits {
                failed_auth_per_minute: 60,
                sign_in_per_minute: 20,
            },
            public_url: DEFAULT_PUBLIC_URL.to_owned(),
            token_key_secret: None,
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
    /// API key and bearer token checks.
    pub auth: Authenticator,
    /// Identity providers, bearer tokens and the token endpoint.
    pub sso: Arc<sso::Sso>,
    /// Queries and their bills.
    pub crosstab: Crosstab,
    /// Rates and quotas.
    pub limits: Arc<RateLimits>,
    /// Time.
    pub clock: Arc<dyn Clock>,
    /// The database probe's last answer, and when (monotonic): probes within
    /// [`READY_PROBE_REUSE`] of it share it, so a flood of `/ready` costs the pool one
    /// query a second.
    last_probe: tokio::sync::Mutex<Option<(std::time::Instant, Result<(), String>)>>,
    /// Shutting down: still serving, but not ready for new traffic.
    draining: std::sync::atomic::AtomicBool,
}

/// How long one database probe answers `/ready`.
const READY_PROBE_REUSE: std::time::Duration = std::time::Duration::from_secs(1);

/// Why the service is not ready to take billed calls.
#[derive(Debug, thiserror::Error)]
pub enum NotReady {
    /// The database did not answer (in time).
    #[error("the database does not answer: {0}")]
    Database(String),
    /// The ledger writer has stopped.
    #[error("the ledger writer has stopped")]
    Ledger,
    /// Shutting down: requests in flight and the last ones are served, new ones should
    /// go elsewhere.
    #[error("draining: the server is shutting down")]
    Draining,
}

/// How long a readiness probe waits for the database.
const READY_PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

impl Services {
    /// The token endpoint: exchanges `assertion` of `grant_type` for an access token, with
    /// the identity providers as they are now (a change counts from this request on, as
    /// on `/v1`).
    pub async fn exchange(
        &self,
        grant_type: &str,
        assertion: &str,
    ) -> Result<sso::exchange::Issued, sso::exchange::GrantError> {
        self.auth.follow_changes().await?;
        self.sso.exchange(grant_type, assertion).await
    }

    /// From now on `/ready` says the server is draining (it is shutting down).
    pub fn drain(&self) {
        self.draining
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether this replica can answer and bill now: not draining, the database answers
    /// within 2 s and the ledger writer runs.
    pub async fn ready(&self) -> Result<(), NotReady> {
        if self.draining.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(NotReady::Draining);
        }
        if !self.crosstab.can_bill() {
            return Err(NotReady::Ledger);
        }
        // One probe at a time; those waiting take its answer.
        let mut last = self.last_probe.lock().await;
        if let Some((at, answer)) = last.as_ref() {
            if at.elapsed() < READY_PROBE_REUSE {
                return answer.clone().map_err(NotReady::Database);
            }
        }
        let answer = match tokio::time::timeout(READY_PROBE_TIMEOUT, self.db.ping()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(error.to_string()),
            Err(_) => Err("no answer within 2 s".to_owned()),
        };
        *last = Some((std::time::Instant::now(), answer.clone()));
        answer.map_err(NotReady::Database)
    }

    /// On a database that pushes its changes (PostgreSQL): a task that applies them as
    /// they come (and, on a reconnection, everything, as some may have been missed):
    /// key changes drop the key cache at once, published surveys nudge `copier` (which
    /// copies beside this task, so a long copy never delays a key's revocation).
    pub fn follow_changes(
        self: &Arc<Self>,
        copier: Option<Arc<replicas::Copier>>,
    ) -> Option<tokio::task::JoinHandle<()>> {
        use crate::store::changes::{Change, ChangeFeed};
        let mut feed = ChangeFeed::of(&self.db)?;
        let services = Arc::clone(self);
        Some(tokio::spawn(async move {
            loop {
                let change = feed.next().await;
                tracing::debug!(?change, "database change");
                if matches!(change, Change::Keys | Change::Resync) {
                    services.auth.changed();
                }
                if let (Change::Surveys | Change::Resync, Some(copier)) = (change, &copier) {
                    copier.nudge();
                }
            }
        }))
    }

    /// Forgets what is kept only for a while: idempotency keys past their day, ids of
    /// expired SAML assertions, signing keys retired longer ago than any token they signed
    /// can live, failure counts of names without a user past their day (or their number).
    pub async fn purge_expired(&self) -> Result<u64, DbError> {
        let now = self.clock.now_ms();
        let before = now - crosstab_contract::idempotency::KEY_KEPT_MS;
        let keys = crate::store::idempotency::purge(&self.db, before).await?;
        let assertions =
            crate::store::saml_replay::purge(&self.db, now - sso::LEEWAY_S * 1000).await?;
        let retired_before = now - (sso::exchange::MAX_LIFETIME_S + sso::LEEWAY_S) * 1000;
        let signing = crate::store::signing_keys::purge(&self.db, retired_before).await?;
        let names = crate::store::unknown_names::purge(
            &self.db,
            now - users::COUNT_KEPT_MS,
            now,
            users::UNKNOWN_NAMES_KEPT,
        )
        .await?;
        Ok(keys + assertions + signing + names)
    }

    /// The services over `db` and `catalog`, with the ledger writer started (finish the
    /// writer after the last request, once the services are dropped, to flush every bill).
    pub fn start(
        db: Database,
        catalog: Arc<Catalog>,
        settings: Settings,
        clock: Arc<dyn Clock>,
    ) -> (Arc<Services>, LedgerWriter) {
        let sso = Arc::new(sso::Sso::new(
            db.clone(),
            Arc::clone(&clock),
            &settings.public_url,
            settings.token_key_secret,
        ));
        let (ledger, writer) = Ledger::start(db.clone(), Arc::clone(&clock));
        let limits = Arc::new(RateLimits::new(
            db.clone(),
            Arc::clone(&clock),
            settings.addresses,
        ));
        let crosstab = Crosstab::new(
            db.clone(),
            Arc::clone(&catalog),
            settings.cache,
            ledger,
            Arc::clone(&limits),
            settings.query_deadline,
            Arc::clone(&clock),
        );
        let services = Services {
            auth: Authenticator::new(
                db.clone(),
                Arc::clone(&clock),
                Arc::clone(&sso),
                &settings.memory,
            ),
            sso,
            crosstab,
            limits,
            db,
            catalog,
            clock,
            last_probe: tokio::sync::Mutex::new(None),
            draining: std::sync::atomic::AtomicBool::new(false),
        };
        (Arc::new(services), writer)
    }
}
