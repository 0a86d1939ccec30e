//! App users (argon2 password hashes, failed sign-in counts and locks) in the database.

use sqlx::Row;

use super::accounts::ensure_account;
use super::{Database, DbError};

/// A user, with the account it works in.
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

/// What a sign-in checks a user against.
#[derive(Debug, Clone)]
pub struct Login {
    /// The user.
    pub user: User,
    /// Its argon2 hash (PHC string).
    pub password_hash: String,
}

/// Creates user `username` in `account` (creating the account if needed) with
/// `password_hash`, or sets the hash of an existing one, ending all its sessions.
pub async fn create_or_reset(
    db: &Database,
    username: &str,
    account: &str,
    password_hash: &str,
    now: i64,
) -> Result<(), DbError> {
    let mut tx = db.pool().begin().await?;
    let account_id = ensure_account(&mut tx, account, now).await?;
    sqlx::query(
        "INSERT INTO users (username, account_id, password_hash, created_at) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (username) DO UPDATE SET account_id = $2, password_hash = $3, failed_logins = 0, locked_until = NULL, disabled_at = NULL",
    )
    .bind(username)
    .bind(account_id)
    .bind(password_hash)
    .bind(now)
    .execute(&mut *tx)
    .await?;
    // A new password ends every session made with the old one.
    sqlx::query("DELETE FROM sessions WHERE user_id = (SELECT id FROM users WHERE username = $1)")
        .bind(username)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

/// The name of the account user `username` belongs to, if the user exists.
pub async fn account_of(db: &Database, username: &str) -> Result<Option<String>, DbError> {
    Ok(sqlx::query_scalar(
        "SELECT a.name FROM users u JOIN accounts a ON a.id = u.account_id WHERE u.username = $1",
    )
    .bind(username)
    .fetch_optional(db.pool())
    .await?)
}

/// Disables user `username` at `now`, ending its sessions: `false` if there is no such
/// user. (Kept, not deleted: the ledger's bills name it.)
pub async fn disable(db: &Database, username: &str, now: i64) -> Result<bool, DbError> {
    let mut tx = db.pool().begin().await?;
    // The write first: on SQLite it takes the write lock at once, with no read before it
    // that a commit of another connection could make stale.
    let found: Option<i64> = sqlx::query_scalar(
        "UPDATE users SET disabled_at = COALESCE(disabled_at, $2) WHERE username = $1 RETURNING id",
    )
    .bind(username)
    .bind(now)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(id) = found else {
        return Ok(false);
    };
    sqlx::query("DELETE FROM sessions WHERE user_id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(true)
}

/// The enabled user named `username`, with what a sign-in checks (a disabled one is as
/// no user: it signs in as a name without one would fail).
pub async fn login(db: &Database, username: &str) -> Result<Option<Login>, DbError> {
    let row = sqlx::query(
        "SELECT u.id, u.password_hash, a.id, a.name \
         FROM users u JOIN accounts a ON a.id = u.account_id \
         WHERE u.username = $1 AND u.disabled_at IS NULL",
    )
    .bind(username)
    .fetch_optional(db.pool())
    .await?;
    let Some(row) = row else { return Ok(None) };
    Ok(Some(Login {
        user: User {
            id: row.try_get(0)?,
            username: username.to_owned(),
            account_id: row.try_get(2)?,
            account: row.try_get(3)?,
        },
        password_hash: row.try_get(1)?,
    }))
}

/// Takes the next place in user `id`'s failure count, in one statement so parallel
/// guesses each take their own: its number, or `None` when all `max` are taken or the
/// user is locked at `now`.
pub async fn take_attempt(
    db: &Database,
    id: i64,
    max: i64,
    now: i64,
    forget_before: i64,
) -> Result<Option<i64>, DbError> {
    // A count whose last attempt is older than `forget_before` starts again. One with no
    // time (counted by a build before the times, as during a rolling upgrade) goes on, so
    // replicas of both builds taking turns still reach the lock; but one left full with
    // no time and no lock (that build died checking the last place) starts again, or it
    // would refuse the user for ever.
    Ok(sqlx::query_scalar(
        "UPDATE users SET last_attempt_at = $3, failed_logins = CASE \
           WHEN last_attempt_at < $4 OR (last_attempt_at IS NULL AND failed_logins >= $2) \
           THEN 1 ELSE failed_logins + 1 END \
         WHERE id = $1 \
           AND (failed_logins < $2 OR last_attempt_at < $4 OR last_attempt_at IS NULL) \
           AND (locked_until IS NULL OR locked_until <= $3) \
         RETURNING failed_logins",
    )
    .bind(id)
    .bind(max)
    .bind(now)
    .bind(forget_before)
    .fetch_optional(db.pool())
    .await?)
}

/// Until when (Unix ms) user `id` is locked, if it is.
pub async fn locked_until(db: &Database, id: i64) -> Result<Option<i64>, DbError> {
    Ok(
        sqlx::query_scalar::<_, Option<i64>>("SELECT locked_until FROM users WHERE id = $1")
            .bind(id)
            .fetch_optional(db.pool())
            .await?
            .flatten(),
    )
}

/// Gives back a place [`take_attempt`] took for user `id`.
pub async fn give_back_attempt(db: &Database, id: i64) -> Result<(), DbError> {
    sqlx::query(
        "UPDATE users SET failed_logins = failed_logins - 1 WHERE id = $1 AND failed_logins > 0",
    )
    .bind(id)
    .execute(db.pool())
    .await?;
    Ok(())
}

/// Starts user `id`'s failure count again, locked until `until` if given.
pub async fn reset_attempts(db: &Database, id: i64, until: Option<i64>) -> Result<(), DbError> {
    sqlx::query("UPDATE users SET failed_logins = 0, locked_until = $1 WHERE id = $2")
        .bind(until)
        .bind(id)
        .execute(db.pool())
        .await?;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const DAY: i64 = 86_400_000;

    #[tokio::test]
    async fn a_count_without_a_time_goes_on_and_an_old_one_starts_again() {
        let (_dir, db) = crate::store::scratch().await;
        create_or_reset(&db, "ann", "acme", "hash", 0)
            .await
            .unwrap();
        let id = login(&db, "ann").await.unwrap().unwrap().user.id;
        // A count as a build before the times left it (a rolling upgrade).
        let counted_before = |failures: i64| {
            let db = db.clone();
            async move {
                sqlx::query(
                    "UPDATE users SET failed_logins = $1, last_attempt_at = NULL WHERE id = $2",
                )
                .bind(failures)
                .bind(id)
                .execute(db.pool())
                .await
                .unwrap();
            }
        };
        // The places `take_attempt` gives at `at`, in turn.
        let takes = |at: i64, times: usize| {
            let db = db.clone();
            async move {
                let mut taken = Vec::new();
                for _ in 0..times {
                    taken.push(take_attempt(&db, id, 5, at, at - DAY).await.unwrap());
                }
                taken
            }
        };
        let now = 10 * DAY;
        // Four failures counted before: the fifth place, then none.
        counted_before(4).await;
        assert_eq!(takes(now, 2).await, [Some(5), None]);
        // Full with no time (its build died checking the last place): it starts again.
        counted_before(5).await;
        assert_eq!(takes(now, 2).await, [Some(1), Some(2)]);
        // A day later the count starts again.
        assert_eq!(takes(now + DAY + 1, 2).await, [Some(1), Some(2)]);
    }
}
