//! Installed surveys in a data directory, and a catalog that follows replacements.
//!
//! Layout: `DATA_DIR/surveys/CODE.ctxs`. A survey is installed by writing a temporary
//! file beside its final name and renaming it over the old one, so a reader sees either
//! the old file or the new one, never a mix, and a failed import leaves nothing behind.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use crate::budget::MemoryBudget;
use crate::error::{ImportError, LoadError};
use crate::survey::Survey;

const EXTENSION: &str = "ctxs";

/// The surveys directory of a data dir.
#[derive(Debug, Clone)]
pub struct SurveyStore {
    dir: PathBuf,
}

impl SurveyStore {
    /// The store under `data_dir` (created if missing).
    pub fn open(data_dir: &Path) -> Result<SurveyStore, ImportError> {
        let dir = data_dir.join("surveys");
        std::fs::create_dir_all(&dir).map_err(|source| ImportError::Io {
            path: dir.display().to_string(),
            source,
        })?;
        Ok(SurveyStore { dir })
    }

    /// Path of the installed survey `code`.
    pub fn path_of(&self, code: &str) -> PathBuf {
        self.dir.join(format!("{code}.{EXTENSION}"))
    }

    /// Checks compiled bytes by loading them, then installs them atomically under
    /// their survey code (see [`persist`]). Returns the installed survey.
    pub fn install(&self, bytes: &[u8]) -> Result<Survey, ImportError> {
        self.install_checked(bytes, None)
    }

    /// [`SurveyStore::install`], refusing bytes whose survey is not `code` (bytes
    /// published under one code never replace another survey).
    pub fn install_as(&self, code: &str, bytes: &[u8]) -> Result<Survey, ImportError> {
        self.install_checked(bytes, Some(code))
    }

    fn install_checked(&self, bytes: &[u8], code: Option<&str>) -> Result<Survey, ImportError> {
        let survey = Survey::from_bytes(bytes).map_err(ImportError::compiled)?;
        if let Some(code) = code.filter(|code| *code != survey.code()) {
            return Err(ImportError::compiled(format!(
                "the survey is '{}', not '{code}'",
                survey.code()
            )));
        }
        let target = self.path_of(survey.code());
        let io = |source| ImportError::Io {
            path: target.display().to_string(),
            source,
        };
        let mut temp = installing(&self.dir).map_err(io)?;
        temp.write_all(bytes).map_err(io)?;
        temp.as_file().sync_all().map_err(io)?;
        // Dropping `temp` on any error removes it: nothing half-imported stays behind.
        persist(temp, &target)?;
        Ok(survey)
    }

    /// Codes of the installed surveys, sorted.
    pub fn codes(&self) -> Result<Vec<String>, ImportError> {
        let entries = std::fs::read_dir(&self.dir).map_err(|source| ImportError::Io {
            path: self.dir.display().to_string(),
            source,
        })?;
        let mut codes = Vec::new();
        for entry in entries {
            // An entry that can't be read fails the listing: skipping it would read as
            // that survey having been removed.
            let path = entry
                .map_err(|source| ImportError::Io {
                    path: self.dir.display().to_string(),
                    source,
                })?
                .path();
            if path.extension().is_some_and(|ext| ext == EXTENSION) {
                if let Some(code) = path.file_stem().and_then(|stem| stem.to_str()) {
                    codes.push(code.to_owned());
                }
            }
        }
        codes.sort();
        Ok(codes)
    }

    /// Opens the installed survey `code`.
    pub fn load(&self, code: &str) -> Result<Survey, LoadError> {
        Survey::open(&self.path_of(code))
    }
}

/// What identifies one version of an installed file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
    #[cfg(unix)]
    inode: u64,
    /// The inode's change time, which no tool can set back: a refused file rewritten in
    /// place with its length and modification time kept (repaired by `rsync --inplace`,
    /// say) is seen by it. It also moves on a `chmod` or a new hard link (a backup's), so
    /// a served file's version is told without it ([`Stamp::same_version`]).
    #[cfg(unix)]
    changed: (i64, i64),
}

impl Stamp {
    fn of(path: &Path) -> Option<Stamp> {
        let meta = std::fs::metadata(path).ok()?;
        Some(Stamp {
            len: meta.len(),
            modified: meta.modified().ok(),
            #[cfg(unix)]
            inode: std::os::unix::fs::MetadataExt::ino(&meta),
            #[cfg(unix)]
            changed: {
                use std::os::unix::fs::MetadataExt as _;
                (meta.ctime(), meta.ctime_nsec())
            },
        })
    }

    /// Whether `other` is the same version of a served file: the change time aside, so
    /// its owner, mode or links changing do not reload it (a served file is read through
    /// its map, which sees a rewrite in place anyway).
    fn same_version(&self, other: &Stamp) -> bool {
        #[cfg(unix)]
        if self.inode != other.inode {
            return false;
        }
        self.len == other.len && self.modified == other.modified
    }
}

/// A file a refresh could not load, and until when it is not tried again (`None`: until
/// it changes).
#[derive(Debug)]
struct Refused {
    stamp: Stamp,
    until: Option<Instant>,
}

/// What a refresh changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Refresh {
    /// Surveys loaded for the first time or replaced.
    pub loaded: Vec<String>,
    /// Surveys no longer installed.
    pub removed: Vec<String>,
    /// Surveys that failed to load, with why (the old version, if any, stays served).
    pub failed: Vec<(String, String)>,
    /// Why the store could not be listed, when it could not (then nothing changed).
    pub unlisted: Option<String>,
}

/// The loaded surveys of a store. Readers get an `Arc<Survey>`: a replacement swaps the
/// pointer, and requests already holding the old survey finish on it.
#[derive(Debug)]
pub struct Catalog {
    store: SurveyStore,
    surveys: RwLock<BTreeMap<String, (Arc<Survey>, Stamp)>>,
    /// Files that failed to load, as they were then: one whose bytes failed is tried
    /// again (and said again) only once it changes (on unix, a repair in place that keeps
    /// its length, time and inode too, by its change time), one that could not be read
    /// after [`Catalog::RETRY_UNREADABLE`]. So a damaged large file is not read
    /// whole every refresh. Held through a refresh: two at once would read files twice.
    refused: Mutex<BTreeMap<String, Refused>>,
    budget: Arc<MemoryBudget>,
}

impl Catalog {
    /// A catalog of `store`, loaded, every survey's caches drawing on one budget of
    /// [`Catalog::DEFAULT_BUDGET`] bytes.
    pub fn new(store: SurveyStore) -> (Catalog, Refresh) {
        Catalog::within(store, &MemoryBudget::new(Catalog::DEFAULT_BUDGET))
    }

    /// The cache budget of [`Catalog::new`].
    pub const DEFAULT_BUDGET: usize = 1 << 30;

    /// How long a file that could not be read (a disk's error, no memory) waits before
    /// it is read again.
    pub const RETRY_UNREADABLE: Duration = Duration::from_secs(60);

    /// A catalog of `store`, loaded, every survey's caches drawing on `budget`.
    pub fn within(store: SurveyStore, budget: &Arc<MemoryBudget>) -> (Catalog, Refresh) {
        let catalog = Catalog {
            store,
            surveys: RwLock::new(BTreeMap::new()),
            refused: Mutex::new(BTreeMap::new()),
            budget: Arc::clone(budget),
        };
        let refresh = catalog.refresh();
        (catalog, refresh)
    }

    /// The store this catalog follows.
    pub fn store(&self) -> &SurveyStore {
        &self.store
    }

    /// The current version of survey `code`.
    pub fn get(&self, code: &str) -> Option<Arc<Survey>> {
        let surveys = self
            .surveys
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        surveys.get(code).map(|(survey, _)| Arc::clone(survey))
    }

    /// Every loaded survey, by code.
    pub fn all(&self) -> Vec<Arc<Survey>> {
        let surveys = self
            .surveys
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        surveys
            .values()
            .map(|(survey, _)| Arc::clone(survey))
            .collect()
    }

    /// Loads new and replaced surveys, each checked whole against its checksum first, and
    /// drops removed ones. A file that fails keeps any older version served, and is said
    /// once, not again until it changes. A store that can't be listed changes nothing (an
    /// I/O error is not every survey being removed).
    pub fn refresh(&self) -> Refresh {
        let mut refused = self
            .refused
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut report = Refresh::default();
        let codes = match self.store.codes() {
            Ok(codes) => codes,
            Err(error) => {
                report.unlisted = Some(error.to_string());
                return report;
            }
        };
        let current: BTreeMap<String, Stamp> = {
            let surveys = self
                .surveys
                .read()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            surveys
                .iter()
                .map(|(code, (_, stamp))| (code.clone(), stamp.clone()))
                .collect()
        };
        refused.retain(|code, _| codes.contains(code));
        let mut updates = Vec::new();
        for code in &codes {
            let path = self.store.path_of(code);
            let Some(stamp) = Stamp::of(&path) else {
                continue;
            };
            let waits = refused.get(code).is_some_and(|refusal| {
                refusal.stamp == stamp && refusal.until.is_none_or(|until| Instant::now() < until)
            });
            if current
                .get(code)
                .is_some_and(|served| served.same_version(&stamp))
                || waits
            {
                continue;
            }
            let loaded = Survey::open_within(&path, &self.budget).and_then(|survey| {
                // Read whole once, here: a server reads the rest only as queries need it.
                survey.verify()?;
                Ok(survey)
            });
            match loaded {
                Ok(survey) if survey.code() == code => {
                    refused.remove(code);
                    // Before it is served, so no first query waits on it.
                    survey.prepare_sums();
                    updates.push((code.clone(), Arc::new(survey), stamp));
                }
                Ok(survey) => {
                    report.failed.push((
                        code.clone(),
                        format!("file holds survey '{}'", survey.code()),
                    ));
                    refused.insert(code.clone(), Refused { stamp, until: None });
                }
                Err(error) => {
                    // What the file holds fails as long as it is the same file; a failure
                    // to read it (the disk, memory, descriptors) may pass.
                    let until =
                        matches!(error, LoadError::Io { .. } | LoadError::OutOfMemory { .. })
                            .then(|| Instant::now() + Catalog::RETRY_UNREADABLE);
                    refused.insert(code.clone(), Refused { stamp, until });
                    report.failed.push((code.clone(), error.to_string()));
                }
            }
        }
        let mut surveys = self
            .surveys
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for (code, survey, stamp) in updates {
            report.loaded.push(code.clone());
            surveys.insert(code, (survey, stamp));
        }
        let gone: Vec<String> = surveys
            .keys()
            .filter(|c| !codes.contains(c))
            .cloned()
            .collect();
        for code in gone {
            surveys.remove(&code);
            report.removed.push(code);
        }
        report
    }
}

/// Renames `temp` over `target`, then syncs the directory holding both, so that an install
/// reported done is still there after a crash. If only that sync fails, the survey is in
/// place (a server may already answer from it) and the error says so.
/// A temporary file in `dir` to write a survey into before [`persist`] renames it into
/// place. Readable as any file the process makes (`0666` less the umask), not only by
/// its owner as temporary files are: a survey imported by an operator is served by
/// the server's own user.
pub(crate) fn installing(dir: &Path) -> std::io::Result<tempfile::NamedTempFile> {
    let mut builder = tempfile::Builder::new();
    builder.prefix(".installing-").suffix(".tmp");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(std::fs::Permissions::from_mode(0o666));
    }
    builder.tempfile_in(dir)
}

pub(crate) fn persist(temp: tempfile::NamedTempFile, target: &Path) -> Result<(), ImportError> {
    temp.persist(target).map_err(|e| ImportError::Io {
        path: target.display().to_string(),
        source: e.error,
    })?;
    let dir = match target.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    std::fs::File::open(dir)
        .and_then(|dir| dir.sync_all())
        .map_err(|source| ImportError::Io {
            path: dir.display().to_string(),
            source: std::io::Error::new(
                source.kind(),
                format!(
                    "{} is installed, but this directory could not be synced, so a crash \
                     may lose it: {source}",
                    target.display()
                ),
            ),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The demo survey of 50 respondents, compiled.
    fn demo_bytes() -> Vec<u8> {
        crate::demo::compile(&crate::demo::DemoConfig {
            respondents: 50,
            flags: 2,
            seed: 1,
        })
        .unwrap()
    }

    /// A survey is served with its sums' groundwork done: the check of its file's planes,
    /// or planes made from its weights when the file holds none.
    #[test]
    fn a_survey_is_served_with_its_sums_prepared() {
        let dir = tempfile::tempdir().unwrap();
        let store = SurveyStore::open(dir.path()).unwrap();
        // Fewer respondents than a block: its file holds no planes, so they are made.
        let bytes = demo_bytes();
        store.install(&bytes).unwrap();
        let (catalog, refresh) = Catalog::new(store);
        assert_eq!(refresh.loaded, ["DEMO"]);
        let survey = catalog.get("DEMO").unwrap();
        assert!(survey.sums_prepared());
        // Opened directly, nothing is done until a sum needs it.
        let direct = Survey::from_bytes(&bytes).unwrap();
        assert!(!direct.sums_prepared());
        direct.prepare_sums();
        assert!(direct.sums_prepared());
    }

    /// A survey's code names its file, so it is an identifier or the bytes are refused;
    /// bytes installed as one code never replace another survey; and the file is
    /// readable as any file the process makes, not its owner's alone.
    #[test]
    fn installs_stay_in_the_data_dir_under_their_own_code() {
        let dir = tempfile::tempdir().unwrap();
        let store = SurveyStore::open(dir.path()).unwrap();
        let bytes = demo_bytes();
        let refused = store.install_as("OTHER", &bytes).unwrap_err();
        assert!(
            refused.to_string().contains("is 'DEMO', not 'OTHER'"),
            "{refused}"
        );
        assert!(!store.path_of("OTHER").exists() && !store.path_of("DEMO").exists());
        store.install_as("DEMO", &bytes).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(store.path_of("DEMO"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(
                mode & 0o044,
                0o044,
                "{mode:o}: readable by group and others"
            );
        }
        // The same survey with the code "../x" in its header (JSON, same length).
        let at = bytes
            .windows(13)
            .position(|w| w == b"\"code\":\"DEMO\"")
            .unwrap();
        let mut escaping = bytes.clone();
        escaping[at..at + 13].copy_from_slice(b"\"code\":\"../x\"");
        assert!(crate::format::reseal(&mut escaping));
        let error = store.install(&escaping).unwrap_err();
        assert!(
            error.to_string().contains("is not an identifier"),
            "{error}"
        );
        assert!(!dir.path().join("x.ctxs").exists());
    }
}
