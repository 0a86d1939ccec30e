//! Single sign-on: identity providers and the tokens they vouch for.
//!
//! A bearer token on `/v1/crosstab` is a JWT, either from a configured OpenID Connect
//! issuer (checked against that issuer's keys, [`jwks`]) or issued by this server's token
//! endpoint ([`exchange`], signed with its own keys, [`signing`]). Either way it must be
//! signed with an algorithm its key allows, name the expected issuer and audience, hold
//! in time (60 s leeway, by the injected clock) and map to an account; every reason it
//! does not goes to the log, never to the caller. SAML assertions are only ever exchanged
//! at the token endpoint ([`saml`] checks them).

pub mod exchange;
pub mod jwks;
pub mod saml;
pub mod sealing;
pub mod signing;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use jsonwebtoken::Validation;
use serde_json::{Map, Value};

use crate::clock::Clock;
use crate::store::identity_providers::{self, AccountRule, IdentityProvider, IdpKind};
use crate::store::{signing_keys, Database, DbError};
use jwks::{KeySets, VerifyingKey};
use sealing::KeySecret;
use signing::OwnKeys;

/// Clock skew allowed on `exp` and `nbf`, in seconds.
pub const LEEWAY_S: i64 = 60;

/// A JWT's claims.
type Claims = Map<String, Value>;

/// Why a bearer token (or a JWT assertion) was refused: for the log only.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// Not a JWT, or one whose header names no supported algorithm (`none` among them).
    #[error("not a usable JWT: {0}")]
    Malformed(String),
    /// No configured identity provider has this issuer.
    #[error("no identity provider with issuer {0:?}")]
    UnknownIssuer(String),
    /// The issuer has no key of this id (after a fetch, unless one was recent).
    #[error("issuer {issuer:?} has no signing key {kid:?}")]
    UnknownKey {
        /// The token's issuer.
        issuer: String,
        /// The token's key id.
        kid: String,
    },
    /// The signature does not verify, or the header's algorithm is not the key's.
    #[error("signature refused: {0}")]
    Signature(jsonwebtoken::errors::Error),
    /// `aud` does not name the audience of any provider with this issuer.
    #[error("audience {0} not accepted")]
    Audience(String),
    /// Past `exp` (and the leeway).
    #[error("expired at {0}")]
    Expired(i64),
    /// Before `nbf` (less the leeway).
    #[error("not valid before {0}")]
    NotYetValid(i64),
    /// A claim that must be there is missing or not of its type.
    #[error("claim {0:?} missing or malformed")]
    Claim(String),
    /// The token names an account its identity provider may not name.
    #[error(
        "identity provider {idp:?} may not name account {account:?} (`crosstab sso allow-account`)"
    )]
    AccountNotAllowed {
        /// The provider.
        idp: String,
        /// The account the token named.
        account: String,
    },
    /// The token comes from an OAuth client its provider was not told to accept (by
    /// `azp` and `client_id`; `None`: it names none).
    #[error(
        "identity provider {idp:?} does not accept client {client:?} (`sso add-oidc --client`)"
    )]
    ClientNotAllowed {
        /// The provider.
        idp: String,
        /// The client the token names.
        client: Option<String>,
    },
    /// The token lacks the scope its provider requires.
    #[error("identity provider {idp:?} requires scope {scope:?}")]
    ScopeMissing {
        /// The provider.
        idp: String,
        /// The scope required.
        scope: String,
    },
    /// A token of this server names an identity provider that is no longer configured.
    #[error("identity provider {0:?} was removed")]
    RemovedIdp(String),
    /// The store could not be read.
    #[error(transparent)]
    Store(#[from] DbError),
    /// The issuer's keys could not be fetched: the token may be good (a fault to report
    /// and retry, not a refusal).
    #[error("identity provider keys unavailable: {0}")]
    KeysUnavailable(#[from] jwks::FetchError),
}

/// Why single sign-on could not be made ready at start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The store could not be read or written.
    #[error(transparent)]
    Store(#[from] DbError),
    /// A token-signing key could not be opened or sealed.
    #[error(transparent)]
    Seal(#[from] sealing::SealError),
}

/// Opens every stored signing key with `secret` (a sealed one needs it), so a key that
/// cannot be opened stops a server at start, and a rotation, rather than its first token;
/// given a secret, seals those stored unsealed (made before the secret was given), and
/// says how many.
pub async fn seal_stored(db: &Database, secret: Option<&KeySecret>) -> Result<usize, StartError> {
    let stored = signing_keys::all(db).await?;
    for key in &stored {
        sealing::open(secret, &key.kid, &key.private_key)?;
    }
    match secret {
        Some(secret) => seal_unsealed(db, &stored, secret).await,
        None => Ok(0),
    }
}

/// Seals each of `stored` that is stored unsealed: how many this call sealed.
async fn seal_unsealed(
    db: &Database,
    stored: &[signing_keys::StoredKey],
    secret: &KeySecret,
) -> Result<usize, StartError> {
    let mut sealed = 0;
    for key in stored
        .iter()
        .filter(|key| !sealing::is_sealed(&key.private_key))
    {
        let now = sealing::seal(secret, &key.kid, &key.private_key)?;
        // Another server with the same secret may have sealed it first.
        if signing_keys::reseal(db, &key.kid, &key.private_key, &now).await? {
            sealed += 1;
        }
    }
    if sealed > 0 {
        tracing::info!(
            keys = sealed,
            "token-signing keys sealed with the secret given"
        );
    }
    Ok(sealed)
}

/// Who a verified token speaks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The identity provider that vouched (its configured name).
    pub idp: Arc<str>,
    /// The subject (`sub`).
    pub subject: Arc<str>,
    /// The account named for it (not yet checked to exist).
    pub account: String,
    /// When the token expires (`exp`), Unix seconds.
    pub expires_at_s: i64,
    /// Until when (Unix ms) the verification holds without looking again: the issuer's
    /// key set is due then (`None`: this server's own keys, which follow changes).
    pub verified_until_ms: Option<i64>,
}

/// What is configured: identity providers and this server's keys.
#[derive(Debug)]
struct Registry {
    idps: Vec<IdentityProvider>,
    own: OwnKeys,
}

/// The SSO service: verifies bearer tokens, and exchanges assertions for tokens.
#[derive(Debug)]
pub struct Sso {
    db: Database,
    clock: Arc<dyn Clock>,
    /// This server's public URL: its tokens' issuer and the default audience.
    public_url: String,
    keys: Arc<KeySets>,
    /// Loaded on first need after each change.
    registry: RwLock<Option<Arc<Registry>>>,
    generation: AtomicU64,
    /// SAML assertions checked at once (a core each, off the request threads): made-up
    /// assertions cost the server no more than its cores.
    verifying: Arc<tokio::sync::Semaphore>,
    /// What this server's signing keys are sealed with in the database (`None`: they are
    /// stored unsealed).
    secret: Option<KeySecret>,
}

impl Sso {
    /// The service over `db`'s identity providers, for a server reached at `public_url`,
    /// its own signing keys sealed with `secret` (if given).
    pub fn new(
        db: Database,
        clock: Arc<dyn Clock>,
        public_url: &str,
        secret: Option<KeySecret>,
    ) -> Sso {
        Sso {
            secret,
            keys: Arc::new(KeySets::new(Arc::clone(&clock))),
            db,
            clock,
            public_url: public_url.trim_end_matches('/').to_owned(),
            registry: RwLock::new(None),
            generation: AtomicU64::new(0),
            verifying: Arc::new(tokio::sync::Semaphore::new(
                std::thread::available_parallelism().map_or(1, usize::from),
            )),
        }
    }

    /// This server's public URL (its tokens' `iss` and `aud`).
    pub fn public_url(&self) -> &str {
        &self.public_url
    }

    /// The identity providers' key sets (fetch counts for tests).
    pub fn key_sets(&self) -> &KeySets {
        &self.keys
    }

    /// Identity providers or signing keys may have changed: load them again on next need.
    pub fn changed(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        *self.registry.write().unwrap_or_else(|p| p.into_inner()) = None;
    }

    async fn registry(&self) -> Result<Arc<Registry>, DbError> {
        if let Some(registry) = self
            .registry
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        {
            return Ok(registry);
        }
        let generation = self.generation.load(Ordering::SeqCst);
        let idps = identity_providers::list(&self.db).await?;
        let mut stored = signing_keys::all(&self.db).await?;
        if let Some(secret) = &self.secret {
            // A key stored unsealed since start (by a server or a rotation without the
            // secret) is sealed before this server signs with it.
            let sealed =
                seal_unsealed(&self.db, &stored, secret)
                    .await
                    .map_err(|error| match error {
                        StartError::Store(error) => error,
                        StartError::Seal(_) => DbError::Corrupt("a token-signing key not sealable"),
                    })?;
            if sealed > 0 {
                stored = signing_keys::all(&self.db).await?;
            }
        }
        let own = OwnKeys::from_stored(&stored, self.secret.as_ref())?;
        if let Some(error) = own.unopened() {
            tracing::error!(%error, "this server signs no token until it is given that secret");
        }
        let registry = Arc::new(Registry { idps, own });
        if self.generation.load(Ordering::SeqCst) == generation {
            *self.registry.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::clone(&registry));
        }
        Ok(registry)
    }

    /// At start: checks that every stored signing key opens (a sealed one needs this
    /// server's secret) and, given a secret, seals any stored unsealed; makes the first
    /// signing key if the database has none; and fetches every OpenID Connect issuer's
    /// keys (failures are logged; they are fetched again on need).
    pub async fn prepare(&self) -> Result<(), StartError> {
        if seal_stored(&self.db, self.secret.as_ref()).await? > 0 {
            self.changed();
        }
        if self.secret.is_none() {
            tracing::warn!(
                "token-signing keys are stored unsealed: whoever reads the database can \
                 sign tokens for its accounts (give --token-key-secret-file)"
            );
        }
        let registry = self.registry().await?;
        // A provider added before allowed accounts existed names none: said at start.
        for idp in &registry.idps {
            if let AccountRule::Named { by, allowed } = &idp.account {
                if allowed.is_empty() {
                    tracing::warn!(
                        idp = %idp.name,
                        named_by = %by,
                        "identity provider may name no account: its tokens are refused until \
                         `crosstab sso allow-account --name {} ACCOUNT`",
                        idp.name
                    );
                }
            }
        }
        // (A current key this server cannot open stopped it above, in `seal_stored`.)
        if !registry.own.can_sign() && registry.own.unopened().is_none() {
            let key = signing::generate(self.clock.now_ms(), self.secret.as_ref())?;
            if signing_keys::insert_first(&self.db, &key).await? {
                tracing::info!(kid = %key.kid, "token-signing key made");
            }
            self.changed();
        }
        let issuers: std::collections::BTreeSet<String> = registry
            .idps
            .iter()
            .filter(|idp| idp.kind == IdpKind::Oidc)
            .map(|idp| idp.issuer.clone())
            .collect();
        for issuer in issuers {
            if let Err(error) = self.keys.refresh(&issuer).await {
                tracing::warn!(%error, issuer, "identity provider keys not fetched at start");
            }
        }
        Ok(())
    }

    /// The identity a bearer token on `/v1` stands for: a token of this server, or a JWT of
    /// a configured OpenID Connect issuer.
    pub async fn verify_bearer(&self, token: &str) -> Result<Identity, TokenError> {
        let registry = self.registry().await?;
        let (kid, claims) = peek(token)?;
        let issuer = string_claim(&claims, "iss")?;
        if issuer == self.public_url {
            return self.verify_own(&registry, token, &kid);
        }
        self.verify_idp_jwt(&registry, token, &kid, issuer).await
    }

    /// A token of this server: signed by one of its keys, for its public URL, naming a
    /// provider that is still configured.
    fn verify_own(
        &self,
        registry: &Registry,
        token: &str,
        kid: &str,
    ) -> Result<Identity, TokenError> {
        let key = registry
            .own
            .key(kid)
            .ok_or_else(|| TokenError::UnknownKey {
                issuer: self.public_url.clone(),
                kid: kid.to_owned(),
            })?;
        let claims = verified_claims(token, key)?;
        if !names_audience(&claims, &self.public_url) {
            return Err(TokenError::Audience(audience_text(&claims)));
        }
        let expires_at_s = self.check_times(&claims)?;
        // This server issues for an hour at most, from `iat`: a token saying otherwise
        // was not made by it (a signing key taken from a backup would have to say so).
        let issued_at =
            time_claim(&claims, "iat")?.ok_or_else(|| TokenError::Claim("iat".to_owned()))?;
        let now_s = self.clock.now_ms().div_euclid(1000);
        // A retired key signed nothing after its retirement.
        let retired = registry
            .own
            .retired_at(kid)
            .is_some_and(|at_ms| issued_at > at_ms.div_euclid(1000) + LEEWAY_S);
        if expires_at_s - issued_at > crosstab_contract::oauth::MAX_TOKEN_LIFETIME_S
            || issued_at > now_s + LEEWAY_S
            || retired
        {
            return Err(TokenError::Claim("iat".to_owned()));
        }
        let name = string_claim(&claims, "idp")?;
        let idp = registry
            .idps
            .iter()
            .find(|known| known.name == name)
            .ok_or_else(|| TokenError::RemovedIdp(name.to_owned()))?;
        // The account as the provider's rule has it now (a provider denied an account
        // since the exchange, or changed to another, no longer vouches for it).
        let named = string_claim(&claims, "acct")?;
        let account = idp
            .account
            .permits(named)
            .map(str::to_owned)
            .ok_or_else(|| TokenError::AccountNotAllowed {
                idp: idp.name.clone(),
                account: named.to_owned(),
            })?;
        Ok(Identity {
            idp: Arc::from(name),
            subject: Arc::from(subject_claim(&claims)?),
            account,
            expires_at_s,
            verified_until_ms: None,
        })
    }

    /// A JWT of a configured OpenID Connect issuer (an access or ID token, or a jwt-bearer
    /// assertion).
    async fn verify_idp_jwt(
        &self,
        registry: &Registry,
        token: &str,
        kid: &str,
        issuer: &str,
    ) -> Result<Identity, TokenError> {
        let candidates: Vec<&IdentityProvider> = registry
            .idps
            .iter()
            .filter(|idp| idp.kind == IdpKind::Oidc && idp.issuer == issuer)
            .collect();
        if candidates.is_empty() {
            return Err(TokenError::UnknownIssuer(issuer.to_owned()));
        }
        let held = self
            .keys
            .key(issuer, kid)
            .await?
            .ok_or_else(|| TokenError::UnknownKey {
                issuer: issuer.to_owned(),
                kid: kid.to_owned(),
            })?;
        let claims = verified_claims(token, &held.key)?;
        // The first provider of an audience the token names whose clients and scope it
        // meets (a token may name several audiences), those limited to some clients or a
        // scope before the others (whose wider trust must not take their tokens); else
        // why the first refused it.
        let mut candidates = candidates;
        candidates.sort_by_key(|idp| idp.clients.is_empty() && idp.scope.is_none());
        let mut refusal = None;
        let idp = candidates
            .iter()
            .filter(|idp| {
                names_audience(&claims, idp.audience.as_deref().unwrap_or(&self.public_url))
            })
            .find(|idp| match check_client_and_scope(idp, &claims) {
                Ok(()) => true,
                Err(why) => {
                    refusal.get_or_insert(why);
                    false
                }
            })
            .ok_or_else(|| {
                refusal.unwrap_or_else(|| TokenError::Audience(audience_text(&claims)))
            })?;
        let expires_at_s = self.check_times(&claims)?;
        let account = account_of(idp, |claim| string_claim(&claims, claim))?;
        Ok(Identity {
            idp: Arc::from(idp.name.as_str()),
            subject: Arc::from(subject_claim(&claims)?),
            account,
            expires_at_s,
            verified_until_ms: Some(held.due_at_ms),
        })
    }

    /// `exp` (required) and `nbf` (when present) against the clock, with the leeway; `exp`.
    fn check_times(&self, claims: &Claims) -> Result<i64, TokenError> {
        let now_s = self.clock.now_ms().div_euclid(1000);
        let exp = time_claim(claims, "exp")?.ok_or_else(|| TokenError::Claim("exp".to_owned()))?;
        if now_s > exp + LEEWAY_S {
            return Err(TokenError::Expired(exp));
        }
        if let Some(nbf) = time_claim(claims, "nbf")? {
            if now_s + LEEWAY_S < nbf {
                return Err(TokenError::NotYetValid(nbf));
            }
        }
        Ok(exp)
    }
}

/// The account of a token of `idp`: its fixed one, or the one its claim or attribute
/// (read by `named`) names, when `idp` may name it.
fn account_of<'a, E: From<TokenError>>(
    idp: &IdentityProvider,
    named: impl FnOnce(&str) -> Result<&'a str, E>,
) -> Result<String, E> {
    match &idp.account {
        AccountRule::Fixed(account) => Ok(account.clone()),
        rule @ AccountRule::Named { by, .. } => {
            let account = named(by)?;
            rule.permits(account).map(str::to_owned).ok_or_else(|| {
                E::from(TokenError::AccountNotAllowed {
                    idp: idp.name.clone(),
                    account: account.to_owned(),
                })
            })
        }
    }
}

/// Whether a token of `idp` with `claims` comes from a client it accepts (every client
/// the token names, by `azp` and `client_id`, is one of them) and holds the scope it
/// requires (in `scope`, space-separated as RFC 9068 has it, or `scp`, a list or a
/// string, as some providers write it).
fn check_client_and_scope(idp: &IdentityProvider, claims: &Claims) -> Result<(), TokenError> {
    if !idp.clients.is_empty() {
        let named: Vec<Option<&str>> = ["azp", "client_id"]
            .iter()
            .filter_map(|claim| claims.get(*claim))
            .map(Value::as_str)
            .collect();
        let accepted = !named.is_empty()
            && named
                .iter()
                .all(|client| client.is_some_and(|c| idp.clients.iter().any(|a| a == c)));
        if !accepted {
            return Err(TokenError::ClientNotAllowed {
                idp: idp.name.clone(),
                client: named.into_iter().flatten().next().map(str::to_owned),
            });
        }
    }
    if let Some(scope) = &idp.scope {
        let holds = |value: &Value| match value {
            Value::String(scopes) => scopes.split(' ').any(|s| s == scope),
            Value::Array(scopes) => scopes.iter().any(|s| s.as_str() == Some(scope)),
            _ => false,
        };
        if !["scope", "scp"]
            .iter()
            .any(|claim| claims.get(*claim).is_some_and(holds))
        {
            return Err(TokenError::ScopeMissing {
                idp: idp.name.clone(),
                scope: scope.clone(),
            });
        }
    }
    Ok(())
}

/// The key id and the (unverified) claims of `token`, to know whose key to check it with.
/// A header naming `none` or any algorithm jsonwebtoken lacks fails here.
fn peek(token: &str) -> Result<(String, Claims), TokenError> {
    let header =
        jsonwebtoken::decode_header(token).map_err(|e| TokenError::Malformed(e.to_string()))?;
    let kid = header
        .kid
        .ok_or_else(|| TokenError::Malformed("no key id (kid) in the header".to_owned()))?;
    let payload = token
        .split('.')
        .nth(1)
        .ok_or_else(|| TokenError::Malformed("no payload".to_owned()))?;
    let bytes = URL_SAFE_NO_PAD
        .decode(payload)
        .map_err(|e| TokenError::Malformed(e.to_string()))?;
    let claims =
        serde_json::from_slice(&bytes).map_err(|e| TokenError::Malformed(e.to_string()))?;
    Ok((kid, claims))
}

/// `token`'s claims if its signature verifies with `key` under the key's own algorithm
/// (the header must name that algorithm). Times and audience are checked by the caller.
fn verified_claims(token: &str, key: &VerifyingKey) -> Result<Claims, TokenError> {
    let mut validation = Validation::new(key.algorithm);
    validation.validate_exp = false;
    validation.validate_nbf = false;
    validation.validate_aud = false;
    validation.required_spec_claims.clear();
    jsonwebtoken::decode::<Claims>(token, &key.key, &validation)
        .map(|data| data.claims)
        .map_err(TokenError::Signature)
}

/// The largest subject kept (it is recorded with every bill).
pub const MAX_SUBJECT_LEN: usize = 255;

/// Whether `subject` can be recorded with a bill: not empty, at most
/// [`MAX_SUBJECT_LEN`] bytes, no control character (PostgreSQL refuses NUL in text, which
/// would fail the whole batch of bills it was written with).
pub fn recordable_subject(subject: &str) -> bool {
    !subject.is_empty()
        && subject.len() <= MAX_SUBJECT_LEN
        && !subject.chars().any(char::is_control)
}

/// `sub`, when [`recordable_subject`].
fn subject_claim(claims: &Claims) -> Result<&str, TokenError> {
    string_claim(claims, "sub")
        .ok()
        .filter(|subject| recordable_subject(subject))
        .ok_or_else(|| TokenError::Claim("sub".to_owned()))
}

fn string_claim<'a>(claims: &'a Claims, name: &str) -> Result<&'a str, TokenError> {
    claims
        .get(name)
        .and_then(Value::as_str)
        .filter(|value| !value.is_empty())
        .ok_or_else(|| TokenError::Claim(name.to_owned()))
}

/// A NumericDate claim, in whole seconds.
fn time_claim(claims: &Claims, name: &str) -> Result<Option<i64>, TokenError> {
    match claims.get(name) {
        None => Ok(None),
        Some(value) => value
            .as_i64()
            .or_else(|| {
                value
                    .as_f64()
                    .filter(|f| f.is_finite())
                    .map(|f| f.floor() as i64)
            })
            .map(Some)
            .ok_or_else(|| TokenError::Claim(name.to_owned())),
    }
}

/// Whether `aud` (a string or an array of them) names `audience`.
fn names_audience(claims: &Claims, audience: &str) -> bool {
    let audience = audience.trim_end_matches('/');
    let matches = |value: &Value| {
        value
            .as_str()
            .is_some_and(|a| a.trim_end_matches('/') == audience)
    };
    match claims.get("aud") {
        Some(Value::Array(values)) => values.iter().any(matches),
        Some(value) => matches(value),
        None => false,
    }
}

fn audience_text(claims: &Claims) -> String {
    claims
        .get("aud")
        .map(Value::to_string)
        .unwrap_or_else(|| "(none)".to_owned())
}
