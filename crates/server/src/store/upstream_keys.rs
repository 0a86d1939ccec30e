//! The keys the app backend presents to an upstream `/v1` service (`serve --upstream`),
//! one per account, so each account's queries are billed to that account upstream.

use super::accounts::account_id;
use super::{Database, DbError};

/// Sets account `account`'s upstream key; `false` if there is no such account.
pub async fn set(db: &Database, account: &str, api_key: &str, now: i64) -> Result<bool, DbError> {
    let Some(account_id) = account_id(db, account).await? else {
        return Ok(false);
    };
    sqlx::query(
        "INSERT INTO upstream_keys (account_id, api_key, updated_at) VALUES ($1, $2, $3) \
         ON CONFLICT (account_id) DO UPDATE SET api_key = $2, updated_at = $3",
    )
    .bind(account_id)
    .bind(api_key)
    .bind(now)
    .execute(db.pool())
    .await?;
    Ok(true)
}

/// Account `account_id`'s upstream key, if one was set.
pub async fn get(db: &Database, account_id: i64) -> Result<Option<String>, DbError> {
    Ok(
        sqlx::query_scalar("SELECT api_key FROM upstream_keys WHERE account_id = $1")
            .bind(account_id)
            .fetch_optional(db.pool())
            .await?,
    )
}
