//! Where the log goes: stderr, written by a thread of its own.
//!
//! A request never waits on the log's I/O, and lines go out in batches. When stderr is a
//! regular file (`crosstab serve 2>>server.log`), the writer also flushes it to disk every
//! [`SYNC_EVERY`] bytes: at full load the access log grows by ~11 MB/s, and left to the
//! kernel's periodic writeback it went out in bursts of tens of MB that made the
//! ledger's commits on the same disk wait for tens of ms (the p99 spikes of the bench).

use std::fs::File;
use std::io::{self, BufWriter, Stderr, Write};
use std::os::fd::AsFd;

use tracing_appender::non_blocking::{NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::EnvFilter;

/// Bytes of log written between two flushes of a log file to disk.
const SYNC_EVERY: u64 = 1 << 20;

/// Starts logging with `default` as the filter (unless `RUST_LOG` says otherwise).
/// Lossless: when the writer falls behind, logging waits rather than drops a line (the
/// access log is what bills reconcile with). Keep the guard: dropping it writes out what
/// is queued.
pub fn init(default: &str) -> WorkerGuard {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let ansi = std::io::IsTerminal::is_terminal(&io::stderr());
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(false)
        .thread_name("crosstab-log")
        .finish(LogWriter::stderr());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(ansi)
        .try_init();
    guard
}

/// Buffered stderr; the log thread flushes it whenever its queue runs empty.
struct LogWriter {
    out: BufWriter<Stderr>,
    /// Stderr, when it is a regular file.
    file: Option<File>,
    unsynced: u64,
}

impl LogWriter {
    fn stderr() -> LogWriter {
        let file = io::stderr()
            .as_fd()
            .try_clone_to_owned()
            .map(File::from)
            .ok()
            .filter(|file| file.metadata().is_ok_and(|meta| meta.is_file()));
        LogWriter {
            out: BufWriter::with_capacity(64 * 1024, io::stderr()),
            file,
            unsynced: 0,
        }
    }
}

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let written = self.out.write(buf)?;
        self.unsynced += written as u64;
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()?;
        if let Some(file) = &self.file {
            if self.unsynced >= SYNC_EVERY {
                self.unsynced = 0;
                file.sync_data()?;
            }
        }
        Ok(())
    }
}
