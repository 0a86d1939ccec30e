//! The identity providers an operator trusts (`crosstab sso ...`). Adding or removing one
//! bumps the key revision and signals running servers, as a key change does.

use sqlx::Row;

use super::accounts::{bump_revision, signal_key_change};
use super::{Database, DbError};

/// The protocol an identity provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdpKind {
    /// OpenID Connect / OAuth 2.0: signed JWTs, keys from the issuer's discovery document.
    Oidc,
    /// SAML 2.0: signed assertions, the certificate from the IdP's metadata.
    Saml,
}

impl IdpKind {
    /// The stored (and shown) name.
    pub fn as_str(self) -> &'static str {
        match self {
            IdpKind::Oidc => "oidc",
            IdpKind::Saml => "saml",
        }
    }

    fn from_name(name: &str) -> Option<IdpKind> {
        match name {
            "oidc" => Some(IdpKind::Oidc),
            "saml" => Some(IdpKind::Saml),
            _ => None,
        }
    }
}

/// Which account a provider's tokens are billed to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccountRule {
    /// Always this account.
    Fixed(String),
    /// The account named by this claim (OIDC) or attribute (SAML) of the token.
    Named(String),
}

/// A trusted identity provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityProvider {
    /// The operator's name for it (recorded with every bill it vouched for).
    pub name: String,
    /// Its protocol.
    pub kind: IdpKind,
    /// The OIDC issuer URL, or the SAML entity id.
    pub issuer: String,
    /// The audience its tokens must name (`None`: the server's public URL).
    pub audience: Option<String>,
    /// Which account its tokens are billed to.
    pub account: AccountRule,
    /// The SAML metadata (SAML only).
    pub metadata: Option<String>,
    /// When it was added, Unix ms.
    pub created_at: i64,
}

/// Adds `idp`; `false` if one of that name (or of the same issuer and audience) exists.
pub async fn add(db: &Database, idp: &IdentityProvider) -> Result<bool, DbError> {
    let (account, claim) = match &idp.account {
        AccountRule::Fixed(account) => (Some(account.as_str()), None),
        AccountRule::Named(claim) => (None, Some(claim.as_str())),
    };
    let mut tx = db.pool().begin().await?;
    let taken: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM identity_providers WHERE name = $1 \
         OR (kind = $2 AND issuer = $3 AND audience IS NOT DISTINCT FROM $4)",
    )
    .bind(&idp.name)
    .bind(idp.kind.as_str())
    .bind(&idp.issuer)
    .bind(idp.audience.as_deref())
    .fetch_one(&mut *tx)
    .await?;
    if taken > 0 {
        return Ok(false);
    }
    sqlx::query(
        "INSERT INTO identity_providers \
         (name, kind, issuer, audience, account, account_claim, metadata, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(&idp.name)
    .bind(idp.kind.as_str())
    .bind(&idp.issuer)
    .bind(idp.audience.as_deref())
    .bind(account)
    .bind(claim)
    .bind(idp.metadata.as_deref())
    .bind(idp.created_at)
    .execute(&mut *tx)
    .await?;
    bump_revision(&mut tx).await?;
    tx.commit().await?;
    signal_key_change(db);
    Ok(true)
}

/// Removes the provider `name`; `false` if there is none.
pub async fn remove(db: &Database, name: &str) -> Result<bool, DbError> {
    let mut tx = db.pool().begin().await?;
    let removed = sqlx::query("DELETE FROM identity_providers WHERE name = $1")
        .bind(name)
        .execute(&mut *tx)
        .await?
        .rows_affected()
        > 0;
    if removed {
        bump_revision(&mut tx).await?;
    }
    tx.commit().await?;
    if removed {
        signal_key_change(db);
    }
    Ok(removed)
}

/// Every provider, by name.
pub async fn list(db: &Database) -> Result<Vec<IdentityProvider>, DbError> {
    let rows = sqlx::query(
        "SELECT name, kind, issuer, audience, account, account_claim, metadata, created_at \
         FROM identity_providers ORDER BY name",
    )
    .fetch_all(db.pool())
    .await?;
    rows.iter()
        .map(|row| {
            let kind: String = row.try_get(1)?;
            let account: Option<String> = row.try_get(4)?;
            let claim: Option<String> = row.try_get(5)?;
            let account = match (account, claim) {
                (Some(account), None) => AccountRule::Fixed(account),
                (None, Some(claim)) => AccountRule::Named(claim),
                _ => return Err(DbError::Corrupt("an identity provider's account rule")),
            };
            Ok(IdentityProvider {
                name: row.try_get(0)?,
                kind: IdpKind::from_name(&kind)
                    .ok_or(DbError::Corrupt("an identity provider's kind"))?,
                issuer: row.try_get(2)?,
                audience: row.try_get(3)?,
                account,
                metadata: row.try_get(6)?,
                created_at: row.try_get(7)?,
            })
        })
        .collect()
}
