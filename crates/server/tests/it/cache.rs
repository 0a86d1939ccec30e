//! The response cache: answers are reused only on the very survey instance they were
//! computed on, never skip the caller's entitlement check, and are billed every time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::*;
use axum::http::StatusCode;
use crosstab_contract::validate_body;
use crosstab_engine::demo::{self, DemoConfig};
use crosstab_engine::store::SurveyStore;
use serde_json::Value;

/// What the engine answers now, on the catalog's current version, for `body`.
fn direct(fx: &Fixture, body: &Value) -> Value {
    let valid = validate_body(body.to_string().as_bytes()).unwrap();
    let survey = fx.services.catalog.get(&valid.request.survey_code).unwrap();
    // Through the same text as the HTTP body, so both parse to the same numbers.
    let text = serde_json::to_vec(&survey.crosstab(&valid).unwrap()).unwrap();
    serde_json::from_slice(&text).unwrap()
}

#[tokio::test]
async fn a_reimport_is_never_answered_from_the_old_version() {
    let fx = Fixture::new().await;
    let body = request("DEMO", None, "ADULTS", &["F2554", "GENDER = 1"]);
    let (first, old) = fx.post(Some(&fx.other), &body).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(old, direct(&fx, &body));
    // Asked once, not kept; asked again, kept.
    assert!(fx.services.crosstab.cache().is_empty());
    let (second, again) = fx.post(Some(&fx.other), &body).await;
    assert_eq!(second.status(), StatusCode::OK);
    assert_eq!(again, old);
    assert_eq!(fx.services.crosstab.cache().len(), 1);
    // Served from the cache, same numbers.
    let (third, cached) = fx.post(Some(&fx.other), &body).await;
    assert_eq!(third.status(), StatusCode::OK);
    assert_eq!(cached, old);

    // Re-import DEMO with other data; the catalog picks it up.
    let store = SurveyStore::open(fx.dir.path()).unwrap();
    let replacement = DemoConfig {
        respondents: 700,
        flags: 8,
        seed: 99,
    };
    store
        .install(&demo::compile(&replacement).unwrap())
        .unwrap();
    let refresh = fx.services.catalog.refresh();
    assert_eq!(refresh.loaded, vec!["DEMO".to_owned()]);

    let (after, new) = fx.post(Some(&fx.other), &body).await;
    assert_eq!(after.status(), StatusCode::OK);
    assert_eq!(new, direct(&fx, &body));
    assert_ne!(new, old, "the replacement has other numbers");
    // A body kept before is known: the new answer replaces the old one at once, and is
    // what is cached from now on.
    assert_eq!(fx.services.crosstab.cache().len(), 1);
    let (_, cached_new) = fx.post(Some(&fx.other), &body).await;
    assert_eq!(cached_new, new);
    assert_eq!(fx.services.crosstab.cache().len(), 1);
    assert_eq!(fx.bills().await, 5);
}

#[tokio::test]
async fn a_cached_answer_still_checks_the_callers_grants() {
    let fx = Fixture::new().await;
    let whole_survey = request("VEC", None, "ALL", &["WOMEN"]);
    let north = request("VEC", Some("N"), "ALL", &["WOMEN"]);
    // Each asked twice, so each is kept.
    for body in [&whole_survey, &whole_survey, &north, &north] {
        assert_eq!(
            fx.post(Some(&fx.whole), body).await.0.status(),
            StatusCode::OK
        );
    }
    assert_eq!(fx.services.crosstab.cache().len(), 2);
    // Both bodies are cached now; other callers still get what their grants allow.
    for (key, body, status) in [
        (&fx.north, &whole_survey, StatusCode::FORBIDDEN),
        (&fx.other, &whole_survey, StatusCode::FORBIDDEN),
        (&fx.other, &north, StatusCode::FORBIDDEN),
        (&fx.north, &north, StatusCode::OK),
    ] {
        let (response, value) = fx.post(Some(key), body).await;
        assert_eq!(response.status(), status, "{value}");
        if status == StatusCode::FORBIDDEN {
            assert_eq!(code(&value), "forbidden_survey");
        }
    }
    let (_, missing_key) = fx.post(None, &whole_survey).await;
    assert_eq!(code(&missing_key), "unauthorized");
    // Exactly the 200s are billed.
    assert_eq!(fx.bills().await, 5);
}

#[tokio::test]
async fn every_cached_answer_is_billed_and_identical() {
    let fx = Fixture::new().await;
    let body = request("VEC", None, "ALL", &["WOMEN", "NOPE"]);
    let mut answers = Vec::new();
    for _ in 0..5 {
        let (response, value) = fx.post(Some(&fx.whole), &body).await;
        assert_eq!(response.status(), StatusCode::OK);
        answers.push(value);
    }
    assert!(answers.windows(2).all(|pair| pair[0] == pair[1]));
    assert_eq!(answers[0], direct(&fx, &body));
    assert_eq!(fx.services.crosstab.cache().len(), 1);
    assert_eq!(fx.bills().await, 5);
}

#[tokio::test]
async fn answers_survey_sets_and_keys_count_against_one_budget() {
    let fx = Fixture::new().await;
    let idle = fx.memory.used();
    let body = request("VEC", None, "ALL", &["WOMEN", "NOPE"]);
    let (response, _) = fx.post(Some(&fx.whole), &body).await;
    assert_eq!(response.status(), StatusCode::OK);
    let one = fx.memory.used();
    // The base's and the named code's sets, and the key.
    assert!(one > idle, "{one} after one answer, {idle} before");
    // The same body again: its answer is kept now.
    assert_eq!(
        fx.post(Some(&fx.whole), &body).await.0.status(),
        StatusCode::OK
    );
    let kept = fx.memory.used();
    assert!(kept > one, "{kept} with the answer kept, {one} before");
    // A composite target asked twice is kept as a set: more bytes again.
    let composite = request("VEC", None, "ALL", &["WOMEN OR NOT WOMEN"]);
    for _ in 0..2 {
        let other = request("VEC", None, "ALL", &["WOMEN OR NOT WOMEN", "WOMEN"]);
        assert_eq!(
            fx.post(Some(&fx.whole), &other).await.0.status(),
            StatusCode::OK
        );
    }
    assert_eq!(
        fx.post(Some(&fx.whole), &composite).await.0.status(),
        StatusCode::OK
    );
    assert!(fx.memory.used() > kept);
    assert!(fx.memory.used() <= fx.memory.limit());
    // A change of keys drops the key cache, and gives its bytes back.
    let before = fx.memory.used();
    fx.services.auth.changed();
    assert!(fx.memory.used() < before);
}

/// A bill made from the response cache records what was asked, as a computed one does:
/// the survey, group, base, number of targets, key and the response's own request id.
#[tokio::test]
async fn a_cached_answer_is_billed_with_its_own_request() {
    let fx = Fixture::new().await;
    let body = request("VEC", Some("N"), "ALL", &["WOMEN", "GENDER = 1"]);
    let (first, _) = fx.post(Some(&fx.north), &body).await;
    let (second, _) = fx.post(Some(&fx.north), &body).await;
    assert_eq!(
        fx.services.crosstab.cache().len(),
        1,
        "the second answer was kept"
    );
    let (third, _) = fx.post(Some(&fx.north), &body).await;
    assert_eq!(
        [first.status(), second.status(), third.status()],
        [StatusCode::OK; 3]
    );
    let ids: Vec<String> = [&first, &second, &third]
        .iter()
        .map(|r| r.headers()["x-request-id"].to_str().unwrap().to_owned())
        .collect();
    assert!(ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2]);
    let key_id = fx.north.split('_').nth(2).unwrap().to_owned();
    let rows: Vec<(String, Option<String>, String, i64, String, String)> = sqlx::query_as(
        "SELECT survey, grp, base, targets, key_id, request_id FROM ledger ORDER BY id",
    )
    .fetch_all(fx.db.pool())
    .await
    .unwrap();
    let expected = |id: &str| {
        (
            "VEC".to_owned(),
            Some("N".to_owned()),
            "ALL".to_owned(),
            2,
            key_id.clone(),
            id.to_owned(),
        )
    };
    assert_eq!(rows, ids.iter().map(|id| expected(id)).collect::<Vec<_>>());
}
