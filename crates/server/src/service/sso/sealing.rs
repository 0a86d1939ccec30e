//! This server's token-signing keys sealed at rest: with a secret the operator keeps
//! outside the database (`serve --token-key-secret-file`), a key's private half is stored
//! encrypted (ChaCha20-Poly1305, its `kid` as associated data), so a copy of the database
//! (a backup, a replica, a dump) cannot mint tokens for its accounts.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use rand::RngCore;
use zeroize::{Zeroize as _, Zeroizing};

/// What a sealed private key's stored text starts with.
const SEALED: &str = "sealed:v1:";

/// The secret the signing keys are sealed with: 32 bytes, given as base64; wiped from
/// memory when dropped (as are the text it was read from and the cipher made of it).
/// On the heap, so that moving it leaves no copy behind.
#[derive(Clone)]
pub struct KeySecret(Box<[u8; 32]>);

impl Drop for KeySecret {
    fn drop(&mut self) {
        self.wipe();
    }
}

impl std::fmt::Debug for KeySecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeySecret(…)")
    }
}

/// Why a key could not be opened, or a secret read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// The secret's text is not 32 bytes of base64.
    #[error(
        "the token key secret is not 32 bytes in base64 (make one with `openssl rand -base64 32`)"
    )]
    BadSecret,
    /// A sealed key, and no secret given.
    #[error(
        "the token-signing key {kid} is sealed: start with the secret it was sealed with \
         (--token-key-secret-file)"
    )]
    NeedSecret { kid: String },
    /// The cipher refused to seal (it does only past 256 GiB: never for a key).
    #[error("the token-signing key {kid} could not be sealed")]
    Unsealable { kid: String },
    /// A sealed key the secret does not open (another secret's, or altered).
    #[error(
        "the token key secret does not open the token-signing key {kid}: it was sealed with \
         another secret, or altered"
    )]
    WrongSecret { kid: String },
}

impl KeySecret {
    /// From its base64 text (surrounding whitespace ignored, as a file's newline).
    pub fn from_base64(text: &str) -> Result<KeySecret, SealError> {
        let bytes = Zeroizing::new(
            STANDARD
                .decode(text.trim())
                .map_err(|_| SealError::BadSecret)?,
        );
        let mut secret = KeySecret(Box::new([0; 32]));
        if bytes.len() != secret.0.len() {
            return Err(SealError::BadSecret);
        }
        secret.0.copy_from_slice(&bytes);
        Ok(secret)
    }

    fn wipe(&mut self) {
        self.0.as_mut_slice().zeroize();
    }

    fn cipher(&self) -> ChaCha20Poly1305 {
        ChaCha20Poly1305::new(Key::from_slice(self.0.as_slice()))
    }
}

/// Whether a stored private key is sealed.
pub fn is_sealed(stored: &str) -> bool {
    stored.starts_with(SEALED)
}

/// `private_key` (key `kid`'s, as stored unsealed) sealed with `secret`, under a nonce
/// of its own.
pub fn seal(secret: &KeySecret, kid: &str, private_key: &str) -> Result<String, SealError> {
    let mut nonce = [0u8; 12];
    rand::rngs::OsRng.fill_bytes(&mut nonce);
    let payload = Payload {
        msg: private_key.as_bytes(),
        aad: kid.as_bytes(),
    };
    let sealed = secret
        .cipher()
        .encrypt(Nonce::from_slice(&nonce), payload)
        .map_err(|_| SealError::Unsealable {
            kid: kid.to_owned(),
        })?;
    let mut bytes = nonce.to_vec();
    bytes.extend_from_slice(&sealed);
    Ok(format!("{SEALED}{}", STANDARD.encode(bytes)))
}

/// Key `kid`'s private key as stored unsealed: `stored` itself when it is not sealed,
/// else opened with `secret`; wiped from memory when dropped.
pub fn open(
    secret: Option<&KeySecret>,
    kid: &str,
    stored: &str,
) -> Result<Zeroizing<String>, SealError> {
    let Some(body) = stored.strip_prefix(SEALED) else {
        return Ok(Zeroizing::new(stored.to_owned()));
    };
    let secret = secret.ok_or_else(|| SealError::NeedSecret {
        kid: kid.to_owned(),
    })?;
    let wrong = || SealError::WrongSecret {
        kid: kid.to_owned(),
    };
    let bytes = STANDARD.decode(body).map_err(|_| wrong())?;
    if bytes.len() < 12 {
        return Err(wrong());
    }
    let (nonce, sealed) = bytes.split_at(12);
    let payload = Payload {
        msg: sealed,
        aad: kid.as_bytes(),
    };
    let opened = Zeroizing::new(
        secret
            .cipher()
            .decrypt(Nonce::from_slice(nonce), payload)
            .map_err(|_| wrong())?,
    );
    std::str::from_utf8(&opened)
        .map(|text| Zeroizing::new(text.to_owned()))
        .map_err(|_| wrong())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn secret(byte: u8) -> KeySecret {
        KeySecret::from_base64(&STANDARD.encode([byte; 32])).unwrap()
    }

    #[test]
    fn a_sealed_key_opens_with_its_secret_and_kid_only() {
        let plain = "MC4CAQAwBQYDK2VwBCIEIAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
        let sealed = seal(&secret(1), "kid-1", plain).unwrap();
        assert!(is_sealed(&sealed));
        assert!(!sealed.contains(plain));
        assert_eq!(
            open(Some(&secret(1)), "kid-1", &sealed).unwrap().as_str(),
            plain
        );
        // Each seal its own nonce: the same key sealed twice differs.
        assert_ne!(seal(&secret(1), "kid-1", plain).unwrap(), sealed);
        let wrong = Err(SealError::WrongSecret {
            kid: "kid-1".into(),
        });
        assert_eq!(open(Some(&secret(2)), "kid-1", &sealed), wrong);
        // Moved to another key's row, it does not open.
        assert_eq!(
            open(Some(&secret(1)), "kid-2", &sealed),
            Err(SealError::WrongSecret {
                kid: "kid-2".into()
            })
        );
        // Altered anywhere, truncated, or not base64.
        let mut altered = sealed.clone().into_bytes();
        let last = altered.len() - 3;
        altered[last] = if altered[last] == b'A' { b'B' } else { b'A' };
        let altered = String::from_utf8(altered).unwrap();
        for bad in [altered.as_str(), "sealed:v1:AAAA", "sealed:v1:%%%"] {
            assert_eq!(open(Some(&secret(1)), "kid-1", bad), wrong, "{bad}");
        }
        assert_eq!(
            open(None, "kid-1", &sealed),
            Err(SealError::NeedSecret {
                kid: "kid-1".into()
            })
        );
        // A key stored before sealing is taken as it is, with or without a secret.
        assert_eq!(open(None, "kid-1", plain).unwrap().as_str(), plain);
        assert_eq!(
            open(Some(&secret(1)), "kid-1", plain).unwrap().as_str(),
            plain
        );
    }

    #[test]
    fn a_secret_is_wiped_in_place() {
        let mut kept = secret(9);
        let at = kept.0.as_ptr();
        kept.wipe();
        assert_eq!(*kept.0, [0; 32]);
        assert_eq!(kept.0.as_ptr(), at, "the bytes it was made of, not a copy");
    }

    #[test]
    fn a_secret_is_32_bytes_of_base64() {
        assert!(KeySecret::from_base64(&format!("{}\n", STANDARD.encode([7u8; 32]))).is_ok());
        for bad in [
            STANDARD.encode([7u8; 31]),
            STANDARD.encode([7u8; 33]),
            "not base64".into(),
        ] {
            assert_eq!(
                KeySecret::from_base64(&bad).unwrap_err(),
                SealError::BadSecret
            );
        }
        assert_eq!(format!("{:?}", secret(9)), "KeySecret(…)");
    }
}
