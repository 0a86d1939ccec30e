//! SAML assertion ids already exchanged for a token, kept until the assertion expires, so
//! the same assertion is never exchanged twice (on any server of the database).

use super::{Database, DbError};

/// Records assertion `id` of provider `idp` as used until `expires_at` (Unix ms); `false`
/// if it was used before.
pub async fn first_use(
    db: &Database,
    idp: &str,
    id: &str,
    expires_at: i64,
) -> Result<bool, DbError> {
    let inserted = sqlx::query(
        "INSERT INTO saml_assertions_used (idp, id, expires_at) VALUES ($1, $2, $3) \
         ON CONFLICT (idp, id) DO NOTHING",
    )
    .bind(idp)
    .bind(id)
    .bind(expires_at)
    .execute(db.pool())
    .await?
    .rows_affected();
    Ok(inserted == 1)
}

/// Forgets ids of assertions that expired before `before` (they can't be replayed).
pub async fn purge(db: &Database, before: i64) -> Result<u64, DbError> {
    Ok(
        sqlx::query("DELETE FROM saml_assertions_used WHERE expires_at < $1")
            .bind(before)
            .execute(db.pool())
            .await?
            .rows_affected(),
    )
}
