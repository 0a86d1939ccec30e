//! The `/v1` routes: `GET /docs`, `OPTIONS /crosstab` and `POST /crosstab`.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::header::{CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, ORIGIN};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Router};
use crosstab_contract::limits::MAX_BODY_BYTES;
use crosstab_contract::{validate_body, ApiError, CrosstabResponse, ValidRequest, AUTH_HEADER};
use crosstab_engine::Survey;

use crate::app::AppState;
use crate::auth::{AuthError, Principal};
use crate::cache::Entry;
use crate::db::now_ms;
use crate::ledger::Bill;
use crate::observe::{AccountName, RequestId};

/// Surveys larger than this are queried on the blocking pool, off the async workers.
const INLINE_QUERY_MAX_RESPONDENTS: usize = 1_000_000;

/// The `/v1` routes (nested under `/v1` by [`crate::app::router`]). Any other `/v1` path
/// is a 404 of its own, never the app's page that answers unknown paths beside it.
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/docs", get(docs))
        .route(
            "/crosstab",
            axum::routing::post(crosstab).options(preflight),
        )
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
}

/// A `/v1` path with another method than it serves: 405 in the contract's envelope (axum
/// adds the `Allow` header).
async fn method_not_allowed() -> Response {
    error_response(&ApiError::MethodNotAllowed)
}

/// An unknown path under an API prefix (`/v1`, `/app`).
pub async fn not_found() -> StatusCode {
    StatusCode::NOT_FOUND
}

/// A JSON response with pre-serialized `body`.
fn json(status: StatusCode, body: impl Into<Body>) -> Response {
    let mut response = (status, body.into()).into_response();
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// The response for a rejected request: the contract's envelope, never built here.
pub fn error_response(error: &ApiError) -> Response {
    let status = StatusCode::from_u16(error.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json(
        status,
        serde_json::to_vec(&error.envelope()).unwrap_or_default(),
    )
}

async fn docs(State(state): State<Arc<AppState>>) -> Response {
    json(StatusCode::OK, state.docs.clone())
}

async fn preflight(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let mut response = StatusCode::OK.into_response();
    state
        .cors
        .preflight(headers.get(ORIGIN), response.headers_mut());
    response
}

async fn crosstab(
    State(state): State<Arc<AppState>>,
    Extension(request_id): Extension<RequestId>,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    // 1. Who is calling (a cookie is never looked at).
    let principal = match state
        .auth
        .authenticate(parts.headers.get(AUTH_HEADER))
        .await
    {
        Ok(principal) => principal,
        Err(AuthError::Unauthorized) => {
            return unread(
                body,
                &parts.headers,
                error_response(&ApiError::Unauthorized),
            )
            .await
        }
        Err(AuthError::Store(error)) => {
            tracing::error!(%error, "key lookup failed");
            return unread(body, &parts.headers, error_response(&ApiError::Internal)).await;
        }
    };
    // 2. A JSON body of at most 64 KiB (then the contract's validation, in `answer`).
    let mut response = if !is_json(&parts.headers) {
        let response = error_response(&ApiError::UnsupportedMediaType);
        unread(body, &parts.headers, response).await
    } else {
        match read_body(body, &parts.headers).await {
            Ok(bytes) => match answer(&state, &principal, bytes, &request_id).await {
                Ok(body) => json(StatusCode::OK, body),
                Err(error) => error_response(&error),
            },
            Err(error) => closing(error_response(&error.into())),
        }
    };
    response
        .extensions_mut()
        .insert(AccountName(Arc::clone(&principal.account)));
    response
}

/// Why a request body was not read whole.
#[derive(Debug)]
enum BodyError {
    /// Declared or found to be over 64 KiB.
    TooLarge,
    /// The stream broke off or was malformed before its end.
    Unreadable,
}

impl From<BodyError> for ApiError {
    fn from(error: BodyError) -> ApiError {
        match error {
            BodyError::TooLarge => ApiError::PayloadTooLarge,
            BodyError::Unreadable => ApiError::InvalidRequest {
                field: None,
                message: "The request body could not be read to its end.".to_owned(),
                hint: Some("Send the whole JSON body, with a correct Content-Length.".to_owned()),
            },
        }
    }
}

/// The body, unless it is over 64 KiB (declared or as read) or breaks off.
async fn read_body(body: Body, headers: &HeaderMap) -> Result<Bytes, BodyError> {
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > MAX_BODY_BYTES as u64) {
        return Err(BodyError::TooLarge);
    }
    axum::body::to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|error| {
            let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&error);
            while let Some(error) = cause {
                if error.is::<http_body_util::LengthLimitError>() {
                    return BodyError::TooLarge;
                }
                cause = error.source();
            }
            BodyError::Unreadable
        })
}

/// `response` to a request whose body was not needed: the body is read and dropped (up to
/// 64 KiB) so the connection can carry the client's next request; a larger or broken one
/// is left unread and the connection closed, saying so, so the client does not reuse it.
async fn unread(body: Body, headers: &HeaderMap, response: Response) -> Response {
    match read_body(body, headers).await {
        Ok(_) => response,
        Err(_) => closing(response),
    }
}

/// `response` with `Connection: close` (the request body was left unread).
fn closing(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Steps 2 (validation) to 5 of `POST /crosstab` and the bill: the serialized 200 body,
/// or why not.
async fn answer(
    state: &AppState,
    principal: &Principal,
    bytes: Bytes,
    request_id: &RequestId,
) -> Result<Bytes, ApiError> {
    if let Some(body) = cached_answer(state, principal, &bytes, request_id).await? {
        return Ok(body);
    }
    let valid = validate_body(&bytes)?;
    // 3. Entitlement: unknown and not granted look the same.
    let request = &valid.request;
    let group = request.group_filter();
    let survey = state
        .catalog
        .get(&request.survey_code)
        .filter(|_| principal.grants.permits(&request.survey_code, group))
        .filter(|survey| group.is_none_or(|g| survey.has_group(g)))
        .ok_or(ApiError::ForbiddenSurvey)?;
    // 4. The population base.
    if !survey.has_base(&request.population_base_code) {
        return Err(ApiError::InvalidPopulationBase {
            base: request.population_base_code.clone(),
        });
    }
    // 5. Compute, serialize, bill, and only then answer.
    let bill = Bill {
        at: now_ms(),
        account_id: principal.account_id,
        key_id: Arc::clone(&principal.key_id),
        survey: Arc::from(request.survey_code.as_str()),
        group: group.map(Arc::from),
        base: Arc::from(request.population_base_code.as_str()),
        targets: i64::try_from(request.target_codes.len()).unwrap_or(i64::MAX),
        request_id: Arc::clone(&request_id.0),
    };
    let cacheable = state.cache.enabled().then(|| Arc::clone(&survey));
    let response = compute(survey, valid).await?;
    let body = Bytes::from(serde_json::to_vec(&response).map_err(|error| {
        tracing::error!(%error, "response serialization failed");
        ApiError::Internal
    })?);
    if let Some(survey) = cacheable {
        let entry = Entry::new(
            &survey,
            bill.group.clone(),
            bill.base.clone(),
            bill.targets,
            body.clone(),
        );
        state.cache.insert(bytes, entry);
    }
    record(state, bill).await?;
    Ok(body)
}

/// The answer to a body seen before, when it was computed on the survey version the
/// catalog serves now and the caller may see it: steps 3 to 5 for a cached answer
/// (step 2 passed when the entry was made: validation depends on the bytes alone, and
/// the group and base were checked on this very survey instance).
async fn cached_answer(
    state: &AppState,
    principal: &Principal,
    bytes: &Bytes,
    request_id: &RequestId,
) -> Result<Option<Bytes>, ApiError> {
    let Some(hit) = state.cache.get(bytes) else {
        return Ok(None);
    };
    let current = state
        .catalog
        .get(&hit.survey_code)
        .is_some_and(|survey| hit.is_for(&survey));
    if !current {
        return Ok(None);
    }
    if !principal
        .grants
        .permits(&hit.survey_code, hit.group.as_deref())
    {
        return Err(ApiError::ForbiddenSurvey);
    }
    let bill = Bill {
        at: now_ms(),
        account_id: principal.account_id,
        key_id: Arc::clone(&principal.key_id),
        survey: Arc::clone(&hit.survey_code),
        group: hit.group.clone(),
        base: Arc::clone(&hit.base),
        targets: hit.targets,
        request_id: Arc::clone(&request_id.0),
    };
    record(state, bill).await?;
    Ok(Some(hit.body.clone()))
}

/// Bills the call; only then may its 200 go out.
async fn record(state: &AppState, bill: Bill) -> Result<(), ApiError> {
    state.ledger.bill(bill).await.map_err(|error| {
        tracing::error!(%error, "bill not recorded; answering 500");
        ApiError::Internal
    })
}

async fn compute(survey: Arc<Survey>, valid: ValidRequest) -> Result<CrosstabResponse, ApiError> {
    if survey.respondents() <= INLINE_QUERY_MAX_RESPONDENTS {
        return survey.crosstab(&valid).map_err(ApiError::from);
    }
    tokio::task::spawn_blocking(move || survey.crosstab(&valid).map_err(ApiError::from))
        .await
        .unwrap_or_else(|error| {
            tracing::error!(%error, "query task failed");
            Err(ApiError::Internal)
        })
}

/// Whether the body is declared as JSON (`application/json`, any parameters).
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"))
}
