//! This server's own access tokens (what the token endpoint answers): Ed25519-signed JWTs
//! whose `iss` and `aud` are the server's public URL, signed by the newest key of the
//! database and verified by any key there (so tokens signed before a rotation stay
//! valid until they expire, on every server of the database).

use std::collections::HashMap;

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use ed25519_dalek::pkcs8::EncodePrivateKey;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header};
use rand::RngCore;
use sha2::{Digest, Sha256};

use super::jwks::VerifyingKey;
use crate::store::signing_keys::StoredKey;
use crate::store::DbError;

/// A new signing key made at `now_ms`.
pub fn generate(now_ms: i64) -> Result<StoredKey, String> {
    let mut seed = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut seed);
    let signing = ed25519_dalek::SigningKey::from_bytes(&seed);
    let der = signing
        .to_pkcs8_der()
        .map_err(|error| format!("signing key not encoded: {error}"))?;
    let public = signing.verifying_key().to_bytes();
    // The id names the public key: the same key never gets two ids.
    let kid = URL_SAFE_NO_PAD.encode(&Sha256::digest(public)[..12]);
    Ok(StoredKey {
        kid,
        private_key: STANDARD.encode(der.as_bytes()),
        public_key: URL_SAFE_NO_PAD.encode(public),
        created_at: now_ms,
        retired_at: None,
    })
}

/// The keys of the database: the one that signs, and every one that verifies.
pub struct OwnKeys {
    signing: Option<(String, EncodingKey)>,
    verifying: HashMap<String, VerifyingKey>,
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
    /// From the stored keys (newest first, as [`crate::store::signing_keys::all`] gives them).
    pub fn from_stored(stored: &[StoredKey]) -> Result<OwnKeys, DbError> {
        let corrupt = |_| DbError::Corrupt("a token-signing key");
        let mut verifying = HashMap::new();
        for key in stored {
            verifying.insert(
                key.kid.clone(),
                VerifyingKey {
                    key: DecodingKey::from_ed_components(&key.public_key).map_err(corrupt)?,
                    algorithm: Algorithm::EdDSA,
                },
            );
        }
        let signing = stored
            .iter()
            .find(|key| key.retired_at.is_none())
            .map(|key| {
                let der = STANDARD
                    .decode(&key.private_key)
                    .map_err(|_| DbError::Corrupt("a token-signing key"))?;
                Ok::<_, DbError>((key.kid.clone(), EncodingKey::from_ed_der(&der)))
            })
            .transpose()?;
        Ok(OwnKeys { signing, verifying })
    }

    /// Whether there is a key to sign with.
    pub fn can_sign(&self) -> bool {
        self.signing.is_some()
    }

    /// The key `kid`, if it is one of ours.
    pub fn key(&self, kid: &str) -> Option<&VerifyingKey> {
        self.verifying.get(kid)
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
