//! The key signal: a counter, in a small file beside a SQLite database, that every change
//! to keys or grants bumps after committing it, so running servers (in this process or
//! another: the CLI) drop their cached keys on their very next request.
//!
//! Every party maps the file's first 8 bytes shared, so a server's per-request check is
//! one atomic load, without a system call (a `stat` of the file cost ~1 µs per request).
//! crosstab only ever changes the file through the map. Should it be replaced anyway (by
//! an older crosstab, which wrote a new file each time, or by hand), a server notices
//! within a second, maps the new file and drops its cache; meanwhile the key revision in
//! the database, read every second too, catches every change (see the authenticator). Like
//! the survey files, it must not be truncated under a running server. A user who may
//! only read the file (the server and the CLI run as different users) reads it, and
//! their changes are noticed through the revision instead.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes the counter takes at the start of the file.
const LEN: u64 = 8;

/// A mapped key signal file.
#[derive(Debug)]
pub struct KeySignal {
    map: memmap2::MmapRaw,
    /// Mapped for writing too (else [`KeySignal::bump`] refuses).
    writable: bool,
    /// The mapped file's (device, inode): a file replaced at the path is another one.
    identity: (u64, u64),
}

impl KeySignal {
    /// Maps the signal file at `path`, created (counter 0) if missing; read-only when this
    /// user may only read it.
    pub fn open(path: &Path) -> io::Result<KeySignal> {
        let opened = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path);
        match opened {
            Ok(file) => KeySignal::map(&file, true),
            Err(error)
                if matches!(
                    error.kind(),
                    io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem
                ) =>
            {
                KeySignal::open_read_only(path)
            }
            Err(error) => Err(error),
        }
    }

    /// Maps the existing signal file at `path` for reading only.
    pub fn open_read_only(path: &Path) -> io::Result<KeySignal> {
        KeySignal::map(&File::open(path)?, false)
    }

    fn map(file: &File, writable: bool) -> io::Result<KeySignal> {
        let meta = file.metadata()?;
        if meta.len() < LEN {
            if !writable {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "the key signal file is too short and may not be written",
                ));
            }
            // Only a new (empty) file is this short.
            file.set_len(LEN)?;
        }
        let mut options = memmap2::MmapOptions::new();
        options.len(usize::try_from(LEN).unwrap_or(8));
        let map = if writable {
            options.map_raw(file)?
        } else {
            options.map_raw_read_only(file)?
        };
        Ok(KeySignal {
            map,
            writable,
            identity: (meta.dev(), meta.ino()),
        })
    }

    fn counter(&self) -> &AtomicU64 {
        let word = self.map.as_mut_ptr().cast::<AtomicU64>();
        // SAFETY: the map is LEN = 8 bytes at offset 0, so page-aligned (aligned for a
        // u64), shared, alive as long as `self`, and only ever accessed atomically, here
        // and in every other process that maps the file; a read-only map is only loaded.
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
    pub fn bump(&self) -> io::Result<()> {
        if !self.writable {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "the key signal file is read-only for this user",
            ));
        }
        self.counter().fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Whether `path` still names the mapped file (not one that replaced it, or none).
    pub fn is_file_at(&self, path: &Path) -> bool {
        std::fs::metadata(path).is_ok_and(|meta| (meta.dev(), meta.ino()) == self.identity)
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
        cli.bump().unwrap();
        assert_ne!(server.read(), before);
        let seen = server.read();
        drop(cli);
        KeySignal::open(&path).unwrap().bump().unwrap();
        assert_ne!(server.read(), seen);
    }

    /// The text stamp an older crosstab wrote (a new file per change, ~20 bytes) is taken
    /// over in place; a file replaced at the path is told apart from the mapped one.
    #[test]
    fn an_older_file_is_taken_over_and_a_replaced_one_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("crosstab.db-keys");
        std::fs::write(&path, "1763700000123456789\n").unwrap();
        let signal = KeySignal::open(&path).unwrap();
        let before = signal.read();
        signal.bump().unwrap();
        assert_eq!(signal.read(), before.wrapping_add(1));
        assert!(signal.is_file_at(&path));
        // What an older crosstab did on every change: write a new file, rename it over.
        let temp = dir.path().join("crosstab.db-keys.tmp");
        std::fs::write(&temp, "1763700000987654321\n").unwrap();
        std::fs::rename(&temp, &path).unwrap();
        assert!(!signal.is_file_at(&path));
        std::fs::remove_file(&path).unwrap();
        assert!(!signal.is_file_at(&path));
    }

    /// A user who may only read the file (how `open` falls back) still reads it, and may
    /// not bump it.
    #[test]
    fn a_read_only_map_reads_but_does_not_bump() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("crosstab.db-keys");
        let owner = KeySignal::open(&path).unwrap();
        owner.bump().unwrap();
        let reader = KeySignal::open_read_only(&path).unwrap();
        assert_eq!(reader.read(), owner.read());
        assert!(reader.bump().is_err());
        owner.bump().unwrap();
        assert_eq!(reader.read(), owner.read());
        // A file too short to hold the counter is refused, not mapped past its end.
        let short = dir.path().join("short");
        std::fs::write(&short, "1\n").unwrap();
        assert!(KeySignal::open_read_only(&short).is_err());
    }
}
