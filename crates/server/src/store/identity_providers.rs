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
    /// The account named by claim (OIDC) or attribute (SAML) `by` of the token, which must
    /// be one of `allowed`: an identity provider vouches for the accounts it was trusted
    /// with, never for another tenant's.
    Named {
        /// The claim or attribute.
        by: String,
        /// The accounts it may name, sorted.
        allowed: Vec<String>,
    },
}

impl AccountRule {
    /// `named`, when a token of this rule may be billed to it: the fixed account, or one
    /// of those the claim or attribute may name.
    pub fn permits<'a>(&'a self, named: &'a str) -> Option<&'a str> {
        match self {
            AccountRule::Fixed(account) => (account == named).then_some(named),
            AccountRule::Named { allowed, .. } => allowed
                .iter()
                .any(|account| account == named)
                .then_some(named),
        }
    }
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
    /// The OAuth clients its tokens must come from, by `azp` or `client_id`, sorted
    /// (OpenID Connect only; empty: any client of the audience).
    pub clients: Vec<String>,
    /// A scope its tokens must hold (OpenID Connect only).
    pub scope: Option<String>,
    /// The SAML metadata (SAML only).
    pub metadata: Option<String>,
    /// When it was added, Unix ms.
    pub created_at: i64,
}

/// Adds `idp`; `false` if one of that name (or of the same issuer and audience) exists.
pub async fn add(db: &Database, idp: &IdentityProvider) -> Result<bool, DbError> {
    let (account, claim) = match &idp.account {
        AccountRule::Fixed(account) => (Some(account.as_str()), None),
        AccountRule::Named { by, .. } => (None, Some(by.as_str())),
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
         (name, kind, issuer, audience, account, account_claim, metadata, created_at, \
          required_scope) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    )
    .bind(&idp.name)
    .bind(idp.kind.as_str())
    .bind(&idp.issuer)
    .bind(idp.audience.as_deref())
    .bind(account)
    .bind(claim)
    .bind(idp.metadata.as_deref())
    .bind(idp.created_at)
    .bind(idp.scope.as_deref())
    .execute(&mut *tx)
    .await?;
    if let AccountRule::Named { allowed, .. } = &idp.account {
        for account in allowed {
            insert_allowed(&mut tx, &idp.name, account).await?;
        }
    }
    for client in &idp.clients {
        sqlx::query(
            "INSERT INTO identity_provider_clients (idp, client) VALUES ($1, $2) \
             ON CONFLICT DO NOTHING",
        )
        .bind(&idp.name)
        .bind(client)
        .execute(&mut *tx)
        .await?;
    }
    bump_revision(&mut tx).await?;
    tx.commit().await?;
    signal_key_change(db);
    Ok(true)
}

/// Removes the provider `name`; `false` if there is none.
pub async fn remove(db: &Database, name: &str) -> Result<bool, DbError> {
    let mut tx = db.pool().begin().await?;
    for table in ["identity_provider_accounts", "identity_provider_clients"] {
        sqlx::query(&format!("DELETE FROM {table} WHERE idp = $1"))
            .bind(name)
            .execute(&mut *tx)
            .await?;
    }
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

async fn insert_allowed(
    conn: &mut sqlx::AnyConnection,
    idp: &str,
    account: &str,
) -> Result<(), DbError> {
    sqlx::query(
        "INSERT INTO identity_provider_accounts (idp, account) VALUES ($1, $2) \
         ON CONFLICT DO NOTHING",
    )
    .bind(idp)
    .bind(account)
    .execute(conn)
    .await?;
    Ok(())
}

/// What [`allow_account`] and [`deny_account`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllowedChange {
    /// Done (or it already was so).
    Changed,
    /// No provider has this name.
    NoSuchProvider,
    /// The provider bills one fixed account: it names none.
    FixedAccount,
}

/// Lets the provider `idp` (whose tokens name their account) name `account`.
pub async fn allow_account(
    db: &Database,
    idp: &str,
    account: &str,
) -> Result<AllowedChange, DbError> {
    change_allowed(db, idp, account, true).await
}

/// Stops the provider `idp` naming `account`: its tokens for it stop on the next request.
pub async fn deny_account(
    db: &Database,
    idp: &str,
    account: &str,
) -> Result<AllowedChange, DbError> {
    change_allowed(db, idp, account, false).await
}

async fn change_allowed(
    db: &Database,
    idp: &str,
    account: &str,
    allow: bool,
) -> Result<AllowedChange, DbError> {
    let mut tx = db.pool().begin().await?;
    let named_by: Option<Option<String>> =
        sqlx::query_scalar("SELECT account_claim FROM identity_providers WHERE name = $1")
            .bind(idp)
            .fetch_optional(&mut *tx)
            .await?;
    match named_by {
        None => return Ok(AllowedChange::NoSuchProvider),
        Some(None) => return Ok(AllowedChange::FixedAccount),
        Some(Some(_)) => {}
    }
    if allow {
        insert_allowed(&mut tx, idp, account).await?;
    } else {
        sqlx::query("DELETE FROM identity_provider_accounts WHERE idp = $1 AND account = $2")
            .bind(idp)
            .bind(account)
            .execute(&mut *tx)
            .await?;
    }
    bump_revision(&mut tx).await?;
    tx.commit().await?;
    signal_key_change(db);
    Ok(AllowedChange::Changed)
}

/// The values of a table of (`idp`, value) pairs, by provider, each list sorted.
async fn by_provider(
    db: &Database,
    table: &str,
    column: &str,
) -> Result<std::collections::HashMap<String, Vec<String>>, DbError> {
    let mut values: std::collections::HashMap<String, Vec<String>> =
        std::collections::HashMap::new();
    let pairs = sqlx::query(&format!(
        "SELECT idp, {column} FROM {table} ORDER BY idp, {column}"
    ))
    .fetch_all(db.pool())
    .await?;
    for pair in &pairs {
        values
            .entry(pair.try_get(0)?)
            .or_default()
            .push(pair.try_get(1)?);
    }
    Ok(values)
}

/// Every provider, by name.
pub async fn list(db: &Database) -> Result<Vec<IdentityProvider>, DbError> {
    let mut allowed = by_provider(db, "identity_provider_accounts", "account").await?;
    let mut clients = by_provider(db, "identity_provider_clients", "client").await?;
    let rows = sqlx::query(
        "SELECT name, kind, issuer, audience, account, account_claim, metadata, created_at, \
                required_scope \
         FROM identity_providers ORDER BY name",
    )
    .fetch_all(db.pool())
    .await?;
    rows.iter()
        .map(|row| {
            let kind: String = row.try_get(1)?;
            let account: Option<String> = row.try_get(4)?;
            let claim: Option<String> = row.try_get(5)?;
            let name: String = row.try_get(0)?;
            let account = match (account, claim) {
                (Some(account), None) => AccountRule::Fixed(account),
                (None, Some(by)) => AccountRule::Named {
                    by,
                    allowed: allowed.remove(&name).unwrap_or_default(),
                },
                _ => return Err(DbError::Corrupt("an identity provider's account rule")),
            };
            let clients = clients.remove(&name).unwrap_or_default();
            Ok(IdentityProvider {
                name,
                kind: IdpKind::from_name(&kind)
                    .ok_or(DbError::Corrupt("an identity provider's kind"))?,
                issuer: row.try_get(2)?,
                audience: row.try_get(3)?,
                account,
                clients,
                scope: row.try_get(8)?,
                metadata: row.try_get(6)?,
                created_at: row.try_get(7)?,
            })
        })
        .collect()
}
