//! The billing ledger: one row per `200` from `POST /v1/crosstab`, committed before the
//! response is sent.
//!
//! Group commit: requests hand their bill to one writer task and wait. The writer takes
//! every bill pending at that moment, inserts them in one transaction, commits (one
//! fsync for the lot) and then acknowledges each. Under load the batch grows by itself,
//! so durability costs one commit per batch instead of one per request. If the
//! transaction fails, every request in it is told so (and answers 500, unbilled). A
//! request whose client went away before its batch was written is left out (it will
//! send no 200); one that goes away once it is written stays billed and is logged with
//! its request id, so the ledger reconciles with the access log.
//!
//! The writer is one task on the server's runtime with a connection of its own (SQLite
//! or PostgreSQL): one transaction (or a lone INSERT, which commits by itself), the bills,
//! then the idempotency rows, then the commit. On PostgreSQL the bills are one INSERT of
//! eleven column arrays, whatever the batch's size. On SQLite they are multi-row INSERTs
//! of up to [`ROWS_PER_STATEMENT`] bills; each has room for a power of two of rows, the
//! rows it does not fill left NULL and skipped: the connection prepares and keeps seven
//! statements, not one per batch size (the 64 such statements held ~3 MiB, memory no
//! cache budget saw).

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyConnection, Connection};
use tokio::sync::mpsc::{self, error::TryRecvError};
use tokio::sync::oneshot;

use super::{Backend, Database, DbError};

/// Most bills in one transaction.
const MAX_BATCH: usize = 1024;
/// Rows per INSERT statement on SQLite (11 parameters each, well under its limit).
const ROWS_PER_STATEMENT: usize = 64;

/// Who made a billed call for its account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// An API key (its id).
    Key(Arc<str>),
    /// An app user signed in to the account (its row id).
    User(i64),
    /// A bearer token an identity provider vouched for: the provider's name and the
    /// token's subject.
    Token {
        /// The identity provider (as `crosstab sso list` names it).
        idp: Arc<str>,
        /// Who the token was issued to (`sub`, or the SAML `NameID`).
        subject: Arc<str>,
    },
}

impl Caller {
    fn key_id(&self) -> Option<&str> {
        match self {
            Caller::Key(id) => Some(id),
            _ => None,
        }
    }

    fn user_id(&self) -> Option<i64> {
        match self {
            Caller::User(id) => Some(*id),
            _ => None,
        }
    }

    fn idp(&self) -> Option<&str> {
        match self {
            Caller::Token { idp, .. } => Some(idp),
            _ => None,
        }
    }

    fn subject(&self) -> Option<&str> {
        match self {
            Caller::Token { subject, .. } => Some(subject),
            _ => None,
        }
    }
}

/// One billed call. Its text is shared (`Arc<str>`) with the key, the cached answer and
/// the request it bills: no copy per bill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bill {
    /// When, Unix ms.
    pub at: i64,
    /// The account billed.
    pub account_id: i64,
    /// The key or user that made the call.
    pub caller: Caller,
    /// The survey queried.
    pub survey: Arc<str>,
    /// The authorization group, when one was named (`None` for all groups).
    pub group: Option<Arc<str>>,
    /// The population base.
    pub base: Arc<str>,
    /// Number of target codes.
    pub targets: i64,
    /// The request's `X-Request-Id`.
    pub request_id: Arc<str>,
    /// With an `Idempotency-Key`: the key, and the answer to keep with it.
    pub idempotent: Option<KeptAnswer>,
}

/// The answer a billed request with an `Idempotency-Key` got, kept in the bill's
/// transaction so a retry can be given it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptAnswer {
    /// The key (reserved by [`super::idempotency::reserve`]).
    pub key: Arc<str>,
    /// The 200 body.
    pub body: axum::body::Bytes,
}

/// Why a bill could not be recorded.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The transaction failed; nothing in it was billed.
    #[error("ledger write failed: {0}")]
    Write(String),
    /// The writer has stopped (the server is shutting down).
    #[error("ledger writer stopped")]
    Stopped,
}

/// The bills of one answer (one for a crosstab, several for a table), committed together
/// or not at all, and where to say which.
type Pending = (Vec<Bill>, oneshot::Sender<Result<(), String>>);

/// The handle requests bill through. Cheap to clone.
///
/// The queue is unbounded on purpose: every requester waits for its own bill's commit,
/// so it never holds more bills than there are requests in flight.
#[derive(Debug, Clone)]
pub struct Ledger {
    queue: mpsc::UnboundedSender<Pending>,
    alive: Arc<AtomicBool>,
}

/// Marks the writer stopped when its thread ends, however it ends.
struct Running(Arc<AtomicBool>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// Runs the write loop, starting it again should it panic: the bills of the batch it was
/// writing are answered 500, unbilled (their transaction is rolled back when its
/// connection goes back to the pool), and later ones go on.
async fn supervise(db: Database, mut pending: mpsc::UnboundedReceiver<Pending>, _running: Running) {
    loop {
        let run = AssertUnwindSafe(write_loop(&db, &mut pending))
            .catch_unwind()
            .await;
        match run {
            Ok(()) => return,
            Err(_) => tracing::error!("ledger writer panicked; restarted"),
        }
    }
}

/// The writer task; [`LedgerWriter::finish`] waits until every bill handed over is
/// committed (after the last [`Ledger`] handle is dropped).
#[derive(Debug)]
pub struct LedgerWriter(Option<tokio::task::JoinHandle<()>>);

impl LedgerWriter {
    /// Waits for the writer to drain and stop.
    pub async fn finish(self) {
        let Some(task) = self.0 else { return };
        if task.await.is_err() {
            tracing::error!("ledger writer failed");
        }
    }
}

impl Ledger {
    /// Starts the writer on `db`, as a task of the current runtime (outside one, no
    /// writer runs: every bill is answered [`LedgerError::Stopped`], unbilled).
    pub fn start(db: Database) -> (Ledger, LedgerWriter) {
        let (queue, pending) = mpsc::unbounded_channel();
        let alive = Arc::new(AtomicBool::new(true));
        let running = Running(Arc::clone(&alive));
        let task = match tokio::runtime::Handle::try_current() {
            Ok(runtime) => Some(runtime.spawn(supervise(db, pending, running))),
            Err(error) => {
                tracing::error!(%error, "ledger writer not started");
                None
            }
        };
        (Ledger { queue, alive }, LedgerWriter(task))
    }

    /// Whether the writer task is running (and so bills can be committed).
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// Records `bill` durably; returns once it is committed.
    ///
    /// Dropping the future (the client went away) before the bill is written leaves it
    /// out; after it is committed, the bill stands and the drop is logged with the
    /// request id, so bills always reconcile with the 200s in the access log.
    pub async fn bill(&self, bill: Bill) -> Result<(), LedgerError> {
        self.bill_all(vec![bill]).await
    }

    /// Records every bill of one answer durably, in one transaction: all are committed
    /// or none is. Returns once they are; the same rules as [`Ledger::bill`].
    pub async fn bill_all(&self, bills: Vec<Bill>) -> Result<(), LedgerError> {
        let Some(first) = bills.first() else {
            return Ok(());
        };
        let (done, committed) = oneshot::channel();
        let mut awaiting = Awaiting {
            request_id: Arc::clone(&first.request_id),
            committed,
        };
        self.queue
            .send((bills, done))
            .map_err(|_| LedgerError::Stopped)?;
        match (&mut awaiting.committed).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(reason)) => Err(LedgerError::Write(reason)),
            Err(_) => Err(LedgerError::Stopped),
        }
    }
}

/// A request waiting for its bill's commit.
struct Awaiting {
    request_id: Arc<str>,
    committed: oneshot::Receiver<Result<(), String>>,
}

impl Drop for Awaiting {
    fn drop(&mut self) {
        // Still holding an unread "committed": the request was dropped between the commit
        // and seeing it. (Dropped before the writer answered, the writer logs it instead.)
        if let Ok(Ok(())) = self.committed.try_recv() {
            abandoned(&self.request_id);
        }
    }
}

/// A bill committed for a request that will send no 200 (its client went away).
fn abandoned(request_id: &str) {
    tracing::warn!(
        request_id,
        "billed, but the client went away before its 200 was sent"
    );
}

async fn write_loop(db: &Database, pending: &mut mpsc::UnboundedReceiver<Pending>) {
    let mut batch: Vec<Pending> = Vec::new();
    let mut held = Held::default();
    // Waits for the first bill; stops once every `Ledger` is dropped and all is written.
    while let Some(first) = pending.recv().await {
        let mut bills = first.0.len();
        batch.push(first);
        // Then every bill already waiting: under load the batch grows by itself (an
        // answer's bills are never split, so one may take it past the bound).
        while bills < MAX_BATCH {
            match pending.try_recv() {
                Ok(next) => {
                    bills += next.0.len();
                    batch.push(next);
                }
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        // A requester that went away (its client disconnected) before its bill was
        // written will send no 200, so it is not billed.
        let before = batch.len();
        batch.retain(|(_, done)| !done.is_closed());
        if batch.len() < before {
            tracing::info!(
                answers = before - batch.len(),
                "not billed: the client went away before the bill was written"
            );
        }
        if batch.is_empty() {
            continue;
        }
        let started = Instant::now();
        let result = held
            .write(db, &batch)
            .await
            .map_err(|error| error.to_string());
        tracing::debug!(
            bills = batch.len(),
            us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
            "ledger batch"
        );
        if let Err(reason) = &result {
            tracing::error!(bills = batch.len(), %reason, "ledger write failed; requests answered 500");
        }
        for (bills, done) in batch.drain(..) {
            if done.send(result.clone()).is_err() && result.is_ok() {
                // Gone during the commit: billed, yet no 200 will be sent.
                if let Some(bill) = bills.first() {
                    abandoned(&bill.request_id);
                }
            }
        }
    }
}

/// The writer's own connection, kept from batch to batch: taking one from the pool and
/// giving it back costs a round trip each (the pool tests it both ways), more than a
/// small batch's INSERT.
#[derive(Default)]
struct Held(Option<(PoolConnection<Any>, Instant)>);

/// A connection idle longer than this is tested before a batch is written on it (the
/// database may have restarted meanwhile): a failed test costs no bill, a failed write
/// costs the batch's.
const IDLE_TEST: Duration = Duration::from_secs(1);

impl Held {
    /// Writes `batch` on the held connection (taken from the pool first if need be); after
    /// a failure the connection goes back to the pool, and the next batch takes another.
    async fn write(&mut self, db: &Database, batch: &[Pending]) -> Result<(), DbError> {
        if let Some((conn, used)) = &mut self.0 {
            if used.elapsed() > IDLE_TEST && conn.ping().await.is_err() {
                self.0 = None;
            }
        }
        let (conn, used) = match &mut self.0 {
            Some(held) => held,
            None => self.0.insert((db.pool().acquire().await?, Instant::now())),
        };
        let result = write_batch(conn, batch, db.backend()).await;
        *used = Instant::now();
        if result.is_err() {
            self.0 = None;
        }
        result
    }
}

/// The batch in one transaction on the pool.
async fn write_batch(
    conn: &mut AnyConnection,
    batch: &[Pending],
    backend: Backend,
) -> Result<(), DbError> {
    let bills: Vec<&Bill> = batch.iter().flat_map(|(bills, _)| bills).collect();
    // One statement commits atomically on its own: a batch that fits one INSERT and
    // keeps no idempotent answer takes one round trip instead of BEGIN, INSERT, COMMIT
    // (on a loaded machine each round trip waits for the database's process to run).
    let one_statement = match backend {
        Backend::Sqlite => bills.len() <= ROWS_PER_STATEMENT,
        Backend::Postgres => true,
    };
    if one_statement && bills.iter().all(|bill| bill.idempotent.is_none()) {
        return insert_bills(conn, &bills, backend).await;
    }
    let mut tx = conn.begin().await?;
    insert_bills(&mut tx, &bills, backend).await?;
    for bill in &bills {
        if let Some(kept) = &bill.idempotent {
            sqlx::query(
                "UPDATE idempotency_keys SET status = 200, response = $3 \
                 WHERE account_id = $1 AND key = $2",
            )
            .bind(bill.account_id)
            .bind(kept.key.to_string())
            .bind(kept.body.to_vec())
            .execute(&mut *tx)
            .await?;
        }
    }
    tx.commit().await?;
    Ok(())
}

/// Inserts `bills`: on SQLite by multi-row INSERTs of [`ROWS_PER_STATEMENT`] rows, on
/// PostgreSQL by one INSERT of a column array each, whatever the batch's size (its
/// server then reads 11 parameters instead of 11 per bill).
async fn insert_bills(
    conn: &mut AnyConnection,
    bills: &[&Bill],
    backend: Backend,
) -> Result<(), DbError> {
    match backend {
        Backend::Sqlite => {
            for chunk in bills.chunks(ROWS_PER_STATEMENT) {
                insert_rows(conn, chunk).await?;
            }
        }
        Backend::Postgres => insert_columns(conn, bills).await?,
    }
    Ok(())
}

/// One INSERT of `bills` as PostgreSQL arrays, a column each.
async fn insert_columns(conn: &mut AnyConnection, bills: &[&Bill]) -> Result<(), DbError> {
    let callers = || bills.iter().map(|bill| &bill.caller);
    sqlx::query::<Any>(
        "INSERT INTO ledger (at, account_id, key_id, user_id, idp, subject, survey, grp, base, targets, request_id) \
         SELECT * FROM UNNEST($1::bigint[], $2::bigint[], $3::text[], $4::bigint[], $5::text[], \
                              $6::text[], $7::text[], $8::text[], $9::text[], $10::bigint[], $11::text[])",
    )
    .bind(int_array(bills.iter().map(|bill| Some(bill.at))))
    .bind(int_array(bills.iter().map(|bill| Some(bill.account_id))))
    .bind(text_array(callers().map(Caller::key_id)))
    .bind(int_array(callers().map(Caller::user_id)))
    .bind(text_array(callers().map(Caller::idp)))
    .bind(text_array(callers().map(Caller::subject)))
    .bind(text_array(bills.iter().map(|bill| Some(&*bill.survey))))
    .bind(text_array(bills.iter().map(|bill| bill.group.as_deref())))
    .bind(text_array(bills.iter().map(|bill| Some(&*bill.base))))
    .bind(int_array(bills.iter().map(|bill| Some(bill.targets))))
    .bind(text_array(bills.iter().map(|bill| Some(&*bill.request_id))))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// A PostgreSQL array literal of integers: `{1,NULL,3}`.
fn int_array(values: impl Iterator<Item = Option<i64>>) -> String {
    array_literal(values, |literal, value| {
        use std::fmt::Write;
        let _ = write!(literal, "{value}");
    })
}

/// A PostgreSQL array literal of texts, every element quoted (so no text reads as
/// `NULL`, a delimiter or a brace) with `"` and `\` escaped: `{"a","b\"c",NULL}`.
fn text_array<'a>(values: impl Iterator<Item = Option<&'a str>>) -> String {
    array_literal(values, |literal, text| {
        literal.push('"');
        for c in text.chars() {
            if c == '"' || c == '\\' {
                literal.push('\\');
            }
            literal.push(c);
        }
        literal.push('"');
    })
}

/// `{a,b,...}` of `values`, each written by `element`, `NULL` where there is none.
fn array_literal<T>(
    values: impl Iterator<Item = Option<T>>,
    mut element: impl FnMut(&mut String, T),
) -> String {
    let mut literal = String::from("{");
    for (n, value) in values.enumerate() {
        if n > 0 {
            literal.push(',');
        }
        match value {
            Some(value) => element(&mut literal, value),
            None => literal.push_str("NULL"),
        }
    }
    literal.push('}');
    literal
}

/// One multi-row INSERT of `chunk` (at most [`ROWS_PER_STATEMENT`] rows), on SQLite.
async fn insert_rows(conn: &mut sqlx::AnyConnection, chunk: &[&Bill]) -> Result<(), DbError> {
    let rows = chunk.len().next_power_of_two();
    let sql = insert_sql(rows);
    let mut query = sqlx::query::<Any>(&sql);
    // The rows past the chunk are NULL throughout, and skipped by `column1 IS NOT NULL`.
    for row in 0..rows {
        let bill = chunk.get(row);
        let caller = bill.map(|bill| &bill.caller);
        query = query
            .bind(bill.map(|bill| bill.at))
            .bind(bill.map(|bill| bill.account_id))
            .bind(caller.and_then(Caller::key_id).map(str::to_owned))
            .bind(caller.and_then(Caller::user_id))
            .bind(caller.and_then(Caller::idp).map(str::to_owned))
            .bind(caller.and_then(Caller::subject).map(str::to_owned))
            .bind(bill.map(|bill| bill.survey.to_string()))
            .bind(
                bill.and_then(|bill| bill.group.as_deref())
                    .map(str::to_owned),
            )
            .bind(bill.map(|bill| bill.base.to_string()))
            .bind(bill.map(|bill| bill.targets))
            .bind(bill.map(|bill| bill.request_id.to_string()));
    }
    query.execute(&mut *conn).await?;
    Ok(())
}

/// An INSERT of the bills among `rows` rows of parameters whose `at` is not NULL. Its
/// parameters are anonymous `?`: SQLite looks numbered ones up by name, one linear scan
/// per parameter, which is quadratic over a 704-parameter statement.
fn insert_sql(rows: usize) -> String {
    let mut sql = String::from(
        "INSERT INTO ledger (at, account_id, key_id, user_id, idp, subject, survey, grp, base, targets, request_id) \
         SELECT * FROM (VALUES ",
    );
    for row in 0..rows {
        if row > 0 {
            sql.push_str(", ");
        }
        sql.push_str("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    }
    // SQLite names a VALUES list's columns column1, column2, ...
    sql.push_str(") WHERE column1 IS NOT NULL");
    sql
}

/// Number of bills in the ledger (for checks and tests).
pub async fn count(db: &Database) -> Result<i64, DbError> {
    use sqlx::Row;
    let row = sqlx::query("SELECT COUNT(*) FROM ledger")
        .fetch_one(db.pool())
        .await?;
    Ok(row.try_get(0)?)
}
