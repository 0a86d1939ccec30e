//! Server-side sessions of app users: the database holds only the SHA-256 of a
//! session's token, with an expiry.

use sha2::{Digest, Sha256};
use sqlx::Row;

use super::users::User;
use super::{Database, DbError};
use crate::keys::to_hex;

fn token_hash(token: &str) -> String {
    to_hex(&Sha256::digest(token.as_bytes()))
}

/// Stores a session for `user` under `token`, from `now` to `expires_at`.
pub async fn start(
    db: &Database,
    user: &User,
    token: &str,
    now: i64,
    expires_at: i64,
) -> Result<(), DbError> {
    // Expired sessions are swept whenever a new one starts.
    sqlx::query("DELETE FROM sessions WHERE expires_at <= $1")
        .bind(now)
        .execute(db.pool())
        .await?;
    sqlx::query("INSERT INTO sessions (token_hash, user_id, created_at, expires_at) VALUES ($1, $2, $3, $4)")
        .bind(token_hash(token))
        .bind(user.id)
        .bind(now)
        .bind(expires_at)
        .execute(db.pool())
        .await?;
    Ok(())
}

/// What a session token names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// A live session, of this user.
    Live(User),
    /// A session that has expired.
    Ended,
    /// No session (never, or ended and gone).
    Unknown,
}

/// What `token` names at `now`.
pub async fn lookup(db: &Database, token: &str, now: i64) -> Result<Lookup, DbError> {
    let row = sqlx::query(
        "SELECT u.id, u.username, a.id, a.name, s.expires_at FROM sessions s \
         JOIN users u ON u.id = s.user_id JOIN accounts a ON a.id = u.account_id \
         WHERE s.token_hash = $1 AND u.disabled_at IS NULL",
    )
    .bind(token_hash(token))
    .fetch_optional(db.pool())
    .await?;
    let Some(row) = row else {
        return Ok(Lookup::Unknown);
    };
    let expires_at: i64 = row.try_get(4)?;
    if expires_at <= now {
        return Ok(Lookup::Ended);
    }
    Ok(Lookup::Live(User {
        id: row.try_get(0)?,
        username: row.try_get(1)?,
        account_id: row.try_get(2)?,
        account: row.try_get(3)?,
    }))
}

/// Ends a session: whether there was one.
pub async fn end(db: &Database, token: &str) -> Result<bool, DbError> {
    let ended = sqlx::query("DELETE FROM sessions WHERE token_hash = $1")
        .bind(token_hash(token))
        .execute(db.pool())
        .await?
        .rows_affected();
    Ok(ended > 0)
}
