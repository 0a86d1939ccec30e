//! Accounts, their grants and their keys in the database: what `crosstab key ...` and
//! `serve --demo` change, and what the authenticator reads.

use std::num::NonZeroU32;

use sqlx::Row;

use super::key_signal::KeySignal;
use super::{Database, DbError};
use crate::clock::now_ms;
use crate::grants::{GrantSpec, Grants, WHOLE_SURVEY};
use crate::keys::{self, KeyEnv, NewKey};

/// A key as `key list` shows it (never the key itself).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct KeyInfo {
    /// The key id.
    pub id: String,
    /// The owning account.
    pub account: String,
    /// `live` or `test`.
    pub env: String,
    /// Creation time, Unix ms.
    pub created_at: i64,
    /// Expiry, Unix ms.
    pub expires_at: Option<i64>,
    /// Revocation time, Unix ms.
    pub revoked_at: Option<i64>,
}

/// What a key identifies, as loaded for authentication.
#[derive(Debug, Clone)]
pub struct KeyRecord {
    /// The key id.
    pub id: String,
    /// Its environment.
    pub env: KeyEnv,
    /// Hash of its secret.
    pub secret_hash: [u8; 32],
    /// Expiry, Unix ms.
    pub expires_at: Option<i64>,
    /// Whether it was revoked.
    pub revoked: bool,
    /// The owning account's id.
    pub account_id: i64,
    /// The owning account's name.
    pub account: String,
    /// The account's grants.
    pub grants: Grants,
    /// The account's request limits.
    pub limits: AccountLimits,
}

/// An account's request rate and daily quota (`None`: not limited).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AccountLimits {
    /// Requests per second, over all the account's callers (never 0: a limit that
    /// refuses everything is a suspended account, not a rate).
    pub per_second: Option<NonZeroU32>,
    /// Billed calls per UTC day.
    pub daily_quota: Option<u64>,
}

/// Creates `name` if needed; returns its id.
pub(crate) async fn ensure_account(
    conn: &mut sqlx::AnyConnection,
    name: &str,
    now: i64,
) -> Result<i64, DbError> {
    Ok(made_account(conn, name, now).await?.0)
}

/// Creates `name` if needed (a write first, so SQLite's write lock is this transaction's
/// from its start); its id, and whether it was made now.
async fn made_account(
    conn: &mut sqlx::AnyConnection,
    name: &str,
    now: i64,
) -> Result<(i64, bool), DbError> {
    let made = sqlx::query(
        "INSERT INTO accounts (name, created_at) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
    )
    .bind(name)
    .bind(now)
    .execute(&mut *conn)
    .await?
    .rows_affected()
        > 0;
    let row = sqlx::query("SELECT id FROM accounts WHERE name = $1")
        .bind(name)
        .fetch_one(&mut *conn)
        .await?;
    Ok((row.try_get("id")?, made))
}

/// The id of account `name`, its row locked to the transaction's end: a write first, so
/// SQLite's write lock is the transaction's from its start (a read first could not take
/// it later while the ledger's writer holds it), and PostgreSQL's row lock.
async fn locked_account(
    conn: &mut sqlx::AnyConnection,
    name: &str,
) -> Result<Option<i64>, DbError> {
    Ok(
        sqlx::query_scalar("UPDATE accounts SET name = name WHERE name = $1 RETURNING id")
            .bind(name)
            .fetch_optional(&mut *conn)
            .await?,
    )
}

/// Bumps the key revision and, on PostgreSQL, announces the change to every server when
/// the transaction commits.
pub(crate) async fn bump_revision(conn: &mut sqlx::AnyConnection) -> Result<(), DbError> {
    sqlx::query("UPDATE key_revision SET revision = revision + 1 WHERE id = 1")
        .execute(&mut *conn)
        .await?;
    if conn.backend_name() == "PostgreSQL" {
        sqlx::query("SELECT pg_notify($1, '')")
            .bind(super::changes::KEYS_CHANNEL)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// Tells running servers (through the signal file) that keys or grants changed.
pub(crate) fn signal_key_change(db: &Database) {
    let Some(path) = db.key_signal_file() else {
        return;
    };
    if let Err(error) = KeySignal::open(&path).and_then(|signal| signal.bump()) {
        // The revision bumped with the change is the backstop (`Authenticator::follow_revision`).
        tracing::warn!(%error, "could not signal a key change; running servers notice within a second");
    }
}

/// Creates the account if needed, adds the grants to it, and creates a key for it.
pub async fn create_key(
    db: &Database,
    account: &str,
    grants: &[GrantSpec],
    env: KeyEnv,
    expires_at: Option<i64>,
) -> Result<NewKey, DbError> {
    let key = keys::generate(env);
    let now = now_ms();
    let mut tx = db.pool().begin().await?;
    let account_id = ensure_account(&mut tx, account, now).await?;
    insert_grants(&mut tx, account_id, grants).await?;
    insert_key(&mut tx, &key, account_id, now, expires_at).await?;
    tx.commit().await?;
    signal_key_change(db);
    Ok(key)
}

/// Adds `grants` to account `account_id` (those it holds already stay as they are);
/// how many it did not hold.
async fn insert_grants(
    conn: &mut sqlx::AnyConnection,
    account_id: i64,
    grants: &[GrantSpec],
) -> Result<u64, DbError> {
    let mut added = 0;
    for grant in grants {
        let groups: Vec<&str> = if grant.groups.is_empty() {
            vec![WHOLE_SURVEY]
        } else {
            grant.groups.iter().map(String::as_str).collect()
        };
        for group in groups {
            added += sqlx::query("INSERT INTO grants (account_id, survey, grp) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING")
                .bind(account_id)
                .bind(&grant.survey)
                .bind(group)
                .execute(&mut *conn)
                .await?
                .rows_affected();
        }
    }
    Ok(added)
}

/// Adds `grants` to account `account`, created if need be (as a key's creation does),
/// and tells running servers; `true` if the account was created.
pub async fn add_grants(
    db: &Database,
    account: &str,
    grants: &[GrantSpec],
) -> Result<bool, DbError> {
    let mut tx = db.pool().begin().await?;
    let (account_id, made) = made_account(&mut tx, account, now_ms()).await?;
    // Only a change is told to the servers.
    if insert_grants(&mut tx, account_id, grants).await? > 0 {
        bump_revision(&mut tx).await?;
        tx.commit().await?;
        signal_key_change(db);
    } else {
        tx.commit().await?;
    }
    Ok(made)
}

/// What [`remove_grants`] did. Nothing is removed unless every grant named is held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GrantRemoval {
    /// Removed; the account's grants now.
    Removed(Grants),
    /// There is no such account.
    NoAccount,
    /// The account holds no such grant.
    NotHeld(GrantSpec),
    /// Groups named of a survey the account holds whole: the whole grant is to be
    /// removed first (and the groups it keeps granted).
    HeldWhole(String),
}

/// Removes `grants` from account `account`: `SURVEY` takes the whole survey away (and
/// any of its groups), `SURVEY:GROUPS` those groups; then tells running servers.
pub async fn remove_grants(
    db: &Database,
    account: &str,
    grants: &[GrantSpec],
) -> Result<GrantRemoval, DbError> {
    let mut tx = db.pool().begin().await?;
    let Some(account_id) = locked_account(&mut tx, account).await? else {
        return Ok(GrantRemoval::NoAccount);
    };
    for grant in grants {
        let held: Vec<String> =
            sqlx::query_scalar("SELECT grp FROM grants WHERE account_id = $1 AND survey = $2")
                .bind(account_id)
                .bind(&grant.survey)
                .fetch_all(&mut *tx)
                .await?;
        let whole = held.iter().any(|g| g == WHOLE_SURVEY);
        if grant.groups.is_empty() {
            if held.is_empty() {
                return Ok(GrantRemoval::NotHeld(grant.clone()));
            }
            sqlx::query("DELETE FROM grants WHERE account_id = $1 AND survey = $2")
                .bind(account_id)
                .bind(&grant.survey)
                .execute(&mut *tx)
                .await?;
            continue;
        }
        if whole {
            return Ok(GrantRemoval::HeldWhole(grant.survey.clone()));
        }
        for group in &grant.groups {
            if !held.contains(group) {
                return Ok(GrantRemoval::NotHeld(GrantSpec {
                    survey: grant.survey.clone(),
                    groups: vec![group.clone()],
                }));
            }
            sqlx::query("DELETE FROM grants WHERE account_id = $1 AND survey = $2 AND grp = $3")
                .bind(account_id)
                .bind(&grant.survey)
                .bind(group)
                .execute(&mut *tx)
                .await?;
        }
    }
    bump_revision(&mut tx).await?;
    tx.commit().await?;
    signal_key_change(db);
    Ok(GrantRemoval::Removed(grants_of(db, account_id).await?))
}

/// How many keys an account may have made for it (by the app).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyLimits {
    /// Usable keys (unrevoked, unexpired) it may hold.
    pub usable: i64,
    /// Keys it may create in 24 hours, revoked ones too.
    pub per_day: i64,
}

/// What [`create_key_within`] did.
#[derive(Debug)]
pub enum KeyCreation {
    /// The key, created.
    Created(NewKey),
    /// None: the account holds [`KeyLimits::usable`] usable keys.
    TooManyUsable,
    /// None: the account created [`KeyLimits::per_day`] keys in the last 24 hours.
    TooManyToday,
}

/// Creates a key for the existing account `account` within `limits`. Concurrent calls
/// for one account take its row in turn, so the limits hold.
pub async fn create_key_within(
    db: &Database,
    account: &str,
    env: KeyEnv,
    expires_at: Option<i64>,
    limits: KeyLimits,
) -> Result<KeyCreation, DbError> {
    let now = now_ms();
    let mut tx = db.pool().begin().await?;
    let account_id = locked_account(&mut tx, account)
        .await?
        .ok_or(DbError::Sqlx(sqlx::Error::RowNotFound))?;
    let usable: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM api_keys WHERE account_id = $1 AND revoked_at IS NULL \
         AND (expires_at IS NULL OR expires_at > $2)",
    )
    .bind(account_id)
    .bind(now)
    .fetch_one(&mut *tx)
    .await?;
    // Dropping `tx` rolls back: nothing was written.
    if usable >= limits.usable {
        return Ok(KeyCreation::TooManyUsable);
    }
    let today: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM api_keys WHERE account_id = $1 AND created_at > $2",
    )
    .bind(account_id)
    .bind(now - 86_400_000)
    .fetch_one(&mut *tx)
    .await?;
    if today >= limits.per_day {
        return Ok(KeyCreation::TooManyToday);
    }
    let key = keys::generate(env);
    insert_key(&mut tx, &key, account_id, now, expires_at).await?;
    tx.commit().await?;
    signal_key_change(db);
    Ok(KeyCreation::Created(key))
}

/// Stores `key` (its hash) for `account_id` and bumps the key revision.
async fn insert_key(
    conn: &mut sqlx::AnyConnection,
    key: &NewKey,
    account_id: i64,
    now: i64,
    expires_at: Option<i64>,
) -> Result<(), DbError> {
    sqlx::query(
        "INSERT INTO api_keys (id, account_id, env, secret_hash, created_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(&key.id)
    .bind(account_id)
    .bind(key.env.as_str())
    .bind(&key.secret_hash)
    .bind(now)
    .bind(expires_at)
    .execute(&mut *conn)
    .await?;
    bump_revision(conn).await
}

/// What [`revoke_key`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revocation {
    /// The key was revoked now.
    Revoked,
    /// It was revoked already: nothing changed.
    Already,
    /// There is no such key.
    NoSuchKey,
}

/// Revokes a key (revoking twice is fine). Only a key revoked now is a change servers are
/// told of: revoking one again writes nothing, so a loop of it cannot keep emptying every
/// server's key cache.
pub async fn revoke_key(db: &Database, key_id: &str) -> Result<Revocation, DbError> {
    let mut tx = db.pool().begin().await?;
    // The write first (see `locked_account`); only when it changed nothing, the look.
    let revoked_now =
        sqlx::query("UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL")
            .bind(now_ms())
            .bind(key_id)
            .execute(&mut *tx)
            .await?
            .rows_affected()
            > 0;
    let found = revoked_now
        || sqlx::query("SELECT id FROM api_keys WHERE id = $1")
            .bind(key_id)
            .fetch_optional(&mut *tx)
            .await?
            .is_some();
    if revoked_now {
        bump_revision(&mut tx).await?;
    }
    tx.commit().await?;
    if revoked_now {
        signal_key_change(db);
    }
    Ok(match (found, revoked_now) {
        (false, _) => Revocation::NoSuchKey,
        (true, true) => Revocation::Revoked,
        (true, false) => Revocation::Already,
    })
}

/// Every key, or one account's, oldest first.
pub async fn list_keys(db: &Database, account: Option<&str>) -> Result<Vec<KeyInfo>, DbError> {
    let rows = sqlx::query(
        "SELECT k.id, a.name, k.env, k.created_at, k.expires_at, k.revoked_at \
         FROM api_keys k JOIN accounts a ON a.id = k.account_id \
         WHERE $1 IS NULL OR a.name = $1 ORDER BY k.created_at, k.id",
    )
    .bind(account)
    .fetch_all(db.pool())
    .await?;
    rows.iter()
        .map(|row| {
            Ok(KeyInfo {
                id: row.try_get(0)?,
                account: row.try_get(1)?,
                env: row.try_get(2)?,
                created_at: row.try_get(3)?,
                expires_at: row.try_get(4)?,
                revoked_at: row.try_get(5)?,
            })
        })
        .collect()
}

/// What account `account_id` may query.
pub async fn grants_of(db: &Database, account_id: i64) -> Result<Grants, DbError> {
    let rows = sqlx::query("SELECT survey, grp FROM grants WHERE account_id = $1")
        .bind(account_id)
        .fetch_all(db.pool())
        .await?;
    let pairs = rows
        .iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect::<Result<Vec<(String, String)>, sqlx::Error>>()?;
    Ok(Grants::from_rows(pairs))
}

/// Whether the account named `account` exists and may query anything.
pub async fn has_grants(db: &Database, account: &str) -> Result<bool, DbError> {
    let count: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM grants g JOIN accounts a ON a.id = g.account_id WHERE a.name = $1",
    )
    .bind(account)
    .fetch_one(db.pool())
    .await?;
    Ok(count > 0)
}

/// The key `key_id` with its account and grants, if it exists.
pub async fn load_key(db: &Database, key_id: &str) -> Result<Option<KeyRecord>, DbError> {
    let Some(row) = sqlx::query(
        "SELECT k.env, k.secret_hash, k.expires_at, k.revoked_at, a.id, a.name \
         FROM api_keys k JOIN accounts a ON a.id = k.account_id WHERE k.id = $1",
    )
    .bind(key_id)
    .fetch_optional(db.pool())
    .await?
    else {
        return Ok(None);
    };
    let env: String = row.try_get(0)?;
    let hash: String = row.try_get(1)?;
    let revoked_at: Option<i64> = row.try_get(3)?;
    let account_id: i64 = row.try_get(4)?;
    let grants = grants_of(db, account_id).await?;
    let limits = limits_of(db, account_id).await?;
    Ok(Some(KeyRecord {
        id: key_id.to_owned(),
        // A row this server could not have written is damage to report (a 500, logged),
        // not a key to refuse as if the caller had sent a wrong one.
        env: KeyEnv::from_name(&env).ok_or(DbError::Corrupt("an api key's env"))?,
        secret_hash: keys::hash_from_hex(&hash)
            .ok_or(DbError::Corrupt("an api key's secret hash"))?,
        expires_at: row.try_get(2)?,
        revoked: revoked_at.is_some(),
        account_id,
        account: row.try_get(5)?,
        grants,
        limits,
    }))
}

/// Account `account_id`'s request limits.
pub async fn limits_of(db: &Database, account_id: i64) -> Result<AccountLimits, DbError> {
    limits_in(db.pool(), account_id).await
}

async fn limits_in<'e>(
    executor: impl sqlx::Executor<'e, Database = sqlx::Any>,
    account_id: i64,
) -> Result<AccountLimits, DbError> {
    let row =
        sqlx::query("SELECT per_second, daily_quota FROM account_limits WHERE account_id = $1")
            .bind(account_id)
            .fetch_optional(executor)
            .await?;
    let Some(row) = row else {
        return Ok(AccountLimits::default());
    };
    let per_second: Option<i64> = row.try_get(0)?;
    let daily_quota: Option<i64> = row.try_get(1)?;
    let corrupt = || DbError::Corrupt("an account limit is out of range");
    Ok(AccountLimits {
        per_second: per_second
            .map(|rate| u32::try_from(rate).ok().and_then(NonZeroU32::new))
            .map(|rate| rate.ok_or_else(corrupt))
            .transpose()?,
        daily_quota: daily_quota
            .map(u64::try_from)
            .transpose()
            .map_err(|_| corrupt())?,
    })
}

/// Sets account `account`'s limits (and tells running servers, as for keys); `false` if
/// there is no such account.
pub async fn set_limits(
    db: &Database,
    account: &str,
    limits: AccountLimits,
) -> Result<bool, DbError> {
    let change = LimitsChange {
        per_second: Some(limits.per_second),
        daily_quota: Some(limits.daily_quota),
    };
    Ok(change_limits(db, account, change).await?.is_some())
}

/// A change to an account's limits: each `None` is left as it is, each `Some(None)` made
/// unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LimitsChange {
    /// The new request rate, if it changes.
    pub per_second: Option<Option<NonZeroU32>>,
    /// The new daily quota, if it changes.
    pub daily_quota: Option<Option<u64>>,
}

/// Changes account `account`'s limits in one statement (so two changes at once each
/// keep the other's) and tells running servers; the limits now, or `None` if there is no
/// such account.
pub async fn change_limits(
    db: &Database,
    account: &str,
    change: LimitsChange,
) -> Result<Option<AccountLimits>, DbError> {
    let mut tx = db.pool().begin().await?;
    let Some(id) = locked_account(&mut tx, account).await? else {
        return Ok(None);
    };
    let before = limits_in(&mut *tx, id).await?;
    let after = AccountLimits {
        per_second: change.per_second.unwrap_or(before.per_second),
        daily_quota: change.daily_quota.unwrap_or(before.daily_quota),
    };
    // Only a change is told to the servers.
    if after == before {
        tx.commit().await?;
        return Ok(Some(before));
    }
    let quota = |quota: Option<u64>| {
        quota
            .map(i64::try_from)
            .transpose()
            .map_err(|_| DbError::Corrupt("a daily quota is out of range"))
    };
    sqlx::query(
        "INSERT INTO account_limits (account_id, per_second, daily_quota) VALUES ($1, $2, $3) \
         ON CONFLICT (account_id) DO UPDATE SET \
         per_second = CASE WHEN $4 THEN $2 ELSE account_limits.per_second END, \
         daily_quota = CASE WHEN $5 THEN $3 ELSE account_limits.daily_quota END",
    )
    .bind(id)
    .bind(
        change
            .per_second
            .flatten()
            .map(|rate| i64::from(rate.get())),
    )
    .bind(quota(change.daily_quota.flatten())?)
    .bind(change.per_second.is_some())
    .bind(change.daily_quota.is_some())
    .execute(&mut *tx)
    .await?;
    bump_revision(&mut tx).await?;
    tx.commit().await?;
    signal_key_change(db);
    Ok(Some(limits_of(db, id).await?))
}

/// Every key id (for telling an unknown key from a known one without a query per key).
pub async fn key_ids(db: &Database) -> Result<Vec<String>, DbError> {
    Ok(sqlx::query_scalar("SELECT id FROM api_keys")
        .fetch_all(db.pool())
        .await?)
}

/// The current key revision (bumped by every key or grant change).
pub async fn key_revision(db: &Database) -> Result<i64, DbError> {
    let row = sqlx::query("SELECT revision FROM key_revision WHERE id = 1")
        .fetch_one(db.pool())
        .await?;
    Ok(row.try_get(0)?)
}

/// The id of the account named `name`, if it exists.
pub async fn account_id(db: &Database, name: &str) -> Result<Option<i64>, DbError> {
    Ok(
        sqlx::query_scalar("SELECT id FROM accounts WHERE name = $1")
            .bind(name)
            .fetch_optional(db.pool())
            .await?,
    )
}
