//! The billing ledger: one bill per `200` from `POST /v1/crosstab`, committed before the
//! response is sent.
//!
//! Group commit: requests hand their bill to one writer and wait. The writer takes
//! every bill pending at that moment, inserts them in one transaction, commits (one
//! fsync for the lot) and then acknowledges each. Under load the batch grows by itself,
//! so durability costs one commit per batch instead of one per request. If the
//! transaction fails, every request in it is told so (and answers 500, unbilled). A
//! request whose client went away before its batch was written is left out (it will
//! send no 200); one that goes away once it is written stays billed and is logged with
//! its request id, so the ledger reconciles with the access log.
//!
//! On SQLite the writer is a thread of its own with its own connection, calling SQLite
//! directly (`store/sqlite.rs`): `BEGIN IMMEDIATE`, one prepared single-row INSERT per
//! bill, the idempotency rows, `COMMIT`, all plain calls on that thread. On PostgreSQL it
//! is a thread too, running a runtime of its own with a connection of its own (outside
//! the pool): one INSERT whatever the batch's size, of a row per account holding its
//! bills as column arrays (in one transaction with the idempotency rows when there are
//! any); the view `ledger` reads them back one row per bill. On the server's runtime,
//! the database's answer to a commit would wait until a worker busy with requests polled
//! the network again, and every bill of the batch with it.

use std::collections::HashSet;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use sqlx::postgres::PgConnection;
use sqlx::Connection;
use tokio::sync::mpsc::{self, error::TryRecvError};
use tokio::sync::oneshot;

use super::sqlite::{self, Prepared, Value};
use super::{Database, DbError};
use crate::clock::Clock;

/// Most bills in one transaction.
const MAX_BATCH: usize = 1024;

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
/// the request it bills: no copy per bill. Its time is the writer's, as it writes the bill
/// ([`committed_within`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bill {
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
}

/// The answer a billed request with an `Idempotency-Key` got, kept in the bill's
/// transaction so a retry can be given it; kept only while the request still holds the
/// key (else the bill is not written either).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptAnswer {
    /// The account that holds the key.
    pub account_id: i64,
    /// The key (reserved by [`super::idempotency::reserve`]).
    pub key: Arc<str>,
    /// The token of the request's reservation.
    pub owner: Arc<str>,
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
    /// The request's `Idempotency-Key` is no longer its own (given back, or taken over by
    /// a retry once this request counted as abandoned); nothing was billed.
    #[error("the idempotency key is no longer this request's")]
    KeyLost,
}

/// Why one answer's bills were not committed.
#[derive(Debug, Clone)]
enum Refusal {
    /// The batch's transaction failed.
    Write(String),
    /// Its idempotency key is not its request's any more.
    KeyLost,
}

/// The bills of one answer (one for a crosstab, several for a table), committed together
/// or not at all, the answer to keep with its idempotency key, and where to say which.
struct Pending {
    bills: Vec<Bill>,
    kept: Option<KeptAnswer>,
    done: oneshot::Sender<Result<(), Refusal>>,
}

/// Which answers of a batch were left out because their key was lost, by place.
type Lost = Vec<bool>;

/// The bills of the answers of `batch` that `lost` does not leave out.
fn written<'a>(batch: &'a [Pending], lost: &'a [bool]) -> impl Iterator<Item = &'a Bill> {
    batch
        .iter()
        .zip(lost)
        .filter(|(_, lost)| !**lost)
        .flat_map(|(answer, _)| &answer.bills)
}

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

/// Runs the write loop for PostgreSQL, starting it again should it panic: the bills of
/// the batch it was writing are answered 500, unbilled (their transaction is rolled back
/// when its connection is dropped), and later ones go on.
async fn supervise(
    db: Database,
    clock: &dyn Clock,
    mut pending: mpsc::UnboundedReceiver<Pending>,
    _running: Running,
) {
    loop {
        let run = AssertUnwindSafe(write_loop(&db, clock, &mut pending))
            .catch_unwind()
            .await;
        match run {
            Ok(()) => return,
            Err(_) => tracing::error!("ledger writer panicked; restarted"),
        }
    }
}

/// [`supervise`] for the SQLite writer thread: after a panic the connection is dropped
/// (closing it rolls the open transaction back) and a fresh one is opened.
fn supervise_file(
    mut file: SqliteFile,
    clock: &dyn Clock,
    mut pending: mpsc::UnboundedReceiver<Pending>,
    _running: Running,
) {
    loop {
        let run = std::panic::catch_unwind(AssertUnwindSafe(|| {
            write_loop_file(&mut file, clock, &mut pending);
        }));
        match run {
            Ok(()) => return,
            Err(_) => {
                file.conn = None;
                tracing::error!("ledger writer panicked; restarted");
            }
        }
    }
}

/// The writer's thread (`None` if it could not be started); [`LedgerWriter::finish`]
/// waits until every bill handed over is committed (after the last [`Ledger`] handle is
/// dropped).
#[derive(Debug)]
pub struct LedgerWriter(Option<std::thread::JoinHandle<()>>);

impl LedgerWriter {
    /// Waits for the writer to drain and stop.
    pub async fn finish(self) {
        let Some(thread) = self.0 else {
            return;
        };
        let ended = tokio::task::spawn_blocking(move || thread.join().is_ok())
            .await
            .unwrap_or(false);
        if !ended {
            tracing::error!("ledger writer failed");
        }
    }
}

impl Ledger {
    /// Starts the writer on `db`: a thread of its own, calling SQLite on a SQLite file and
    /// running a runtime of its own otherwise. Should the thread not start, every bill is
    /// answered [`LedgerError::Stopped`], unbilled.
    ///
    /// Each batch's bills carry `clock`'s time as the writer begins writing them, so a
    /// bill commits within [`committed_within`] of its time however long it waited.
    pub fn start(db: Database, clock: Arc<dyn Clock>) -> (Ledger, LedgerWriter) {
        let (queue, pending) = mpsc::unbounded_channel();
        let alive = Arc::new(AtomicBool::new(true));
        let running = Running(Arc::clone(&alive));
        let thread = std::thread::Builder::new().name("crosstab-ledger".to_owned());
        let spawned = match db.sqlite_file() {
            Some(path) => {
                let file = SqliteFile {
                    path: path.to_path_buf(),
                    setup: db.options.setup(super::Backend::Sqlite),
                    conn: None,
                };
                thread.spawn(move || supervise_file(file, &*clock, pending, running))
            }
            None => thread.spawn(move || {
                match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => {
                        runtime.block_on(supervise(db, &*clock, pending, running));
                        // A connect's DNS lookup may still be running on a blocking
                        // thread; the writer's end waits for no more than a second of it.
                        runtime.shutdown_timeout(Duration::from_secs(1));
                    }
                    // `running` dropped: the writer reads as stopped.
                    Err(error) => tracing::error!(%error, "ledger writer not started"),
                }
            }),
        };
        let writer = match spawned {
            Ok(thread) => Some(thread),
            Err(error) => {
                tracing::error!(%error, "ledger writer not started");
                None
            }
        };
        (Ledger { queue, alive }, LedgerWriter(writer))
    }

    /// Whether the writer is running (and so bills can be committed).
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// Records `bill` durably; returns once it is committed.
    ///
    /// Dropping the future (the client went away) before the bill is written leaves it
    /// out; after it is committed, the bill stands and the drop is logged with the
    /// request id, so bills always reconcile with the access log (its lines' `billed`
    /// fields and these).
    pub async fn bill(&self, bill: Bill) -> Result<(), LedgerError> {
        self.submit(vec![bill], None).await
    }

    /// [`Ledger::bill`], keeping `kept` with the request's idempotency key in the same
    /// transaction; if the request no longer holds the key, nothing is billed
    /// ([`LedgerError::KeyLost`]).
    pub async fn bill_keeping(&self, bill: Bill, kept: KeptAnswer) -> Result<(), LedgerError> {
        self.submit(vec![bill], Some(kept)).await
    }

    /// Records every bill of one answer durably, in one transaction: all are committed
    /// or none is (with `kept`, if given, as [`Ledger::bill_keeping`] keeps it). Returns
    /// once they are; the same rules as [`Ledger::bill`].
    pub async fn bill_all(
        &self,
        bills: Vec<Bill>,
        kept: Option<KeptAnswer>,
    ) -> Result<(), LedgerError> {
        self.submit(bills, kept).await
    }

    async fn submit(&self, bills: Vec<Bill>, kept: Option<KeptAnswer>) -> Result<(), LedgerError> {
        let Some(first) = bills.first() else {
            // An answer is kept only with its bills: none would leave its key held,
            // unanswered, until it counted as abandoned.
            return match kept {
                None => Ok(()),
                Some(_) => Err(LedgerError::Write(
                    "an answer to keep came without a bill".to_owned(),
                )),
            };
        };
        let (done, committed) = oneshot::channel();
        let mut awaiting = Awaiting {
            request_id: Arc::clone(&first.request_id),
            committed,
        };
        self.queue
            .send(Pending { bills, kept, done })
            .map_err(|_| LedgerError::Stopped)?;
        match (&mut awaiting.committed).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(Refusal::Write(reason))) => Err(LedgerError::Write(reason)),
            Ok(Err(Refusal::KeyLost)) => Err(LedgerError::KeyLost),
            Err(_) => Err(LedgerError::Stopped),
        }
    }
}

/// A request waiting for its bill's commit.
struct Awaiting {
    request_id: Arc<str>,
    committed: oneshot::Receiver<Result<(), Refusal>>,
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

async fn write_loop(
    db: &Database,
    clock: &dyn Clock,
    pending: &mut mpsc::UnboundedReceiver<Pending>,
) {
    let mut batch: Vec<Pending> = Vec::new();
    let mut held = Held::default();
    // Waits for the first bill; stops once every `Ledger` is dropped and all is written.
    while let Some(first) = pending.recv().await {
        if !gather(first, pending, &mut batch) {
            continue;
        }
        let started = Instant::now();
        let result = held.write(db, clock, &mut batch).await;
        settle(&mut batch, result, started);
    }
    // Every bill is written: the connection is ended as the database expects.
    if let Some(session) = held.0.take() {
        if let Err(error) = session.conn.close().await {
            tracing::debug!(%error, "ledger connection not closed cleanly");
        }
    }
}

/// [`write_loop`] on the SQLite writer thread.
fn write_loop_file(
    file: &mut SqliteFile,
    clock: &dyn Clock,
    pending: &mut mpsc::UnboundedReceiver<Pending>,
) {
    let mut batch: Vec<Pending> = Vec::new();
    while let Some(first) = pending.blocking_recv() {
        if !gather(first, pending, &mut batch) {
            continue;
        }
        let started = Instant::now();
        let result = file.write(&batch, clock.now_ms());
        settle(&mut batch, result, started);
    }
}

/// Makes `batch` of `first` and every bill already waiting (under load the batch grows by
/// itself; an answer's bills are never split, so one may take it past the bound), less
/// those whose requester went away; whether any is left to write.
fn gather(
    first: Pending,
    pending: &mut mpsc::UnboundedReceiver<Pending>,
    batch: &mut Vec<Pending>,
) -> bool {
    let mut bills = first.bills.len();
    batch.push(first);
    while bills < MAX_BATCH {
        match pending.try_recv() {
            Ok(next) => {
                bills += next.bills.len();
                batch.push(next);
            }
            Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
        }
    }
    drop_departed(batch)
}

/// Drops from `batch` the answers whose requester went away (its client disconnected):
/// it will send no 200, so it is not billed. Whether any is left to write.
fn drop_departed(batch: &mut Vec<Pending>) -> bool {
    let before = batch.len();
    batch.retain(|answer| !answer.done.is_closed());
    if batch.len() < before {
        tracing::info!(
            answers = before - batch.len(),
            "not billed: the client went away before the bill was written"
        );
    }
    !batch.is_empty()
}

/// Tells every requester of `batch` how its write, begun at `started`, ended.
fn settle(batch: &mut Vec<Pending>, result: Result<Lost, DbError>, started: Instant) {
    tracing::debug!(
        bills = batch.len(),
        us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
        "ledger batch"
    );
    let (result, lost) = match result {
        Ok(lost) => (Ok(()), lost),
        Err(error) => {
            let reason = error.to_string();
            tracing::error!(bills = batch.len(), %reason, "ledger write failed; requests answered 500");
            (Err(Refusal::Write(reason)), Lost::new())
        }
    };
    for (place, answer) in batch.drain(..).enumerate() {
        let outcome = match lost.get(place) {
            Some(true) => Err(Refusal::KeyLost),
            _ => result.clone(),
        };
        let billed = outcome.is_ok();
        if answer.done.send(outcome).is_err() && billed {
            // Gone during the commit: billed, yet no 200 will be sent.
            if let Some(bill) = answer.bills.first() {
                abandoned(&bill.request_id);
            }
        }
    }
}

/// The SQLite file the writer thread bills into, and its connection (opened on first use
/// and again after a failure, so none is kept in an unknown state).
struct SqliteFile {
    path: PathBuf,
    setup: Vec<String>,
    conn: Option<FileWriter>,
}

/// The writer thread's connection and its statements, prepared once.
struct FileWriter {
    conn: sqlite::Connection,
    begin: Prepared,
    insert: Prepared,
    keep_answer: Prepared,
    commit: Prepared,
}

impl SqliteFile {
    /// The batch in one transaction, committed with the database's `synchronous` setting
    /// (FULL by default: the WAL is fsynced before `COMMIT` returns, so before any 200);
    /// which answers were left out, their key lost.
    fn write(&mut self, batch: &[Pending], at: i64) -> Result<Lost, DbError> {
        let writer = match &mut self.conn {
            Some(writer) => writer,
            None => self.conn.insert(FileWriter::open(&self.path, &self.setup)?),
        };
        let written = writer.write(batch, at);
        if written.is_err() {
            // Closing the connection rolls back whatever of the batch was written.
            self.conn = None;
        }
        Ok(written?)
    }
}

impl FileWriter {
    fn open(path: &Path, setup: &[String]) -> Result<FileWriter, sqlite::SqliteError> {
        let mut conn = sqlite::Connection::open(path)?;
        for statement in setup {
            conn.execute_batch(statement)?;
        }
        Ok(FileWriter {
            begin: conn.prepare("BEGIN IMMEDIATE")?,
            insert: conn.prepare(
                "INSERT INTO ledger (at, account_id, key_id, user_id, idp, subject, survey, grp, base, targets, request_id) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            )?,
            keep_answer: conn.prepare(
                "UPDATE idempotency_keys SET status = 200, response = ?4 \
                 WHERE account_id = ?1 AND key = ?2 AND owner = ?3 AND status IS NULL",
            )?,
            commit: conn.prepare("COMMIT")?,
            conn,
        })
    }

    /// The batch's bills, each at `at`.
    fn write(&mut self, batch: &[Pending], at: i64) -> Result<Lost, sqlite::SqliteError> {
        fn text(text: Option<&str>) -> Value<'_> {
            text.map_or(Value::Null, Value::Text)
        }
        fn int(int: Option<i64>) -> Value<'static> {
            int.map_or(Value::Null, Value::Int)
        }
        self.conn.run(self.begin, &[])?;
        // An answer's key first: its bills are written only if the answer was kept.
        let mut lost = Lost::with_capacity(batch.len());
        for answer in batch {
            let kept = match &answer.kept {
                None => true,
                Some(kept) => {
                    self.conn.run(
                        self.keep_answer,
                        &[
                            Value::Int(kept.account_id),
                            Value::Text(&kept.key),
                            Value::Text(&kept.owner),
                            Value::Blob(&kept.body),
                        ],
                    )?;
                    self.conn.changes() == 1
                }
            };
            lost.push(!kept);
        }
        for bill in written(batch, &lost) {
            let caller = &bill.caller;
            self.conn.run(
                self.insert,
                &[
                    Value::Int(at),
                    Value::Int(bill.account_id),
                    text(caller.key_id()),
                    int(caller.user_id()),
                    text(caller.idp()),
                    text(caller.subject()),
                    Value::Text(&bill.survey),
                    text(bill.group.as_deref()),
                    Value::Text(&bill.base),
                    Value::Int(bill.targets),
                    Value::Text(&bill.request_id),
                ],
            )?;
        }
        fault_point(batch);
        self.conn.run(self.commit, &[])?;
        Ok(lost)
    }
}

/// The writer's own connection, kept from batch to batch and opened again after a failure.
#[derive(Default)]
struct Held(Option<Session>);

/// A connection of the writer's, with what names its session on the server (to end it
/// from another connection), and when it was last used.
struct Session {
    conn: PgConnection,
    pid: i32,
    started: String,
    used: Instant,
}

impl Session {
    async fn open(db: &Database) -> Result<Session, DbError> {
        let mut conn = db.connect_postgres().await?;
        let (pid, started): (i32, String) = sqlx::query_as(
            "SELECT pid, backend_start::text FROM pg_stat_activity WHERE pid = pg_backend_pid()",
        )
        .fetch_one(&mut conn)
        .await?;
        Ok(Session {
            conn,
            pid,
            started,
            used: Instant::now(),
        })
    }
}

/// A connection idle longer than this is tested before a batch is written on it (the
/// database may have restarted meanwhile): a failed test costs no bill, a failed write
/// costs the batch's.
const IDLE_TEST: Duration = Duration::from_secs(1);

/// How long one attempt at a batch may take on PostgreSQL: its UPDATE, INSERT and COMMIT,
/// each within the statement timeout, and a margin.
fn write_limit(statement_timeout: Duration) -> Duration {
    statement_timeout * 3 + Duration::from_secs(1)
}

/// How long after the time a bill carries it may still be committed: the writer stamps a
/// batch as an attempt at it begins, and an attempt takes at most its time limit, then a
/// look for it whose commit went unanswered ([`reconcile`]) as long again; the look ends
/// the attempt's session first, so nothing of it commits later. (A look that itself fails
/// or runs out leaves the session to the database: its requests are answered 500,
/// "perhaps billed", to be reconciled by hand, and a commit of it that takes later is past
/// this.) SQLite's writer waits on a busy file no longer than one statement timeout a
/// statement, well within it.
pub fn committed_within(db: &Database) -> Duration {
    write_limit(db.options.statement_timeout) * 2
}

/// How a batch on PostgreSQL ended when it did not plainly commit.
enum Unwritten {
    /// Nothing of it can be in the database: it failed before its commit was sent, or
    /// the database answered the commit with an error.
    Not(DbError),
    /// Its commit was sent and no answer came (or the batch ran out of time): it may be
    /// in the database.
    Unknown(DbError),
}

impl Unwritten {
    /// A failure of the statement that commits: certain only when the database itself
    /// answered (with an error); lost on the way, the commit may have taken.
    fn of_commit(error: impl Into<DbError>) -> Unwritten {
        match error.into() {
            error @ DbError::Sqlx(sqlx::Error::Database(_)) => Unwritten::Not(error),
            error => Unwritten::Unknown(error),
        }
    }
}

impl From<sqlx::Error> for Unwritten {
    fn from(error: sqlx::Error) -> Unwritten {
        Unwritten::Not(DbError::Sqlx(error))
    }
}

impl From<DbError> for Unwritten {
    fn from(error: DbError) -> Unwritten {
        Unwritten::Not(error)
    }
}

impl Held {
    /// Writes `batch` on the held connection (opened first if need be); after a failure
    /// the connection is dropped, and the next batch opens another. Every step is timed
    /// here too: a connection whose packets vanish fails no statement on the server, and
    /// would hold every bill behind it until the kernel gives up (minutes). A batch whose
    /// commit may have taken is looked for in the database ([`reconcile`]), so a call
    /// billed is never answered 500 (its client would send it again, and pay twice).
    ///
    /// Opening a connection may take a while (the database restarting): requesters that
    /// went away meanwhile are dropped from `batch` right before it is written. A held
    /// connection found gone when the batch is sent (the database restarted within the
    /// second it goes untested) is replaced once, the batch unwritten on it.
    async fn write(
        &mut self,
        db: &Database,
        clock: &dyn Clock,
        batch: &mut Vec<Pending>,
    ) -> Result<Lost, DbError> {
        let statement = db.options.statement_timeout;
        let mut replaced = false;
        loop {
            // Taken out for the batch, and put back only after a success.
            let (mut session, held) = match self.0.take() {
                Some(mut session) => {
                    let usable = session.used.elapsed() <= IDLE_TEST
                        || matches!(
                            tokio::time::timeout(statement, session.conn.ping()).await,
                            Ok(Ok(()))
                        );
                    if usable {
                        (session, true)
                    } else {
                        (Session::open(db).await?, false)
                    }
                }
                None => (Session::open(db).await?, false),
            };
            if !drop_departed(batch) {
                self.0 = Some(session);
                return Ok(Lost::new());
            }
            let limit = write_limit(statement);
            // Stamped as each attempt begins: one that failed left nothing behind.
            let at = clock.now_ms();
            let result = tokio::time::timeout(limit, write_batch(&mut session.conn, batch, at))
                .await
                .unwrap_or(Err(Unwritten::Unknown(DbError::TimedOut(limit))));
            // Why the batch is certainly not in the database, if it is not.
            let unwritten = match result {
                Ok(lost) => {
                    session.used = Instant::now();
                    self.0 = Some(session);
                    return Ok(lost);
                }
                Err(Unwritten::Not(error)) => error,
                Err(Unwritten::Unknown(error)) => {
                    let found =
                        tokio::time::timeout(limit, reconcile(db, &session, batch, at)).await;
                    match found {
                        Ok(Ok(Some(lost))) => {
                            tracing::warn!(%error, "ledger commit unanswered, but it took");
                            return Ok(lost);
                        }
                        // Looked for and not there: as good as unwritten.
                        Ok(Ok(None)) => error,
                        Ok(Err(reason)) => return Err(unknown(batch, &error, &reason.to_string())),
                        Err(_) => {
                            return Err(unknown(batch, &error, "the database did not answer"))
                        }
                    }
                }
            };
            if held && !replaced && connection_gone(&unwritten) {
                tracing::warn!(error = %unwritten, "ledger connection gone; the batch goes on a new one");
                replaced = true;
                continue;
            }
            return Err(unwritten);
        }
    }
}

/// Whether `error` says the connection itself is gone (the socket closed, or the server
/// ended the session: shutting down, restarted, or the session terminated), rather than
/// anything about the statement.
fn connection_gone(error: &DbError) -> bool {
    match error {
        DbError::Sqlx(sqlx::Error::Io(_)) => true,
        DbError::Sqlx(sqlx::Error::Database(error)) => error
            .code()
            .is_some_and(|code| code.starts_with("08") || code.starts_with("57P")),
        _ => false,
    }
}

/// The refusal of a batch whose commit may have taken: its requests are answered 500,
/// and each is logged as possibly billed, to be reconciled with the ledger by hand.
fn unknown(batch: &[Pending], error: &DbError, reason: &str) -> DbError {
    for bill in batch.iter().flat_map(|answer| &answer.bills) {
        tracing::error!(
            request_id = &*bill.request_id,
            "answered 500, yet perhaps billed: the ledger's commit went unanswered"
        );
    }
    DbError::OutcomeUnknown(format!("{error}; not found out: {reason}"))
}

/// After a commit of `batch` on `session` went unanswered: `Some` with the answers whose
/// key was lost when the batch is in the database, `None` when it is not. The session is
/// ended first (from a new connection), so its commit cannot take after the look.
async fn reconcile(
    db: &Database,
    session: &Session,
    batch: &[Pending],
    at: i64,
) -> Result<Option<Lost>, DbError> {
    let mut conn = db.connect_postgres().await?;
    sqlx::query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE pid = $1 AND backend_start::text = $2",
    )
    .bind(session.pid)
    .bind(&session.started)
    .execute(&mut conn)
    .await?;
    loop {
        let gone: bool = sqlx::query_scalar(
            "SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity \
             WHERE pid = $1 AND backend_start::text = $2)",
        )
        .bind(session.pid)
        .bind(&session.started)
        .fetch_one(&mut conn)
        .await?;
        if gone {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The kept answers the batch committed: only its transaction sets their rows so.
    let kept: Vec<&KeptAnswer> = batch.iter().filter_map(|a| a.kept.as_ref()).collect();
    let owners: Vec<String> = if kept.is_empty() {
        Vec::new()
    } else {
        let (accounts, keys, owners) = kept_columns(&kept);
        sqlx::query_scalar(
            "SELECT k.owner FROM idempotency_keys AS k \
             JOIN UNNEST($1::bigint[], $2::text[], $3::text[]) AS a (account_id, key, owner) \
               ON k.account_id = a.account_id AND k.key = a.key AND k.owner = a.owner \
             WHERE k.status = 200",
        )
        .bind(accounts)
        .bind(keys)
        .bind(owners)
        .fetch_all(&mut conn)
        .await?
    };
    let kept_now: HashSet<&str> = owners.iter().map(String::as_str).collect();
    let lost = lost_keys(batch, &kept_now);
    let landed = !kept_now.is_empty()
        || match written(batch, &lost).next() {
            Some(bill) => {
                sqlx::query_scalar(
                    "SELECT EXISTS (SELECT 1 FROM ledger_batches WHERE account_id = $1 \
                 AND first_at <= $2 AND last_at >= $2 AND $3 = ANY (request_id))",
                )
                .bind(bill.account_id)
                .bind(at)
                .bind(&*bill.request_id)
                .fetch_one(&mut conn)
                .await?
            }
            None => false,
        };
    Ok(landed.then_some(lost))
}

/// The account, key and owner token of each kept answer, as columns to unnest.
fn kept_columns<'a>(kept: &[&'a KeptAnswer]) -> (Vec<i64>, Vec<&'a str>, Vec<&'a str>) {
    (
        kept.iter().map(|k| k.account_id).collect(),
        kept.iter().map(|k| &*k.key).collect(),
        kept.iter().map(|k| &*k.owner).collect(),
    )
}

/// Which answers of `batch` lost their key: those with an answer to keep that the
/// batch's transaction did not keep.
fn lost_keys(batch: &[Pending], kept_now: &HashSet<&str>) -> Lost {
    batch
        .iter()
        .map(|answer| {
            answer
                .kept
                .as_ref()
                .is_some_and(|kept| !kept_now.contains(&*kept.owner))
        })
        .collect()
}

/// The batch on PostgreSQL: one INSERT, which commits by itself, unless it keeps
/// idempotent answers too; then one transaction, keeping the answers first (one UPDATE
/// for all) and billing only the answers kept.
async fn write_batch(
    conn: &mut PgConnection,
    batch: &[Pending],
    at: i64,
) -> Result<Lost, Unwritten> {
    let kept: Vec<&KeptAnswer> = batch
        .iter()
        .filter_map(|answer| answer.kept.as_ref())
        .collect();
    // On a loaded machine each round trip waits for the database's process to run: a
    // lone statement saves BEGIN's and COMMIT's.
    if kept.is_empty() {
        let bills: Vec<&Bill> = batch.iter().flat_map(|answer| &answer.bills).collect();
        fault_point(batch);
        connection_lost(batch, Loss::Commit)?;
        insert_columns(conn, bills, at)
            .await
            .map_err(Unwritten::of_commit)?;
        connection_lost(batch, Loss::Reply)?;
        return Ok(vec![false; batch.len()]);
    }
    let mut tx = conn.begin().await?;
    let (accounts, keys, owners) = kept_columns(&kept);
    let owners: Vec<String> = sqlx::query_scalar(
        "UPDATE idempotency_keys AS k SET status = 200, response = a.response \
         FROM UNNEST($1::bigint[], $2::text[], $3::text[], $4::bytea[]) \
              AS a (account_id, key, owner, response) \
         WHERE k.account_id = a.account_id AND k.key = a.key AND k.owner = a.owner \
           AND k.status IS NULL \
         RETURNING k.owner",
    )
    .bind(accounts)
    .bind(keys)
    .bind(owners)
    .bind(kept.iter().map(|k| &k.body[..]).collect::<Vec<_>>())
    .fetch_all(&mut *tx)
    .await?;
    let kept_now: HashSet<&str> = owners.iter().map(String::as_str).collect();
    let lost = lost_keys(batch, &kept_now);
    let bills: Vec<&Bill> = written(batch, &lost).collect();
    if !bills.is_empty() {
        insert_columns(&mut tx, bills, at).await?;
    }
    fault_point(batch);
    connection_lost(batch, Loss::Commit)?;
    tx.commit().await.map_err(Unwritten::of_commit)?;
    connection_lost(batch, Loss::Reply)?;
    Ok(lost)
}

/// Where a test makes the writer panic, before its batch is committed: never, outside
/// tests.
#[cfg(not(test))]
fn fault_point(_batch: &[Pending]) {}

/// A bill with this request id makes the writer panic before its batch is committed.
#[cfg(test)]
const PANIC_REQUEST_ID: &str = "test: the ledger writer panics";

/// Where a batch's connection to PostgreSQL can be lost in a test: on the commit's way
/// there (it never takes), or on its reply's way back (it took).
#[derive(Debug, Clone, Copy)]
enum Loss {
    Commit,
    Reply,
}

/// A lost connection, in tests: never, outside them.
#[cfg(not(test))]
fn connection_lost(_batch: &[Pending], _loss: Loss) -> Result<(), Unwritten> {
    Ok(())
}

/// A bill with this request id has its batch's commit lost on its way.
#[cfg(test)]
const COMMIT_LOST_REQUEST_ID: &str = "test: the commit is lost on its way";

/// A bill with this request id has its batch's commit taken, and the reply lost.
#[cfg(test)]
const REPLY_LOST_REQUEST_ID: &str = "test: the reply to the commit is lost";

#[cfg(test)]
fn connection_lost(batch: &[Pending], loss: Loss) -> Result<(), Unwritten> {
    let request_id = match loss {
        Loss::Commit => COMMIT_LOST_REQUEST_ID,
        Loss::Reply => REPLY_LOST_REQUEST_ID,
    };
    let lost = batch
        .iter()
        .flat_map(|answer| &answer.bills)
        .any(|bill| &*bill.request_id == request_id);
    if lost {
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        return Err(Unwritten::Unknown(DbError::Sqlx(sqlx::Error::Io(reset))));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::panic)]
fn fault_point(batch: &[Pending]) {
    let bills = batch.iter().flat_map(|answer| &answer.bills);
    if bills
        .clone()
        .any(|bill| &*bill.request_id == PANIC_REQUEST_ID)
    {
        panic!("{PANIC_REQUEST_ID}");
    }
    if bills
        .clone()
        .any(|bill| &*bill.request_id == PAUSE_REQUEST_ID)
    {
        PAUSE.pause();
    }
}

/// A bill with this request id pauses the writer before its batch is committed, until the
/// test releases it ([`PAUSE`]).
#[cfg(test)]
const PAUSE_REQUEST_ID: &str = "test: the ledger writer pauses";

#[cfg(test)]
static PAUSE: Pause = Pause {
    state: std::sync::Mutex::new(Paused::No),
    changed: std::sync::Condvar::new(),
};

/// Where the writer is with its pause (tests).
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Paused {
    No,
    Reached,
    Released,
}

/// The writer's pause: each side waits a bounded time, so a test that goes wrong fails
/// rather than hangs.
#[cfg(test)]
struct Pause {
    state: std::sync::Mutex<Paused>,
    changed: std::sync::Condvar,
}

#[cfg(test)]
impl Pause {
    fn state(&self) -> std::sync::MutexGuard<'_, Paused> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The writer: says it is here, and waits (a minute at most) to be released.
    fn pause(&self) {
        let mut state = self.state();
        *state = Paused::Reached;
        self.changed.notify_all();
        let (mut state, _) = self
            .changed
            .wait_timeout_while(state, Duration::from_secs(60), |s| *s != Paused::Released)
            .unwrap_or_else(|p| p.into_inner());
        *state = Paused::No;
    }

    /// The test: whether the writer reached its pause within `within`.
    fn reached(&self, within: Duration) -> bool {
        let state = self.state();
        let (state, _) = self
            .changed
            .wait_timeout_while(state, within, |s| *s != Paused::Reached)
            .unwrap_or_else(|p| p.into_inner());
        *state == Paused::Reached
    }

    /// The test: lets the writer go on.
    fn release(&self) {
        *self.state() = Paused::Released;
        self.changed.notify_all();
    }
}

/// Most bills in one row of `ledger_batches`: ~110 bytes a bill keeps a row well within
/// a page, where PostgreSQL neither compresses it nor moves it out of line.
const ROW_BILLS: usize = 32;

/// One INSERT of `bills`, each at `at`, as rows of `ledger_batches`, one per account in
/// the batch (cut after [`ROW_BILLS`]), whatever the batch's size: the bills go as one
/// array a column, each account's together, and each row takes its slice (the server then
/// reads 13 parameters, in binary, instead of 11 per bill). The time is sent once: a
/// row's earliest, latest and every bill's are the batch's.
async fn insert_columns(
    conn: &mut PgConnection,
    mut bills: Vec<&Bill>,
    at: i64,
) -> Result<(), DbError> {
    fn column<'a, I, T>(items: &'a [I], value: impl Fn(&'a I) -> T) -> Vec<T> {
        items.iter().map(value).collect()
    }
    // Stable: each account's bills stay in the order they came.
    bills.sort_by_key(|bill| bill.account_id);
    let rows = rows_of(&bills);
    sqlx::query(
        "INSERT INTO ledger_batches (account_id, first_at, last_at, at, key_id, user_id, idp, \
                                     subject, survey, grp, base, targets, request_id) \
         SELECT r.account_id, $2, $2, array_fill($2::bigint, ARRAY[r.hi - r.lo + 1]), \
                ($5::text[])[r.lo:r.hi], ($6::bigint[])[r.lo:r.hi], ($7::text[])[r.lo:r.hi], \
                ($8::text[])[r.lo:r.hi], ($9::text[])[r.lo:r.hi], ($10::text[])[r.lo:r.hi], \
                ($11::text[])[r.lo:r.hi], ($12::bigint[])[r.lo:r.hi], ($13::text[])[r.lo:r.hi] \
         FROM UNNEST($1::bigint[], $3::bigint[]::int[], $4::bigint[]::int[]) \
              AS r (account_id, lo, hi)",
    )
    .bind(column(&rows, |row| row.account_id))
    .bind(at)
    .bind(column(&rows, |row| row.lo))
    .bind(column(&rows, |row| row.hi))
    .bind(column(&bills, |bill| bill.caller.key_id()))
    .bind(column(&bills, |bill| bill.caller.user_id()))
    .bind(column(&bills, |bill| bill.caller.idp()))
    .bind(column(&bills, |bill| bill.caller.subject()))
    .bind(column(&bills, |bill| &*bill.survey))
    .bind(column(&bills, |bill| bill.group.as_deref()))
    .bind(column(&bills, |bill| &*bill.base))
    .bind(column(&bills, |bill| bill.targets))
    .bind(column(&bills, |bill| &*bill.request_id))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// One row of `ledger_batches`: an account's bills `lo..=hi` of the batch (from 1,
/// PostgreSQL's first index).
#[derive(Debug, PartialEq, Eq)]
struct BatchRow {
    account_id: i64,
    lo: i64,
    hi: i64,
}

/// The rows `bills` (each account's together) are stored in: a row per account, cut
/// after [`ROW_BILLS`].
fn rows_of(bills: &[&Bill]) -> Vec<BatchRow> {
    let mut rows = Vec::new();
    let mut before = 0;
    for account in bills.chunk_by(|a, b| a.account_id == b.account_id) {
        for part in account.chunks(ROW_BILLS) {
            let Some(first) = part.first() else {
                continue;
            };
            rows.push(BatchRow {
                account_id: first.account_id,
                // A slice's length is at most isize::MAX: never cut short.
                lo: before as i64 + 1,
                hi: (before + part.len()) as i64,
            });
            before += part.len();
        }
    }
    rows
}

/// Number of bills in the ledger (for checks and tests).
pub async fn count(db: &Database) -> Result<i64, DbError> {
    use sqlx::Row;
    let row = sqlx::query("SELECT COUNT(*) FROM ledger")
        .fetch_one(db.pool())
        .await?;
    Ok(row.try_get(0)?)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::clock::{ManualClock, SystemClock};
    use crate::grants::GrantSpec;
    use crate::keys::KeyEnv;
    use crate::store::accounts;
    use crate::store::idempotency::{self, Claim, Reservation};

    fn bill(account_id: i64, request_id: &str) -> Bill {
        Bill {
            account_id,
            caller: Caller::Key("0123456789abcdef".into()),
            survey: "VEC".into(),
            group: None,
            base: "ALL".into(),
            targets: 1,
            request_id: request_id.into(),
        }
    }

    /// The request ids of `account_id`'s bills, sorted.
    async fn billed(db: &Database, account_id: i64) -> Vec<String> {
        let mut ids: Vec<String> =
            sqlx::query_scalar("SELECT request_id FROM ledger WHERE account_id = $1")
                .bind(account_id)
                .fetch_all(db.pool())
                .await
                .unwrap();
        ids.sort();
        ids
    }

    /// The throwaway PostgreSQL's URL (`CROSSTAB_TEST_POSTGRES_URL`); `None`, and the
    /// test skipped, without one.
    fn postgres_url() -> Option<String> {
        let url = std::env::var("CROSSTAB_TEST_POSTGRES_URL").ok();
        if url.is_none() {
            eprintln!("CROSSTAB_TEST_POSTGRES_URL not set: PostgreSQL test skipped");
        }
        url
    }

    /// A new account's id (made with a key, as accounts are).
    async fn account(db: &Database) -> i64 {
        let name = format!("panic-{}", uuid::Uuid::new_v4().simple());
        let grant: GrantSpec = "VEC".parse().unwrap();
        accounts::create_key(db, &name, &[grant], KeyEnv::Live, None)
            .await
            .unwrap();
        accounts::account_id(db, &name).await.unwrap().unwrap()
    }

    /// A writer that panics mid-batch is started again: the batch's answer is refused,
    /// none of its bills written and its idempotent answer not kept (its transaction
    /// rolled back), the writer still counts as alive for `/ready`, and the next bill is
    /// written.
    async fn a_panicking_writer_is_restarted(db: &Database) {
        let account_id = account(db).await;
        let (ledger, writer) = Ledger::start(db.clone(), Arc::new(SystemClock));
        ledger.bill(bill(account_id, "before")).await.unwrap();
        let refused = ledger
            .bill_all(
                vec![
                    bill(account_id, "beside the panic"),
                    bill(account_id, PANIC_REQUEST_ID),
                ],
                None,
            )
            .await;
        assert!(matches!(refused, Err(LedgerError::Stopped)), "{refused:?}");
        // With a key to keep the answer by: one transaction (on PostgreSQL too), the
        // answer kept and the bill written in it before the panic, both rolled back.
        let claim = Claim {
            account_id,
            key: "k",
            body_sha256: "ab",
            owner: "holder",
        };
        let reserved = idempotency::reserve(db, claim, 0, -1, -1).await.unwrap();
        assert_eq!(reserved, Reservation::Reserved);
        let kept = KeptAnswer {
            account_id,
            key: "k".into(),
            owner: "holder".into(),
            body: axum::body::Bytes::from_static(b"{}"),
        };
        let refused = ledger
            .bill_keeping(bill(account_id, PANIC_REQUEST_ID), kept)
            .await;
        assert!(matches!(refused, Err(LedgerError::Stopped)), "{refused:?}");
        let unanswered: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM idempotency_keys \
             WHERE account_id = $1 AND key = 'k' AND status IS NULL",
        )
        .bind(account_id)
        .fetch_one(db.pool())
        .await
        .unwrap();
        assert_eq!(unanswered, 1, "the kept answer was not rolled back");
        assert!(ledger.is_alive());
        ledger.bill(bill(account_id, "after")).await.unwrap();
        assert_eq!(billed(db, account_id).await, ["after", "before"]);
        drop(ledger);
        writer.finish().await;
    }

    /// On PostgreSQL, a batch whose commit went unanswered is looked for in the database:
    /// one that took is answered as billed (a 500 would have its calls sent again, and
    /// billed twice), with its kept answer; one that never took is refused, nothing
    /// billed, and its key is still the request's to give back.
    #[tokio::test]
    async fn an_unanswered_postgres_commit_is_found_out() {
        let Some(url) = postgres_url() else {
            return;
        };
        let db = Database::connect(&url).await.unwrap();
        let account_id = account(&db).await;
        let (ledger, writer) = Ledger::start(db.clone(), Arc::new(SystemClock));
        ledger
            .bill_all(
                vec![
                    bill(account_id, "took"),
                    bill(account_id, REPLY_LOST_REQUEST_ID),
                ],
                None,
            )
            .await
            .unwrap();
        assert_eq!(
            billed(&db, account_id).await,
            [REPLY_LOST_REQUEST_ID, "took"]
        );
        let refused = ledger
            .bill_all(
                vec![
                    bill(account_id, "never took"),
                    bill(account_id, COMMIT_LOST_REQUEST_ID),
                ],
                None,
            )
            .await;
        assert!(matches!(refused, Err(LedgerError::Write(_))), "{refused:?}");
        assert_eq!(
            billed(&db, account_id).await,
            [REPLY_LOST_REQUEST_ID, "took"]
        );

        // With answers to keep: one transaction, found out the same way.
        for (key, request_id, took) in [
            ("kept", REPLY_LOST_REQUEST_ID, true),
            ("not kept", COMMIT_LOST_REQUEST_ID, false),
        ] {
            let claim = Claim {
                account_id,
                key,
                body_sha256: "ab",
                owner: "holder",
            };
            let reserved = idempotency::reserve(&db, claim, 0, -1, -1).await.unwrap();
            assert_eq!(reserved, Reservation::Reserved);
            let kept = KeptAnswer {
                account_id,
                key: key.into(),
                owner: "holder".into(),
                body: axum::body::Bytes::from_static(b"{}"),
            };
            let answer = ledger
                .bill_keeping(bill(account_id, request_id), kept)
                .await;
            assert_eq!(answer.is_ok(), took, "{key}: {answer:?}");
            let status: Option<i32> = sqlx::query_scalar(
                "SELECT status FROM idempotency_keys WHERE account_id = $1 AND key = $2",
            )
            .bind(account_id)
            .bind(key)
            .fetch_one(db.pool())
            .await
            .unwrap();
            assert_eq!(status, took.then_some(200), "{key}");
        }
        assert_eq!(
            billed(&db, account_id).await,
            [REPLY_LOST_REQUEST_ID, REPLY_LOST_REQUEST_ID, "took"]
        );
        ledger.bill(bill(account_id, "after")).await.unwrap();
        drop(ledger);
        writer.finish().await;
    }

    #[tokio::test]
    async fn a_panicking_sqlite_writer_is_restarted() {
        let (_dir, db) = crate::store::scratch().await;
        a_panicking_writer_is_restarted(&db).await;
    }

    /// The same on PostgreSQL, when `CROSSTAB_TEST_POSTGRES_URL` names one.
    #[tokio::test]
    async fn a_panicking_postgres_writer_is_restarted() {
        let Some(url) = postgres_url() else {
            return;
        };
        let db = Database::connect(&url).await.unwrap();
        a_panicking_writer_is_restarted(&db).await;
    }

    /// A bill carries the time its batch is written, not the time it was handed over: one
    /// that waited behind a stalled batch still commits within [`committed_within`] of its
    /// time, which is what lets the daily quota take older bills as final. The first batch
    /// pauses once written, before its commit ([`PAUSE_REQUEST_ID`]); a bill handed over
    /// meanwhile waits while the clock moves on 61 s.
    async fn a_bill_carries_the_time_its_batch_is_written(db: &Database) {
        const START: i64 = 1_800_000_000_000;
        let account_id = account(db).await;
        let clock = ManualClock::at(START);
        let (ledger, writer) = Ledger::start(db.clone(), clock.clone());
        let first = tokio::spawn({
            let ledger = ledger.clone();
            async move { ledger.bill(bill(account_id, PAUSE_REQUEST_ID)).await }
        });
        let paused = tokio::task::spawn_blocking(|| PAUSE.reached(Duration::from_secs(30)));
        assert!(paused.await.unwrap(), "the writer never reached its pause");
        let mut waiting = Box::pin({
            let ledger = ledger.clone();
            async move { ledger.bill(bill(account_id, "waiting")).await }
        });
        // Polled once: handed over, and waiting (the writer is paused).
        let handed = tokio::time::timeout(Duration::from_millis(1), &mut waiting).await;
        assert!(handed.is_err(), "written while the writer was paused");
        clock.advance(61_000);
        PAUSE.release();
        first.await.unwrap().unwrap();
        waiting.await.unwrap();
        let mut times: Vec<(String, i64)> =
            sqlx::query_as("SELECT request_id, at FROM ledger WHERE account_id = $1")
                .bind(account_id)
                .fetch_all(db.pool())
                .await
                .unwrap();
        times.sort();
        assert_eq!(
            times,
            [
                (PAUSE_REQUEST_ID.to_owned(), START),
                ("waiting".to_owned(), START + 61_000)
            ]
        );
        drop(ledger);
        writer.finish().await;
    }

    /// On SQLite, then on PostgreSQL when `CROSSTAB_TEST_POSTGRES_URL` names one (one test:
    /// the pause is one for the process).
    #[tokio::test]
    async fn a_bill_carries_the_time_its_batch_is_written_on_either_database() {
        let (_dir, db) = crate::store::scratch().await;
        a_bill_carries_the_time_its_batch_is_written(&db).await;
        if let Some(url) = postgres_url() {
            let db = Database::connect(&url).await.unwrap();
            a_bill_carries_the_time_its_batch_is_written(&db).await;
        }
    }

    /// How long after its time a bill may still commit: a write's limit and its
    /// reconcile's, each three statement timeouts and a second (at the default's 10 s,
    /// 2 × 31 s).
    #[tokio::test]
    async fn bills_are_final_once_none_can_still_commit() {
        let (_dir, db) = crate::store::scratch().await;
        assert_eq!(committed_within(&db), Duration::from_secs(62));
        let with = |seconds| {
            let mut db = db.clone();
            db.options.statement_timeout = Duration::from_secs(seconds);
            committed_within(&db)
        };
        assert_eq!(with(1), Duration::from_secs(8));
        assert_eq!(with(100), Duration::from_secs(602));
    }

    /// The rows `bills` go in: one per account (bills taken in the order given), cut
    /// after [`ROW_BILLS`], each naming its slice.
    #[test]
    fn each_accounts_bills_are_cut_into_rows() {
        let bills: Vec<Bill> = (0..75)
            .map(|n| bill(if n < 70 { 1 } else { 2 }, &n.to_string()))
            .collect();
        let bills: Vec<&Bill> = bills.iter().collect();
        let rows = rows_of(&bills);
        let expected = |account_id, range: std::ops::Range<usize>| BatchRow {
            account_id,
            lo: range.start as i64 + 1,
            hi: range.end as i64,
        };
        assert_eq!(
            rows,
            [
                expected(1, 0..32),
                expected(1, 32..64),
                expected(1, 64..70),
                expected(2, 70..75)
            ]
        );
        assert!(rows_of(&[]).is_empty());
    }

    /// The bills of the ledger of one row per bill move into the batches' rows when the
    /// schema moves on: every one, each account's in rows of at most [`ROW_BILLS`], and
    /// the `ledger` view reads them as before.
    #[tokio::test]
    async fn bills_from_before_the_batches_move_into_them() {
        let Some(url) = postgres_url() else {
            return;
        };
        let mut admin = PgConnection::connect(&url).await.unwrap();
        let name = format!("own_{}", uuid::Uuid::new_v4().simple());
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut admin)
            .await
            .unwrap();
        let (server, _) = url.rsplit_once('/').unwrap();
        let mut conn = PgConnection::connect(&format!("{server}/{name}"))
            .await
            .unwrap();
        // The schema as it was before: the migrations up to the one that makes batches.
        let earlier = tempfile::tempdir().unwrap();
        let all = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/postgres");
        for entry in std::fs::read_dir(&all).unwrap() {
            let path = entry.unwrap().path();
            let file = path.file_name().unwrap().to_str().unwrap().to_owned();
            if file.as_str() < "0007" {
                std::fs::copy(&path, earlier.path().join(file)).unwrap();
            }
        }
        sqlx::migrate::Migrator::new(earlier.path())
            .await
            .unwrap()
            .run(&mut conn)
            .await
            .unwrap();
        // 70 bills of account 1 and 3 of account 2, taking turns at first, times out of
        // order; a user's, a token's and a key's.
        let mut expected = Vec::new();
        for n in 0..73i64 {
            let account_id = if n % 2 == 0 || n >= 6 { 1 } else { 2 };
            let (key_id, user_id, idp, subject) = match n % 3 {
                0 => (None, Some(n), None, None),
                1 => (None, None, Some("corp"), Some(format!("s{n}"))),
                _ => (Some(format!("k{n}")), None, None, None),
            };
            let row = (
                account_id,
                5_000 - n * 7 % 31,
                key_id,
                user_id,
                idp.map(str::to_owned),
                subject,
                (n % 4 == 0).then(|| format!("g{n}")),
                n % 2 + 1,
                format!("r{n:03}"),
            );
            sqlx::query(
                "INSERT INTO ledger (account_id, at, key_id, user_id, idp, subject, survey, \
                                     grp, base, targets, request_id) \
                 VALUES ($1, $2, $3, $4, $5, $6, 'VEC', $7, 'ALL', $8, $9)",
            )
            .bind(row.0)
            .bind(row.1)
            .bind(&row.2)
            .bind(row.3)
            .bind(&row.4)
            .bind(&row.5)
            .bind(&row.6)
            .bind(row.7)
            .bind(&row.8)
            .execute(&mut conn)
            .await
            .unwrap();
            expected.push(row);
        }
        crate::store::POSTGRES_MIGRATIONS
            .run(&mut conn)
            .await
            .unwrap();
        type Written = (
            i64,
            i64,
            Option<String>,
            Option<i64>,
            Option<String>,
            Option<String>,
            Option<String>,
            i64,
            String,
        );
        let written: Vec<Written> = sqlx::query_as(
            "SELECT account_id, at, key_id, user_id, idp, subject, grp, targets, request_id \
             FROM ledger WHERE survey = 'VEC' AND base = 'ALL' ORDER BY request_id",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap();
        assert_eq!(written, expected);
        // Each account's bills in the order written, in rows of 32 at most.
        let rows: Vec<(i64, i64, i64, Vec<String>)> = sqlx::query_as(
            "SELECT account_id, first_at, last_at, request_id FROM ledger_batches \
             ORDER BY account_id, request_id[1]",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap();
        let sizes: Vec<(i64, usize)> = rows.iter().map(|row| (row.0, row.3.len())).collect();
        assert_eq!(sizes, [(1, 32), (1, 32), (1, 6), (2, 3)]);
        for (account_id, first_at, last_at, ids) in rows {
            let times: Vec<i64> = ids
                .iter()
                .map(|id| {
                    let bill = expected.iter().find(|row| &row.8 == id).unwrap();
                    assert_eq!(bill.0, account_id);
                    bill.1
                })
                .collect();
            // A run of the account's bills, in the order written.
            let numbers: Vec<usize> = ids.iter().map(|id| id[1..].parse().unwrap()).collect();
            let of_account: Vec<usize> = (0..expected.len())
                .filter(|&n| expected[n].0 == account_id)
                .collect();
            assert!(
                of_account.windows(numbers.len()).any(|run| run == numbers),
                "{ids:?}"
            );
            assert_eq!(first_at, *times.iter().min().unwrap());
            assert_eq!(last_at, *times.iter().max().unwrap());
        }
        // Rows with a spread of times (all rows before the writer stamped a batch at one
        // time) count exactly the bills within a range that cuts inside them.
        let moved = Database::connect(&format!("{server}/{name}"))
            .await
            .unwrap();
        for (from, to) in [
            (0, i64::MAX),
            (4_980, 4_990),
            (4_975, 4_976),
            (4_985, 5_001),
        ] {
            for account_id in [1, 2] {
                let within = expected
                    .iter()
                    .filter(|row| row.0 == account_id && (from..to).contains(&row.1))
                    .count() as u64;
                let counted = crate::store::usage::calls_between(&moved, account_id, from, to)
                    .await
                    .unwrap();
                assert_eq!(counted, within, "{account_id}: {from}..{to}");
            }
        }
        moved.close().await;
        // A replica of an earlier build bills through the view, as it did into the table.
        sqlx::query(
            "INSERT INTO ledger (at, account_id, key_id, user_id, idp, subject, survey, grp, base, targets, request_id) \
             SELECT * FROM UNNEST($1::bigint[], $2::bigint[], $3::text[], $4::bigint[], $5::text[], \
                                  $6::text[], $7::text[], $8::text[], $9::text[], $10::bigint[], $11::text[])",
        )
        .bind([9_000i64, 9_001])
        .bind([2i64, 2])
        .bind([Some("k-old"), None])
        .bind([None, Some(5i64)])
        .bind([None::<&str>, None])
        .bind([None::<&str>, None])
        .bind(["VEC", "VEC"])
        .bind([Some("N"), None])
        .bind(["ALL", "ALL"])
        .bind([1i64, 2])
        .bind(["old-1", "old-2"])
        .execute(&mut conn)
        .await
        .unwrap();
        type Old = (i64, i64, Option<String>, Option<i64>, Option<String>, i64);
        let old: Vec<Old> = sqlx::query_as(
            "SELECT account_id, at, key_id, user_id, grp, targets FROM ledger \
                 WHERE request_id LIKE 'old-%' ORDER BY request_id",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap();
        assert_eq!(
            old,
            [
                (2, 9_000, Some("k-old".into()), None, Some("N".into()), 1),
                (2, 9_001, None, Some(5), None, 2)
            ]
        );
        conn.close().await.unwrap();
        // Forced: a backend of the closed pool may still be on its way out.
        sqlx::query(&format!("DROP DATABASE {name} WITH (FORCE)"))
            .execute(&mut admin)
            .await
            .unwrap();
    }
}
