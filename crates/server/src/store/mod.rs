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
}

/// A connected, migrated database.
#[derive(Debug, Clone)]
pub struct Database {
    url: Url,
    pool: AnyPool,
    backend: Backend,
    sqlite_file: Option<PathBuf>,
    options: DatabaseOptions,
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

/// The default database: `crosstab.db` in the data dir (created if missing), as a URL
/// whose path is percent-encoded, so a dir named with ` `, `%`, `?` or `#` still works.
pub fn default_url(data_dir: &Path) -> String {
    let dir = std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    let file = dir.join("crosstab.db");
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

impl Database {
    /// Connects to `url` with the default options and brings its schema up to date.
    pub async fn connect(url: &str) -> Result<Database, DbError> {
        Database::connect_with(url, DatabaseOptions::default()).await
    }

    /// Connects to `url`, every connection set up as `options` say, and brings its schema
    /// up to date.
    pub async fn connect_with(url: &str, options: DatabaseOptions) -> Result<Database, DbError> {
        sqlx::any::install_default_drivers();
        let backend = if url.starts_with("sqlite:") {
            Backend::Sqlite
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Backend::Postgres
        } else {
            return Err(DbError::UnsupportedUrl);
        };
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
            .connect(url)
            .await?;
        let sqlite_file = match backend {
            Backend::Sqlite => {
                SQLITE_MIGRATIONS.run(&pool).await?;
                // The ledger's writer and the key signal need the file (and each pooled
                // connection would have a database of its own in memory).
                Some(main_file(&pool).await?.ok_or(DbError::UnsupportedUrl)?)
            }
            Backend::Postgres => {
                POSTGRES_MIGRATIONS.run(&pool).await?;
                None
            }
        };
        Ok(Database {
            url: Url(url.to_owned()),
            pool,
            backend,
            sqlite_file,
            options,
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
        self.pool.close().await;
    }
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
