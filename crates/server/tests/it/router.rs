//! In-process tests of every rule of the API, through the router (tower `oneshot`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::*;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use crosstab_contract::limits::MAX_BODY_BYTES;
use crosstab_contract::{vectors, ApiError, CONTRACT_VERSION, OPERATION_IDS};
use crosstab_server::keys::KeyEnv;
use crosstab_server::store::{accounts, Database};
use serde_json::{json, Value};

fn envelope(error: &ApiError) -> Value {
    serde_json::to_value(error.envelope()).unwrap()
}

#[tokio::test]
async fn every_shared_vector_through_http() {
    let fx = Fixture::new().await;
    let mut failures = Vec::new();
    let mut ok = 0;
    let mut oversized = 0;
    for (_, vector) in vectors::load() {
        let text = vector.body_text();
        // The vectors say 413 for a body over the limit, as the validator itself does.
        if text.len() > MAX_BODY_BYTES {
            oversized += 1;
        }
        let (expect_status, expect_body) = (vector.expect.status, vector.expect.body.clone());
        let (response, body) = fx.send(post(Some(&fx.whole), text)).await;
        let status = response.status().as_u16();
        if status == 200 {
            ok += 1;
        }
        if status != expect_status || !vectors::matches(&expect_body, &body) {
            failures.push(format!(
                "{}: {status} {body}\n  expected {expect_status} {expect_body}",
                vector.name
            ));
        }
    }
    assert_eq!(oversized, 1, "one vector is over the body limit");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(ok > 0);
    assert_eq!(fx.bills().await, ok, "exactly the 200s are billed");
}

#[tokio::test]
async fn unauthorized_for_every_unusable_key_and_never_billed() {
    let fx = Fixture::new().await;
    let body = request("VEC", None, "ALL", &["WOMEN"]);
    let revoked = key(&fx.db, "acme", &["VEC"], KeyEnv::Live, None).await;
    let revoked_id = revoked.split('_').nth(2).unwrap().to_owned();
    assert_eq!(
        accounts::revoke_key(&fx.db, &revoked_id).await.unwrap(),
        accounts::Revocation::Revoked
    );
    let expired = key(&fx.db, "acme", &["VEC"], KeyEnv::Live, Some(fx.now() - 1)).await;
    // Same id, another secret; and the right secret under the other environment.
    let last = if fx.whole.ends_with('A') { 'E' } else { 'A' };
    let forged = format!("{}{last}", &fx.whole[..fx.whole.len() - 1]);
    let wrong_env = fx.whole.replacen("ctx_live_", "ctx_test_", 1);
    let unknown = crosstab_server::keys::generate(KeyEnv::Live).token;
    let cases: Vec<(&str, Option<&str>)> = vec![
        ("missing", None),
        ("empty", Some("")),
        ("malformed", Some("not-a-key")),
        ("bearer", Some("Bearer abc")),
        ("unknown", Some(&unknown)),
        ("forged", Some(&forged)),
        ("wrong env", Some(&wrong_env)),
        ("revoked", Some(&revoked)),
        ("expired", Some(&expired)),
    ];
    for (name, key) in cases {
        let (response, got) = fx.post(key, &body).await;
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{name}");
        assert_eq!(got, envelope(&ApiError::Unauthorized), "{name}");
        assert!(got["error"].get("field").is_none());
        // RFC 9110: a 401 names its challenge, here the header the key goes in.
        assert_eq!(
            response.headers()["www-authenticate"],
            r#"ApiKey realm="crosstab", header="Service-Engine-Authorizer""#,
            "{name}"
        );
        assert!(!response.headers().contains_key("connection"), "{name}");
    }
    // A cookie alone never authenticates.
    let cookie = Request::post("/v1/crosstab")
        .header("content-type", "application/json")
        .header("cookie", format!("session={}; key={}", fx.whole, fx.whole))
        .body(Body::from(body.to_string()))
        .unwrap();
    let (response, _) = fx.send(cookie).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    // 401 comes before every other check.
    let garbage = Request::post("/v1/crosstab")
        .header("content-type", "text/plain")
        .body(Body::from(vec![b'x'; 100_000]))
        .unwrap();
    let (response, _) = fx.send(garbage).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    // Its body was too large to read and drop: the connection closes, saying so.
    assert_eq!(response.headers()["connection"], "close");
    assert_eq!(fx.bills().await, 0);
}

#[tokio::test]
async fn media_type_size_and_validation_in_order() {
    let fx = Fixture::new().await;
    let good = request("VEC", None, "ALL", &["WOMEN"]).to_string();
    let with_type = |ct: Option<&str>, body: Body| {
        let mut b = Request::post("/v1/crosstab").header("Service-Engine-Authorizer", &fx.whole);
        if let Some(ct) = ct {
            b = b.header("content-type", ct);
        }
        b.body(body).unwrap()
    };
    for ct in [
        None,
        Some("text/plain"),
        Some("application/xml"),
        Some("application/jsonx"),
        // JSON is UTF-8: a body said to be another charset would only fail to parse.
        Some("application/json; charset=utf-16"),
        Some("application/json; charset=\"latin1\""),
    ] {
        let (response, body) = fx.send(with_type(ct, Body::from(good.clone()))).await;
        assert_eq!(
            response.status(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "{ct:?}"
        );
        assert_eq!(body, envelope(&ApiError::UnsupportedMediaType));
        // The small body was read and dropped: the connection stays usable.
        assert!(!response.headers().contains_key("connection"));
    }
    for ct in [
        "application/json; charset=utf-8",
        "Application/JSON",
        "application/json;charset=\"UTF-8\"",
    ] {
        let (response, _) = fx.send(with_type(Some(ct), Body::from(good.clone()))).await;
        assert_eq!(response.status(), StatusCode::OK, "{ct}");
        // The answer is the caller's, paid for: no shared cache keeps it.
        assert_eq!(response.headers()["cache-control"], "no-store");
    }
    // 415 before 413 before 400.
    let huge = vec![b' '; 64 * 1024 + 1];
    let (response, _) = fx
        .send(with_type(Some("text/plain"), Body::from(huge.clone())))
        .await;
    assert_eq!(response.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    // A body left unread closes the connection, and the response says so, so that no
    // client sends its next request down a connection the server is closing.
    assert_eq!(response.headers()["connection"], "close");
    let (response, body) = fx
        .send(with_type(Some("application/json"), Body::from(huge)))
        .await;
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(body, envelope(&ApiError::PayloadTooLarge));
    assert_eq!(response.headers()["connection"], "close");
    // Without a Content-Length (streamed), the limit still holds.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        (0..80).map(|_| Ok(vec![b' '; 1024])).collect();
    let stream = Body::from_stream(futures_stream(chunks));
    let (response, _) = fx.send(with_type(Some("application/json"), stream)).await;
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    // A body that breaks off (the client's stream failed) is a 400 that closes the
    // connection, not a 413: its size was never the problem.
    let chunks = vec![
        Ok(b"{\"SurveyCode\":".to_vec()),
        Err(std::io::Error::other("connection reset")),
    ];
    let stream = Body::from_stream(futures_stream(chunks));
    let (response, body) = fx.send(with_type(Some("application/json"), stream)).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!(code(&body), "invalid_request");
    assert_eq!(response.headers()["connection"], "close");
    // Exactly 64 KiB is read (and here fails validation: padding around a bad body).
    let mut exact = b"[1]".to_vec();
    exact.resize(64 * 1024, b' ');
    let (response, body) = fx
        .send(with_type(Some("application/json"), Body::from(exact)))
        .await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!(code(&body), "invalid_request");
    for bad in ["", "{", "null", "{\"SurveyCode\":1}", "\u{FEFF}{}"] {
        let (response, body) = fx
            .send(with_type(Some("application/json"), Body::from(bad)))
            .await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{bad}");
        assert_eq!(code(&body), "invalid_request", "{bad}");
    }
    // Validation (400) before entitlement (403): a bad body naming an ungranted survey.
    let (response, body) = fx
        .post(
            Some(&fx.other),
            &request("VEC", None, "ALL", &["A", "B", "C"]),
        )
        .await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!(code(&body), "invalid_target_codes");
    assert_eq!(fx.bills().await, 3);
}

fn futures_stream(
    chunks: Vec<Result<Vec<u8>, std::io::Error>>,
) -> impl futures_core::Stream<Item = Result<Vec<u8>, std::io::Error>> + Send + 'static {
    struct Chunks(std::vec::IntoIter<Result<Vec<u8>, std::io::Error>>);
    impl futures_core::Stream for Chunks {
        type Item = Result<Vec<u8>, std::io::Error>;
        fn poll_next(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Self::Item>> {
            std::task::Poll::Ready(self.0.next())
        }
    }
    Chunks(chunks.into_iter())
}

#[tokio::test]
async fn entitlements_are_403_and_identical_for_unknown_and_not_granted() {
    let fx = Fixture::new().await;
    let forbidden = envelope(&ApiError::ForbiddenSurvey);
    let cases = [
        (
            "unknown survey",
            &fx.whole,
            request("NOPE", None, "ALL", &["WOMEN"]),
        ),
        (
            "other survey",
            &fx.other,
            request("VEC", None, "ALL", &["WOMEN"]),
        ),
        (
            "group not granted",
            &fx.north,
            request("VEC", Some("S"), "ALL", &["WOMEN"]),
        ),
        (
            "all groups needs whole",
            &fx.north,
            request("VEC", Some("_ALL_"), "ALL", &["WOMEN"]),
        ),
        (
            "absent group needs whole",
            &fx.north,
            request("VEC", None, "ALL", &["WOMEN"]),
        ),
        (
            "unknown group",
            &fx.whole,
            request("VEC", Some("EAST"), "ALL", &["WOMEN"]),
        ),
        (
            "unknown group, group key",
            &fx.north,
            request("VEC", Some("EAST"), "ALL", &["WOMEN"]),
        ),
        // Entitlement (403) before the base (400).
        (
            "403 before base",
            &fx.north,
            request("VEC", Some("S"), "TEENS", &["WOMEN"]),
        ),
        (
            "unknown survey, bad base",
            &fx.other,
            request("NOPE", None, "TEENS", &["WOMEN"]),
        ),
    ];
    for (name, key, body) in cases {
        let (response, got) = fx.post(Some(key), &body).await;
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "{name}");
        assert_eq!(got, forbidden, "{name}");
    }
    // Base after entitlement; a granted group with an unknown base is 400.
    let (response, got) = fx
        .post(
            Some(&fx.north),
            &request("VEC", Some("N"), "TEENS", &["WOMEN"]),
        )
        .await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        got,
        envelope(&ApiError::InvalidPopulationBase {
            base: "TEENS".into()
        })
    );
    assert_eq!(fx.bills().await, 0);
}

#[tokio::test]
async fn group_grant_answers_its_group_and_bills_with_details() {
    let fx = Fixture::new().await;
    // Group N = a, b, e, h; women among them b, e, h weigh 8,500 (the vector survey's note).
    let (response, body) = fx
        .post(
            Some(&fx.north),
            &request("VEC", Some("N"), "ALL", &["WOMEN", "GENDER = 1"]),
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(body["ResultCode"], 0);
    assert_eq!(
        body["Results"][0],
        json!({"WgtAud": 8.5, "Resps": 3, "Stbl": 0})
    );
    assert_eq!(body["AudienceReportUnits"], 1000);
    let request_id = response.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    // Whole-survey key, a partial (ResultCode 1) answer is still a billed 200.
    let (response, body) = fx
        .post(
            Some(&fx.whole),
            &request("VEC", Some("_ALL_"), "A35PLUS", &["NOSUCHCODE"]),
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(body["ResultCode"], 1);
    assert_eq!(fx.bills().await, 2);
    let rows = sqlx::query_as::<_, (String, String, Option<String>, String, i64, String)>(
        "SELECT a.name, l.survey, l.grp, l.base, l.targets, l.request_id FROM ledger l \
         JOIN accounts a ON a.id = l.account_id ORDER BY l.id",
    )
    .fetch_all(fx.db.pool())
    .await
    .unwrap();
    assert_eq!(
        rows[0],
        (
            "north".into(),
            "VEC".into(),
            Some("N".into()),
            "ALL".into(),
            2,
            request_id
        )
    );
    assert_eq!(rows[1].0, "acme");
    assert_eq!(rows[1].2, None, "_ALL_ is billed as no group");
    let key_ids: Vec<(String,)> = sqlx::query_as("SELECT key_id FROM ledger ORDER BY id")
        .fetch_all(fx.db.pool())
        .await
        .unwrap();
    assert!(fx.north.contains(&key_ids[0].0));
}

#[tokio::test]
async fn docs_are_the_contract_document_unauthenticated() {
    let fx = Fixture::new().await;
    let (response, body) = fx
        .send(Request::get("/v1/docs").body(Body::empty()).unwrap())
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-type"], "application/json");
    assert!(response.headers().contains_key("x-request-id"));
    assert_eq!(body["info"]["version"], CONTRACT_VERSION);
    let text = body.to_string();
    for id in OPERATION_IDS {
        assert!(text.contains(&format!("\"operationId\":\"{id}\"")), "{id}");
    }
    let expected: Value =
        serde_json::from_str(&crosstab_contract::openapi::document_json()).unwrap();
    assert_eq!(body, expected);
    assert_eq!(fx.bills().await, 0);
}

#[tokio::test]
async fn cors_preflight_and_origin_on_every_crosstab_response() {
    let fx = Fixture::new().await;
    let preflight = |origin: &str| {
        Request::options("/v1/crosstab")
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "content-type, service-engine-authorizer",
            )
            .body(Body::empty())
            .unwrap()
    };
    let (response, _) = fx.send(preflight(ORIGIN)).await;
    assert_eq!(response.status(), StatusCode::OK);
    let h = response.headers();
    assert_eq!(h["access-control-allow-origin"], ORIGIN);
    assert_eq!(h["access-control-allow-methods"], "POST, OPTIONS");
    assert_eq!(
        h["access-control-allow-headers"],
        "Content-Type, Service-Engine-Authorizer, Idempotency-Key"
    );
    assert!(h.contains_key("access-control-max-age"));
    assert_eq!(h["vary"], "Origin");
    assert!(h.contains_key("x-request-id"));
    for origin in ["http://evil.test", "null", "http://app.test.evil.test"] {
        let (response, _) = fx.send(preflight(origin)).await;
        let h = response.headers();
        for name in [
            "access-control-allow-origin",
            "access-control-allow-methods",
            "access-control-allow-headers",
            "access-control-max-age",
        ] {
            assert!(!h.contains_key(name), "{origin}: {name}");
        }
    }
    // Errors carry the allowed origin too, and nothing is billed for a preflight.
    let mut unauthenticated = post(None, "{}");
    unauthenticated
        .headers_mut()
        .insert("origin", ORIGIN.parse().unwrap());
    let (response, _) = fx.send(unauthenticated).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(response.headers()["access-control-allow-origin"], ORIGIN);
    let mut ok = post(
        Some(&fx.whole),
        request("VEC", None, "ALL", &["WOMEN"]).to_string(),
    );
    ok.headers_mut().insert("origin", ORIGIN.parse().unwrap());
    let (response, _) = fx.send(ok).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["access-control-allow-origin"], ORIGIN);
    // A page may read when to retry, whether it was answered before, and the request id.
    assert_eq!(
        response.headers()["access-control-expose-headers"],
        "Retry-After, Idempotent-Replayed, X-Request-Id"
    );
    assert_eq!(fx.bills().await, 1);
}

/// A path the API does not have: 404 in the contract's envelope (the app's page never
/// answers under `/v1` or `/app/api`), not billed.
#[tokio::test]
async fn an_unknown_api_path_is_404_in_the_envelope() {
    let fx = Fixture::new().await;
    for (method, path) in [
        ("POST", "/v1/crosstabs"),
        ("GET", "/v1/docs/"),
        ("GET", "/v1/"),
        ("GET", "/app/api/nothing"),
    ] {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header("Service-Engine-Authorizer", &fx.whole)
            .header("content-type", "application/json")
            .body(Body::from(
                request("VEC", None, "ALL", &["WOMEN"]).to_string(),
            ))
            .unwrap();
        let (response, body) = fx.send(request).await;
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{method} {path}");
        assert_eq!(body, envelope(&ApiError::NotFound), "{method} {path}");
    }
    assert_eq!(fx.bills().await, 0);
}

/// A known `/v1` path with another method: 405 in the contract's envelope, with `Allow`,
/// the origin's CORS header and a request id; never billed.
#[tokio::test]
async fn a_wrong_method_is_405_in_the_envelope() {
    let fx = Fixture::new().await;
    for (method, path, allow) in [
        ("GET", "/v1/crosstab", "POST"),
        ("DELETE", "/v1/crosstab", "POST"),
        ("POST", "/v1/docs", "GET"),
    ] {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header("origin", ORIGIN)
            .header("Service-Engine-Authorizer", &fx.whole)
            .body(Body::empty())
            .unwrap();
        let (response, body) = fx.send(request).await;
        assert_eq!(
            response.status(),
            StatusCode::METHOD_NOT_ALLOWED,
            "{method} {path}"
        );
        assert_eq!(body, envelope(&ApiError::MethodNotAllowed));
        let allowed = response.headers()["allow"].to_str().unwrap();
        assert!(allowed.contains(allow), "{method} {path}: {allowed}");
        assert_eq!(response.headers()["access-control-allow-origin"], ORIGIN);
        assert!(response.headers().contains_key("x-request-id"));
    }
    assert_eq!(
        crosstab_server::store::ledger::count(&fx.db).await.unwrap(),
        0
    );
}

#[tokio::test]
async fn every_response_has_a_request_id() {
    let fx = Fixture::new().await;
    let mut seen = std::collections::HashSet::new();
    for request in [
        Request::get("/nowhere").body(Body::empty()).unwrap(),
        Request::get("/v1/crosstab").body(Body::empty()).unwrap(),
        post(None, "{}"),
        post(
            Some(&fx.whole),
            request("VEC", None, "ALL", &["WOMEN"]).to_string(),
        ),
    ] {
        let (response, _) = fx.send(request).await;
        let id = response.headers()["x-request-id"]
            .to_str()
            .unwrap()
            .to_owned();
        assert_eq!(id.len(), 32);
        assert!(seen.insert(id));
    }
}

#[tokio::test]
async fn key_changes_by_another_process_apply_on_the_next_request() {
    let fx = Fixture::new().await;
    let body = request("VEC", None, "ALL", &["WOMEN"]);
    assert_eq!(
        fx.post(Some(&fx.whole), &body).await.0.status(),
        StatusCode::OK
    );
    // Another connection to the same database stands for the CLI in another process.
    let admin = Database::connect(&fx.url).await.unwrap();
    let id = fx.whole.split('_').nth(2).unwrap();
    accounts::revoke_key(&admin, id).await.unwrap();
    assert_eq!(
        fx.post(Some(&fx.whole), &body).await.0.status(),
        StatusCode::UNAUTHORIZED
    );
    // A new grant to an existing account applies at once, to its existing keys too.
    let body_demo = request("DEMO", None, "ADULTS", &["GENDER = 1"]);
    let before = fx.post(Some(&fx.north), &body_demo).await.0.status();
    assert_eq!(before, StatusCode::FORBIDDEN);
    key(&admin, "north", &["DEMO"], KeyEnv::Live, None).await;
    assert_eq!(
        fx.post(Some(&fx.north), &body_demo).await.0.status(),
        StatusCode::OK
    );
    // Expiry needs no change at all: a key expiring in 300 ms works, then doesn't.
    let brief = key(&admin, "acme", &["VEC"], KeyEnv::Live, Some(fx.now() + 300)).await;
    assert_eq!(
        fx.post(Some(&brief), &body).await.0.status(),
        StatusCode::OK
    );
    fx.clock.advance(300);
    assert_eq!(
        fx.post(Some(&brief), &body).await.0.status(),
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(fx.bills().await, 3);
}

#[tokio::test]
async fn a_ledger_that_cannot_be_written_answers_500_and_bills_nothing() {
    let fx = Fixture::new().await;
    let body = request("VEC", None, "ALL", &["WOMEN"]);
    assert_eq!(
        fx.post(Some(&fx.whole), &body).await.0.status(),
        StatusCode::OK
    );
    sqlx::query("ALTER TABLE ledger RENAME TO ledger_away")
        .execute(fx.db.pool())
        .await
        .unwrap();
    let (response, got) = fx.post(Some(&fx.whole), &body).await;
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(got, envelope(&ApiError::Internal));
    sqlx::query("ALTER TABLE ledger_away RENAME TO ledger")
        .execute(fx.db.pool())
        .await
        .unwrap();
    assert_eq!(fx.bills().await, 1);
    assert_eq!(
        fx.post(Some(&fx.whole), &body).await.0.status(),
        StatusCode::OK
    );
    assert_eq!(fx.bills().await, 2);
}

/// A key change whose signal file was never written (a writer that failed to replace it)
/// is still seen: the server's once-a-second look at the key revision drops the cache.
#[tokio::test]
async fn a_key_change_without_its_signal_is_seen_through_the_revision() {
    let fx = Fixture::new().await;
    let body = request("VEC", None, "ALL", &["A"]);
    fx.services.auth.follow_revision().await.unwrap();
    assert_eq!(
        fx.post(Some(&fx.whole), &body).await.0.status(),
        StatusCode::OK
    );
    // What `accounts::revoke_key` writes, without its signal file.
    let id = fx.whole.split('_').nth(2).unwrap();
    sqlx::query("UPDATE api_keys SET revoked_at = 1 WHERE id = $1")
        .bind(id)
        .execute(fx.db.pool())
        .await
        .unwrap();
    sqlx::query("UPDATE key_revision SET revision = revision + 1 WHERE id = 1")
        .execute(fx.db.pool())
        .await
        .unwrap();
    // The per-request check (the signal file) did not see it: the cached key still works.
    assert_eq!(
        fx.post(Some(&fx.whole), &body).await.0.status(),
        StatusCode::OK
    );
    fx.services.auth.follow_revision().await.unwrap();
    let (response, body) = fx.post(Some(&fx.whole), &body).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(code(&body), "unauthorized");
}

/// A signal file replaced under the server (an older crosstab renamed a new file over it
/// on every change) is mapped again by the once-a-second look; from then on a change
/// signalled through the new file takes effect on the very next request again.
#[tokio::test]
async fn a_replaced_signal_file_is_followed_again() {
    let fx = Fixture::new().await;
    let body = request("VEC", None, "ALL", &["A"]);
    assert_eq!(
        fx.post(Some(&fx.whole), &body).await.0.status(),
        StatusCode::OK
    );
    let path = fx.db.key_signal_file().unwrap();
    let temp = path.with_extension("older-writer");
    std::fs::write(&temp, "1763700000123456789\n").unwrap();
    std::fs::rename(&temp, &path).unwrap();
    fx.services.auth.follow_revision().await.unwrap();
    assert_eq!(
        fx.post(Some(&fx.whole), &body).await.0.status(),
        StatusCode::OK
    );
    let id = fx.whole.split('_').nth(2).unwrap();
    assert_eq!(
        accounts::revoke_key(&fx.db, id).await.unwrap(),
        accounts::Revocation::Revoked
    );
    // No look at the revision in between: the mapped signal alone drops the cached key.
    let (response, body) = fx.post(Some(&fx.whole), &body).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(code(&body), "unauthorized");
}

/// With `--allowed-origin '*'`, any origin's preflight gets the methods and headers, and
/// its POST the allow-origin header; every answer of /v1/crosstab varies by Origin, so a
/// cache never hands one origin's answer to another.
#[tokio::test]
async fn a_wildcard_origin_preflights_and_posts_from_anywhere_and_answers_vary() {
    let fx = Fixture::with_origins(&["*"]).await;
    let preflight = Request::options("/v1/crosstab")
        .header("origin", "https://any.test")
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "content-type, service-engine-authorizer",
        )
        .body(Body::empty())
        .unwrap();
    let (answer, _) = fx.send(preflight).await;
    assert_eq!(answer.status(), StatusCode::OK);
    let header = |name: &str| {
        answer
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    assert!(header("access-control-allow-origin").is_some());
    assert_eq!(
        header("access-control-allow-methods").as_deref(),
        Some("POST, OPTIONS")
    );
    let allowed = header("access-control-allow-headers")
        .unwrap()
        .to_ascii_lowercase();
    for name in [
        "content-type",
        "service-engine-authorizer",
        "idempotency-key",
    ] {
        assert!(allowed.contains(name), "{allowed}");
    }
    let mut sent = crate::common::post(
        Some(&fx.whole),
        request("VEC", None, "ALL", &["WOMEN"]).to_string(),
    );
    sent.headers_mut()
        .insert("origin", "https://any.test".parse().unwrap());
    let (answer, _) = fx.send(sent).await;
    assert_eq!(answer.status(), StatusCode::OK);
    assert!(answer.headers().contains_key("access-control-allow-origin"));
    // In the default fixture: no Origin, or one not allowed, gets no allow-origin, and
    // the answer still varies by Origin.
    let fx = Fixture::new().await;
    for origin in [None, Some("http://evil.test")] {
        let mut sent = crate::common::post(
            Some(&fx.whole),
            request("VEC", None, "ALL", &["WOMEN"]).to_string(),
        );
        if let Some(origin) = origin {
            sent.headers_mut().insert("origin", origin.parse().unwrap());
        }
        let (answer, _) = fx.send(sent).await;
        assert_eq!(answer.status(), StatusCode::OK);
        assert!(!answer.headers().contains_key("access-control-allow-origin"));
        let vary: Vec<String> = answer
            .headers()
            .get_all("vary")
            .iter()
            .map(|v| v.to_str().unwrap().to_ascii_lowercase())
            .collect();
        assert!(
            vary.iter().any(|v| v.contains("origin")),
            "{origin:?}: {vary:?}"
        );
    }
}
