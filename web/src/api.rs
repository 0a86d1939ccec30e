//! The app's backend (`/app/...`): the only server the app talks to. The API key stays
//! there; the browser holds a session cookie.

use crosstab_contract::app::{
    paths, AppErrorCode, Codebook, Credentials, KeyInfo, Me, NewKey, NewKeyRequest, SurveySummary,
    UsageRow,
};
use crosstab_contract::{CrosstabRequest, ErrorEnvelope};
use gloo_net::http::{Request, RequestBuilder, Response};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

/// Where the backend is: this page's origin, unless whoever serves the built app from
/// another origin names its backend in the page itself:
/// `<meta name="crosstab-backend" content="https://backend.example">` (that backend must
/// list this page's origin as allowed). Never from the URL: a link could otherwise send
/// the sign-in form's password to any site.
pub fn backend_origin() -> String {
    web_sys::window()
        .and_then(|w| w.document())
        .and_then(|d| {
            d.query_selector(r#"meta[name="crosstab-backend"]"#)
                .ok()
                .flatten()
        })
        .and_then(|meta| meta.get_attribute("content"))
        .map(|origin| origin.trim().trim_end_matches('/').to_owned())
        .unwrap_or_default()
}

fn url(path: &str) -> String {
    format!("{}{path}", backend_origin())
}

/// A failed backend call, ready to show.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiFailure {
    /// HTTP status (0 when the network failed).
    pub status: u16,
    /// Human-readable text.
    pub message: String,
}

impl ApiFailure {
    fn network(error: impl std::fmt::Display) -> Self {
        ApiFailure {
            status: 0,
            message: format!("The server could not be reached ({error})."),
        }
    }
}

thread_local! {
    /// What to do when the backend says the session has ended (set by the app).
    static ON_SESSION_ENDED: std::cell::RefCell<Option<Box<dyn Fn()>>> =
        const { std::cell::RefCell::new(None) };
}

/// Calls `action` whenever a backend answer says the session has ended (expired, or
/// signed out elsewhere), so the app can show the sign-in form instead of an error.
pub fn on_session_ended(action: impl Fn() + 'static) {
    ON_SESSION_ENDED.with(|slot| *slot.borrow_mut() = Some(Box::new(action)));
}

/// Whether this failure is the backend's own 401 for a missing or ended session (not an
/// upstream 401 about the app's key, which is passed through with its own code); runs the
/// app's action when it is.
fn session_ended(envelope: Option<&ErrorEnvelope>) -> bool {
    let ended = envelope.is_some_and(AppErrorCode::is_session_ended);
    if ended {
        ON_SESSION_ENDED.with(|slot| {
            if let Some(action) = slot.borrow().as_ref() {
                action();
            }
        });
    }
    ended
}

fn with_credentials(builder: RequestBuilder) -> RequestBuilder {
    builder.credentials(web_sys::RequestCredentials::Include)
}

async fn read<T: DeserializeOwned>(response: Response) -> Result<T, ApiFailure> {
    let status = response.status();
    if (200..300).contains(&status) {
        return response.json::<T>().await.map_err(|e| ApiFailure {
            status,
            message: format!("The server's answer was not understood ({e})."),
        });
    }
    // A failure without the envelope's shape (a proxy's page, say) still has a status.
    let envelope = response.json::<ErrorEnvelope>().await.ok();
    session_ended(envelope.as_ref());
    let message = envelope.map_or_else(
        || format!("The server answered {status}."),
        |envelope| envelope.result_description,
    );
    Err(ApiFailure { status, message })
}

async fn get<T: DeserializeOwned>(path: &str) -> Result<T, ApiFailure> {
    fetch(with_credentials(Request::get(&url(path)))).await
}

/// Sends a body-less request and reads its answer.
async fn fetch<T: DeserializeOwned>(builder: RequestBuilder) -> Result<T, ApiFailure> {
    let response = builder.send().await.map_err(ApiFailure::network)?;
    read(response).await
}

async fn send_json<T: DeserializeOwned>(
    builder: RequestBuilder,
    body: &impl Serialize,
) -> Result<T, ApiFailure> {
    let response = with_credentials(builder)
        .json(body)
        .map_err(ApiFailure::network)?
        .send()
        .await
        .map_err(ApiFailure::network)?;
    read(response).await
}

/// Signs in.
pub async fn login(username: &str, password: &str) -> Result<Me, ApiFailure> {
    let credentials = Credentials {
        username: username.to_owned(),
        password: password.to_owned(),
    };
    send_json(Request::post(&url(paths::LOGIN)), &credentials).await
}

/// Signs out.
pub async fn logout() {
    let _ = with_credentials(Request::post(&url(paths::LOGOUT)))
        .send()
        .await;
}

/// The signed-in user, if any.
pub async fn me() -> Result<Me, ApiFailure> {
    get(paths::ME).await
}

/// Surveys the account may query.
pub async fn surveys() -> Result<Vec<SurveySummary>, ApiFailure> {
    get(paths::SURVEYS).await
}

/// A survey's codebook.
pub async fn codebook(code: &str) -> Result<Codebook, ApiFailure> {
    get(&paths::codebook(code)).await
}

/// Runs a crosstab through the backend, which adds the key. The upstream's status and
/// body come back unchanged.
pub async fn crosstab(request: &CrosstabRequest) -> Result<(u16, Value), ApiFailure> {
    let response = with_credentials(Request::post(&url(paths::CROSSTAB)))
        .json(request)
        .map_err(ApiFailure::network)?
        .send()
        .await
        .map_err(ApiFailure::network)?;
    let status = response.status();
    let body = response.json::<Value>().await.unwrap_or(Value::Null);
    let envelope = (!(200..300).contains(&status))
        .then(|| serde_json::from_value::<ErrorEnvelope>(body.clone()).ok())
        .flatten();
    if session_ended(envelope.as_ref()) {
        return Err(ApiFailure {
            status,
            message: "Your session has ended: sign in again.".to_owned(),
        });
    }
    Ok((status, body))
}

/// The OpenAPI document of `/v1`: public, so fetched without credentials (`/v1` never
/// allows them, and a credentialed cross-origin fetch of it would be blocked).
pub async fn openapi() -> Result<Value, ApiFailure> {
    fetch(Request::get(&url("/v1/docs"))).await
}

/// The user's API keys.
pub async fn keys() -> Result<Vec<KeyInfo>, ApiFailure> {
    get(paths::KEYS).await
}

/// Creates an API key (shown once).
pub async fn create_key(env: &str, expires_in_days: Option<u32>) -> Result<NewKey, ApiFailure> {
    let request = NewKeyRequest {
        env: env.to_owned(),
        expires_in_days,
    };
    send_json(Request::post(&url(paths::KEYS)), &request).await
}

/// Revokes an API key.
pub async fn revoke_key(id: &str) -> Result<(), ApiFailure> {
    let response = with_credentials(Request::delete(&url(&paths::key(id))))
        .send()
        .await
        .map_err(ApiFailure::network)?;
    if response.ok() {
        Ok(())
    } else {
        read::<Value>(response).await.map(|_| ())
    }
}

/// Billed calls by day and survey.
pub async fn usage() -> Result<Vec<UsageRow>, ApiFailure> {
    get(paths::USAGE).await
}
