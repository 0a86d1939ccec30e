//! The store: every SQL statement of the server lives under this module (accounts, keys,
//! grants, users, sessions, the ledger, usage, identity
//! providers and the token-signing keys), on SQLite (the default, a file in the
//! data dir, WAL) or PostgreSQL, both through sqlx's `Any` driver with embedded
//! migrations (but for the ledger's writers: SQLite's calls the library itself,
//! PostgreSQL's holds a connection of sqlx's PostgreSQL driver). Queries use `$N`
//! placeholders, which both backends accept; the few dialect differences are decided
//! here, never by callers.

pub mod accounts;
pub mod changes;
pub mod idempotency;
pub mod identity_providers;
pub mod key_signal;
pub mod ledger;
pub mod saml_replay;
pub mod sessions;
pub mod signing_keys;
mod sqlite;
pub mod surveys;
pub mod unknown_names;
pub mod upstream_keys;
pub mod usage;
pub mod users;

use std::path::{Path, PathBuf};
use std::time::Duration;

use sqlx::any::AnyPoolOptions;
use sqlx::migrate::Migrator;
use sqlx::postgres::PgConnection;
use sqlx::{AnyPool, Connection};

static SQLITE_MIGRATIONS: Migrator = sqlx::migrate!("./migrations/sqlite");
static POSTGRES_MIGRATIONS: Migrator = sqlx::migrate!("./migrations/postgres");

/// The default limit on every database call: a PostgreSQL statement's run, or SQLite's
/// wait for its lock (SQLite runs in this process, so its statements cannot hang on a
/// server).
pub const DEFAULT_STATEMENT_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest wait for a connection, from the pool or a new one.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long closing waits for the writes departed requests left (each one statement).
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// The longest pause between two attempts to connect to a database that refuses.
const MAX_CONNECT_BACKOFF: Duration = Duration::from_secs(1);

/// Which database engine a URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// A SQLite file.
    Sqlite,
    /// A PostgreSQL server.
    Postgres,
}

/// A database failure.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// The URL names no supported database.
    #[error("unsupported database URL (use sqlite:PATH or postgres://...)")]
    UnsupportedUrl,
    /// A query or connection failed.
    #[error("database error: {0}")]
    Sqlx(#[from] sqlx::Error),
    /// Migrating the schema failed.
    #[error("database migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A call into SQLite on the ledger's own connection failed.
    #[error("database error: {0}")]
    Sqlite(#[from] sqlite::SqliteError),
    /// No connection was made in time.
    #[error("database not connected within {0:?}")]
    ConnectTimedOut(Duration),
    /// The database did not answer in time (its connection may be gone without a word).
    #[error("database did not answer within {0:?}")]
    TimedOut(Duration),
    /// A commit was sent but neither its reply nor a later look at the database said
    /// whether it took.
    #[error("the outcome of a commit is unknown: {0}")]
    OutcomeUnknown(String),
    /// A stored value breaks a rule the server keeps when writing it.
    #[error("corrupt database: {0}")]
    Corrupt(&'static str),
    /// The database was opened to be used as it is, and its schema is not this
    /// server's.
    #[error("{0}")]
    Schema(SchemaMismatch),
    /// The SQLite file could not be created.
    #[error("creating the SQLite database {}: {source}", path.display())]
    Create {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// How a database's schema differs from the one this build of the server migrates to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaMismatch {
    /// No migration was ever applied: not a crosstab database yet.
    #[error("the database has no crosstab schema yet")]
    Empty,
    /// Migrations of this build are not applied (or one failed part way).
    #[error(
        "the database's schema is older than this crosstab's (version {applied}, needs {needed})"
    )]
    Behind { applied: i64, needed: i64 },
    /// The database holds migrations this build does not know: a newer build migrated it.
    #[error("the database's schema (version {applied}) is newer than this crosstab's ({needed}): it was migrated by a newer crosstab")]
    Ahead { applied: i64, needed: i64 },
    /// A migration of this build was applied with other contents.
    #[error("the database's migration {0} differs from this crosstab's")]
    Changed(i64),
}

/// A connected, migrated database.
#[derive(Debug, Clone)]
pub struct Database {
    url: Url,
    pool: AnyPool,
    backend: Backend,
    sqlite_file: Option<PathBuf>,
    options: DatabaseOptions,
    /// Writes left to run after their request (an idempotency key given back when its
    /// client went away): [`Database::close`] waits for them before closing the pool.
    after_requests: tokio_util::task::TaskTracker,
}

/// How every connection to a database is set up.
#[derive(Debug, Clone, Copy)]
pub struct DatabaseOptions {
    /// When a SQLite commit returns.
    pub synchronous: Synchronous,
    /// The longest a statement may run (PostgreSQL) or wait for its lock (SQLite) before
    /// it fails: a stuck database answers errors instead of piling requests up.
    pub statement_timeout: Duration,
}

impl Default for DatabaseOptions {
    fn default() -> DatabaseOptions {
        DatabaseOptions {
            synchronous: Synchronous::Full,
            statement_timeout: DEFAULT_STATEMENT_TIMEOUT,
        }
    }
}

impl DatabaseOptions {
    /// The statements that set up a new connection to `backend`.
    fn setup(&self, backend: Backend) -> Vec<String> {
        let millis = self.statement_timeout.as_millis().max(1);
        match backend {
            Backend::Sqlite => vec![
                "PRAGMA journal_mode = WAL".to_owned(),
                match self.synchronous {
                    Synchronous::Full => "PRAGMA synchronous = FULL",
                    Synchronous::Normal => "PRAGMA synchronous = NORMAL",
                }
                .to_owned(),
                format!("PRAGMA busy_timeout = {millis}"),
                "PRAGMA foreign_keys = ON".to_owned(),
            ],
            Backend::Postgres => vec![format!("SET statement_timeout = {millis}")],
        }
    }
}

/// A database URL, never shown (it may hold a password).
#[derive(Clone)]
struct Url(String);

impl std::fmt::Debug for Url {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<database url>")
    }
}

/// When a SQLite commit returns (PostgreSQL decides this in its own configuration).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Synchronous {
    /// The WAL is fsynced before `COMMIT` returns: a committed bill survives a power cut.
    #[default]
    Full,
    /// A committed bill survives a crash of the process, not of the machine (faster).
    Normal,
}

/// The default database's file name, in the data dir.
pub const DEFAULT_FILE: &str = "crosstab.db";

/// The default database: `crosstab.db` in the data dir (created if missing), as a URL
/// whose path is percent-encoded, so a dir named with ` `, `%`, `?` or `#` still works.
pub fn default_url(data_dir: &Path) -> String {
    let dir = std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    let file = dir.join(DEFAULT_FILE);
    let mut url = String::from("sqlite://");
    // sqlx percent-decodes the path; everything but unreserved characters is escaped
    // (its own URL builder leaves `%` as is).
    for &byte in file.as_os_str().as_encoded_bytes() {
        if byte.is_ascii_alphanumeric() || b"/-._~".contains(&byte) {
            url.push(char::from(byte));
        } else {
            url.push_str(&format!("%{byte:02X}"));
        }
    }
    url.push_str("?mode=rwc");
    url
}

/// A SQLite database of its own in a directory that lives as long as the returned guard
/// (for unit tests).
#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) async fn scratch() -> (tempfile::TempDir, Database) {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::connect(&default_url(dir.path())).await.unwrap();
    (dir, db)
}

/// What connecting does to the database's schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Schema {
    /// Brings it up to date (a server starting, `crosstab db migrate`).
    Migrate,
    /// Leaves it as it is, and refuses a database whose schema is not this build's (an
    /// administrative command must not create or upgrade a database under running
    /// servers).
    Current,
}

/// Creates the data directory if it is missing; a failure names it.
pub fn create_data_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir).map_err(|error| {
        std::io::Error::new(error.kind(), format!("data dir {}: {error}", dir.display()))
    })
}

/// Creates the SQLite file `url` names, if it is missing and to be created, readable by
/// this user alone: it holds key and password hashes (SQLite gives its journal files the
/// same permissions). An existing file keeps its own.
fn create_private(url: &str) -> Result<(), DbError> {
    use std::os::unix::fs::OpenOptionsExt;
    use std::str::FromStr;
    let options = sqlx::sqlite::SqliteConnectOptions::from_str(url)?;
    let file = options.get_filename();
    if !url.contains("mode=rwc") || file.as_os_str().is_empty() || file == Path::new(":memory:") {
        return Ok(());
    }
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(file)
    {
        Ok(_) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(source) => Err(DbError::Create {
            path: file.to_owned(),
            source,
        }),
    }
}

impl Database {
    /// Connects to `url` with the default options and brings its schema up to date.
    pub async fn connect(url: &str) -> Result<Database, DbError> {
        Database::connect_with(url, DatabaseOptions::default()).await
    }

    /// Connects to `url`, every connection set up as `options` say, and brings its schema
    /// up to date.
    pub async fn connect_with(url: &str, options: DatabaseOptions) -> Result<Database, DbError> {
        Database::open_with(url, options, Schema::Migrate).await
    }

    /// Connects to `url` with the default options, its schema left as it is: it must be
    /// the one this build migrates to ([`DbError::Schema`] otherwise).
    pub async fn connect_current(url: &str) -> Result<Database, DbError> {
        Database::open_with(url, DatabaseOptions::default(), Schema::Current).await
    }

    async fn open_with(
        url: &str,
        options: DatabaseOptions,
        schema: Schema,
    ) -> Result<Database, DbError> {
        sqlx::any::install_default_drivers();
        let backend = if url.starts_with("sqlite:") {
            Backend::Sqlite
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Backend::Postgres
        } else {
            return Err(DbError::UnsupportedUrl);
        };
        // A database taken as it is is never created: a refused command leaves no empty file.
        let url = match (backend, schema) {
            (Backend::Sqlite, Schema::Current) => url.replace("mode=rwc", "mode=rw"),
            _ => url.to_owned(),
        };
        if backend == Backend::Sqlite && schema == Schema::Migrate {
            create_private(&url)?;
        }
        let setup = options.setup(backend);
        let pool = AnyPoolOptions::new()
            .acquire_timeout(CONNECT_TIMEOUT)
            .max_connections(match backend {
                Backend::Sqlite => 4,
                // With the ledger writer's own connection, 16 a server.
                Backend::Postgres => 15,
            })
            .after_connect(move |conn, _| {
                let setup = setup.clone();
                Box::pin(async move {
                    for statement in &setup {
                        sqlx::query(statement).execute(&mut *conn).await?;
                    }
                    Ok(())
                })
            })
            .connect(&url)
            .await?;
        let migrator = match backend {
            Backend::Sqlite => &SQLITE_MIGRATIONS,
            Backend::Postgres => &POSTGRES_MIGRATIONS,
        };
        match schema {
            Schema::Migrate => migrator.run(&pool).await?,
            Schema::Current => {
                let current = schema_mismatch(&pool, backend, migrator)
                    .await
                    .and_then(|mismatch| mismatch.map_or(Ok(()), |m| Err(DbError::Schema(m))));
                if let Err(error) = current {
                    pool.close().await;
                    return Err(error);
                }
            }
        }
        let sqlite_file = match backend {
            // The ledger's writer and the key signal need the file (and each pooled
            // connection would have a database of its own in memory).
            Backend::Sqlite => Some(main_file(&pool).await?.ok_or(DbError::UnsupportedUrl)?),
            Backend::Postgres => None,
        };
        Ok(Database {
            url: Url(url),
            pool,
            backend,
            sqlite_file,
            options,
            after_requests: tokio_util::task::TaskTracker::new(),
        })
    }

    /// The URL it was opened with.
    pub fn url(&self) -> &str {
        &self.url.0
    }

    /// The connection pool.
    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// Which engine this is.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// For a SQLite file database: the file that changes whenever keys or grants change,
    /// so servers notice without querying on every request.
    pub fn key_signal_file(&self) -> Option<PathBuf> {
        self.sqlite_file.as_ref().map(|file| {
            let mut name = file.as_os_str().to_owned();
            name.push("-keys");
            PathBuf::from(name)
        })
    }

    /// The SQLite database file, when this is one.
    pub fn sqlite_file(&self) -> Option<&Path> {
        self.sqlite_file.as_deref()
    }

    /// On PostgreSQL, a connection of its own, outside the pool, with the pool's settings,
    /// for a task on a runtime of its own (a connection is driven by the runtime that
    /// opened it, and the server's polls the network only between requests' tasks).
    /// Like the pool, it tries again while the database refuses or is starting up, so a
    /// short restart delays the ledger rather than failing its bills.
    pub(crate) async fn connect_postgres(&self) -> Result<PgConnection, DbError> {
        if self.backend != Backend::Postgres {
            return Err(DbError::UnsupportedUrl);
        }
        let connect = async {
            let mut backoff = Duration::from_millis(10);
            loop {
                match PgConnection::connect(&self.url.0).await {
                    Ok(mut conn) => {
                        for statement in self.options.setup(Backend::Postgres) {
                            sqlx::query(&statement).execute(&mut conn).await?;
                        }
                        return Ok(conn);
                    }
                    Err(sqlx::Error::Io(error))
                        if error.kind() == std::io::ErrorKind::ConnectionRefused => {}
                    Err(sqlx::Error::Database(error)) if error.is_transient_in_connect_phase() => {}
                    Err(error) => return Err(DbError::Sqlx(error)),
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_CONNECT_BACKOFF);
            }
        };
        tokio::time::timeout(CONNECT_TIMEOUT, connect)
            .await
            .map_err(|_| DbError::ConnectTimedOut(CONNECT_TIMEOUT))?
    }

    /// Whether the database answers a trivial query.
    pub async fn ping(&self) -> Result<(), DbError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    /// Closes every connection (after the last write, so SQLite checkpoints its WAL).
    pub async fn close(&self) {
        self.after_requests.close();
        if tokio::time::timeout(CLOSE_WAIT, self.after_requests.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                left = self.after_requests.len(),
                "writes left by departed requests did not finish before the database closed"
            );
        }
        self.pool.close().await;
    }

    /// Runs `write`, left by a request that is gone, on its own task: [`Database::close`]
    /// waits for it.
    pub fn spawn_after_request(
        &self,
        write: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        self.after_requests.spawn(write);
    }
}

/// The newest schema migration applied to `db`.
pub async fn schema_version(db: &Database) -> Result<i64, DbError> {
    let version: Option<i64> =
        sqlx::query_scalar("SELECT max(version) FROM _sqlx_migrations WHERE success")
            .fetch_one(db.pool())
            .await?;
    Ok(version.unwrap_or(0))
}

/// How the schema of the database behind `pool` differs from `migrator`'s, if it does.
async fn schema_mismatch(
    pool: &AnyPool,
    backend: Backend,
    migrator: &Migrator,
) -> Result<Option<SchemaMismatch>, DbError> {
    let has_table: i64 = sqlx::query_scalar(match backend {
        Backend::Sqlite => {
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'"
        }
        Backend::Postgres => {
            "SELECT count(*) FROM pg_catalog.pg_tables \
             WHERE schemaname = current_schema() AND tablename = '_sqlx_migrations'"
        }
    })
    .fetch_one(pool)
    .await?;
    let applied: Vec<(i64, bool, Vec<u8>)> = if has_table == 0 {
        Vec::new()
    } else {
        // The Any driver decodes no SQLite boolean: the outcome comes as a number.
        let rows: Vec<(i64, i64, Vec<u8>)> = sqlx::query_as(
            "SELECT version, CAST(CASE WHEN success THEN 1 ELSE 0 END AS BIGINT), checksum \
             FROM _sqlx_migrations ORDER BY version",
        )
        .fetch_all(pool)
        .await?;
        rows.into_iter()
            .map(|(version, success, checksum)| (version, success == 1, checksum))
            .collect()
    };
    let known: Vec<(i64, &[u8])> = migrator
        .iter()
        .filter(|migration| migration.migration_type.is_up_migration())
        .map(|migration| (migration.version, migration.checksum.as_ref()))
        .collect();
    Ok(compare_schema(&applied, &known))
}

/// Compares the migrations a database records (version, whether it succeeded, checksum)
/// with those a build knows (version, checksum), both in ascending order.
fn compare_schema(
    applied: &[(i64, bool, Vec<u8>)],
    known: &[(i64, &[u8])],
) -> Option<SchemaMismatch> {
    let needed = known.last().map_or(0, |(version, _)| *version);
    let newest = applied.last().map_or(0, |(version, ..)| *version);
    if applied.is_empty() {
        return Some(SchemaMismatch::Empty);
    }
    // A version this build never had: a later build's.
    if applied
        .iter()
        .any(|(version, ..)| !known.iter().any(|(known, _)| known == version))
    {
        return Some(SchemaMismatch::Ahead {
            applied: newest,
            needed,
        });
    }
    for (version, checksum) in known {
        match applied.iter().find(|(applied, ..)| applied == version) {
            Some((_, true, stored)) if stored.as_slice() == *checksum => {}
            Some((_, true, _)) => return Some(SchemaMismatch::Changed(*version)),
            Some((_, false, _)) | None => {
                let applied = applied
                    .iter()
                    .take_while(|(_, success, _)| *success)
                    .last()
                    .map_or(0, |(version, ..)| *version);
                return Some(SchemaMismatch::Behind { applied, needed });
            }
        }
    }
    None
}

/// The file SQLite opened for the pool (`None` in memory): asked of SQLite itself, so
/// the ledger and the key signal file use the very file the pool does, however the URL
/// spelled it (percent-escapes, `..`, `sqlite:` or `sqlite://`).
async fn main_file(pool: &AnyPool) -> Result<Option<PathBuf>, DbError> {
    let file: String =
        sqlx::query_scalar("SELECT file FROM pragma_database_list WHERE name = 'main'")
            .fetch_one(pool)
            .await?;
    Ok((!file.is_empty()).then(|| PathBuf::from(file)))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A write a departed request left (an idempotency key given back) still runs when
    /// the server closes the database right after: the pool waits for it.
    #[tokio::test]
    #[allow(clippy::unwrap_used)]
    async fn closing_waits_for_the_writes_departed_requests_left() {
        let (dir, db) = scratch().await;
        let writer = db.clone();
        let written = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let done = std::sync::Arc::clone(&written);
        db.spawn_after_request(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let wrote = sqlx::query("INSERT INTO accounts (name, created_at) VALUES ('late', 0)")
                .execute(writer.pool())
                .await;
            done.store(wrote.is_ok(), std::sync::atomic::Ordering::SeqCst);
        });
        db.close().await;
        assert!(written.load(std::sync::atomic::Ordering::SeqCst));
        let again = Database::connect(&default_url(dir.path())).await.unwrap();
        let late: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM accounts WHERE name = 'late'")
            .fetch_one(again.pool())
            .await
            .unwrap();
        assert_eq!(late, 1);
    }

    #[test]
    fn a_schema_compares_by_version_outcome_and_checksum() {
        let known: [(i64, &[u8]); 2] = [(1, b"a"), (2, b"b")];
        let row =
            |version: i64, success: bool, checksum: &[u8]| (version, success, checksum.to_vec());
        assert_eq!(
            compare_schema(&[row(1, true, b"a"), row(2, true, b"b")], &known),
            None
        );
        assert_eq!(compare_schema(&[], &known), Some(SchemaMismatch::Empty));
        assert_eq!(
            compare_schema(&[row(1, true, b"a")], &known),
            Some(SchemaMismatch::Behind {
                applied: 1,
                needed: 2
            })
        );
        assert_eq!(
            compare_schema(&[row(1, true, b"a"), row(2, false, b"b")], &known),
            Some(SchemaMismatch::Behind {
                applied: 1,
                needed: 2
            })
        );
        assert_eq!(
            compare_schema(
                &[row(1, true, b"a"), row(2, true, b"b"), row(3, true, b"c")],
                &known
            ),
            Some(SchemaMismatch::Ahead {
                applied: 3,
                needed: 2
            })
        );
        assert_eq!(
            compare_schema(&[row(1, true, b"a"), row(2, true, b"x")], &known),
            Some(SchemaMismatch::Changed(2))
        );
    }

    /// `connect_current` opens a migrated database and refuses, untouched, one that is
    /// not (read from the database's own record of its migrations).
    #[tokio::test]
    async fn only_a_current_schema_is_opened_as_it_is() {
        let (dir, db) = scratch().await;
        let url = db.url().to_owned();
        db.close().await;
        Database::connect_current(&url).await.unwrap().close().await;

        let newest: i64 = SQLITE_MIGRATIONS.iter().map(|m| m.version).max().unwrap();
        let raw = AnyPool::connect(&url).await.unwrap();
        sqlx::query("DELETE FROM _sqlx_migrations WHERE version = $1")
            .bind(newest)
            .execute(&raw)
            .await
            .unwrap();
        raw.close().await;
        let behind = Database::connect_current(&url).await.unwrap_err();
        assert!(
            matches!(behind, DbError::Schema(SchemaMismatch::Behind { needed, .. }) if needed == newest),
            "{behind}"
        );
        // Still behind: nothing was migrated by looking.
        assert!(Database::connect_current(&url).await.is_err());

        let empty = default_url(&dir.path().join("empty"));
        std::fs::create_dir(dir.path().join("empty")).unwrap();
        let created = AnyPool::connect(&empty).await.unwrap();
        created.close().await;
        let refused = Database::connect_current(&empty).await.unwrap_err();
        assert!(
            matches!(refused, DbError::Schema(SchemaMismatch::Empty)),
            "{refused}"
        );
    }
}
