//! People who sign in to the app: argon2-hashed passwords, and failed sign-ins that are
//! slowed down and then locked for a while.

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use rand::RngCore;
use sqlx::Row;

use crate::accounts;
use crate::db::{now_ms, Database, DbError};

/// Consecutive failed sign-ins that lock a user.
pub const MAX_FAILED_LOGINS: i64 = 5;
/// How long a lock lasts.
pub const LOCK_MS: i64 = 15 * 60 * 1000;
/// Extra delay per earlier failure, so guessing gets slower before the lock.
pub const DELAY_PER_FAILURE_MS: u64 = 300;

/// A signed-in user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// Row id.
    pub id: i64,
    /// Sign-in name.
    pub username: String,
    /// The account's id.
    pub account_id: i64,
    /// The account's name.
    pub account: String,
}

/// How a sign-in went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignIn {
    /// Right password.
    Accepted(User),
    /// Unknown user or wrong password (indistinguishable to the caller).
    Rejected {
        /// Failures so far, for the slow-down (0 for unknown users).
        failures: i64,
    },
    /// Locked after too many failures.
    Locked {
        /// Seconds until the lock ends.
        retry_after_s: i64,
    },
}

/// Why a password could not be hashed.
#[derive(Debug, thiserror::Error)]
pub enum UserError {
    /// The database.
    #[error(transparent)]
    Db(#[from] DbError),
    /// Hashing.
    #[error("password hashing failed: {0}")]
    Hash(String),
    /// A rule about usernames or passwords.
    #[error("{0}")]
    Invalid(String),
}

fn hash_password(password: &str) -> Result<String, UserError> {
    let mut salt = [0u8; 16];
    rand::rngs::OsRng.fill_bytes(&mut salt);
    let salt = SaltString::encode_b64(&salt).map_err(|e| UserError::Hash(e.to_string()))?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|hash| hash.to_string())
        .map_err(|e| UserError::Hash(e.to_string()))
}

fn verify_password(password: &str, stored: &str) -> bool {
    PasswordHash::new(stored)
        .map(|hash| {
            Argon2::default()
                .verify_password(password.as_bytes(), &hash)
                .is_ok()
        })
        .unwrap_or(false)
}

/// Runs argon2 work on the blocking pool, at most one per core at a time: each one holds
/// ~19 MiB and a core for tens of ms, so a flood of sign-ins (unknown names cost a decoy
/// verification too) waits its turn instead of taking the memory and the blocking
/// threads the rest of the server needs. `None` if the work could not run.
async fn argon2<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    static PERMITS: std::sync::OnceLock<tokio::sync::Semaphore> = std::sync::OnceLock::new();
    let permits = PERMITS.get_or_init(|| {
        tokio::sync::Semaphore::new(std::thread::available_parallelism().map_or(1, |n| n.get()))
    });
    let _permit = permits.acquire().await.ok()?;
    tokio::task::spawn_blocking(work).await.ok()
}

/// Creates user `username` in `account` (creating the account if needed), or resets the
/// password of an existing one (signing it out everywhere). Hashing runs off the async
/// workers.
pub async fn create_or_reset(
    db: &Database,
    username: &str,
    account: &str,
    password: &str,
) -> Result<(), UserError> {
    if username.is_empty() || username.len() > 64 || username.chars().any(char::is_control) {
        return Err(UserError::Invalid(
            "a username is 1 to 64 printable characters".into(),
        ));
    }
    if password.chars().count() < 8 {
        return Err(UserError::Invalid(
            "a password has at least 8 characters".into(),
        ));
    }
    let owned = password.to_owned();
    let hash = argon2(move || hash_password(&owned))
        .await
        .ok_or_else(|| UserError::Hash("the hashing task failed".into()))??;
    let now = now_ms();
    let mut tx = db.pool().begin().await.map_err(DbError::from)?;
    let account_id = accounts::ensure_account(&mut tx, account, now).await?;
    sqlx::query(
        "INSERT INTO users (username, account_id, password_hash, created_at) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (username) DO UPDATE SET account_id = $2, password_hash = $3, failed_logins = 0, locked_until = NULL",
    )
    .bind(username)
    .bind(account_id)
    .bind(&hash)
    .bind(now)
    .execute(&mut *tx)
    .await
    .map_err(DbError::from)?;
    // A new password ends every session made with the old one.
    sqlx::query("DELETE FROM sessions WHERE user_id = (SELECT id FROM users WHERE username = $1)")
        .bind(username)
        .execute(&mut *tx)
        .await
        .map_err(DbError::from)?;
    tx.commit().await.map_err(DbError::from)?;
    Ok(())
}

/// A random password for the demo user: 18 random bytes, base64url.
pub fn random_password() -> String {
    use base64::Engine as _;
    let mut bytes = [0u8; 18];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// A hash to verify against when the user does not exist, so both cases cost the same.
fn decoy_hash() -> &'static str {
    static DECOY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DECOY.get_or_init(|| hash_password("decoy password, never matches").unwrap_or_default())
}

/// Checks a sign-in, counting failures and locking after too many.
pub async fn sign_in(db: &Database, username: &str, password: &str) -> Result<SignIn, UserError> {
    let row = sqlx::query(
        "SELECT u.id, u.password_hash, u.failed_logins, u.locked_until, a.id, a.name \
         FROM users u JOIN accounts a ON a.id = u.account_id WHERE u.username = $1",
    )
    .bind(username)
    .fetch_optional(db.pool())
    .await
    .map_err(DbError::from)?;
    let now = now_ms();
    let Some(row) = row else {
        let owned = password.to_owned();
        let _ = argon2(move || verify_password(&owned, decoy_hash())).await;
        return Ok(SignIn::Rejected { failures: 0 });
    };
    let get = |e: sqlx::Error| UserError::Db(DbError::from(e));
    let id: i64 = row.try_get(0).map_err(get)?;
    let stored: String = row.try_get(1).map_err(get)?;
    let locked_until: Option<i64> = row.try_get(3).map_err(get)?;
    if let Some(until) = locked_until.filter(|until| *until > now) {
        return Ok(SignIn::Locked {
            retry_after_s: (until - now + 999) / 1000,
        });
    }
    // The attempt is counted before the (slow) password check, in one statement: parallel
    // guesses each take their own place and none past the limit is checked at all.
    let attempt: Option<i64> = sqlx::query_scalar(
        "UPDATE users SET failed_logins = failed_logins + 1 \
         WHERE id = $1 AND failed_logins < $2 AND (locked_until IS NULL OR locked_until <= $3) \
         RETURNING failed_logins",
    )
    .bind(id)
    .bind(MAX_FAILED_LOGINS)
    .bind(now)
    .fetch_optional(db.pool())
    .await
    .map_err(DbError::from)?;
    let Some(attempt) = attempt else {
        // The limit's attempts are taken (the last may still be checking), or a lock was
        // just set.
        return Ok(SignIn::Locked {
            retry_after_s: LOCK_MS / 1000,
        });
    };
    let owned = password.to_owned();
    let matches = argon2(move || verify_password(&owned, &stored))
        .await
        .unwrap_or(false);
    if matches {
        sqlx::query("UPDATE users SET failed_logins = 0, locked_until = NULL WHERE id = $1")
            .bind(id)
            .execute(db.pool())
            .await
            .map_err(DbError::from)?;
        return Ok(SignIn::Accepted(User {
            id,
            username: username.to_owned(),
            account_id: row.try_get(4).map_err(get)?,
            account: row.try_get(5).map_err(get)?,
        }));
    }
    if attempt < MAX_FAILED_LOGINS {
        return Ok(SignIn::Rejected { failures: attempt });
    }
    sqlx::query("UPDATE users SET failed_logins = 0, locked_until = $1 WHERE id = $2")
        .bind(now + LOCK_MS)
        .bind(id)
        .execute(db.pool())
        .await
        .map_err(DbError::from)?;
    Ok(SignIn::Locked {
        retry_after_s: LOCK_MS / 1000,
    })
}

#[cfg(test)]
mod argon2_limit_tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn at_most_one_argon2_job_per_core_runs_at_once() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let (running, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let jobs: Vec<_> = (0..cores * 4)
            .map(|job| {
                let (running, most) = (Arc::clone(&running), Arc::clone(&most));
                tokio::spawn(super::argon2(move || {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    running.fetch_sub(1, Ordering::SeqCst);
                    job
                }))
            })
            .collect();
        for (job, handle) in jobs.into_iter().enumerate() {
            assert_eq!(handle.await.ok().flatten(), Some(job));
        }
        let most = most.load(Ordering::SeqCst);
        assert!(
            most >= 1 && most <= cores,
            "{most} at once on {cores} cores"
        );
    }
}
