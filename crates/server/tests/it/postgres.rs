//! The same store on PostgreSQL: runs only when `CROSSTAB_TEST_POSTGRES_URL` names a
//! database this test may write to (it adds its own accounts and keys).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use axum::http::StatusCode;
use crosstab_server::keys::KeyEnv;
use crosstab_server::service::replicas::Copier;
use crosstab_server::service::users::{self, SignIn};
use crosstab_server::store::accounts::KeyCreation;
use crosstab_server::store::{accounts, usage, Backend, Database};

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_keys_grants_ledger_and_usage() {
    let Some(url) = postgres_url() else {
        return;
    };
    let fx = Fixture::on(&url, tempfile::tempdir().unwrap(), &[]).await;
    fx.clear_of_midnight();
    let db = fx.db.clone();
    assert_eq!(db.backend(), Backend::Postgres);
    let _listening = fx
        .services
        .follow_changes(None)
        .expect("PostgreSQL pushes its changes");
    let account = format!("pg-{}", uuid::Uuid::new_v4().simple());
    let whole = key(&db, &account, &["VEC"], KeyEnv::Live, None).await;
    let north = key(&db, &account, &["VEC:N"], KeyEnv::Test, None).await;
    let body = request("VEC", None, "ALL", &["WOMEN"]);
    assert_eq!(
        fx.post(Some(&whole), &body).await.0.status(),
        StatusCode::OK
    );
    assert_eq!(
        fx.post(Some(&north), &body).await.0.status(),
        StatusCode::OK,
        "same account: whole grant"
    );
    assert_eq!(
        fx.post(Some(&whole), &request("DEMO", None, "ADULTS", &["WOMEN"]))
            .await
            .0
            .status(),
        StatusCode::FORBIDDEN
    );
    // Revocation through another connection applies on the next request.
    let admin = Database::connect(&url).await.unwrap();
    assert_eq!(
        accounts::revoke_key(&admin, whole.split('_').nth(2).unwrap())
            .await
            .unwrap(),
        accounts::Revocation::Revoked
    );
    // Pushed (NOTIFY) to this server's listener: no request reads the database for it.
    answered_once_notified(&fx, &whole, &body, StatusCode::UNAUTHORIZED).await;
    // This account's bills, not the ledger's total: other tests bill into the same
    // database meanwhile. (With any calls the revoked key made before the revocation
    // reached this server.)
    let billed = usage::report(&db, Some(&account), 0).await.unwrap();
    let revoked_bills = billed.iter().map(|r| r.calls).sum::<i64>() - 2;
    assert!(revoked_bills >= 0);
    // An Idempotency-Key retry is answered again and billed once, here too.
    let keyed = || {
        axum::http::Request::post("/v1/crosstab")
            .header("content-type", "application/json")
            .header("Service-Engine-Authorizer", &north)
            .header("Idempotency-Key", format!("pg-retry-{account}"))
            .body(axum::body::Body::from(body.to_string()))
            .unwrap()
    };
    let (first, answer) = fx.send(keyed()).await;
    let (again, same) = fx.send(keyed()).await;
    assert_eq!(
        (first.status(), again.status()),
        (StatusCode::OK, StatusCode::OK)
    );
    assert_eq!(answer, same);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    let rows = usage::report(&db, Some(&account), 0).await.unwrap();
    assert_eq!(
        rows.iter().map(|r| r.calls).sum::<i64>(),
        3 + revoked_bills,
        "the retry billed nothing"
    );
    let envs: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r.key_id.as_deref().unwrap(), r.env.as_deref().unwrap()))
        .collect();
    assert_eq!(envs.len(), 2, "{envs:?}");
    // The app's daily usage over a period: today's calls within it, none before it or
    // after (the batches' times bound the read on PostgreSQL).
    let account_id = accounts::account_id(&db, &account).await.unwrap().unwrap();
    let day_ms = 86_400_000;
    let today = fx.now().div_euclid(day_ms) * day_ms;
    let daily = |from: i64, to: i64| {
        let db = db.clone();
        async move {
            usage::daily(&db, account_id, from, to)
                .await
                .unwrap()
                .iter()
                .map(|row| row.calls)
                .sum::<i64>()
        }
    };
    assert_eq!(daily(today, today + day_ms).await, 3 + revoked_bills);
    assert_eq!(daily(today - day_ms, today).await, 0);
    assert_eq!(daily(today + day_ms, today + 2 * day_ms).await, 0);
    for (key, env) in [(&whole, "live"), (&north, "test")] {
        assert!(
            envs.contains(&(key.split('_').nth(2).unwrap(), env)),
            "{envs:?}"
        );
    }
    let keys = accounts::list_keys(&db, Some(&account)).await.unwrap();
    assert_eq!(keys.len(), 2);
    // The app's limited creation: one usable key left (the other is revoked).
    let limits = |usable, per_day| accounts::KeyLimits { usable, per_day };
    let within = |limits| accounts::create_key_within(&db, &account, KeyEnv::Test, None, limits);
    assert!(
        matches!(
            within(limits(1, 10)).await.unwrap(),
            KeyCreation::TooManyUsable
        ),
        "at the limit"
    );
    // Two made today already: none more at two a day, whatever is usable.
    assert!(matches!(
        within(limits(10, 2)).await.unwrap(),
        KeyCreation::TooManyToday
    ));
    // One place left, eight asking at once: the account's row lock lets exactly one in.
    let racers: Vec<_> = (0..8)
        .map(|_| {
            let (db, account) = (db.clone(), account.clone());
            tokio::spawn(async move {
                let limits = accounts::KeyLimits {
                    usable: 2,
                    per_day: 10,
                };
                let made = accounts::create_key_within(&db, &account, KeyEnv::Test, None, limits);
                matches!(made.await.unwrap(), KeyCreation::Created(_))
            })
        })
        .collect();
    let mut won = 0;
    for racer in racers {
        won += usize::from(racer.await.unwrap());
    }
    assert_eq!(won, 1, "the limit held under concurrent creations");

    // A name without a user is counted and locked alike, in the database's own row (a
    // statement of its own on PostgreSQL).
    let nobody = format!("nobody-{account}");
    for failure in 1..users::MAX_FAILED_LOGINS {
        assert!(matches!(
            users::sign_in(&db, &nobody, "wrong", fx.now()).await.unwrap(),
            SignIn::Rejected { failures } if failures == failure
        ));
    }
    for _ in 0..2 {
        assert!(matches!(
            users::sign_in(&db, &nobody, "wrong", fx.now())
                .await
                .unwrap(),
            SignIn::Locked { .. }
        ));
    }

    // Sign-in counts each failure in one statement, and locks at the limit.
    let user = format!("u-{account}");
    users::create_or_reset(&db, &user, &account, "right password", fx.now())
        .await
        .unwrap();
    for failure in 1..users::MAX_FAILED_LOGINS {
        assert!(matches!(
            users::sign_in(&db, &user, "wrong", fx.now()).await.unwrap(),
            SignIn::Rejected { failures } if failures == failure
        ));
    }
    assert!(matches!(
        users::sign_in(&db, &user, "wrong", fx.now()).await.unwrap(),
        SignIn::Locked { .. }
    ));
    assert!(matches!(
        users::sign_in(&db, &user, "right password", fx.now())
            .await
            .unwrap(),
        SignIn::Locked { .. }
    ));
    // A reset unlocks, and the new password signs in.
    users::create_or_reset(&db, &user, &account, "another password", fx.now())
        .await
        .unwrap();
    assert!(matches!(
        users::sign_in(&db, &user, "another password", fx.now())
            .await
            .unwrap(),
        SignIn::Accepted(_)
    ));
}

/// Grants and limits changed without a key, on PostgreSQL: the limits' one statement
/// (each change keeps the other limit) and a grant taken away, which requests see once
/// its notification arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_account_grants_and_limits_change_one_at_a_time() {
    use crosstab_server::grants::GrantSpec;
    use crosstab_server::store::accounts::{AccountLimits, GrantRemoval, LimitsChange};
    let Some(url) = postgres_url() else {
        return;
    };
    let fx = Fixture::on(&url, tempfile::tempdir().unwrap(), &[]).await;
    let db = fx.db.clone();
    let _listening = fx
        .services
        .follow_changes(None)
        .expect("PostgreSQL pushes its changes");
    let account = format!("pg-{}", uuid::Uuid::new_v4().simple());
    let caller = key(&db, &account, &["VEC:N"], KeyEnv::Live, None).await;
    let spec = |text: &str| text.parse::<GrantSpec>().unwrap();
    assert!(!accounts::add_grants(&db, &account, &[spec("VEC")])
        .await
        .unwrap());
    let body = request("VEC", None, "ALL", &["WOMEN"]);
    assert_eq!(
        fx.post(Some(&caller), &body).await.0.status(),
        StatusCode::OK
    );
    assert_eq!(
        accounts::remove_grants(&db, &account, &[spec("VEC:S")])
            .await
            .unwrap(),
        GrantRemoval::HeldWhole("VEC".into())
    );
    match accounts::remove_grants(&db, &account, &[spec("VEC")])
        .await
        .unwrap()
    {
        GrantRemoval::Removed(now) => assert!(now.specs().is_empty(), "{now:?}"),
        other => panic!("{other:?}"),
    }
    answered_once_notified(&fx, &caller, &body, StatusCode::FORBIDDEN).await;

    let change = |per_second: Option<Option<u32>>, daily_quota| LimitsChange {
        per_second: per_second.map(|rate| rate.and_then(std::num::NonZeroU32::new)),
        daily_quota,
    };
    let limits = |per_second: Option<u32>, daily_quota| AccountLimits {
        per_second: per_second.and_then(std::num::NonZeroU32::new),
        daily_quota,
    };
    let changed = |c| accounts::change_limits(&db, &account, c);
    assert_eq!(
        changed(change(None, Some(Some(3)))).await.unwrap(),
        Some(limits(None, Some(3)))
    );
    assert_eq!(
        changed(change(Some(Some(2)), None)).await.unwrap(),
        Some(limits(Some(2), Some(3)))
    );
    assert_eq!(
        changed(change(None, Some(None))).await.unwrap(),
        Some(limits(Some(2), None))
    );
    assert_eq!(
        accounts::change_limits(&db, "no such account", change(None, Some(Some(1))))
            .await
            .unwrap(),
        None
    );
}

/// A survey published to PostgreSQL is copied by every server into its own data dir
/// (checked by hash) and served; a new version published later reaches a listening
/// server within 2 s, whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_published_surveys_reach_every_server() {
    use std::sync::Arc;

    use crosstab_engine::demo::{self, DemoConfig};

    let Some(url) = postgres_url() else {
        return;
    };
    let db = Database::connect(&url).await.unwrap();
    // A compiled demo survey (code DEMO) of `respondents`, installed where it is
    // published from.
    let version = |respondents: usize| {
        demo::compile(&DemoConfig {
            respondents,
            flags: 4,
            seed: 3,
        })
        .unwrap()
    };
    publish(&db, &version(300), "DEMO").await;

    let (_replica, catalog, copies) = replica(&db);
    let copied = copies.sync().await.unwrap();
    assert!(copied.contains(&"DEMO".to_owned()), "{copied:?}");
    assert_eq!(catalog.get("DEMO").unwrap().respondents(), 300);
    assert!(
        copies.sync().await.unwrap().is_empty(),
        "nothing new: nothing copied"
    );

    // A server listening for announcements picks a new version up within 2 s.
    let fx = Fixture::on(&url, tempfile::tempdir().unwrap(), &[]).await;
    let copier = Arc::new(Copier::spawn(Arc::clone(&copies)));
    let listening = fx.services.follow_changes(Some(copier)).unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    publish(&db, &version(350), "DEMO").await;
    let started = std::time::Instant::now();
    while catalog.get("DEMO").unwrap().respondents() != 350 {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(2),
            "not seen within 2 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    listening.abort();
}

/// A survey copy held up (its chunks locked by another transaction) does not hold back
/// the changes announced after it: a key revoked meanwhile is refused once notified, and the
/// copy completes once the lock is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_survey_copy_does_not_delay_a_revocation() {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use crosstab_engine::demo::{self, DemoConfig};
    use crosstab_server::store::changes::SURVEYS_CHANNEL;

    let Some(url) = postgres_url() else {
        return;
    };
    // A database of its own: the lock below must hold up no other test.
    let url = database_of_its_own(&url).await;
    let db = Database::connect(&url).await.unwrap();
    let config = DemoConfig {
        respondents: 320,
        flags: 4,
        seed: 5,
    };
    publish(&db, &demo::compile(&config).unwrap(), "DEMO").await;
    let fx = Fixture::on(&url, tempfile::tempdir().unwrap(), &[]).await;
    let account = format!("slow-{}", uuid::Uuid::new_v4().simple());
    let whole = key(&db, &account, &["VEC"], KeyEnv::Live, None).await;
    let body = request("VEC", None, "ALL", &["WOMEN"]);
    assert_eq!(
        fx.post(Some(&whole), &body).await.0.status(),
        StatusCode::OK
    );

    // Hold every chunk, then announce the survey: this replica's copy waits on the lock.
    let mut locker = db.pool().begin().await.unwrap();
    sqlx::query("LOCK TABLE survey_blobs IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *locker)
        .await
        .unwrap();
    let (_replica, catalog, copies) = replica(&db);
    let copier = Arc::new(Copier::spawn(copies));
    let listening = fx.services.follow_changes(Some(copier)).unwrap();
    let waiting_on_lock = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE wait_event_type = 'Lock' AND query LIKE '%FROM survey_blobs%'",
        )
        .fetch_one(db.pool())
        .await
        .unwrap()
    };
    let started = Instant::now();
    while waiting_on_lock().await == 0 {
        sqlx::query("SELECT pg_notify($1, 'DEMO')")
            .bind(SURVEYS_CHANNEL)
            .execute(db.pool())
            .await
            .unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the copy never started"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The key is cached again (every change so far has been applied)...
    assert_eq!(
        fx.post(Some(&whole), &body).await.0.status(),
        StatusCode::OK
    );
    // ...and revoked through the database while the copy waits: refused all the same.
    assert_eq!(
        accounts::revoke_key(&db, whole.split('_').nth(2).unwrap())
            .await
            .unwrap(),
        accounts::Revocation::Revoked
    );
    answered_once_notified(&fx, &whole, &body, StatusCode::UNAUTHORIZED).await;
    assert!(waiting_on_lock().await > 0, "the copy was still held up");

    locker.rollback().await.unwrap();
    let released = Instant::now();
    while catalog.get("DEMO").is_none_or(|s| s.respondents() != 320) {
        assert!(
            released.elapsed() < Duration::from_secs(5),
            "not copied once free"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    listening.abort();
}

/// How long a change made through the database may take to reach a listening server
/// by its notification: milliseconds on an idle machine, more on a loaded CI host.
const NOTIFIED_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

/// Posts `body` as `caller` until it is answered `expected`, as a change made through
/// the database (a key revoked, a grant taken away) reaches a server by its notification:
/// soon after the change, not necessarily by the very next request.
async fn answered_once_notified(
    fx: &Fixture,
    caller: &str,
    body: &serde_json::Value,
    expected: StatusCode,
) {
    let changed = std::time::Instant::now();
    loop {
        let status = fx.post(Some(caller), body).await.0.status();
        if status == expected {
            return;
        }
        assert!(
            changed.elapsed() < NOTIFIED_WITHIN,
            "still {status}, not {expected}, {:?} after the change",
            changed.elapsed()
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// The feed's next change, within 5 s.
async fn next(
    feed: &mut crosstab_server::store::changes::ChangeFeed,
) -> crosstab_server::store::changes::Change {
    tokio::time::timeout(std::time::Duration::from_secs(5), feed.next())
        .await
        .expect("no change within 5 s")
}

/// The change feed, its connection killed, reconnects and says so (`Resync`: the
/// server then forgets every cached key, since changes made meanwhile were not heard),
/// and hears the changes announced after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_change_feed_reconnects_and_says_to_reload() {
    use crosstab_server::store::changes::{Change, ChangeFeed, KEYS_CHANNEL};

    let Some(url) = postgres_url() else {
        return;
    };
    let url = database_of_its_own(&url).await;
    let db = Database::connect(&url).await.unwrap();
    let mut feed = ChangeFeed::of(&db).unwrap();
    assert_eq!(next(&mut feed).await, Change::Resync, "connected");
    let announce = || async {
        sqlx::query("SELECT pg_notify($1, '')")
            .bind(KEYS_CHANNEL)
            .execute(db.pool())
            .await
            .unwrap();
    };
    announce().await;
    assert_eq!(next(&mut feed).await, Change::Keys);

    let killed: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND query LIKE 'LISTEN%'",
    )
    .fetch_all(db.pool())
    .await
    .unwrap();
    assert_eq!(killed, vec![true], "one listener to kill");
    assert_eq!(next(&mut feed).await, Change::Resync, "reconnected");
    announce().await;
    assert_eq!(next(&mut feed).await, Change::Keys, "listening again");
}

/// A published blob whose bytes do not hash to its SHA-256 (changed in the database) is
/// not installed, even when they are a readable survey, and the round copies the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blob_that_does_not_match_its_hash_is_not_installed() {
    use crosstab_engine::demo::{self, DemoConfig};

    let Some(url) = postgres_url() else {
        return;
    };
    let url = database_of_its_own(&url).await;
    let db = Database::connect(&url).await.unwrap();
    let demo = |respondents| {
        demo::compile(&DemoConfig {
            respondents,
            flags: 4,
            seed: 7,
        })
        .unwrap()
    };
    publish(&db, &demo(310), "DEMO").await;
    // Another survey's bytes, readable by themselves: only the hash tells them apart.
    let damaged = sqlx::query("UPDATE survey_blobs SET chunk = $1")
        .bind(demo(311))
        .execute(db.pool())
        .await
        .unwrap();
    assert_eq!(damaged.rows_affected(), 1);
    let toml = "code = \"INTACT\"\nname = \"i\"\nrespondents = \"r.csv\"\n\
                id_column = \"ID\"\nweight_column = \"W\"\n\
                [[population_bases]]\ncode = \"ALL\"\nexpr = \"*\"\n";
    let intact =
        crosstab_engine::import::compile(toml, "s.toml", &b"ID,W\nr1,1\n"[..], "r.csv").unwrap();
    publish(&db, &intact, "INTACT").await;

    let (_replica, catalog, copies) = replica(&db);
    let copied = copies.sync().await.unwrap();
    assert_eq!(copied, vec!["INTACT".to_owned()]);
    assert!(catalog.get("DEMO").is_none(), "a damaged blob was served");
}

/// An installed file damaged on the publisher's disk is not published: the command says
/// so, and the database holds nothing a replica would copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_survey_damaged_on_the_publishers_disk_is_not_published() {
    use crosstab_engine::demo::{self, DemoConfig};
    use crosstab_engine::store::SurveyStore;
    use crosstab_server::clock::now_ms;
    use crosstab_server::service::replicas;

    let Some(url) = postgres_url() else {
        return;
    };
    let url = database_of_its_own(&url).await;
    let db = Database::connect(&url).await.unwrap();
    let publisher = tempfile::tempdir().unwrap();
    let store = SurveyStore::open(publisher.path()).unwrap();
    let bytes = demo::compile(&DemoConfig {
        respondents: 300,
        flags: 4,
        seed: 3,
    })
    .unwrap();
    store.install(&bytes).unwrap();
    let mut damaged = bytes.clone();
    let at = damaged.len() - 40;
    damaged[at] ^= 0x04;
    std::fs::write(store.path_of("DEMO"), &damaged).unwrap();
    let error = replicas::publish(&db, &store, "DEMO", now_ms())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("not published") && error.contains("checksum does not match"),
        "{error}"
    );
    let (_replica, catalog, copies) = replica(&db);
    assert!(copies.sync().await.unwrap().is_empty());
    assert!(catalog.get("DEMO").is_none());
    // Sound again, it is published and copied.
    std::fs::write(store.path_of("DEMO"), &bytes).unwrap();
    replicas::publish(&db, &store, "DEMO", now_ms())
        .await
        .unwrap();
    assert_eq!(copies.sync().await.unwrap(), vec!["DEMO".to_owned()]);
}

/// A survey whose blob is gone when a round comes to fetch it (replaced meanwhile) is not
/// settled at that blob: published with it again, it is copied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blob_replaced_while_a_round_fetches_it_is_copied_when_it_comes_back() {
    use crosstab_engine::demo::{self, DemoConfig};

    let Some(url) = postgres_url() else {
        return;
    };
    let url = database_of_its_own(&url).await;
    let db = Database::connect(&url).await.unwrap();
    let bytes = demo::compile(&DemoConfig {
        respondents: 320,
        flags: 4,
        seed: 5,
    })
    .unwrap();
    publish(&db, &bytes, "DEMO").await;
    // What a round sees when the survey moves on between its list and its fetch: the
    // listed blob no longer stored.
    sqlx::query("DELETE FROM survey_blobs")
        .execute(db.pool())
        .await
        .unwrap();
    let (_replica, catalog, copies) = replica(&db);
    assert!(copies.sync().await.unwrap().is_empty());
    assert!(catalog.get("DEMO").is_none());
    // The survey comes back to that very blob (A, B, A): it is copied.
    publish(&db, &bytes, "DEMO").await;
    assert_eq!(copies.sync().await.unwrap(), vec!["DEMO".to_owned()]);
    assert_eq!(catalog.get("DEMO").unwrap().respondents(), 320);
}

/// A survey in the database that this build can't read (compiled by a newer build, or
/// damaged) is skipped and logged: the copy round goes on to the surveys after it, and the
/// next round doesn't fail on it either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_published_survey_this_build_cannot_read_is_skipped() {
    use crosstab_engine::import;
    use crosstab_server::clock::now_ms;
    use crosstab_server::keys::to_hex;
    use crosstab_server::store::surveys;
    use sha2::{Digest, Sha256};

    let Some(url) = postgres_url() else {
        return;
    };
    let db = Database::connect(&url).await.unwrap();
    // A version this build doesn't know, under a code that sorts before the readable one.
    let newer = b"CTXSURV\x09 a survey from a later build".to_vec();
    surveys::publish(
        &db,
        "NEWER",
        &to_hex(&Sha256::digest(&newer)),
        &newer,
        now_ms(),
    )
    .await
    .unwrap();
    let toml = "code = \"READABLE\"\nname = \"r\"\nrespondents = \"r.csv\"\n\
                id_column = \"ID\"\nweight_column = \"W\"\n\
                [[population_bases]]\ncode = \"ALL\"\nexpr = \"*\"\n";
    let bytes = import::compile(toml, "s.toml", &b"ID,W,X\nr1,1,1\nr2,2,2\n"[..], "r.csv").unwrap();
    publish(&db, &bytes, "READABLE").await;

    let (_replica, catalog, copies) = replica(&db);
    let copied = copies.sync().await.unwrap();
    assert!(copied.contains(&"READABLE".to_owned()), "{copied:?}");
    assert!(!copied.contains(&"NEWER".to_owned()), "{copied:?}");
    assert_eq!(catalog.get("READABLE").unwrap().respondents(), 2);
    assert!(catalog.get("NEWER").is_none());
    assert!(copies.sync().await.unwrap().is_empty(), "nothing new");
}

/// Publishes the compiled survey `bytes` (code `code`) as `survey import --database` does.
async fn publish(db: &Database, bytes: &[u8], code: &str) {
    use crosstab_engine::store::SurveyStore;
    use crosstab_server::clock::now_ms;
    use crosstab_server::service::replicas;

    let publisher = tempfile::tempdir().unwrap();
    let store = SurveyStore::open(publisher.path()).unwrap();
    assert_eq!(store.install(bytes).unwrap().code(), code);
    replicas::publish(db, &store, code, now_ms()).await.unwrap();
}

/// A replica's data dir, catalog and survey copies, copying from `db`.
fn replica(
    db: &Database,
) -> (
    tempfile::TempDir,
    std::sync::Arc<crosstab_engine::store::Catalog>,
    std::sync::Arc<crosstab_server::service::replicas::SurveyCopies>,
) {
    use std::sync::Arc;

    use crosstab_engine::store::{Catalog, SurveyStore};
    use crosstab_server::service::replicas::SurveyCopies;

    let dir = tempfile::tempdir().unwrap();
    let store = SurveyStore::open(dir.path()).unwrap();
    let (catalog, _) = Catalog::new(store.clone());
    let catalog = Arc::new(catalog);
    let copies = Arc::new(SurveyCopies::new(db.clone(), store, Arc::clone(&catalog)));
    (dir, catalog, copies)
}

/// On a new PostgreSQL database the administrative commands refuse to work until
/// `crosstab db migrate` has run (the schema check's PostgreSQL side), and a replica
/// started without `--public-url` says that its tokens are its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_need_a_migrated_database_and_replicas_a_public_url() {
    use crate::support::{cli_output, create_key, migrate, Server};

    let Some(url) = postgres_url() else {
        return;
    };
    let url = database_of_its_own(&url).await;
    let temp = tempfile::tempdir().unwrap();
    let data = temp.path().join("data");
    let refused = cli_output(&data, &["key", "list", "--database", &url]);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success()
            && said.contains("no crosstab schema yet")
            && said.contains("crosstab db migrate"),
        "{said}"
    );
    migrate(&data, &["--database", &url]);
    create_key(&data, "acme", &["--grant", "DEMO", "--database", &url]);

    let log = temp.path().join("replica.log");
    let server = Server::start_logging_to(&data, &["--database", &url], &log);
    server.stop();
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains("no --public-url on a shared PostgreSQL"),
        "{logged}"
    );
    let log = temp.path().join("named.log");
    let server = Server::start_logging_to(
        &data,
        &[
            "--database",
            &url,
            "--public-url",
            "https://crosstab.example.com",
        ],
        &log,
    );
    server.stop();
    assert!(!std::fs::read_to_string(&log)
        .unwrap()
        .contains("--public-url"));
}
