//! The `Idempotency-Key` request header, which makes a query's retries safe: the server
//! answers and bills one key of an account once, and answers a retry of the same body
//! with the stored answer, marked `Idempotent-Replayed: true`.

/// The request header naming one logical query, the same on each of its retries.
pub const IDEMPOTENCY_KEY: &str = "Idempotency-Key";

/// The response header on a stored answer given again (not billed again).
pub const IDEMPOTENT_REPLAYED: &str = "Idempotent-Replayed";

/// How long the server keeps a key and its answer (ms): a retry within this time is
/// answered again, unbilled.
pub const KEY_KEPT_MS: i64 = 24 * 60 * 60 * 1000;

/// Whether `value` may be an `Idempotency-Key`: 1 to 255 printable ASCII characters,
/// neither first nor last a space (HTTP drops spaces around a header's value).
pub fn is_valid_key(value: &str) -> bool {
    value.len() <= 255 && is_header_text(value)
}

/// Whether `value` can be sent as a header's value as it is: printable ASCII, not
/// empty, neither first nor last a space (HTTP drops spaces around a header's value).
pub fn is_header_text(value: &str) -> bool {
    let bytes = value.as_bytes();
    let ends = [bytes.first(), bytes.last()];
    bytes.iter().all(|b| (0x20..=0x7e).contains(b))
        && ends.iter().all(|end| end.is_some_and(|&b| b != b' '))
}

/// A fresh key from 128 random bits: 32 lowercase hex digits.
pub fn key_from_bytes(bytes: [u8; 16]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_one_to_255_printable_ascii_characters() {
        for good in ["a", "x y", "~!", &"k".repeat(255)] {
            assert!(is_valid_key(good), "{good:?}");
        }
        for bad in ["", " x", "x ", "tab\there", "é", "\u{7f}", &"k".repeat(256)] {
            assert!(!is_valid_key(bad), "{bad:?}");
        }
    }

    #[test]
    fn fresh_keys_are_128_bits_of_hex() {
        let key = key_from_bytes([0xab; 16]);
        assert_eq!(key, "ab".repeat(16));
        assert!(is_valid_key(&key));
        assert_ne!(key_from_bytes([0; 16]), key_from_bytes([1; 16]));
    }
}
