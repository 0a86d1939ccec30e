//! `Idempotency-Key`: a retry of the same body by the same account is answered from the
//! first answer and billed once; the key with another body is 422; an unbilled answer
//! gives the key back; keys expire after a day.

use axum::body::Body;
use axum::http::{Request, Response, StatusCode};
use serde_json::Value;

use crate::common::{self, Fixture};

fn keyed(key: &str, idempotency_key: &str, body: &Value) -> Request<Body> {
    Request::post("/v1/crosstab")
        .header("content-type", "application/json")
        .header("Service-Engine-Authorizer", key)
        .header("Idempotency-Key", idempotency_key)
        .body(Body::from(body.to_string()))
        .unwrap()
}

fn replayed(response: &Response<()>) -> bool {
    response
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true")
}

#[tokio::test]
async fn a_retry_with_the_same_key_and_body_is_answered_again_and_billed_once() {
    let fx = Fixture::new().await;
    let body = common::request("VEC", None, "ALL", &["WOMEN", "A"]);
    let (first, answer) = fx.send(keyed(&fx.whole, "query-1", &body)).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert!(!replayed(&first));
    let (again, same) = fx.send(keyed(&fx.whole, "query-1", &body)).await;
    assert_eq!(again.status(), StatusCode::OK);
    assert!(replayed(&again));
    assert_eq!(same, answer);
    assert_eq!(fx.bills().await, 1);

    // The same key with another body: refused, nothing billed.
    let other = common::request("VEC", None, "ALL", &["WOMEN"]);
    let (reused, envelope) = fx.send(keyed(&fx.whole, "query-1", &other)).await;
    assert_eq!(reused.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(common::code(&envelope), "idempotency_key_reused");
    // Another account's key space is its own.
    let (north, _) = fx
        .send(keyed(
            &fx.north,
            "query-1",
            &common::request("VEC", Some("N"), "ALL", &["WOMEN"]),
        ))
        .await;
    assert_eq!(north.status(), StatusCode::OK);
    assert!(!replayed(&north));
    assert_eq!(fx.bills().await, 2);

    // A day later the key is forgotten: the same body is answered and billed anew.
    fx.clock.advance(24 * 60 * 60 * 1000 + 1);
    let (later, _) = fx.send(keyed(&fx.whole, "query-1", &body)).await;
    assert_eq!(later.status(), StatusCode::OK);
    assert!(!replayed(&later));
    assert_eq!(fx.bills().await, 3);
}

/// A key's caller of account `account_id` with `grants` (survey, group) and no limits.
fn caller_with(
    account_id: i64,
    grants: &[(&str, &str)],
) -> crosstab_server::service::principal::Principal {
    use crosstab_server::grants::Grants;
    use crosstab_server::service::principal::{Credential, Principal};
    Principal {
        account_id,
        account: "acme".into(),
        grants: Grants::from_rows(
            grants
                .iter()
                .map(|(s, g)| ((*s).to_owned(), (*g).to_owned())),
        ),
        limits: crosstab_server::store::accounts::AccountLimits::default(),
        credential: Credential::Key("k".into()),
    }
}

/// A kept answer is given again only to a caller whose grants still let it ask the
/// question: the key space is the account's, and one caller's grants may be narrower
/// than another's, or narrowed since.
#[tokio::test]
async fn a_kept_answer_is_given_again_only_to_a_caller_entitled_to_it() {
    use crosstab_server::service::principal::Principal;
    use crosstab_server::service::RequestId;
    use crosstab_server::store::accounts;

    let fx = Fixture::new().await;
    let account_id = accounts::account_id(&fx.db, "acme").await.unwrap().unwrap();
    let caller = |grants: &[(&str, &str)]| caller_with(account_id, grants);
    let whole = caller(&[("VEC", "*")]);
    let body = axum::body::Bytes::from(common::request("VEC", None, "ALL", &["WOMEN"]).to_string());
    let ask = |principal: &Principal| {
        let (services, body) = (fx.services.clone(), body.clone());
        let principal = principal.clone();
        async move {
            services
                .crosstab
                .answer(&principal, body, &RequestId("r".into()), Some("query-9"))
                .await
        }
    };
    let first = ask(&whole).await.unwrap();
    assert!(!first.replayed);
    let again = ask(&whole).await.unwrap();
    assert!(again.replayed);
    assert_eq!(again.body, first.body);
    for narrower in [caller(&[("VEC", "N")]), caller(&[])] {
        let refused = ask(&narrower).await.map(|answer| answer.replayed);
        assert!(
            matches!(
                refused,
                Err(crosstab_server::service::ServiceError::Rejected(
                    crosstab_contract::ApiError::ForbiddenSurvey
                ))
            ),
            "{refused:?}"
        );
    }
    assert_eq!(fx.bills().await, 1);
}

/// The same for a table: its kept answer is given again only to a caller whose grants
/// still let it ask about the table's survey and group.
#[tokio::test]
async fn a_kept_table_is_given_again_only_to_a_caller_entitled_to_it() {
    use crosstab_contract::app::TableRequest;
    use crosstab_server::service::principal::Principal;
    use crosstab_server::service::RequestId;
    use crosstab_server::store::accounts;

    let fx = Fixture::new().await;
    let account_id = accounts::account_id(&fx.db, "acme").await.unwrap().unwrap();
    let caller = |grants: &[(&str, &str)]| caller_with(account_id, grants);
    let body = serde_json::json!({"survey": "VEC", "populationBase": "ALL",
        "rows": [{"expression": "WOMEN"}], "columns": [{"expression": "A"}]})
    .to_string();
    let ask = |principal: Principal| {
        let (services, body) = (fx.services.clone(), body.clone());
        async move {
            let valid = TableRequest::from_json(body.as_bytes())
                .and_then(TableRequest::validate)
                .unwrap();
            services
                .crosstab
                .table(
                    &principal,
                    valid,
                    body.as_bytes(),
                    &RequestId("r".into()),
                    Some("table-9"),
                )
                .await
        }
    };
    let first = ask(caller(&[("VEC", "*")])).await.unwrap();
    assert!(!first.replayed);
    assert_eq!(first.billed_calls, 2);
    let again = ask(caller(&[("VEC", "*")])).await.unwrap();
    assert!(again.replayed);
    assert_eq!(again.billed_calls, 0);
    assert_eq!(again.body, first.body);
    for narrower in [caller(&[("VEC", "N")]), caller(&[])] {
        let refused = ask(narrower).await.map(|answer| answer.replayed);
        assert!(
            matches!(
                refused,
                Err(crosstab_server::service::ServiceError::Rejected(
                    crosstab_contract::ApiError::ForbiddenSurvey
                ))
            ),
            "{refused:?}"
        );
    }
    assert_eq!(fx.bills().await, 2);
}

/// Keys past their day are purged (what `serve` runs every second), and only those.
#[tokio::test]
async fn keys_past_their_day_are_purged() {
    let fx = Fixture::new().await;
    let body = common::request("VEC", None, "ALL", &["WOMEN"]);
    let stored = || async {
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM idempotency_keys")
            .fetch_one(fx.db.pool())
            .await
            .unwrap()
    };
    assert_eq!(
        fx.send(keyed(&fx.whole, "old", &body)).await.0.status(),
        StatusCode::OK
    );
    fx.clock.advance(12 * 60 * 60 * 1000);
    assert_eq!(
        fx.send(keyed(&fx.whole, "new", &body)).await.0.status(),
        StatusCode::OK
    );
    assert_eq!(fx.services.purge_expired().await.unwrap(), 0);
    assert_eq!(stored().await, 2);
    fx.clock.advance(12 * 60 * 60 * 1000 + 1);
    assert_eq!(fx.services.purge_expired().await.unwrap(), 1);
    assert_eq!(stored().await, 1);
}

#[tokio::test]
async fn an_unbilled_answer_gives_the_key_back() {
    let fx = Fixture::new().await;
    let forbidden = common::request("DEMO", None, "ADULTS", &["GENDER = 1"]);
    let (refused, _) = fx.send(keyed(&fx.whole, "k", &forbidden)).await;
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    // Given back before the refusal was answered: the key is free for another body at
    // once, so a client that corrects its body and resends at once is answered.
    let body = common::request("VEC", None, "ALL", &["WOMEN"]);
    let (retry, _) = fx.send(keyed(&fx.whole, "k", &body)).await;
    assert_eq!(retry.status(), StatusCode::OK);
    assert_eq!(fx.bills().await, 1);
}

#[tokio::test]
async fn a_malformed_key_is_refused_and_nothing_is_billed() {
    let fx = Fixture::new().await;
    let body = common::request("VEC", None, "ALL", &["WOMEN"]);
    for bad in ["x".repeat(256), "caf\u{e9}".to_owned(), String::new()] {
        let request = Request::post("/v1/crosstab")
            .header("content-type", "application/json")
            .header("Service-Engine-Authorizer", &fx.whole)
            .header("Idempotency-Key", bad.as_bytes())
            .body(Body::from(body.to_string()))
            .unwrap();
        let (response, envelope) = fx.send(request).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{bad:?}");
        assert_eq!(envelope["error"]["field"], "Idempotency-Key");
    }
    assert_eq!(fx.bills().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_key_sent_at_once_many_times_is_billed_once() {
    the_same_key_at_once_is_billed_once(Fixture::new().await).await;
}

/// The same on PostgreSQL, when `CROSSTAB_TEST_POSTGRES_URL` names one (in a database
/// of its own: the check counts every bill).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_key_sent_at_once_many_times_is_billed_once_on_postgres() {
    let Some(url) = common::postgres_url() else {
        return;
    };
    let own = common::database_of_its_own(&url).await;
    the_same_key_at_once_is_billed_once(Fixture::on(&own, tempfile::tempdir().unwrap(), &[]).await)
        .await;
}

/// Eight requests with one key and body at once: all get the one answer, one bill.
async fn the_same_key_at_once_is_billed_once(fx: Fixture) {
    let fx = std::sync::Arc::new(fx);
    let body = common::request("VEC", None, "ALL", &["WOMEN", "B"]);
    let racers: Vec<_> = (0..8)
        .map(|_| {
            let (fx, body) = (std::sync::Arc::clone(&fx), body.clone());
            tokio::spawn(async move { fx.send(keyed(&fx.whole, "once", &body)).await })
        })
        .collect();
    let mut answers = Vec::new();
    for racer in racers {
        let (response, answer) = racer.await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        answers.push(answer);
    }
    assert!(answers.windows(2).all(|w| w[0] == w[1]));
    assert_eq!(fx.bills().await, 1);
}

/// `/ready` answers 200 while the database answers and the ledger writer runs, and 503
/// (unbilled, no key) once the database is gone: within a second of a probe, its answer
/// (a flood of probes costs the pool one query a second).
#[tokio::test]
async fn ready_follows_the_database() {
    let fx = Fixture::new().await;
    let probe = || Request::get("/ready").body(Body::empty()).unwrap();
    let (ok, body) = fx.send(probe()).await;
    assert_eq!(ok.status(), StatusCode::OK);
    assert_eq!(body["ready"], true);
    fx.db.close().await;
    let (shared, _) = fx.send(probe()).await;
    assert_eq!(shared.status(), StatusCode::OK, "the last probe's answer");
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let (down, body) = fx.send(probe()).await;
    assert_eq!(down.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["ready"], false);
    assert!(
        body["reason"].as_str().unwrap().contains("database"),
        "{body}"
    );
}

/// Past the query deadline the answer is 503 `deadline_exceeded`: not billed, and its
/// idempotency key given back (a retry is computed anew).
#[tokio::test]
async fn an_answer_past_the_deadline_is_503_unbilled_and_gives_its_key_back() {
    let fx = Fixture::with_settings(crosstab_server::service::Settings {
        query_deadline: std::time::Duration::from_nanos(1),
        ..Default::default()
    })
    .await;
    let body = common::request("VEC", None, "ALL", &["WOMEN"]);
    let (late, envelope) = fx.send(keyed(&fx.whole, "d1", &body)).await;
    assert_eq!(late.status(), StatusCode::SERVICE_UNAVAILABLE, "{envelope}");
    assert_eq!(common::code(&envelope), "deadline_exceeded");
    assert_eq!(fx.bills().await, 0);
    let kept: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM idempotency_keys WHERE key = 'd1'")
        .fetch_one(fx.db.pool())
        .await
        .unwrap();
    assert_eq!(kept, 0, "the key is given back");
}

/// A table past the deadline: 503 unbilled (the engine gives it up at its next block),
/// its key given back.
#[tokio::test]
async fn a_table_past_the_deadline_is_503_unbilled_and_gives_its_key_back() {
    use crosstab_contract::app::TableRequest;
    use crosstab_server::service::{RequestId, ServiceError};
    use crosstab_server::store::accounts;
    let fx = Fixture::with_settings(crosstab_server::service::Settings {
        query_deadline: std::time::Duration::from_nanos(1),
        ..Default::default()
    })
    .await;
    let account_id = accounts::account_id(&fx.db, "acme").await.unwrap().unwrap();
    let body = serde_json::json!({"survey": "VEC", "populationBase": "ALL",
        "rows": [{"expression": "WOMEN"}], "columns": [{"expression": "A"}]})
    .to_string();
    let valid = TableRequest::from_json(body.as_bytes())
        .and_then(TableRequest::validate)
        .unwrap();
    let late = fx
        .services
        .crosstab
        .table(
            &caller_with(account_id, &[("VEC", "*")]),
            valid,
            body.as_bytes(),
            &RequestId("r".into()),
            Some("t1"),
        )
        .await
        .map(|answer| answer.replayed);
    assert!(
        matches!(
            late,
            Err(ServiceError::Rejected(
                crosstab_contract::ApiError::DeadlineExceeded
            ))
        ),
        "{late:?}"
    );
    assert_eq!(fx.bills().await, 0);
    let kept: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM idempotency_keys WHERE key = 't1'")
        .fetch_one(fx.db.pool())
        .await
        .unwrap();
    assert_eq!(kept, 0, "the key is given back");
}

/// A retry of an answered key is answered again even when the account is over its quota
/// (the answer was billed once already; refusing it would lose it).
#[tokio::test]
async fn a_replay_is_answered_over_the_quota_and_billed_once() {
    let fx = Fixture::new().await;
    fx.clear_of_midnight();
    common::daily_quota(&fx, "acme", 1).await;
    let body = common::request("VEC", None, "ALL", &["WOMEN"]);
    let (first, answer) = fx.send(keyed(&fx.whole, "q", &body)).await;
    assert_eq!(first.status(), StatusCode::OK);
    let (again, same) = fx.send(keyed(&fx.whole, "q", &body)).await;
    assert_eq!(again.status(), StatusCode::OK, "{same}");
    assert!(replayed(&again));
    assert_eq!(same, answer);
    // A new query is over the quota.
    let (over, _) = fx.send(keyed(&fx.whole, "q2", &body)).await;
    assert_eq!(over.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(fx.bills().await, 1);
}

/// The fixture with acme allowed one request a second and `quota` calls a day, and a
/// body acme may ask.
async fn one_a_second(quota: u64) -> (Fixture, Value) {
    use crosstab_server::store::accounts::{self, AccountLimits};
    let fx = Fixture::new().await;
    fx.clear_of_midnight();
    let limits = AccountLimits {
        per_second: std::num::NonZeroU32::new(1),
        daily_quota: Some(quota),
    };
    assert!(accounts::set_limits(&fx.db, "acme", limits).await.unwrap());
    (fx, common::request("VEC", None, "ALL", &["WOMEN"]))
}

/// A retry of an answered key is a request like any other for the account's rate (a
/// client retrying in a loop is paced), though it spends none of its daily quota.
#[tokio::test]
async fn a_replay_is_held_to_the_accounts_rate_and_spends_none_of_its_quota() {
    let (fx, body) = one_a_second(2).await;
    let (first, answer) = fx.send(keyed(&fx.whole, "q", &body)).await;
    assert_eq!(first.status(), StatusCode::OK);
    // The service's clock stands still: the second's one request is spent.
    let (paced, envelope) = fx.send(keyed(&fx.whole, "q", &body)).await;
    assert_eq!(paced.status(), StatusCode::TOO_MANY_REQUESTS, "{envelope}");
    assert_eq!(common::code(&envelope), "rate_limited");
    assert_eq!(paced.headers()["retry-after"], "1");
    fx.clock.advance(1_000);
    let (again, same) = fx.send(keyed(&fx.whole, "q", &body)).await;
    assert_eq!(again.status(), StatusCode::OK, "{same}");
    assert!(replayed(&again));
    assert_eq!(same, answer);
    // The quota of 2 still holds a second call: the replays spent none of it.
    fx.clock.advance(1_000);
    let (second, _) = fx.send(keyed(&fx.whole, "q2", &body)).await;
    assert_eq!(second.status(), StatusCode::OK);
    fx.clock.advance(1_000);
    let (third, _) = fx.send(keyed(&fx.whole, "q3", &body)).await;
    assert_eq!(third.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(fx.bills().await, 2);
}

/// The rate is taken before the quota's count is read: a caller past it costs no query,
/// even when its account's count is due for one (a quiet minute, then replays that spent
/// the second's request).
#[tokio::test]
async fn a_caller_past_the_rate_costs_no_read_of_the_quota() {
    let (fx, body) = one_a_second(100).await;
    let reads = fx.services.limits.tally_reads();
    let (first, _) = fx.send(keyed(&fx.whole, "q", &body)).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(fx.services.limits.tally_reads(), reads + 1);
    fx.clock.advance(61_000);
    let (again, _) = fx.send(keyed(&fx.whole, "q", &body)).await;
    assert!(replayed(&again));
    for _ in 0..5 {
        let (paced, _) = fx.send(keyed(&fx.whole, "q2", &body)).await;
        assert_eq!(paced.status(), StatusCode::TOO_MANY_REQUESTS);
    }
    assert_eq!(fx.services.limits.tally_reads(), reads + 1);
    // The next second's call reads the count it was due.
    fx.clock.advance(1_000);
    let (next, _) = fx.send(keyed(&fx.whole, "q2", &body)).await;
    assert_eq!(next.status(), StatusCode::OK);
    assert_eq!(fx.services.limits.tally_reads(), reads + 2);
    assert_eq!(fx.bills().await, 2);
}
