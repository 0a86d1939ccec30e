//! The signing keys of OpenID Connect issuers: found through the issuer's discovery
//! document (`{issuer}/.well-known/openid-configuration` → `jwks_uri`), fetched at start,
//! kept between, and fetched again when a token names a key id not among them, at most
//! once per [`REFETCH_AFTER_MS`] per issuer (a flood of made-up key ids costs one fetch).
//! A set older than [`KEYS_MAX_AGE_MS`] is fetched again beside the first request that
//! needs it (which, and the others meanwhile, use the set held), so a key the issuer
//! withdrew stops verifying within minutes; should that fetch fail, the set held stays.
//!
//! Each key's algorithm is decided by the key itself (RSA → RS256, P-256 → ES256,
//! Ed25519 → EdDSA), never by a token's header: a token claiming another algorithm for
//! the key, `none` or an HMAC, fails its signature check.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};

use crate::clock::Clock;

/// The least time between two fetches of one issuer's keys, in ms.
pub const REFETCH_AFTER_MS: i64 = 10_000;
/// How long a fetched key set is trusted before it is fetched again, in ms.
pub const KEYS_MAX_AGE_MS: i64 = 5 * 60 * 1000;
/// How long a fetch of a discovery document or a key set may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest discovery document or key set read.
const MAX_DOCUMENT_BYTES: usize = 1 << 20;

/// A key that verifies, and the one algorithm it verifies.
#[derive(Debug, Clone)]
pub struct VerifyingKey {
    /// The key.
    pub key: DecodingKey,
    /// Its algorithm.
    pub algorithm: Algorithm,
}

/// Why an issuer's keys could not be fetched (logged; the keys held before stay).
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The request failed or was refused.
    #[error("{url}: {reason}")]
    Http {
        /// What was fetched.
        url: String,
        /// Why it failed.
        reason: String,
    },
    /// The discovery document is not the issuer's, or lacks `jwks_uri`.
    #[error("discovery document of {0}: {1}")]
    Discovery(String, &'static str),
    /// The last fetch, too recent to try again, failed so.
    #[error("the last fetch failed: {0}")]
    Earlier(String),
}

/// A key held, and when the set it is from is to be looked at again (Unix ms): what it
/// verified holds until then.
#[derive(Debug, Clone)]
pub struct Held {
    /// The key.
    pub key: VerifyingKey,
    /// When its set is due to be fetched again.
    pub due_at_ms: i64,
}

/// One issuer's keys by key id, and when they were last fetched.
#[derive(Debug, Default)]
struct IssuerKeys {
    keys: HashMap<String, VerifyingKey>,
    /// The last fetch tried (Unix ms), successful or not.
    tried_at: Option<i64>,
    /// The last fetch that succeeded (Unix ms): when `keys` were had.
    fetched_at: Option<i64>,
    /// Why the last fetch failed, if it did.
    failure: Option<String>,
}

/// Every configured issuer's keys.
#[derive(Debug)]
pub struct KeySets {
    /// The HTTP client (its error, should none be had: every fetch then fails with it).
    client: Result<reqwest::Client, String>,
    clock: Arc<dyn Clock>,
    issuers: RwLock<HashMap<String, IssuerKeys>>,
    /// One fetch at a time per issuer (requests waiting for it then find its keys); a
    /// slow issuer delays no other's.
    fetching: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    fetches: Mutex<u64>,
}

impl KeySets {
    /// No keys yet; fetches over `reqwest` (https with the web's roots, or http), timed by
    /// `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> KeySets {
        let client = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|error| format!("no HTTP client: {error}"));
        if let Err(error) = &client {
            tracing::error!(%error, "identity providers' keys can't be fetched");
        }
        KeySets {
            client,
            clock,
            issuers: RwLock::new(HashMap::new()),
            fetching: Mutex::new(HashMap::new()),
            fetches: Mutex::new(0),
        }
    }

    /// How many fetches of key sets were tried (for tests of the rate limit).
    pub fn fetches(&self) -> u64 {
        *self.fetches.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `issuer`'s fetch lock (issuers are the configured ones: the map stays small).
    fn fetching(&self, issuer: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.fetching.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(locks.entry(issuer.to_owned()).or_default())
    }

    fn cached(&self, issuer: &str, kid: &str) -> Option<Held> {
        let issuers = self.issuers.read().unwrap_or_else(|p| p.into_inner());
        let keys = issuers.get(issuer)?;
        Some(Held {
            key: keys.keys.get(kid)?.clone(),
            due_at_ms: keys
                .fetched_at
                .map_or(i64::MIN, |at| at.saturating_add(KEYS_MAX_AGE_MS)),
        })
    }

    /// Whether `issuer`'s keys were fetched too long ago to be trusted without a look,
    /// and not tried within [`REFETCH_AFTER_MS`].
    fn due(&self, issuer: &str, now: i64) -> bool {
        let issuers = self.issuers.read().unwrap_or_else(|p| p.into_inner());
        issuers.get(issuer).is_some_and(|keys| {
            keys.fetched_at.is_none_or(|at| now - at >= KEYS_MAX_AGE_MS)
                && keys.tried_at.is_none_or(|at| now - at >= REFETCH_AFTER_MS)
        })
    }

    /// `issuer`'s key `kid`: held, or fetched now unless the issuer's keys were fetched
    /// within [`REFETCH_AFTER_MS`]; `None` when the issuer has no such key. When the keys
    /// could not be fetched (now, or by that recent try), the error: the token may well be
    /// good, so it is not to be refused as if it were not.
    pub async fn key(
        self: &Arc<Self>,
        issuer: &str,
        kid: &str,
    ) -> Result<Option<Held>, FetchError> {
        if let Some(key) = self.cached(issuer, kid) {
            if self.due(issuer, self.clock.now_ms()) {
                // Looked at again beside the requests, which use the held set meanwhile
                // (and go on with it should the look fail: logged by `fetch`).
                let keys = Arc::clone(self);
                let issuer = issuer.to_owned();
                tokio::spawn(async move {
                    let fetching = keys.fetching(&issuer);
                    let Ok(_fetching) = fetching.try_lock() else {
                        return;
                    };
                    if keys.due(&issuer, keys.clock.now_ms()) {
                        let _ = keys.fetch(&issuer).await;
                    }
                });
            }
            return Ok(Some(key));
        }
        let fetching = self.fetching(issuer);
        let _fetching = fetching.lock().await;
        // Fetched while this request waited?
        if let Some(key) = self.cached(issuer, kid) {
            return Ok(Some(key));
        }
        let now = self.clock.now_ms();
        let recent = self
            .issuers
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(issuer)
            .filter(|keys| keys.tried_at.is_some_and(|at| now - at < REFETCH_AFTER_MS))
            .map(|keys| keys.failure.clone());
        match recent {
            Some(None) => return Ok(None),
            Some(Some(failure)) => return Err(FetchError::Earlier(failure)),
            None => {}
        }
        self.fetch(issuer).await?;
        Ok(self.cached(issuer, kid))
    }

    /// Fetches `issuer`'s keys now (at start), replacing those held when it succeeds.
    pub async fn refresh(&self, issuer: &str) -> Result<usize, FetchError> {
        let fetching = self.fetching(issuer);
        let _fetching = fetching.lock().await;
        self.fetch(issuer).await
    }

    /// Fetches `issuer`'s keys, noting (and logging) why if it fails.
    async fn fetch(&self, issuer: &str) -> Result<usize, FetchError> {
        let fetched = self.fetch_keys(issuer).await;
        if let Err(error) = &fetched {
            tracing::warn!(%error, issuer, "identity provider keys not fetched");
            self.issuers
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .entry(issuer.to_owned())
                .or_default()
                .failure = Some(error.to_string());
        }
        fetched
    }

    async fn fetch_keys(&self, issuer: &str) -> Result<usize, FetchError> {
        *self.fetches.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        let now = self.clock.now_ms();
        self.issuers
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .entry(issuer.to_owned())
            .or_default()
            .tried_at = Some(now);
        let discovery_url = format!(
            "{}/.well-known/openid-configuration",
            issuer.trim_end_matches('/')
        );
        let discovery = self.get_json(&discovery_url).await?;
        let jwks_uri = key_set_url(issuer, &discovery)?;
        let set = self.get_json(jwks_uri).await?;
        let keys = verifying_keys(&set);
        let count = keys.len();
        tracing::info!(issuer, keys = count, "identity provider keys fetched");
        self.issuers
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                issuer.to_owned(),
                IssuerKeys {
                    keys,
                    tried_at: Some(now),
                    fetched_at: Some(now),
                    failure: None,
                },
            );
        Ok(count)
    }

    async fn get_json(&self, url: &str) -> Result<serde_json::Value, FetchError> {
        let failed = |reason: String| FetchError::Http {
            url: url.to_owned(),
            reason,
        };
        let client = self
            .client
            .as_ref()
            .map_err(|error| failed(error.clone()))?;
        let mut response = client
            .get(url)
            .header("accept", "application/json")
            .send()
            .await
            .map_err(|e| failed(e.to_string()))?;
        if !response.status().is_success() {
            return Err(failed(format!("HTTP {}", response.status())));
        }
        if response
            .content_length()
            .is_some_and(|n| n > MAX_DOCUMENT_BYTES as u64)
        {
            return Err(failed("document too large".to_owned()));
        }
        // Read as it comes, so a document without a length stops at the limit too.
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| failed(e.to_string()))? {
            if bytes.len() + chunk.len() > MAX_DOCUMENT_BYTES {
                return Err(failed("document too large".to_owned()));
            }
            bytes.extend_from_slice(&chunk);
        }
        serde_json::from_slice(&bytes).map_err(|e| failed(e.to_string()))
    }
}

/// Where `issuer`'s discovery document says its keys are. The document must name the
/// issuer it was asked of (OpenID Connect Discovery §4.3), and an https issuer's keys
/// come over https too: a plain http key set could be replaced on the way, and with it
/// every token of the issuer's accounts.
fn key_set_url<'a>(issuer: &str, discovery: &'a serde_json::Value) -> Result<&'a str, FetchError> {
    let refused = |why| FetchError::Discovery(issuer.to_owned(), why);
    if discovery.get("issuer").and_then(|v| v.as_str()) != Some(issuer) {
        return Err(refused("its issuer is not the one configured"));
    }
    let jwks_uri = discovery
        .get("jwks_uri")
        .and_then(|v| v.as_str())
        .ok_or_else(|| refused("no jwks_uri"))?;
    if issuer.starts_with("https://") && !jwks_uri.starts_with("https://") {
        return Err(refused("its jwks_uri is not https"));
    }
    Ok(jwks_uri)
}

/// The signing keys of a JWK set (`{"keys": [...]}`) by key id; keys without an id, for
/// encryption, of an unsupported type, or naming another algorithm than their type's are
/// left out.
pub fn verifying_keys(set: &serde_json::Value) -> HashMap<String, VerifyingKey> {
    let Some(keys) = set.get("keys").and_then(|k| k.as_array()) else {
        return HashMap::new();
    };
    keys.iter()
        .filter_map(|value| serde_json::from_value::<Jwk>(value.clone()).ok())
        .filter_map(|jwk| {
            let kid = jwk.common.key_id.clone()?;
            let key = verifying_key(&jwk)?;
            Some((kid, key))
        })
        .collect()
}

/// The key of `jwk` with the one algorithm its type allows, if it is a signing key.
fn verifying_key(jwk: &Jwk) -> Option<VerifyingKey> {
    if matches!(&jwk.common.public_key_use, Some(usage) if *usage != PublicKeyUse::Signature) {
        return None;
    }
    let algorithm = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => Algorithm::RS256,
        AlgorithmParameters::EllipticCurve(ec) if ec.curve == EllipticCurve::P256 => {
            Algorithm::ES256
        }
        AlgorithmParameters::OctetKeyPair(okp) if okp.curve == EllipticCurve::Ed25519 => {
            Algorithm::EdDSA
        }
        // HMAC secrets, other curves.
        _ => return None,
    };
    let declared = jwk.common.key_algorithm;
    let agrees = match declared {
        None => true,
        Some(KeyAlgorithm::RS256) => algorithm == Algorithm::RS256,
        Some(KeyAlgorithm::ES256) => algorithm == Algorithm::ES256,
        Some(KeyAlgorithm::EdDSA) => algorithm == Algorithm::EdDSA,
        Some(_) => false,
    };
    if !agrees {
        return None;
    }
    let key = DecodingKey::from_jwk(jwk).ok()?;
    Some(VerifyingKey { key, algorithm })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_https_issuers_keys_come_over_https_from_its_own_document() {
        let https = "https://idp.example.com";
        let doc =
            |issuer: &str, jwks: &str| serde_json::json!({"issuer": issuer, "jwks_uri": jwks});
        let keys = doc(https, "https://keys.example.com/jwks");
        assert_eq!(
            key_set_url(https, &keys).unwrap(),
            "https://keys.example.com/jwks"
        );
        let why = |issuer, document| match key_set_url(issuer, &document) {
            Err(FetchError::Discovery(_, why)) => why,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            why(https, doc(https, "http://keys.example.com/jwks")),
            "its jwks_uri is not https"
        );
        assert_eq!(
            why(https, doc("https://other.example.com", "https://k/")),
            "its issuer is not the one configured"
        );
        assert_eq!(
            why(https, serde_json::json!({"issuer": https})),
            "no jwks_uri"
        );
        // An http issuer was the operator's choice (warned of when added).
        let http = "http://127.0.0.1:9000";
        assert!(key_set_url(http, &doc(http, "http://127.0.0.1:9000/jwks")).is_ok());
    }

    #[test]
    fn only_signing_keys_of_the_three_types_are_kept_each_with_its_own_algorithm() {
        let set = serde_json::json!({"keys": [
            {"kty": "RSA", "kid": "rsa", "n": "sXchDaQebHnPiGvyDOAT4saGEUetSyo9MKLOoWFsueri23bOdgWp4Dy1WlUzewbgBHod5pcM9H95GQRV3JDXboIRROSBigeC5yjU1hGzHHyXss8UDprecbAYxknTcQkhslANGRUZmdTOQ5qTRsLAt6BTYuyvVRdhS8exSZEy_c4gs_7svlJJQ4H9_NxsiIoLwAEk7-Q3UXERGYw_75IDrGA84-lA_-Ct4eTlXHBIY2EaV7t7LjJaynVJCpkv4LKjTTAumiGUIuQhrNhZLuF_RJLqHpM2kgWFLU7-VTdL1VbC2tejvcI2BlMkEpk1BzBZI0KQB0GaDWFLN-aEAw3vRw", "e": "AQAB"},
            {"kty": "RSA", "kid": "enc", "use": "enc", "n": "sXchDaQebHnPiGvyDOAT4saGEUetSyo9MKLOoWFsueri23bOdgWp4Dy1WlUzewbgBHod5pcM9H95GQRV3JDXboIRROSBigeC5yjU1hGzHHyXss8UDprecbAYxknTcQkhslANGRUZmdTOQ5qTRsLAt6BTYuyvVRdhS8exSZEy_c4gs_7svlJJQ4H9_NxsiIoLwAEk7-Q3UXERGYw_75IDrGA84-lA_-Ct4eTlXHBIY2EaV7t7LjJaynVJCpkv4LKjTTAumiGUIuQhrNhZLuF_RJLqHpM2kgWFLU7-VTdL1VbC2tejvcI2BlMkEpk1BzBZI0KQB0GaDWFLN-aEAw3vRw", "e": "AQAB"},
            {"kty": "RSA", "kid": "ps", "alg": "PS256", "n": "sXchDaQebHnPiGvyDOAT4saGEUetSyo9MKLOoWFsueri23bOdgWp4Dy1WlUzewbgBHod5pcM9H95GQRV3JDXboIRROSBigeC5yjU1hGzHHyXss8UDprecbAYxknTcQkhslANGRUZmdTOQ5qTRsLAt6BTYuyvVRdhS8exSZEy_c4gs_7svlJJQ4H9_NxsiIoLwAEk7-Q3UXERGYw_75IDrGA84-lA_-Ct4eTlXHBIY2EaV7t7LjJaynVJCpkv4LKjTTAumiGUIuQhrNhZLuF_RJLqHpM2kgWFLU7-VTdL1VbC2tejvcI2BlMkEpk1BzBZI0KQB0GaDWFLN-aEAw3vRw", "e": "AQAB"},
            {"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"},
            {"kty": "OKP", "kid": "ed", "crv": "Ed25519", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"},
            {"kty": "EC", "kid": "ec", "crv": "P-256", "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU", "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"},
            {"kty": "RSA", "n": "AQAB", "e": "AQAB"},
            "not a key"
        ]});
        let keys = verifying_keys(&set);
        let mut kept: Vec<(&str, Algorithm)> = keys
            .iter()
            .map(|(k, v)| (k.as_str(), v.algorithm))
            .collect();
        kept.sort_by_key(|(kid, _)| *kid);
        assert_eq!(
            kept,
            [
                ("ec", Algorithm::ES256),
                ("ed", Algorithm::EdDSA),
                ("rsa", Algorithm::RS256)
            ]
        );
    }
}
