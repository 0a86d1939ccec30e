//! Surveys shared through PostgreSQL: `crosstab survey import --database postgres://...`
//! publishes the compiled file there; every server copies each published survey into its
//! own data dir (the copy checked against the published SHA-256, then installed by the
//! engine's store: written to a temporary file and renamed, so a survey is never changed
//! under a memory map) and serves it from its catalog, on start, on each announcement and
//! every few seconds.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use crosstab_engine::import::is_identifier;
use crosstab_engine::store::{Catalog, Refresh, SurveyStore};
use crosstab_engine::ImportError;
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
    /// The blob each survey was last dealt with at: installed, already there, or refused
    /// (from a newer build, or damaged). Not fetched again until its survey is published
    /// anew.
    settled: Mutex<HashMap<String, String>>,
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
            settled: Mutex::new(HashMap::new()),
            round: tokio::sync::Mutex::new(()),
        }
    }

    /// Brings every published survey's local copy up to date; returns the codes copied.
    /// A survey this build cannot install, or that fails to copy (the database or the
    /// data dir failing), is logged and skipped, any older copy staying served (a failed
    /// one is tried again next round): one survey must not keep a replica from copying
    /// the others, or from starting. Only failing to list the surveys is an error.
    pub async fn sync(&self) -> Result<Vec<String>, ServiceError> {
        let _round = self.round.lock().await;
        let mut copied = Vec::new();
        for published in surveys::list(&self.db).await? {
            let settled = self
                .settled
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&published.code)
                .cloned();
            if settled.as_deref() == Some(published.sha256.as_str()) {
                continue;
            }
            match self.copy(&published).await {
                Ok(Outcome::Installed) => copied.push(published.code.clone()),
                Ok(Outcome::Unchanged) => {}
                Ok(Outcome::Gone) => continue,
                Err(error) => {
                    tracing::warn!(
                        survey = %published.code,
                        sha256 = %published.sha256,
                        %error,
                        "a survey published in the database was not copied; tried again next round"
                    );
                    continue;
                }
                Ok(Outcome::Refused(reason)) => {
                    tracing::error!(
                        survey = %published.code,
                        sha256 = %published.sha256,
                        %reason,
                        "a survey published in the database was not installed (compiled by a newer build, or damaged?); any older copy stays served"
                    );
                }
            }
            self.settled
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(published.code, published.sha256);
        }
        if !copied.is_empty() {
            let catalog = Arc::clone(&self.catalog);
            let refresh = tokio::task::spawn_blocking(move || catalog.refresh())
                .await
                .map_err(|error| ServiceError::Internal(format!("catalog refresh: {error}")))?;
            // Said here: the catalog says a failing file once, to whichever refresh met it.
            log_refresh(&refresh);
        }
        Ok(copied)
    }

    /// Installs `published` unless the local file is that blob already.
    async fn copy(&self, published: &Published) -> Result<Outcome, ServiceError> {
        // The code names a file in the data dir: never a path.
        if !is_identifier(&published.code) {
            return Ok(Outcome::Refused("its code is not an identifier".into()));
        }
        let local = self.store.path_of(&published.code);
        let want = published.sha256.clone();
        let same =
            tokio::task::spawn_blocking(move || file_sha256(&local).is_some_and(|sha| sha == want))
                .await
                .map_err(|error| ServiceError::Internal(format!("hashing task: {error}")))?;
        if same {
            return Ok(Outcome::Unchanged);
        }
        let Some(blob) = surveys::fetch(&self.db, &published.sha256).await? else {
            return Ok(Outcome::Gone);
        };
        let store = self.store.clone();
        let want = published.sha256.clone();
        let code = published.code.clone();
        let installed = tokio::task::spawn_blocking(move || {
            let got = to_hex(&Sha256::digest(&blob));
            if got != want {
                return Ok(Outcome::Refused(format!("the blob hashes to {got}")));
            }
            match store.install_as(&code, &blob) {
                Ok(_) => Ok(Outcome::Installed),
                // The data dir failing is this machine's trouble, not the survey's.
                Err(error @ ImportError::Io { .. }) => Err(ServiceError::Internal(format!(
                    "survey not installed: {error}"
                ))),
                Err(error) => Ok(Outcome::Refused(error.to_string())),
            }
        })
        .await
        .map_err(|error| ServiceError::Internal(format!("install task: {error}")))??;
        if matches!(installed, Outcome::Installed) {
            tracing::info!(survey = %published.code, sha256 = %published.sha256, "survey copied from the database");
        }
        Ok(installed)
    }
}

/// Runs copy rounds one after another when nudged, beside whatever nudges it (so a long
/// copy never holds back the changes that follow it); nudges that arrive during a round
/// make one more round, not one each. Stops when dropped.
#[derive(Debug)]
pub struct Copier {
    nudge: Arc<tokio::sync::Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl Copier {
    /// Starts the task copying into `copies`.
    pub fn spawn(copies: Arc<SurveyCopies>) -> Copier {
        let nudge = Arc::new(tokio::sync::Notify::new());
        let nudged = Arc::clone(&nudge);
        let task = tokio::spawn(async move {
            loop {
                nudged.notified().await;
                if let Err(error) = copies.sync().await {
                    tracing::warn!(%error, "published surveys not copied");
                }
            }
        });
        Copier { nudge, task }
    }

    /// Asks for a round (now, or after the one running).
    pub fn nudge(&self) {
        self.nudge.notify_one();
    }
}

impl Drop for Copier {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What a round did with one published survey.
enum Outcome {
    /// Installed in the data dir.
    Installed,
    /// The local copy is that blob already.
    Unchanged,
    /// The blob was replaced meanwhile: nothing settled, so the next round (or the one
    /// the replacement announces) copies whatever the survey is then, even if it is
    /// this blob again.
    Gone,
    /// Not installed, and why: the file is one this build cannot read, or not the blob
    /// published. (A data dir that fails to take it is an error of the round instead.)
    Refused(String),
}

/// The SHA-256 of the file at `path`, hex (`None` if it cannot be read).
fn file_sha256(path: &Path) -> Option<String> {
    let mut file = std::fs::File::open(path).ok()?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher).ok()?;
    Some(to_hex(&hasher.finalize()))
}

/// Logs what a catalog refresh changed, and what it could not load.
pub fn log_refresh(refresh: &Refresh) {
    for code in &refresh.loaded {
        tracing::info!(survey = %code, "survey loaded");
    }
    for code in &refresh.removed {
        tracing::info!(survey = %code, "survey removed");
    }
    if let Some(reason) = &refresh.unlisted {
        tracing::warn!(%reason, "surveys not listed; every loaded survey stays served");
    }
    for (code, reason) in &refresh.failed {
        tracing::warn!(survey = %code, %reason, "survey failed to load; any older version stays served");
    }
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
    // A file damaged on this disk would be refused by every replica: said here instead.
    let (bytes, loaded) = tokio::task::spawn_blocking(move || {
        let loaded = crosstab_engine::Survey::from_bytes(&bytes).map(drop);
        (bytes, loaded)
    })
    .await
    .map_err(|error| ServiceError::Internal(format!("checking {code}: {error}")))?;
    loaded.map_err(|error| {
        ServiceError::Internal(format!(
            "{} not published: {error} (import it again)",
            path.display()
        ))
    })?;
    let sha256 = to_hex(&Sha256::digest(&bytes));
    surveys::publish(db, code, &sha256, &bytes, now).await?;
    Ok(sha256)
}
