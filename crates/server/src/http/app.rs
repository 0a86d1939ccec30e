//! The researcher app's backend under `/app`, and the app itself at `/`.
//!
//! The browser signs in with a username and password and holds only a session cookie
//! (HttpOnly, SameSite=Strict); its queries run in this process as its own account
//! ([`crate::service::app`]). Every non-GET request must carry an `Origin` that is this
//! server or an allowed origin (CSRF), and only origins allowed by name get credentialed
//! CORS answers. Bodies are the `/app` contract's types ([`crosstab_contract::app`]).

use std::path::Path;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path as UrlPath, Query, Request, State};
use axum::http::header::{
    ACCESS_CONTROL_ALLOW_CREDENTIALS, ACCESS_CONTROL_ALLOW_ORIGIN, CACHE_CONTROL, CONTENT_TYPE,
    HOST, ORIGIN, RETRY_AFTER, SET_COOKIE, VARY,
};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Extension, Json, Router};
use crosstab_contract::app::{
    AppErrorCode, CodebookQuery, Credentials, KeyInfo, Me, NewKey, NewKeyRequest, UsageQuery,
    UsageReport, UsageRow,
};
use crosstab_contract::limits::{MAX_BODY_BYTES, MAX_TABLE_BODY_BYTES};
use crosstab_contract::ApiError;
use crosstab_contract::{ErrorDetail, ErrorEnvelope};
use serde::de::DeserializeOwned;
use tower_http::services::{ServeDir, ServeFile};
use tower_http::set_header::SetResponseHeader;

use super::error::fault;
use super::extract::{session_token, set_cookie, ClientAddress, SessionUser};
use super::HttpState;
use crate::service::app::{AppAnswer, AppError, SESSION_LIFETIME_MS};
use crate::service::users::User;
use crate::service::{RequestId, ServiceError};
use crate::store::accounts;

/// A failed `/app` request: the app service's errors, and the CSRF guard's.
#[derive(Debug)]
pub enum AppFailure {
    /// The app service refused or failed.
    App(AppError),
    /// A non-GET request from an origin that is neither this server nor allowed.
    ForeignOrigin,
    /// The request body was not read whole (over the route's limit, late, broken off).
    Body(super::body::BodyError),
}

impl From<AppError> for AppFailure {
    fn from(error: AppError) -> Self {
        AppFailure::App(error)
    }
}

impl From<ServiceError> for AppFailure {
    fn from(error: ServiceError) -> Self {
        AppFailure::App(AppError::Service(error))
    }
}

impl IntoResponse for AppFailure {
    /// The one place `/app` failures become bodies; contract errors keep the contract's.
    fn into_response(self) -> Response {
        let error = match self {
            AppFailure::ForeignOrigin => {
                return envelope(
                    AppErrorCode::ForbiddenOrigin,
                    "Requests from this origin are not accepted.".to_owned(),
                )
            }
            AppFailure::App(AppError::Service(error)) => return error.into_response(),
            // Left unread: the connection is closed, so the client does not reuse it.
            AppFailure::Body(error) => {
                return super::body::closing(match error {
                    // The route's own limit, which may not be the contract's 64 KiB.
                    super::body::BodyError::TooLarge(limit) => envelope(
                        AppErrorCode::PayloadTooLarge,
                        format!(
                            "The request body is larger than {limit} bytes: send at most {limit}."
                        ),
                    ),
                    error => ServiceError::from(ApiError::from(error)).into_response(),
                });
            }
            AppFailure::App(error) => error,
        };
        let code = match &error {
            // (`Service` was answered above, in the contract's own envelope.)
            AppError::Service(_) | AppError::Unreachable(_) => AppErrorCode::UpstreamUnreachable,
            AppError::NotSignedIn => AppErrorCode::NotSignedIn,
            AppError::InvalidCredentials => AppErrorCode::InvalidCredentials,
            AppError::Locked(_) | AppError::UnknownSessions(_) => AppErrorCode::TooManyAttempts,
            AppError::NotFound => AppErrorCode::NotFound,
            AppError::BadRequest(_) => AppErrorCode::InvalidRequest,
            AppError::NotConfigured => AppErrorCode::NotConfigured,
            AppError::TooManyKeys | AppError::KeysPerDay => AppErrorCode::TooManyKeys,
            AppError::TablesUpstream => AppErrorCode::NotConfigured,
            AppError::TableOverQuota { .. } => AppErrorCode::InvalidRequest,
        };
        let mut response = envelope(code, error.to_string());
        match error {
            AppError::Locked(seconds) | AppError::UnknownSessions(seconds) => {
                response
                    .headers_mut()
                    .insert(RETRY_AFTER, HeaderValue::from(seconds));
            }
            AppError::Unreachable(cause) => {
                response
                    .extensions_mut()
                    .insert(super::Fault(format!("upstream unreachable: {cause}")));
            }
            _ => {}
        }
        response
    }
}

/// The contract's envelope for an app backend's own failure.
fn envelope(code: AppErrorCode, message: String) -> Response {
    let Ok(status) = StatusCode::from_u16(code.status()) else {
        return fault(format!("{code} names no HTTP status"));
    };
    let body = ErrorEnvelope {
        result_code: i64::from(code.status()),
        result_description: message.clone(),
        error: Some(ErrorDetail {
            code: code.as_str().to_owned(),
            message,
            field: None,
            hint: None,
        }),
    };
    (status, Json(body)).into_response()
}

type AppResult<T> = Result<T, AppFailure>;

/// `/app` routes, and, given `app_dir`, the app's static files at `/` (with
/// `index.html` for any other path, so the single-page app handles it).
pub fn routes(state: Arc<HttpState>, app_dir: Option<&Path>) -> Router<Arc<HttpState>> {
    let api = Router::new()
        .route("/login", post(login))
        .route("/logout", post(logout))
        .route("/api/me", get(me))
        .route("/api/surveys", get(surveys))
        .route("/api/surveys/{code}/codebook", get(codebook))
        .route("/api/crosstab", post(crosstab))
        .route("/api/table", post(table))
        .route("/api/keys", get(list_keys).post(create_key))
        .route("/api/keys/{id}", delete(revoke_key))
        .route("/api/usage", get(usage))
        .fallback(super::not_found)
        .layer(axum::middleware::from_fn_with_state(state, guard));
    let router = Router::new()
        .nest("/app", api)
        .route("/app/", axum::routing::any(super::not_found));
    match app_dir {
        Some(dir) => {
            let files = ServeDir::new(dir).fallback(ServeFile::new(dir.join("index.html")));
            // Trunk names the worker's files without a hash: every file is checked again
            // before use (a 304 when unchanged), so a deploy never pairs a new page with
            // an old worker.
            router.fallback_service(SetResponseHeader::overriding(
                files,
                CACHE_CONTROL,
                HeaderValue::from_static("no-cache"),
            ))
        }
        None => router,
    }
}

/// CORS (credentialed: origins listed by name only, never `*`), preflights, and the CSRF
/// origin check.
async fn guard(State(state): State<Arc<HttpState>>, request: Request, next: Next) -> Response {
    let origin = request.headers().get(ORIGIN).cloned();
    let allowed = state.cors.allow_listed(origin.as_ref()).cloned();
    let method = request.method().clone();
    let mut response = if method == Method::OPTIONS {
        let mut response = StatusCode::NO_CONTENT.into_response();
        if allowed.is_some() {
            super::cors::preflight_headers(
                response.headers_mut(),
                "GET, POST, DELETE, OPTIONS",
                "Content-Type, Idempotency-Key",
            );
        }
        response
    } else if method != Method::GET
        && method != Method::HEAD
        && !same_origin(origin.as_ref(), request.headers())
        && allowed.is_none()
    {
        AppFailure::ForeignOrigin.into_response()
    } else {
        next.run(request).await
    };
    let headers = response.headers_mut();
    if let Some(origin) = allowed {
        headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        headers.insert(
            axum::http::header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static(super::cors::EXPOSED),
        );
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

/// The request body within `limit` bytes; past it (or timed out, or broken off) the
/// contract's 413, 408 or 400, with the connection closed as the body was left unread.
async fn read_body(body: Body, headers: &HeaderMap, limit: usize) -> AppResult<Bytes> {
    super::body::read_within(body, headers, limit)
        .await
        .map_err(AppFailure::Body)
}

/// A JSON body of type `T`, or a 400 saying what to send.
fn parse<T: DeserializeOwned>(body: &Bytes, expected: &str) -> AppResult<T> {
    serde_json::from_slice(body)
        .map_err(|_| AppError::BadRequest(format!("Send {expected} as JSON.")).into())
}

fn me_of(user: &User) -> Me {
    Me {
        username: user.username.clone(),
        account: user.account.clone(),
    }
}

/// `Set-Cookie` for the session `token` (empty: clear it).
fn with_cookie(mut response: Response, state: &HttpState, token: &str) -> AppResult<Response> {
    let mut cookies = vec![set_cookie(token, SESSION_LIFETIME_MS / 1000, state.https)];
    if state.https {
        // The cookie of builds before the `__Host-` name, expired so no browser keeps it.
        cookies.push(super::extract::expire_plain_cookie());
    }
    for cookie in cookies {
        let value = HeaderValue::from_str(&cookie).map_err(|error| {
            ServiceError::Internal(format!("session cookie not a header value: {error}"))
        })?;
        response.headers_mut().append(SET_COOKIE, value);
    }
    Ok(response)
}

async fn login(
    State(state): State<Arc<HttpState>>,
    ClientAddress(address): ClientAddress,
    headers: HeaderMap,
    body: Body,
) -> AppResult<Response> {
    // An address that tries too many sign-ins, whatever the names, waits: before its
    // body is even read (dropped unread, up to 64 KiB, so the connection stays usable).
    if let Some(seconds) = state.services.limits.sign_in_attempt(address) {
        let locked = AppFailure::from(AppError::Locked(i64::try_from(seconds).unwrap_or(i64::MAX)));
        return Ok(super::body::unread(body, &headers, locked.into_response()).await);
    }
    let body = read_body(body, &headers, MAX_BODY_BYTES).await?;
    let credentials: Credentials = parse(&body, r#"{"username": ..., "password": ...}"#)?;
    let session = state
        .app
        .sign_in(&credentials.username, &credentials.password)
        .await?;
    let response = Json(me_of(&session.user)).into_response();
    with_cookie(response, &state, &session.token)
}

async fn logout(
    State(state): State<Arc<HttpState>>,
    ClientAddress(address): ClientAddress,
    headers: HeaderMap,
) -> AppResult<Response> {
    if let Some(token) = session_token(&headers, state.https) {
        state.app.sign_out(token, address).await?;
    }
    with_cookie(StatusCode::NO_CONTENT.into_response(), &state, "")
}

async fn me(SessionUser(user): SessionUser) -> Json<Me> {
    Json(me_of(&user))
}

async fn surveys(
    State(state): State<Arc<HttpState>>,
    SessionUser(user): SessionUser,
) -> AppResult<Response> {
    Ok(Json(state.app.surveys(&user).await?).into_response())
}

async fn codebook(
    State(state): State<Arc<HttpState>>,
    SessionUser(user): SessionUser,
    UrlPath(code): UrlPath<String>,
    Query(search): Query<CodebookQuery>,
) -> AppResult<Response> {
    Ok(Json(state.app.codebook(&user, &code, search.search()).await?).into_response())
}

async fn crosstab(
    State(state): State<Arc<HttpState>>,
    Extension(request_id): Extension<RequestId>,
    SessionUser(user): SessionUser,
    headers: HeaderMap,
    body: Body,
) -> AppResult<Response> {
    let body = read_body(body, &headers, MAX_BODY_BYTES).await?;
    let key = super::v1::idempotency_key(&headers).map_err(ServiceError::from)?;
    let (status, body) = match state.app.crosstab(&user, body, &request_id, key).await? {
        AppAnswer::Answered(answer) => return Ok(super::v1::answer_response(answer)),
        AppAnswer::Forwarded { status, body } => {
            let status = StatusCode::from_u16(status).map_err(|_| {
                AppError::Unreachable(format!("the upstream answered status {status}"))
            })?;
            (status, body)
        }
    };
    let mut response = (status, Body::from(body)).into_response();
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(response)
}

async fn table(
    State(state): State<Arc<HttpState>>,
    Extension(request_id): Extension<RequestId>,
    SessionUser(user): SessionUser,
    headers: HeaderMap,
    body: Body,
) -> AppResult<Response> {
    let body = read_body(body, &headers, MAX_TABLE_BODY_BYTES).await?;
    let key = super::v1::idempotency_key(&headers).map_err(ServiceError::from)?;
    let table = state.app.table(&user, &body, &request_id, key).await?;
    Ok(super::v1::answer_response(table))
}

/// A stored time as the app shows it (to the second, UTC).
fn rfc3339(ms: i64) -> Result<String, ServiceError> {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .ok_or_else(|| ServiceError::Internal(format!("stored time {ms} is out of range")))
}

fn key_info(key: accounts::KeyInfo) -> Result<KeyInfo, ServiceError> {
    Ok(KeyInfo {
        id: key.id,
        env: key.env,
        created_at: rfc3339(key.created_at)?,
        expires_at: key.expires_at.map(rfc3339).transpose()?,
        revoked_at: key.revoked_at.map(rfc3339).transpose()?,
    })
}

async fn list_keys(
    State(state): State<Arc<HttpState>>,
    SessionUser(user): SessionUser,
) -> AppResult<Json<Vec<KeyInfo>>> {
    let keys = state.app.keys(&user).await?;
    Ok(Json(
        keys.into_iter().map(key_info).collect::<Result<_, _>>()?,
    ))
}

async fn create_key(
    State(state): State<Arc<HttpState>>,
    SessionUser(user): SessionUser,
    headers: HeaderMap,
    body: Body,
) -> AppResult<Json<NewKey>> {
    let body = read_body(body, &headers, MAX_BODY_BYTES).await?;
    let request: NewKeyRequest =
        parse(&body, r#"{"env": "live"|"test", "expiresInDays": n|null}"#)?;
    let key = state
        .app
        .create_key(&user, &request.env, request.expires_in_days)
        .await?;
    Ok(Json(NewKey {
        id: key.id,
        key: key.token,
    }))
}

async fn revoke_key(
    State(state): State<Arc<HttpState>>,
    SessionUser(user): SessionUser,
    UrlPath(id): UrlPath<String>,
) -> AppResult<StatusCode> {
    state.app.revoke_key(&user, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn usage(
    State(state): State<Arc<HttpState>>,
    SessionUser(user): SessionUser,
    query: Result<Query<UsageQuery>, QueryRejection>,
) -> AppResult<Json<UsageReport>> {
    let Query(query) = query.map_err(|rejection| AppError::BadRequest(rejection.body_text()))?;
    let usage = state.app.usage(&user, &query).await?;
    let (period, quota) = (usage.period, usage.quota);
    let rows = usage
        .rows
        .into_iter()
        .map(|row| {
            Ok(UsageRow {
                calls: u64::try_from(row.calls).map_err(|_| {
                    ServiceError::Internal(format!("negative call count {}", row.calls))
                })?,
                day: row.day,
                survey: row.survey,
                user: row.user,
                idp: row.idp,
            })
        })
        .collect::<Result<_, ServiceError>>()?;
    Ok(Json(UsageReport {
        from: period.from.to_string(),
        to: period.to.to_string(),
        rows,
        quota,
    }))
}
