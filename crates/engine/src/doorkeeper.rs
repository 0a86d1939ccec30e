//! First sights remembered by hash alone, so a cache keeps only what comes back.
//!
//! A cache that keeps everything it computes is flushed by a client that never repeats a
//! question: each one-off answer pushes out one that was asked again. Behind a doorkeeper
//! a key is kept on its second sight, and a first sight costs one fingerprint.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};

/// First sights remembered before the doorkeeper starts over.
const KEYS: usize = 1 << 14;

/// Bytes of a full doorkeeper, which is allocated whole when made (and should be counted
/// against the budget of the cache it guards for its life): a hash table of [`KEYS`]
/// fingerprints has twice as many slots of a word and a control byte each.
pub const DOORKEEPER_BYTES: usize = 2 * KEYS * (std::mem::size_of::<u64>() + 1);

/// Fingerprints (a keyed hash, as the guarded map's hasher gives it) of keys seen once
/// and not kept; at most [`KEYS`], then it starts over.
#[derive(Debug)]
pub struct Doorkeeper {
    seen: HashSet<u64, BuildHasherDefault<Fingerprint>>,
}

impl Default for Doorkeeper {
    fn default() -> Self {
        Doorkeeper {
            seen: HashSet::with_capacity_and_hasher(KEYS, Default::default()),
        }
    }
}

impl Doorkeeper {
    /// Whether the key of `fingerprint` was seen before (forgotten now: the caller keeps
    /// it); a first sight is remembered and refused.
    pub fn admits(&mut self, fingerprint: u64) -> bool {
        if self.seen.remove(&fingerprint) {
            return true;
        }
        if self.seen.len() >= KEYS {
            self.seen.clear();
        }
        self.seen.insert(fingerprint);
        false
    }
}

/// Hashes a fingerprint as itself: it already is a keyed hash.
#[derive(Debug, Default)]
struct Fingerprint(u64);

impl Hasher for Fingerprint {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `u64` fingerprints are hashed here (`write_u64`); were anything else, its
        // bytes would still be folded into one word.
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }

    fn write_u64(&mut self, fingerprint: u64) {
        self.0 = fingerprint;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_admitted_on_its_second_sight_only() {
        let mut door = Doorkeeper::default();
        assert!(!door.admits(7));
        assert!(door.admits(7));
        // Admitted keys are forgotten: the cache holds them now.
        assert!(!door.admits(7));
        assert!(!door.admits(8));
        assert_eq!(door.seen.len(), 2);
    }

    #[test]
    fn the_doorkeeper_stays_bounded_and_within_its_bytes() {
        let mut door = Doorkeeper::default();
        let capacity = door.seen.capacity();
        for fingerprint in 0..(KEYS as u64 + 10) {
            assert!(!door.admits(fingerprint));
        }
        assert!(door.seen.len() <= KEYS);
        assert_eq!(
            door.seen.capacity(),
            capacity,
            "never grown past its allocation"
        );
        assert!(
            capacity <= 2 * KEYS,
            "DOORKEEPER_BYTES counts 2 * KEYS slots"
        );
    }
}
