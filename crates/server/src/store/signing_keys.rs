//! The keys this server signs its own access tokens with (the token endpoint's answers).
//! The newest unretired key signs; retired keys keep verifying the tokens they signed.
//! The key material is made by the service; this module only keeps it.

use sqlx::Row;

use super::accounts::{bump_revision, signal_key_change};
use super::{Database, DbError};

/// A stored signing key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredKey {
    /// Its id (the `kid` of the tokens it signs).
    pub kid: String,
    /// The private key, PKCS#8 DER, base64; or that sealed (`service::sso::sealing`).
    pub private_key: String,
    /// The public key, base64url (an Ed25519 `x`).
    pub public_key: String,
    /// Made, Unix ms.
    pub created_at: i64,
    /// Retired (no longer signing), Unix ms.
    pub retired_at: Option<i64>,
}

/// Every key, newest first.
pub async fn all(db: &Database) -> Result<Vec<StoredKey>, DbError> {
    let rows = sqlx::query(
        "SELECT kid, private_key, public_key, created_at, retired_at FROM signing_keys \
         ORDER BY created_at DESC, kid",
    )
    .fetch_all(db.pool())
    .await?;
    rows.iter()
        .map(|row| {
            Ok(StoredKey {
                kid: row.try_get(0)?,
                private_key: row.try_get(1)?,
                public_key: row.try_get(2)?,
                created_at: row.try_get(3)?,
                retired_at: row.try_get(4)?,
            })
        })
        .collect()
}

/// Stores `key` as the signing key unless an unretired key exists (`false` then): the
/// first start of a server makes one; servers starting together keep the first.
pub async fn insert_first(db: &Database, key: &StoredKey) -> Result<bool, DbError> {
    let mut tx = db.pool().begin().await?;
    // A write first: SQLite's write lock, PostgreSQL's row lock, held to the commit.
    bump_revision(&mut tx).await?;
    let current: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM signing_keys WHERE retired_at IS NULL")
            .fetch_one(&mut *tx)
            .await?;
    if current > 0 {
        return Ok(false);
    }
    insert(&mut tx, key).await?;
    tx.commit().await?;
    signal_key_change(db);
    Ok(true)
}

/// Retires every signing key and makes `key` the one that signs (`crosstab sso rotate-key`).
pub async fn rotate(db: &Database, key: &StoredKey) -> Result<(), DbError> {
    let mut tx = db.pool().begin().await?;
    sqlx::query("UPDATE signing_keys SET retired_at = $1 WHERE retired_at IS NULL")
        .bind(key.created_at)
        .execute(&mut *tx)
        .await?;
    insert(&mut tx, key).await?;
    bump_revision(&mut tx).await?;
    tx.commit().await?;
    signal_key_change(db);
    Ok(())
}

/// Replaces key `kid`'s stored private key `from` by `to` (the same key sealed): `false`
/// if it is no longer `from` (sealed meanwhile by another server, or gone).
pub async fn reseal(db: &Database, kid: &str, from: &str, to: &str) -> Result<bool, DbError> {
    let changed =
        sqlx::query("UPDATE signing_keys SET private_key = $3 WHERE kid = $1 AND private_key = $2")
            .bind(kid)
            .bind(from)
            .bind(to)
            .execute(db.pool())
            .await?
            .rows_affected();
    Ok(changed > 0)
}

/// Forgets keys retired before `before` (Unix ms): every token they signed has expired.
pub async fn purge(db: &Database, before: i64) -> Result<u64, DbError> {
    Ok(
        sqlx::query("DELETE FROM signing_keys WHERE retired_at IS NOT NULL AND retired_at < $1")
            .bind(before)
            .execute(db.pool())
            .await?
            .rows_affected(),
    )
}

async fn insert(conn: &mut sqlx::AnyConnection, key: &StoredKey) -> Result<(), DbError> {
    sqlx::query(
        "INSERT INTO signing_keys (kid, private_key, public_key, created_at, retired_at) \
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(&key.kid)
    .bind(&key.private_key)
    .bind(&key.public_key)
    .bind(key.created_at)
    .bind(key.retired_at)
    .execute(&mut *conn)
    .await?;
    Ok(())
}
