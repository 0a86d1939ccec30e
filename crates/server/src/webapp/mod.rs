//! The researcher app's backend under `/app`, and the app itself at `/`.
//!
//! The browser signs in with a username and password and holds only a session cookie
//! (HttpOnly, SameSite=Strict). Crosstabs go to the `/v1` upstream through
//! [`upstream::Upstream`], which adds the API key held here: the key never reaches the
//! browser. Every non-GET request must carry an `Origin` that is this server or an
//! allowed origin (CSRF), and allowed origins get credentialed CORS answers.

pub mod sessions;
pub mod upstream;
pub mod users;

use std::path::Path;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Path as UrlPath, Request, State};
use axum::http::header::{
    ACCESS_CONTROL_ALLOW_CREDENTIALS, ACCESS_CONTROL_ALLOW_ORIGIN, CONTENT_TYPE, COOKIE, HOST,
    ORIGIN, RETRY_AFTER, SET_COOKIE, VARY,
};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use crosstab_contract::{validate_body, ApiError, ErrorDetail, ErrorEnvelope};
use serde::Deserialize;
use serde_json::{json, Value};
use sqlx::Row;
use tower_http::services::{ServeDir, ServeFile};

use crate::accounts;
use crate::app::AppState;
use crate::db::{Backend, DbError};
use crate::grants::{Grants, SurveyGrant};
use crate::keys::KeyEnv;
use users::{SignIn, User};

/// The app backend's shared state.
#[derive(Debug)]
pub struct WebApp {
    core: Arc<AppState>,
    upstream: Option<upstream::Upstream>,
    secure_cookies: bool,
    unknown_names: users::UnknownNames,
}

impl WebApp {
    /// The backend over the server's state; `upstream` is `None` when no app key is set
    /// (sign-in and the portal work, queries answer 503). Cookies are `Secure` unless the
    /// server listens on loopback.
    pub fn new(
        core: Arc<AppState>,
        upstream: Option<upstream::Upstream>,
        secure_cookies: bool,
    ) -> Self {
        WebApp {
            core,
            upstream,
            secure_cookies,
            unknown_names: users::UnknownNames::default(),
        }
    }

    /// The keys of `user`'s account it may see and revoke: all but the app's own upstream
    /// key (with `--demo` it belongs to the demo account, and revoking it would break
    /// every query the app makes).
    async fn user_keys(&self, user: &User) -> Result<Vec<accounts::KeyInfo>, DbError> {
        let own = self.upstream.as_ref().and_then(upstream::Upstream::key_id);
        let mut keys = accounts::list_keys(&self.core.db, Some(&user.account)).await?;
        keys.retain(|key| Some(key.id.as_str()) != own);
        Ok(keys)
    }
}

/// A failed app-backend request, answered in the contract's envelope shape.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// A rule of the contract (validation, entitlement, internal).
    #[error(transparent)]
    Contract(#[from] ApiError),
    /// No live session.
    #[error("Sign in first.")]
    NotSignedIn,
    /// Wrong username or password.
    #[error("The username or password is not right.")]
    InvalidCredentials,
    /// Locked after too many failed sign-ins.
    #[error("Too many failed sign-ins: try again in {0} seconds.")]
    Locked(i64),
    /// A non-GET request from an origin that is neither this server nor allowed.
    #[error("Requests from this origin are not accepted.")]
    ForeignOrigin,
    /// Nothing here by that name.
    #[error("Not found.")]
    NotFound,
    /// A bad request to the app backend itself.
    #[error("{0}")]
    BadRequest(String),
    /// No key is configured for the upstream.
    #[error("Queries are not configured on this server (no app key).")]
    NotConfigured,
    /// The upstream could not be reached, even after retries.
    #[error("The query service could not be reached; try again shortly.")]
    Unreachable,
    /// The account already holds as many usable keys as the app lets it create.
    #[error("An account holds at most {MAX_USABLE_KEYS} usable keys: revoke one first.")]
    TooManyKeys,
}

/// Usable (unrevoked, unexpired) keys an account may hold before the app creates no more:
/// every new key is a write and drops every server's key cache, so a loop of creations
/// must stop somewhere. Operators' `crosstab key create` is not limited.
pub const MAX_USABLE_KEYS: usize = 20;

impl From<DbError> for AppError {
    fn from(error: DbError) -> Self {
        tracing::error!(%error, "app backend database error");
        AppError::Contract(ApiError::Internal)
    }
}

impl From<users::UserError> for AppError {
    fn from(error: users::UserError) -> Self {
        match error {
            users::UserError::Invalid(reason) => AppError::BadRequest(reason),
            other => {
                tracing::error!(error = %other, "app backend user error");
                AppError::Contract(ApiError::Internal)
            }
        }
    }
}

impl IntoResponse for AppError {
    /// The one place app-backend errors become bodies; contract errors keep the contract's.
    fn into_response(self) -> Response {
        let (status, code) = match &self {
            AppError::Contract(error) => return crate::api::error_response(error),
            AppError::NotSignedIn => (StatusCode::UNAUTHORIZED, "not_signed_in"),
            AppError::InvalidCredentials => (StatusCode::UNAUTHORIZED, "invalid_credentials"),
            AppError::Locked(_) => (StatusCode::TOO_MANY_REQUESTS, "too_many_attempts"),
            AppError::ForeignOrigin => (StatusCode::FORBIDDEN, "forbidden_origin"),
            AppError::NotFound => (StatusCode::NOT_FOUND, "not_found"),
            AppError::BadRequest(_) => (StatusCode::BAD_REQUEST, "invalid_request"),
            AppError::NotConfigured => (StatusCode::SERVICE_UNAVAILABLE, "not_configured"),
            AppError::Unreachable => (StatusCode::BAD_GATEWAY, "upstream_unreachable"),
            AppError::TooManyKeys => (StatusCode::CONFLICT, "too_many_keys"),
        };
        let message = self.to_string();
        let envelope = ErrorEnvelope {
            result_code: i64::from(status.as_u16()),
            result_description: message.clone(),
            error: Some(ErrorDetail {
                code: code.to_owned(),
                message,
                field: None,
                hint: None,
            }),
        };
        let mut response = (status, Json(envelope)).into_response();
        if let AppError::Locked(seconds) = self {
            if let Ok(value) = HeaderValue::from_str(&seconds.to_string()) {
                response.headers_mut().insert(RETRY_AFTER, value);
            }
        }
        response
    }
}

type AppResult<T> = Result<T, AppError>;

/// `/app` routes and the app's static files at `/` (from `app_dir`, with `index.html`
/// for any other path so the single-page app handles it).
pub fn routes(webapp: Arc<WebApp>, app_dir: &Path) -> Router<Arc<AppState>> {
    let api = Router::new()
        .route("/login", post(login))
        .route("/logout", post(logout))
        .route("/api/me", get(me))
        .route("/api/surveys", get(surveys))
        .route("/api/surveys/{code}/codebook", get(codebook))
        .route("/api/crosstab", post(crosstab))
        .route("/api/keys", get(list_keys).post(create_key))
        .route("/api/keys/{id}", delete(revoke_key))
        .route("/api/usage", get(usage))
        .fallback(crate::api::not_found)
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&webapp),
            guard,
        ))
        .with_state(webapp);
    let index = app_dir.join("index.html");
    let files = ServeDir::new(app_dir).fallback(ServeFile::new(index));
    Router::new()
        .nest("/app", api)
        .route("/app/", axum::routing::any(crate::api::not_found))
        .fallback_service(files)
}

/// CORS (credentialed: origins listed by name only, never `*`), preflights, and the CSRF
/// origin check.
async fn guard(State(app): State<Arc<WebApp>>, request: Request, next: Next) -> Response {
    let origin = request.headers().get(ORIGIN).cloned();
    let allowed = app.core.cors.allow_listed(origin.as_ref()).cloned();
    let method = request.method().clone();
    let mut response = if method == Method::OPTIONS {
        let mut response = StatusCode::NO_CONTENT.into_response();
        if allowed.is_some() {
            crate::cors::preflight_headers(
                response.headers_mut(),
                "GET, POST, DELETE, OPTIONS",
                "Content-Type",
            );
        }
        response
    } else if method != Method::GET
        && method != Method::HEAD
        && !same_origin(origin.as_ref(), request.headers())
        && allowed.is_none()
    {
        AppError::ForeignOrigin.into_response()
    } else {
        next.run(request).await
    };
    let headers = response.headers_mut();
    if let Some(origin) = allowed {
        headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        headers.insert(
            ACCESS_CONTROL_ALLOW_CREDENTIALS,
            HeaderValue::from_static("true"),
        );
    }
    headers.append(VARY, HeaderValue::from_static("Origin"));
    response
}

/// Whether `Origin` names this server (the host the request was sent to).
fn same_origin(origin: Option<&HeaderValue>, headers: &HeaderMap) -> bool {
    let (Some(origin), Some(host)) = (
        origin.and_then(|o| o.to_str().ok()),
        headers.get(HOST).and_then(|h| h.to_str().ok()),
    ) else {
        return false;
    };
    origin
        .split_once("://")
        .is_some_and(|(_, rest)| rest.eq_ignore_ascii_case(host))
}

/// The session token among the request's cookies.
fn session_token(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|h| h.to_str().ok())
        .find_map(sessions::token_from_cookies)
}

async fn session_user(app: &WebApp, headers: &HeaderMap) -> AppResult<User> {
    let token = session_token(headers).ok_or(AppError::NotSignedIn)?;
    sessions::user(&app.core.db, token)
        .await?
        .ok_or(AppError::NotSignedIn)
}

async fn grants_of(app: &WebApp, user: &User) -> AppResult<Grants> {
    Ok(accounts::grants_of(&app.core.db, user.account_id).await?)
}

fn me_body(user: &User) -> Value {
    json!({"username": user.username, "account": user.account})
}

#[derive(Debug, Deserialize)]
struct Credentials {
    username: String,
    password: String,
}

async fn login(State(app): State<Arc<WebApp>>, body: Bytes) -> AppResult<Response> {
    let credentials: Credentials = serde_json::from_slice(&body).map_err(|_| {
        AppError::BadRequest("Send {\"username\": ..., \"password\": ...} as JSON.".into())
    })?;
    let signing_in = users::sign_in(
        &app.core.db,
        &app.unknown_names,
        &credentials.username,
        &credentials.password,
    );
    match signing_in.await? {
        SignIn::Accepted(user) => {
            let token = sessions::start(&app.core.db, &user).await?;
            let mut response = Json(me_body(&user)).into_response();
            if let Ok(cookie) =
                HeaderValue::from_str(&sessions::set_cookie(&token, app.secure_cookies))
            {
                response.headers_mut().insert(SET_COOKIE, cookie);
            }
            Ok(response)
        }
        SignIn::Rejected { failures } => {
            // Each failure makes the next answer slower, before the lock sets in.
            let delay = users::DELAY_PER_FAILURE_MS * u64::try_from(failures).unwrap_or(0);
            tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
            Err(AppError::InvalidCredentials)
        }
        SignIn::Locked { retry_after_s } => Err(AppError::Locked(retry_after_s)),
    }
}

async fn logout(State(app): State<Arc<WebApp>>, headers: HeaderMap) -> AppResult<Response> {
    if let Some(token) = session_token(&headers) {
        sessions::end(&app.core.db, token).await?;
    }
    let mut response = StatusCode::NO_CONTENT.into_response();
    if let Ok(cookie) = HeaderValue::from_str(&sessions::set_cookie("", app.secure_cookies)) {
        response.headers_mut().insert(SET_COOKIE, cookie);
    }
    Ok(response)
}

async fn me(State(app): State<Arc<WebApp>>, headers: HeaderMap) -> AppResult<Json<Value>> {
    Ok(Json(me_body(&session_user(&app, &headers).await?)))
}

async fn surveys(State(app): State<Arc<WebApp>>, headers: HeaderMap) -> AppResult<Json<Value>> {
    let user = session_user(&app, &headers).await?;
    let grants = grants_of(&app, &user).await?;
    let list: Vec<Value> = app
        .core
        .catalog
        .all()
        .iter()
        .filter_map(|survey| {
            let grant = grants.survey(survey.code())?;
            Some(json!({
                "code": survey.code(),
                "name": survey.name(),
                "respondents": survey.respondents(),
                "allGroups": matches!(grant, SurveyGrant::Whole),
            }))
        })
        .collect();
    Ok(Json(Value::Array(list)))
}

#[derive(Debug, Deserialize)]
struct Search {
    q: Option<String>,
}

async fn codebook(
    State(app): State<Arc<WebApp>>,
    UrlPath(code): UrlPath<String>,
    axum::extract::Query(search): axum::extract::Query<Search>,
    headers: HeaderMap,
) -> AppResult<Json<Value>> {
    let user = session_user(&app, &headers).await?;
    let grants = grants_of(&app, &user).await?;
    let (Some(grant), Some(survey)) = (grants.survey(&code).cloned(), app.core.catalog.get(&code))
    else {
        return Err(ApiError::ForbiddenSurvey.into());
    };
    let book =
        tokio::task::spawn_blocking(move || codebook_for(&survey, &grant, search.q.as_deref()))
            .await
            .map_err(|_| AppError::Contract(ApiError::Internal))?;
    Ok(Json(book))
}

/// The codebook as the account may see it: granted groups only, each base's totals
/// within each of them, and (with a search) only the entries that match.
fn codebook_for(
    survey: &crosstab_engine::Survey,
    grant: &SurveyGrant,
    search: Option<&str>,
) -> Value {
    let mut book = serde_json::to_value(survey.codebook()).unwrap_or(Value::Null);
    let visible = |value: &str| match grant {
        SurveyGrant::Whole => true,
        SurveyGrant::Groups(groups) => groups.contains(value),
    };
    let groups: Vec<String> = survey
        .group_names()
        .filter(|g| visible(g))
        .map(str::to_owned)
        .collect();
    if let Some(list) = book.get_mut("groups").and_then(Value::as_array_mut) {
        list.retain(|g| g.get("value").and_then(Value::as_str).is_some_and(visible));
    }
    if let Some(bases) = book.get_mut("bases").and_then(Value::as_array_mut) {
        for base in bases.iter_mut() {
            let code = base
                .get("code")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            let totals: serde_json::Map<String, Value> = groups
                .iter()
                .filter_map(|group| {
                    let mut set = survey.base_set(&code)?.clone();
                    set.and_with(survey.group_set(group)?);
                    let tally = set.tally(None, survey.weights());
                    Some((
                        group.clone(),
                        json!({"respondents": tally.count, "weighted": tally.weight}),
                    ))
                })
                .collect();
            base["groupTotals"] = Value::Object(totals);
        }
        if !matches!(grant, SurveyGrant::Whole) {
            // Whole-survey totals would reveal the groups not granted.
            for base in bases.iter_mut() {
                let sum = |field: &str| -> f64 {
                    base["groupTotals"]
                        .as_object()
                        .map_or(0.0, |m| m.values().filter_map(|t| t[field].as_f64()).sum())
                };
                let (respondents, weighted) = (sum("respondents"), sum("weighted"));
                base["respondents"] = json!(respondents as u64);
                base["weighted"] = json!(weighted);
            }
        }
    }
    if let Some(needle) = search
        .map(str::to_lowercase)
        .filter(|s| !s.trim().is_empty())
    {
        let matches = |entry: &Value, keys: &[&str]| {
            keys.iter().any(|k| {
                entry
                    .get(*k)
                    .and_then(Value::as_str)
                    .is_some_and(|t| t.to_lowercase().contains(&needle))
            }) || entry
                .get("values")
                .and_then(Value::as_array)
                .is_some_and(|values| {
                    values.iter().any(|v| {
                        v.get("label")
                            .and_then(Value::as_str)
                            .is_some_and(|t| t.to_lowercase().contains(&needle))
                    })
                })
        };
        for (list, keys) in [
            ("codes", &["code", "label", "expr"][..]),
            ("variables", &["name", "label"][..]),
        ] {
            if let Some(entries) = book.get_mut(list).and_then(Value::as_array_mut) {
                entries.retain(|entry| matches(entry, keys));
            }
        }
    }
    book
}

async fn crosstab(
    State(app): State<Arc<WebApp>>,
    headers: HeaderMap,
    body: Bytes,
) -> AppResult<Response> {
    let user = session_user(&app, &headers).await?;
    // The contract's own validation first: a bad request never costs an upstream call.
    let valid = validate_body(&body)?;
    let grants = grants_of(&app, &user).await?;
    if !grants.permits(&valid.request.survey_code, valid.request.group_filter()) {
        return Err(ApiError::ForbiddenSurvey.into());
    }
    let upstream = app.upstream.as_ref().ok_or(AppError::NotConfigured)?;
    let (status, body) = upstream.crosstab(body).await.map_err(|error| {
        tracing::warn!(%error, "upstream unreachable");
        AppError::Unreachable
    })?;
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut response = (status, Body::from(body)).into_response();
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(response)
}

fn rfc3339(ms: Option<i64>) -> Value {
    ms.and_then(chrono::DateTime::from_timestamp_millis)
        .map_or(Value::Null, |t| {
            Value::String(t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        })
}

async fn list_keys(State(app): State<Arc<WebApp>>, headers: HeaderMap) -> AppResult<Json<Value>> {
    let user = session_user(&app, &headers).await?;
    let keys = app.user_keys(&user).await?;
    Ok(Json(Value::Array(
        keys.into_iter()
            .map(|k| {
                json!({
                    "id": k.id, "env": k.env, "createdAt": rfc3339(Some(k.created_at)),
                    "expiresAt": rfc3339(k.expires_at), "revokedAt": rfc3339(k.revoked_at),
                })
            })
            .collect(),
    )))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct KeyRequest {
    env: String,
    expires_in_days: Option<u32>,
}

async fn create_key(
    State(app): State<Arc<WebApp>>,
    headers: HeaderMap,
    body: Bytes,
) -> AppResult<Json<Value>> {
    let user = session_user(&app, &headers).await?;
    let request: KeyRequest = serde_json::from_slice(&body).map_err(|_| {
        AppError::BadRequest("Send {\"env\": \"live\"|\"test\", \"expiresInDays\": n|null}.".into())
    })?;
    let env = KeyEnv::from_name(&request.env)
        .ok_or_else(|| AppError::BadRequest("env is 'live' or 'test'.".into()))?;
    let now = crate::db::now_ms();
    let expires_at = request
        .expires_in_days
        .filter(|d| *d > 0)
        .map(|d| now + i64::from(d) * 86_400_000);
    let own = app.upstream.as_ref().and_then(upstream::Upstream::key_id);
    let limit = i64::try_from(MAX_USABLE_KEYS).unwrap_or(i64::MAX);
    let key = accounts::create_key_within(&app.core.db, &user.account, env, expires_at, limit, own)
        .await?
        .ok_or(AppError::TooManyKeys)?;
    Ok(Json(json!({"id": key.id, "key": key.token})))
}

async fn revoke_key(
    State(app): State<Arc<WebApp>>,
    UrlPath(id): UrlPath<String>,
    headers: HeaderMap,
) -> AppResult<StatusCode> {
    let user = session_user(&app, &headers).await?;
    let owned = app.user_keys(&user).await?.iter().any(|k| k.id == id);
    if !owned {
        return Err(AppError::NotFound);
    }
    accounts::revoke_key(&app.core.db, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn usage(State(app): State<Arc<WebApp>>, headers: HeaderMap) -> AppResult<Json<Value>> {
    let user = session_user(&app, &headers).await?;
    let day = match app.core.db.backend() {
        Backend::Sqlite => "strftime('%Y-%m-%d', at / 1000, 'unixepoch')",
        Backend::Postgres => "to_char(to_timestamp(at / 1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD')",
    };
    let rows = sqlx::query(&format!(
        "SELECT {day} AS day, survey, COUNT(*) FROM ledger WHERE account_id = $1 GROUP BY day, survey ORDER BY day DESC, survey"
    ))
    .bind(user.account_id)
    .fetch_all(app.core.db.pool())
    .await
    .map_err(DbError::from)?;
    let list = rows
        .iter()
        .map(|row| {
            Ok(json!({"day": row.try_get::<String, _>(0)?, "survey": row.try_get::<String, _>(1)?, "calls": row.try_get::<i64, _>(2)?}))
        })
        .collect::<Result<Vec<Value>, sqlx::Error>>()
        .map_err(DbError::from)?;
    Ok(Json(Value::Array(list)))
}
