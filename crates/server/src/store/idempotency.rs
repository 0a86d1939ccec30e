//! Idempotency keys: the first request an account sends with a key reserves it; its
//! bill's transaction stores the answer with it (see [`super::ledger`]), so a retry of
//! the same body is answered from here, unbilled.

use sqlx::Row;

use super::{Database, DbError};

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

/// Reserves `key` for `account_id`'s request whose body hashes to `body_sha256`, unless
/// it is held: a held key older than `expired_before` (Unix ms) counts as free, and so
/// does an unanswered one older than `abandoned_before` (its request died unanswered).
pub async fn reserve(
    db: &Database,
    account_id: i64,
    key: &str,
    body_sha256: &str,
    now: i64,
    expired_before: i64,
    abandoned_before: i64,
) -> Result<Reservation, DbError> {
    let mut tx = db.pool().begin().await?;
    sqlx::query(
        "DELETE FROM idempotency_keys WHERE account_id = $1 AND key = $2 \
         AND (created_at < $3 OR (status IS NULL AND created_at < $4))",
    )
    .bind(account_id)
    .bind(key)
    .bind(expired_before)
    .bind(abandoned_before)
    .execute(&mut *tx)
    .await?;
    let inserted = sqlx::query(
        "INSERT INTO idempotency_keys (account_id, key, body_sha256, created_at) \
         VALUES ($1, $2, $3, $4) ON CONFLICT (account_id, key) DO NOTHING",
    )
    .bind(account_id)
    .bind(key)
    .bind(body_sha256)
    .bind(now)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    let reservation = if inserted == 1 {
        Reservation::Reserved
    } else {
        let row = sqlx::query(
            "SELECT body_sha256, status, response FROM idempotency_keys \
             WHERE account_id = $1 AND key = $2",
        )
        .bind(account_id)
        .bind(key)
        .fetch_one(&mut *tx)
        .await?;
        let held: String = row.try_get(0)?;
        let status: Option<i64> = row.try_get(1)?;
        if held != body_sha256 {
            Reservation::OtherBody
        } else if let Some(status) = status {
            Reservation::Answered {
                status: u16::try_from(status)
                    .map_err(|_| DbError::Corrupt("a stored status is out of range"))?,
                body: row.try_get(2)?,
            }
        } else {
            Reservation::InProgress
        }
    };
    tx.commit().await?;
    Ok(reservation)
}

/// Gives back a reservation whose request was not billed (so a retry is answered anew).
pub async fn release(db: &Database, account_id: i64, key: &str) -> Result<(), DbError> {
    sqlx::query(
        "DELETE FROM idempotency_keys WHERE account_id = $1 AND key = $2 AND status IS NULL",
    )
    .bind(account_id)
    .bind(key)
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
