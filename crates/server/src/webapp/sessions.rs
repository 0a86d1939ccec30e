//! Server-side sessions behind an HttpOnly, SameSite=Strict cookie. The cookie holds a
//! random token; the database holds only its SHA-256, with an expiry.

use base64::Engine as _;
use rand::RngCore;
use sha2::{Digest, Sha256};
use sqlx::Row;

use super::users::User;
use crate::db::{now_ms, Database, DbError};
use crate::keys::to_hex;

/// The cookie's name.
pub const COOKIE: &str = "crosstab_session";
/// How long a session lasts.
pub const LIFETIME_MS: i64 = 12 * 60 * 60 * 1000;

fn token_hash(token: &str) -> String {
    to_hex(&Sha256::digest(token.as_bytes()))
}

/// Starts a session for `user`; returns the cookie's token.
pub async fn start(db: &Database, user: &User) -> Result<String, DbError> {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    let token = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let now = now_ms();
    // Expired sessions are swept whenever a new one starts.
    sqlx::query("DELETE FROM sessions WHERE expires_at <= $1")
        .bind(now)
        .execute(db.pool())
        .await?;
    sqlx::query("INSERT INTO sessions (token_hash, user_id, created_at, expires_at) VALUES ($1, $2, $3, $4)")
        .bind(token_hash(&token))
        .bind(user.id)
        .bind(now)
        .bind(now + LIFETIME_MS)
        .execute(db.pool())
        .await?;
    Ok(token)
}

/// The user of a live session.
pub async fn user(db: &Database, token: &str) -> Result<Option<User>, DbError> {
    let row = sqlx::query(
        "SELECT u.id, u.username, a.id, a.name FROM sessions s \
         JOIN users u ON u.id = s.user_id JOIN accounts a ON a.id = u.account_id \
         WHERE s.token_hash = $1 AND s.expires_at > $2",
    )
    .bind(token_hash(token))
    .bind(now_ms())
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

/// The session token in a `Cookie` header, if any.
pub fn token_from_cookies(header: &str) -> Option<&str> {
    header
        .split(';')
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
        .filter(|value| !value.is_empty())
}

/// The `Set-Cookie` value for `token` (empty token: clear the cookie).
pub fn set_cookie(token: &str, secure: bool) -> String {
    let max_age = if token.is_empty() {
        0
    } else {
        LIFETIME_MS / 1000
    };
    let secure = if secure { "; Secure" } else { "" };
    format!("{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}")
}
