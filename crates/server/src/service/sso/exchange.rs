//! The token endpoint's rules (RFC 6749 §4.5 extension grants): a JWT of a configured
//! OpenID Connect issuer (RFC 7523) or a SAML 2.0 assertion of a configured SAML IdP
//! (RFC 7522) is exchanged for an access token of this server, valid at most an hour and
//! never past the assertion's own expiry. Nothing here is billed.

use std::sync::Arc;

use base64::alphabet::URL_SAFE;
use base64::engine::general_purpose::GeneralPurposeConfig;
use base64::engine::{DecodePaddingMode, GeneralPurpose};
use base64::Engine as _;

use super::{account_of, peek, saml, string_claim, Identity, Sso, TokenError};
use crate::store::identity_providers::IdpKind;
use crate::store::{accounts, saml_replay, DbError};

pub use crosstab_contract::oauth::{
    JWT_BEARER, MAX_TOKEN_LIFETIME_S as MAX_LIFETIME_S, SAML2_BEARER,
};
/// The largest SAML assertion taken (decoded).
const MAX_ASSERTION_BYTES: usize = 256 * 1024;

/// base64url with or without padding (RFC 7522 says without; some clients pad).
const BASE64URL: GeneralPurpose = GeneralPurpose::new(
    &URL_SAFE,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Why an exchange was refused (RFC 6749 §5.2).
#[derive(Debug, thiserror::Error)]
pub enum GrantError {
    /// A parameter is missing, repeated or malformed (the description may be shown).
    #[error("invalid_request: {0}")]
    InvalidRequest(String),
    /// Neither of the two grant types.
    #[error("unsupported_grant_type")]
    UnsupportedGrantType,
    /// The assertion was refused; the reason is logged, never shown.
    #[error("invalid_grant: {0}")]
    InvalidGrant(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] DbError),
    /// No key to sign with, or signing failed.
    #[error("token not signed: {0}")]
    Signing(String),
    /// What the assertion needs to be checked could not be had (an identity provider's
    /// keys, its stored metadata): a fault of ours, to retry.
    #[error("assertion not checked: {0}")]
    Unavailable(String),
}

/// An access token issued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issued {
    /// The JWT.
    pub access_token: String,
    /// Seconds until it expires.
    pub expires_in: i64,
}

impl From<TokenError> for GrantError {
    fn from(error: TokenError) -> GrantError {
        match error {
            TokenError::Store(error) => GrantError::Store(error),
            unavailable @ TokenError::KeysUnavailable(_) => {
                GrantError::Unavailable(unavailable.to_string())
            }
            refused => GrantError::InvalidGrant(refused.to_string()),
        }
    }
}

impl Sso {
    /// `work`'s result: XML parsing and signature checks are CPU work, run on the
    /// blocking threads, as many at once as there are cores.
    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, GrantError> {
        let unfinished = |e: String| GrantError::Unavailable(format!("the check did not run: {e}"));
        // The slot goes with the work: a caller that leaves does not stop the check, so
        // it must not give the slot back before the check ends.
        let slot = Arc::clone(&self.verifying)
            .acquire_owned()
            .await
            .map_err(|e| unfinished(e.to_string()))?;
        tokio::task::spawn_blocking(move || {
            let _slot = slot;
            work()
        })
        .await
        .map_err(|e| unfinished(e.to_string()))
    }

    /// Exchanges `assertion` of `grant_type` for an access token of this server.
    pub async fn exchange(&self, grant_type: &str, assertion: &str) -> Result<Issued, GrantError> {
        if ![JWT_BEARER, SAML2_BEARER].contains(&grant_type) {
            return Err(GrantError::UnsupportedGrantType);
        }
        if assertion.is_empty() {
            return Err(GrantError::InvalidRequest(
                "assertion is missing".to_owned(),
            ));
        }
        let identity = match grant_type {
            JWT_BEARER => self.jwt_grant(assertion).await?,
            SAML2_BEARER => self.saml_grant(assertion).await?,
            _ => return Err(GrantError::UnsupportedGrantType),
        };
        self.issue(&identity).await
    }

    /// A JWT of a configured OpenID Connect issuer (never one of this server's own).
    async fn jwt_grant(&self, assertion: &str) -> Result<Identity, GrantError> {
        let registry = self.registry().await?;
        let (kid, claims) = peek(assertion)?;
        let issuer = string_claim(&claims, "iss")?;
        if issuer == self.public_url {
            return Err(GrantError::InvalidGrant(
                "an access token of this server is not an assertion".to_owned(),
            ));
        }
        let identity = self
            .verify_idp_jwt(&registry, assertion, &kid, issuer)
            .await?;
        self.require_account(&identity.account).await?;
        Ok(identity)
    }

    /// Refuses a grant for an account that does not exist (accounts are never made here).
    async fn require_account(&self, account: &str) -> Result<(), GrantError> {
        match accounts::account_id(&self.db, account).await? {
            Some(_) => Ok(()),
            None => Err(GrantError::InvalidGrant(format!(
                "account {account:?} does not exist"
            ))),
        }
    }

    /// A SAML assertion signed by a configured SAML IdP, for the configured audience, not
    /// exchanged before.
    async fn saml_grant(&self, assertion: &str) -> Result<Identity, GrantError> {
        let xml = BASE64URL
            .decode(assertion.trim())
            .map_err(|_| GrantError::InvalidRequest("assertion is not base64url".to_owned()))?;
        if xml.len() > MAX_ASSERTION_BYTES {
            return Err(GrantError::InvalidRequest(
                "assertion is too large".to_owned(),
            ));
        }
        let registry = self.registry().await?;
        let now_ms = self.clock.now_ms();
        let mut refusals = Vec::new();
        let xml: Arc<[u8]> = xml.into();
        let claimed = self
            .blocking({
                let xml = Arc::clone(&xml);
                move || saml::claimed_issuer(&xml)
            })
            .await?;
        // Providers whose stored metadata this server can't use, and whose entity id the
        // assertion claims: it may be theirs, so refusing it would blame the caller for
        // our damage. (Any other assertion is refused as usual.)
        let mut unusable = Vec::new();
        // RFC 7522: the bearer confirmation names this endpoint as its Recipient.
        let token_endpoint = format!("{}/v1/oauth/token", self.public_url.trim_end_matches('/'));
        // Only the providers of the issuer it claims can have signed it (each checks the
        // issuer too): one signature check, however many providers are configured.
        for idp in registry.idps.iter().filter(|idp| {
            idp.kind == IdpKind::Saml && claimed.as_deref() == Some(idp.issuer.as_str())
        }) {
            let stored = match &idp.metadata {
                Some(metadata) => saml::SamlIdp::from_stored(metadata).map_err(|e| e.to_string()),
                None => Err("no stored metadata".to_owned()),
            };
            let known = match stored {
                Ok(known) => known,
                Err(why) => {
                    tracing::warn!(idp = %idp.name, %why, "stored SAML metadata unusable");
                    unusable.push(format!("{}: {why}", idp.name));
                    continue;
                }
            };
            let audience = idp
                .audience
                .clone()
                .unwrap_or_else(|| self.public_url.clone());
            let checked = self
                .blocking({
                    let (xml, recipient) = (Arc::clone(&xml), token_endpoint.clone());
                    move || {
                        saml::verify_assertion(
                            &xml,
                            &known,
                            &audience,
                            &recipient,
                            now_ms.div_euclid(1000),
                        )
                    }
                })
                .await?;
            let verified = match checked {
                Ok(verified) => verified,
                Err(error) => {
                    refusals.push(format!("{}: {error}", idp.name));
                    continue;
                }
            };
            let account = account_of(idp, |attribute| {
                verified
                    .attributes
                    .get(attribute)
                    .and_then(|values| values.first())
                    .map(String::as_str)
                    .ok_or_else(|| {
                        GrantError::InvalidGrant(format!(
                            "{}: no attribute {attribute:?}",
                            idp.name
                        ))
                    })
            })?;
            if !super::recordable_subject(&verified.subject) {
                return Err(GrantError::InvalidGrant(format!(
                    "{}: a subject of over {} bytes or with a control character",
                    idp.name,
                    super::MAX_SUBJECT_LEN
                )));
            }
            // Last, once all else holds: an assertion refused for its account is not
            // used up. Kept by the provider's entity id, which outlives its name here.
            self.require_account(&account).await?;
            let expires_at_ms = verified.not_on_or_after.saturating_mul(1000);
            if !saml_replay::first_use(&self.db, &idp.issuer, &verified.id, expires_at_ms).await? {
                return Err(GrantError::InvalidGrant(format!(
                    "{}: assertion {:?} was exchanged before",
                    idp.name, verified.id
                )));
            }
            return Ok(Identity {
                idp: Arc::from(idp.name.as_str()),
                subject: Arc::from(verified.subject.as_str()),
                account,
                expires_at_s: verified.not_on_or_after,
                verified_until_ms: None,
            });
        }
        if !unusable.is_empty() {
            return Err(GrantError::Unavailable(format!(
                "stored SAML metadata unusable ({}); refused by the others: {}",
                unusable.join("; "),
                refusals.join("; ")
            )));
        }
        if refusals.is_empty() {
            refusals.push(match claimed {
                Some(issuer) => format!("no SAML identity provider has entity id {issuer:?}"),
                None => "the assertion names no issuer".to_owned(),
            });
        }
        Err(GrantError::InvalidGrant(refusals.join("; ")))
    }

    /// This server's token for `identity`: an hour at most, never past its assertion.
    async fn issue(&self, identity: &Identity) -> Result<Issued, GrantError> {
        let now_s = self.clock.now_ms().div_euclid(1000);
        let exp = identity.expires_at_s.min(now_s + MAX_LIFETIME_S);
        let expires_in = exp - now_s;
        if expires_in <= 0 {
            return Err(GrantError::InvalidGrant(
                "the assertion expires now (within the leeway)".to_owned(),
            ));
        }
        let claims = serde_json::json!({
            "iss": self.public_url,
            "aud": self.public_url,
            "sub": &*identity.subject,
            "idp": &*identity.idp,
            "acct": identity.account,
            "iat": now_s,
            "exp": exp,
            "jti": uuid::Uuid::new_v4().to_string(),
        });
        let registry = self.registry().await?;
        let signed = registry
            .own
            .sign(&claims)
            .ok_or_else(|| {
                GrantError::Signing(match registry.own.unopened() {
                    Some(unopened) => unopened.to_string(),
                    None => "no signing key (the server makes one at start)".to_owned(),
                })
            })?
            .map_err(|error| GrantError::Signing(error.to_string()))?;
        Ok(Issued {
            access_token: signed,
            expires_in,
        })
    }
}
