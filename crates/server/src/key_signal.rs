//! The key signal: a counter, in a small file beside a SQLite database, that every change
//! to keys or grants bumps after committing it, so running servers (in this process or
//! another: the CLI) drop their cached keys on their very next request.
//!
//! Every party maps the file's first 8 bytes shared, so a server's per-request check is
//! one atomic load, without a system call (a `stat` of the file cost ~1 µs per request).
//! crosstab only ever changes the file through the map; should it be replaced anyway,
//! the key revision in the database, which a server reads every second, still catches
//! every change (see [`crate::auth`]). Like the survey files, it must not be truncated
//! under a running server.

use std::fs::OpenOptions;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes the counter takes at the start of the file.
const LEN: u64 = 8;

/// A mapped key signal file.
#[derive(Debug)]
pub struct KeySignal {
    map: memmap2::MmapRaw,
}

impl KeySignal {
    /// Maps the signal file at `path`, created (counter 0) if missing.
    pub fn open(path: &Path) -> io::Result<KeySignal> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        if file.metadata()?.len() < LEN {
            // Only a new (empty) file, or one of crosstab's older text stamps, is this short.
            file.set_len(LEN)?;
        }
        let map = memmap2::MmapOptions::new()
            .len(usize::try_from(LEN).unwrap_or(8))
            .map_raw(&file)?;
        Ok(KeySignal { map })
    }

    fn counter(&self) -> &AtomicU64 {
        let word = self.map.as_mut_ptr().cast::<AtomicU64>();
        // SAFETY: the map is LEN = 8 bytes, page-aligned (so aligned for a u64), shared,
        // alive as long as `self`, and only ever accessed atomically, here and in every
        // other process that maps the file.
        #[allow(unsafe_code)]
        unsafe {
            &*word
        }
    }

    /// The counter now.
    pub fn read(&self) -> u64 {
        self.counter().load(Ordering::Acquire)
    }

    /// Tells every reader that keys or grants changed (call it after the change commits).
    pub fn bump(&self) {
        self.counter().fetch_add(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two maps of one file stand for two processes (a server and the CLI).
    #[test]
    fn a_bump_through_one_map_is_read_through_another() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("crosstab.db-keys");
        let server = KeySignal::open(&path).unwrap();
        let before = server.read();
        let cli = KeySignal::open(&path).unwrap();
        cli.bump();
        assert_ne!(server.read(), before);
        let seen = server.read();
        drop(cli);
        KeySignal::open(&path).unwrap().bump();
        assert_ne!(server.read(), seen);
    }

    /// The text stamp an older crosstab wrote (shorter than 8 bytes) is taken over.
    #[test]
    fn a_short_older_file_is_taken_over() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("crosstab.db-keys");
        std::fs::write(&path, "17\n").unwrap();
        let signal = KeySignal::open(&path).unwrap();
        let before = signal.read();
        signal.bump();
        assert_eq!(signal.read(), before.wrapping_add(1));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), LEN);
    }
}
