//! The app backend (`/app`): sign-in and its lock, the session cookie, the CSRF origin
//! check, credentialed CORS, entitlements in the catalog, keys and usage, queries billed
//! to each user's own account, and, with `--upstream`, the per-account upstream keys and
//! the upstream client's retry rules against a scripted upstream.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use crosstab_server::http::HttpService;
use crosstab_server::service::app::MAX_USABLE_KEYS;
use crosstab_server::service::upstream::{self, Upstream};
use crosstab_server::service::users;
use crosstab_server::store::{upstream_keys, usage};
use serde_json::{json, Value};
use tower::ServiceExt;

use crate::common::*;

/// The key the scripted upstreams expect from account acme's users.
const UPSTREAM_KEY: &str = "ctx_test_upstreamkey";

const PASSWORD: &str = "correct horse battery";

struct App {
    fx: Fixture,
    router: HttpService,
}

/// The fixture's state with the app backend, forwarding to `upstream`.
async fn app_with(upstream: Option<Upstream>) -> App {
    app_over(Fixture::new().await, upstream).await
}

/// `fx` with users `ann` (account acme) and `nora` (north), and the app backend.
async fn app_over(fx: Fixture, upstream: Option<Upstream>) -> App {
    users::create_or_reset(&fx.db, "ann", "acme", PASSWORD, fx.now())
        .await
        .unwrap();
    users::create_or_reset(&fx.db, "nora", "north", PASSWORD, fx.now())
        .await
        .unwrap();
    if upstream.is_some() {
        // Only acme's users have a key for the upstream; north's have none.
        assert!(upstream_keys::set(&fx.db, "acme", UPSTREAM_KEY, fx.now())
            .await
            .unwrap());
    }
    App::serving(fx, upstream)
}

/// Serves `service` on a free loopback port; returns its origin.
async fn listen<S>(service: S) -> String
where
    S: tower::Service<Request<Body>, Response = axum::response::Response, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    // Every connection gets a clone of the one service.
    let make = tower::service_fn(
        move |_: axum::serve::IncomingStream<'_, tokio::net::TcpListener>| {
            let service = service.clone();
            async move { Ok::<_, Infallible>(service) }
        },
    );
    tokio::spawn(async move { axum::serve(listener, make).await.unwrap() });
    format!("http://{address}")
}

impl App {
    /// The router over `fx` (its users kept) with the app backend forwarding to `upstream`.
    fn serving(fx: Fixture, upstream: Option<Upstream>) -> App {
        let dir = fx.dir.path().to_path_buf();
        let router = fx.router_with(upstream, Some(&dir));
        App { fx, router }
    }

    async fn send(&self, request: Request<Body>) -> (axum::http::response::Parts, Value) {
        let response = self.router.clone().oneshot(request).await.unwrap();
        let (parts, body) = response.into_parts();
        let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        (parts, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    /// `DELETE /app/api/keys/{id}` as the session `cookie`, from the allowed origin.
    async fn revoke(&self, cookie: &str, id: &str) -> StatusCode {
        let request = Request::delete(format!("/app/api/keys/{id}"))
            .header("cookie", cookie)
            .header("origin", ORIGIN)
            .body(Body::empty())
            .unwrap();
        self.send(request).await.0.status
    }

    async fn login(&self, user: &str, password: &str) -> (axum::http::response::Parts, Value) {
        let request = Request::post("/app/login")
            .header("content-type", "application/json")
            .header("origin", ORIGIN)
            .body(Body::from(
                json!({"username": user, "password": password}).to_string(),
            ))
            .unwrap();
        self.send(request).await
    }

    async fn session(&self, user: &str) -> String {
        let (parts, _) = self.login(user, PASSWORD).await;
        assert_eq!(parts.status, StatusCode::OK);
        let cookie = parts.headers["set-cookie"].to_str().unwrap();
        cookie.split(';').next().unwrap().to_owned()
    }

    async fn get(&self, cookie: &str, path: &str) -> (axum::http::response::Parts, Value) {
        self.send(
            Request::get(path)
                .header("cookie", cookie)
                .body(Body::empty())
                .unwrap(),
        )
        .await
    }

    async fn post(
        &self,
        cookie: &str,
        path: &str,
        body: &Value,
    ) -> (axum::http::response::Parts, Value) {
        let request = Request::post(path)
            .header("cookie", cookie)
            .header("origin", ORIGIN)
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap();
        self.send(request).await
    }
}

#[tokio::test]
async fn sign_in_sets_a_strict_cookie_and_locks_after_repeated_failures() {
    let app = app_with(None).await;
    let (parts, body) = app.login("ann", PASSWORD).await;
    assert_eq!(parts.status, StatusCode::OK);
    assert_eq!(body, json!({"username": "ann", "account": "acme"}));
    let cookie = parts.headers["set-cookie"].to_str().unwrap();
    for flag in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(cookie.contains(flag), "{cookie}");
    }
    assert!(
        !cookie.contains("Secure"),
        "loopback test server: no Secure flag"
    );

    let (parts, body) = app.login("ann", "wrong password").await;
    assert_eq!(parts.status, StatusCode::UNAUTHORIZED);
    assert_eq!(code(&body), "invalid_credentials");
    let (unknown, unknown_body) = app.login("nobody", "wrong password").await;
    assert_eq!(unknown.status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        unknown_body["ResultDescription"], body["ResultDescription"],
        "no user oracle"
    );
    for _ in 1..users::MAX_FAILED_LOGINS - 1 {
        assert_eq!(
            app.login("ann", "wrong password").await.0.status,
            StatusCode::UNAUTHORIZED
        );
    }
    let (parts, body) = app.login("ann", "wrong password").await;
    assert_eq!(parts.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(code(&body), "too_many_attempts");
    assert!(parts.headers.contains_key("retry-after"));
    // Locked: even the right password waits.
    assert_eq!(
        app.login("ann", PASSWORD).await.0.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

/// Sends `count` requests at once (each made by `send`): how many answered `counted`;
/// every other answer must be `otherwise`.
async fn race<F, R>(count: usize, send: F, counted: StatusCode, otherwise: StatusCode) -> usize
where
    F: Fn() -> R,
    R: std::future::Future<Output = StatusCode> + Send + 'static,
{
    let sent: Vec<_> = (0..count).map(|_| tokio::spawn(send())).collect();
    let mut hits = 0;
    for answer in sent {
        match answer.await.unwrap() {
            status if status == counted => hits += 1,
            status => assert_eq!(status, otherwise),
        }
    }
    hits
}

/// Guesses sent in parallel each count: no more than the limit are answered 401 (each
/// checked), the rest are refused unchecked, and the account ends locked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_wrong_passwords_cannot_share_one_count() {
    const GUESSES: usize = 20;
    let app = Arc::new(app_with(None).await);
    let guess = || {
        let app = Arc::clone(&app);
        async move { app.login("ann", "wrong password").await.0.status }
    };
    let rejected = race(
        GUESSES,
        guess,
        StatusCode::UNAUTHORIZED,
        StatusCode::TOO_MANY_REQUESTS,
    )
    .await;
    assert!(
        rejected < users::MAX_FAILED_LOGINS as usize,
        "{rejected} guesses checked"
    );
    assert_eq!(
        app.login("ann", PASSWORD).await.0.status,
        StatusCode::TOO_MANY_REQUESTS,
        "locked"
    );
}

/// A name without a user is slowed and locked exactly as a real user with a wrong
/// password: neither the failure count (the delay) nor the lock tells them apart.
#[tokio::test]
async fn unknown_names_answer_exactly_as_real_ones() {
    let app = app_with(None).await;
    let mut answers = Vec::new();
    for name in ["ann", "nobody"] {
        let mut seen = Vec::new();
        for _ in 0..users::MAX_FAILED_LOGINS + 1 {
            let answer = users::sign_in(&app.fx.db, name, "wrong password", app.fx.now())
                .await
                .unwrap();
            seen.push(match answer {
                users::SignIn::Rejected { failures } => format!("rejected after {failures}"),
                users::SignIn::Locked { retry_after_s } => format!("locked for {retry_after_s}"),
                users::SignIn::Accepted(_) => "accepted".to_owned(),
            });
        }
        answers.push(seen);
    }
    assert_eq!(answers[0], answers[1]);
    assert_eq!(answers[0][0], "rejected after 1");
    assert!(answers[0][users::MAX_FAILED_LOGINS as usize - 1].starts_with("locked"));
    // The lock is the database's, as a user's is: every server's sign-in sees it.
    let (parts, body) = app.login("nobody", "wrong password").await;
    assert_eq!(
        (parts.status, code(&body)),
        (StatusCode::TOO_MANY_REQUESTS, "too_many_attempts")
    );
    // And through the app's own sign-in, counted across requests.
    for _ in 1..users::MAX_FAILED_LOGINS {
        assert_eq!(
            app.login("somebody", "wrong password").await.0.status,
            StatusCode::UNAUTHORIZED
        );
    }
    let (parts, body) = app.login("somebody", "wrong password").await;
    assert_eq!(
        (parts.status, code(&body)),
        (StatusCode::TOO_MANY_REQUESTS, "too_many_attempts")
    );
}

/// A new password ends the sessions made with the old one.
#[tokio::test]
async fn resetting_a_password_signs_the_user_out_everywhere() {
    let app = app_with(None).await;
    let cookie = app.session("ann").await;
    assert_eq!(
        app.get(&cookie, "/app/api/me").await.0.status,
        StatusCode::OK
    );
    users::create_or_reset(
        &app.fx.db,
        "ann",
        "acme",
        "a brand new password",
        app.fx.now(),
    )
    .await
    .unwrap();
    assert_eq!(
        app.get(&cookie, "/app/api/me").await.0.status,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn a_session_cookie_never_authenticates_the_api() {
    let app = app_with(None).await;
    let cookie = app.session("ann").await;
    let request = Request::post("/v1/crosstab")
        .header("cookie", &cookie)
        .header("content-type", "application/json")
        .body(Body::from(
            request("VEC", None, "ALL", &["WOMEN"]).to_string(),
        ))
        .unwrap();
    let (parts, body) = app.send(request).await;
    assert_eq!(parts.status, StatusCode::UNAUTHORIZED);
    assert_eq!(code(&body), "unauthorized");
    assert_eq!(app.get(&cookie, "/app/api/me").await.1["username"], "ann");
    // After sign-out the cookie is dead.
    app.post(&cookie, "/app/logout", &json!({})).await;
    assert_eq!(
        app.get(&cookie, "/app/api/me").await.0.status,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn writes_need_this_origin_or_an_allowed_one() {
    let app = app_with(None).await;
    let cookie = app.session("ann").await;
    let body = json!({"env": "test"}).to_string();
    let attempt = |origin: Option<&str>, host: &str| {
        let mut builder = Request::post("/app/api/keys")
            .header("cookie", &cookie)
            .header("host", host)
            .header("content-type", "application/json");
        if let Some(origin) = origin {
            builder = builder.header("origin", origin);
        }
        builder.body(Body::from(body.clone())).unwrap()
    };
    let (parts, body_out) = app.send(attempt(None, "crosstab.test")).await;
    assert_eq!(
        (parts.status, code(&body_out)),
        (StatusCode::FORBIDDEN, "forbidden_origin")
    );
    let (parts, _) = app
        .send(attempt(Some("https://evil.test"), "crosstab.test"))
        .await;
    assert_eq!(parts.status, StatusCode::FORBIDDEN);
    let (parts, _) = app
        .send(attempt(Some("http://crosstab.test"), "crosstab.test"))
        .await;
    assert_eq!(parts.status, StatusCode::OK, "same origin");
    let (parts, _) = app.send(attempt(Some(ORIGIN), "crosstab.test")).await;
    assert_eq!(parts.status, StatusCode::OK, "allowed origin");
    assert_eq!(parts.headers["access-control-allow-origin"], ORIGIN);
    assert_eq!(parts.headers["access-control-allow-credentials"], "true");

    let preflight = |origin: &str| {
        Request::options("/app/api/crosstab")
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .body(Body::empty())
            .unwrap()
    };
    let (allowed, _) = app.send(preflight(ORIGIN)).await;
    assert_eq!(allowed.headers["access-control-allow-origin"], ORIGIN);
    assert!(allowed.headers["access-control-allow-methods"]
        .to_str()
        .unwrap()
        .contains("POST"));
    let (other, _) = app.send(preflight("https://evil.test")).await;
    assert!(!other.headers.contains_key("access-control-allow-origin"));
    assert!(!other.headers.contains_key("access-control-allow-methods"));
}

/// `--allowed-origin '*'` opens `/v1` (a key per call) to any page, never the app: with a
/// session cookie, any site could otherwise mint and read its user's keys.
#[tokio::test]
async fn a_wildcard_origin_never_gets_credentialed_access_to_the_app() {
    let app = app_over(Fixture::with_origins(&["*", ORIGIN]).await, None).await;
    let cookie = app.session("ann").await;
    let create_from = |origin: &str| {
        Request::post("/app/api/keys")
            .header("cookie", &cookie)
            .header("host", "crosstab.test")
            .header("origin", origin)
            .header("content-type", "application/json")
            .body(Body::from(json!({"env": "test"}).to_string()))
            .unwrap()
    };
    let (parts, body) = app.send(create_from("https://evil.test")).await;
    assert_eq!(
        (parts.status, code(&body)),
        (StatusCode::FORBIDDEN, "forbidden_origin")
    );
    assert!(!parts.headers.contains_key("access-control-allow-origin"));
    assert!(!parts
        .headers
        .contains_key("access-control-allow-credentials"));
    let listed = |origin: &str| {
        Request::get("/app/api/keys")
            .header("cookie", &cookie)
            .header("origin", origin)
            .body(Body::empty())
            .unwrap()
    };
    let (parts, _) = app.send(listed("https://evil.test")).await;
    assert!(
        !parts.headers.contains_key("access-control-allow-origin"),
        "a foreign page could read the user's keys"
    );
    let preflight = |path: &str, origin: &str| {
        Request::options(path)
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .body(Body::empty())
            .unwrap()
    };
    let (parts, _) = app
        .send(preflight("/app/api/keys", "https://evil.test"))
        .await;
    assert!(!parts.headers.contains_key("access-control-allow-origin"));
    assert!(!parts.headers.contains_key("access-control-allow-methods"));
    // The origin named beside `*` keeps its access, and `/v1` answers any origin.
    let (parts, _) = app.send(create_from(ORIGIN)).await;
    assert_eq!(parts.status, StatusCode::OK);
    assert_eq!(parts.headers["access-control-allow-credentials"], "true");
    let (parts, _) = app
        .send(preflight("/v1/crosstab", "https://evil.test"))
        .await;
    assert_eq!(
        parts.headers["access-control-allow-origin"],
        "https://evil.test"
    );
}

#[tokio::test]
async fn the_catalog_shows_only_what_the_account_may_query() {
    let app = app_with(None).await;
    let ann = app.session("ann").await;
    let (_, surveys) = app.get(&ann, "/app/api/surveys").await;
    assert_eq!(
        surveys,
        json!([{"code": "VEC", "name": "Test-vector survey", "respondents": 8, "allGroups": true}])
    );
    let (_, book) = app.get(&ann, "/app/api/surveys/VEC/codebook").await;
    assert_eq!(book["groups"].as_array().unwrap().len(), 2);
    let all = &book["bases"][0];
    assert_eq!(
        (all["respondents"].as_u64(), all["weighted"].as_f64()),
        (Some(8), Some(15500.0))
    );
    assert_eq!(
        all["groupTotals"]["N"],
        json!({"respondents": 4, "weighted": 9500.0})
    );

    let nora = app.session("nora").await;
    let (_, surveys) = app.get(&nora, "/app/api/surveys").await;
    assert_eq!(surveys[0]["allGroups"], false);
    // Nor do the survey's own counts: group N's only.
    assert_eq!(surveys[0]["respondents"], 4);
    let version = book["dataVersion"].as_str().unwrap().to_owned();
    assert!(version.len() == 32 && version.bytes().all(|b| b.is_ascii_hexdigit()));
    let (_, book) = app.get(&nora, "/app/api/surveys/VEC/codebook").await;
    assert_eq!(book["groups"], json!([{"value": "N", "label": "North"}]));
    // The survey's data is the same whatever the grant.
    assert_eq!(book["dataVersion"], version.as_str());
    assert_eq!(
        (book["respondents"].as_u64(), book["weightTotal"].as_f64()),
        (Some(4), Some(9500.0))
    );
    let all = &book["bases"][0];
    assert_eq!(all["groupTotals"].as_object().unwrap().len(), 1);
    // Only group N's totals: the whole survey's would tell about the other groups.
    assert_eq!(
        (all["respondents"].as_u64(), all["weighted"].as_f64()),
        (Some(4), Some(9500.0))
    );
    let (parts, _) = app.get(&nora, "/app/api/surveys/DEMO/codebook").await;
    assert_eq!(parts.status, StatusCode::FORBIDDEN);
    let (_, found) = app.get(&ann, "/app/api/surveys/VEC/codebook?q=women").await;
    assert_eq!(found["codes"].as_array().unwrap().len(), 2);
    assert!(found["variables"].as_array().unwrap().is_empty());

    // The account's entitlements apply before anything goes upstream.
    let (parts, body) = app
        .post(
            &nora,
            "/app/api/crosstab",
            &request("VEC", None, "ALL", &["WOMEN"]),
        )
        .await;
    assert_eq!(
        (parts.status, code(&body)),
        (StatusCode::FORBIDDEN, "forbidden_survey")
    );
    let (parts, body) = app
        .post(
            &nora,
            "/app/api/crosstab",
            &request("VEC", Some("N"), "ALL", &["WOMEN", "A", "B"]),
        )
        .await;
    assert_eq!(
        (parts.status, code(&body)),
        (StatusCode::BAD_REQUEST, "invalid_target_codes")
    );
    assert_eq!(app.fx.bills().await, 0, "nothing refused is billed");
    let (parts, body) = app
        .post(
            &nora,
            "/app/api/crosstab",
            &request("VEC", Some("N"), "ALL", &["WOMEN"]),
        )
        .await;
    assert_eq!(parts.status, StatusCode::OK, "{body}");
    assert_eq!(app.fx.bills().await, 1);
}

#[tokio::test]
async fn keys_are_shown_once_and_only_the_owner_revokes_them() {
    let app = app_with(None).await;
    let ann = app.session("ann").await;
    let (parts, created) = app
        .post(
            &ann,
            "/app/api/keys",
            &json!({"env": "test", "expiresInDays": 30}),
        )
        .await;
    assert_eq!(parts.status, StatusCode::OK);
    let token = created["key"].as_str().unwrap();
    assert!(token.starts_with("ctx_test_"));
    let (_, listed) = app.get(&ann, "/app/api/keys").await;
    let text = listed.to_string();
    assert!(!text.contains(token) && !text.contains("ctx_"), "{text}");
    let id = created["id"].as_str().unwrap();
    assert!(listed
        .as_array()
        .unwrap()
        .iter()
        .any(|k| k["id"] == id && k["expiresAt"].is_string()));

    let nora = app.session("nora").await;
    assert_eq!(app.revoke(&nora, id).await, StatusCode::NOT_FOUND);
    assert_eq!(app.revoke(&ann, id).await, StatusCode::NO_CONTENT);
    // The revoked key no longer works on /v1.
    let (parts, _) = app
        .fx
        .post(Some(token), &request("VEC", None, "ALL", &["WOMEN"]))
        .await;
    assert_eq!(parts.status(), StatusCode::UNAUTHORIZED);
}

/// An upstream that answers `script` in turn (status, body), then 200s.
async fn scripted_upstream(script: Vec<(u16, Value)>) -> (String, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&calls);
    let script = Arc::new(script);
    let router = Router::new().route(
        "/v1/crosstab",
        axum::routing::post(move |headers: axum::http::HeaderMap| {
            let counter = Arc::clone(&counter);
            let script = Arc::clone(&script);
            async move {
                assert_eq!(headers["service-engine-authorizer"], UPSTREAM_KEY);
                let n = counter.fetch_add(1, Ordering::SeqCst);
                let (status, body) = script.get(n).cloned().unwrap_or((200, json!({"ok": n})));
                (StatusCode::from_u16(status).unwrap(), axum::Json(body))
            }
        }),
    );
    (format!("{}/v1", listen(router).await), calls)
}

/// An upstream whose 200 breaks off mid-body may already have billed the call: the client
/// answers 502 and never sends it again.
#[tokio::test]
async fn a_200_that_breaks_off_is_not_retried() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&calls);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            let mut request = vec![0u8; 64 * 1024];
            let _ = socket.read(&mut request).await;
            let _ = socket
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n{\"ResultCode\": 0")
                .await;
            // Dropped: the body ends 480 bytes short.
        }
    });
    let app = app_with(Some(Upstream::new(&base).unwrap())).await;
    let ann = app.session("ann").await;
    let body = request("VEC", None, "ALL", &["WOMEN"]);
    let (parts, _) = app.post(&ann, "/app/api/crosstab", &body).await;
    assert_eq!(parts.status, StatusCode::BAD_GATEWAY);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "sent once: it may be billed"
    );
}

/// An upstream that redirects is not followed: the account's key would go wherever the
/// redirect points (redirects keep a header of our own).
#[tokio::test]
async fn a_redirecting_upstream_is_not_followed() {
    let (elsewhere, reached) = scripted_upstream(vec![]).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&calls);
    let to = format!("{elsewhere}/crosstab");
    let router = Router::new().route(
        "/v1/crosstab",
        axum::routing::post(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            let to = to.clone();
            async move { (StatusCode::TEMPORARY_REDIRECT, [("location", to)]) }
        }),
    );
    let base = format!("{}/v1", listen(router).await);
    let app = app_with(Some(Upstream::new(&base).unwrap())).await;
    let ann = app.session("ann").await;
    let body = request("VEC", None, "ALL", &["WOMEN"]);
    let (parts, answer) = app.post(&ann, "/app/api/crosstab", &body).await;
    assert_eq!(parts.status, StatusCode::BAD_GATEWAY, "{answer}");
    assert_eq!(calls.load(Ordering::SeqCst), 1, "not retried");
    assert_eq!(
        reached.load(Ordering::SeqCst),
        0,
        "the key went nowhere else"
    );
}

/// A query sent without an `Idempotency-Key` still carries one upstream, the same on
/// every retry: a 5xx may follow a bill the upstream could not confirm, and the retry must
/// get that answer rather than a second bill.
#[tokio::test]
async fn retries_upstream_carry_one_key_even_when_the_caller_gave_none() {
    let keys = Arc::new(std::sync::Mutex::new(Vec::<Option<String>>::new()));
    let seen = Arc::clone(&keys);
    let router = Router::new().route(
        "/v1/crosstab",
        axum::routing::post(move |headers: axum::http::HeaderMap| {
            let seen = Arc::clone(&seen);
            async move {
                let key = headers
                    .get("idempotency-key")
                    .map(|k| k.to_str().unwrap().to_owned());
                let mut seen = seen.lock().unwrap();
                seen.push(key);
                if seen.len() < 3 {
                    (
                        StatusCode::SERVICE_UNAVAILABLE,
                        axum::Json(json!({"ResultCode": 503})),
                    )
                } else {
                    (StatusCode::OK, axum::Json(json!({"ok": true})))
                }
            }
        }),
    );
    let base = format!("{}/v1", listen(router).await);
    let app = app_with(Some(Upstream::new(&base).unwrap())).await;
    let ann = app.session("ann").await;
    let body = request("VEC", None, "ALL", &["WOMEN"]);
    let (parts, _) = app.post(&ann, "/app/api/crosstab", &body).await;
    assert_eq!(parts.status, StatusCode::OK);
    let keys = keys.lock().unwrap().clone();
    assert_eq!(keys.len(), 3);
    let first = keys[0].clone().expect("a key upstream");
    assert!(!first.is_empty());
    assert!(
        keys.iter().all(|k| k.as_deref() == Some(first.as_str())),
        "{keys:?}"
    );
}

#[tokio::test]
async fn the_upstream_client_retries_5xx_never_4xx_and_passes_answers_through() {
    let (base, calls) = scripted_upstream(vec![
        (503, json!({"ResultCode": 503})),
        (500, json!({"ResultCode": 500})),
    ])
    .await;
    let app = app_with(Some(Upstream::new(&base).unwrap())).await;
    let ann = app.session("ann").await;
    let body = request("VEC", None, "ALL", &["WOMEN"]);
    let (parts, answer) = app.post(&ann, "/app/api/crosstab", &body).await;
    assert_eq!((parts.status, answer), (StatusCode::OK, json!({"ok": 2})));
    assert_eq!(calls.load(Ordering::SeqCst), 3, "two 5xx retried");

    let envelope = json!({"ResultCode": 403, "ResultDescription": "no", "error": {"code": "forbidden_survey", "message": "no"}});
    let (base, calls) = scripted_upstream(vec![(403, envelope.clone())]).await;
    let app = app_with(Some(Upstream::new(&base).unwrap())).await;
    let ann = app.session("ann").await;
    let (parts, answer) = app.post(&ann, "/app/api/crosstab", &body).await;
    assert_eq!(
        (parts.status, answer),
        (StatusCode::FORBIDDEN, envelope),
        "4xx passed back unchanged"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1, "4xx never retried");

    let failing = vec![(502, json!({})); 10];
    let (base, calls) = scripted_upstream(failing).await;
    let app = app_with(Some(Upstream::new(&base).unwrap())).await;
    let ann = app.session("ann").await;
    let (parts, _) = app.post(&ann, "/app/api/crosstab", &body).await;
    assert_eq!(
        parts.status,
        StatusCode::BAD_GATEWAY,
        "the last 5xx is passed back"
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1 + upstream::MAX_RETRIES as usize
    );

    // An account without an upstream key runs no queries there, and nothing is sent.
    let nora = app.session("nora").await;
    let (parts, answer) = app
        .post(
            &nora,
            "/app/api/crosstab",
            &request("VEC", Some("N"), "ALL", &["WOMEN"]),
        )
        .await;
    assert_eq!(
        (parts.status, code(&answer)),
        (StatusCode::SERVICE_UNAVAILABLE, "not_configured")
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1 + upstream::MAX_RETRIES as usize
    );
    assert_eq!(
        app.fx.bills().await,
        0,
        "the upstream bills, not this server"
    );
}

/// Two accounts, each with its own user and grants: each user's queries run in this
/// process and are billed to that user's own account (and say which user ran them), in
/// the ledger, in `usage`, and on each user's usage page, never to the other account.
#[tokio::test]
async fn each_users_queries_are_billed_to_their_own_account() {
    let app = app_with(None).await;
    let origin = listen(app.fx.router.clone()).await;
    // Its own /v1 is a compliant upstream too (what `--upstream` checks at start).
    let own = Upstream::new(&format!("{origin}/v1")).unwrap();
    assert!(own.check_contract().await.unwrap().is_empty());
    let (ann, nora) = (app.session("ann").await, app.session("nora").await);
    let (parts, answer) = app
        .post(
            &ann,
            "/app/api/crosstab",
            &request("VEC", None, "ALL", &["WOMEN", "F2554"]),
        )
        .await;
    assert_eq!(parts.status, StatusCode::OK);
    assert_eq!(answer["Results"][0]["WgtAud"], 13.0);
    for _ in 0..2 {
        let (parts, _) = app
            .post(
                &nora,
                "/app/api/crosstab",
                &request("VEC", Some("N"), "ALL", &["WOMEN"]),
            )
            .await;
        assert_eq!(parts.status, StatusCode::OK);
    }
    // The same body from a key of acme is billed to acme, by that key.
    let (parts, _) = app
        .fx
        .post(
            Some(&app.fx.whole),
            &request("VEC", None, "ALL", &["WOMEN", "F2554"]),
        )
        .await;
    assert_eq!(parts.status(), StatusCode::OK);

    let report = usage::report(&app.fx.db, None, 0).await.unwrap();
    let by = |account: &str, user: Option<&str>| -> i64 {
        report
            .iter()
            .filter(|r| r.account == account && r.user.as_deref() == user)
            .map(|r| r.calls)
            .sum()
    };
    assert_eq!(by("acme", Some("ann")), 1, "{report:?}");
    assert_eq!(by("north", Some("nora")), 2, "{report:?}");
    assert_eq!(by("acme", None), 1, "the key's call: {report:?}");
    assert_eq!(report.iter().map(|r| r.calls).sum::<i64>(), 4, "{report:?}");
    for row in &report {
        assert!(
            row.user.is_some() != row.key_id.is_some(),
            "a key or a user: {row:?}"
        );
    }

    let (_, ann_usage) = app.get(&ann, "/app/api/usage").await;
    let (_, nora_usage) = app.get(&nora, "/app/api/usage").await;
    let calls = |usage: &Value, user: Option<&str>| -> u64 {
        usage["rows"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["user"].as_str() == user)
            .map(|r| r["calls"].as_u64().unwrap())
            .sum()
    };
    assert_eq!(calls(&ann_usage, Some("ann")), 1, "{ann_usage}");
    assert_eq!(calls(&ann_usage, None), 1, "acme's key call: {ann_usage}");
    assert_eq!(calls(&ann_usage, Some("nora")), 0, "{ann_usage}");
    assert_eq!(calls(&nora_usage, Some("nora")), 2, "{nora_usage}");
    assert_eq!(
        nora_usage["rows"].as_array().unwrap().len(),
        1,
        "{nora_usage}"
    );
    assert_eq!(nora_usage["rows"][0]["survey"], "VEC");
    assert_eq!(nora_usage["rows"][0]["day"], nora_usage["to"]);
}

/// The usage page reports a period of UTC days, by default today and the 30 before (the
/// ledger is read for those days only, however long the account's history); other
/// periods are asked for by `from` and `to`, and a malformed, reversed or too long one
/// is the app's 400, naming the reason.
#[tokio::test]
async fn usage_is_reported_for_a_period_of_days() {
    let app = app_with(None).await;
    app.fx.clear_of_midnight();
    let day_of = |ms: i64| {
        chrono::DateTime::from_timestamp_millis(ms)
            .unwrap()
            .date_naive()
    };
    let query = |cookie: &str| {
        let body = request("VEC", None, "ALL", &["WOMEN"]);
        let app = &app;
        let cookie = cookie.to_owned();
        async move {
            let (parts, _) = app.post(&cookie, "/app/api/crosstab", &body).await;
            assert_eq!(parts.status, StatusCode::OK);
        }
    };
    let first = day_of(app.fx.now());
    query(&app.session("ann").await).await;
    // 40 days on (the session has expired meanwhile), two more calls.
    app.fx.clock.advance(40 * 86_400_000);
    let today = day_of(app.fx.now());
    let ann = app.session("ann").await;
    query(&ann).await;
    query(&ann).await;

    let days = |usage: &Value| -> Vec<(String, u64)> {
        usage["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["day"].as_str().unwrap().to_owned(),
                    r["calls"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    // By default: the last 31 days, so not the first call.
    let (parts, usage) = app.get(&ann, "/app/api/usage").await;
    assert_eq!(parts.status, StatusCode::OK);
    assert_eq!(usage["to"], today.to_string());
    assert_eq!(usage["from"], (today - chrono::Days::new(30)).to_string());
    assert_eq!(days(&usage), [(today.to_string(), 2)], "{usage}");
    assert!(usage.get("quota").is_none(), "no quota, none said: {usage}");
    // The first day alone, and both days, newest first.
    let (_, usage) = app
        .get(&ann, &format!("/app/api/usage?from={first}&to={first}"))
        .await;
    assert_eq!(days(&usage), [(first.to_string(), 1)], "{usage}");
    let (_, usage) = app.get(&ann, &format!("/app/api/usage?from={first}")).await;
    assert_eq!(usage["to"], today.to_string(), "`to` defaults to today");
    assert_eq!(
        days(&usage),
        [(today.to_string(), 2), (first.to_string(), 1)],
        "{usage}"
    );
    // Refusals, each saying why.
    let too_long = format!("from={first}&to={}", first + chrono::Days::new(366));
    for (query, says) in [
        ("from=2026-1-05", "'from' must be a day as YYYY-MM-DD"),
        ("to=tomorrow", "'to' must be a day as YYYY-MM-DD"),
        ("from=2026-02-30", "'from' must be a day"),
        ("from=2026-11-29&to=2026-11-28", "is after"),
        (too_long.as_str(), "at most 366 days"),
        ("from=2026-01-01&from=2026-01-02", "duplicate field"),
        ("since=2026-01-01", "unknown field"),
    ] {
        let (parts, body) = app.get(&ann, &format!("/app/api/usage?{query}")).await;
        assert_eq!(parts.status, StatusCode::BAD_REQUEST, "{query}: {body}");
        assert_eq!(body["error"]["code"], "invalid_request", "{query}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{query}: {message}");
    }
}

/// The app's page answers the app's own routes (client-side paths), never a mistyped API
/// path: those are 404 (405 for a known path with the wrong method), not a 200 page.
#[tokio::test]
async fn api_paths_never_fall_back_to_the_app_page() {
    let fx = Fixture::new().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("index.html"),
        "<!doctype html><title>app</title>",
    )
    .unwrap();
    let router = fx.router_with(None, Some(dir.path()));
    let status = |method: &str, path: &str| {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .body(Body::empty())
            .unwrap();
        let router = router.clone();
        async move {
            let response = router.oneshot(request).await.unwrap();
            let html = response
                .headers()
                .get("content-type")
                .is_some_and(|v| v.to_str().unwrap().starts_with("text/html"));
            (response.status(), html)
        }
    };
    assert_eq!(
        status("GET", "/queries/recent").await,
        (StatusCode::OK, true)
    );
    assert_eq!(status("GET", "/").await, (StatusCode::OK, true));
    for path in [
        "/v1/doc",
        "/v1/docs/",
        "/v1",
        "/v1/",
        "/app/api/nope",
        "/app/nope",
        "/app/",
    ] {
        assert_eq!(
            status("GET", path).await,
            (StatusCode::NOT_FOUND, false),
            "{path}"
        );
    }
    assert_eq!(
        status("GET", "/v1/crosstab").await.0,
        StatusCode::METHOD_NOT_ALLOWED
    );
    assert_eq!(status("GET", "/v1/docs").await.0, StatusCode::OK);
}

/// The app's files (the worker's are named without a hash) are checked again before each
/// use, so a deploy never pairs a new page with an old worker; unchanged, they answer 304.
#[tokio::test]
async fn the_apps_files_are_revalidated_before_use() {
    let fx = Fixture::new().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("index.html"), "<!doctype html>").unwrap();
    std::fs::write(dir.path().join("crosstab-web-worker.js"), "// worker").unwrap();
    let router = fx.router_with(None, Some(dir.path()));
    let get = |path: &str, since: Option<String>| {
        let mut request = Request::get(path);
        if let Some(since) = since {
            request = request.header("if-modified-since", since);
        }
        let request = request.body(Body::empty()).unwrap();
        let router = router.clone();
        async move { router.oneshot(request).await.unwrap() }
    };
    for path in ["/", "/crosstab-web-worker.js", "/some/screen"] {
        let response = get(path, None).await;
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        assert_eq!(response.headers()["cache-control"], "no-cache", "{path}");
    }
    let first = get("/crosstab-web-worker.js", None).await;
    let modified = first.headers()["last-modified"]
        .to_str()
        .unwrap()
        .to_owned();
    let again = get("/crosstab-web-worker.js", Some(modified)).await;
    assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
    assert!(get("/v1/docs", None)
        .await
        .headers()
        .get("cache-control")
        .is_none());
}

/// The app creates keys up to a limit of usable ones per account (a revoked one frees a
/// place); past it, 409 `too_many_keys`, and nothing is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_app_stops_creating_keys_at_the_usable_limit() {
    let app = app_with(None).await;
    let ann = app.session("ann").await;
    let usable = |listed: &Value| {
        listed
            .as_array()
            .unwrap()
            .iter()
            .filter(|k| k["revokedAt"].is_null())
            .count()
    };
    let (_, listed) = app.get(&ann, "/app/api/keys").await;
    let mut last = Value::Null;
    for _ in usable(&listed)..MAX_USABLE_KEYS - 1 {
        let (parts, created) = app
            .post(&ann, "/app/api/keys", &json!({"env": "test"}))
            .await;
        assert_eq!(parts.status, StatusCode::OK);
        last = created;
    }
    // One place left, eight asking at once: exactly one gets it.
    let app = Arc::new(app);
    let create = || {
        let (app, ann) = (Arc::clone(&app), ann.clone());
        async move {
            app.post(&ann, "/app/api/keys", &json!({"env": "test"}))
                .await
                .0
                .status
        }
    };
    let won = race(8, create, StatusCode::OK, StatusCode::CONFLICT).await;
    assert_eq!(won, 1, "the limit held under concurrent creations");
    let (parts, body) = app
        .post(&ann, "/app/api/keys", &json!({"env": "test"}))
        .await;
    assert_eq!(parts.status, StatusCode::CONFLICT);
    assert_eq!(body["error"]["code"], "too_many_keys");
    let (_, listed) = app.get(&ann, "/app/api/keys").await;
    assert_eq!(usable(&listed), MAX_USABLE_KEYS, "nothing created");
    let id = last["id"].as_str().unwrap();
    assert_eq!(app.revoke(&ann, id).await, StatusCode::NO_CONTENT);
    let (parts, _) = app
        .post(&ann, "/app/api/keys", &json!({"env": "live"}))
        .await;
    assert_eq!(parts.status, StatusCode::OK);
}

/// Creating and revoking in turn never reaches the usable limit, so creations are
/// counted per day too; revoking a revoked key changes nothing, and tells no server to
/// drop its caches. A key's lifetime is bounded, so every listed date can be shown.
#[tokio::test]
async fn the_app_creates_a_bounded_number_of_keys_a_day() {
    use crosstab_server::service::app::MAX_KEYS_PER_DAY;
    use crosstab_server::store::accounts;
    let app = app_with(None).await;
    app.fx.clear_of_midnight();
    let ann = app.session("ann").await;
    let (_, listed) = app.get(&ann, "/app/api/keys").await;
    let before = listed.as_array().unwrap().len();
    let mut refused = None;
    for _ in 0..MAX_KEYS_PER_DAY + 1 {
        let (parts, created) = app
            .post(&ann, "/app/api/keys", &json!({"env": "test"}))
            .await;
        if parts.status != StatusCode::OK {
            refused = Some((parts.status, created));
            break;
        }
        let id = created["id"].as_str().unwrap().to_owned();
        assert_eq!(app.revoke(&ann, &id).await, StatusCode::NO_CONTENT);
        // Again: found, but nothing changes.
        let revision = accounts::key_revision(&app.fx.db).await.unwrap();
        assert_eq!(app.revoke(&ann, &id).await, StatusCode::NO_CONTENT);
        assert_eq!(accounts::key_revision(&app.fx.db).await.unwrap(), revision);
    }
    let (status, body) = refused.expect("refused within the day's number");
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "too_many_keys");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("a day"),
        "{body}"
    );
    let (_, listed) = app.get(&ann, "/app/api/keys").await;
    let created_today = listed.as_array().unwrap().len() - before;
    assert!(created_today <= MAX_KEYS_PER_DAY, "{created_today}");

    let app = app_with(None).await;
    let ann = app.session("ann").await;
    let (parts, body) = app
        .post(
            &ann,
            "/app/api/keys",
            &json!({"env": "test", "expiresInDays": 100_000_000}),
        )
        .await;
    assert_eq!(parts.status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("36525"),
        "{body}"
    );
    let (parts, _) = app
        .post(
            &ann,
            "/app/api/keys",
            &json!({"env": "test", "expiresInDays": 36_525}),
        )
        .await;
    assert_eq!(parts.status, StatusCode::OK);
    let (parts, listed) = app.get(&ann, "/app/api/keys").await;
    assert_eq!(parts.status, StatusCode::OK, "{listed}");
}

/// `{"expression": e}` for each of `targets`.
fn axis(targets: &[&str]) -> Value {
    targets
        .iter()
        .map(|t| json!({"expression": t}))
        .collect::<Vec<_>>()
        .into()
}

fn table_body(group: Option<&str>, base: &str, rows: &[&str], columns: &[&str]) -> Value {
    json!({"survey": "VEC", "populationBase": base, "group": group,
           "rows": axis(rows), "columns": axis(columns)})
}

/// `/v1`'s answer for one target, with `key`.
async fn v1_one(app: &App, key: &str, group: Option<&str>, base: &str, target: &str) -> Value {
    let (parts, body) = app
        .fx
        .post(Some(key), &request("VEC", group, base, &[target]))
        .await;
    assert_eq!(parts.status(), StatusCode::OK, "{target}: {body}");
    body["Results"][0].clone()
}

/// Whether a table cell carries exactly `/v1`'s figures for its target.
fn same_as_v1(cell: &Value, v1: &Value, what: &str) {
    assert_eq!(cell["wgtAud"], v1["WgtAud"], "{what}");
    assert_eq!(cell["resps"], v1["Resps"], "{what}");
}

#[tokio::test]
async fn a_table_is_v1_cell_by_cell_and_billed_as_v1_would_bill_it() {
    let app = app_with(None).await;
    let ann = app.session("ann").await;
    let rows = ["WOMEN", "SMOKER = 1", "GENDER = 1"];
    let columns = ["AGE >= 35", "SMOKER = 0"];
    let mut body = table_body(None, "ALL", &rows, &columns);
    body["rows"][0]["label"] = json!("Women");
    let before = app.fx.bills().await;
    let (parts, table) = app.post(&ann, "/app/api/table", &body).await;
    assert_eq!(parts.status, StatusCode::OK, "{table}");
    let billed = app.fx.bills().await - before;
    let expected = crosstab_contract::app::billed_calls(rows.len(), columns.len(), false);
    assert_eq!(
        expected, 6,
        "6 cells + 3 row totals + 2 column totals, two a call"
    );
    assert_eq!(billed, i64::from(expected));
    assert_eq!(table["billedCalls"], expected);
    assert_eq!(table["rows"][0]["label"], "Women");
    assert_eq!(table["rows"][1]["label"], "SMOKER = 1");
    // The bills are the user's, as the app's usage page shows them.
    let (_, usage) = app.get(&ann, "/app/api/usage").await;
    assert_eq!(usage["rows"][0]["calls"], json!(expected), "{usage}");

    let key = app.fx.whole.clone();
    let base = v1_one(&app, &key, None, "ALL", "*").await;
    same_as_v1(&table["total"], &base, "total");
    let base_weight = table["total"]["weight"].as_f64().unwrap();
    for (r, row) in rows.iter().enumerate() {
        let row_total = v1_one(&app, &key, None, "ALL", row).await;
        same_as_v1(&table["rowTotals"][r], &row_total, row);
        for (c, column) in columns.iter().enumerate() {
            let target = format!("({row}) AND ({column})");
            let v1 = v1_one(&app, &key, None, "ALL", &target).await;
            let cell = &table["cells"][r][c];
            same_as_v1(cell, &v1, &target);
            let column_total = v1_one(&app, &key, None, "ALL", column).await;
            same_as_v1(&table["columnTotals"][c], &column_total, column);
            // The shares and the index from the same /v1 answers.
            let (w, col, row_w) = (
                v1["WgtAud"].as_f64().unwrap() * 1000.0,
                column_total["WgtAud"].as_f64().unwrap() * 1000.0,
                row_total["WgtAud"].as_f64().unwrap() * 1000.0,
            );
            let close = |got: &Value, want: f64| {
                let got = got.as_f64().unwrap();
                assert!(
                    (got - want).abs() <= 1e-9 * want.abs().max(1.0),
                    "{target}: {got} vs {want}"
                );
            };
            close(&cell["verticalPct"], 100.0 * w / col);
            close(&cell["horizontalPct"], 100.0 * w / row_w);
            close(
                &cell["index"],
                (100.0 * w / col) / (100.0 * row_w / base_weight) * 100.0,
            );
        }
    }
}

#[tokio::test]
async fn a_table_keeps_to_the_users_grants_and_refusals_bill_nothing() {
    let app = app_with(None).await;
    let nora = app.session("nora").await;
    let rows = ["WOMEN"];
    let columns = ["SMOKER = 1"];
    let before = app.fx.bills().await;
    // North's users may see group N only: S, and every group, are refused.
    for group in [Some("S"), None, Some("_ALL_")] {
        let (parts, body) = app
            .post(
                &nora,
                "/app/api/table",
                &table_body(group, "ALL", &rows, &columns),
            )
            .await;
        assert_eq!(parts.status, StatusCode::FORBIDDEN, "{group:?}: {body}");
        assert_eq!(code(&body), "forbidden_survey");
    }
    let ann = app.session("ann").await;
    let refused = [
        (
            table_body(None, "ALL", &[], &columns),
            "invalid_request",
            "rows",
        ),
        (
            table_body(None, "ALL", &rows, &["SMOKER ="]),
            "invalid_request",
            "columns",
        ),
        (
            table_body(None, "NOBASE", &rows, &columns),
            "invalid_population_base",
            "",
        ),
        (
            table_body(Some("X"), "ALL", &rows, &columns),
            "forbidden_survey",
            "",
        ),
        (json!({"survey": "VEC"}), "invalid_request", ""),
        (json!("not a table"), "invalid_request", ""),
        (
            {
                let mut both = table_body(None, "ALL", &rows, &columns);
                both["bonferroni"] = json!(true);
                both["holm"] = json!(true);
                both
            },
            "invalid_request",
            "holm",
        ),
    ];
    for (body, expected, field) in refused {
        let (parts, answer) = app.post(&ann, "/app/api/table", &body).await;
        assert!(parts.status.is_client_error(), "{body}: {answer}");
        assert_eq!(code(&answer), expected, "{body}: {answer}");
        if !field.is_empty() {
            assert_eq!(answer["error"]["field"], field, "{answer}");
        }
    }
    // A body is read as strictly as /v1's: a member named twice, at any depth, is
    // refused in the contract's words (the npm package's `Survey.table` reads the same).
    let mut twice = table_body(None, "ALL", &rows, &columns).to_string();
    twice.insert_str(1, r#""rows": [{"expression": "SMOKER = 1"}], "#);
    for body in [
        twice,
        r#"{"populationBase": "ALL", "rows": [{"expression": "WOMEN", "expression": "MEN"}], "columns": [{"expression": "*"}]}"#.to_owned(),
    ] {
        let request = Request::post("/app/api/table")
            .header("cookie", &ann)
            .header("origin", ORIGIN)
            .header("content-type", "application/json")
            .body(Body::from(body.clone()))
            .unwrap();
        let (parts, answer) = app.send(request).await;
        assert_eq!(parts.status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        let expected = crosstab_contract::ApiError::from(
            crosstab_contract::app::TableRequest::from_json(body.as_bytes()).unwrap_err(),
        );
        assert_eq!(answer, serde_json::to_value(expected.envelope()).unwrap());
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains("more than once"),
            "{answer}"
        );
    }
    // Signed out, or from a foreign origin: refused before anything else.
    let table = table_body(None, "ALL", &rows, &columns);
    let (parts, _) = app.post("", "/app/api/table", &table).await;
    assert_eq!(parts.status, StatusCode::UNAUTHORIZED);
    let foreign = Request::post("/app/api/table")
        .header("cookie", &ann)
        .header("origin", "https://evil.example")
        .header("content-type", "application/json")
        .body(Body::from(table.to_string()))
        .unwrap();
    assert_eq!(app.send(foreign).await.0.status, StatusCode::FORBIDDEN);
    assert_eq!(app.fx.bills().await, before, "nothing refused is billed");

    // Group N, which nora may see: /v1's answers within N, with north's key.
    let (parts, table) = app
        .post(
            &nora,
            "/app/api/table",
            &table_body(Some("N"), "ALL", &rows, &columns),
        )
        .await;
    assert_eq!(parts.status, StatusCode::OK, "{table}");
    assert_eq!(app.fx.bills().await - before, 2);
    let key = app.fx.north.clone();
    let cell = v1_one(&app, &key, Some("N"), "ALL", "(WOMEN) AND (SMOKER = 1)").await;
    same_as_v1(&table["cells"][0][0], &cell, "cell within N");
    let total = v1_one(&app, &key, Some("N"), "ALL", "*").await;
    same_as_v1(&table["total"], &total, "base within N");
}

/// A table's bills carry the time they are written, once the table is ready, not the time
/// it was asked: the quota takes bills past its settle window (72 s at the defaults) as
/// final, so a table slower than that would otherwise commit bills it never counts. (The ledger's own test holds the writer
/// to it; this one holds the whole path, admission to bill.)
#[tokio::test]
async fn a_tables_bills_carry_the_time_it_was_ready() {
    use crosstab_server::store::accounts;
    let app = app_with(None).await;
    app.fx.clear_of_midnight();
    daily_quota(&app.fx, "acme", 1_000).await;
    let ann = app.session("ann").await;
    let asked_at = app.fx.now();
    let reads = app.fx.services.limits.tally_reads();
    let body = table_body(
        None,
        "ALL",
        &["WOMEN", "SMOKER = 1"],
        &["AGE >= 35", "WOMEN"],
    );
    // Once the table is admitted (the day's first call reads the account's quota), a
    // minute and more passes before it is ready: at the clock's next reading, wherever
    // it is read.
    // (Weak: the limits hold the clock, which would then hold them.)
    let limits = Arc::downgrade(&app.fx.services.limits);
    app.fx.clock.advance_once(61_000, move || {
        limits
            .upgrade()
            .is_some_and(|limits| limits.tally_reads() > reads)
    });
    let (parts, table) = app.post(&ann, "/app/api/table", &body).await;
    assert_eq!(
        app.fx.now(),
        asked_at + 61_000,
        "the quota's count was read"
    );
    assert_eq!(parts.status, StatusCode::OK, "{table}");
    let account = accounts::account_id(&app.fx.db, "acme")
        .await
        .unwrap()
        .unwrap();
    let billed = table["billedCalls"].as_u64().unwrap();
    assert_eq!(billed, 4);
    assert_eq!(
        usage::calls_since(&app.fx.db, account, asked_at + 61_000)
            .await
            .unwrap(),
        billed,
        "every bill carries the time the table was ready"
    );
}

#[tokio::test]
async fn a_table_over_the_daily_quota_is_refused_whole() {
    use crosstab_server::store::accounts::{self, AccountLimits};
    let app = app_with(None).await;
    app.fx.clear_of_midnight();
    let limits = AccountLimits {
        per_second: None,
        daily_quota: Some(5),
    };
    assert!(accounts::set_limits(&app.fx.db, "acme", limits)
        .await
        .unwrap());
    let ann = app.session("ann").await;
    // 2 × 2: 4 cells and 4 totals, 4 calls; then 2 × 3 would take 6 more.
    let small = table_body(
        None,
        "ALL",
        &["WOMEN", "SMOKER = 1"],
        &["AGE >= 35", "SMOKER = 0"],
    );
    let (parts, _) = app.post(&ann, "/app/api/table", &small).await;
    assert_eq!(parts.status, StatusCode::OK);
    assert_eq!(app.fx.bills().await, 4);
    // The usage page says what is left of today's quota.
    let today = chrono::DateTime::from_timestamp_millis(app.fx.now())
        .unwrap()
        .date_naive()
        .to_string();
    let (_, usage) = app.get(&ann, "/app/api/usage").await;
    assert_eq!(
        usage["quota"],
        json!({"day": today, "calls": 5, "used": 4}),
        "{usage}"
    );
    let (parts, body) = app.post(&ann, "/app/api/table", &small).await;
    assert_eq!(parts.status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(code(&body), "rate_limited");
    assert!(parts.headers.contains_key("retry-after"));
    assert_eq!(
        app.fx.bills().await,
        4,
        "a refused table bills none of its calls"
    );
    // One call left: a single query still fits.
    let (parts, _) = app
        .post(
            &ann,
            "/app/api/crosstab",
            &request("VEC", None, "ALL", &["WOMEN"]),
        )
        .await;
    assert_eq!(parts.status, StatusCode::OK);
    // A table larger than the whole quota (3 × 3: 9 cells and 6 totals, 8 calls) would
    // never be admitted, whatever the wait: said so, not "retry tomorrow".
    let large = table_body(
        None,
        "ALL",
        &["WOMEN", "SMOKER = 1", "SMOKER = 0"],
        &["AGE >= 35", "SMOKER = 0", "WOMEN"],
    );
    let (parts, body) = app.post(&ann, "/app/api/table", &large).await;
    assert_eq!(parts.status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(code(&body), "invalid_request");
    assert!(!parts.headers.contains_key("retry-after"));
    assert_eq!(
        body["ResultDescription"],
        "This table takes 8 billed calls, more than your account's daily quota of 5: make it \
         smaller (fewer rows or columns), or ask your administrator for a larger quota."
    );
    assert_eq!(app.fx.bills().await, 5);
    let (_, usage) = app.get(&ann, "/app/api/usage").await;
    assert_eq!(usage["quota"]["used"], 5, "{usage}");
    // Tomorrow the quota starts again (yesterday's calls stay in the report).
    app.fx.clock.advance(86_400_000);
    let ann = app.session("ann").await;
    let (_, usage) = app.get(&ann, "/app/api/usage").await;
    assert_eq!(usage["quota"]["used"], 0, "{usage}");
    assert_eq!(usage["quota"]["calls"], 5, "{usage}");
    assert_ne!(usage["quota"]["day"], json!(today));
}

#[tokio::test]
async fn with_an_upstream_tables_are_refused_plainly_and_nothing_is_sent() {
    let (base, calls) = scripted_upstream(Vec::new()).await;
    let app = app_with(Some(Upstream::new(&base).unwrap())).await;
    let ann = app.session("ann").await;
    let body = table_body(None, "ALL", &["WOMEN"], &["SMOKER = 1"]);
    let (parts, answer) = app.post(&ann, "/app/api/table", &body).await;
    assert_eq!(parts.status, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
    assert_eq!(code(&answer), "not_configured");
    assert!(
        answer["ResultDescription"]
            .as_str()
            .unwrap()
            .contains("--upstream"),
        "{answer}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(app.fx.bills().await, 0);
}

/// `/app` bodies are read within the contract's 64 KiB (a table's within its own, larger
/// limit): past it, the contract's 413 with the connection closed, before anything is
/// looked up.
#[tokio::test]
async fn app_bodies_are_read_within_their_limits() {
    let app = app_with(None).await;
    let ann = app.session("ann").await;
    let huge = "x".repeat(crosstab_contract::limits::MAX_BODY_BYTES + 1);
    let (parts, body) = app.login(&huge, PASSWORD).await;
    assert_eq!(parts.status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert_eq!(code(&body), "payload_too_large");
    assert_eq!(parts.headers["connection"], "close");
    let (parts, body) = app
        .post(&ann, "/app/api/keys", &json!({"env": "test", "note": huge}))
        .await;
    assert_eq!(parts.status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    let (parts, body) = app
        .post(&ann, "/app/api/crosstab", &json!({"SurveyCode": huge}))
        .await;
    assert_eq!(parts.status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    // A table of the most rows at the longest labels is over 64 KiB, and answered.
    let label = "é".repeat(crosstab_contract::limits::MAX_TABLE_LABEL_CHARS);
    let mut table = table_body(None, "ALL", &["WOMEN"; 200], &["SMOKER = 1"]);
    for row in table["rows"].as_array_mut().unwrap() {
        row["label"] = json!(label);
    }
    assert!(table.to_string().len() > crosstab_contract::limits::MAX_BODY_BYTES);
    let (parts, body) = app.post(&ann, "/app/api/table", &table).await;
    assert_eq!(parts.status, StatusCode::OK, "{:.200}", body.to_string());
    let over = "x".repeat(crosstab_contract::limits::MAX_TABLE_BODY_BYTES);
    let (parts, body) = app
        .post(&ann, "/app/api/table", &json!({"survey": over}))
        .await;
    assert_eq!(parts.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(code(&body), "payload_too_large");
    let limit = crosstab_contract::limits::MAX_TABLE_BODY_BYTES.to_string();
    assert!(
        body["error"]["message"].as_str().unwrap().contains(&limit),
        "{body}"
    );
    // Nothing was billed but the table.
    let table_calls = crosstab_contract::app::billed_calls(200, 1, false);
    assert_eq!(app.fx.bills().await, i64::from(table_calls));
}

/// A table's bills are /v1's for the same targets two at a time: 3 × 2 is 11 targets
/// (6 cells, 3 row totals, 2 column totals), billed as 5 calls of two and one of one,
/// each with the table's survey, base and group, and the user.
#[tokio::test]
async fn a_tables_bills_say_what_each_call_asked() {
    let app = app_with(None).await;
    let ann = app.session("ann").await;
    let body = table_body(
        None,
        "ALL",
        &["WOMEN", "SMOKER = 1", "GENDER = 1"],
        &["AGE >= 35", "SMOKER = 0"],
    );
    let (parts, table) = app.post(&ann, "/app/api/table", &body).await;
    assert_eq!(parts.status, StatusCode::OK, "{table}");
    let rows: Vec<(String, Option<String>, String, i64)> =
        sqlx::query_as("SELECT survey, grp, base, targets FROM ledger ORDER BY id")
            .fetch_all(app.fx.db.pool())
            .await
            .unwrap();
    let targets: Vec<i64> = rows.iter().map(|row| row.3).collect();
    assert_eq!(targets, [2, 2, 2, 2, 2, 1]);
    assert!(
        rows.iter()
            .all(|(survey, group, base, _)| survey == "VEC" && group.is_none() && base == "ALL"),
        "{rows:?}"
    );
    let users: Vec<Option<i64>> = sqlx::query_scalar("SELECT user_id FROM ledger")
        .fetch_all(app.fx.db.pool())
        .await
        .unwrap();
    assert!(users.iter().all(Option::is_some), "{users:?}");
}

/// Behind TLS (`--public-url https://...`): pages carry HSTS, the session cookie is the
/// `__Host-` one with `Secure`, and only that name signs in (the plain one is expired).
#[tokio::test]
async fn over_https_the_session_is_a_secure_host_cookie() {
    let App { fx, .. } = app_with(None).await;
    let dir = fx.dir.path().to_path_buf();
    let router = crate::common::router_for(&fx.services, &fx.origins, None, Some(&dir), true);
    let https = App { fx, router };
    let (page, _) = https
        .send(Request::get("/").body(Body::empty()).unwrap())
        .await;
    assert!(
        page.headers.contains_key("strict-transport-security"),
        "{:?}",
        page.headers
    );
    let (parts, _) = https.login("ann", PASSWORD).await;
    assert_eq!(parts.status, StatusCode::OK);
    let cookies: Vec<&str> = parts
        .headers
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    let session = cookies
        .iter()
        .find(|c| c.starts_with("__Host-crosstab_session="))
        .unwrap_or_else(|| panic!("{cookies:?}"));
    assert!(session.contains("; Secure"), "{session}");
    assert!(session.contains("Path=/"), "{session}");
    let host_cookie = session.split(';').next().unwrap().to_owned();
    let (me, _) = https.get(&host_cookie, "/app/api/me").await;
    assert_eq!(me.status, StatusCode::OK);
    let plain = host_cookie.replacen("__Host-", "", 1);
    let (refused, _) = https.get(&plain, "/app/api/me").await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
}

/// A table sent again with its `Idempotency-Key` (the app's retry after its answer was
/// lost) gets the first answer, unbilled; the key with another table or a crosstab is
/// refused; a refused table gives its key back.
#[tokio::test]
async fn a_table_sent_again_with_its_key_is_answered_again_and_billed_once() {
    let app = app_with(None).await;
    let ann = app.session("ann").await;
    let keyed = |path: &str, key: &str, body: &Value| {
        Request::post(path)
            .header("cookie", &ann)
            .header("origin", ORIGIN)
            .header("content-type", "application/json")
            .header("idempotency-key", key)
            .body(Body::from(body.to_string()))
            .unwrap()
    };
    let replayed = |parts: &axum::http::response::Parts| {
        parts
            .headers
            .get("idempotent-replayed")
            .is_some_and(|v| v == "true")
    };
    let body = table_body(None, "ALL", &["WOMEN", "SMOKER = 1"], &["AGE >= 35"]);
    let calls = i64::from(crosstab_contract::app::billed_calls(2, 1, false));
    let before = app.fx.bills().await;
    let (first, table) = app.send(keyed("/app/api/table", "run-1", &body)).await;
    assert_eq!(first.status, StatusCode::OK, "{table}");
    assert!(!replayed(&first));
    assert_eq!(app.fx.bills().await - before, calls);
    let (again, same) = app.send(keyed("/app/api/table", "run-1", &body)).await;
    assert_eq!(again.status, StatusCode::OK, "{same}");
    assert!(replayed(&again));
    assert_eq!(same, table);
    assert_eq!(
        app.fx.bills().await - before,
        calls,
        "a replay is not billed"
    );

    // The key with another table, or with a crosstab: refused, nothing billed.
    let other = table_body(None, "ALL", &["WOMEN"], &["AGE >= 35"]);
    let crosstab = request("VEC", None, "ALL", &["WOMEN"]);
    for (path, body) in [("/app/api/table", &other), ("/app/api/crosstab", &crosstab)] {
        let (reused, envelope) = app.send(keyed(path, "run-1", body)).await;
        assert_eq!(reused.status, StatusCode::UNPROCESSABLE_ENTITY, "{path}");
        assert_eq!(code(&envelope), "idempotency_key_reused");
    }
    assert_eq!(app.fx.bills().await - before, calls);

    // A table refused after its key was taken gives it back: the same key then runs a
    // table anew.
    let refused = table_body(None, "NOBASE", &["WOMEN"], &["AGE >= 35"]);
    let (parts, envelope) = app.send(keyed("/app/api/table", "run-2", &refused)).await;
    assert_eq!(parts.status, StatusCode::BAD_REQUEST, "{envelope}");
    let (parts, _) = app.send(keyed("/app/api/table", "run-2", &other)).await;
    assert_eq!(parts.status, StatusCode::OK);
    assert!(!replayed(&parts));
    let other_calls = i64::from(crosstab_contract::app::billed_calls(1, 1, false));
    assert_eq!(app.fx.bills().await - before, calls + other_calls);
}

/// A filtered table: every figure within the filter too, its own total one more target
/// billed; a filter naming what the survey lacks is refused, unbilled, naming the filter.
#[tokio::test]
async fn a_filtered_table_bills_its_filters_total_and_refuses_unknown_names() {
    let app = app_with(None).await;
    let ann = app.session("ann").await;
    let mut body = table_body(None, "ALL", &["WOMEN", "SMOKER = 1"], &["AGE >= 35"]);
    body["filter"] = json!("SMOKER = 0");
    let before = app.fx.bills().await;
    let (parts, table) = app.post(&ann, "/app/api/table", &body).await;
    assert_eq!(parts.status, StatusCode::OK, "{table}");
    let calls = crosstab_contract::app::billed_calls(2, 1, true);
    assert_eq!(calls, 3, "2 cells + 2 + 1 totals + the filter's: 6 targets");
    assert_eq!(app.fx.bills().await - before, i64::from(calls));
    assert_eq!(table["billedCalls"], calls);
    assert_eq!(table["filter"], "SMOKER = 0");
    // The smokers' row is empty within non-smokers; the total is the filter's.
    assert_eq!(table["rowTotals"][1]["resps"], 0, "{table}");
    let key = app.fx.whole.clone();
    let filter_total = v1_one(&app, &key, None, "ALL", "SMOKER = 0").await;
    same_as_v1(&table["total"], &filter_total, "total");
    let cell = v1_one(
        &app,
        &key,
        None,
        "ALL",
        "(SMOKER = 0) AND ((WOMEN) AND (AGE >= 35))",
    )
    .await;
    same_as_v1(&table["cells"][0][0], &cell, "cell");

    let before = app.fx.bills().await;
    body["filter"] = json!("SMOKR = 0");
    let (parts, answer) = app.post(&ann, "/app/api/table", &body).await;
    assert_eq!(parts.status, StatusCode::BAD_REQUEST, "{answer}");
    assert_eq!(code(&answer), "invalid_request");
    assert_eq!(answer["error"]["field"], "filter");
    assert!(
        answer["ResultDescription"]
            .as_str()
            .unwrap()
            .contains("does not define 'SMOKR'"),
        "{answer}"
    );
    body["filter"] = json!("SMOKER =");
    let (parts, answer) = app.post(&ann, "/app/api/table", &body).await;
    assert_eq!(parts.status, StatusCode::BAD_REQUEST, "{answer}");
    assert_eq!(answer["error"]["field"], "filter");
    assert_eq!(app.fx.bills().await, before, "refusals bill nothing");
}

/// The table that spent the day's quota, its answer lost: sent again with its key, it is
/// given its answer (the key is looked at before the quota), billed once.
#[tokio::test]
async fn a_lost_table_that_spent_the_quota_is_given_again() {
    use crosstab_server::store::accounts::{self, AccountLimits};
    let app = app_with(None).await;
    let limits = AccountLimits {
        per_second: None,
        daily_quota: Some(3),
    };
    assert!(accounts::set_limits(&app.fx.db, "acme", limits)
        .await
        .unwrap());
    let ann = app.session("ann").await;
    let body = table_body(None, "ALL", &["WOMEN", "SMOKER = 1"], &["AGE >= 35"]);
    let keyed = || {
        Request::post("/app/api/table")
            .header("cookie", &ann)
            .header("origin", ORIGIN)
            .header("content-type", "application/json")
            .header("idempotency-key", "spent-it")
            .body(Body::from(body.to_string()))
            .unwrap()
    };
    let (first, table) = app.send(keyed()).await;
    assert_eq!(first.status, StatusCode::OK, "{table}");
    assert_eq!(app.fx.bills().await, 3);
    let (again, same) = app.send(keyed()).await;
    assert_eq!(again.status, StatusCode::OK, "{same}");
    assert_eq!(again.headers["idempotent-replayed"], "true");
    assert_eq!(same, table);
    assert_eq!(app.fx.bills().await, 3);
    // Without the key it is a new table, over the quota.
    let (parts, _) = app.post(&ann, "/app/api/table", &body).await;
    assert_eq!(parts.status, StatusCode::TOO_MANY_REQUESTS);
    // A filter naming what the survey lacks is refused for that, whatever the quota.
    let mut unknown = body.clone();
    unknown["filter"] = json!("SMOKR = 0");
    let (parts, answer) = app.post(&ann, "/app/api/table", &unknown).await;
    assert_eq!(parts.status, StatusCode::BAD_REQUEST, "{answer}");
    assert_eq!(answer["error"]["field"], "filter");
}
