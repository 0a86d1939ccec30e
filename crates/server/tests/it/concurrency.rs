//! 64 concurrent clients × 1,000 requests, mixed valid and invalid, against the real
//! server: every status is the expected one, and bills = 200s exactly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use crate::support::*;
use reqwest::StatusCode;
use serde_json::{json, Value};

const CLIENTS: usize = 64;
const REQUESTS_PER_CLIENT: usize = 1_000;

/// The request for slot `i` and the status it must get.
fn plan(i: usize, whole: &str, east: &str) -> (Option<String>, Value, StatusCode) {
    let ok = json!({"SurveyCode": "SMALL", "PopulationBaseCode": "ALL", "TargetCodes": ["WOMEN", "AGE >= 40"]});
    match i % 8 {
        0 => (None, ok, StatusCode::UNAUTHORIZED),
        1 => (
            Some(whole.into()),
            json!({"SurveyCode": "SMALL"}),
            StatusCode::BAD_REQUEST,
        ),
        2 => (Some(east.into()), ok, StatusCode::FORBIDDEN),
        3 => (
            Some(whole.into()),
            json!({"SurveyCode": "SMALL", "PopulationBaseCode": "KIDS", "TargetCodes": ["WOMEN"]}),
            StatusCode::BAD_REQUEST,
        ),
        4 => (
            Some(east.into()),
            json!({"SurveyCode": "SMALL", "AuthorizationGroup": "E", "PopulationBaseCode": "ALL", "TargetCodes": ["WOMEN"]}),
            StatusCode::OK,
        ),
        _ => (Some(whole.into()), ok, StatusCode::OK),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_bills_equal_successes() {
    let _heavy = HEAVY.lock().await;
    let temp = tempfile::tempdir().unwrap();
    let (data, whole) = small_data_dir(temp.path());
    let east = create_key(&data, "east", &["--grant", "SMALL:E"]);
    // Every 401 here comes from one address by design: no pacing of its failures.
    let server = Server::start(&data, &["--failed-auth-per-minute", "1000000"]);
    let url = server.url("/v1/crosstab");
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(CLIENTS)
        .build()
        .unwrap();
    let mut tasks = Vec::new();
    for client in 0..CLIENTS {
        let (http, url, whole, east) = (http.clone(), url.clone(), whole.clone(), east.clone());
        tasks.push(tokio::spawn(async move {
            let mut statuses: BTreeMap<u16, usize> = BTreeMap::new();
            let mut unexpected = Vec::new();
            for n in 0..REQUESTS_PER_CLIENT {
                let (key, body, expected) = plan(client + n, &whole, &east);
                let mut request = http
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body.to_string());
                if let Some(key) = key {
                    request = request.header("Service-Engine-Authorizer", key);
                }
                let response = request.send().await.unwrap();
                let status = response.status();
                let body: Value = response.json().await.unwrap();
                *statuses.entry(status.as_u16()).or_default() += 1;
                if status != expected {
                    unexpected.push(format!("{status} (expected {expected}): {body}"));
                }
            }
            (statuses, unexpected)
        }));
    }
    let mut totals: BTreeMap<u16, usize> = BTreeMap::new();
    let mut unexpected = Vec::new();
    for task in tasks {
        let (statuses, bad) = task.await.unwrap();
        for (status, n) in statuses {
            *totals.entry(status).or_default() += n;
        }
        unexpected.extend(bad);
    }
    assert!(
        unexpected.is_empty(),
        "{} unexpected, e.g. {:?}",
        unexpected.len(),
        &unexpected[..unexpected.len().min(5)]
    );
    let total = CLIENTS * REQUESTS_PER_CLIENT;
    let expected_ok = (0..CLIENTS)
        .flat_map(|c| (0..REQUESTS_PER_CLIENT).map(move |n| c + n))
        .filter(|i| matches!(i % 8, 4..=7))
        .count();
    assert_eq!(totals.values().sum::<usize>(), total);
    assert_eq!(
        totals.get(&200).copied().unwrap_or(0),
        expected_ok,
        "{totals:?}"
    );
    server.stop();
    let usage: Value = serde_json::from_str(&cli(&data, &["usage", "--format", "json"])).unwrap();
    let bills: i64 = usage
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["calls"].as_i64().unwrap())
        .sum();
    assert_eq!(bills, i64::try_from(expected_ok).unwrap(), "bills = 200s");
}
