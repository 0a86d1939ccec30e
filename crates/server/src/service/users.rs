//! People who sign in to the app: argon2-hashed passwords, and failed sign-ins that are
//! slowed down and then locked for a while.

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use rand::RngCore;

pub use crate::store::users::User;
use crate::store::{unknown_names, users as store, Database, DbError};

/// Consecutive failed sign-ins that lock a user.
pub const MAX_FAILED_LOGINS: i64 = 5;
/// How long a lock lasts.
pub const LOCK_MS: i64 = 15 * 60 * 1000;
/// Extra delay per earlier failure, so guessing gets slower before the lock.
pub const DELAY_PER_FAILURE_MS: u64 = 300;

/// How a sign-in went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignIn {
    /// Right password.
    Accepted(User),
    /// Unknown user or wrong password (indistinguishable to the caller).
    Rejected {
        /// Failures so far, for the slow-down (counted alike for unknown names).
        failures: i64,
    },
    /// Locked after too many failures.
    Locked {
        /// Seconds until the lock ends.
        retry_after_s: i64,
    },
}

/// Why a password could not be hashed.
#[derive(Debug, thiserror::Error)]
pub enum UserError {
    /// The database.
    #[error(transparent)]
    Db(#[from] DbError),
    /// Hashing.
    #[error("password hashing failed: {0}")]
    Hash(String),
    /// A rule about usernames or passwords.
    #[error("{0}")]
    Invalid(String),
    /// The user exists in another account: resetting its password must not move it (a
    /// mistyped account would hand it another account's surveys).
    #[error("user '{username}' belongs to account '{account}'")]
    OtherAccount {
        /// The user.
        username: String,
        /// The account it belongs to.
        account: String,
    },
}

/// Whether [`create_or_reset`] may move an existing user to the account it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moving {
    /// An existing user of another account is refused ([`UserError::OtherAccount`]).
    Refused,
    /// An existing user of another account is moved to this one.
    Allowed,
}

fn hash_password(password: &str) -> Result<String, UserError> {
    let mut salt = [0u8; 16];
    rand::rngs::OsRng.fill_bytes(&mut salt);
    let salt = SaltString::encode_b64(&salt).map_err(|e| UserError::Hash(e.to_string()))?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|hash| hash.to_string())
        .map_err(|e| UserError::Hash(e.to_string()))
}

/// Whether `password` is the one `stored` was made from; a stored hash that cannot be
/// read or checked is a fault of this server, not a wrong password.
fn verify_password(password: &str, stored: &str) -> Result<bool, UserError> {
    let hash =
        PasswordHash::new(stored).map_err(|e| UserError::Hash(format!("stored hash: {e}")))?;
    match Argon2::default().verify_password(password.as_bytes(), &hash) {
        Ok(()) => Ok(true),
        Err(argon2::password_hash::Error::Password) => Ok(false),
        Err(e) => Err(UserError::Hash(format!("stored hash: {e}"))),
    }
}

/// Runs argon2 work on the blocking pool, at most one per core at a time: each one holds
/// ~19 MiB and a core for tens of ms, so a flood of sign-ins (unknown names cost a decoy
/// verification too) waits its turn instead of taking the memory and the blocking
/// threads the rest of the server needs. `None` if the work could not run.
async fn argon2<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    static PERMITS: std::sync::OnceLock<tokio::sync::Semaphore> = std::sync::OnceLock::new();
    let permits = PERMITS.get_or_init(|| {
        tokio::sync::Semaphore::new(std::thread::available_parallelism().map_or(1, |n| n.get()))
    });
    let _permit = permits.acquire().await.ok()?;
    tokio::task::spawn_blocking(work).await.ok()
}

/// Creates user `username` in `account` (creating the account if needed), or resets the
/// password of an existing one of that account (signing it out everywhere). Hashing runs
/// off the async workers.
pub async fn create_or_reset(
    db: &Database,
    username: &str,
    account: &str,
    password: &str,
    now: i64,
) -> Result<(), UserError> {
    create_or_reset_moving(db, username, account, password, now, Moving::Refused).await
}

/// [`create_or_reset`], moving a user of another account to `account` when `moving`
/// allows it.
pub async fn create_or_reset_moving(
    db: &Database,
    username: &str,
    account: &str,
    password: &str,
    now: i64,
    moving: Moving,
) -> Result<(), UserError> {
    if account.trim().is_empty() {
        return Err(UserError::Invalid("an account name is not empty".into()));
    }
    if username.is_empty() || username.len() > 64 || username.chars().any(char::is_control) {
        return Err(UserError::Invalid(
            "a username is 1 to 64 printable characters".into(),
        ));
    }
    if password.chars().count() < 8 {
        return Err(UserError::Invalid(
            "a password has at least 8 characters".into(),
        ));
    }
    if moving == Moving::Refused {
        if let Some(current) = store::account_of(db, username).await? {
            if current != account {
                return Err(UserError::OtherAccount {
                    username: username.to_owned(),
                    account: current,
                });
            }
        }
    }
    let owned = password.to_owned();
    let hash = argon2(move || hash_password(&owned))
        .await
        .ok_or_else(|| UserError::Hash("the hashing task failed".into()))??;
    store::create_or_reset(db, username, account, &hash, now).await?;
    Ok(())
}

/// A random password for the demo user: 18 random bytes, base64url.
pub fn random_password() -> String {
    use base64::Engine as _;
    let mut bytes = [0u8; 18];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// A hash to verify against when the user does not exist, so both cases cost the same.
fn decoy_hash() -> Result<&'static str, UserError> {
    static DECOY: std::sync::OnceLock<Result<String, String>> = std::sync::OnceLock::new();
    DECOY
        .get_or_init(|| {
            hash_password("decoy password, never matches").map_err(|error| error.to_string())
        })
        .as_deref()
        .map_err(|reason| UserError::Hash(reason.clone()))
}

/// A name as the database keeps its failed sign-ins when it has no user: its SHA-256, in
/// hex, so a 2 MB name costs what a short one does.
fn name_key(name: &str) -> String {
    use sha2::Digest;
    crate::keys::to_hex(&sha2::Sha256::digest(name.as_bytes()))
}

/// How long a failure count (a user's, or a name's without one) lasts after its last
/// attempt: then it starts again.
pub const COUNT_KEPT_MS: i64 = 24 * 60 * 60 * 1000;

/// Names without a user whose counts the database keeps at most (past this, the least
/// recently tried are forgotten, as a quiet day forgets them).
pub const UNKNOWN_NAMES_KEPT: i64 = 100_000;

/// Where a name's failed sign-ins are counted: a user's row, or the row of a name without
/// a user (by its hash). Both are in the database every server shares, and follow one
/// rule, in [`sign_in`]: from any number of servers, neither the lock nor the count it
/// takes tells whether a name exists.
enum Failures<'a> {
    User { db: &'a Database, id: i64 },
    Unknown { db: &'a Database, key: String },
}

impl Failures<'_> {
    /// Takes a place for this attempt before the (slow) password check: `Err` with the
    /// seconds to wait while locked or with every place taken, else the attempt's number.
    /// Parallel guesses each take their own place, and none past the limit is checked at
    /// all (the last may still be checking). A user and a name without one take the same
    /// statements: one to take the place, one more to read the lock when refused.
    async fn take(&self, now: i64) -> Result<Result<i64, i64>, DbError> {
        let forget_before = now - COUNT_KEPT_MS;
        let taken = match self {
            Failures::User { db, id } => {
                store::take_attempt(db, *id, MAX_FAILED_LOGINS, now, forget_before).await?
            }
            Failures::Unknown { db, key } => {
                unknown_names::take_attempt(db, key, MAX_FAILED_LOGINS, now, forget_before).await?
            }
        };
        if let Some(attempt) = taken {
            return Ok(Ok(attempt));
        }
        let locked_until = match self {
            Failures::User { db, id } => store::locked_until(db, *id).await?,
            Failures::Unknown { db, key } => unknown_names::locked_until(db, key).await?,
        };
        Ok(Err(locked_until
            .filter(|until| *until > now)
            .map_or(LOCK_MS / 1000, |until| {
                (until - now + 999) / 1000
            })))
    }

    /// Gives back the place [`Failures::take`] took, for an attempt a fault left unjudged:
    /// kept, a fault on the last place would leave every place taken and no lock to end.
    async fn give_back(&self) -> Result<(), DbError> {
        match self {
            Failures::User { db, id, .. } => store::give_back_attempt(db, *id).await,
            Failures::Unknown { db, key } => unknown_names::give_back_attempt(db, key).await,
        }
    }

    /// Starts the count again, with no lock (`until` `None`, after a right password) or
    /// with a lock until `until` (the last allowed attempt failed).
    async fn reset(&self, until: Option<i64>) -> Result<(), DbError> {
        match self {
            Failures::User { db, id, .. } => store::reset_attempts(db, *id, until).await?,
            Failures::Unknown { db, key } => {
                if let Some(until) = until {
                    unknown_names::lock(db, key, until).await?;
                }
            }
        }
        Ok(())
    }
}

/// Checks a sign-in, counting failures and locking after too many (for names without a
/// user too, so that both answer alike).
pub async fn sign_in(
    db: &Database,
    username: &str,
    password: &str,
    now: i64,
) -> Result<SignIn, UserError> {
    let login = store::login(db, username).await?;
    // A name without a user is checked against a decoy hash (the same work, so the time
    // tells nothing) and can never be accepted.
    let (failures, stored, user) = match login {
        None => (
            Failures::Unknown {
                db,
                key: name_key(username),
            },
            decoy_hash()?.to_owned(),
            None,
        ),
        Some(login) => (
            Failures::User {
                db,
                id: login.user.id,
            },
            login.password_hash,
            Some(login.user),
        ),
    };
    let attempt = match failures.take(now).await? {
        Ok(attempt) => attempt,
        Err(retry_after_s) => return Ok(SignIn::Locked { retry_after_s }),
    };
    let owned = password.to_owned();
    let checked = argon2(move || verify_password(&owned, &stored))
        .await
        .unwrap_or_else(|| Err(UserError::Hash("the check did not finish".to_owned())));
    let matches = match checked {
        Ok(matches) => matches,
        Err(fault) => {
            failures.give_back().await?;
            return Err(fault);
        }
    };
    if let Some(user) = user.filter(|_| matches) {
        failures.reset(None).await?;
        return Ok(SignIn::Accepted(user));
    }
    if attempt < MAX_FAILED_LOGINS {
        return Ok(SignIn::Rejected { failures: attempt });
    }
    failures.reset(Some(now + LOCK_MS)).await?;
    Ok(SignIn::Locked {
        retry_after_s: LOCK_MS / 1000,
    })
}

#[cfg(test)]
mod unknown_names_tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// The answers to `tries` wrong passwords for `name` at `now`.
    async fn answers(db: &Database, name: &str, tries: usize, now: i64) -> Vec<String> {
        let mut answers = Vec::new();
        for _ in 0..tries {
            let answer = sign_in(db, name, "wrong", now).await.unwrap();
            answers.push(format!("{answer:?}"));
        }
        answers
    }

    #[tokio::test]
    async fn a_name_without_a_user_is_counted_and_locked_as_a_user_is() {
        let (_dir, db) = crate::store::scratch().await;
        create_or_reset(&db, "ann", "acme", "correct horse battery", 0)
            .await
            .unwrap();
        let both = |tries: usize, now: i64| {
            let db = db.clone();
            async move {
                let user = answers(&db, "ann", tries, now).await;
                let nobody = answers(&db, "nobody", tries, now).await;
                assert_eq!(user, nobody, "at {now}");
                user
            }
        };
        let first = both(7, 1_000).await;
        assert!(
            first[3].contains("Rejected") && first[4].contains("Locked"),
            "{first:?}"
        );
        // The lock ends alike, and the count starts again.
        let later = 1_000 + LOCK_MS;
        both(1, later - 1_000).await;
        assert!(both(2, later).await[1].contains("failures: 2"));
        // A count left a day alone starts again, for both alike.
        let next_day = later + COUNT_KEPT_MS + 1;
        assert!(both(1, next_day).await[0].contains("failures: 1"));
        // Past the day, the name's row goes (its count would start again anyway); a
        // locked one stays while locked, whatever its last attempt.
        let fresh =
            |key: &'static str| unknown_names::take_attempt(&db, key, MAX_FAILED_LOGINS, 0, 0);
        fresh("locked").await.unwrap();
        unknown_names::lock(&db, "locked", next_day + LOCK_MS)
            .await
            .unwrap();
        fresh("quiet").await.unwrap();
        let purged = unknown_names::purge(&db, next_day, next_day, UNKNOWN_NAMES_KEPT).await;
        assert_eq!(purged.unwrap(), 1, "only the quiet one");
        assert!(unknown_names::locked_until(&db, "locked")
            .await
            .unwrap()
            .is_some());
    }

    #[tokio::test]
    async fn past_their_number_the_least_recently_tried_names_are_forgotten() {
        let (_dir, db) = crate::store::scratch().await;
        for (n, key) in ["a", "b", "c", "d"].into_iter().enumerate() {
            let at = n as i64 * 1_000;
            unknown_names::take_attempt(&db, key, MAX_FAILED_LOGINS, at, 0)
                .await
                .unwrap();
        }
        unknown_names::lock(&db, "a", 1_000_000).await.unwrap();
        // Two kept: the locked one stays, then the most recently tried.
        assert_eq!(unknown_names::purge(&db, 0, 5_000, 2).await.unwrap(), 2);
        let left =
            |key: &'static str| unknown_names::take_attempt(&db, key, MAX_FAILED_LOGINS, 6_000, 0);
        assert_eq!(left("d").await.unwrap(), Some(2), "kept, its count goes on");
        assert_eq!(
            left("b").await.unwrap(),
            Some(1),
            "forgotten, it starts again"
        );
        assert_eq!(left("a").await.unwrap(), None, "locked");
    }
}

#[cfg(test)]
mod argon2_limit_tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn at_most_one_argon2_job_per_core_runs_at_once() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let (running, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let jobs: Vec<_> = (0..cores * 4)
            .map(|job| {
                let (running, most) = (Arc::clone(&running), Arc::clone(&most));
                tokio::spawn(super::argon2(move || {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    running.fetch_sub(1, Ordering::SeqCst);
                    job
                }))
            })
            .collect();
        for (job, handle) in jobs.into_iter().enumerate() {
            assert_eq!(handle.await.ok().flatten(), Some(job));
        }
        let most = most.load(Ordering::SeqCst);
        assert!(
            most >= 1 && most <= cores,
            "{most} at once on {cores} cores"
        );
    }
}

#[cfg(test)]
mod password_tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[tokio::test]
    async fn a_password_reset_never_moves_a_user_to_another_account_unasked() {
        let (_dir, db) = crate::store::scratch().await;
        let password = "correct horse battery";
        create_or_reset(&db, "ann", "acme", password, 0)
            .await
            .unwrap();
        // The same account: a reset. Another (a typo, say): refused, nothing changed.
        create_or_reset(&db, "ann", "acme", password, 1)
            .await
            .unwrap();
        let refused = create_or_reset(&db, "ann", "acmee", password, 2).await;
        assert!(
            matches!(&refused, Err(UserError::OtherAccount { account, .. }) if account == "acme"),
            "{refused:?}"
        );
        assert_eq!(
            store::account_of(&db, "ann").await.unwrap().as_deref(),
            Some("acme")
        );
        // Asked for, it moves.
        create_or_reset_moving(&db, "ann", "north", password, 3, Moving::Allowed)
            .await
            .unwrap();
        assert_eq!(
            store::account_of(&db, "ann").await.unwrap().as_deref(),
            Some("north")
        );
        let empty = create_or_reset(&db, "bob", " ", password, 4).await;
        assert!(matches!(empty, Err(UserError::Invalid(_))), "{empty:?}");
    }

    #[tokio::test]
    async fn a_fault_in_the_check_takes_no_place_and_sets_no_lock() {
        let (_dir, db) = crate::store::scratch().await;
        store::create_or_reset(&db, "ann", "acme", "not a hash", 0)
            .await
            .unwrap();
        // Past the number of tries a lock takes: each is a fault, none a wrong password.
        for _ in 0..MAX_FAILED_LOGINS + 2 {
            let answer = sign_in(&db, "ann", "any", 1_000).await;
            assert!(matches!(answer, Err(UserError::Hash(_))), "{answer:?}");
        }
        // Kept, the fifth place would have left the count full with no lock to end it.
        let login = store::login(&db, "ann").await.unwrap().unwrap();
        assert_eq!(store::locked_until(&db, login.user.id).await.unwrap(), None);
    }

    #[test]
    fn an_unreadable_stored_hash_is_a_fault_not_a_wrong_password() {
        let stored = hash_password("correct horse battery").unwrap();
        assert!(verify_password("correct horse battery", &stored).unwrap());
        assert!(!verify_password("wrong horse battery", &stored).unwrap());
        // A damaged row, or a hash of an algorithm this server does not check.
        for damaged in [
            "",
            "not a hash",
            "$argon2id$v=19$m=19456,t=2,p=x$c2FsdHNhbHRzYWx0$aGFzaA",
            "$scrypt$ln=16,r=8,p=1$aM15713r3Xsvxbi31lqr1Q$nFNh2CVHVjNldFVKDHDlm4CbdRSCdEBsjjJxD+iCs5E",
        ] {
            assert!(
                matches!(verify_password("any", damaged), Err(UserError::Hash(_))),
                "{damaged:?}"
            );
        }
    }
}
