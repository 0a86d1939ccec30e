//! Billed calls read back from the ledger: per account, caller (key, app user, or an
//! identity provider's token subject) and
//! survey for `crosstab usage`, and per day for an app user's account.

use sqlx::Row;

use super::{Backend, Database, DbError};

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct UsageRow {
    /// The account.
    pub account: String,
    /// The key, for calls made with one.
    pub key_id: Option<String>,
    /// The key's environment (`live` or `test`): test traffic reads apart from real.
    pub env: Option<String>,
    /// The app user, for calls made in the app.
    pub user: Option<String>,
    /// The identity provider, for calls made with a bearer token.
    pub idp: Option<String>,
    /// The token's subject, for calls made with a bearer token.
    pub subject: Option<String>,
    /// The survey.
    pub survey: String,
    /// Billed calls.
    pub calls: i64,
    /// First billed call, RFC 3339.
    pub first: String,
    /// Last billed call, RFC 3339.
    pub last: String,
}

/// A stored time as RFC 3339 (every stored time is one chrono can show).
fn rfc3339(ms: i64) -> Result<String, DbError> {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .ok_or(DbError::Corrupt("a bill's time is out of range"))
}

/// The report, for one account or all, from `since_ms` on.
pub async fn report(
    db: &Database,
    account: Option<&str>,
    since_ms: i64,
) -> Result<Vec<UsageRow>, DbError> {
    // Bills are grouped first and named after (accounts and keys are looked up once per
    // line, not per bill); a named account is one range of the ledger's index.
    let since = at_or_after(db.backend(), "$1");
    let bills = match account {
        Some(_) => format!("{since} AND account_id = (SELECT id FROM accounts WHERE name = $2)"),
        None => since,
    };
    let sql = format!(
        "SELECT a.name, g.key_id, k.env, u.username, g.idp, g.subject, g.survey, g.calls, \
                g.first_at, g.last_at \
         FROM (SELECT account_id, key_id, user_id, idp, subject, survey, COUNT(*) AS calls, \
                      MIN(at) AS first_at, MAX(at) AS last_at \
               FROM ledger WHERE {bills} \
               GROUP BY account_id, key_id, user_id, idp, subject, survey) g \
         JOIN accounts a ON a.id = g.account_id \
         LEFT JOIN api_keys k ON k.id = g.key_id \
         LEFT JOIN users u ON u.id = g.user_id \
         ORDER BY a.name, g.key_id, u.username, g.idp, g.subject, g.survey"
    );
    let mut query = sqlx::query(&sql).bind(since_ms);
    if let Some(account) = account {
        query = query.bind(account);
    }
    let rows = query.fetch_all(db.pool()).await?;
    rows.iter()
        .map(|row| {
            Ok(UsageRow {
                account: row.try_get(0)?,
                key_id: row.try_get(1)?,
                env: row.try_get(2)?,
                user: row.try_get(3)?,
                idp: row.try_get(4)?,
                subject: row.try_get(5)?,
                survey: row.try_get(6)?,
                calls: row.try_get(7)?,
                first: rfc3339(row.try_get(8)?)?,
                last: rfc3339(row.try_get(9)?)?,
            })
        })
        .collect()
}

/// Billed calls of one account on one UTC day, on one survey, by one caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DailyUsage {
    /// `YYYY-MM-DD`, UTC.
    pub day: String,
    /// The survey.
    pub survey: String,
    /// The app user who made them, or `None` for calls made with keys or tokens.
    pub user: Option<String>,
    /// The identity provider whose tokens made them, `None` for keys and app users.
    pub idp: Option<String>,
    /// Billed calls.
    pub calls: i64,
}

/// Account `account_id`'s billed calls at or after `from` and before `to` (Unix ms) per
/// day, survey and app user, newest day first: the ledger's index bounds the read from
/// `from` on (on SQLite to `to` too), however long the account's history before it.
pub async fn daily(
    db: &Database,
    account_id: i64,
    from: i64,
    to: i64,
) -> Result<Vec<DailyUsage>, DbError> {
    let day = match db.backend() {
        Backend::Sqlite => "strftime('%Y-%m-%d', l.at / 1000, 'unixepoch')",
        Backend::Postgres => {
            "to_char(to_timestamp(l.at / 1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD')"
        }
    };
    let rows = sqlx::query(&format!(
        "SELECT {day} AS day, l.survey, u.username, l.idp, COUNT(*) FROM ledger l \
         LEFT JOIN users u ON u.id = l.user_id WHERE l.account_id = $1 AND {} AND {} \
         GROUP BY day, l.survey, u.username, l.idp \
         ORDER BY day DESC, l.survey, u.username, l.idp",
        at_or_after(db.backend(), "$2"),
        before(db.backend(), "$3")
    ))
    .bind(account_id)
    .bind(from)
    .bind(to)
    .fetch_all(db.pool())
    .await?;
    rows.iter()
        .map(|row| {
            Ok(DailyUsage {
                day: row.try_get(0)?,
                survey: row.try_get(1)?,
                user: row.try_get(2)?,
                idp: row.try_get(3)?,
                calls: row.try_get(4)?,
            })
        })
        .collect()
}

/// Account `account_id`'s billed calls at or after `since` (Unix ms).
pub async fn calls_since(db: &Database, account_id: i64, since: i64) -> Result<u64, DbError> {
    calls_between(db, account_id, since, i64::MAX).await
}

/// Account `account_id`'s billed calls at or after `from` and before `to` (Unix ms).
pub async fn calls_between(
    db: &Database,
    account_id: i64,
    from: i64,
    to: i64,
) -> Result<u64, DbError> {
    let sql = format!(
        "SELECT COUNT(*) FROM ledger WHERE account_id = $1 AND {} AND {}",
        at_or_after(db.backend(), "$2"),
        before(db.backend(), "$3")
    );
    let calls: i64 = sqlx::query_scalar(&sql)
        .bind(account_id)
        .bind(from)
        .bind(to)
        .fetch_one(db.pool())
        .await?;
    u64::try_from(calls).map_err(|_| DbError::Corrupt("a negative count"))
}

/// Bills at or after `time` (a parameter): on PostgreSQL their batches' rows are found by
/// their latest time first, which the index holds, and only theirs are unnested.
fn at_or_after(backend: Backend, time: &str) -> String {
    match backend {
        Backend::Sqlite => format!("at >= {time}"),
        Backend::Postgres => format!("batch_last_at >= {time} AND at >= {time}"),
    }
}

/// Bills before `time` (a parameter), their batches' rows first on PostgreSQL.
fn before(backend: Backend, time: &str) -> String {
    match backend {
        Backend::Sqlite => format!("at < {time}"),
        Backend::Postgres => format!("batch_first_at < {time} AND at < {time}"),
    }
}
