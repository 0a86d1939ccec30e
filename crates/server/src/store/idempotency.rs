//! Idempotency keys: the first request an account sends with a key reserves it; its
//! bill's transaction stores the answer with it (see [`super::ledger`]), so a retry of
//! the same body is answered from here, unbilled.

use sqlx::any::AnyRow;
use sqlx::Row;

use super::{Backend, Database, DbError};

/// What a key stands for when a request arrives with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reservation {
    /// The key is this request's now: answer it, and the bill stores the answer.
    Reserved,
    /// Answered before for the same body: this status and body, unbilled.
    Answered {
        /// The HTTP status that was sent.
        status: u16,
        /// The body that was sent.
        body: Vec<u8>,
    },
    /// Another request with the same key and body is being answered now.
    InProgress,
    /// The key was used with another body.
    OtherBody,
}

/// A request's claim on a key: its account, the key, the SHA-256 of its body, and the
/// random token that names this request's reservation (its owner).
#[derive(Debug, Clone, Copy)]
pub struct Claim<'a> {
    /// The account that sent the key.
    pub account_id: i64,
    /// The `Idempotency-Key`.
    pub key: &'a str,
    /// The SHA-256 of the request body, in hex.
    pub body_sha256: &'a str,
    /// This request's own token: only its bill may answer the key, only it may give it back.
    pub owner: &'a str,
}

/// Reserves `claim.key` for its request, unless it is held: a held key older than
/// `expired_before` (Unix ms) counts as free, and so does an unanswered one older than
/// `abandoned_before` (its request died unanswered).
pub async fn reserve(
    db: &Database,
    claim: Claim<'_>,
    now: i64,
    expired_before: i64,
    abandoned_before: i64,
) -> Result<Reservation, DbError> {
    loop {
        // On SQLite, looked at first without writing: a retry waiting on a request in
        // flight asks many times a second, and each write would take SQLite's one write
        // lock from the ledger's commits. (On PostgreSQL, which locks the row alone, a
        // first try goes straight to the write; a waiting one looks first, by `look`.)
        if db.backend() == Backend::Sqlite {
            if let Some(held) = look(db, claim, expired_before, abandoned_before).await? {
                return Ok(held);
            }
        }
        let mut tx = db.pool().begin().await?;
        sqlx::query(
            "DELETE FROM idempotency_keys WHERE account_id = $1 AND key = $2 \
             AND (created_at < $3 OR (status IS NULL AND created_at < $4))",
        )
        .bind(claim.account_id)
        .bind(claim.key)
        .bind(expired_before)
        .bind(abandoned_before)
        .execute(&mut *tx)
        .await?;
        let inserted = sqlx::query(
            "INSERT INTO idempotency_keys (account_id, key, body_sha256, created_at, owner) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (account_id, key) DO NOTHING",
        )
        .bind(claim.account_id)
        .bind(claim.key)
        .bind(claim.body_sha256)
        .bind(now)
        .bind(claim.owner)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if inserted == 1 {
            tx.commit().await?;
            return Ok(Reservation::Reserved);
        }
        let row = sqlx::query(
            "SELECT body_sha256, status, response FROM idempotency_keys \
             WHERE account_id = $1 AND key = $2",
        )
        .bind(claim.account_id)
        .bind(claim.key)
        .fetch_optional(&mut *tx)
        .await?;
        // Given back between the INSERT and the SELECT (READ COMMITTED sees both): try again.
        let Some(row) = row else {
            tx.rollback().await?;
            continue;
        };
        let reservation = reservation_of(&row, claim.body_sha256)?;
        tx.commit().await?;
        return Ok(reservation);
    }
}

/// What `claim`'s key holds, read without writing: `None` when it is free to reserve
/// (absent, expired, or abandoned: the rule of [`reserve`]'s DELETE, stated again here).
pub async fn look(
    db: &Database,
    claim: Claim<'_>,
    expired_before: i64,
    abandoned_before: i64,
) -> Result<Option<Reservation>, DbError> {
    let row = sqlx::query(
        "SELECT body_sha256, status, response, created_at FROM idempotency_keys \
         WHERE account_id = $1 AND key = $2",
    )
    .bind(claim.account_id)
    .bind(claim.key)
    .fetch_optional(db.pool())
    .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    let created_at: i64 = row.try_get(3)?;
    let status: Option<i64> = row.try_get(1)?;
    let free = created_at < expired_before || (status.is_none() && created_at < abandoned_before);
    if free {
        return Ok(None);
    }
    reservation_of(&row, claim.body_sha256).map(Some)
}

/// What a key held by another request (`row`: its body's SHA-256, status and response)
/// means for a request whose body hashes to `body_sha256`.
fn reservation_of(row: &AnyRow, body_sha256: &str) -> Result<Reservation, DbError> {
    let held: String = row.try_get(0)?;
    let status: Option<i64> = row.try_get(1)?;
    Ok(if held != body_sha256 {
        Reservation::OtherBody
    } else if let Some(status) = status {
        Reservation::Answered {
            status: u16::try_from(status)
                .map_err(|_| DbError::Corrupt("a stored status is out of range"))?,
            body: row.try_get(2)?,
        }
    } else {
        Reservation::InProgress
    })
}

/// Gives back `owner`'s reservation of `key`, if its request was not billed (so a retry
/// is answered anew); a key another request has taken over since is left alone.
pub async fn release(
    db: &Database,
    account_id: i64,
    key: &str,
    owner: &str,
) -> Result<(), DbError> {
    sqlx::query(
        "DELETE FROM idempotency_keys \
         WHERE account_id = $1 AND key = $2 AND owner = $3 AND status IS NULL",
    )
    .bind(account_id)
    .bind(key)
    .bind(owner)
    .execute(db.pool())
    .await?;
    Ok(())
}

/// Forgets keys created before `before` (Unix ms); returns how many.
pub async fn purge(db: &Database, before: i64) -> Result<u64, DbError> {
    Ok(
        sqlx::query("DELETE FROM idempotency_keys WHERE created_at < $1")
            .bind(before)
            .execute(db.pool())
            .await?
            .rows_affected(),
    )
}
