//! The app's backend (`/app/...`): the only server the app talks to. The API key stays
//! there; the browser holds a session cookie.

use gloo_net::http::{Request, RequestBuilder, Response};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
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

/// The `TargetCodes` of a request, as strings (non-strings skipped).
pub fn target_codes(request: &Value) -> Vec<String> {
    request
        .get("TargetCodes")
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|t| t.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
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

/// Whether this answer is the backend's own 401 for a missing or ended session (not an
/// upstream 401 about the app's key, which is passed through with its own code).
fn session_ended(status: u16, body: &Value) -> bool {
    let ended = status == 401
        && body.pointer("/error/code").and_then(Value::as_str) == Some("not_signed_in");
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
    let body: Value = response.json().await.unwrap_or(Value::Null);
    session_ended(status, &body);
    let message = body
        .get("ResultDescription")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| format!("The server answered {status}."));
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

/// The signed-in user.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Me {
    /// Username.
    pub username: String,
    /// Account the user belongs to.
    pub account: String,
}

/// One survey the account may query.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SurveySummary {
    /// `SurveyCode`.
    pub code: String,
    /// Display name.
    pub name: String,
    /// Respondents.
    pub respondents: u64,
    /// Whether every group is granted (so `_ALL_` may be used).
    pub all_groups: bool,
}

/// A survey's codebook, as the backend serves it (only granted groups).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Codebook {
    /// `SurveyCode`.
    pub code: String,
    /// Display name.
    pub name: String,
    /// Respondents.
    pub respondents: u64,
    /// Unit multiplier for `WgtAud`.
    pub audience_report_units: u32,
    /// Stability threshold.
    pub unstable_max_resps: u64,
    /// Granted groups.
    pub groups: Vec<Group>,
    /// Population bases with totals.
    pub bases: Vec<Base>,
    /// Named codes.
    pub codes: Vec<NamedCode>,
    /// Variables.
    pub variables: Vec<Variable>,
}

/// An authorization group.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Group {
    /// Value used in requests.
    pub value: String,
    /// Label.
    #[serde(default)]
    pub label: Option<String>,
}

/// Weighted and unweighted totals.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
pub struct Totals {
    /// Respondents.
    pub respondents: u64,
    /// Absolute weighted total.
    pub weighted: f64,
}

/// A population base.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Base {
    /// `PopulationBaseCode`.
    pub code: String,
    /// Label.
    #[serde(default)]
    pub label: Option<String>,
    /// Respondents in the base.
    pub respondents: u64,
    /// Absolute weighted total.
    pub weighted: f64,
    /// Totals within each granted group.
    #[serde(default)]
    pub group_totals: std::collections::BTreeMap<String, Totals>,
}

/// A named code.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct NamedCode {
    /// The code.
    pub code: String,
    /// Label.
    #[serde(default)]
    pub label: Option<String>,
    /// Its expression.
    pub expr: String,
}

/// A variable.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Variable {
    /// Name.
    pub name: String,
    /// Label.
    #[serde(default)]
    pub label: Option<String>,
    /// Values with labels.
    #[serde(default)]
    pub values: Vec<VariableValue>,
}

/// One value of a variable.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct VariableValue {
    /// The value.
    pub value: f64,
    /// Label.
    #[serde(default)]
    pub label: Option<String>,
}

/// An API key's metadata (never the key).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyInfo {
    /// Key id.
    pub id: String,
    /// `live` or `test`.
    pub env: String,
    /// Creation time.
    pub created_at: String,
    /// Expiry, if any.
    #[serde(default)]
    pub expires_at: Option<String>,
    /// Revocation time, if revoked.
    #[serde(default)]
    pub revoked_at: Option<String>,
}

/// A key just created: the only time the secret is shown.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct NewKey {
    /// Key id.
    pub id: String,
    /// The full key.
    pub key: String,
}

/// Billed calls on one day for one survey.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct UsageRow {
    /// `YYYY-MM-DD`.
    pub day: String,
    /// `SurveyCode`.
    pub survey: String,
    /// Billed calls.
    pub calls: u64,
}

/// Signs in.
pub async fn login(username: &str, password: &str) -> Result<Me, ApiFailure> {
    send_json(
        Request::post(&url("/app/login")),
        &serde_json::json!({"username": username, "password": password}),
    )
    .await
}

/// Signs out.
pub async fn logout() {
    let _ = with_credentials(Request::post(&url("/app/logout")))
        .send()
        .await;
}

/// The signed-in user, if any.
pub async fn me() -> Result<Me, ApiFailure> {
    get("/app/api/me").await
}

/// Surveys the account may query.
pub async fn surveys() -> Result<Vec<SurveySummary>, ApiFailure> {
    get("/app/api/surveys").await
}

/// A survey's codebook.
pub async fn codebook(code: &str) -> Result<Codebook, ApiFailure> {
    get(&format!("/app/api/surveys/{code}/codebook")).await
}

/// Runs a crosstab through the backend, which adds the key. The upstream's status and
/// body come back unchanged.
pub async fn crosstab(request: &Value) -> Result<(u16, Value), ApiFailure> {
    let response = with_credentials(Request::post(&url("/app/api/crosstab")))
        .json(request)
        .map_err(ApiFailure::network)?
        .send()
        .await
        .map_err(ApiFailure::network)?;
    let status = response.status();
    let body = response.json::<Value>().await.unwrap_or(Value::Null);
    if session_ended(status, &body) {
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
    get("/app/api/keys").await
}

/// Creates an API key (shown once).
pub async fn create_key(env: &str, expires_in_days: Option<u32>) -> Result<NewKey, ApiFailure> {
    send_json(
        Request::post(&url("/app/api/keys")),
        &serde_json::json!({"env": env, "expiresInDays": expires_in_days}),
    )
    .await
}

/// Revokes an API key.
pub async fn revoke_key(id: &str) -> Result<(), ApiFailure> {
    let response = with_credentials(Request::delete(&url(&format!("/app/api/keys/{id}"))))
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
    get("/app/api/usage").await
}
