//! Compiled surveys kept in PostgreSQL for every server to copy: content-addressed blobs
//! in chunks, and the blob each survey code serves now. Publishing announces itself on
//! [`super::changes::SURVEYS_CHANNEL`] when it commits.

use sqlx::Row;

use super::{Database, DbError};

/// Bytes per stored chunk.
const CHUNK_BYTES: usize = 8 << 20;

/// A survey code and the blob it serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// The `SurveyCode`.
    pub code: String,
    /// The SHA-256 of its compiled file, hex.
    pub sha256: String,
    /// Its size.
    pub bytes: u64,
}

/// Makes `bytes` (hashing to `sha256`) the compiled file of survey `code` for every
/// server, in one transaction (a blob already stored is not stored again).
pub async fn publish(
    db: &Database,
    code: &str,
    sha256: &str,
    bytes: &[u8],
    now: i64,
) -> Result<(), DbError> {
    let size = i64::try_from(bytes.len()).map_err(|_| DbError::Corrupt("a survey too large"))?;
    let mut tx = db.pool().begin().await?;
    // One publication at a time (they are rare): one that finds a blob stored and skips
    // its chunks must not see another delete that blob before it commits.
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('crosstab: publish a survey'))")
        .execute(&mut *tx)
        .await?;
    let stored: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM survey_blobs WHERE sha256 = $1")
        .bind(sha256)
        .fetch_one(&mut *tx)
        .await?;
    if stored == 0 {
        for (seq, chunk) in bytes.chunks(CHUNK_BYTES).enumerate() {
            let seq = i32::try_from(seq).map_err(|_| DbError::Corrupt("too many chunks"))?;
            sqlx::query("INSERT INTO survey_blobs (sha256, seq, chunk) VALUES ($1, $2, $3)")
                .bind(sha256)
                .bind(seq)
                .bind(chunk.to_vec())
                .execute(&mut *tx)
                .await?;
        }
    }
    sqlx::query(
        "INSERT INTO surveys (code, sha256, bytes, published_at) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (code) DO UPDATE SET sha256 = $2, bytes = $3, published_at = $4",
    )
    .bind(code)
    .bind(sha256)
    .bind(size)
    .bind(now)
    .execute(&mut *tx)
    .await?;
    // Blobs no survey serves any more go (a server copying one has it whole or fails and
    // copies the current one next time).
    sqlx::query("DELETE FROM survey_blobs WHERE sha256 NOT IN (SELECT sha256 FROM surveys)")
        .execute(&mut *tx)
        .await?;
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(super::changes::SURVEYS_CHANNEL)
        .bind(code)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

/// Every published survey.
pub async fn list(db: &Database) -> Result<Vec<Published>, DbError> {
    let rows = sqlx::query("SELECT code, sha256, bytes FROM surveys ORDER BY code")
        .fetch_all(db.pool())
        .await?;
    rows.iter()
        .map(|row| {
            let bytes: i64 = row.try_get(2)?;
            Ok(Published {
                code: row.try_get(0)?,
                sha256: row.try_get(1)?,
                bytes: u64::try_from(bytes).map_err(|_| DbError::Corrupt("a negative size"))?,
            })
        })
        .collect()
}

/// The blob `sha256`, whole (`None` if it is no longer stored). Read a chunk per
/// statement, so a large survey is never one statement past the statement timeout, nor
/// held twice over.
pub async fn fetch(db: &Database, sha256: &str) -> Result<Option<Vec<u8>>, DbError> {
    let sizes = sqlx::query(
        "SELECT seq, octet_length(chunk) FROM survey_blobs WHERE sha256 = $1 ORDER BY seq",
    )
    .bind(sha256)
    .fetch_all(db.pool())
    .await?;
    if sizes.is_empty() {
        return Ok(None);
    }
    let mut total = 0usize;
    let mut seqs = Vec::with_capacity(sizes.len());
    for row in &sizes {
        let size: i32 = row.try_get(1)?;
        total += usize::try_from(size).map_err(|_| DbError::Corrupt("a negative chunk size"))?;
        seqs.push(row.try_get::<i32, _>(0)?);
    }
    let mut blob = Vec::with_capacity(total);
    for seq in seqs {
        let chunk: Option<Vec<u8>> =
            sqlx::query_scalar("SELECT chunk FROM survey_blobs WHERE sha256 = $1 AND seq = $2")
                .bind(sha256)
                .bind(seq)
                .fetch_optional(db.pool())
                .await?;
        // Deleted meanwhile (the survey published anew): none of it is the blob.
        let Some(chunk) = chunk else {
            return Ok(None);
        };
        blob.extend_from_slice(&chunk);
    }
    Ok(Some(blob))
}
