//! Surveys shared through PostgreSQL: `crosstab survey import --database postgres://...`
//! publishes the compiled file there; every server copies each published survey into its
//! own data dir (the copy checked against the published SHA-256, then installed by the
//! engine's store: written to a temporary file and renamed, so a survey is never changed
//! under a memory map) and serves it from its catalog, on start, on each announcement and
//! every few seconds.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use crosstab_engine::store::{Catalog, SurveyStore};
use sha2::{Digest, Sha256};

use super::ServiceError;
use crate::keys::to_hex;
use crate::store::surveys::{self, Published};
use crate::store::Database;

/// Copies published surveys into this server's data dir.
#[derive(Debug)]
pub struct SurveyCopies {
    db: Database,
    store: SurveyStore,
    catalog: Arc<Catalog>,
    /// The blob each survey's local copy holds.
    held: Mutex<HashMap<String, String>>,
    /// One copy round at a time.
    round: tokio::sync::Mutex<()>,
}

impl SurveyCopies {
    /// Copies from `db` into `store`, which `catalog` serves.
    pub fn new(db: Database, store: SurveyStore, catalog: Arc<Catalog>) -> SurveyCopies {
        SurveyCopies {
            db,
            store,
            catalog,
            held: Mutex::new(HashMap::new()),
            round: tokio::sync::Mutex::new(()),
        }
    }

    /// Brings every published survey's local copy up to date; returns the codes copied.
    pub async fn sync(&self) -> Result<Vec<String>, ServiceError> {
        let _round = self.round.lock().await;
        let mut copied = Vec::new();
        for published in surveys::list(&self.db).await? {
            let held = self
                .held
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&published.code)
                .cloned();
            if held.as_deref() == Some(published.sha256.as_str()) {
                continue;
            }
            if self.copy(&published).await? {
                copied.push(published.code.clone());
            }
            self.held
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(published.code, published.sha256);
        }
        if !copied.is_empty() {
            let catalog = Arc::clone(&self.catalog);
            tokio::task::spawn_blocking(move || catalog.refresh())
                .await
                .map_err(|error| ServiceError::Internal(format!("catalog refresh: {error}")))?;
        }
        Ok(copied)
    }

    /// Installs `published` unless the local file is that blob already; whether it did.
    async fn copy(&self, published: &Published) -> Result<bool, ServiceError> {
        let local = self.store.path_of(&published.code);
        let want = published.sha256.clone();
        let same =
            tokio::task::spawn_blocking(move || file_sha256(&local).is_some_and(|sha| sha == want))
                .await
                .map_err(|error| ServiceError::Internal(format!("hashing task: {error}")))?;
        if same {
            return Ok(false);
        }
        let Some(blob) = surveys::fetch(&self.db, &published.sha256).await? else {
            // Replaced meanwhile: the next round copies the current one.
            return Ok(false);
        };
        let store = self.store.clone();
        let want = published.sha256.clone();
        tokio::task::spawn_blocking(move || {
            let got = to_hex(&Sha256::digest(&blob));
            if got != want {
                return Err(ServiceError::Internal(format!(
                    "a survey blob hashes to {got}, not {want}"
                )));
            }
            store
                .install(&blob)
                .map(|_| ())
                .map_err(|error| ServiceError::Internal(format!("survey not installed: {error}")))
        })
        .await
        .map_err(|error| ServiceError::Internal(format!("install task: {error}")))??;
        tracing::info!(survey = %published.code, sha256 = %published.sha256, "survey copied from the database");
        Ok(true)
    }
}

/// The SHA-256 of the file at `path`, hex (`None` if it cannot be read).
fn file_sha256(path: &Path) -> Option<String> {
    let mut file = std::fs::File::open(path).ok()?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher).ok()?;
    Some(to_hex(&hasher.finalize()))
}

/// Publishes the installed survey `code` of `store` to `db` for every server.
pub async fn publish(
    db: &Database,
    store: &SurveyStore,
    code: &str,
    now: i64,
) -> Result<String, ServiceError> {
    let path = store.path_of(code);
    let bytes = tokio::fs::read(&path)
        .await
        .map_err(|error| ServiceError::Internal(format!("{} not read: {error}", path.display())))?;
    let sha256 = to_hex(&Sha256::digest(&bytes));
    surveys::publish(db, code, &sha256, &bytes, now).await?;
    Ok(sha256)
}
