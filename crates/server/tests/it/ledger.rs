//! The ledger writes every bill it acknowledges, whatever the batch size (one transaction,
//! or one statement, per batch), and an answer's bills all or none.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crosstab_server::clock::{ManualClock, SystemClock};
use crosstab_server::grants::GrantSpec;
use crosstab_server::keys::KeyEnv;
use crosstab_server::store::idempotency::{self, Claim, Reservation};
use crosstab_server::store::ledger::{self, Bill, Caller, KeptAnswer, Ledger, LedgerError};
use crosstab_server::store::{self as db, accounts, usage, users, Database, DatabaseOptions};
use sqlx::Row;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::common::{database_of_its_own, postgres_url};

fn bill(account_id: i64, n: usize) -> Bill {
    Bill {
        account_id,
        caller: Caller::Key(format!("{n:016x}").into()),
        survey: "VEC".into(),
        // Quotes, backslashes, braces and commas, a group spelled NULL, and none.
        group: match n % 3 {
            0 => Some(format!("G'\"\\{{a,b}} é{n}").into()),
            1 if n.is_multiple_of(2) => Some("NULL".into()),
            _ => None,
        },
        base: "ALL".into(),
        targets: (n % 2 + 1) as i64,
        request_id: format!("{n:032x}").into(),
    }
}

/// A SQLite file in a temp dir with one account to bill (the dir lives as long as the
/// first value).
async fn database() -> (tempfile::TempDir, Database, i64) {
    let dir = tempfile::tempdir().unwrap();
    let (db, account_id) = database_at(&db::default_url(dir.path())).await;
    (dir, db, account_id)
}

/// The database at `url`, with one account to bill.
async fn database_at(url: &str) -> (Database, i64) {
    let db = Database::connect(url).await.unwrap();
    let account_id = account(&db, "acme").await;
    (db, account_id)
}

/// The id of a new account `name` (made with a key).
async fn account(db: &Database, name: &str) -> i64 {
    let grant: GrantSpec = "VEC".parse().unwrap();
    accounts::create_key(db, name, &[grant], KeyEnv::Live, None)
        .await
        .unwrap();
    accounts::account_id(db, name).await.unwrap().unwrap()
}

/// The pool, the ledger's own connection (and the key signal file beside them) all use
/// one file, however the URL has to spell its path.
#[tokio::test]
async fn the_ledger_bills_into_the_file_the_url_names_even_when_it_needs_escaping() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("survey data %41 #1?x");
    std::fs::create_dir(&dir).unwrap();
    let spaced = temp.path().join("with space");
    std::fs::create_dir(&spaced).unwrap();
    let escaped = format!(
        "sqlite://{}/crosstab.db?mode=rwc",
        spaced
            .canonicalize()
            .unwrap()
            .display()
            .to_string()
            .replace(' ', "%20")
    );
    for (url, file) in [
        (db::default_url(&dir), dir.join("crosstab.db")),
        (escaped, spaced.join("crosstab.db")),
    ] {
        let (db, account_id) = database_at(&url).await;
        let file = file
            .parent()
            .unwrap()
            .canonicalize()
            .unwrap()
            .join("crosstab.db");
        assert_eq!(db.sqlite_file(), Some(file.as_path()), "{url}");
        let (ledger, writer) = Ledger::start(db.clone(), Arc::new(SystemClock));
        ledger.bill(bill(account_id, 1)).await.unwrap();
        drop(ledger);
        writer.finish().await;
        assert_eq!(ledger::count(&db).await.unwrap(), 1, "{url}");
        db.close().await;
    }
}

#[tokio::test]
async fn batches_of_every_size_are_written_exactly() {
    let (_dir, db, account_id) = database().await;
    let billed = every_batch_size_is_written_exactly(&db, account_id).await;
    // Nothing else was written: not a padding row, not a bill twice.
    assert_eq!(ledger::count(&db).await.unwrap(), billed);
}

/// The same on PostgreSQL, when `CROSSTAB_TEST_POSTGRES_URL` names one.
#[tokio::test]
async fn batches_of_every_size_are_written_exactly_on_postgres() {
    let Some((db, account_id, _)) = postgres_account("batches").await else {
        return;
    };
    every_batch_size_is_written_exactly(&db, account_id).await;
}

#[tokio::test]
async fn one_batch_of_several_accounts_reads_back_by_account_and_time() {
    let (_dir, db, _) = database().await;
    several_accounts_read_back_by_account_and_time(&db, ["north", "south", "west"]).await;
}

/// The same on PostgreSQL, when `CROSSTAB_TEST_POSTGRES_URL` names one; there a batch is
/// stored as one row per account, cut after 32 bills.
#[tokio::test]
async fn one_batch_of_several_accounts_reads_back_by_account_and_time_on_postgres() {
    let Some(url) = postgres_url() else {
        return;
    };
    let db = Database::connect(&url).await.unwrap();
    let names = ["a", "b", "c"].map(|n| format!("several-{n}-{}", uuid::Uuid::new_v4().simple()));
    let accounts =
        several_accounts_read_back_by_account_and_time(&db, names.each_ref().map(|n| &**n)).await;
    let [first, second, third] = accounts;
    let rows: Vec<(i64, i64)> = sqlx::query_as(&format!(
        "SELECT account_id, cardinality(at)::bigint FROM ledger_batches \
         WHERE account_id IN ({first}, {second}, {third}) \
         ORDER BY account_id, cardinality(at) DESC"
    ))
    .fetch_all(db.pool())
    .await
    .unwrap();
    assert_eq!(
        rows,
        [
            (first, 32),
            (first, 8),
            (first, 5),
            (first, 5),
            (second, 20),
            (second, 3),
            (second, 2),
            (third, 20),
            (third, 3),
            (third, 2)
        ],
        "one row per account and batch, cut after 32 bills"
    );
}

/// Three batches (an answer's bills are never split) of 100 bills of three new accounts
/// (`names`) taking turns, the batches' times out of order, the first with more of one
/// account's bills than PostgreSQL keeps in one stored row: each account's bills read back
/// bill by bill, each at its batch's time, callers (key, app user, token) and all, and
/// every time range counts exactly the account's bills within it. Returns the accounts'
/// ids.
async fn several_accounts_read_back_by_account_and_time(
    db: &Database,
    names: [&str; 3],
) -> [i64; 3] {
    let mut accounts = [0; 3];
    let mut users = [0; 3];
    for ((name, account_id), user_id) in names.iter().zip(&mut accounts).zip(&mut users) {
        *account_id = account(db, name).await;
        let username = format!("{name}-user");
        users::create_or_reset(db, &username, name, "$argon2id$unused", 1)
            .await
            .unwrap();
        *user_id = sqlx::query_scalar("SELECT id FROM users WHERE username = $1")
            .bind(&username)
            .fetch_one(db.pool())
            .await
            .unwrap();
    }
    let start = 1_800_000_000_000;
    // The batches: bills 0..80 written at start + 50, 80..90 at start + 10, 90..100 at
    // start + 99.
    let batches = [
        (0..80, start + 50),
        (80..90, start + 10),
        (90..100, start + 99),
    ];
    let bills: Vec<Bill> = (0..100)
        .map(|n| {
            let turn = [0, 1, 0, 2][n % 4];
            Bill {
                caller: match n % 5 {
                    4 => Caller::Token {
                        idp: "corp".into(),
                        subject: format!("user-{n}").into(),
                    },
                    3 => Caller::User(users[turn]),
                    _ => bill(0, n).caller,
                },
                ..bill(accounts[turn], n)
            }
        })
        .collect();
    let clock = ManualClock::at(start);
    let (ledger, writer) = Ledger::start(db.clone(), clock.clone());
    let mut now = start;
    let mut timed = Vec::new();
    for (range, at) in batches {
        clock.advance(at - now);
        now = at;
        ledger
            .bill_all(bills[range.clone()].to_vec(), None)
            .await
            .unwrap();
        timed.extend(bills[range].iter().map(|bill| (at, bill.clone())));
    }
    drop(ledger);
    writer.finish().await;
    for (account_id, name) in accounts.into_iter().zip(names) {
        let mut expected: Vec<(i64, Bill)> = timed
            .iter()
            .filter(|(_, bill)| bill.account_id == account_id)
            .cloned()
            .collect();
        expected.sort_by(|a, b| (a.0, &a.1.request_id).cmp(&(b.0, &b.1.request_id)));
        assert_eq!(written_bills(db, account_id).await, expected);
        for (from, to) in [
            (0, i64::MAX),
            (start, start + 100),
            (start + 10, start + 11),
            (start + 11, start + 50),
            (start + 50, start + 51),
            (start + 31, start + 64),
            (start + 33, start + 97),
            (start + 99, i64::MAX),
            (start + 100, i64::MAX),
            (start - 5, start + 1),
        ] {
            let within = expected
                .iter()
                .filter(|(at, _)| (from..to).contains(at))
                .count() as u64;
            let counted = usage::calls_between(db, account_id, from, to)
                .await
                .unwrap();
            assert_eq!(counted, within, "{account_id}: {from}..{to}");
        }
        for since in [start, start + 50, start + 99] {
            let report = usage::report(db, Some(name), since).await.unwrap();
            let calls: i64 = report.iter().map(|row| row.calls).sum();
            let within = expected.iter().filter(|(at, _)| *at >= since).count();
            assert_eq!(calls as usize, within, "{name} since {since}");
        }
    }
    accounts
}

/// Account `account_id`'s bills as the ledger reads them back, each with its time, in
/// the order of their times and request ids.
async fn written_bills(db: &Database, account_id: i64) -> Vec<(i64, Bill)> {
    let rows = sqlx::query(
        "SELECT at, account_id, key_id, user_id, idp, subject, survey, grp, base, targets, \
                request_id \
         FROM ledger WHERE account_id = $1 ORDER BY at, request_id",
    )
    .bind(account_id)
    .fetch_all(db.pool())
    .await
    .unwrap();
    rows.iter()
        .map(|row| {
            let key: Option<String> = row.try_get(2).unwrap();
            let user: Option<i64> = row.try_get(3).unwrap();
            let idp: Option<String> = row.try_get(4).unwrap();
            let subject: Option<String> = row.try_get(5).unwrap();
            let caller = match (key, user, idp, subject) {
                (Some(key), None, None, None) => Caller::Key(key.into()),
                (None, Some(user), None, None) => Caller::User(user),
                (None, None, Some(idp), Some(subject)) => Caller::Token {
                    idp: idp.into(),
                    subject: subject.into(),
                },
                other => panic!("not one caller: {other:?}"),
            };
            let bill = Bill {
                account_id: row.try_get(1).unwrap(),
                caller,
                survey: row.try_get::<String, _>(6).unwrap().into(),
                group: row.try_get::<Option<String>, _>(7).unwrap().map(Into::into),
                base: row.try_get::<String, _>(8).unwrap().into(),
                targets: row.try_get(9).unwrap(),
                request_id: row.try_get::<String, _>(10).unwrap().into(),
            };
            (row.try_get(0).unwrap(), bill)
        })
        .collect()
}

/// The PostgreSQL database `CROSSTAB_TEST_POSTGRES_URL` names, with a new account to bill
/// (its id and name, `prefix` and a random suffix); `None`, said, when the URL is unset.
async fn postgres_account(prefix: &str) -> Option<(Database, i64, String)> {
    let url = postgres_url()?;
    let db = Database::connect(&url).await.unwrap();
    let name = format!("{prefix}-{}", uuid::Uuid::new_v4().simple());
    let account_id = account(&db, &name).await;
    Some((db, account_id, name))
}

/// Bills `account_id` in bursts that reach the writer as batches of every kind (one
/// statement with room to spare, one full, several in a transaction), then checks that
/// its ledger rows are exactly those bills; returns how many there were.
async fn every_batch_size_is_written_exactly(db: &Database, account_id: i64) -> i64 {
    let began = crosstab_server::clock::now_ms();
    let (ledger, writer) = Ledger::start(db.clone(), Arc::new(SystemClock));
    let mut expected = Vec::new();
    let mut next = 0;
    // One bill, then bursts that reach the writer as batches of up to 64 and beyond.
    for burst in [1, 2, 3, 5, 33, 64, 65, 300, 1500] {
        let tasks: Vec<_> = (next..next + burst)
            .map(|n| {
                let ledger = ledger.clone();
                let bill = bill(account_id, n);
                expected.push(bill.clone());
                tokio::spawn(async move { ledger.bill(bill).await })
            })
            .collect();
        for task in tasks {
            task.await.unwrap().unwrap();
        }
        next += burst;
    }
    drop(ledger);
    writer.finish().await;
    let mut written = written_bills(db, account_id).await;
    // Each at the time its batch was written.
    assert!(written
        .iter()
        .all(|(at, _)| (began..=crosstab_server::clock::now_ms()).contains(at)));
    written.sort_by(|a, b| a.1.request_id.cmp(&b.1.request_id));
    let written: Vec<Bill> = written.into_iter().map(|(_, bill)| bill).collect();
    assert_eq!(written, expected);
    next as i64
}

#[tokio::test]
async fn only_an_idempotency_keys_holder_is_billed() {
    let (_dir, db, account_id) = database().await;
    only_the_keys_holder_is_billed(&db, account_id).await;
}

/// The same on PostgreSQL, when `CROSSTAB_TEST_POSTGRES_URL` names one.
#[tokio::test]
async fn only_an_idempotency_keys_holder_is_billed_on_postgres() {
    let Some((db, account_id, _)) = postgres_account("holder").await else {
        return;
    };
    only_the_keys_holder_is_billed(&db, account_id).await;
}

/// A request whose `Idempotency-Key` was given back, or taken over by a retry once the
/// request counted as abandoned, is not billed when its bill arrives late, whatever else
/// its batch holds; giving a key back never frees another request's; the holder's bill
/// keeps its answer for the retries.
async fn only_the_keys_holder_is_billed(db: &Database, account_id: i64) {
    let claim = |key, owner| Claim {
        account_id,
        key,
        body_sha256: "ab",
        owner,
    };
    let kept = |key: &str, owner: &str, body: &'static [u8]| KeptAnswer {
        account_id,
        key: key.into(),
        owner: owner.into(),
        body: axum::body::Bytes::from_static(body),
    };
    // Never expired; abandoned when created before `abandoned` (-1: none is).
    let reserve = |key, owner, now, abandoned| {
        idempotency::reserve(db, claim(key, owner), now, -1, abandoned)
    };
    assert_eq!(
        reserve("k", "first", 0, -1).await.unwrap(),
        Reservation::Reserved
    );
    assert_eq!(
        reserve("k", "second", 1, -1).await.unwrap(),
        Reservation::InProgress
    );
    // Taken over at 100, the first counting as abandoned (created at 0, before 50).
    assert_eq!(
        reserve("k", "second", 100, 50).await.unwrap(),
        Reservation::Reserved
    );
    // The first one's late give-back leaves the retry's reservation alone.
    idempotency::release(db, account_id, "k", "first")
        .await
        .unwrap();
    assert_eq!(
        reserve("k", "third", 101, 50).await.unwrap(),
        Reservation::InProgress
    );
    // A key given back by its holder.
    assert_eq!(
        reserve("g", "gone", 100, -1).await.unwrap(),
        Reservation::Reserved
    );
    idempotency::release(db, account_id, "g", "gone")
        .await
        .unwrap();

    let (ledger, writer) = Ledger::start(db.clone(), Arc::new(SystemClock));
    // Late bills of both lost holders, the holder's and plain bills, all at once (so some
    // share a batch): only the holder's and the plain ones are written.
    let mut tasks = Vec::new();
    for n in 0..40 {
        let ledger = ledger.clone();
        let (bill, kept) = match n % 4 {
            0 => (
                bill(account_id, n),
                Some(kept("k", "first", b"{\"late\":1}")),
            ),
            1 => (
                bill(account_id, n),
                Some(kept("g", "gone", b"{\"gone\":1}")),
            ),
            2 if n == 2 => (
                bill(account_id, n),
                Some(kept("k", "second", b"{\"kept\":1}")),
            ),
            _ => (bill(account_id, n), None),
        };
        tasks.push(tokio::spawn(async move {
            let billed = match kept {
                Some(kept) => ledger.bill_keeping(bill.clone(), kept).await,
                None => ledger.bill(bill.clone()).await,
            };
            (bill, billed)
        }));
    }
    let mut written = Vec::new();
    for (n, task) in tasks.into_iter().enumerate() {
        let (bill, billed) = task.await.unwrap();
        match n % 4 {
            0 | 1 => assert!(
                matches!(billed, Err(LedgerError::KeyLost)),
                "{n}: {billed:?}"
            ),
            _ => {
                billed.unwrap();
                written.push(bill.request_id.to_string());
            }
        }
    }
    drop(ledger);
    writer.finish().await;
    written.sort();
    assert_eq!(request_ids(db, account_id).await, written);
    // The retry gets the holder's answer; the key given back is free.
    assert_eq!(
        reserve("k", "third", 102, 50).await.unwrap(),
        Reservation::Answered {
            status: 200,
            body: b"{\"kept\":1}".to_vec()
        }
    );
    assert_eq!(
        reserve("g", "again", 102, 50).await.unwrap(),
        Reservation::Reserved
    );
}

/// SQLite is a file: in memory, each pooled connection and the ledger's own would each
/// have a database of their own, so bills would vanish from every reader.
#[tokio::test]
async fn sqlite_in_memory_is_refused() {
    let refused = Database::connect("sqlite::memory:").await;
    assert!(
        matches!(refused, Err(db::DbError::UnsupportedUrl)),
        "{refused:?}"
    );
}

/// A table's bills (one per billed call) commit together: larger than a batch, they are
/// still one transaction, and one bad bill among them leaves every one unwritten.
#[tokio::test]
async fn an_answers_bills_are_written_all_or_none() {
    let (_dir, db, account_id) = database().await;
    let (ledger, writer) = Ledger::start(db.clone(), Arc::new(SystemClock));
    let mut unit: Vec<Bill> = (0..1500).map(|n| bill(account_id, n)).collect();
    // The last names no account: the foreign key refuses it, and with it the whole unit.
    if let Some(last) = unit.last_mut() {
        last.account_id = account_id + 1000;
    }
    assert!(ledger.bill_all(unit, None).await.is_err());
    assert_eq!(ledger::count(&db).await.unwrap(), 0);
    let unit: Vec<Bill> = (0..1500).map(|n| bill(account_id, n)).collect();
    ledger.bill_all(unit, None).await.unwrap();
    assert_eq!(ledger::count(&db).await.unwrap(), 1500);
    drop(ledger);
    writer.finish().await;
}

/// A request dropped (its client gone) before its bill is written is not billed; the
/// others in flight are.
#[tokio::test]
async fn a_bill_whose_requester_went_away_before_the_write_is_not_written() {
    let (_dir, db, account_id) = database().await;
    let (ledger, writer) = Ledger::start(db.clone(), Arc::new(SystemClock));

    // Hold SQLite's write lock so the writer's first batch waits in `BEGIN IMMEDIATE`.
    let mut blocker = db.pool().acquire().await.unwrap();
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut *blocker)
        .await
        .unwrap();
    let kept = bill(account_id, 1);
    let waiting = {
        let ledger = ledger.clone();
        let kept = kept.clone();
        tokio::spawn(async move { ledger.bill(kept).await })
    };
    // Let the writer take that bill alone and block on the lock (a second: its thread
    // may wait for a core on a loaded machine).
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    // The next bill is queued, then its requester goes away (the future is dropped).
    let gone = tokio::time::timeout(
        std::time::Duration::from_millis(50),
        ledger.bill(bill(account_id, 2)),
    )
    .await;
    assert!(
        gone.is_err(),
        "the writer is blocked: this bill cannot be done yet"
    );
    sqlx::query("COMMIT").execute(&mut *blocker).await.unwrap();
    drop(blocker);

    waiting.await.unwrap().unwrap();
    drop(ledger);
    writer.finish().await;
    assert_eq!(
        request_ids(&db, account_id).await,
        vec![kept.request_id.to_string()]
    );
}

/// The request ids of `account_id`'s bills, sorted.
async fn request_ids(db: &Database, account_id: i64) -> Vec<String> {
    let mut ids: Vec<String> =
        sqlx::query_scalar("SELECT request_id FROM ledger WHERE account_id = $1")
            .bind(account_id)
            .fetch_all(db.pool())
            .await
            .unwrap();
    ids.sort();
    ids
}

/// Everything logged in this test binary (one global subscriber: the writer logs from
/// its own thread).
fn logs() -> &'static std::sync::Mutex<Vec<u8>> {
    static LOGS: std::sync::OnceLock<&'static std::sync::Mutex<Vec<u8>>> =
        std::sync::OnceLock::new();
    LOGS.get_or_init(|| {
        let logs: &'static std::sync::Mutex<Vec<u8>> =
            Box::leak(Box::new(std::sync::Mutex::new(Vec::new())));
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || Sink(logs))
            .finish();
        tracing::subscriber::set_global_default(subscriber).unwrap();
        logs
    })
}

struct Sink(&'static std::sync::Mutex<Vec<u8>>);

impl std::io::Write for Sink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A request dropped after its bill was committed but before it saw the commit stays
/// billed, and the server says so with its request id (bills = 200s + these).
#[tokio::test]
async fn a_bill_committed_for_a_request_gone_since_is_logged() {
    let logs = logs();
    let (_dir, db, account_id) = database().await;
    let (ledger, writer) = Ledger::start(db.clone(), Arc::new(SystemClock));
    let gone = bill(account_id, 7);
    let mut request = Box::pin(ledger.bill(gone.clone()));
    // Poll once: the bill is handed over; then never again, as a dropped connection would.
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    assert!(request.as_mut().poll(&mut cx).is_pending());
    for _ in 0..500 {
        if ledger::count(&db).await.unwrap() == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(
        ledger::count(&db).await.unwrap(),
        1,
        "the bill was committed"
    );
    // The writer acknowledges right after the commit.
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    drop(request);
    drop(ledger);
    writer.finish().await;
    let logged = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    assert!(
        logged.lines().any(|line| line
            .contains("billed, but the client went away before its 200 was sent")
            && line.contains(&*gone.request_id)),
        "{logged}"
    );
}

/// The ledger refers to accounts and users, so the database refuses to delete either (on
/// PostgreSQL this rule stands in for the ledger's foreign keys).
#[tokio::test]
async fn accounts_and_users_are_never_deleted() {
    let (_dir, db, account_id) = database().await;
    deleting_is_refused(&db, account_id, "acme", "nora").await;
}

/// The same on PostgreSQL, when `CROSSTAB_TEST_POSTGRES_URL` names one.
#[tokio::test]
async fn accounts_and_users_are_never_deleted_on_postgres() {
    let Some((db, account_id, name)) = postgres_account("kept").await else {
        return;
    };
    deleting_is_refused(&db, account_id, &name, &name).await;
}

/// Bills `account_id` (named `account`) through a user made for it, then tries to delete
/// both.
async fn deleting_is_refused(db: &Database, account_id: i64, account: &str, username: &str) {
    users::create_or_reset(db, username, account, "$argon2id$unused", 1)
        .await
        .unwrap();
    let (ledger, writer) = Ledger::start(db.clone(), Arc::new(SystemClock));
    ledger.bill(bill(account_id, 7)).await.unwrap();
    drop(ledger);
    writer.finish().await;
    for (table, column, name) in [
        ("users", "username", username),
        ("accounts", "name", account),
    ] {
        let error = sqlx::query(&format!("DELETE FROM {table} WHERE {column} = $1"))
            .bind(name)
            .execute(db.pool())
            .await
            .expect_err(table)
            .to_string();
        assert!(error.contains("never deleted"), "{table}: {error}");
    }
    let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM ledger WHERE account_id = $1")
        .bind(account_id)
        .fetch_one(db.pool())
        .await
        .unwrap();
    assert_eq!(left, 1);
}

/// A bill handed over while PostgreSQL restarts waits for it and is written once it is
/// back: the writer's new connection tries again while the database refuses. One whose
/// requester went away meanwhile is not billed: it is looked at again once the connection
/// is there, right before the write.
#[tokio::test]
async fn a_bill_during_a_short_postgres_restart_is_written_when_it_is_back() {
    let Some(pg_bin) = crate::support::Postgres::binaries() else {
        crate::common::skipped("PostgreSQL not installed");
        return;
    };
    let temp = tempfile::tempdir().unwrap();
    let postgres = crate::support::Postgres::start(pg_bin, &temp.path().join("pg"));
    let (db, account_id) = database_at(&postgres.url()).await;
    let (ledger, writer) = Ledger::start(db.clone(), Arc::new(SystemClock));
    ledger.bill(bill(account_id, 1)).await.unwrap();

    postgres.stop();
    // Past a second idle the writer tests its connection before a batch: the dead one is
    // dropped unused, and the batch waits for a new one.
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    let handed = |n| {
        let ledger = ledger.clone();
        tokio::spawn(async move { ledger.bill(bill(account_id, n)).await })
    };
    // The first is the batch the writer holds while it waits; the second queues behind.
    let gone = handed(2);
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let during = handed(3);
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    assert!(
        !during.is_finished(),
        "answered while the database was down"
    );
    // Its client disconnected: that request is dropped while the writer waits (awaited,
    // so it is gone before the database is back: the writer runs on a thread of its
    // own, and `start_again` blocks this one).
    gone.abort();
    assert!(gone.await.unwrap_err().is_cancelled());
    postgres.start_again();
    during.await.unwrap().unwrap();

    drop(ledger);
    writer.finish().await;
    assert_eq!(ledger::count(&db).await.unwrap(), 2, "bills 1 and 3, not 2");
    db.close().await;
}

/// The writer's connection ended by the server (a restart, a terminated session) within
/// the second it goes untested: the batch is written on a new connection, not failed.
#[tokio::test]
async fn a_connection_ended_by_the_server_is_replaced_without_failing_the_batch() {
    let Some(url) = postgres_url() else {
        return;
    };
    let url = database_of_its_own(&url).await;
    let (db, account_id) = database_at(&url).await;
    let (ledger, writer) = Ledger::start(db.clone(), Arc::new(SystemClock));
    ledger.bill(bill(account_id, 1)).await.unwrap();
    // Every other session of this database, the writer's among them, is ended.
    sqlx::query(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    .execute(db.pool())
    .await
    .unwrap();
    ledger.bill(bill(account_id, 2)).await.unwrap();
    drop(ledger);
    writer.finish().await;
    assert_eq!(ledger::count(&db).await.unwrap(), 2);
    db.close().await;
}

/// The statement timeout of the databases below.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(2);

/// A ledger write that waits on a lock waits up to the statement timeout: a lock let go
/// meanwhile costs a delay, not the bill; a lock held past it fails the bill, unbilled,
/// instead of holding the request forever; the next bill is written once it is free.
/// `lock` takes the lock in a transaction, on a connection of the pool.
async fn a_stuck_ledger_write_fails_within_the_statement_timeout(
    db: &Database,
    account_id: i64,
    lock: &[&str],
) {
    let (ledger, writer) = Ledger::start(db.clone(), Arc::new(SystemClock));
    let mut blocker = db.pool().acquire().await.unwrap();
    let hold = async |blocker: &mut sqlx::pool::PoolConnection<sqlx::Any>| {
        for statement in lock {
            sqlx::query(statement)
                .execute(&mut **blocker)
                .await
                .unwrap();
        }
    };

    // Let go within the timeout: the bill waits for it, and is written.
    hold(&mut blocker).await;
    let waiting = tokio::spawn({
        let ledger = ledger.clone();
        async move { ledger.bill(bill(account_id, 1)).await }
    });
    tokio::time::sleep(STATEMENT_TIMEOUT / 4).await;
    assert!(!waiting.is_finished(), "the bill did not wait for the lock");
    sqlx::query("ROLLBACK")
        .execute(&mut *blocker)
        .await
        .unwrap();
    waiting.await.unwrap().unwrap();

    // Held past it: the bill fails after about the timeout, not at once and not never.
    hold(&mut blocker).await;
    let started = Instant::now();
    let refused = tokio::time::timeout(STATEMENT_TIMEOUT * 10, ledger.bill(bill(account_id, 2)))
        .await
        .expect("the bill waited past its statement timeout");
    let waited = started.elapsed();
    assert!(matches!(refused, Err(LedgerError::Write(_))), "{refused:?}");
    assert!(waited >= STATEMENT_TIMEOUT / 2, "gave up after {waited:?}");
    assert!(waited < STATEMENT_TIMEOUT * 4, "gave up after {waited:?}");
    sqlx::query("ROLLBACK")
        .execute(&mut *blocker)
        .await
        .unwrap();
    drop(blocker);

    ledger.bill(bill(account_id, 3)).await.unwrap();
    assert_eq!(
        request_ids(db, account_id).await,
        [
            bill(account_id, 1).request_id,
            bill(account_id, 3).request_id
        ]
        .map(|id| id.to_string())
    );
    drop(ledger);
    writer.finish().await;
}

#[tokio::test]
async fn a_stuck_ledger_write_fails_within_the_statement_timeout_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let options = DatabaseOptions {
        statement_timeout: STATEMENT_TIMEOUT,
        ..DatabaseOptions::default()
    };
    let db = Database::connect_with(&db::default_url(dir.path()), options)
        .await
        .unwrap();
    let account_id = account(&db, "acme").await;
    // The write lock, as another process's transaction would hold it.
    a_stuck_ledger_write_fails_within_the_statement_timeout(&db, account_id, &["BEGIN IMMEDIATE"])
        .await;
}

/// The same on PostgreSQL (a database of its own: the lock would stop other tests' bills).
#[tokio::test]
async fn a_stuck_ledger_write_fails_within_the_statement_timeout_on_postgres() {
    let Some(url) = postgres_url() else {
        return;
    };
    let options = DatabaseOptions {
        statement_timeout: STATEMENT_TIMEOUT,
        ..DatabaseOptions::default()
    };
    let db = Database::connect_with(&database_of_its_own(&url).await, options)
        .await
        .unwrap();
    let account_id = account(&db, "acme").await;
    a_stuck_ledger_write_fails_within_the_statement_timeout(
        &db,
        account_id,
        &[
            "BEGIN",
            "LOCK TABLE ledger_batches IN ACCESS EXCLUSIVE MODE",
        ],
    )
    .await;
}
