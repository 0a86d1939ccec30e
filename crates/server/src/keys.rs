//! API keys: `ctx_<env>_<id>_<secret>`, where `id` is 16 hex digits naming the key and
//! `secret` is 32 random bytes in unpadded base64url. Only a hash of the secret is stored.

use std::fmt;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use rand::RngCore;
use sha2::{Digest, Sha256};

const PREFIX: &str = "ctx_";
const ID_BYTES: usize = 8;
const SECRET_BYTES: usize = 32;
/// Length of a 32-byte secret in unpadded base64url.
const SECRET_CHARS: usize = 43;

/// The longest lifetime a key is given (100 years): a later expiry is past the dates
/// the app and the CLI can show. Leaving the expiry out makes a key that never expires.
pub const MAX_LIFETIME_DAYS: u32 = 36_525;

/// The environment a key is for; keys of one never work as keys of the other by mistake.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum KeyEnv {
    /// Production traffic.
    Live,
    /// Development and testing.
    Test,
}

impl KeyEnv {
    /// The name used in the key and the database.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyEnv::Live => "live",
            KeyEnv::Test => "test",
        }
    }

    /// The inverse of [`KeyEnv::as_str`].
    pub fn from_name(name: &str) -> Option<KeyEnv> {
        match name {
            "live" => Some(KeyEnv::Live),
            "test" => Some(KeyEnv::Test),
            _ => None,
        }
    }
}

impl fmt::Display for KeyEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A freshly generated key: the whole token exists only here, to be shown once.
pub struct NewKey {
    /// The key id (public: listed, logged, billed).
    pub id: String,
    /// Its environment.
    pub env: KeyEnv,
    /// The full key, for the one time it is shown.
    pub token: String,
    /// Hex SHA-256 of the secret, the only part stored.
    pub secret_hash: String,
}

impl fmt::Debug for NewKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NewKey")
            .field("id", &self.id)
            .field("env", &self.env)
            .finish_non_exhaustive()
    }
}

/// Generates a key from the operating system's random source.
pub fn generate(env: KeyEnv) -> NewKey {
    let mut id = [0u8; ID_BYTES];
    let mut secret = [0u8; SECRET_BYTES];
    rand::rngs::OsRng.fill_bytes(&mut id);
    rand::rngs::OsRng.fill_bytes(&mut secret);
    let id = to_hex(&id);
    let secret = URL_SAFE_NO_PAD.encode(secret);
    NewKey {
        token: format!("{PREFIX}{env}_{id}_{secret}"),
        secret_hash: to_hex(&hash_secret(&secret)),
        id,
        env,
    }
}

/// A key as presented in a request, split into its parts (nothing checked yet but form).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PresentedKey<'a> {
    /// Its environment.
    pub env: KeyEnv,
    /// Its id.
    pub id: &'a str,
    /// Its secret.
    pub secret: &'a str,
}

impl fmt::Debug for PresentedKey<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PresentedKey")
            .field("env", &self.env)
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// Splits a well-formed key; `None` for anything malformed.
pub fn parse(token: &str) -> Option<PresentedKey<'_>> {
    let rest = token.strip_prefix(PREFIX)?;
    let (env, rest) = rest.split_once('_')?;
    let env = KeyEnv::from_name(env)?;
    // The id holds no '_'; the secret may (base64url), so split only once more.
    let (id, secret) = rest.split_once('_')?;
    let id_ok = is_key_id(id);
    let secret_ok = secret.len() == SECRET_CHARS
        && secret
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    (id_ok && secret_ok).then_some(PresentedKey { env, id, secret })
}

/// The id in a key's public part, `ctx_<env>_<id>` (the key without its secret), if
/// `text` is one.
pub fn public_id(text: &str) -> Option<&str> {
    let rest = text.strip_prefix(PREFIX)?;
    let (env, id) = rest.split_once('_')?;
    KeyEnv::from_name(env)?;
    is_key_id(id).then_some(id)
}

/// Whether `id` is a key id as [`generate`] makes them: lowercase hex of its bytes.
fn is_key_id(id: &str) -> bool {
    id.len() == ID_BYTES * 2
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// SHA-256 of a secret. A fast hash is right here, unlike for passwords: the secret is
/// 256 random bits, so there is nothing to guess, and a slow hash would only add
/// latency to every request.
pub fn hash_secret(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// Whether `secret` hashes to `stored`, compared in constant time.
pub fn verify(secret: &str, stored: &[u8; 32]) -> bool {
    let actual = hash_secret(secret);
    actual
        .iter()
        .zip(stored)
        .fold(0u8, |diff, (a, b)| diff | (a ^ b))
        == 0
}

/// Lower-case hex of `bytes`.
pub fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    out
}

/// The 32 bytes of a 64-digit hex hash, `None` if it is not one.
pub fn hash_from_hex(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (slot, pair) in out.iter_mut().zip(hex.as_bytes().chunks(2)) {
        let text = std::str::from_utf8(pair).ok()?;
        *slot = u8::from_str_radix(text, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_parse_and_verify() {
        for env in [KeyEnv::Live, KeyEnv::Test] {
            for _ in 0..200 {
                let key = generate(env);
                let parsed = parse(&key.token);
                assert!(parsed.is_some(), "{}", key.id);
                let Some(parsed) = parsed else { continue };
                assert_eq!(parsed.env, env);
                assert_eq!(parsed.id, key.id);
                let stored = hash_from_hex(&key.secret_hash);
                assert!(stored.is_some_and(|h| verify(parsed.secret, &h)));
                assert!(!format!("{key:?}").contains(parsed.secret));
            }
        }
    }

    #[test]
    fn malformed_keys_are_rejected() {
        let good = generate(KeyEnv::Live).token;
        assert!(parse(&good).is_some());
        let bad = [
            String::new(),
            "ctx_".into(),
            good.replacen("ctx_", "ctk_", 1),
            good.replacen("_live_", "_prod_", 1),
            good[..good.len() - 1].to_owned(),
            format!("{good}A"),
            good.replacen("ctx_live_", "ctx_live_X", 1),
            format!(" {good}"),
        ];
        for key in bad {
            assert!(parse(&key).is_none(), "{key}");
        }
    }
}
