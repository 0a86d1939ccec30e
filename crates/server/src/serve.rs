//! `crosstab serve`: the HTTP server's life: open, listen, follow re-imports, shut down
//! gracefully with every bill on disk.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crosstab_engine::demo::{self, DemoConfig};
use crosstab_engine::store::{Catalog, SurveyStore};
use crosstab_engine::ImportError;

use crate::clock::{Clock, SystemClock};
use crate::grants::GrantSpec;
use crate::http::cors::Cors;
use crate::http::listener::{self, Limits};
use crate::http::proxy::TrustedProxy;
use crate::http::{self, HttpOptions, HttpState};
use crate::keys::KeyEnv;
use crate::service::app::AppService;
use crate::service::memory::{self, ResidentMemory};
use crate::service::replicas::{self, log_refresh, Copier, SurveyCopies};
use crate::service::upstream::{Unreachable, Upstream};
use crate::service::users::{self, UserError};
use crate::service::Services;
use crate::store::{accounts, Backend, Database, DatabaseOptions, DbError};

/// How often the catalog looks for re-imported surveys.
const REFRESH_EVERY: Duration = Duration::from_secs(1);

/// What `serve` needs.
#[derive(Debug)]
pub struct ServeOptions {
    /// Address to listen on (port 0: any free port, printed at start).
    pub listen: SocketAddr,
    /// The data dir (surveys, and the SQLite database by default).
    pub data_dir: PathBuf,
    /// The database URL.
    pub database: String,
    /// How each database connection is set up.
    pub database_options: DatabaseOptions,
    /// Allowed browser origins.
    pub allowed_origins: Vec<String>,
    /// Set up the demo survey, account, key and app user.
    pub demo: bool,
    /// The built app, served at `/`.
    pub app_dir: PathBuf,
    /// Another `/v1` service the app backend sends its users' queries to (default: this
    /// server answers them in-process).
    pub upstream: Option<String>,
    /// The deadlines and caps of connections.
    pub limits: Limits,
    /// The address clients reach this service at (`https://...` makes cookies `Secure`
    /// and sends HSTS); `None`: the listen address, as `http://`.
    pub public_url: Option<String>,
    /// The proxy whose header names the client, if any.
    pub trusted_proxy: Option<TrustedProxy>,
    /// How the services behave.
    pub settings: crate::service::Settings,
}

/// Why the server could not run.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The database.
    #[error(transparent)]
    Db(#[from] DbError),
    /// The survey store or the demo survey.
    #[error(transparent)]
    Survey(#[from] ImportError),
    /// Listening or serving.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// A background task died.
    #[error("internal task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    /// Setting up the demo user.
    #[error(transparent)]
    User(#[from] UserError),
    /// The upstream client could not be made.
    #[error(transparent)]
    Upstream(#[from] Unreachable),
    /// The built app could not be read.
    #[error("the app: {0}")]
    App(String),
    /// Surveys could not be published to or copied from the database.
    #[error("surveys not shared through the database: {0}")]
    Copies(crate::service::ServiceError),
    /// Single sign-on's keys (a sealed key this server cannot open, say).
    #[error(transparent)]
    Sso(#[from] crate::service::sso::StartError),
}

/// What `--demo` made: the key and the user's password are shown once, at start.
#[derive(Debug)]
pub struct Demo {
    /// An API key for account `demo` (for curl and backend callers).
    pub key: String,
    /// The password of user `demo` (reset at each start).
    pub password: String,
}

/// The demo: the `DEMO` survey (generated once), account `demo` entitled to all of it,
/// and a fresh test key for it (keys are shown only once, so each start makes one, and
/// revokes every earlier key of the account, however made, as it resets the user's
/// password: only what this start printed opens the demo).
pub async fn prepare_demo(db: &Database, store: &SurveyStore) -> Result<Demo, ServeError> {
    let config = DemoConfig::default();
    if !store.codes()?.iter().any(|code| code == "DEMO") {
        tracing::info!(
            respondents = config.respondents,
            "generating the demo survey"
        );
        let store = store.clone();
        tokio::task::spawn_blocking(move || {
            demo::compile(&config).and_then(|bytes| store.install(&bytes))
        })
        .await??;
    }
    let grant = GrantSpec {
        survey: "DEMO".to_owned(),
        groups: Vec::new(),
    };
    if db.backend() == Backend::Postgres {
        // For every server on this database, not only this one.
        replicas::publish(db, store, "DEMO", SystemClock.now_ms())
            .await
            .map_err(ServeError::Copies)?;
    }
    let mut revoked = 0;
    for earlier in accounts::list_keys(db, Some("demo")).await? {
        if earlier.revoked_at.is_none()
            && accounts::revoke_key(db, &earlier.id).await? == accounts::Revocation::Revoked
        {
            revoked += 1;
        }
    }
    if revoked > 0 {
        tracing::info!(revoked, "the earlier keys of account demo are revoked");
    }
    let key = accounts::create_key(db, "demo", &[grant], KeyEnv::Test, None).await?;
    let password = users::random_password();
    let now = SystemClock.now_ms();
    users::create_or_reset(db, DEMO_USER, "demo", &password, now).await?;
    Ok(Demo {
        key: key.token,
        password,
    })
}

/// The app user `--demo` creates.
pub const DEMO_USER: &str = "demo";

/// Moves the caches' limit to what the rest of the process leaves of the budget, every
/// [`memory::READ_EVERY`], off the async workers (a falling limit evicts); says when the
/// process outgrows its budget with the caches at their floor, and when it is back within.
async fn hold_resident_memory(resident: ResidentMemory) {
    let resident = Arc::new(std::sync::Mutex::new(resident));
    let mut tick = tokio::time::interval(memory::READ_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut over = false;
    loop {
        tick.tick().await;
        let resident = Arc::clone(&resident);
        let reading = tokio::task::spawn_blocking(move || {
            let bytes = memory::resident_anonymous()?;
            // A panic elsewhere cannot leave the readings inconsistent: each is one push.
            let mut resident = resident.lock().unwrap_or_else(|p| p.into_inner());
            Some(resident.observe(bytes))
        })
        .await;
        let Ok(Some(reading)) = reading else { continue };
        if reading.over != over {
            over = reading.over;
            if over {
                tracing::warn!(excess = reading.excess, caches = reading.limit, "the process holds more than --cache-memory besides its caches: they are at their floor");
            } else {
                tracing::info!(
                    excess = reading.excess,
                    caches = reading.limit,
                    "the process is within --cache-memory again"
                );
            }
        }
    }
}

/// Runs the server until SIGINT or SIGTERM.
pub async fn serve(options: ServeOptions) -> Result<(), ServeError> {
    // Listened for from the first moment: a signal during start-up stops the server
    // cleanly once it is up, instead of killing it half-way.
    let shutdown = shutdown_signal()?;
    // The address first: a server that can't listen (the port taken) changes nothing,
    // not the demo's key and password, not its users' sessions.
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|error| {
            std::io::Error::new(
                error.kind(),
                format!("listening on {}: {error}", options.listen),
            )
        })?;
    crate::store::create_data_dir(&options.data_dir)?;
    let db = Database::connect_with(&options.database, options.database_options).await?;
    let store = SurveyStore::open(&options.data_dir)?;
    if options.demo {
        let demo = prepare_demo(&db, &store).await?;
        println!("demo key: {}", demo.key);
        println!("demo user: {DEMO_USER}");
        println!("demo password: {}", demo.password);
    }
    tracing::info!(
        bytes = options.settings.memory.limit(),
        "memory budget: the caches (answers, survey sets) get what the rest of the process leaves"
    );
    let resident = if memory::resident_anonymous().is_some() {
        Some(tokio::spawn(hold_resident_memory(ResidentMemory::new(
            &options.settings.memory,
        ))))
    } else {
        tracing::warn!("this system does not report resident memory: the caches are held to the bytes they count");
        None
    };
    // Each survey file is read whole to check it: off the async workers.
    let (catalog, refresh) = {
        let (store, memory) = (store.clone(), Arc::clone(&options.settings.memory));
        tokio::task::spawn_blocking(move || Catalog::within(store, &memory)).await?
    };
    log_refresh(&refresh);
    let catalog = Arc::new(catalog);
    // On PostgreSQL the surveys published there are copied in before serving.
    let copies = (db.backend() == Backend::Postgres)
        .then(|| Arc::new(SurveyCopies::new(db.clone(), store, Arc::clone(&catalog))));
    if let Some(copies) = &copies {
        let copied = copies.sync().await.map_err(ServeError::Copies)?;
        tracing::info!(surveys = %copied.join(", "), "surveys copied from the database");
    }
    let surveys: Vec<String> = catalog.all().iter().map(|s| s.code().to_owned()).collect();
    let cors = Cors::new(&options.allowed_origins);
    let origins = cors.describe();
    let address = listener.local_addr()?;
    let public_url = options
        .public_url
        .clone()
        .unwrap_or_else(|| format!("http://{address}"));
    if options.public_url.is_none() && db.backend() == Backend::Postgres {
        // Replicas share keys and users but not this default: a token one signs would
        // name an issuer the others refuse.
        tracing::warn!(
            issuer = %public_url,
            "no --public-url on a shared PostgreSQL: this replica signs tokens as its own address, and other replicas refuse them; give every replica the address clients reach"
        );
    }
    if options
        .trusted_proxy
        .as_ref()
        .is_some_and(TrustedProxy::trusts_any_peer)
    {
        tracing::warn!(
            "--trust-proxy-header without --trusted-proxy: the header is believed from any peer, so a client reaching this server other than through the proxy can name itself any address; name the proxy with --trusted-proxy"
        );
    }
    let mut settings = options.settings;
    settings.public_url = public_url.clone();
    let (services, writer) = Services::start(
        db.clone(),
        Arc::clone(&catalog),
        settings,
        Arc::new(SystemClock),
    );
    // The first token-signing key, and the identity providers' keys, before serving.
    services.sso.prepare().await?;
    let upstream = options.upstream.as_deref().map(Upstream::new).transpose()?;
    if !options.app_dir.join("index.html").exists() {
        tracing::warn!(app_dir = %options.app_dir.display(), "the app is not built there (trunk build --release): / serves nothing");
    }
    // Once listening, compare the upstream's contract with ours.
    let contract_check = tokio::spawn(check_upstream(upstream.clone()));
    let app = AppService::new(Arc::clone(&services), upstream);
    let options_http = HttpOptions {
        cors,
        app_dir: Some(&options.app_dir),
        https: public_url.starts_with("https://"),
        trusted_proxy: options.trusted_proxy.clone(),
    };
    let state =
        HttpState::new(Arc::clone(&services), app, options_http).map_err(ServeError::App)?;
    let router = http::router(state, Some(&options.app_dir));
    tracing::info!(%address, surveys = %surveys.join(", "), allowed_origins = %origins, "crosstab serving /v1");
    println!("crosstab listening on http://{address}");

    let copier = copies.map(|copies| Arc::new(Copier::spawn(copies)));
    let pushed = services.follow_changes(copier.clone());
    let draining = Arc::clone(&services);
    // The key revision, every second on a task of its own: the backstop to revocations
    // waits behind no catalog refresh, quota sharing or purge.
    let revisions = {
        let services = Arc::clone(&services);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(REFRESH_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if let Err(error) = services.auth.follow_revision().await {
                    tracing::warn!(%error, "key revision not read");
                }
            }
        })
    };
    let follower = tokio::spawn(async move {
        let mut tick = tokio::time::interval(REFRESH_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        for round in 0u64.. {
            tick.tick().await;
            // A backstop to the announcements, every 10 s (copied beside this loop).
            if let Some(copier) = copier.as_ref().filter(|_| round % 10 == 9) {
                copier.nudge();
            }
            let catalog = Arc::clone(&catalog);
            if let Ok(refresh) = tokio::task::spawn_blocking(move || catalog.refresh()).await {
                log_refresh(&refresh);
            }
            services.limits.forget_idle();
            if let Err(error) = services.limits.share_quotas().await {
                tracing::warn!(%error, "daily quotas not brought in step with the ledger");
            }
            if let Err(error) = services.purge_expired().await {
                tracing::warn!(%error, "expired records (idempotency keys, assertion ids, retired keys, unknown names) not purged");
            }
        }
    });

    // Past the signal, drain first: served, but not ready, for `drain`.
    let drain = options.limits.drain;
    let shutdown = async move {
        shutdown.await;
        if !drain.is_zero() {
            draining.drain();
            tracing::info!(
                seconds = drain.as_secs(),
                "draining before the listener closes"
            );
            tokio::time::sleep(drain).await;
        }
    };
    listener::serve(listener, router, options.limits, shutdown).await;
    follower.abort();
    revisions.abort();
    if let Some(resident) = resident {
        resident.abort();
    }
    if let Some(pushed) = pushed {
        pushed.abort();
        let _ = pushed.await;
    }
    // Wait until it is dropped: it holds the services, and with them a ledger handle.
    let _ = follower.await;
    contract_check.abort();
    // The router (and with it every ledger handle) is gone: the writer drains and stops.
    writer.finish().await;
    db.close().await;
    tracing::info!("stopped; every bill is committed");
    Ok(())
}

/// Logs how the upstream's contract differs from this build's, if there is an upstream.
async fn check_upstream(upstream: Option<Upstream>) {
    let Some(upstream) = upstream else { return };
    match upstream.check_contract().await {
        Ok(differences) if differences.is_empty() => {
            tracing::info!(upstream = %upstream.base(), "upstream contract matches");
        }
        Ok(differences) => {
            for difference in differences {
                tracing::warn!(upstream = %upstream.base(), %difference, "upstream contract differs");
            }
        }
        Err(error) => {
            tracing::warn!(upstream = %upstream.base(), %error, "upstream contract not checked")
        }
    }
}

/// SIGINT or SIGTERM, whichever comes first; the handlers are in place when this returns.
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    #[cfg(unix)]
    let signalled = {
        use tokio::signal::unix::{signal, SignalKind};
        let mut interrupt = signal(SignalKind::interrupt())?;
        let mut terminate = signal(SignalKind::terminate())?;
        async move {
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = terminate.recv() => {}
            }
        }
    };
    #[cfg(not(unix))]
    let signalled = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    Ok(async move {
        signalled.await;
        tracing::info!("shutting down: finishing in-flight requests");
    })
}
