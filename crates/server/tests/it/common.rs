//! Shared fixture of the in-process tests: a temp data dir with the vector survey `VEC`
//! and a small demo survey `DEMO`, a SQLite database, keys with different grants, and
//! the router.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, Response};
use crosstab_contract::vectors;
use crosstab_engine::demo::{self, DemoConfig};
use crosstab_engine::import;
use crosstab_engine::store::{Catalog, SurveyStore};
use crosstab_engine::MemoryBudget;
use crosstab_server::clock::{now_ms, ManualClock};
use crosstab_server::grants::GrantSpec;
use crosstab_server::http::cors::Cors;
use crosstab_server::http::{self, HttpOptions, HttpService, HttpState};
use crosstab_server::keys::KeyEnv;
use crosstab_server::service::app::AppService;
use crosstab_server::service::upstream::Upstream;
use crosstab_server::service::{Services, Settings};
use crosstab_server::store::{self, accounts, Database};
use serde_json::Value;
use tower::ServiceExt;

pub const ORIGIN: &str = "http://app.test";

#[allow(missing_debug_implementations)]
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub db: Database,
    pub url: String,
    /// The services' clock, at the real time when the fixture was made.
    pub clock: Arc<ManualClock>,
    pub services: Arc<Services>,
    /// The cache budget the services and the catalog share.
    pub memory: Arc<MemoryBudget>,
    pub origins: Vec<String>,
    /// `/v1` and `/app` (queries in-process), no app files.
    pub router: HttpService,
    /// Whole of VEC.
    pub whole: String,
    /// VEC group N only.
    pub north: String,
    /// DEMO only.
    pub other: String,
}

/// The throwaway PostgreSQL's URL (`CROSSTAB_TEST_POSTGRES_URL`); `None`, and the test
/// says it is skipped, when it is unset, unless PostgreSQL tests are required
/// (`CROSSTAB_TEST_REQUIRE_POSTGRES`, as scripts/test sets it): then the test fails.
pub fn postgres_url() -> Option<String> {
    let url = std::env::var("CROSSTAB_TEST_POSTGRES_URL").ok();
    if url.is_none() {
        skipped("CROSSTAB_TEST_POSTGRES_URL not set");
    }
    url
}

/// Says a PostgreSQL test is skipped for `why`, or fails it when such tests are required.
pub fn skipped(why: &str) {
    assert!(
        std::env::var_os("CROSSTAB_TEST_REQUIRE_POSTGRES").is_none(),
        "{why}, and CROSSTAB_TEST_REQUIRE_POSTGRES says PostgreSQL tests must run"
    );
    eprintln!("{why}: PostgreSQL test skipped");
}

/// The URL of a new, empty database beside the one `url` names.
pub async fn database_of_its_own(url: &str) -> String {
    let (server, _) = url.rsplit_once('/').unwrap();
    let name = format!("own_{}", uuid::Uuid::new_v4().simple());
    let admin = Database::connect(url).await.unwrap();
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(admin.pool())
        .await
        .unwrap();
    admin.close().await;
    format!("{server}/{name}")
}

pub fn grant(text: &str) -> GrantSpec {
    text.parse().unwrap()
}

pub async fn key(
    db: &Database,
    account: &str,
    grants: &[&str],
    env: KeyEnv,
    expires_at: Option<i64>,
) -> String {
    let grants: Vec<GrantSpec> = grants.iter().map(|g| grant(g)).collect();
    accounts::create_key(db, account, &grants, env, expires_at)
        .await
        .unwrap()
        .token
}

pub fn install_surveys(data_dir: &Path) {
    let store = SurveyStore::open(data_dir).unwrap();
    let vec = import::compile_file(&vectors::dir().join("survey/survey.toml")).unwrap();
    store.install(&vec).unwrap();
    let small = DemoConfig {
        respondents: 400,
        flags: 8,
        seed: 7,
    };
    store.install(&demo::compile(&small).unwrap()).unwrap();
}

impl Fixture {
    pub async fn new() -> Fixture {
        Fixture::with_origins(&[ORIGIN]).await
    }

    /// The fixture with these `--allowed-origin` values.
    pub async fn with_origins(origins: &[&str]) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let url = store::default_url(dir.path());
        Fixture::on(&url, dir, origins).await
    }

    /// The fixture with these service settings.
    pub async fn with_settings(settings: Settings) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let url = store::default_url(dir.path());
        Fixture::on_with(&url, dir, &[ORIGIN], settings).await
    }

    /// The fixture on the database at `url` (its surveys installed in `dir`).
    pub async fn on(url: &str, dir: tempfile::TempDir, origins: &[&str]) -> Fixture {
        Fixture::on_with(url, dir, origins, Settings::default()).await
    }

    async fn on_with(
        url: &str,
        dir: tempfile::TempDir,
        origins: &[&str],
        settings: Settings,
    ) -> Fixture {
        install_surveys(dir.path());
        let db = Database::connect(url).await.unwrap();
        let whole = key(&db, "acme", &["VEC"], KeyEnv::Live, None).await;
        let north = key(&db, "north", &["VEC:N"], KeyEnv::Live, None).await;
        let other = key(&db, "demo-only", &["DEMO"], KeyEnv::Test, None).await;
        let memory = Arc::clone(&settings.memory);
        let (catalog, _) = Catalog::within(SurveyStore::open(dir.path()).unwrap(), &memory);
        let clock = ManualClock::at(now_ms());
        let (services, _writer) =
            Services::start(db.clone(), Arc::new(catalog), settings, clock.clone());
        let origins: Vec<String> = origins.iter().map(|o| (*o).to_owned()).collect();
        let router = router_over(&services, &origins, None, None);
        Fixture {
            dir,
            db,
            url: url.to_owned(),
            clock,
            services,
            memory,
            origins,
            router,
            whole,
            north,
            other,
        }
    }

    /// The whole router over this fixture's services, with the app backend sending queries
    /// to `upstream` (none: in-process) and serving the app's files from `app_dir`.
    pub fn router_with(&self, upstream: Option<Upstream>, app_dir: Option<&Path>) -> HttpService {
        router_over(&self.services, &self.origins, upstream, app_dir)
    }

    pub async fn send(&self, request: Request<Body>) -> (Response<()>, Value) {
        let response = self.router.clone().oneshot(request).await.unwrap();
        let (parts, body) = response.into_parts();
        let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        let value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap()
        };
        (Response::from_parts(parts, ()), value)
    }

    pub async fn post(&self, key: Option<&str>, body: &Value) -> (Response<()>, Value) {
        self.send(post(key, body.to_string())).await
    }

    /// Moves the clock into the next UTC day if less than ten minutes of today are left
    /// (the clock starts at the real time), so a test of what happens within a day, such
    /// as the daily quota, never sees its day end partway. Call it before the first request.
    pub fn clear_of_midnight(&self) {
        const DAY_MS: i64 = 86_400_000;
        let left = DAY_MS - self.now().rem_euclid(DAY_MS);
        if left < 10 * 60_000 {
            self.clock.advance(left + 60_000);
        }
    }

    /// The services' time now.
    pub fn now(&self) -> i64 {
        use crosstab_server::clock::Clock;
        self.clock.now_ms()
    }

    pub async fn bills(&self) -> i64 {
        crosstab_server::store::ledger::count(&self.db)
            .await
            .unwrap()
    }
}

/// Gives `account` a daily quota of `calls` (no rate).
pub async fn daily_quota(fx: &Fixture, account: &str, calls: u64) {
    let limits = crosstab_server::store::accounts::AccountLimits {
        per_second: None,
        daily_quota: Some(calls),
    };
    assert!(
        crosstab_server::store::accounts::set_limits(&fx.db, account, limits)
            .await
            .unwrap()
    );
}

pub fn post(key: Option<&str>, body: impl Into<Body>) -> Request<Body> {
    let mut builder = Request::post("/v1/crosstab").header("content-type", "application/json");
    if let Some(key) = key {
        builder = builder.header("Service-Engine-Authorizer", key);
    }
    builder.body(body.into()).unwrap()
}

pub fn request(survey: &str, group: Option<&str>, base: &str, targets: &[&str]) -> Value {
    let mut body = serde_json::json!({
        "SurveyCode": survey,
        "PopulationBaseCode": base,
        "TargetCodes": targets,
    });
    if let Some(group) = group {
        body["AuthorizationGroup"] = group.into();
    }
    body
}

pub fn code(body: &Value) -> &str {
    body.pointer("/error/code")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// The whole HTTP surface over `services`, allowing `origins`, with the app backend sending
/// queries to `upstream` (none: in-process) and serving the app's files from `app_dir`.
fn router_over(
    services: &Arc<Services>,
    origins: &[String],
    upstream: Option<Upstream>,
    app_dir: Option<&Path>,
) -> HttpService {
    router_for(services, origins, upstream, app_dir, false)
}

/// The router over `services`, for clients that reach it over `https` or not.
pub fn router_for(
    services: &Arc<Services>,
    origins: &[String],
    upstream: Option<Upstream>,
    app_dir: Option<&Path>,
    https: bool,
) -> HttpService {
    let app = AppService::new(Arc::clone(services), upstream);
    let options = HttpOptions {
        cors: Cors::new(origins),
        app_dir,
        https,
        trusted_proxy: None,
    };
    let state = HttpState::new(Arc::clone(services), app, options).unwrap();
    http::router(state, app_dir)
}
