//! This server's own access tokens (what the token endpoint answers): Ed25519-signed JWTs
//! whose `iss` and `aud` are the server's public URL, signed by the newest key of the
//! database and verified by any key there (so tokens signed before a rotation stay
//! valid until they expire, on every server of the database).

use std::collections::HashMap;

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header};
use rand::RngCore;
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use super::jwks::VerifyingKey;
use super::sealing::{self, KeySecret, SealError};
use crate::store::signing_keys::StoredKey;
use crate::store::DbError;

/// The PKCS#8 (RFC 8410) encoding of an Ed25519 private key, up to its 32-byte seed.
const PKCS8_ED25519_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];

/// A new signing key made at `now_ms`, its private key sealed with `secret` if given.
pub fn generate(now_ms: i64, secret: Option<&KeySecret>) -> Result<StoredKey, SealError> {
    // The private key's every copy here is wiped once dropped.
    let mut der = Zeroizing::new(PKCS8_ED25519_PREFIX.to_vec());
    let mut seed = Zeroizing::new([0u8; 32]);
    rand::rngs::OsRng.fill_bytes(seed.as_mut());
    let public = ed25519_dalek::SigningKey::from_bytes(&seed)
        .verifying_key()
        .to_bytes();
    der.extend_from_slice(seed.as_ref());
    // The id names the public key: the same key never gets two ids.
    let kid = URL_SAFE_NO_PAD.encode(&Sha256::digest(public)[..12]);
    let private_key = Zeroizing::new(STANDARD.encode(&*der));
    let private_key = match secret {
        Some(secret) => sealing::seal(secret, &kid, &private_key)?,
        None => private_key.to_string(),
    };
    Ok(StoredKey {
        kid,
        private_key,
        public_key: URL_SAFE_NO_PAD.encode(public),
        created_at: now_ms,
        retired_at: None,
    })
}

/// The keys of the database: the one that signs, and every one that verifies.
pub struct OwnKeys {
    signing: Option<(String, EncodingKey)>,
    /// Why the current key is not `signing`, if it could not be opened.
    unopened: Option<SealError>,
    verifying: HashMap<String, VerifyingKey>,
    /// When each retired key was retired (Unix ms): it verifies only tokens issued before.
    retired: HashMap<String, i64>,
}

impl std::fmt::Debug for OwnKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnKeys")
            .field("signing", &self.signing.as_ref().map(|(kid, _)| kid))
            .field("verifying", &self.verifying.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl OwnKeys {
    /// From the stored keys (newest first, as [`crate::store::signing_keys::all`] gives them),
    /// the one that signs opened with `secret` if it is sealed.
    pub fn from_stored(
        stored: &[StoredKey],
        secret: Option<&KeySecret>,
    ) -> Result<OwnKeys, DbError> {
        let corrupt = |_| DbError::Corrupt("a token-signing key");
        let mut verifying = HashMap::new();
        let retired = stored
            .iter()
            .filter_map(|key| Some((key.kid.clone(), key.retired_at?)))
            .collect();
        for key in stored {
            verifying.insert(
                key.kid.clone(),
                VerifyingKey {
                    key: DecodingKey::from_ed_components(&key.public_key).map_err(corrupt)?,
                    algorithm: Algorithm::EdDSA,
                },
            );
        }
        let mut unopened = None;
        let mut signing = None;
        if let Some(key) = stored.iter().find(|key| key.retired_at.is_none()) {
            // A key this server cannot open (sealed since by a server given the secret,
            // while this one was not) stops it at start (`Sso::prepare`); running, it
            // still verifies every token, and says why it signs none.
            match sealing::open(secret, &key.kid, &key.private_key) {
                Ok(private_key) => {
                    let der = Zeroizing::new(
                        STANDARD
                            .decode(&*private_key)
                            .map_err(|_| DbError::Corrupt("a token-signing key"))?,
                    );
                    // jsonwebtoken keeps a copy of its own (wiped on drop, as is the
                    // ed25519 key it makes to sign each token): the key signs for as
                    // long as the server runs.
                    signing = Some((key.kid.clone(), EncodingKey::from_ed_der(&der)));
                }
                Err(error) => unopened = Some(error),
            }
        }
        Ok(OwnKeys {
            signing,
            unopened,
            verifying,
            retired,
        })
    }

    /// Whether there is a key to sign with.
    pub fn can_sign(&self) -> bool {
        self.signing.is_some()
    }

    /// Why the current key does not sign, when there is one this server cannot open.
    pub fn unopened(&self) -> Option<&SealError> {
        self.unopened.as_ref()
    }

    /// The key `kid`, if it is one of ours.
    pub fn key(&self, kid: &str) -> Option<&VerifyingKey> {
        self.verifying.get(kid)
    }

    /// When key `kid` was retired (Unix ms), if it was: tokens it signed after are not ours.
    pub fn retired_at(&self, kid: &str) -> Option<i64> {
        self.retired.get(kid).copied()
    }

    /// `claims` signed by the current key; `None` if there is none.
    pub fn sign(
        &self,
        claims: &serde_json::Value,
    ) -> Option<Result<String, jsonwebtoken::errors::Error>> {
        let (kid, key) = self.signing.as_ref()?;
        let mut header = Header::new(Algorithm::EdDSA);
        header.kid = Some(kid.clone());
        header.typ = Some("at+jwt".to_owned());
        Some(jsonwebtoken::encode(&header, claims, key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_key_signs_what_its_public_half_verifies() {
        let stored = generate(0, None).unwrap();
        let keys = OwnKeys::from_stored(std::slice::from_ref(&stored), None).unwrap();
        let claims = serde_json::json!({"sub": "s", "exp": 1});
        let token = keys.sign(&claims).unwrap().unwrap();
        let key = keys.key(&stored.kid).unwrap();
        let mut validation = jsonwebtoken::Validation::new(Algorithm::EdDSA);
        validation.validate_exp = false;
        let decoded =
            jsonwebtoken::decode::<serde_json::Value>(&token, &key.key, &validation).unwrap();
        assert_eq!(decoded.claims, claims);
        // Another key's half does not.
        let other = OwnKeys::from_stored(&[generate(0, None).unwrap()], None).unwrap();
        let other_kid = other.verifying.keys().next().unwrap().clone();
        let other_key = other.key(&other_kid).unwrap();
        assert!(
            jsonwebtoken::decode::<serde_json::Value>(&token, &other_key.key, &validation).is_err()
        );
    }

    #[test]
    fn a_sealed_key_signs_only_with_its_secret() {
        use base64::engine::general_purpose::STANDARD;
        let secret = |b: u8| KeySecret::from_base64(&STANDARD.encode([b; 32])).unwrap();
        let stored = generate(0, Some(&secret(1))).unwrap();
        assert!(sealing::is_sealed(&stored.private_key));
        let keys = OwnKeys::from_stored(std::slice::from_ref(&stored), Some(&secret(1))).unwrap();
        let claims = serde_json::json!({"sub": "s", "exp": 1});
        let token = keys.sign(&claims).unwrap().unwrap();
        let mut validation = jsonwebtoken::Validation::new(Algorithm::EdDSA);
        validation.validate_exp = false;
        let key = &keys.key(&stored.kid).unwrap().key;
        assert!(jsonwebtoken::decode::<serde_json::Value>(&token, key, &validation).is_ok());
        // Without its secret, or with another, it signs nothing, says why, and verifies.
        for (wrong, why) in [(None, "is sealed"), (Some(secret(2)), "does not open")] {
            let keys = OwnKeys::from_stored(std::slice::from_ref(&stored), wrong.as_ref()).unwrap();
            assert!(!keys.can_sign());
            assert!(keys.unopened().unwrap().to_string().contains(why));
            let key = &keys.key(&stored.kid).unwrap().key;
            assert!(jsonwebtoken::decode::<serde_json::Value>(&token, key, &validation).is_ok());
        }
        assert!(keys.unopened().is_none());
        // A retired sealed key only verifies: no secret is needed for its public half.
        let retired = StoredKey {
            retired_at: Some(1),
            ..stored
        };
        assert!(OwnKeys::from_stored(&[retired], None).is_ok());
    }
}
