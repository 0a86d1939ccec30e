//! The app's backend (`/app/...`): the only server the app talks to. The API key stays
//! there; the browser holds a session cookie.

use crosstab_contract::app::{
    paths, AppErrorCode, Codebook, Credentials, KeyInfo, Me, NewKey, NewKeyRequest, SurveySummary,
    Table, TableRequest, UsageQuery, UsageReport,
};
use crosstab_contract::idempotency::{key_from_bytes, IDEMPOTENCY_KEY, IDEMPOTENT_REPLAYED};
use crosstab_contract::{ApiError, CrosstabRequest, ErrorEnvelope};
use crosstab_wasm::response::parse_response;
use crosstab_wasm::send::RetryPolicy;

use crate::unsettled::{Sent, Unsettled};
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
    Err(failure_of(status, envelope))
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

/// Sends a request whose success has no body to read.
async fn send_bodiless(builder: RequestBuilder) -> Result<(), ApiFailure> {
    let response = with_credentials(builder)
        .send()
        .await
        .map_err(ApiFailure::network)?;
    if response.ok() {
        Ok(())
    } else {
        read::<Value>(response).await.map(|_| ())
    }
}

/// Signs in.
pub async fn login(username: &str, password: &str) -> Result<Me, ApiFailure> {
    let credentials = Credentials {
        username: username.to_owned(),
        password: password.to_owned(),
    };
    send_json(Request::post(&url(paths::LOGIN)), &credentials).await
}

/// Signs out: the server forgets the session. An error when it could not be told (the
/// session may still be valid).
pub async fn logout() -> Result<(), ApiFailure> {
    send_bodiless(Request::post(&url(paths::LOGOUT))).await
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

/// The backend's answer to a keyed POST (a crosstab or a table), as it came.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyedAnswer {
    /// HTTP status.
    pub status: u16,
    /// The body (`null` when it was not JSON).
    pub body: Value,
    /// The `Retry-After` header, if any.
    pub retry_after: Option<String>,
    /// Whether it is the answer an earlier request with the same key got (then unbilled).
    pub replayed: bool,
}

/// A table the server computed; `replayed` when it is the answer an earlier run of the
/// same table got and lost on the way, given again and not billed again.
#[derive(Debug, Clone, PartialEq)]
pub struct TableAnswer {
    /// The table.
    pub table: Table,
    /// Whether it was answered (and billed) before.
    pub replayed: bool,
}

/// A fresh `Idempotency-Key` from the browser's CSPRNG (`crypto.getRandomValues`, which,
/// unlike `randomUUID`, also works on a page served over plain http). `None` only
/// without Web Crypto: the query is then sent without one, as a client without retries.
fn fresh_idempotency_key() -> Option<String> {
    let crypto = web_sys::window()?.crypto().ok()?;
    let mut bytes = [0u8; 16];
    crypto.get_random_values_with_u8_array(&mut bytes).ok()?;
    Some(key_from_bytes(bytes))
}

/// Waits `ms` milliseconds (a `setTimeout` promise).
pub(crate) async fn sleep(ms: f64) {
    let promise = js_sys::Promise::new(&mut |resolve, _| {
        if let Some(window) = web_sys::window() {
            // Whole milliseconds within i32: the waits are at most a minute.
            let _ =
                window.set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, ms as i32);
        }
    });
    let _ = wasm_bindgen_futures::JsFuture::from(promise).await;
}

/// How long to wait before the retry after attempt `attempt` of a query that got `call`,
/// if it is retried: as [`RetryPolicy`] says, a failure of the app's own (a session
/// ended) never.
fn retry_wait_ms(
    sent: Sent,
    call: &Result<KeyedAnswer, ApiFailure>,
    attempt: u32,
    random: f64,
) -> Option<f64> {
    let policy = RetryPolicy::default();
    match call {
        Err(failure) if failure.status == 0 => policy.wait_after(attempt, None, random),
        Err(_) => None,
        Ok(answer) if (200..300).contains(&answer.status) => None,
        // A table past the deadline would take as long again, the first one's work still
        // running on the server: the researcher decides.
        Ok(answer)
            if sent == Sent::Table
                && answer.body["error"]["code"] == ApiError::DeadlineExceeded.code() =>
        {
            None
        }
        Ok(answer) => {
            let parsed = parse_response(
                answer.status,
                &answer.body,
                None,
                answer.retry_after.as_deref(),
            );
            policy.wait_after(attempt, Some(&parsed), random)
        }
    }
}

/// Runs a crosstab through the backend, which adds the key. The upstream's status and
/// body come back unchanged. One `Idempotency-Key` per call, the same on its retries
/// (network failures, 5xx, a short 429), so a retry of a query whose answer was lost is
/// answered again without a second bill.
pub async fn crosstab(request: &CrosstabRequest) -> Result<KeyedAnswer, ApiFailure> {
    send_remembered(Sent::Crosstab, request).await.last
}

/// `request` sent as [`send_keyed`] does, with the key it went with before if that run may
/// have been billed unseen (kept in [`Unsettled`], across reloads), else a fresh one:
/// recorded there before it is sent, and forgotten once answered.
async fn send_remembered(sent: Sent, request: &impl Serialize) -> Attempts {
    // Serializing the request types cannot fail; if it did, the key is simply not kept.
    let body = serde_json::to_value(request).ok();
    // The sender's list, even if the session ends (and the owner changes) meanwhile.
    let storage = Unsettled::storage_key();
    let list = Unsettled::load(&storage);
    let kept = body
        .as_ref()
        .and_then(|body| list.key_for(sent, body, js_sys::Date::now()));
    let key = kept.or_else(fresh_idempotency_key);
    let record = |before: Unsettled, unsettled: bool| {
        if let (Some(body), Some(key)) = (&body, &key) {
            let mut after = before.clone();
            after.record(sent, body, key, unsettled, js_sys::Date::now());
            if after != before {
                after.store(&storage);
            }
        }
    };
    // Before sending: the page may be reloaded or closed while the answer is on its way.
    record(list, true);
    let attempts = send_keyed(sent, request, key.clone()).await;
    // Read afresh: another tab may have written while this one waited.
    record(Unsettled::load(&storage), unsettled(&attempts));
    attempts
}

/// How a keyed POST ended: its last attempt's answer, and whether any attempt's fate is
/// unknown (it may have been answered and billed without the answer arriving).
struct Attempts {
    last: Result<KeyedAnswer, ApiFailure>,
    any_unknown: bool,
}

/// `request` POSTed with `key`, retried as [`RetryPolicy`] allows (never without a key:
/// a retry could be billed twice).
async fn send_keyed(sent: Sent, request: &impl Serialize, key: Option<String>) -> Attempts {
    let path = match sent {
        Sent::Crosstab => paths::CROSSTAB,
        Sent::Table => paths::TABLE,
    };
    let mut attempt = 1;
    let mut any_unknown = false;
    loop {
        let call = send_keyed_once(path, request, key.as_deref()).await;
        any_unknown |= fate_unknown(&call);
        match retry_wait_ms(sent, &call, attempt, js_sys::Math::random()) {
            Some(wait) if key.is_some() => {
                sleep(wait).await;
                attempt += 1;
            }
            _ => {
                return Attempts {
                    last: call,
                    any_unknown,
                }
            }
        }
    }
}

/// One attempt of [`send_keyed`].
async fn send_keyed_once(
    path: &str,
    request: &impl Serialize,
    idempotency_key: Option<&str>,
) -> Result<KeyedAnswer, ApiFailure> {
    let mut builder = with_credentials(Request::post(&url(path)));
    if let Some(key) = idempotency_key {
        builder = builder.header(IDEMPOTENCY_KEY, key);
    }
    let response = builder
        .json(request)
        .map_err(ApiFailure::network)?
        .send()
        .await
        .map_err(ApiFailure::network)?;
    let status = response.status();
    let retry_after = response.headers().get("Retry-After");
    let replayed = response
        .headers()
        .get(IDEMPOTENT_REPLAYED)
        .is_some_and(|value| value == "true");
    let body = match response.json::<Value>().await {
        Ok(body) => body,
        // A 2xx was answered, and billed, but its body did not arrive whole: as a lost
        // answer, sent again with the same key.
        Err(error) if (200..300).contains(&status) => return Err(ApiFailure::network(error)),
        // A proxy's page, say: the status tells.
        Err(_) => Value::Null,
    };
    let envelope = (!(200..300).contains(&status))
        .then(|| serde_json::from_value::<ErrorEnvelope>(body.clone()).ok())
        .flatten();
    if session_ended(envelope.as_ref()) {
        return Err(ApiFailure {
            status,
            message: "Your session has ended: sign in again.".to_owned(),
        });
    }
    Ok(KeyedAnswer {
        status,
        body,
        retry_after,
        replayed,
    })
}

/// Whether an attempt leaves unknown whether it was answered and billed: no answer came,
/// or a 5xx (a proxy's, say, while the server went on).
fn fate_unknown(call: &Result<KeyedAnswer, ApiFailure>) -> bool {
    match call {
        Err(failure) => failure.status == 0 || failure.status >= 500,
        Ok(answer) => answer.status >= 500,
    }
}

/// Whether a keyed POST may have been billed without its answer arriving, so the same
/// request must go again with the same key: its last attempt's fate is unknown, or an
/// earlier one's is and the last brought no answer (a refusal may come before the server
/// looks at the key: an ended session, an address past its pace, a body not read in
/// time). Keeping a key costs nothing: one whose request was not billed was given back.
fn unsettled(attempts: &Attempts) -> bool {
    let answered = match &attempts.last {
        Err(_) => false,
        Ok(answer) => (200..300).contains(&answer.status),
    };
    fate_unknown(&attempts.last) || (attempts.any_unknown && !answered)
}

/// A failure as the app shows it: the envelope's description, or the status alone when
/// there is no envelope (a proxy's page, say).
fn failure_of(status: u16, envelope: Option<ErrorEnvelope>) -> ApiFailure {
    let message = envelope.map_or_else(
        || format!("The server answered {status}."),
        |envelope| envelope.result_description,
    );
    ApiFailure { status, message }
}

/// Computes a table on the server, billed as the `/v1` calls it stands for. With one
/// `Idempotency-Key`, retried as a crosstab is (but never past the deadline: see
/// [`retry_wait_ms`]); and when it may have been billed unseen, the same table run again
/// later is sent with that key too (see [`Unsettled`]).
pub async fn table(request: &TableRequest) -> Result<TableAnswer, ApiFailure> {
    let attempts = send_remembered(Sent::Table, request).await;
    let answer = attempts.last?;
    if !(200..300).contains(&answer.status) {
        let envelope = serde_json::from_value::<ErrorEnvelope>(answer.body).ok();
        return Err(failure_of(answer.status, envelope));
    }
    let table = serde_json::from_value::<Table>(answer.body).map_err(|e| ApiFailure {
        status: answer.status,
        message: format!("The server's answer was not understood ({e})."),
    })?;
    Ok(TableAnswer {
        table,
        replayed: answer.replayed,
    })
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
    send_bodiless(Request::delete(&url(&paths::key(id)))).await
}

/// Billed calls by day and survey over the days `query` names (the backend's default
/// period for those it leaves out).
pub async fn usage(query: &UsageQuery) -> Result<UsageReport, ApiFailure> {
    let days = [("from", &query.from), ("to", &query.to)];
    let days = days
        .into_iter()
        .filter_map(|(name, day)| day.as_deref().map(|day| (name, day)));
    fetch(with_credentials(
        Request::get(&url(paths::USAGE)).query(days),
    ))
    .await
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn answer(status: u16, retry_after: Option<&str>) -> Result<KeyedAnswer, ApiFailure> {
        let body = if status == 200 {
            json!({"ResultCode": 0, "ResultDescription": "", "AudienceReportUnits": 1000,
                   "Results": [{"WgtAud": 1.0, "Resps": 70, "Stbl": 0}]})
        } else {
            json!({"ResultCode": status, "ResultDescription": "x",
                   "error": {"code": "x", "message": "x"}})
        };
        Ok(KeyedAnswer {
            status,
            body,
            retry_after: retry_after.map(str::to_owned),
            replayed: false,
        })
    }

    #[test]
    fn figures_arrive_bit_for_bit() {
        // The server's shortest round-trip text of a weighted audience, read back exactly
        // (serde_json's default parser reads this one an ulp low).
        let parsed: Vec<f64> =
            serde_json::from_str("[11212.953140000001, 0.30000000000000004]").unwrap();
        assert_eq!(parsed[0].to_string(), "11212.953140000001");
        assert_eq!(parsed[1], 0.1 + 0.2);
    }

    #[test]
    fn a_query_is_retried_as_the_policy_says_but_never_past_an_ended_session() {
        let wait = |call: &Result<KeyedAnswer, ApiFailure>, attempt, random| {
            retry_wait_ms(Sent::Crosstab, call, attempt, random)
        };
        let lost = Err(ApiFailure::network("offline"));
        assert_eq!(wait(&lost, 1, 0.0), Some(125.0));
        assert_eq!(wait(&answer(503, None), 2, 1.0), Some(500.0));
        assert_eq!(wait(&answer(503, None), 3, 1.0), None);
        assert_eq!(wait(&answer(400, None), 1, 0.5), None);
        let ended = Err(ApiFailure {
            status: 401,
            message: "Your session has ended: sign in again.".into(),
        });
        assert_eq!(wait(&ended, 1, 0.5), None);
        // A 200 is never sent again, whatever its body (a table's too).
        let mut table = answer(200, None);
        if let Ok(answer) = &mut table {
            answer.body = json!({"rows": []});
        }
        assert_eq!(retry_wait_ms(Sent::Table, &table, 1, 0.5), None);
    }

    #[test]
    fn a_table_past_the_deadline_is_not_sent_again() {
        let mut late = answer(503, None);
        if let Ok(answer) = &mut late {
            answer.body["error"]["code"] = json!("deadline_exceeded");
        }
        assert_eq!(retry_wait_ms(Sent::Table, &late, 1, 1.0), None);
        // A query is (its work is small), and a table on any other 5xx or none.
        assert_eq!(retry_wait_ms(Sent::Crosstab, &late, 1, 1.0), Some(250.0));
        assert_eq!(
            retry_wait_ms(Sent::Table, &answer(503, None), 1, 1.0),
            Some(250.0)
        );
        let lost = Err(ApiFailure::network("offline"));
        assert_eq!(retry_wait_ms(Sent::Table, &lost, 1, 0.0), Some(125.0));
    }

    #[test]
    fn only_a_call_that_got_no_answer_or_a_5xx_may_have_been_billed_unseen() {
        assert!(fate_unknown(&Err(ApiFailure::network("offline"))));
        assert!(fate_unknown(&answer(503, None)));
        assert!(fate_unknown(&answer(500, None)));
        for settled in [200, 400, 403, 422, 429] {
            assert!(!fate_unknown(&answer(settled, Some("2"))), "{settled}");
        }
        let ended = || {
            Err(ApiFailure {
                status: 401,
                message: "Your session has ended: sign in again.".into(),
            })
        };
        assert!(!fate_unknown(&ended()));
        let attempts = |last, any_unknown| Attempts { last, any_unknown };
        // An ended session after a lost attempt: the lost one may have been billed.
        assert!(unsettled(&attempts(ended(), true)));
        assert!(!unsettled(&attempts(ended(), false)));
        assert!(unsettled(&attempts(answer(503, None), false)));
        // Only an answer settles a lost attempt; a refusal may have come before the key.
        assert!(!unsettled(&attempts(answer(200, None), true)));
        for refused in [400, 403, 413, 422, 429] {
            assert!(
                unsettled(&attempts(answer(refused, None), true)),
                "{refused}"
            );
            assert!(
                !unsettled(&attempts(answer(refused, None), false)),
                "{refused}"
            );
        }
    }
}
