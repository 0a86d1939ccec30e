//! Shared fixture of the in-process tests: a temp data dir with the vector survey `VEC`
//! and a small demo survey `DEMO`, a SQLite database, keys with different grants, and
//! the router.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, Response};
use axum::Router;
use crosstab_contract::vectors;
use crosstab_engine::demo::{self, DemoConfig};
use crosstab_engine::import;
use crosstab_engine::store::{Catalog, SurveyStore};
use crosstab_server::accounts;
use crosstab_server::app::{self, AppState};
use crosstab_server::cors::Cors;
use crosstab_server::db::{self, Database};
use crosstab_server::grants::GrantSpec;
use crosstab_server::keys::KeyEnv;
use serde_json::Value;
use tower::ServiceExt;

pub const ORIGIN: &str = "http://app.test";

#[allow(missing_debug_implementations)]
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub db: Database,
    pub url: String,
    pub state: Arc<AppState>,
    pub router: Router,
    /// Whole of VEC.
    pub whole: String,
    /// VEC group N only.
    pub north: String,
    /// DEMO only.
    pub other: String,
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
        install_surveys(dir.path());
        let url = db::default_url(dir.path());
        let db = Database::connect(&url).await.unwrap();
        let whole = key(&db, "acme", &["VEC"], KeyEnv::Live, None).await;
        let north = key(&db, "north", &["VEC:N"], KeyEnv::Live, None).await;
        let other = key(&db, "demo-only", &["DEMO"], KeyEnv::Test, None).await;
        let (catalog, _) = Catalog::new(SurveyStore::open(dir.path()).unwrap());
        let (state, _writer) = AppState::new(db.clone(), Arc::new(catalog), Cors::new(origins));
        let router = app::router(Arc::clone(&state));
        Fixture {
            dir,
            db,
            url,
            state,
            router,
            whole,
            north,
            other,
        }
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

    pub async fn bills(&self) -> i64 {
        crosstab_server::ledger::count(&self.db).await.unwrap()
    }
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
