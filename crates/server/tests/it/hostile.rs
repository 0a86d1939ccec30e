//! Clients that misbehave: slow heads and bodies, idle and surplus connections, floods of
//! random keys, callers over their rate or quota, and a shutdown with stuck connections.
//! None of them stops a paying client or costs a wrong bill.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use crosstab_server::keys::{self, KeyEnv};
use crosstab_server::store::accounts::{self, AccountLimits};
use serde_json::json;

use crate::common::{self, Fixture};
use crate::support::*;

/// Reads until the server closes the connection (or `within` passes: `None`); returns
/// what it sent and when it closed.
fn until_closed(stream: &mut TcpStream, within: Duration) -> Option<(String, Duration)> {
    let started = Instant::now();
    stream.set_read_timeout(Some(within)).unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => {
                return Some((
                    String::from_utf8_lossy(&seen).into_owned(),
                    started.elapsed(),
                ))
            }
            Ok(n) => seen.extend_from_slice(&buf[..n]),
            Err(error) if error.kind() == std::io::ErrorKind::ConnectionReset => {
                return Some((
                    String::from_utf8_lossy(&seen).into_owned(),
                    started.elapsed(),
                ))
            }
            Err(_) => return None,
        }
    }
}

fn billed_post(server: &Server, key: &str) -> reqwest::blocking::Response {
    reqwest::blocking::Client::new()
        .post(server.url("/v1/crosstab"))
        .header("Service-Engine-Authorizer", key)
        .json(
            &json!({"SurveyCode": "SMALL", "PopulationBaseCode": "ALL", "TargetCodes": ["WOMEN"]}),
        )
        .send()
        .unwrap()
}

fn bills(data: &std::path::Path) -> i64 {
    let usage: serde_json::Value =
        serde_json::from_str(&cli(data, &["usage", "--format", "json"])).unwrap();
    usage
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["calls"].as_i64().unwrap())
        .sum()
}

#[test]
fn slow_heads_and_slow_bodies_are_closed_at_their_deadlines() {
    let temp = tempfile::tempdir().unwrap();
    let (data, key) = small_data_dir(temp.path());
    let server = Server::start(
        &data,
        &["--header-read-timeout", "1", "--body-timeout", "1"],
    );
    // Half a head, then nothing.
    let mut head = TcpStream::connect(server.addr).unwrap();
    head.write_all(b"POST /v1/crosstab HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    // A whole head, then a trickle of a body that would take far longer than its deadline.
    let mut body = TcpStream::connect(server.addr).unwrap();
    write!(
        body,
        "POST /v1/crosstab HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Service-Engine-Authorizer: {key}\r\nContent-Length: 200\r\n\r\n{{\"Survey"
    )
    .unwrap();
    let trickle = {
        let mut body = body.try_clone().unwrap();
        std::thread::spawn(move || {
            for _ in 0..20 {
                std::thread::sleep(Duration::from_millis(200));
                if body.write_all(b" ").is_err() {
                    return;
                }
            }
        })
    };
    let (sent, after) =
        until_closed(&mut head, Duration::from_secs(5)).expect("slow head kept open");
    assert!(
        sent.is_empty() || sent.starts_with("HTTP/1.1 408"),
        "{sent}"
    );
    assert!(
        after >= Duration::from_millis(800),
        "closed after {after:?}"
    );
    let (sent, after) =
        until_closed(&mut body, Duration::from_secs(5)).expect("slow body kept open");
    assert!(sent.starts_with("HTTP/1.1 408"), "{sent}");
    assert!(sent.contains("request_timeout"), "{sent}");
    assert!(after < Duration::from_secs(3), "closed after {after:?}");
    trickle.join().unwrap();
    // Meanwhile and after, a paying client is served, and only it is billed.
    assert_eq!(billed_post(&server, &key).status(), reqwest::StatusCode::OK);
    server.stop();
    assert_eq!(bills(&data), 1);
}

#[test]
fn idle_connections_do_not_stop_a_paying_client_and_surplus_ones_are_closed() {
    let temp = tempfile::tempdir().unwrap();
    let (data, key) = small_data_dir(temp.path());
    let server = Server::start(&data, &["--max-connections", "1000"]);
    let idle: Vec<TcpStream> = (0..999)
        .map(|_| TcpStream::connect(server.addr).unwrap())
        .collect();
    // The last slot serves a paying client on one keep-alive connection.
    let client = reqwest::blocking::Client::builder()
        .pool_max_idle_per_host(1)
        .build()
        .unwrap();
    let request = || {
        client
            .post(server.url("/v1/crosstab"))
            .header("Service-Engine-Authorizer", &key)
            .json(&json!({"SurveyCode": "SMALL", "PopulationBaseCode": "ALL", "TargetCodes": ["WOMEN"]}))
            .send()
            .unwrap()
            .status()
    };
    for _ in 0..50 {
        assert_eq!(request(), reqwest::StatusCode::OK);
    }
    // Every slot is taken: one more connection is closed as soon as it is accepted.
    let mut surplus = TcpStream::connect(server.addr).unwrap();
    surplus
        .write_all(b"GET /v1/docs HTTP/1.1\r\nHost: x\r\n\r\n")
        .ok();
    let (sent, _) = until_closed(&mut surplus, Duration::from_secs(5)).expect("surplus kept open");
    assert!(sent.is_empty(), "{sent}");
    drop(idle);
    server.stop();
    assert_eq!(bills(&data), 50);
}

/// A client that sends requests and never reads the answers: once the connection has
/// moved nothing either way for the idle time, it is closed mid-answer, not kept waiting
/// for a reader that never comes (holding a connection slot for ever).
#[test]
fn a_client_that_never_reads_its_answers_gives_its_slot_back_after_the_idle_time() {
    let temp = tempfile::tempdir().unwrap();
    let (data, _key) = small_data_dir(temp.path());
    let server = Server::start(&data, &["--idle-timeout", "1", "--max-connections", "1"]);
    let mut stalled = TcpStream::connect(server.addr).unwrap();
    // Pipelined: far more answer than the sockets' buffers hold.
    let one = b"GET /v1/docs HTTP/1.1\r\nHost: x\r\n\r\n";
    stalled.write_all(&one.repeat(4000)).unwrap();
    // Two idle times: one to start closing, one more with nothing moving.
    std::thread::sleep(Duration::from_secs(4));
    // The one slot is free again: the next client is served.
    let mut next = TcpStream::connect(server.addr).unwrap();
    next.write_all(b"GET /v1/docs HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let (sent, _) = until_closed(&mut next, Duration::from_secs(5)).expect("next kept open");
    assert!(sent.starts_with("HTTP/1.1 200"), "{:.200}", sent);
    drop(stalled);
    server.stop();
}

/// Connections refused at the connection limit are said once a second with a count, and
/// those after the last line are said a second later even when no more come (they were
/// lost until the next refusal).
#[test]
fn refusals_at_the_connection_limit_are_all_counted_in_the_log() {
    let temp = tempfile::tempdir().unwrap();
    let (data, _key) = small_data_dir(temp.path());
    let log = temp.path().join("server.log");
    let server = Server::start_logging_to(&data, &["--max-connections", "1"], &log);
    let mut holder = TcpStream::connect(server.addr).unwrap();
    holder
        .write_all(b"GET /v1/docs HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    holder
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    assert!(
        holder.read(&mut [0u8; 64]).unwrap() > 0,
        "the holder is served"
    );
    for _ in 0..5 {
        let mut refused = TcpStream::connect(server.addr).unwrap();
        assert!(until_closed(&mut refused, Duration::from_secs(5)).is_some());
    }
    std::thread::sleep(Duration::from_millis(1500));
    server.stop();
    let text = std::fs::read_to_string(&log).unwrap();
    let counts: Vec<u64> = text
        .lines()
        .filter(|line| line.contains("refused at the connection limit"))
        .map(|line| {
            let at = line.find("refused=").expect("a count") + "refused=".len();
            let digits: String = line[at..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse().unwrap()
        })
        .collect();
    assert_eq!(counts.iter().sum::<u64>(), 5, "{text}");
    assert_eq!(
        counts.len(),
        2,
        "one line at once, one for the rest: {text}"
    );
    drop(holder);
}

/// A request still computing when its connection has been idle past the idle time goes
/// on to its answer (here its bill waits on a database another process holds locked):
/// only a connection whose answer a client will not read is dropped.
#[test]
fn a_request_still_computing_past_the_idle_time_is_answered() {
    let temp = tempfile::tempdir().unwrap();
    let (data, key) = small_data_dir(temp.path());
    let server = Server::start(&data, &["--idle-timeout", "1"]);
    // Warmed: the key is known, so only the bill's commit waits below.
    assert_eq!(billed_post(&server, &key).status(), reqwest::StatusCode::OK);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let url = crosstab_server::store::default_url(&data);
    let (db, mut holder) = runtime.block_on(async {
        let db = crosstab_server::store::Database::connect(&url)
            .await
            .unwrap();
        let mut holder = db.pool().acquire().await.unwrap();
        sqlx::query("BEGIN IMMEDIATE")
            .execute(&mut *holder)
            .await
            .unwrap();
        (db, holder)
    });
    let started = Instant::now();
    let asking = std::thread::spawn({
        let (url, key) = (server.url("/v1/crosstab"), key.clone());
        move || {
            let answer = reqwest::blocking::Client::new()
                .post(url)
                .header("Service-Engine-Authorizer", key)
                .json(&json!({"SurveyCode": "SMALL", "PopulationBaseCode": "ALL", "TargetCodes": ["MEN"]}))
                .send()
                .map(|answer| answer.status());
            (answer, started.elapsed())
        }
    });
    // Three idle times with nothing moving on the connection.
    std::thread::sleep(Duration::from_millis(3500));
    runtime.block_on(async {
        sqlx::query("ROLLBACK").execute(&mut *holder).await.unwrap();
        drop(holder);
        db.close().await;
    });
    let (answer, took) = asking.join().unwrap();
    assert_eq!(answer.unwrap(), reqwest::StatusCode::OK, "after {took:?}");
    assert!(
        took >= Duration::from_secs(3),
        "{took:?}: the bill did not wait"
    );
    server.stop();
    assert_eq!(bills(&data), 2);
}

/// SIGTERM while connections hang mid-body: the server waits for them only as long as
/// its shutdown grace, exits cleanly, and every 200 a client got is billed.
#[test]
fn sigterm_with_stuck_connections_exits_within_the_grace_with_every_bill_committed() {
    let temp = tempfile::tempdir().unwrap();
    let (data, key) = small_data_dir(temp.path());
    let server = Server::start(&data, &["--shutdown-grace", "1", "--body-timeout", "60"]);
    let stuck: Vec<TcpStream> = (0..20)
        .map(|_| {
            let mut stream = TcpStream::connect(server.addr).unwrap();
            write!(
                stream,
                "POST /v1/crosstab HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                 Service-Engine-Authorizer: {key}\r\nContent-Length: 100\r\n\r\n{{"
            )
            .unwrap();
            stream
        })
        .collect();
    let oks = (0..20)
        .filter(|_| billed_post(&server, &key).status() == reqwest::StatusCode::OK)
        .count();
    let started = Instant::now();
    server.stop();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "stopped after {:?}",
        started.elapsed()
    );
    drop(stuck);
    assert_eq!(bills(&data), i64::try_from(oks).unwrap());
}

#[test]
fn an_address_that_fails_authentication_too_often_gets_429_for_each_further_failure() {
    let temp = tempfile::tempdir().unwrap();
    let (data, key) = small_data_dir(temp.path());
    let server = Server::start(&data, &["--failed-auth-per-minute", "5"]);
    for _ in 0..5 {
        let forged = keys::generate(KeyEnv::Live).token;
        assert_eq!(
            billed_post(&server, &forged).status(),
            reqwest::StatusCode::UNAUTHORIZED
        );
    }
    let over = billed_post(&server, &keys::generate(KeyEnv::Live).token);
    assert_eq!(over.status(), reqwest::StatusCode::TOO_MANY_REQUESTS);
    let wait: u64 = over.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&wait), "{wait}");
    let body: serde_json::Value = over.json().unwrap();
    assert_eq!(body["error"]["code"], "rate_limited");
    // Good credentials from that address still work (a shared address is not locked out).
    assert_eq!(billed_post(&server, &key).status(), reqwest::StatusCode::OK);
    server.stop();
    assert_eq!(bills(&data), 1);
}

/// Whether each of `answers`, the refusals after a connection's free ones, waited its
/// pause at least: 10 ms, then 10 ms more each. (A lower bound however busy the host;
/// without the pauses, five answers on a loaded host would not take 10, 20, ... 50 ms.)
fn paced(answers: &[Duration]) -> bool {
    (1..)
        .zip(answers)
        .all(|(n, took)| *took >= Duration::from_millis(10 * n))
}

#[test]
fn a_connection_that_keeps_sending_bad_keys_is_slowed_and_others_are_not() {
    let temp = tempfile::tempdir().unwrap();
    let (data, key) = small_data_dir(temp.path());
    // The address's own pace out of the way: this is the connection's.
    let server = Server::start(&data, &["--failed-auth-per-minute", "1000000000"]);
    let one_connection = reqwest::blocking::Client::builder()
        .pool_max_idle_per_host(1)
        .build()
        .unwrap();
    let post = |client: &reqwest::blocking::Client, key: &str| {
        client
            .post(server.url("/v1/crosstab"))
            .header("Service-Engine-Authorizer", key)
            .json(&json!({"SurveyCode": "SMALL", "PopulationBaseCode": "ALL", "TargetCodes": ["WOMEN"]}))
            .send()
            .unwrap()
            .status()
    };
    // Sends `n` forged keys on the one connection; how long each answer took.
    let refused = |n: usize| -> Vec<Duration> {
        (0..n)
            .map(|_| {
                let forged = keys::generate(KeyEnv::Live).token;
                let started = Instant::now();
                assert_eq!(
                    post(&one_connection, &forged),
                    reqwest::StatusCode::UNAUTHORIZED
                );
                started.elapsed()
            })
            .collect()
    };
    // Sixteen refusals in a row are answered at once; then each further request on that
    // connection waits 10 ms more than the last.
    let unpaused = refused(16);
    let slowed = refused(5);
    assert!(paced(&slowed), "{slowed:?} after {unpaused:?} unpaused");
    // Another connection from the same address is not slowed: its first request is
    // answered although the slowed one is still counting.
    assert_eq!(billed_post(&server, &key).status(), reqwest::StatusCode::OK);
    // Good credentials on the slowed connection are answered, and start the count over.
    assert_eq!(post(&one_connection, &key), reqwest::StatusCode::OK);
    let free: Duration = refused(16).iter().sum();
    server.stop();
    assert_eq!(bills(&data), 2);
    // Sixteen free refusals again, none paused (paused, they would take 1.36 s at least).
    assert!(free < Duration::from_millis(1360), "{free:?}");
}

#[test]
fn an_address_that_tries_too_many_sign_ins_waits() {
    let temp = tempfile::tempdir().unwrap();
    let (data, _) = small_data_dir(temp.path());
    let server = Server::start(&data, &["--sign-in-per-minute", "3"]);
    let client = reqwest::blocking::Client::new();
    let login = |name: &str| app_login(&client, &server, name, "wrong password");
    for n in 0..3 {
        assert_eq!(
            login(&format!("name{n}")).status(),
            reqwest::StatusCode::UNAUTHORIZED
        );
    }
    let over = login("another");
    assert_eq!(over.status(), reqwest::StatusCode::TOO_MANY_REQUESTS);
    assert!(over.headers().contains_key("retry-after"));
    let body: serde_json::Value = over.json().unwrap();
    assert_eq!(body["error"]["code"], "too_many_attempts");
    server.stop();
}

#[tokio::test]
async fn over_its_rate_or_daily_quota_an_account_gets_429_and_nothing_is_billed() {
    let fx = Fixture::new().await;
    fx.clear_of_midnight();
    let body = common::request("VEC", None, "ALL", &["WOMEN"]);
    let limits = |per_second, daily_quota| AccountLimits {
        per_second,
        daily_quota,
    };
    assert!(
        accounts::set_limits(&fx.db, "acme", limits(NonZeroU32::new(2), None))
            .await
            .unwrap()
    );
    // 2 a second: two at once, then one every 500 ms on the service's clock, which
    // stands still here until the test moves it.
    let post = || async {
        let (response, got) = fx.post(Some(&fx.whole), &body).await;
        if response.status() == StatusCode::TOO_MANY_REQUESTS {
            assert_eq!(response.headers()["retry-after"], "1");
            assert_eq!(common::code(&got), "rate_limited");
        }
        response.status()
    };
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(post().await);
    }
    use StatusCode as S;
    let (ok, over) = (S::OK, S::TOO_MANY_REQUESTS);
    assert_eq!(statuses, [ok, ok, over, over, over]);
    fx.clock.advance(499);
    assert_eq!(post().await, over);
    fx.clock.advance(1);
    assert_eq!(post().await, ok);
    assert_eq!(post().await, over);
    assert_eq!(fx.bills().await, 3);

    // A daily quota counts the calls already billed today, and rejected calls use none.
    assert!(accounts::set_limits(&fx.db, "north", limits(None, Some(3)))
        .await
        .unwrap());
    let north = common::request("VEC", Some("N"), "ALL", &["WOMEN"]);
    let refused = common::request("VEC", Some("S"), "ALL", &["WOMEN"]);
    assert_eq!(
        fx.post(Some(&fx.north), &refused).await.0.status(),
        StatusCode::FORBIDDEN
    );
    for _ in 0..3 {
        assert_eq!(
            fx.post(Some(&fx.north), &north).await.0.status(),
            StatusCode::OK
        );
    }
    let (response, body) = fx.post(Some(&fx.north), &north).await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    // The same code as the rate's, said apart in words.
    assert_eq!(common::code(&body), "rate_limited");
    let said = body["error"]["message"].as_str().unwrap();
    assert!(
        said.starts_with("The account's daily quota of billed calls is used: retry in "),
        "{said}"
    );
    let wait: u64 = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=86_400).contains(&wait), "{wait}");
    // Over its quota, a request refused for what it asks is still refused for that (as
    // it will be tomorrow), not told to wait a day: invalid, not entitled, unknown base.
    let invalid = common::request("VEC", Some("N"), "ALL", &[]);
    let unknown_base = common::request("VEC", Some("N"), "NOPE", &["WOMEN"]);
    for (body, status) in [
        (&invalid, StatusCode::BAD_REQUEST),
        (&refused, StatusCode::FORBIDDEN),
        (&unknown_base, StatusCode::BAD_REQUEST),
    ] {
        assert_eq!(fx.post(Some(&fx.north), body).await.0.status(), status);
    }
    assert_eq!(fx.bills().await, 6);
    // The next UTC day, the quota starts again.
    fx.clock.advance(86_400_000);
    assert_eq!(
        fx.post(Some(&fx.north), &north).await.0.status(),
        StatusCode::OK
    );
}

/// A rate of 0 can't be set (`crosstab account limits` refuses it); one written into
/// the database by hand is damage to report, not a rate of 1 a second to apply.
#[tokio::test]
async fn a_stored_rate_of_zero_is_a_fault_not_a_rate() {
    let fx = Fixture::new().await;
    let body = common::request("VEC", None, "ALL", &["WOMEN"]);
    let account_id = accounts::account_id(&fx.db, "acme").await.unwrap().unwrap();
    sqlx::query(
        "INSERT INTO account_limits (account_id, per_second, daily_quota) VALUES ($1, 0, NULL)",
    )
    .bind(account_id)
    .execute(fx.db.pool())
    .await
    .unwrap();
    assert_fault_unbilled(&fx, &body, "a rate of 0").await;
    assert!(matches!(
        accounts::limits_of(&fx.db, account_id).await,
        Err(crosstab_server::store::DbError::Corrupt(_))
    ));
}

/// A key row this server could not have written (a hash that is no hex, an unknown
/// environment) is damage to report, a 500, not a 401 telling the caller its key is bad.
#[tokio::test]
async fn a_damaged_key_row_is_a_fault_not_a_refusal() {
    let body = common::request("VEC", None, "ALL", &["WOMEN"]);
    for (column, value) in [("secret_hash", "not hex"), ("env", "staging")] {
        let fx = Fixture::new().await;
        let key_id = crosstab_server::keys::parse(&fx.whole)
            .unwrap()
            .id
            .to_owned();
        sqlx::query(&format!("UPDATE api_keys SET {column} = $1 WHERE id = $2"))
            .bind(value)
            .bind(&key_id)
            .execute(fx.db.pool())
            .await
            .unwrap();
        assert_fault_unbilled(&fx, &body, column).await;
    }
}

/// `body` from the whole-survey key is a 500 (damage of ours, reported), billed nothing.
async fn assert_fault_unbilled(fx: &Fixture, body: &serde_json::Value, what: &str) {
    let (response, got) = fx.post(Some(&fx.whole), body).await;
    assert_eq!(
        response.status(),
        StatusCode::INTERNAL_SERVER_ERROR,
        "{what}: {got}"
    );
    assert_eq!(fx.bills().await, 0, "{what}");
}

/// Replicas share one ledger: calls another replica billed count against the quota here
/// once the counts are brought in step (every second in `serve`, and before the first
/// call after a quiet minute), counted once however old they grow.
#[tokio::test]
async fn a_daily_quota_counts_the_calls_other_replicas_billed() {
    use crosstab_server::store::ledger::{Bill, Caller, Ledger};

    let fx = Fixture::new().await;
    fx.clear_of_midnight();
    let quota = |account, calls| {
        let limits = AccountLimits {
            per_second: None,
            daily_quota: Some(calls),
        };
        accounts::set_limits(&fx.db, account, limits)
    };
    assert!(quota("north", 7).await.unwrap());
    assert!(quota("acme", 4).await.unwrap());
    let north = common::request("VEC", Some("N"), "ALL", &["WOMEN"]);
    let whole = common::request("VEC", None, "ALL", &["WOMEN"]);
    let post = |key: &String, body: &serde_json::Value| {
        let (fx, key, body) = (&fx, key.clone(), body.clone());
        async move { fx.post(Some(&key), &body).await.0.status() }
    };
    // `calls` billed now to the account of `key` by another replica, into the same ledger.
    let elsewhere = |key: &'static str, calls: usize| {
        let fx = &fx;
        async move {
            let token = if key == "north" { &fx.north } else { &fx.whole };
            let account_id = accounts::account_id(&fx.db, key).await.unwrap().unwrap();
            let (ledger, writer) = Ledger::start(fx.db.clone(), fx.clock.clone());
            for n in 0..calls {
                let bill = Bill {
                    account_id,
                    caller: Caller::Key(token.split('_').nth(2).unwrap().into()),
                    survey: "VEC".into(),
                    group: None,
                    base: "ALL".into(),
                    targets: 1,
                    request_id: format!("elsewhere-{key}-{n}").into(),
                };
                ledger.bill(bill).await.unwrap();
            }
            drop(ledger);
            writer.finish().await;
        }
    };

    // In step every second: 1 here, 5 elsewhere, 1 here, and the quota of 7 is used.
    assert_eq!(post(&fx.north, &north).await, StatusCode::OK);
    elsewhere("north", 5).await;
    fx.services.limits.share_quotas().await.unwrap();
    assert_eq!(post(&fx.north, &north).await, StatusCode::OK);
    assert_eq!(post(&fx.north, &north).await, StatusCode::TOO_MANY_REQUESTS);

    // After a quiet minute, the next call reads the ledger first, counting the calls
    // made meanwhile once, now settled: 1 here, 2 elsewhere, 1 here of 4.
    assert_eq!(post(&fx.whole, &whole).await, StatusCode::OK);
    elsewhere("acme", 2).await;
    fx.clock.advance(180_000);
    assert_eq!(post(&fx.whole, &whole).await, StatusCode::OK);
    assert_eq!(post(&fx.whole, &whole).await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(fx.bills().await, 11);

    // An account refused all along is read from the ledger once a minute, not once per
    // refusal: hammering at a quota costs the shared database nothing more.
    fx.clock.advance(61_000);
    let reads = fx.services.limits.tally_reads();
    for _ in 0..20 {
        assert_eq!(post(&fx.whole, &whole).await, StatusCode::TOO_MANY_REQUESTS);
    }
    assert_eq!(fx.services.limits.tally_reads(), reads + 1);
}

#[tokio::test]
async fn a_flood_of_random_keys_reads_no_key_from_the_database() {
    let fx = Fixture::new().await;
    let body = common::request("VEC", None, "ALL", &["WOMEN"]);
    assert_eq!(
        fx.post(Some(&fx.whole), &body).await.0.status(),
        StatusCode::OK
    );
    let reads = fx.services.auth.key_reads();
    for _ in 0..500 {
        let forged = keys::generate(KeyEnv::Live).token;
        assert_eq!(
            fx.post(Some(&forged), &body).await.0.status(),
            StatusCode::UNAUTHORIZED
        );
    }
    assert_eq!(
        fx.services.auth.key_reads(),
        reads,
        "no read per unknown key"
    );
    assert_eq!(
        fx.post(Some(&fx.whole), &body).await.0.status(),
        StatusCode::OK
    );
    // A key created after the flood is known at once (the set follows key changes).
    let fresh = common::key(&fx.db, "acme", &[], KeyEnv::Live, None).await;
    assert_eq!(
        fx.post(Some(&fresh), &body).await.0.status(),
        StatusCode::OK
    );
}

#[tokio::test]
async fn the_app_gets_security_headers_and_the_api_does_not_need_them() {
    let fx = Fixture::new().await;
    let dir = tempfile::tempdir().unwrap();
    let loader = "import init from '/app.js'; await init();";
    std::fs::write(
        dir.path().join("index.html"),
        format!("<!doctype html><script type=\"module\">{loader}</script>"),
    )
    .unwrap();
    let router = fx.router_with(None, Some(dir.path()));
    let get = |path: &'static str| {
        let router = router.clone();
        async move {
            use tower::ServiceExt;
            let request = Request::get(path).body(Body::empty()).unwrap();
            router.oneshot(request).await.unwrap()
        }
    };
    let page = get("/").await;
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    use base64::Engine as _;
    use sha2::Digest as _;
    let hash = base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(loader));
    assert!(csp.contains(&format!("'sha256-{hash}'")), "{csp}");
    assert!(
        !csp.contains("'unsafe-inline' 'self'")
            && csp.contains("script-src 'self' 'wasm-unsafe-eval'"),
        "{csp}"
    );
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert_eq!(page.headers()["x-frame-options"], "DENY");
    assert_eq!(page.headers()["referrer-policy"], "no-referrer");
    assert!(
        !page.headers().contains_key("strict-transport-security"),
        "http: no HSTS"
    );
    let docs = get("/v1/docs").await;
    assert!(!docs.headers().contains_key("content-security-policy"));
    assert_eq!(docs.headers()["x-content-type-options"], "nosniff");
}

/// Made-up session cookies are paced per address on their own (bad API keys from the same
/// address do not count): past the pace they are refused (429) before any database
/// lookup, while a session signed in or seen live here goes on working, a fresh sign-in
/// included.
#[test]
fn made_up_session_cookies_are_paced_on_their_own_and_live_sessions_still_work() {
    let temp = tempfile::tempdir().unwrap();
    let (data, _key) = small_data_dir(temp.path());
    create_user(&data, "ann", "acme", "ann-password-1", &[]);
    let server = Server::start(&data, &["--failed-auth-per-minute", "3"]);
    let origin = format!("http://{}", server.addr);
    let client = reqwest::blocking::Client::new();
    let sign_in = || {
        let login = app_login(&client, &server, "ann", "ann-password-1");
        assert_eq!(login.status(), reqwest::StatusCode::OK);
        session_cookie(login.headers())
    };
    let me = |cookie: &str| {
        client
            .get(server.url("/app/api/me"))
            .header("cookie", cookie)
            .send()
            .unwrap()
    };
    let live = sign_in();
    // Bad API keys past the address's pace leave the app's cookies alone.
    for _ in 0..5 {
        billed_post(&server, &keys::generate(KeyEnv::Live).token);
    }
    assert_eq!(
        billed_post(&server, &keys::generate(KeyEnv::Live).token).status(),
        reqwest::StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        me("crosstab_session=made-up").status(),
        reqwest::StatusCode::UNAUTHORIZED
    );
    // Made-up cookies: refused, then paced.
    let statuses: Vec<u16> = (0..5)
        .map(|i| {
            me(&format!("crosstab_session=made-up-{i}"))
                .status()
                .as_u16()
        })
        .collect();
    assert_eq!(statuses[0], 401, "{statuses:?}");
    assert_eq!(*statuses.last().unwrap(), 429, "{statuses:?}");
    let paced = me("crosstab_session=made-up-again");
    assert_eq!(paced.status(), reqwest::StatusCode::TOO_MANY_REQUESTS);
    assert!(paced.headers().contains_key("retry-after"));
    // The session signed in before (never looked up since) and a fresh sign-in work.
    assert_eq!(me(&live).status(), reqwest::StatusCode::OK);
    let fresh = sign_in();
    assert_eq!(me(&fresh).status(), reqwest::StatusCode::OK);
    // Signing out with a made-up cookie is refused too (no write for it); a live session
    // signs out, and is then as unknown as any.
    let sign_out = |cookie: &str| {
        client
            .post(server.url("/app/logout"))
            .header("origin", &origin)
            .header("cookie", cookie)
            .send()
            .unwrap()
            .status()
    };
    assert_eq!(
        sign_out("crosstab_session=made-up-out"),
        reqwest::StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(sign_out(&fresh), reqwest::StatusCode::NO_CONTENT);
    assert_eq!(me(&fresh).status(), reqwest::StatusCode::TOO_MANY_REQUESTS);
    server.stop();
}

/// A call admitted under the daily quota but not billed (the ledger refused the write:
/// 500) gives its place back: the next call is served, and only billed calls count.
#[tokio::test]
async fn an_unbilled_call_gives_its_quota_place_back() {
    let fx = Fixture::new().await;
    fx.clear_of_midnight();
    common::daily_quota(&fx, "acme", 1).await;
    let body = common::request("VEC", None, "ALL", &["WOMEN"]);
    sqlx::query("ALTER TABLE ledger RENAME TO ledger_away")
        .execute(fx.db.pool())
        .await
        .unwrap();
    let (failed, _) = fx.post(Some(&fx.whole), &body).await;
    assert_eq!(failed.status(), StatusCode::INTERNAL_SERVER_ERROR);
    sqlx::query("ALTER TABLE ledger_away RENAME TO ledger")
        .execute(fx.db.pool())
        .await
        .unwrap();
    let other = common::request("VEC", None, "ALL", &["GENDER = 1"]);
    let (served, answer) = fx.post(Some(&fx.whole), &other).await;
    assert_eq!(served.status(), StatusCode::OK, "{answer}");
    let (over, _) = fx.post(Some(&fx.whole), &body).await;
    assert_eq!(over.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(fx.bills().await, 1);
}

/// A refusal for the daily quota that rests on calls admitted and not yet settled (which
/// an unbilled failure gives back) says to retry in a second, not at midnight; once they
/// are billed, it says midnight.
#[tokio::test]
async fn a_quota_refusal_resting_on_unsettled_calls_says_retry_in_a_second() {
    use crosstab_contract::ApiError;
    use crosstab_server::grants::Grants;
    use crosstab_server::service::principal::{Credential, Principal};
    use crosstab_server::service::ServiceError;

    let fx = Fixture::new().await;
    fx.clear_of_midnight();
    let account_id = accounts::account_id(&fx.db, "acme").await.unwrap().unwrap();
    let caller = Principal {
        account_id,
        account: "acme".into(),
        grants: Grants::from_rows([("VEC".to_owned(), "*".to_owned())]),
        limits: AccountLimits {
            per_second: None,
            daily_quota: Some(2),
        },
        credential: Credential::Key("k".into()),
    };
    let limits = &fx.services.limits;
    let wait = |refused: ServiceError| match refused {
        ServiceError::Rejected(ApiError::OverDailyQuota { retry_after_s }) => retry_after_s,
        other => panic!("{other:?}"),
    };
    let billed = limits.admit(&caller).await.unwrap();
    billed.billed();
    let in_flight = limits.admit(&caller).await.unwrap();
    assert_eq!(wait(limits.admit(&caller).await.unwrap_err()), 1);
    // Given back (dropped unbilled): the place is free again.
    drop(in_flight);
    let in_flight = limits.admit(&caller).await.unwrap();
    in_flight.billed();
    let until_midnight = 86_400 - (fx.now() / 1000).rem_euclid(86_400);
    let refused = wait(limits.admit(&caller).await.unwrap_err());
    assert!(refused > 1, "{refused} s, midnight in {until_midnight} s");
    assert!(
        refused.abs_diff(until_midnight as u64) <= 1,
        "{refused} against {until_midnight}"
    );
}

/// With --drain, a SIGTERM first turns /ready to 503 (draining) while requests are still
/// served and billed, so a load balancer moves new ones elsewhere; then the server exits.
#[test]
fn a_draining_server_is_not_ready_but_still_serves_until_it_stops() {
    let temp = tempfile::tempdir().unwrap();
    let (data, key) = small_data_dir(temp.path());
    let server = Server::start(&data, &["--drain", "2"]);
    let client = reqwest::blocking::Client::new();
    assert_eq!(
        client.get(server.url("/ready")).send().unwrap().status(),
        reqwest::StatusCode::OK
    );
    let status = std::process::Command::new("kill")
        .args(["-TERM", &server.child_id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let started = Instant::now();
    // The signal arrives in a moment: then /ready says draining.
    let ready = loop {
        let answer = client.get(server.url("/ready")).send().unwrap();
        if answer.status() != reqwest::StatusCode::OK || started.elapsed() > Duration::from_secs(1)
        {
            break answer;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(ready.status(), reqwest::StatusCode::SERVICE_UNAVAILABLE);
    let reason: serde_json::Value = ready.json().unwrap();
    assert!(
        reason["reason"].as_str().unwrap().contains("draining"),
        "{reason}"
    );
    // Still served, and billed.
    assert_eq!(billed_post(&server, &key).status(), reqwest::StatusCode::OK);
    server.wait_stopped(Duration::from_secs(10));
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(bills(&data), 1);
}

/// Behind a proxy (`--trust-proxy-header`), a connection carries many clients' requests:
/// refusals on it do not slow it (each client's address is still paced).
#[test]
fn behind_a_proxy_a_connection_is_not_slowed_for_one_clients_refusals() {
    let temp = tempfile::tempdir().unwrap();
    let (data, key) = small_data_dir(temp.path());
    let server = Server::start(
        &data,
        &[
            "--trust-proxy-header",
            "X-Forwarded-For",
            "--failed-auth-per-minute",
            "1000000000",
        ],
    );
    let proxy = reqwest::blocking::Client::builder()
        .pool_max_idle_per_host(1)
        .build()
        .unwrap();
    // `n` forged keys on `client`'s one connection, forwarded for a client or not.
    let refused = |client: &reqwest::blocking::Client, n: usize, forwarded: bool| {
        let mut took = Vec::with_capacity(n);
        for i in 0..n {
            let started = Instant::now();
            let mut request = client
                .post(server.url("/v1/crosstab"))
                .header("Service-Engine-Authorizer", keys::generate(KeyEnv::Live).token)
                .json(&json!({"SurveyCode": "SMALL", "PopulationBaseCode": "ALL", "TargetCodes": ["WOMEN"]}));
            if forwarded {
                request = request.header("X-Forwarded-For", format!("198.51.100.{}", i % 200));
            }
            assert_eq!(
                request.send().unwrap().status(),
                reqwest::StatusCode::UNAUTHORIZED
            );
            took.push(started.elapsed());
        }
        took
    };
    let first: Duration = refused(&proxy, 16, true).iter().sum();
    // Ten more would wait 10 + 20 + ... + 100 ms = 550 ms on a connection of its own.
    let more: Duration = refused(&proxy, 10, true).iter().sum();
    assert!(
        more.saturating_sub(first / 16 * 10) < Duration::from_millis(250),
        "{more:?} against {first:?} for sixteen"
    );
    // A connection whose requests come without the header (not through the proxy) is.
    let direct = reqwest::blocking::Client::builder()
        .pool_max_idle_per_host(1)
        .build()
        .unwrap();
    let unpaused = refused(&direct, 16, false);
    let slowed = refused(&direct, 5, false);
    assert!(paced(&slowed), "{slowed:?} after {unpaused:?} unpaused");
    // A good key on it is answered.
    let good = proxy
        .post(server.url("/v1/crosstab"))
        .header("Service-Engine-Authorizer", &key)
        .json(
            &json!({"SurveyCode": "SMALL", "PopulationBaseCode": "ALL", "TargetCodes": ["WOMEN"]}),
        )
        .send()
        .unwrap();
    assert_eq!(good.status(), reqwest::StatusCode::OK);
    server.stop();
}

/// With `--trusted-proxy`, only the named proxy's header names the client: a client that
/// reaches a replica directly is paced as itself, whatever address it writes there.
#[test]
fn only_the_trusted_proxy_names_the_client() {
    let temp = tempfile::tempdir().unwrap();
    let (data, _key) = small_data_dir(temp.path());
    // Bad keys, each claiming another address, until one is refused for the pace.
    let paced_after = |trusted: &[&str]| {
        let mut args = vec!["--trust-proxy-header", "X-Forwarded-For"];
        args.extend(trusted.iter().flat_map(|net| ["--trusted-proxy", *net]));
        args.extend(["--failed-auth-per-minute", "3"]);
        let server = Server::start(&data, &args);
        let client = reqwest::blocking::Client::new();
        let paced = (0..6).find(|i| {
            let status = client
                .post(server.url("/v1/crosstab"))
                .header("Service-Engine-Authorizer", keys::generate(KeyEnv::Live).token)
                .header("X-Forwarded-For", format!("198.51.100.{i}"))
                .json(&json!({"SurveyCode": "SMALL", "PopulationBaseCode": "ALL", "TargetCodes": ["WOMEN"]}))
                .send()
                .unwrap()
                .status();
            status == reqwest::StatusCode::TOO_MANY_REQUESTS
        });
        server.stop();
        paced
    };
    // This test's client (loopback) is the proxy: each request is its forwarded client's.
    assert_eq!(paced_after(&["127.0.0.0/8"]), None);
    assert_eq!(paced_after(&[]), None, "any peer's header, as before");
    // Another proxy is named: the client is itself, and paced after its third bad key.
    assert_eq!(paced_after(&["192.0.2.10", "10.0.0.0/8"]), Some(3));
}

/// `crosstab user disable`: the user's sessions end at once, it can no longer sign in
/// (refused as a wrong password is), and `user create` with a new password enables it.
#[test]
fn a_disabled_user_is_signed_out_and_cannot_sign_in_until_enabled_again() {
    let temp = tempfile::tempdir().unwrap();
    let (data, _key) = small_data_dir(temp.path());
    create_user(&data, "ann", "acme", "ann-password-1", &[]);
    let server = Server::start(&data, &[]);
    let client = reqwest::blocking::Client::new();
    let sign_in = |password: &str| app_login(&client, &server, "ann", password);
    let login = sign_in("ann-password-1");
    assert_eq!(login.status(), reqwest::StatusCode::OK);
    let cookie = session_cookie(login.headers());
    let me = || {
        client
            .get(server.url("/app/api/me"))
            .header("cookie", &cookie)
            .send()
            .unwrap()
            .status()
    };
    assert_eq!(me(), reqwest::StatusCode::OK);
    cli(&data, &["user", "disable", "--username", "ann"]);
    assert_eq!(me(), reqwest::StatusCode::UNAUTHORIZED);
    let refused = sign_in("ann-password-1");
    assert_eq!(refused.status(), reqwest::StatusCode::UNAUTHORIZED);
    let body: serde_json::Value = refused.json().unwrap();
    assert_eq!(body["error"]["code"], "invalid_credentials");
    let unknown = cli_output(&data, &["user", "disable", "--username", "nobody"]);
    assert!(!unknown.status.success());
    create_user(&data, "ann", "acme", "ann-password-2", &[]);
    assert_eq!(sign_in("ann-password-2").status(), reqwest::StatusCode::OK);
    server.stop();
}

/// After a key change, the requests that find the caches emptied wait for one read of
/// the key ids and one read of their key, not one each.
#[tokio::test]
async fn after_a_key_change_concurrent_requests_read_the_keys_once() {
    let fx = std::sync::Arc::new(Fixture::new().await);
    let body = common::request("VEC", None, "ALL", &["WOMEN"]);
    assert_eq!(
        fx.post(Some(&fx.whole), &body).await.0.status(),
        StatusCode::OK
    );
    // Any key change empties every cache.
    common::key(&fx.db, "acme", &[], KeyEnv::Test, None).await;
    let (ids, keys) = (
        fx.services.auth.id_set_reads(),
        fx.services.auth.key_reads(),
    );
    let requests: Vec<_> = (0..40)
        .map(|_| {
            let (fx, body) = (std::sync::Arc::clone(&fx), body.clone());
            tokio::spawn(async move { fx.post(Some(&fx.whole), &body).await.0.status() })
        })
        .collect();
    for request in requests {
        assert_eq!(request.await.unwrap(), StatusCode::OK);
    }
    assert_eq!(
        fx.services.auth.id_set_reads(),
        ids + 1,
        "one read of the ids"
    );
    assert_eq!(
        fx.services.auth.key_reads(),
        keys + 1,
        "one read of the key"
    );
}
