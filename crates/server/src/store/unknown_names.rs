//! Failed sign-ins for names that have no user, by the name's SHA-256: the same count and
//! lock as a user's row holds (`store::users`), in the database every server shares.

use super::{Database, DbError};

/// Takes a place for an attempt on name `key` at `now`: its number, or `None` while the
/// name is locked or its `max` places are taken (as [`super::users::take_attempt`], whose
/// count also starts again after an attempt older than `forget_before`).
pub async fn take_attempt(
    db: &Database,
    key: &str,
    max: i64,
    now: i64,
    forget_before: i64,
) -> Result<Option<i64>, DbError> {
    Ok(sqlx::query_scalar(
        "INSERT INTO unknown_name_attempts (name_key, failures, locked_until, last_at) \
         VALUES ($1, 1, NULL, $3) \
         ON CONFLICT (name_key) DO UPDATE SET last_at = $3, failures = CASE \
           WHEN unknown_name_attempts.last_at < $4 THEN 1 \
           ELSE unknown_name_attempts.failures + 1 END \
         WHERE (unknown_name_attempts.failures < $2 OR unknown_name_attempts.last_at < $4) \
           AND (unknown_name_attempts.locked_until IS NULL \
                OR unknown_name_attempts.locked_until <= $3) \
         RETURNING failures",
    )
    .bind(key)
    .bind(max)
    .bind(now)
    .bind(forget_before)
    .fetch_optional(db.pool())
    .await?)
}

/// Until when (Unix ms) name `key` is locked, if it is.
pub async fn locked_until(db: &Database, key: &str) -> Result<Option<i64>, DbError> {
    Ok(sqlx::query_scalar::<_, Option<i64>>(
        "SELECT locked_until FROM unknown_name_attempts WHERE name_key = $1",
    )
    .bind(key)
    .fetch_optional(db.pool())
    .await?
    .flatten())
}

/// Gives back a place [`take_attempt`] took for name `key`.
pub async fn give_back_attempt(db: &Database, key: &str) -> Result<(), DbError> {
    sqlx::query(
        "UPDATE unknown_name_attempts SET failures = failures - 1 \
         WHERE name_key = $1 AND failures > 0",
    )
    .bind(key)
    .execute(db.pool())
    .await?;
    Ok(())
}

/// Locks name `key` until `until`, its count starting again after.
pub async fn lock(db: &Database, key: &str, until: i64) -> Result<(), DbError> {
    sqlx::query(
        "UPDATE unknown_name_attempts SET failures = 0, locked_until = $1 WHERE name_key = $2",
    )
    .bind(until)
    .bind(key)
    .execute(db.pool())
    .await?;
    Ok(())
}

/// Forgets names last tried before `before` and not locked past it (their counts would
/// start again anyway), then, past `keep` names, the least recently tried unlocked ones:
/// a flood of made-up names costs the database at most that many rows.
pub async fn purge(db: &Database, before: i64, now: i64, keep: i64) -> Result<u64, DbError> {
    let mut forgotten = sqlx::query(
        "DELETE FROM unknown_name_attempts WHERE last_at < $1 \
         AND (locked_until IS NULL OR locked_until < $1)",
    )
    .bind(before)
    .execute(db.pool())
    .await?
    .rows_affected();
    let kept: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM unknown_name_attempts")
        .fetch_one(db.pool())
        .await?;
    if kept > keep {
        forgotten += sqlx::query(
            "DELETE FROM unknown_name_attempts WHERE name_key IN ( \
               SELECT name_key FROM unknown_name_attempts \
               WHERE locked_until IS NULL OR locked_until <= $1 \
               ORDER BY last_at LIMIT $2)",
        )
        .bind(now)
        .bind(kept - keep)
        .execute(db.pool())
        .await?
        .rows_affected();
    }
    Ok(forgotten)
}
