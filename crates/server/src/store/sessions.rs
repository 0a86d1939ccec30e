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

/// The user of the session `token` if it is live at `now`.
pub async fn user(db: &Database, token: &str, now: i64) -> Result<Option<User>, DbError> {
    let row = sqlx::query(
        "SELECT u.id, u.username, a.id, a.name FROM sessions s \
         JOIN users u ON u.id = s.user_id JOIN accounts a ON a.id = u.account_id \
         WHERE s.token_hash = $1 AND s.expires_at > $2",
    )
    .bind(token_hash(token))
    .bind(now)
    .fetch_optional(db.pool())
    .await?;
    row.map(|row| {
        Ok::<User, sqlx::Error>(User {
            id: row.try_get(0)?,
            username: row.try_get(1)?,
            account_id: row.try_get(2)?,
            account: row.try_get(3)?,
        })
    })
    .transpose()
    .map_err(DbError::from)
}

/// Ends a session.
pub async fn end(db: &Database, token: &str) -> Result<(), DbError> {
    sqlx::query("DELETE FROM sessions WHERE token_hash = $1")
        .bind(token_hash(token))
        .execute(db.pool())
        .await?;
    Ok(())
}
