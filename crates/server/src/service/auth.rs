//! Authentication of `POST /v1/crosstab`: the `Service-Engine-Authorizer` key → the
//! account it belongs to and that account's grants.
//!
//! Keys are cached in memory so a request costs no database round trip, yet revocation,
//! new grants and expiry take effect on the very next request, even when another process
//! (the CLI) made the change. Every change to keys or grants bumps a revision in the
//! database; with SQLite it also bumps the counter of a signal file beside the database
//! ([`KeySignal`]), which is read, through a shared map, on every request; PostgreSQL
//! pushes each change to every server (`NOTIFY`, see [`crate::store::changes`]), which
//! calls [`Authenticator::changed`]; only when a SQLite signal file can't be mapped is
//! the revision read per request.
//! Whenever the signal changes, the whole cache is dropped. Should the signal file not
//! be bumped, the revision, read every second as well, still drops it within a second.
//!
//! The set of every key id is kept too (reloaded after a change), so a key whose id does
//! not exist, as in a flood of random keys, costs no database query.
//!
//! `Bearer <JWT>` in the same header is a single sign-on token, checked by
//! [`Sso::verify_bearer`]; a verified token's principal is cached by the token's SHA-256
//! until the token expires (or anything changes), so a bearer call costs what a key call
//! does.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use crosstab_engine::MemoryBudget;
use sha2::{Digest, Sha256};

use super::principal::{Credential, Principal};
use super::sso::{Sso, LEEWAY_S};
use crate::clock::Clock;
use crate::keys;
use crate::store::accounts::{self, KeyRecord};
use crate::store::key_signal::KeySignal;
use crate::store::{Database, DbError};

/// Why a key was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// Missing, malformed, unknown, revoked or expired: all look the same to the caller.
    #[error("unauthorized")]
    Unauthorized,
    /// The key store could not be read.
    #[error(transparent)]
    Store(#[from] DbError),
    /// What a token needs to be checked could not be had (an identity provider's keys).
    #[error("{0}")]
    Unavailable(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Signal {
    /// Changes are pushed (PostgreSQL): nothing to read per request.
    Pushed,
    /// The counter of the SQLite signal file.
    File(u64),
    /// The database's key revision.
    Revision(i64),
}

#[derive(Debug)]
struct Cached {
    record: KeyRecord,
    principal: Arc<Principal>,
}

/// A verified bearer token's principal, until when (Unix ms) the token holds, and when it
/// is to be verified again (when the issuer's key set it was verified with is due: a
/// token of a key the issuer withdrew does not outlive it by the token's own say).
#[derive(Debug)]
struct CachedToken {
    principal: Arc<Principal>,
    valid_until_ms: i64,
    recheck_at_ms: i64,
}

/// Most verified tokens kept; past it, expired ones are dropped, then all.
const MAX_CACHED_TOKENS: usize = 50_000;

/// Bytes a cached key or token is counted as against the cache budget: the entry, its
/// principal and grants, and the map's slot (an estimate: the caches are bounded by
/// the keys that exist and by `MAX_CACHED_TOKENS`, so they are counted, never evicted).
const CACHED_ENTRY_BYTES: usize = 512;

/// What one cache holds against the shared budget, kept equal to its size.
#[derive(Debug)]
struct Charge {
    memory: Arc<MemoryBudget>,
    bytes: AtomicUsize,
}

impl Charge {
    fn new(memory: &Arc<MemoryBudget>) -> Charge {
        Charge {
            memory: Arc::clone(memory),
            bytes: AtomicUsize::new(0),
        }
    }

    /// The cache now holds `entries` entries (call it under the cache's write lock).
    fn entries(&self, entries: usize) {
        let now = entries * CACHED_ENTRY_BYTES;
        let before = self.bytes.swap(now, Ordering::SeqCst);
        if now > before {
            self.memory.take_anyway(now - before);
        } else {
            self.memory.give_back(before - now);
        }
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.memory.give_back(self.bytes.load(Ordering::SeqCst));
    }
}

/// Checks keys against the database, through a cache that never outlives a change.
#[derive(Debug)]
pub struct Authenticator {
    db: Database,
    clock: Arc<dyn Clock>,
    /// The SQLite signal file, and its map when it could be mapped (else the revision is
    /// read per request, as on PostgreSQL).
    signal_file: Option<PathBuf>,
    signal: RwLock<Option<KeySignal>>,
    /// Whether the database pushes its changes (PostgreSQL).
    pushed: bool,
    seen: Mutex<Option<Signal>>,
    /// The key revision at the last [`Authenticator::follow_revision`].
    seen_revision: Mutex<Option<i64>>,
    generation: AtomicU64,
    cache: RwLock<HashMap<String, Arc<Cached>>>,
    /// Every key id, loaded on first need after each change.
    known: RwLock<Option<Arc<HashSet<String>>>>,
    /// One load of the id set at a time: after a change, the requests that find it gone
    /// wait for one load rather than each reading every id.
    loading_known: tokio::sync::Mutex<()>,
    /// One load of a key at a time, per key (the same for its requests after a change).
    loading_keys: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Database reads of one key (for the tests that a flood makes none).
    key_reads: AtomicU64,
    /// Database reads of the set of every key id.
    id_set_reads: AtomicU64,
    /// Single sign-on: bearer tokens.
    sso: Arc<Sso>,
    /// Verified bearer tokens by their SHA-256.
    tokens: RwLock<HashMap<[u8; 32], CachedToken>>,
    /// The two caches' shares of the cache budget.
    keys_charge: Charge,
    tokens_charge: Charge,
}

impl Authenticator {
    /// An authenticator over `db`'s keys and `sso`'s tokens, judging expiry by `clock`,
    /// its caches counted against `memory`.
    pub fn new(
        db: Database,
        clock: Arc<dyn Clock>,
        sso: Arc<Sso>,
        memory: &Arc<MemoryBudget>,
    ) -> Authenticator {
        let signal_file = db.key_signal_file();
        let signal = signal_file.as_deref().and_then(|path| {
            KeySignal::open(path)
                .inspect_err(|error| {
                    tracing::warn!(%error, path = %path.display(), "key signal file not mapped; reading the key revision on every request");
                })
                .ok()
        });
        Authenticator {
            pushed: db.backend() == crate::store::Backend::Postgres,
            signal_file,
            signal: RwLock::new(signal),
            db,
            clock,
            seen: Mutex::new(None),
            seen_revision: Mutex::new(None),
            generation: AtomicU64::new(0),
            cache: RwLock::new(HashMap::new()),
            known: RwLock::new(None),
            loading_known: tokio::sync::Mutex::new(()),
            loading_keys: Mutex::new(HashMap::new()),
            key_reads: AtomicU64::new(0),
            id_set_reads: AtomicU64::new(0),
            sso,
            tokens: RwLock::new(HashMap::new()),
            keys_charge: Charge::new(memory),
            tokens_charge: Charge::new(memory),
        }
    }

    async fn current_signal(&self) -> Result<Signal, DbError> {
        let counter = self
            .signal
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(KeySignal::read);
        match counter {
            Some(counter) => Ok(Signal::File(counter)),
            None if self.pushed => Ok(Signal::Pushed),
            None => Ok(Signal::Revision(accounts::key_revision(&self.db).await?)),
        }
    }

    /// Drops every cached key (and the identity providers) if keys, grants or providers
    /// changed since the last look.
    pub(crate) async fn follow_changes(&self) -> Result<(), DbError> {
        let signal = self.current_signal().await?;
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.as_ref() != Some(&signal) {
            self.forget_all();
            *seen = Some(signal);
        }
        Ok(())
    }

    /// The backstop to the SQLite signal file, which the server runs every second: maps
    /// the signal file again if it was replaced (or could not be mapped), and drops every
    /// cached key if the database's key revision moved since the last call (a change
    /// whose signal was not bumped still bumped the revision).
    pub async fn follow_revision(&self) -> Result<(), DbError> {
        if let Some(path) = &self.signal_file {
            self.follow_signal_file(path);
        }
        let revision = accounts::key_revision(&self.db).await?;
        let mut seen = self.seen_revision.lock().unwrap_or_else(|p| p.into_inner());
        if *seen != Some(revision) {
            // The first call too: a key cached before it may predate a change.
            self.forget_all();
            *seen = Some(revision);
        }
        Ok(())
    }

    /// Maps the file at `path` anew unless it is the one mapped: a replaced file would
    /// otherwise never be seen to change again.
    fn follow_signal_file(&self, path: &Path) {
        let (mapped, current) = {
            let signal = self.signal.read().unwrap_or_else(|p| p.into_inner());
            (
                signal.is_some(),
                signal.as_ref().is_some_and(|s| s.is_file_at(path)),
            )
        };
        if current {
            return;
        }
        let remapped = match KeySignal::open(path) {
            Ok(signal) => {
                tracing::info!(path = %path.display(), "key signal file mapped");
                Some(signal)
            }
            // Still unmappable: stay on the per-request revision, quietly.
            Err(_) if !mapped => return,
            Err(error) => {
                tracing::warn!(%error, path = %path.display(), "key signal file replaced and not mapped again; reading the key revision on every request");
                None
            }
        };
        *self.signal.write().unwrap_or_else(|p| p.into_inner()) = remapped;
        // Changes made to the new file before it was mapped are not missed.
        self.forget_all();
    }

    /// Keys, grants or limits changed (a pushed notification, or a reconnection after
    /// which any may have): drops everything cached.
    pub fn changed(&self) {
        self.forget_all();
    }

    fn forget_all(&self) {
        let mut cache = self.cache.write().unwrap_or_else(|p| p.into_inner());
        cache.clear();
        self.keys_charge.entries(0);
        *self.known.write().unwrap_or_else(|p| p.into_inner()) = None;
        let mut tokens = self.tokens.write().unwrap_or_else(|p| p.into_inner());
        tokens.clear();
        self.tokens_charge.entries(0);
        self.sso.changed();
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// How many times one key was read from the database.
    pub fn key_reads(&self) -> u64 {
        self.key_reads.load(Ordering::Relaxed)
    }

    /// How many times the set of every key id was read from the database.
    pub fn id_set_reads(&self) -> u64 {
        self.id_set_reads.load(Ordering::Relaxed)
    }

    /// Whether `key_id` exists, from the set of every id (loaded once per change).
    async fn exists(&self, key_id: &str) -> Result<bool, DbError> {
        let held = || self.known.read().unwrap_or_else(|p| p.into_inner()).clone();
        let known = match held() {
            Some(known) => known,
            None => {
                let _loading = self.loading_known.lock().await;
                // Loaded while this request waited?
                if let Some(known) = held() {
                    return Ok(known.contains(key_id));
                }
                let generation = self.generation.load(Ordering::SeqCst);
                self.id_set_reads.fetch_add(1, Ordering::Relaxed);
                let ids: HashSet<String> = accounts::key_ids(&self.db).await?.into_iter().collect();
                let ids = Arc::new(ids);
                let mut slot = self.known.write().unwrap_or_else(|p| p.into_inner());
                // A change noticed while loading: use the set once, keep it not.
                if self.generation.load(Ordering::SeqCst) == generation {
                    *slot = Some(Arc::clone(&ids));
                }
                ids
            }
        };
        Ok(known.contains(key_id))
    }

    fn cached(&self, key_id: &str) -> Option<Arc<Cached>> {
        let cache = self.cache.read().unwrap_or_else(|p| p.into_inner());
        cache.get(key_id).map(Arc::clone)
    }

    async fn lookup(&self, key_id: &str) -> Result<Option<Arc<Cached>>, DbError> {
        let generation = self.generation.load(Ordering::SeqCst);
        if let Some(hit) = self.cached(key_id) {
            return Ok(Some(hit));
        }
        if !self.exists(key_id).await? {
            return Ok(None);
        }
        // One load per key at a time: the others wait, then find it cached.
        let lock = {
            let mut loading = self.loading_keys.lock().unwrap_or_else(|p| p.into_inner());
            Arc::clone(loading.entry(key_id.to_owned()).or_default())
        };
        let guard = lock.lock().await;
        let found = self.load(key_id, generation).await;
        drop(guard);
        let mut loading = self.loading_keys.lock().unwrap_or_else(|p| p.into_inner());
        // The last one out removes the entry (held by the map and this request only).
        if Arc::strong_count(&lock) == 2 {
            loading.remove(key_id);
        }
        found
    }

    /// Key `key_id` from the cache (loaded by a request this one waited for) or the
    /// database, cached unless a change was noticed since `generation`.
    async fn load(&self, key_id: &str, generation: u64) -> Result<Option<Arc<Cached>>, DbError> {
        if let Some(hit) = self.cached(key_id) {
            return Ok(Some(hit));
        }
        self.key_reads.fetch_add(1, Ordering::Relaxed);
        let Some(record) = accounts::load_key(&self.db, key_id).await? else {
            return Ok(None);
        };
        let cached = Arc::new(Cached {
            principal: Arc::new(Principal {
                account_id: record.account_id,
                account: Arc::from(record.account.as_str()),
                grants: record.grants.clone(),
                limits: record.limits,
                credential: Credential::Key(Arc::from(record.id.as_str())),
            }),
            record,
        });
        let mut cache = self.cache.write().unwrap_or_else(|p| p.into_inner());
        // A change noticed while loading may have made this record stale: don't keep it.
        if self.generation.load(Ordering::SeqCst) == generation {
            cache.insert(key_id.to_owned(), Arc::clone(&cached));
            self.keys_charge.entries(cache.len());
        }
        Ok(Some(cached))
    }

    /// The caller a `Service-Engine-Authorizer` value identifies: an API key, or
    /// `Bearer <JWT>`.
    pub async fn authenticate(&self, token: Option<&str>) -> Result<Arc<Principal>, AuthError> {
        let token = token.ok_or(AuthError::Unauthorized)?;
        if let Some(jwt) = bearer(token) {
            return self.authenticate_bearer(jwt).await;
        }
        let presented = keys::parse(token).ok_or(AuthError::Unauthorized)?;
        self.follow_changes().await?;
        let cached = self
            .lookup(presented.id)
            .await?
            .ok_or(AuthError::Unauthorized)?;
        let record = &cached.record;
        let valid = record.env == presented.env
            && keys::verify(presented.secret, &record.secret_hash)
            && !record.revoked
            && record.expires_at.is_none_or(|at| self.clock.now_ms() < at);
        if valid {
            Ok(Arc::clone(&cached.principal))
        } else {
            Err(AuthError::Unauthorized)
        }
    }
}

/// The token of a `Bearer <token>` value (the scheme is case-insensitive, RFC 6750).
fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|token| !token.is_empty())
}

impl Authenticator {
    /// A bearer token's principal: from the cache while the token holds, else verified
    /// and its account (which must exist) loaded.
    async fn authenticate_bearer(&self, jwt: &str) -> Result<Arc<Principal>, AuthError> {
        self.follow_changes().await?;
        let digest: [u8; 32] = Sha256::digest(jwt.as_bytes()).into();
        let now = self.clock.now_ms();
        if let Some(hit) = self
            .tokens
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&digest)
        {
            if now > hit.valid_until_ms {
                tracing::info!("bearer token refused: expired");
                return Err(AuthError::Unauthorized);
            }
            if now < hit.recheck_at_ms {
                return Ok(Arc::clone(&hit.principal));
            }
        }
        let generation = self.generation.load(Ordering::SeqCst);
        let identity = match self.sso.verify_bearer(jwt).await {
            Ok(identity) => identity,
            Err(super::sso::TokenError::Store(error)) => return Err(error.into()),
            Err(unavailable @ super::sso::TokenError::KeysUnavailable(_)) => {
                return Err(AuthError::Unavailable(unavailable.to_string()))
            }
            Err(reason) => {
                tracing::info!(?reason, "bearer token refused");
                return Err(AuthError::Unauthorized);
            }
        };
        let Some(account_id) = accounts::account_id(&self.db, &identity.account).await? else {
            tracing::info!(account = ?identity.account, idp = %identity.idp, "bearer token refused: its account does not exist");
            return Err(AuthError::Unauthorized);
        };
        let principal = Arc::new(Principal {
            account_id,
            account: Arc::from(identity.account.as_str()),
            grants: accounts::grants_of(&self.db, account_id).await?,
            limits: accounts::limits_of(&self.db, account_id).await?,
            credential: Credential::Token {
                idp: identity.idp,
                subject: identity.subject,
            },
        });
        let valid_until_ms = (identity.expires_at_s + LEEWAY_S).saturating_mul(1000);
        let mut tokens = self.tokens.write().unwrap_or_else(|p| p.into_inner());
        // A change noticed while verifying may have made this stale: don't keep it.
        if self.generation.load(Ordering::SeqCst) == generation {
            if tokens.len() >= MAX_CACHED_TOKENS {
                tokens.retain(|_, cached| now <= cached.valid_until_ms);
                if tokens.len() >= MAX_CACHED_TOKENS {
                    tokens.clear();
                }
            }
            tokens.insert(
                digest,
                CachedToken {
                    principal: Arc::clone(&principal),
                    valid_until_ms,
                    // While the issuer's set can't be fetched again, verified again at
                    // most as often as a fetch is tried.
                    recheck_at_ms: identity.verified_until_ms.map_or(i64::MAX, |due| {
                        due.max(now.saturating_add(super::sso::jwks::REFETCH_AFTER_MS))
                    }),
                },
            );
            self.tokens_charge.entries(tokens.len());
        }
        Ok(principal)
    }
}
