//! The `crosstab` command line.

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand};
use crosstab_contract::{validate_value, ApiError};
use crosstab_engine::store::SurveyStore;
use crosstab_engine::{import, ImportError, LoadError, MemoryBudget};

use crate::clock::{now_ms, SystemClock};
use crate::grants::{GrantSpec, Grants};
use crate::http::listener::Limits;
use crate::http::proxy::TrustedProxy;
use crate::keys::{KeyEnv, MAX_LIFETIME_DAYS};
use crate::logging::LogFormat;
use crate::report::{self, Format};
use crate::serve::{self, ServeError, ServeOptions};
use crate::service::cache::{ResponseCache, DEFAULT_ENTRIES};
use crate::service::limits::AddressLimits;
use crate::service::memory;
use crate::service::sso::jwks::KeySets;
use crate::service::sso::saml::SamlIdp;
use crate::service::sso::sealing::KeySecret;
use crate::service::sso::signing;
use crate::service::transport;
use crate::service::Settings;
use crate::service::{replicas, users};
use crate::store::accounts::{AccountLimits, GrantRemoval, LimitsChange, Revocation};
use crate::store::identity_providers::{
    self, AccountRule, AllowedChange, IdentityProvider, IdpKind,
};
use crate::store::{
    self, accounts, signing_keys, surveys, upstream_keys, usage, Backend, Database,
    DatabaseOptions, DbError, SchemaMismatch, Synchronous,
};

/// The crosstab survey-audience query service.
#[derive(Debug, Parser)]
#[command(name = "crosstab", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
    /// How log lines are written to stderr: `text` (key=value), or `json` (one object a
    /// line, for log pipelines).
    #[arg(long, global = true, env = "CROSSTAB_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

/// Where surveys and the database live.
#[derive(Debug, Clone, Args)]
pub struct Store {
    /// Data directory: installed surveys, and the SQLite database unless --database is given.
    #[arg(long, env = "CROSSTAB_DATA_DIR", default_value = "./data")]
    data_dir: PathBuf,
    /// Database URL (sqlite:PATH, or postgres://...); default: SQLite in the data dir.
    /// Only `serve` and `db migrate` create a missing SQLite file (the default one, or
    /// one given with ?mode=rwc); other commands need it to exist.
    #[arg(long, env = "CROSSTAB_DATABASE_URL")]
    database: Option<String>,
}

impl Store {
    /// The database's URL; the default one's data dir is created if missing.
    fn url(&self) -> Result<String, CliError> {
        match &self.database {
            Some(url) => Ok(url.clone()),
            None => {
                store::create_data_dir(&self.data_dir)?;
                Ok(store::default_url(&self.data_dir))
            }
        }
    }

    /// Connects, creating the database if it is the default one and missing, and brings
    /// its schema up to date.
    async fn migrate(&self) -> Result<Database, CliError> {
        Ok(Database::connect(&self.url()?).await?)
    }

    /// Connects to the database as it is: an administrative command neither creates one
    /// (a mistyped data dir would get keys no server reads) nor migrates one (a newer
    /// binary would change the schema under running servers).
    async fn connect(&self) -> Result<Database, CliError> {
        let url = match &self.database {
            Some(url) => url.clone(),
            None => {
                let file = self.data_dir.join(store::DEFAULT_FILE);
                if !file.is_file() {
                    return Err(CliError::Usage(format!(
                        "no database at {}: `crosstab db migrate --data-dir {}` creates it (so does `crosstab serve`)",
                        file.display(),
                        self.data_dir.display()
                    )));
                }
                store::default_url(&self.data_dir)
            }
        };
        Database::connect_current(&url).await.map_err(|error| match error {
            DbError::Schema(mismatch) => {
                let advice = match mismatch {
                    SchemaMismatch::Empty | SchemaMismatch::Behind { .. } => {
                        "run `crosstab db migrate` with this crosstab (as `crosstab serve` does on start), then try again"
                    }
                    SchemaMismatch::Ahead { .. } => {
                        "use the newer crosstab that migrated it (this one can't go back)"
                    }
                    SchemaMismatch::Changed(_) => {
                        "it was migrated by another build of crosstab: compare its _sqlx_migrations table with this build's migrations"
                    }
                };
                CliError::Usage(format!("{mismatch}: {advice}"))
            }
            // A SQLite file named by URL that is not there (sqlx says only that it can't
            // open it).
            error => match sqlite_path(&url).filter(|path| !path.exists()) {
                Some(path) => {
                    let creating = match (url.contains("mode=rwc"), url.contains('?')) {
                        (true, _) => url.clone(),
                        (false, true) => format!("{url}&mode=rwc"),
                        (false, false) => format!("{url}?mode=rwc"),
                    };
                    CliError::Usage(format!(
                        "no database at {}: `crosstab db migrate --database '{creating}'` creates it",
                        path.display()
                    ))
                }
                None => CliError::Db(error),
            },
        })
    }
}

/// The file a `sqlite:` URL names, as written (before its `?` options).
fn sqlite_path(url: &str) -> Option<PathBuf> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let path = rest.split('?').next().unwrap_or(rest);
    (!path.is_empty() && path != ":memory:").then(|| PathBuf::from(path))
}

/// Only the data directory (for commands that touch no database).
#[derive(Debug, Clone, Args)]
pub struct DataDir {
    /// Data directory holding the installed surveys.
    #[arg(long, env = "CROSSTAB_DATA_DIR", default_value = "./data")]
    data_dir: PathBuf,
}

/// `serve`'s log filter unless `RUST_LOG` says otherwise.
const SERVE_LOG_FILTER: &str = "info,sqlx=warn";

/// The settings `serve` reads from the environment alone (every flag but `--demo` may be
/// set by the variable its help names; a list's values separated by commas).
fn serve_environment() -> String {
    format!(
        "\
Environment:
  RUST_LOG                          Log filter (default {SERVE_LOG_FILTER})
  Every flag but --demo may also be set by the variable its help names [env: ...]; a
  repeatable flag's values separated by commas."
    )
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the /v1 API, the app (its files and /app) and /ready.
    #[command(after_help = serve_environment())]
    Serve {
        /// Address to listen on (port 0 picks a free port; the address is printed).
        #[arg(long, env = "CROSSTAB_LISTEN", default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
        #[command(flatten)]
        store: Store,
        /// A browser origin allowed to call the API (repeatable; `*` allows any origin on
        /// /v1, while /app, which signs users in, admits only origins named here).
        #[arg(
            long = "allowed-origin",
            env = "CROSSTAB_ALLOWED_ORIGIN",
            value_name = "ORIGIN",
            value_delimiter = ','
        )]
        allowed_origins: Vec<String>,
        /// Make the data dir usable at once: demo survey, account `demo`, a key for it and
        /// a user `demo` for the app (key and password printed; each start revokes every
        /// earlier key of account `demo` and resets the password).
        #[arg(long)]
        demo: bool,
        /// The built app (Trunk's dist/), served at `/`.
        #[arg(long, env = "CROSSTAB_APP_DIR", default_value = "./dist")]
        app_dir: PathBuf,
        /// Another /v1 service the app sends its users' queries to, each with the key set
        /// for the user's account by `crosstab app upstream-key` (default: this server
        /// answers them itself, billed to the user's account).
        #[arg(long, env = "CROSSTAB_UPSTREAM", value_name = "URL", value_parser = parse_upstream)]
        upstream: Option<String>,
        /// When a SQLite commit returns: full (a bill is on disk, surviving a power cut,
        /// before its 200) or normal (it survives a crash of the process, not of the
        /// machine; faster commits).
        #[arg(
            long,
            env = "CROSSTAB_SQLITE_SYNCHRONOUS",
            value_enum,
            ignore_case = true,
            default_value = "full"
        )]
        sqlite_synchronous: Synchronous,
        /// Seconds a database statement may run (PostgreSQL) or wait for its lock
        /// (SQLite) before it fails: a request waiting on it is answered 503 or 500,
        /// unbilled, instead of piling up behind a stuck database.
        #[arg(
            long,
            env = "CROSSTAB_STATEMENT_TIMEOUT",
            value_name = "SECONDS",
            default_value_t = 10,
            // At most a day: PostgreSQL and SQLite take the limit as 32-bit milliseconds.
            value_parser = clap::value_parser!(u64).range(1..=86_400)
        )]
        statement_timeout: u64,
        /// Whole answers kept in memory for repeated requests, each on its second sight (0:
        /// none).
        #[arg(long, env = "CROSSTAB_RESPONSE_CACHE_ENTRIES", default_value_t = DEFAULT_ENTRIES)]
        response_cache_entries: usize,
        /// Bytes the process may keep resident besides the mapped survey files, e.g.
        /// 2GiB, 512MiB, 1048576 (at least 1MiB); default an eighth of the machine's memory. Its caches
        /// (answers, every survey's respondent sets) get what the rest of the process
        /// (connections, requests in flight, the database driver) leaves, least recently
        /// used evicted first; they never get less than an eighth of it.
        #[arg(long, env = "CROSSTAB_CACHE_MEMORY", value_name = "BYTES", value_parser = parse_cache_memory)]
        cache_memory: Option<usize>,
        /// The address clients reach this service at, e.g. https://crosstab.example.com
        /// (https: the session cookie is Secure and HSTS is sent); default: the listen
        /// address over http.
        #[arg(long, env = "CROSSTAB_PUBLIC_URL", value_name = "URL", value_parser = parse_public_url)]
        public_url: Option<String>,
        #[command(flatten)]
        token_key_secret: TokenKeySecret,
        #[command(flatten)]
        limits: LimitArgs,
        /// Behind a load balancer: the header it puts the client's address in (e.g.
        /// X-Forwarded-For; the last address in it counts). Only with a proxy that sets it;
        /// name the proxy with --trusted-proxy, or the header is believed from any peer.
        #[arg(
            long = "trust-proxy-header",
            env = "CROSSTAB_TRUST_PROXY_HEADER",
            value_name = "HEADER"
        )]
        trusted_proxy_header: Option<axum::http::HeaderName>,
        /// The load balancer's address or network (e.g. 10.0.0.5, 10.0.0.0/24; repeat for
        /// more): only its requests name their client by --trust-proxy-header, any other
        /// peer is taken as itself.
        #[arg(long = "trusted-proxy", env = "CROSSTAB_TRUSTED_PROXY", value_name = "ADDRESS|NETWORK",
              value_delimiter = ',',
              requires = "trusted_proxy_header", value_parser = crate::http::proxy::parse_network)]
        trusted_proxies: Vec<ipnet::IpNet>,
        /// Seconds a query may compute (at most a day); past it, 503 `deadline_exceeded`,
        /// not billed.
        #[arg(long, env = "CROSSTAB_QUERY_DEADLINE", value_name = "SECONDS", default_value_t = 10,
              value_parser = clap::value_parser!(u64).range(1..=86_400))]
        query_deadline: u64,
        /// Failed authentications per client address and minute; past it, 429.
        #[arg(long, env = "CROSSTAB_FAILED_AUTH_PER_MINUTE", value_name = "N", default_value_t = 60,
              value_parser = clap::value_parser!(u32).range(1..))]
        failed_auth_per_minute: u32,
        /// Sign-in attempts to the app per client address and minute; past it, 429.
        #[arg(long, env = "CROSSTAB_SIGN_IN_PER_MINUTE", value_name = "N", default_value_t = 20,
              value_parser = clap::value_parser!(u32).range(1..))]
        sign_in_per_minute: u32,
    },
    /// Settings of accounts.
    Account {
        #[command(subcommand)]
        command: AccountCommand,
    },
    /// Settings of the app backend.
    App {
        #[command(subcommand)]
        command: AppCommand,
    },
    /// Manage the people who sign in to the app.
    User {
        #[command(subcommand)]
        command: UserCommand,
    },
    /// Install and list surveys.
    Survey {
        #[command(subcommand)]
        command: SurveyCommand,
    },
    /// Create, list and revoke API keys.
    Key {
        #[command(subcommand)]
        command: KeyCommand,
    },
    /// The database: create it, or bring its schema up to date.
    Db {
        #[command(subcommand)]
        command: DbCommand,
    },
    /// Single sign-on for API calls: trusted identity providers and the token-signing key.
    Sso {
        #[command(subcommand)]
        command: SsoCommand,
    },
    /// Answer a crosstab query from the installed survey, without a server (not billed).
    Query {
        /// SurveyCode.
        #[arg(long)]
        survey: String,
        /// PopulationBaseCode.
        #[arg(long)]
        base: String,
        /// A target code or expression (once or twice).
        #[arg(long = "target", required = true)]
        targets: Vec<String>,
        /// AuthorizationGroup (default: all groups).
        #[arg(long)]
        group: Option<String>,
        #[command(flatten)]
        data: DataDir,
        /// Run the query N times and print min and median time per query on stderr.
        #[arg(long, value_name = "N")]
        repeat: Option<usize>,
    },
    /// Billed calls per account, key, caller (app user or SSO subject) and survey.
    Usage {
        /// Only this account.
        #[arg(long)]
        account: Option<String>,
        /// Only calls on or after this date (YYYY-MM-DD, UTC) or time (RFC 3339).
        #[arg(long)]
        since: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
        #[command(flatten)]
        store: Store,
    },
}

/// The deadlines and caps of connections (`serve`).
#[derive(Debug, Clone, Args)]
struct LimitArgs {
    /// Seconds a client has to send a request's head (also between requests on a
    /// keep-alive connection).
    // Every limit is bounded: 0 would refuse every request (or connection), and past a
    // day a deadline would overflow the clock's instants.
    #[arg(long, env = "CROSSTAB_HEADER_READ_TIMEOUT", value_name = "SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    header_read_timeout: u64,
    /// Seconds a client has to send a request's whole body, from its head.
    #[arg(long, env = "CROSSTAB_BODY_TIMEOUT", value_name = "SECONDS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    body_timeout: u64,
    /// Seconds a connection may move no byte before it is closed.
    #[arg(long, env = "CROSSTAB_IDLE_TIMEOUT", value_name = "SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    idle_timeout: u64,
    /// Connections open at once; past it, new ones are closed as soon as accepted.
    #[arg(long, env = "CROSSTAB_MAX_CONNECTIONS", value_name = "N", default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    max_connections: u32,
    /// Seconds requests in flight get to finish after SIGINT/SIGTERM before their
    /// connections are closed (bills already committed stay).
    #[arg(long, env = "CROSSTAB_SHUTDOWN_GRACE", value_name = "SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=86_400))]
    shutdown_grace: u64,
    /// Seconds after SIGINT/SIGTERM during which requests are still served but `/ready`
    /// answers 503 (draining), so a load balancer stops sending new ones before the
    /// listener closes (behind one: at least its health checks' interval times their
    /// fall count).
    #[arg(long, env = "CROSSTAB_DRAIN", value_name = "SECONDS", default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=3_600))]
    drain: u64,
}

impl LimitArgs {
    fn limits(&self) -> Limits {
        Limits {
            header_read_timeout: Duration::from_secs(self.header_read_timeout),
            body_timeout: Duration::from_secs(self.body_timeout),
            idle_timeout: Duration::from_secs(self.idle_timeout),
            max_connections: self.max_connections as usize,
            shutdown_grace: Duration::from_secs(self.shutdown_grace),
            drain: Duration::from_secs(self.drain),
        }
    }
}

#[derive(Debug, Subcommand)]
enum DbCommand {
    /// Creates the database if it is the default SQLite one and missing, and applies the
    /// schema migrations this crosstab has (`serve` does the same on start; the other
    /// commands only use a database that is up to date).
    Migrate {
        #[command(flatten)]
        store: Store,
    },
}

#[derive(Debug, Subcommand)]
enum AccountCommand {
    /// Show an account's grants, its limits and how many keys it has.
    Show {
        /// The account.
        #[arg(long)]
        account: String,
        #[command(flatten)]
        store: Store,
    },
    /// Add grants to an account (created if need be), without making a key. Grants are
    /// the account's: every one of its keys, users and single sign-on callers has them.
    Grant(GrantChange),
    /// Take grants away from an account: SURVEY removes the whole survey (and any of its
    /// groups), SURVEY:GROUP[,GROUP...] those groups. Nothing is removed unless the
    /// account holds every grant named. Running servers apply it on the next request.
    Revoke(GrantChange),
    /// Set an account's request rate and daily quota over all its keys and users: a
    /// number, or `unlimited`. A limit left out stays as it is; with neither, the limits
    /// are shown. Running servers apply a change on the next request.
    Limits {
        /// The account.
        #[arg(long)]
        account: String,
        /// Requests per second (1 or more), or `unlimited`.
        #[arg(long, value_name = "N|unlimited", value_parser = parse_rate)]
        per_second: Option<Limit<NonZeroU32>>,
        /// Billed calls per UTC day, or `unlimited`.
        #[arg(long, value_name = "N|unlimited", value_parser = parse_quota)]
        daily_quota: Option<Limit<u64>>,
        #[command(flatten)]
        store: Store,
    },
}

/// Grants added to or taken from an account.
#[derive(Debug, Args)]
struct GrantChange {
    /// The account.
    #[arg(long)]
    account: String,
    /// SURVEY (the whole survey) or SURVEY:GROUP[,GROUP...]; repeatable.
    #[arg(long = "grant", value_name = "SURVEY[:GROUPS]", required = true)]
    grants: Vec<GrantSpec>,
    #[command(flatten)]
    store: Store,
}

/// An account limit as the command line gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Limit<T> {
    To(T),
    Unlimited,
}

impl<T> Limit<T> {
    fn value(self) -> Option<T> {
        match self {
            Limit::To(value) => Some(value),
            Limit::Unlimited => None,
        }
    }
}

fn parse_rate(text: &str) -> Result<Limit<NonZeroU32>, String> {
    if text == "unlimited" {
        return Ok(Limit::Unlimited);
    }
    match text.parse::<u32>() {
        Ok(0) => Err("a rate of 0 would refuse every call: give 1 or more, or unlimited".into()),
        Ok(rate) => Ok(Limit::To(NonZeroU32::new(rate).ok_or("0")?)),
        Err(_) => Err(format!(
            "'{text}' is not a rate: give a whole number from 1 to {}, or unlimited",
            u32::MAX
        )),
    }
}

fn parse_quota(text: &str) -> Result<Limit<u64>, String> {
    if text == "unlimited" {
        return Ok(Limit::Unlimited);
    }
    match text.parse::<u64>() {
        Ok(calls) if i64::try_from(calls).is_ok() => Ok(Limit::To(calls)),
        _ => Err(format!(
            "'{text}' is not a quota: give a whole number from 0 to {}, or unlimited",
            i64::MAX
        )),
    }
}

/// An account's limits as the commands say them.
fn limits_text(limits: AccountLimits) -> String {
    let count = |n: Option<u64>, one: &str, many: &str| match n {
        None => format!("unlimited {many}"),
        Some(1) => format!("1 {one}"),
        Some(n) => format!("{n} {many}"),
    };
    format!(
        "{} per second, {} per day",
        count(
            limits.per_second.map(|n| u64::from(n.get())),
            "request",
            "requests"
        ),
        count(limits.daily_quota, "billed call", "billed calls")
    )
}

/// Grants as the command line writes them, space-separated (`none` for none).
fn grants_text(grants: &Grants) -> String {
    let specs: Vec<String> = grants.specs().iter().map(ToString::to_string).collect();
    if specs.is_empty() {
        "none".to_owned()
    } else {
        specs.join(" ")
    }
}

#[derive(Debug, Subcommand)]
enum AppCommand {
    /// With `serve --upstream URL`: the API key the app presents upstream for the users of
    /// one account (read from a file, so it never shows in a process list).
    UpstreamKey {
        /// The account whose users' queries use this key.
        #[arg(long)]
        account: String,
        /// File holding the key.
        #[arg(long, value_name = "PATH")]
        key_file: PathBuf,
        #[command(flatten)]
        store: Store,
    },
}

#[derive(Debug, Subcommand)]
enum UserCommand {
    /// Create a user (or reset its password); the password is asked twice, not echoed, at
    /// a terminal, or read as the first line of standard input from a pipe.
    Create {
        /// Sign-in name.
        #[arg(long)]
        username: String,
        /// The account whose surveys and keys the user works with (created if needed).
        #[arg(long)]
        account: String,
        /// Move an existing user of another account to this one (without it, that is
        /// refused: a mistyped account would hand the user another account's surveys).
        #[arg(long = "move")]
        moving: bool,
        #[command(flatten)]
        store: Store,
    },
    /// Disable a user: it can no longer sign in, and its sessions end now (the bills it
    /// made stay; `user create` with a new password enables it again). API keys it made
    /// are its account's: revoke them with `key revoke`.
    Disable {
        /// Sign-in name.
        #[arg(long)]
        username: String,
        #[command(flatten)]
        store: Store,
    },
}

#[derive(Debug, Subcommand)]
enum SurveyCommand {
    /// Validate, compile and install a survey from its definition (replaces the same code atomically).
    Import {
        /// The survey definition, e.g. path/survey.toml (its CSV, .sav or .zsav beside it).
        path: PathBuf,
        #[command(flatten)]
        data: DataDir,
        /// A PostgreSQL database (postgres://...) to publish the survey to as well: every
        /// server on it copies the new version within a second.
        #[arg(long, env = "CROSSTAB_DATABASE_URL", value_name = "URL")]
        database: Option<String>,
    },
    /// List the installed surveys (code, name, respondents, source format).
    List {
        #[command(flatten)]
        data: DataDir,
    },
    /// Read every byte of installed surveys and check them against the checksum written
    /// with them (a server checks a file when it loads it, not after); fails if any is
    /// damaged.
    Verify {
        /// The surveys to check (default: every installed survey).
        codes: Vec<String>,
        #[command(flatten)]
        data: DataDir,
    },
    /// Write a starting definition for an SPSS file: every variable's labels and values,
    /// the multiple-response sets as codes and a base ALL = "*".
    #[command(group = clap::ArgGroup::new("weighting").required(true).args(["weight", "unweighted"]))]
    Init {
        /// The SPSS file (.sav or .zsav).
        file: PathBuf,
        /// Write the definition to this file (never over one) instead of stdout; the SPSS
        /// file is then named relative to it, so the two can move together. On stdout it
        /// is named by its absolute path.
        #[arg(long, short, value_name = "FILE")]
        output: Option<PathBuf>,
        /// The survey code.
        #[arg(long)]
        code: String,
        /// The respondent id variable.
        #[arg(long)]
        id: String,
        /// The projection weight variable (numeric); or --unweighted.
        #[arg(long)]
        weight: Option<String>,
        /// The survey has no weight: every respondent weighs 1 (instead of --weight).
        #[arg(long)]
        unweighted: bool,
        /// The authorization group variable.
        #[arg(long)]
        group: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
enum KeyCommand {
    /// Create a key (and its account, if needed); prints the key alone on stdout.
    Create {
        /// The account the key belongs to.
        #[arg(long)]
        account: String,
        /// SURVEY (the whole survey) or SURVEY:GROUP[,GROUP...]; repeatable. Grants belong
        /// to the account (the contract's entitlement): they add to what it already has,
        /// for every one of its keys. Needed unless the account already has grants.
        #[arg(long = "grant", value_name = "SURVEY[:GROUPS]")]
        grants: Vec<GrantSpec>,
        /// Lifetime, e.g. 30d, 12h, 15m, 45s (default: no expiry).
        #[arg(long, value_parser = parse_lifetime)]
        expires_in: Option<Duration>,
        /// The environment the key is for.
        #[arg(long, value_enum, default_value = "live")]
        env: KeyEnv,
        #[command(flatten)]
        store: Store,
    },
    /// List keys (never the keys themselves).
    List {
        /// Only this account's keys.
        #[arg(long)]
        account: Option<String>,
        #[command(flatten)]
        store: Store,
    },
    /// Revoke a key: it stops working on the next request.
    Revoke {
        /// The key id (the part after ctx_<env>_, as `key list` shows).
        key_id: String,
        #[command(flatten)]
        store: Store,
    },
}

#[derive(Debug, Subcommand)]
enum SsoCommand {
    /// Trust an OpenID Connect issuer: its JWTs (access or ID tokens) are accepted as
    /// `Bearer` tokens and at the token endpoint. Its keys come from its discovery document.
    AddOidc {
        /// A name for it (recorded with every call its tokens make).
        #[arg(long)]
        name: String,
        /// The issuer URL, exactly as its tokens' `iss` says.
        #[arg(long, value_name = "URL")]
        issuer: String,
        /// The audience its tokens must name (default: this service's --public-url).
        #[arg(long)]
        audience: Option<String>,
        #[command(flatten)]
        account: OidcAccount,
        /// An account the claim may name (repeatable; any other is refused).
        #[arg(long, value_name = "ACCOUNT", requires = "account_claim")]
        allow_account: Vec<String>,
        /// An OAuth client whose tokens are accepted, by their `azp` or `client_id`
        /// (repeatable; default any client whose tokens name the audience: name them when
        /// the audience is shared by applications that should not call this service).
        #[arg(long = "client", value_name = "CLIENT_ID")]
        clients: Vec<String>,
        /// A scope its tokens must hold (in `scope` or `scp`).
        #[arg(long, value_name = "SCOPE")]
        scope: Option<String>,
        #[command(flatten)]
        store: Store,
    },
    /// Trust a SAML 2.0 identity provider: its signed assertions are exchanged for tokens
    /// at the token endpoint. Its entity id and signing certificate come from its metadata.
    AddSaml {
        /// A name for it (recorded with every call its tokens make).
        #[arg(long)]
        name: String,
        /// The IdP's metadata (an EntityDescriptor with an IDPSSODescriptor).
        #[arg(long, value_name = "FILE.xml")]
        metadata: PathBuf,
        /// The audience (this service's entity id) its assertions must name (default:
        /// this service's --public-url).
        #[arg(long, value_name = "ENTITY_ID")]
        audience: Option<String>,
        #[command(flatten)]
        account: SamlAccount,
        /// An account the attribute may name (repeatable; any other is refused).
        #[arg(long, value_name = "ACCOUNT", requires = "account_attribute")]
        allow_account: Vec<String>,
        #[command(flatten)]
        store: Store,
    },
    /// List the trusted identity providers.
    List {
        #[command(flatten)]
        store: Store,
    },
    /// Stop trusting an identity provider: its tokens stop working on the next request.
    Remove {
        /// Its name.
        name: String,
        #[command(flatten)]
        store: Store,
    },
    /// Let an identity provider whose tokens name their account (--account-claim,
    /// --account-attribute) name one more account.
    AllowAccount {
        /// The provider's name.
        #[arg(long)]
        name: String,
        /// The account.
        account: String,
        #[command(flatten)]
        store: Store,
    },
    /// Stop an identity provider naming an account: its tokens for it stop working on the
    /// next request.
    DenyAccount {
        /// The provider's name.
        #[arg(long)]
        name: String,
        /// The account.
        account: String,
        #[command(flatten)]
        store: Store,
    },
    /// Make a new key to sign this service's access tokens; tokens signed with older keys
    /// stay valid until they expire.
    RotateKey {
        #[command(flatten)]
        store: Store,
        #[command(flatten)]
        token_key_secret: TokenKeySecret,
    },
}

/// The secret this service's token-signing keys are sealed with in the database.
#[derive(Debug, Args)]
struct TokenKeySecret {
    /// A file holding 32 random bytes in base64 (`openssl rand -base64 32`), readable by
    /// the server alone (refused if others may read it): the token-signing keys are stored sealed with it (keys stored
    /// unsealed before are sealed at start), so a copy of the database cannot sign tokens.
    /// Every server of the database, and `sso rotate-key`, must be given the same.
    #[arg(
        long = "token-key-secret-file",
        env = "CROSSTAB_TOKEN_KEY_SECRET_FILE",
        value_name = "FILE"
    )]
    file: Option<PathBuf>,
}

impl TokenKeySecret {
    fn read(&self) -> Result<Option<KeySecret>, CliError> {
        let Some(path) = &self.file else {
            return Ok(None);
        };
        let reading = |error: std::io::Error| {
            CliError::Usage(format!(
                "reading the token key secret {}: {error}",
                path.display()
            ))
        };
        // Opened once: the file checked is the file read.
        let mut file = std::fs::File::open(path).map_err(reading)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt as _;
            let meta = file.metadata().map_err(reading)?;
            let euid = rustix::process::geteuid().as_raw();
            if let Some(why) = secret_file_exposure(meta.mode(), meta.uid(), euid) {
                return Err(CliError::Usage(format!(
                    "the token key secret {} is {why}: make it the server's user's alone \
                     (chmod 600), or root's and readable by its group at most (0440 or \
                     0640, as a secrets mount can give it)",
                    path.display()
                )));
            }
        }
        let mut text = zeroize::Zeroizing::new(String::new());
        std::io::Read::read_to_string(&mut file, &mut text).map_err(reading)?;
        KeySecret::from_base64(&text)
            .map(Some)
            .map_err(|error| CliError::Usage(format!("{}: {error}", path.display())))
    }
}

/// How a secret file of `mode` owned by `owner` is open to others than the server running
/// as `euid`, if it is; as PostgreSQL takes its private key file: owned by the server's
/// user and private to it, or owned by root and readable by its group at most (a
/// root-managed group, such as a secrets mount's, is meant then).
#[cfg(unix)]
fn secret_file_exposure(mode: u32, owner: u32, euid: u32) -> Option<&'static str> {
    if owner != euid && owner != 0 {
        Some("owned by another user, who may read and replace it")
    } else if mode & 0o007 != 0 {
        Some("readable by every user of this machine")
    } else if owner == euid && mode & 0o070 != 0 {
        Some("open to its group")
    } else if mode & 0o030 != 0 {
        Some("writable by its group")
    } else {
        None
    }
}

/// Which account an OpenID Connect issuer's tokens are billed to.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
struct OidcAccount {
    /// Every token's account.
    #[arg(long)]
    account: Option<String>,
    /// The claim naming each token's account (which must exist and be allowed by
    /// --allow-account).
    #[arg(long, value_name = "CLAIM", requires = "allow_account")]
    account_claim: Option<String>,
}

/// Which account a SAML identity provider's assertions are billed to.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
struct SamlAccount {
    /// Every assertion's account.
    #[arg(long)]
    account: Option<String>,
    /// The attribute naming each assertion's account (which must exist and be allowed
    /// by --allow-account).
    #[arg(long, value_name = "ATTRIBUTE", requires = "allow_account")]
    account_attribute: Option<String>,
}

/// The account rule of `--account` or the claim/attribute option.
fn account_rule(
    account: Option<String>,
    named_by: Option<String>,
    allowed: Vec<String>,
) -> Result<AccountRule, CliError> {
    match (account, named_by) {
        (Some(account), None) if !account.trim().is_empty() => Ok(AccountRule::Fixed(account)),
        (None, Some(by))
            if !by.trim().is_empty() && allowed.iter().all(|a| !a.trim().is_empty()) =>
        {
            let mut allowed = allowed;
            allowed.sort();
            allowed.dedup();
            Ok(AccountRule::Named { by, allowed })
        }
        _ => Err(CliError::Usage(
            "give one of --account or the claim (attribute) naming the account, not empty"
                .to_owned(),
        )),
    }
}

/// A command that failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Reading or writing files.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The database.
    #[error(transparent)]
    Db(#[from] DbError),
    /// Importing or installing a survey.
    #[error(transparent)]
    Import(#[from] ImportError),
    /// Loading an installed survey.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The server.
    #[error(transparent)]
    Serve(#[from] ServeError),
    /// A request the contract or the survey rejects.
    #[error("{} {}", .0.status(), .0)]
    Rejected(ApiError),
    /// Anything else the user must fix.
    #[error("{0}")]
    Usage(String),
}

/// Parses `30d`, `12h`, `15m`, `45s`.
/// A byte count: digits with an optional unit, KiB, MiB, GiB (powers of 1024) or KB,
/// MB, GB (of 1000).
fn parse_bytes(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let number: usize = digits
        .parse()
        .map_err(|_| format!("'{text}': expected a number of bytes, e.g. 512MiB"))?;
    let scale: usize = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        other => return Err(format!("'{other}': use B, KiB, MiB, GiB, KB, MB or GB")),
    };
    number
        .checked_mul(scale)
        .ok_or_else(|| format!("'{text}' is too large"))
}

/// `--cache-memory`: a byte count of at least 1 MiB (less is a unit left out).
fn parse_cache_memory(text: &str) -> Result<usize, String> {
    const LEAST: usize = 1 << 20;
    let bytes = parse_bytes(text)?;
    if bytes < LEAST {
        return Err(format!(
            "'{text}' is {bytes} bytes, under 1MiB: give a unit, e.g. 512MiB"
        ));
    }
    Ok(bytes)
}

/// [`transport::web_url`], or a message saying what to give instead.
fn service_url(text: &str, what: &str) -> Result<reqwest::Url, String> {
    transport::web_url(text).map_err(|why| format!("'{text}': {why}: give {what}"))
}

/// `--public-url`: where clients reach this service.
fn parse_public_url(text: &str) -> Result<String, String> {
    let what = "http(s)://host[:port], e.g. https://crosstab.example.com";
    let url = service_url(text, what)?;
    if url.path() != "/" {
        return Err(format!("'{text}': give {what}, with no path"));
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
}

/// `--upstream`: another service's `/v1` (`/v1` is added when the URL has no path).
fn parse_upstream(text: &str) -> Result<String, String> {
    let what = "the other service's /v1, e.g. https://api.example.com/v1";
    let url = service_url(text, what)?;
    let base = url.as_str().trim_end_matches('/');
    match url.path().trim_end_matches('/') {
        "" => Ok(format!("{base}/v1")),
        path if path.ends_with("/v1") => Ok(base.to_owned()),
        _ => Err(format!("'{text}': give {what}")),
    }
}

/// An eighth of the machine's memory (Linux's `MemTotal`).
fn default_cache_memory() -> Result<usize, CliError> {
    let bytes = memory::machine_memory().map_err(|why| {
        CliError::Usage(format!(
            "the machine's memory is unknown ({why}): give --cache-memory"
        ))
    })?;
    Ok(bytes / 8)
}

fn parse_lifetime(text: &str) -> Result<Duration, String> {
    let error = || format!("invalid lifetime '{text}': use a number and d, h, m or s, e.g. 30d");
    // The unit is the last character (not byte: `5é` is an error, not a panic).
    let split = text
        .char_indices()
        .last()
        .map(|(at, _)| at)
        .ok_or_else(error)?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().map_err(|_| error())?;
    if number == 0 {
        return Err(format!(
            "lifetime '{text}' is no time: a key must live a while (or leave out --expires-in)"
        ));
    }
    let seconds = match unit {
        "d" => number.checked_mul(86_400),
        "h" => number.checked_mul(3_600),
        "m" => number.checked_mul(60),
        "s" => Some(number),
        _ => None,
    }
    .ok_or_else(error)?;
    // Longer would print as "never" (beyond chrono's dates) yet still expire.
    if seconds > u64::from(MAX_LIFETIME_DAYS) * 86_400 {
        return Err(format!(
            "lifetime '{text}' is over {MAX_LIFETIME_DAYS} days: leave out --expires-in for a key that never expires"
        ));
    }
    Ok(Duration::from_secs(seconds))
}

/// Parses `--since`: a date (midnight UTC) or an RFC 3339 time, to Unix ms.
fn parse_since(text: &str) -> Result<i64, CliError> {
    if let Ok(date) = chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        if let Some(time) = date.and_hms_opt(0, 0, 0) {
            return Ok(time.and_utc().timestamp_millis());
        }
    }
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|t| t.timestamp_millis())
        .map_err(|_| {
            CliError::Usage(format!(
                "invalid --since '{text}': use YYYY-MM-DD or RFC 3339"
            ))
        })
}

/// Runs the command line; the process's exit code.
pub fn run() -> ExitCode {
    let cli = Cli::parse();
    let serving = matches!(cli.command, Command::Serve { .. });
    // sqlx's slow-statement warnings are for operators of a server, not for a long report.
    let logging = crate::logging::init(
        if serving {
            SERVE_LOG_FILTER
        } else {
            "warn,sqlx=error"
        },
        cli.log_format,
    );
    let result = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime.block_on(execute(cli.command)),
        Err(error) => Err(CliError::from(error)),
    };
    // In JSON, the last word is a log line too: stderr stays one object a line.
    if let (Err(error), LogFormat::Json) = (&result, cli.log_format) {
        tracing::error!(error = %error, "failed");
    }
    // Every log line is out before the last word.
    drop(logging);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) if cli.log_format == LogFormat::Json => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn execute(command: Command) -> Result<(), CliError> {
    match command {
        Command::Serve {
            listen,
            store,
            allowed_origins,
            demo,
            app_dir,
            upstream,
            sqlite_synchronous,
            statement_timeout,
            response_cache_entries,
            cache_memory,
            public_url,
            token_key_secret,
            limits,
            trusted_proxy_header,
            trusted_proxies,
            query_deadline,
            failed_auth_per_minute,
            sign_in_per_minute,
        } => {
            let database = store.url()?;
            let memory = MemoryBudget::new(match cache_memory {
                Some(bytes) => bytes,
                None => default_cache_memory()?,
            });
            serve::serve(ServeOptions {
                listen,
                data_dir: store.data_dir,
                database,
                database_options: DatabaseOptions {
                    synchronous: sqlite_synchronous,
                    statement_timeout: Duration::from_secs(statement_timeout),
                },
                allowed_origins,
                demo,
                app_dir,
                upstream,
                limits: limits.limits(),
                public_url,
                trusted_proxy: trusted_proxy_header
                    .map(|header| TrustedProxy::new(header, trusted_proxies)),
                settings: Settings {
                    cache: ResponseCache::within(response_cache_entries, &memory),
                    memory,
                    query_deadline: Duration::from_secs(query_deadline),
                    addresses: AddressLimits {
                        failed_auth_per_minute,
                        sign_in_per_minute,
                    },
                    // `serve` sets it once it listens (the default names its address).
                    public_url: crate::service::DEFAULT_PUBLIC_URL.to_owned(),
                    token_key_secret: token_key_secret.read()?,
                },
            })
            .await?;
            Ok(())
        }
        Command::Account { command } => account(command).await,
        Command::App {
            command:
                AppCommand::UpstreamKey {
                    account,
                    key_file,
                    store,
                },
        } => {
            let key = std::fs::read_to_string(&key_file)
                .map_err(|error| {
                    std::io::Error::new(error.kind(), format!("{}: {error}", key_file.display()))
                })?
                .trim()
                .to_owned();
            if key.is_empty() || key.chars().any(char::is_control) {
                return Err(CliError::Usage(format!(
                    "{} holds no key (one line, no control characters)",
                    key_file.display()
                )));
            }
            let db = store.connect().await?;
            let set = upstream_keys::set(&db, &account, &key, now_ms()).await?;
            db.close().await;
            if !set {
                return Err(CliError::Usage(format!("no account named '{account}'")));
            }
            eprintln!("upstream key set for account '{account}'");
            Ok(())
        }
        Command::User {
            command:
                UserCommand::Create {
                    username,
                    account,
                    moving,
                    store,
                },
        } => {
            let db = store.connect().await?;
            let password = match read_password(&username) {
                Ok(password) => password,
                Err(error) => {
                    db.close().await;
                    return Err(error);
                }
            };
            let password = password.as_str();
            let moving = if moving {
                users::Moving::Allowed
            } else {
                users::Moving::Refused
            };
            users::create_or_reset_moving(&db, &username, &account, password, now_ms(), moving)
                .await
                .map_err(|e| match e {
                    users::UserError::OtherAccount { username, account: current } => {
                        CliError::Usage(format!(
                            "user '{username}' belongs to account '{current}': give --account {current} to reset its password, or --move to move it to '{account}'"
                        ))
                    }
                    e => CliError::Usage(e.to_string()),
                })?;
            eprintln!("user '{username}' of account '{account}' is ready");
            Ok(())
        }
        Command::User {
            command: UserCommand::Disable { username, store },
        } => {
            let db = store.connect().await?;
            let found = crate::store::users::disable(&db, &username, now_ms()).await;
            db.close().await;
            if !found? {
                return Err(CliError::Usage(format!("no user named '{username}'")));
            }
            eprintln!(
                "user '{username}' disabled: its sessions ended; keys of its account stay (crosstab key list, key revoke)"
            );
            Ok(())
        }
        Command::Survey {
            command:
                SurveyCommand::Import {
                    path,
                    data,
                    database,
                },
        } => {
            // Connected first: a database that can't be reached (or is not migrated)
            // leaves the survey uninstalled here too, not installed but unpublished.
            let db = match database.filter(|url| !url.starts_with("sqlite:")) {
                Some(url) => Some(
                    Store {
                        data_dir: data.data_dir.clone(),
                        database: Some(url),
                    }
                    .connect()
                    .await?,
                ),
                None => None,
            };
            let code = match import_survey(&path, &data.data_dir) {
                Ok(code) => code,
                Err(error) => {
                    if let Some(db) = db {
                        db.close().await;
                    }
                    return Err(error);
                }
            };
            let Some(db) = db else {
                return Ok(());
            };
            let store = SurveyStore::open(&data.data_dir)?;
            let published = replicas::publish(&db, &store, &code, now_ms())
                .await
                .map_err(|error| CliError::Usage(format!("not published: {error}")));
            db.close().await;
            println!("  published:    {code} ({}) for every server", published?);
            Ok(())
        }
        Command::Survey {
            command: SurveyCommand::List { data },
        } => list_surveys(&data.data_dir),
        Command::Survey {
            command: SurveyCommand::Verify { codes, data },
        } => verify_surveys(&data.data_dir, codes),
        Command::Survey {
            command:
                SurveyCommand::Init {
                    file,
                    output,
                    code,
                    id,
                    weight,
                    unweighted: _,
                    group,
                },
        } => {
            let dir = output.as_deref().map(|output| match output.parent() {
                Some(parent) if !parent.as_os_str().is_empty() => parent,
                _ => Path::new("."),
            });
            // clap requires one of --weight and --unweighted, and refuses both.
            let definition = import::init_definition(
                &file,
                &code,
                &id,
                weight.as_deref(),
                group.as_deref(),
                dir,
            )?;
            let Some(output) = output else {
                print!("{definition}");
                return Ok(());
            };
            use std::io::Write;
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&output)
                .and_then(|mut out| out.write_all(definition.as_bytes()))
                .map_err(|error| {
                    let said = if error.kind() == std::io::ErrorKind::AlreadyExists {
                        "already exists: not overwritten (remove it, or give another -o)".to_owned()
                    } else {
                        error.to_string()
                    };
                    std::io::Error::new(error.kind(), format!("{}: {said}", output.display()))
                })?;
            eprintln!(
                "wrote {}: edit it, then crosstab survey import it",
                output.display()
            );
            Ok(())
        }
        Command::Db {
            command: DbCommand::Migrate { store },
        } => {
            let db = store.migrate().await?;
            let version = store::schema_version(&db).await?;
            db.close().await;
            eprintln!("database schema at version {version}");
            Ok(())
        }
        Command::Key { command } => key(command).await,
        Command::Sso { command } => sso(command).await,
        Command::Query {
            survey,
            base,
            targets,
            group,
            data,
            repeat,
        } => query(&survey, &base, targets, group, &data.data_dir, repeat),
        Command::Usage {
            account,
            since,
            format,
            store,
        } => {
            let since = since.as_deref().map(parse_since).transpose()?.unwrap_or(0);
            let db = store.connect().await?;
            if let Some(name) = &account {
                // Zero calls for a misspelt name would read as a real, empty bill.
                if accounts::account_id(&db, name).await?.is_none() {
                    db.close().await;
                    return Err(CliError::Usage(format!("no account named '{name}'")));
                }
            }
            let rows = usage::report(&db, account.as_deref(), since).await?;
            let text = report::render(&rows, format)
                .map_err(|error| CliError::Usage(format!("usage not rendered: {error}")))?;
            print!("{text}");
            db.close().await;
            Ok(())
        }
    }
}

/// What the grants name that no survey here has: a survey neither installed in the data
/// dir nor published in the database, a group its survey lacks. Granted all the same (a
/// grant may come before its survey), but said: it is most often a typo.
async fn unseen_grants(db: &Database, data_dir: &Path, grants: &[GrantSpec]) -> Vec<String> {
    let published: Vec<String> = if db.backend() == Backend::Postgres {
        match surveys::list(db).await {
            Ok(list) => list.into_iter().map(|p| p.code).collect(),
            Err(error) => {
                return vec![format!(
                    "published surveys not read ({error}): grants not checked"
                )]
            }
        }
    } else {
        Vec::new()
    };
    let local = SurveyStore::open(data_dir).ok();
    let mut unseen = Vec::new();
    for grant in grants {
        match local.as_ref().and_then(|store| store.load(&grant.survey).ok()) {
            Some(survey) => {
                for group in grant.groups.iter().filter(|g| !survey.has_group(g)) {
                    unseen.push(format!(
                        "survey '{}' has no group '{group}' (its groups: {}): granted all the same",
                        grant.survey,
                        survey.group_names().collect::<Vec<_>>().join(", ")
                    ));
                }
            }
            None if published.contains(&grant.survey) => {}
            None => unseen.push(format!(
                "no survey '{}' is installed in {} or published in the database: granted all the same, for when it is imported",
                grant.survey,
                data_dir.display()
            )),
        }
    }
    unseen
}

/// A new password: typed twice, unseen, at a terminal; else the first line of stdin (a
/// script's pipe).
fn read_password(username: &str) -> Result<String, CliError> {
    use std::io::IsTerminal;
    if !std::io::stdin().is_terminal() {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line)?;
        return Ok(line.trim_end_matches(['\r', '\n']).to_owned());
    }
    let first = rpassword::prompt_password(format!("password for '{username}': "))?;
    let again = rpassword::prompt_password("the same again: ")?;
    if first != again {
        return Err(CliError::Usage(
            "the two passwords differ; nothing was changed".into(),
        ));
    }
    Ok(first)
}

/// Imports and installs a survey; its code.
fn import_survey(path: &Path, data_dir: &Path) -> Result<String, CliError> {
    let store = SurveyStore::open(data_dir)?;
    let (survey, prepared) = import::install_file(path, &store)?;
    for warning in &prepared.warnings {
        eprintln!("warning: {warning}");
    }
    let weight_total = crosstab_engine::exact_sum(survey.weights().iter().copied());
    println!(
        "installed {} ({}) at {}",
        survey.code(),
        survey.name(),
        store.path_of(survey.code()).display()
    );
    println!("  source:       {}", prepared.format.name());
    println!("  respondents:  {}", survey.respondents());
    println!("  variables:    {}", survey.variable_names().count());
    println!("  named codes:  {}", survey.code_names().count());
    println!(
        "  bases:        {}",
        survey.base_codes().collect::<Vec<_>>().join(", ")
    );
    let groups: Vec<&str> = survey.group_names().collect();
    println!(
        "  groups:       {}",
        if groups.is_empty() {
            "none (no group column)".to_owned()
        } else {
            groups.join(", ")
        }
    );
    println!("  weight total: {weight_total}");
    Ok(survey.code().to_owned())
}

/// The surveys installed in `data_dir`, which must exist: a command that only reads
/// them neither makes a mistyped data dir nor takes it for an empty one.
fn installed(data_dir: &Path) -> Result<SurveyStore, CliError> {
    if !data_dir.is_dir() {
        return Err(CliError::Usage(format!(
            "no data dir at {}: give --data-dir (crosstab survey import makes one)",
            data_dir.display()
        )));
    }
    Ok(SurveyStore::open(data_dir)?)
}

fn list_surveys(data_dir: &Path) -> Result<(), CliError> {
    let store = installed(data_dir)?;
    let mut unreadable = Vec::new();
    for code in store.codes()? {
        match store.load(&code) {
            Ok(survey) => println!(
                "{}\t{}\t{} respondents\t{}",
                survey.code(),
                survey.name(),
                survey.respondents(),
                survey.source_format().unwrap_or("-")
            ),
            // Said on stderr, and the command fails: a script reading the list must not
            // take a damaged survey for a listed one.
            Err(error) => {
                eprintln!("{code}: unreadable: {error}");
                unreadable.push(code);
            }
        }
    }
    if unreadable.is_empty() {
        Ok(())
    } else {
        Err(CliError::Usage(format!(
            "unreadable surveys: {}",
            unreadable.join(", ")
        )))
    }
}

fn verify_surveys(data_dir: &Path, codes: Vec<String>) -> Result<(), CliError> {
    let store = installed(data_dir)?;
    let codes = if codes.is_empty() {
        store.codes()?
    } else {
        codes
    };
    let mut damaged = Vec::new();
    for code in codes {
        // A code names a file in the data dir: never a path.
        if !import::is_identifier(&code) {
            eprintln!("{code}: not a survey code");
            damaged.push(code);
            continue;
        }
        match store.load(&code).and_then(|survey| survey.verify()) {
            Ok(true) => println!("{code}\tintact"),
            Ok(false) => println!(
                "{code}\tunchecked: compiled before checksums (import it again to add one)"
            ),
            Err(error) => {
                eprintln!("{code}: {error}");
                damaged.push(code);
            }
        }
    }
    if damaged.is_empty() {
        Ok(())
    } else {
        Err(CliError::Usage(format!(
            "damaged or unreadable surveys: {} (import them again)",
            damaged.join(", ")
        )))
    }
}

async fn account(command: AccountCommand) -> Result<(), CliError> {
    let no_account = |name: &str| CliError::Usage(format!("no account named '{name}'"));
    match command {
        AccountCommand::Show { account, store } => {
            let db = store.connect().await?;
            let Some(id) = accounts::account_id(&db, &account).await? else {
                db.close().await;
                return Err(no_account(&account));
            };
            let grants = accounts::grants_of(&db, id).await?;
            let limits = accounts::limits_of(&db, id).await?;
            let keys = accounts::list_keys(&db, Some(&account)).await?;
            db.close().await;
            let now = now_ms();
            let usable = keys
                .iter()
                .filter(|k| k.revoked_at.is_none() && k.expires_at.is_none_or(|at| at > now))
                .count();
            println!("account\t{account}");
            println!("grants\t{}", grants_text(&grants));
            println!("limits\t{}", limits_text(limits));
            println!("keys\t{usable} usable, {} in all", keys.len());
            Ok(())
        }
        AccountCommand::Grant(GrantChange {
            account,
            grants,
            store,
        }) => {
            if account.trim().is_empty() {
                return Err(CliError::Usage("--account must not be empty".into()));
            }
            let db = store.connect().await?;
            let unseen = unseen_grants(&db, &store.data_dir, &grants).await;
            let created = accounts::add_grants(&db, &account, &grants).await?;
            let now = match accounts::account_id(&db, &account).await? {
                Some(id) => accounts::grants_of(&db, id).await?,
                None => Grants::default(),
            };
            db.close().await;
            for warning in unseen {
                eprintln!("warning: {warning}");
            }
            if created {
                eprintln!("created account '{account}'");
            }
            eprintln!("account '{account}' grants: {}", grants_text(&now));
            Ok(())
        }
        AccountCommand::Revoke(GrantChange {
            account,
            grants,
            store,
        }) => {
            let db = store.connect().await?;
            let removal = accounts::remove_grants(&db, &account, &grants).await?;
            db.close().await;
            match removal {
                GrantRemoval::Removed(now) => {
                    eprintln!("account '{account}' grants: {}", grants_text(&now));
                    Ok(())
                }
                GrantRemoval::NoAccount => Err(no_account(&account)),
                GrantRemoval::NotHeld(grant) => Err(CliError::Usage(format!(
                    "account '{account}' holds no grant {grant}: nothing removed"
                ))),
                GrantRemoval::HeldWhole(survey) => Err(CliError::Usage(format!(
                    "account '{account}' holds all of {survey}: revoke --grant {survey}, then \
                     grant the groups it keeps (nothing removed)"
                ))),
            }
        }
        AccountCommand::Limits {
            account,
            per_second,
            daily_quota,
            store,
        } => {
            let db = store.connect().await?;
            let change = LimitsChange {
                per_second: per_second.map(Limit::value),
                daily_quota: daily_quota.map(Limit::value),
            };
            let limits = if change == LimitsChange::default() {
                match accounts::account_id(&db, &account).await? {
                    Some(id) => Some(accounts::limits_of(&db, id).await?),
                    None => None,
                }
            } else {
                accounts::change_limits(&db, &account, change).await?
            };
            db.close().await;
            let limits = limits.ok_or_else(|| no_account(&account))?;
            // Asked for, on stdout; a change's confirmation, beside the other commands'.
            if change == LimitsChange::default() {
                println!("{}", limits_text(limits));
            } else {
                eprintln!("account '{account}': {}", limits_text(limits));
            }
            Ok(())
        }
    }
}

async fn key(command: KeyCommand) -> Result<(), CliError> {
    match command {
        KeyCommand::Create {
            account,
            grants,
            expires_in,
            env,
            store,
        } => {
            if account.trim().is_empty() {
                return Err(CliError::Usage("--account must not be empty".into()));
            }
            let expires_at = expires_in
                .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
                .map(|ms| now_ms().saturating_add(ms));
            let db = store.connect().await?;
            // A key that can query nothing is a mistake, not an account to create.
            if grants.is_empty() && !accounts::has_grants(&db, &account).await? {
                db.close().await;
                return Err(CliError::Usage(format!(
                    "account '{account}' has no grants yet: give at least one --grant SURVEY[:GROUPS]"
                )));
            }
            let unseen = unseen_grants(&db, &store.data_dir, &grants).await;
            let key = accounts::create_key(&db, &account, &grants, env, expires_at).await?;
            db.close().await;
            for warning in unseen {
                eprintln!("warning: {warning}");
            }
            let grants: Vec<String> = grants.iter().map(ToString::to_string).collect();
            eprintln!(
                "created {} key {} for account '{}' (grants added: {}; expires: {})",
                env,
                key.id,
                account,
                if grants.is_empty() {
                    "none".to_owned()
                } else {
                    grants.join(" ")
                },
                expires_at
                    .and_then(chrono::DateTime::from_timestamp_millis)
                    .map(|t| t.to_rfc3339())
                    .unwrap_or_else(|| "never".to_owned())
            );
            eprintln!("this key is shown only once: store it in a secret manager");
            println!("{}", key.token);
            Ok(())
        }
        KeyCommand::List { account, store } => {
            let db = store.connect().await?;
            if let Some(name) = &account {
                if accounts::account_id(&db, name).await?.is_none() {
                    db.close().await;
                    return Err(CliError::Usage(format!("no account named '{name}'")));
                }
            }
            let keys = accounts::list_keys(&db, account.as_deref()).await?;
            db.close().await;
            let time = |ms: Option<i64>| {
                ms.and_then(chrono::DateTime::from_timestamp_millis)
                    .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
                    .unwrap_or_else(|| "-".to_owned())
            };
            println!("id\tenv\taccount\tcreated\texpires\trevoked");
            for key in keys {
                println!(
                    "{}\t{}\t{}\t{}\t{}\t{}",
                    key.id,
                    key.env,
                    key.account,
                    time(Some(key.created_at)),
                    time(key.expires_at),
                    time(key.revoked_at)
                );
            }
            Ok(())
        }
        KeyCommand::Revoke { key_id, store } => {
            // A whole key given for its id: its id is taken, and its secret never echoed.
            // So is the key's public part, `ctx_<env>_<id>`.
            let key_id = crate::keys::parse(&key_id)
                .map(|presented| presented.id)
                .or_else(|| crate::keys::public_id(&key_id))
                .unwrap_or(key_id.as_str())
                .to_owned();
            let db = store.connect().await?;
            let revocation = accounts::revoke_key(&db, &key_id).await?;
            db.close().await;
            match revocation {
                Revocation::Revoked => {
                    eprintln!("revoked key {key_id}");
                    Ok(())
                }
                Revocation::Already => {
                    eprintln!("key {key_id} was revoked already: nothing changed");
                    Ok(())
                }
                Revocation::NoSuchKey => Err(CliError::Usage(format!("no key with id '{key_id}'"))),
            }
        }
    }
}

async fn sso(command: SsoCommand) -> Result<(), CliError> {
    match command {
        SsoCommand::AddOidc {
            name,
            issuer,
            audience,
            account,
            allow_account,
            mut clients,
            scope,
            store,
        } => {
            let rule = account_rule(account.account, account.account_claim, allow_account)?;
            if let Some(bad) = clients.iter().find(|c| c.is_empty()) {
                return Err(CliError::Usage(format!("--client '{bad}' is empty")));
            }
            if scope
                .as_deref()
                .is_some_and(|s| s.is_empty() || s.contains(char::is_whitespace))
            {
                return Err(CliError::Usage(
                    "--scope is one scope, without spaces".to_owned(),
                ));
            }
            clients.sort();
            clients.dedup();
            if !(issuer.starts_with("https://") || issuer.starts_with("http://")) {
                return Err(CliError::Usage(format!(
                    "--issuer '{issuer}' is not an http(s) URL"
                )));
            }
            if !transport::is_private(&issuer) {
                eprintln!(
                    "warning: '{issuer}' is plain http to another machine: its signing keys \
                     cross the network unprotected, and whoever can change them can sign \
                     tokens for its accounts; use https"
                );
            }
            let idp = IdentityProvider {
                name,
                kind: IdpKind::Oidc,
                issuer,
                audience,
                account: rule,
                clients,
                scope,
                metadata: None,
                created_at: now_ms(),
            };
            add_idp(&store, &idp).await?;
            // A mistyped issuer shows now, not at the first token.
            let keys = KeySets::new(std::sync::Arc::new(SystemClock));
            match keys.refresh(&idp.issuer).await {
                Ok(count) => eprintln!("{count} signing keys found through its discovery document"),
                Err(error) => eprintln!(
                    "warning: its signing keys were not fetched now ({error}); servers try again when a token needs them"
                ),
            }
            Ok(())
        }
        SsoCommand::AddSaml {
            name,
            metadata,
            audience,
            account,
            allow_account,
            store,
        } => {
            let rule = account_rule(account.account, account.account_attribute, allow_account)?;
            let xml = std::fs::read_to_string(&metadata)?;
            let known = SamlIdp::from_metadata(&xml)
                .map_err(|error| CliError::Usage(format!("{}: {error}", metadata.display())))?;
            let idp = IdentityProvider {
                name,
                kind: IdpKind::Saml,
                issuer: known.entity_id().to_owned(),
                audience,
                account: rule,
                clients: Vec::new(),
                scope: None,
                metadata: Some(known.to_stored()),
                created_at: now_ms(),
            };
            add_idp(&store, &idp).await
        }
        SsoCommand::List { store } => {
            let db = store.connect().await?;
            let idps = identity_providers::list(&db).await?;
            db.close().await;
            println!("name\tkind\tissuer\taudience\taccount\tclients\tscope");
            for idp in idps {
                let account = match &idp.account {
                    AccountRule::Fixed(account) => account.clone(),
                    AccountRule::Named { by, allowed } if allowed.is_empty() => {
                        format!("named by {by}: none allowed")
                    }
                    AccountRule::Named { by, allowed } => {
                        format!("named by {by}: {}", allowed.join(", "))
                    }
                };
                let clients = match idp.kind {
                    IdpKind::Oidc if idp.clients.is_empty() => "(any)".to_owned(),
                    IdpKind::Oidc => idp.clients.join(", "),
                    IdpKind::Saml => "-".to_owned(),
                };
                println!(
                    "{}\t{}\t{}\t{}\t{}\t{}\t{}",
                    idp.name,
                    idp.kind.as_str(),
                    idp.issuer,
                    idp.audience.as_deref().unwrap_or("(public URL)"),
                    account,
                    clients,
                    idp.scope.as_deref().unwrap_or("-")
                );
            }
            Ok(())
        }
        SsoCommand::Remove { name, store } => {
            let db = store.connect().await?;
            let removed = identity_providers::remove(&db, &name).await?;
            db.close().await;
            if removed {
                eprintln!("identity provider '{name}' removed");
                Ok(())
            } else {
                Err(CliError::Usage(format!(
                    "no identity provider named '{name}'"
                )))
            }
        }
        SsoCommand::AllowAccount {
            name,
            account,
            store,
        } => {
            let db = store.connect().await?;
            if accounts::account_id(&db, &account).await?.is_none() {
                eprintln!(
                    "warning: no account named '{account}' yet: its tokens are refused until it exists"
                );
            }
            let changed = identity_providers::allow_account(&db, &name, &account).await?;
            db.close().await;
            allowed_change(changed, &name)?;
            eprintln!("identity provider '{name}' may name account '{account}'");
            Ok(())
        }
        SsoCommand::DenyAccount {
            name,
            account,
            store,
        } => {
            let db = store.connect().await?;
            let changed = identity_providers::deny_account(&db, &name, &account).await?;
            db.close().await;
            allowed_change(changed, &name)?;
            eprintln!("identity provider '{name}' may no longer name account '{account}'");
            Ok(())
        }
        SsoCommand::RotateKey {
            store,
            token_key_secret,
        } => {
            let secret = token_key_secret.read()?;
            let db = store.connect().await?;
            // The servers must open the new key with the secret they open the others with:
            // a sealed key this secret (or its absence) does not open is refused here, and
            // given a secret, keys stored unsealed are sealed first.
            crate::service::sso::seal_stored(&db, secret.as_ref())
                .await
                .map_err(|error| CliError::Usage(error.to_string()))?;
            let key = signing::generate(now_ms(), secret.as_ref())
                .map_err(|error| CliError::Usage(error.to_string()))?;
            signing_keys::rotate(&db, &key).await?;
            db.close().await;
            eprintln!(
                "token-signing key {} made; tokens signed before stay valid until they expire",
                key.kid
            );
            Ok(())
        }
    }
}

/// `sso allow-account` / `deny-account`'s refusals.
fn allowed_change(change: AllowedChange, name: &str) -> Result<(), CliError> {
    match change {
        AllowedChange::Changed => Ok(()),
        AllowedChange::NoSuchProvider => Err(CliError::Usage(format!(
            "no identity provider named '{name}'"
        ))),
        AllowedChange::FixedAccount => Err(CliError::Usage(format!(
            "identity provider '{name}' bills one fixed account: its tokens name none"
        ))),
    }
}

async fn add_idp(store: &Store, idp: &IdentityProvider) -> Result<(), CliError> {
    let db = store.connect().await?;
    match &idp.account {
        AccountRule::Fixed(account) => {
            if accounts::account_id(&db, account).await?.is_none() {
                db.close().await;
                return Err(CliError::Usage(format!(
                    "no account named '{account}' (create it with `crosstab key create --account {account} --grant ...`)"
                )));
            }
        }
        AccountRule::Named { allowed, .. } => {
            for account in allowed {
                if accounts::account_id(&db, account).await?.is_none() {
                    eprintln!(
                        "warning: no account named '{account}' yet: its tokens are refused until it exists"
                    );
                }
            }
        }
    }
    let added = identity_providers::add(&db, idp).await?;
    db.close().await;
    if !added {
        return Err(CliError::Usage(format!(
            "an identity provider named '{}', or with the same issuer and audience, exists",
            idp.name
        )));
    }
    eprintln!(
        "{} identity provider '{}' ({}) trusted",
        idp.kind.as_str(),
        idp.name,
        idp.issuer
    );
    Ok(())
}

fn query(
    survey: &str,
    base: &str,
    targets: Vec<String>,
    group: Option<String>,
    data_dir: &Path,
    repeat: Option<usize>,
) -> Result<(), CliError> {
    let mut request = serde_json::json!({
        "SurveyCode": survey,
        "PopulationBaseCode": base,
        "TargetCodes": targets,
    });
    if let (Some(group), Some(object)) = (group, request.as_object_mut()) {
        object.insert("AuthorizationGroup".into(), group.into());
    }
    let valid = validate_value(&request).map_err(CliError::Rejected)?;
    let store = installed(data_dir)?;
    if !store.codes()?.iter().any(|code| code == survey) {
        return Err(CliError::Usage(format!(
            "survey '{survey}' is not installed in {}",
            data_dir.display()
        )));
    }
    let survey = store.load(survey)?;
    let answer = |survey| crosstab_engine::respond(Some(survey), &valid);
    let response = answer(&survey).map_err(CliError::Rejected)?;
    let text = serde_json::to_string(&response)
        .map_err(|error| CliError::Usage(format!("answer not serialized: {error}")))?;
    println!("{text}");
    if let Some(runs) = repeat.filter(|&n| n > 0) {
        let mut times: Vec<Duration> = (0..runs)
            .map(|_| {
                let started = Instant::now();
                let _ = std::hint::black_box(answer(&survey));
                started.elapsed()
            })
            .collect();
        times.sort();
        let min = times.first().copied().unwrap_or_default();
        let median = times.get(times.len() / 2).copied().unwrap_or_default();
        eprintln!(
            "{runs} runs over {} respondents: min {:.1} µs, median {:.1} µs per query",
            survey.respondents(),
            min.as_secs_f64() * 1e6,
            median.as_secs_f64() * 1e6
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn a_secret_file_must_be_the_servers_alone() {
        let (server, other, root) = (1000, 1001, 0);
        // The server's own file, private to it (file type and setuid bits aside).
        for mode in [0o600, 0o400, 0o700, 0o100600, 0o104600] {
            assert_eq!(secret_file_exposure(mode, server, server), None, "{mode:o}");
            assert_eq!(secret_file_exposure(mode, root, root), None, "{mode:o}");
        }
        // Root's, readable by its group (a secrets mount's), for a server not root.
        for mode in [0o440, 0o640, 0o400] {
            assert_eq!(secret_file_exposure(mode, root, server), None, "{mode:o}");
        }
        let refused = [
            (0o600, other, server, "owned by another user"),
            (0o400, other, root, "owned by another user"),
            (0o644, server, server, "every user"),
            (0o604, root, server, "every user"),
            (0o444, root, server, "every user"),
            (0o601, server, server, "every user"),
            (0o640, server, server, "its group"),
            // Root's own file when the server is root: private, as any server's own.
            (0o640, root, root, "its group"),
            (0o660, root, server, "writable by its group"),
            (0o620, root, server, "writable by its group"),
        ];
        for (mode, owner, euid, said) in refused {
            let why = secret_file_exposure(mode, owner, euid);
            assert!(
                why.is_some_and(|why| why.contains(said)),
                "{mode:o} owner {owner} euid {euid}: {why:?}"
            );
        }
    }

    #[test]
    fn lifetimes_parse_or_say_why_never_panic() {
        assert_eq!(parse_lifetime("30d"), Ok(Duration::from_secs(30 * 86_400)));
        assert_eq!(parse_lifetime("12h"), Ok(Duration::from_secs(12 * 3_600)));
        assert_eq!(parse_lifetime("15m"), Ok(Duration::from_secs(900)));
        assert!(parse_lifetime("0s").unwrap_err().contains("no time"));
        for bad in [
            "",
            "d",
            "30",
            "30x",
            "-1d",
            "5é",
            "é",
            "1.5d",
            "99999999999999999999d",
        ] {
            assert!(parse_lifetime(bad).is_err(), "{bad}");
        }
        assert!(
            parse_lifetime("213503982334602d").is_err(),
            "overflows seconds"
        );
        assert!(parse_lifetime("36525d").is_ok());
        let too_long = parse_lifetime("100000000d").unwrap_err();
        assert!(too_long.contains("never expires"), "{too_long}");
    }

    #[test]
    fn serve_refuses_limits_that_would_disable_or_overflow() {
        let serve = |flag: &str, value: &str| {
            Cli::try_parse_from(["crosstab", "serve", flag, value]).map(|_| ())
        };
        for flag in ["--failed-auth-per-minute", "--sign-in-per-minute"] {
            assert!(serve(flag, "0").is_err(), "{flag} 0");
            assert!(serve(flag, "1").is_ok(), "{flag} 1");
        }
        assert!(serve("--query-deadline", "0").is_err());
        assert!(serve("--query-deadline", "86400").is_ok());
        assert!(serve("--query-deadline", "4611686018427388").is_err());
        // 0 closes every connection or request; past a day overflows, past a million
        // connections made the semaphore panic.
        for flag in ["--header-read-timeout", "--body-timeout", "--idle-timeout"] {
            assert!(serve(flag, "0").is_err(), "{flag} 0");
            assert!(serve(flag, "86401").is_err(), "{flag} 86401");
            assert!(serve(flag, "1").is_ok(), "{flag} 1");
        }
        assert!(serve("--max-connections", "0").is_err());
        assert!(serve("--max-connections", "18446744073709551615").is_err());
        assert!(serve("--max-connections", "1000000").is_ok());
        // A byte count without its unit is refused, not a cache of 512 bytes.
        assert!(serve("--cache-memory", "512").is_err());
        assert!(serve("--cache-memory", "512MiB").is_ok());
    }

    #[test]
    fn service_urls_are_urls_of_a_host_and_say_so() {
        for (given, taken) in [
            (
                "HTTPS://Crosstab.Example.com/",
                "https://crosstab.example.com",
            ),
            ("http://10.0.0.5:8080", "http://10.0.0.5:8080"),
        ] {
            assert_eq!(parse_public_url(given).as_deref(), Ok(taken), "{given}");
        }
        for bad in [
            "crosstab.example.com",
            "ftp://x.test",
            "https://x.test/app",
            "https://x.test/?a=1",
            "https://user@x.test",
        ] {
            assert!(parse_public_url(bad).is_err(), "{bad}");
        }
        for (given, taken) in [
            ("https://api.example.com", "https://api.example.com/v1"),
            ("https://api.example.com/v1/", "https://api.example.com/v1"),
            (
                "http://127.0.0.1:9000/gateway/v1",
                "http://127.0.0.1:9000/gateway/v1",
            ),
        ] {
            assert_eq!(parse_upstream(given).as_deref(), Ok(taken), "{given}");
        }
        for bad in ["api.example.com/v1", "https://api.example.com/v2"] {
            assert!(parse_upstream(bad).is_err(), "{bad}");
        }
    }

    /// Whether `crosstab account limits --account a FLAG VALUE` parses.
    fn limits(flag: &str, value: &str) -> bool {
        let args = [
            "crosstab",
            "account",
            "limits",
            "--account",
            "a",
            flag,
            value,
        ];
        Cli::try_parse_from(args).is_ok()
    }

    #[test]
    fn survey_init_takes_a_weight_or_unweighted_never_both_nor_neither() {
        let init = |extra: &[&str]| {
            let mut args = vec![
                "crosstab", "survey", "init", "s.sav", "--code", "S", "--id", "ID",
            ];
            args.extend_from_slice(extra);
            Cli::try_parse_from(args).is_ok()
        };
        assert!(init(&["--weight", "W"]));
        assert!(init(&["--unweighted"]));
        assert!(!init(&[]));
        assert!(!init(&["--weight", "W", "--unweighted"]));
    }

    #[test]
    fn a_daily_quota_fits_the_store() {
        assert!(limits("--daily-quota", "9223372036854775807"));
        assert!(!limits("--daily-quota", "9223372036854775808"));
    }

    #[test]
    fn an_account_rate_is_at_least_one_a_second() {
        assert!(!limits("--per-second", "0"));
        assert!(!limits("--per-second", "-1"));
        assert!(limits("--per-second", "1"));
    }

    #[test]
    fn byte_counts_parse_with_their_units_or_say_why() {
        assert_eq!(parse_bytes("1000000"), Ok(1_000_000));
        assert_eq!(parse_bytes("512MiB"), Ok(512 << 20));
        assert_eq!(parse_bytes("2GiB"), Ok(2 << 30));
        assert_eq!(parse_bytes("3 GB"), Ok(3_000_000_000));
        for bad in [
            "",
            "MiB",
            "1.5GiB",
            "-1",
            "12 parsecs",
            "99999999999999999999GiB",
        ] {
            assert!(parse_bytes(bad).is_err(), "{bad}");
        }
        assert!(default_cache_memory().is_ok_and(|bytes| bytes > 0));
    }
}
