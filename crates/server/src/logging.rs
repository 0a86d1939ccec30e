//! Where the log goes: stderr, written by a thread of its own, in batches.
//!
//! A request never waits on the log's I/O: its line is appended to a shared buffer (one
//! short lock), and the log thread writes the buffer out [`BATCH_WINDOW`] after the first
//! line of a batch arrived: under load one wakeup and one `write` per window, not per
//! line. (A channel with the log thread woken per line cost the billed `POST`, whose
//! requests leave the CPU idle while their bills are flushed, ~1.6 µs per request more
//! than `GET /v1/docs`.)
//!
//! Lossless while the process runs: the access log is what bills reconcile with (its
//! `billed` fields, with the lines of bills whose client went away before the answer and
//! of commits whose outcome was unknown, add up to the ledger's bills). When [`MAX_PENDING`] bytes wait, logging
//! waits for the writer rather than drop a line, so a stalled stderr (a full pipe, a
//! stuck journald) stalls requests too; a stderr that would block is waited for; after
//! [`LogGuard`] is dropped and the queue written out, lines are written directly. Lines
//! are lost when stderr fails outright (a closed pipe, a full disk) and, up to
//! [`MAX_PENDING`] of them, when the process is killed outright (SIGKILL, the OOM killer):
//! the ledger, not the log, is the record of bills.
//!
//! When stderr is a regular file (`crosstab serve 2>>server.log`), the writer also
//! flushes it to disk every [`SYNC_EVERY`] bytes: at full load the access log grows by
//! ~11 MB/s, and left to the kernel's periodic writeback it went out in bursts of tens of
//! MB that made the ledger's commits on the same disk wait for tens of ms (the p99 spikes
//! of the bench).

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

/// How long the first line of a batch waits for others before the batch is written.
const BATCH_WINDOW: Duration = Duration::from_millis(2);
/// Bytes of log waiting for the writer beyond which logging waits for it.
const MAX_PENDING: usize = 8 << 20;
/// Bytes of log written between two flushes of a log file to disk.
const SYNC_EVERY: u64 = 1 << 20;

/// How lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// `key=value` text (colours at a terminal).
    Text,
    /// One JSON object a line (every value escaped by the encoder).
    Json,
}

/// Starts logging with `default` as the filter (unless `RUST_LOG` says otherwise), in
/// `format`. Keep the guard: dropping it writes out what is queued and stops the log
/// thread.
pub fn init(default: &str, format: LogFormat) -> LogGuard {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let ansi = io::IsTerminal::is_terminal(&io::stderr());
    let queue = Arc::new(Queue::new(write_stderr));
    let writer = {
        let queue = Arc::clone(&queue);
        std::thread::Builder::new()
            .name("crosstab-log".to_owned())
            .spawn(move || {
                let mut stderr = Stderr::new();
                queue.write_out(|batch| stderr.write(batch));
            })
    };
    let writer = match writer {
        Ok(thread) => Some(thread),
        Err(_) => {
            // No thread to be had: every line is written as it comes.
            queue.stop();
            None
        }
    };
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(LogSink(Arc::clone(&queue)));
    let _ = match format {
        LogFormat::Text => subscriber.with_ansi(ansi).try_init(),
        LogFormat::Json => subscriber.json().try_init(),
    };
    // A panic is a log line like any other (escaped, in the chosen format, in order with
    // the rest), not text the default hook writes straight to stderr.
    std::panic::set_hook(Box::new(|info| {
        let message = panic_message(info.payload());
        let location = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()));
        let thread = std::thread::current();
        tracing::error!(
            panic = ?message,
            location = location.as_deref().unwrap_or("-"),
            thread = thread.name().unwrap_or("-"),
            "panicked"
        );
    }));
    LogGuard { queue, writer }
}

/// A panic's message: its payload's text (`panic!` makes a `&str` or a `String`).
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|text| (*text).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a payload that is not text".to_owned())
}

/// Keeps the log thread running; dropping it writes out every queued line first.
#[derive(Debug)]
pub struct LogGuard {
    queue: Arc<Queue>,
    writer: Option<JoinHandle<()>>,
}

impl Drop for LogGuard {
    fn drop(&mut self) {
        self.queue.close();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

/// Lines waiting for the log thread.
struct Queue {
    pending: Mutex<Pending>,
    /// The log thread waits here for the first line of a batch (or the close).
    arrived: Condvar,
    /// Loggers wait here while [`MAX_PENDING`] bytes are queued.
    drained: Condvar,
    /// Where lines go once the log thread has stopped.
    direct: fn(&[u8]),
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue").finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct Pending {
    lines: Vec<u8>,
    /// The log thread is to write out what is queued, then stop.
    closing: bool,
    /// The log thread has written out everything queued and stopped: write directly.
    stopped: bool,
}

impl Queue {
    fn new(direct: fn(&[u8])) -> Queue {
        Queue {
            pending: Mutex::default(),
            arrived: Condvar::new(),
            drained: Condvar::new(),
            direct,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `line` (one whole event: the formatter writes each in one call).
    fn append(&self, line: &[u8]) {
        let mut pending = self.lock();
        while pending.lines.len() >= MAX_PENDING && !pending.stopped {
            pending = self
                .drained
                .wait(pending)
                .unwrap_or_else(PoisonError::into_inner);
        }
        if pending.stopped {
            // Everything queued is out already; under the lock, direct lines keep their order.
            (self.direct)(line);
            return;
        }
        let first = pending.lines.is_empty();
        pending.lines.extend_from_slice(line);
        drop(pending);
        if first {
            self.arrived.notify_one();
        }
    }

    /// Stops the log thread once what is queued is written; later lines go out directly.
    fn close(&self) {
        self.lock().closing = true;
        self.arrived.notify_all();
    }

    /// Without a log thread: every line goes out directly.
    fn stop(&self) {
        let mut pending = self.lock();
        pending.closing = true;
        pending.stopped = true;
    }

    /// The log thread: a batch per [`BATCH_WINDOW`] to `out` while lines come, until
    /// closed and everything queued is written.
    fn write_out(&self, mut out: impl FnMut(&[u8])) {
        let mut batch = Vec::new();
        loop {
            let mut pending = self.lock();
            while pending.lines.is_empty() && !pending.closing {
                pending = self
                    .arrived
                    .wait(pending)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            if pending.lines.is_empty() {
                // Closing, and every line queued before is out.
                pending.stopped = true;
                drop(pending);
                self.drained.notify_all();
                return;
            }
            if !pending.closing {
                // Let the batch fill.
                drop(pending);
                std::thread::sleep(BATCH_WINDOW);
                pending = self.lock();
            }
            std::mem::swap(&mut pending.lines, &mut batch);
            drop(pending);
            self.drained.notify_all();
            out(&batch);
            batch.clear();
        }
    }
}

/// The subscriber's writer: appends each line to the queue.
#[derive(Debug)]
struct LogSink(Arc<Queue>);

impl<'a> MakeWriter<'a> for LogSink {
    type Writer = &'a Queue;

    fn make_writer(&'a self) -> &'a Queue {
        &self.0
    }
}

impl Write for &Queue {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.append(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Writes `bytes` to stderr whole: a stderr that would block (a non-blocking pipe that is
/// full) is waited for; one that fails outright drops them, as there is nowhere left to
/// say so.
fn write_stderr(mut bytes: &[u8]) {
    let mut stderr = io::stderr().lock();
    while !bytes.is_empty() {
        match stderr.write(bytes) {
            Ok(0) => return,
            Ok(written) => bytes = &bytes[written..],
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(_) => return,
        }
    }
}

/// Stderr, flushed to disk every [`SYNC_EVERY`] bytes when it is a regular file.
struct Stderr {
    /// Stderr, when it is a regular file.
    file: Option<File>,
    unsynced: u64,
}

impl Stderr {
    fn new() -> Stderr {
        let file = io::stderr()
            .as_fd()
            .try_clone_to_owned()
            .map(File::from)
            .ok()
            .filter(|file| file.metadata().is_ok_and(|meta| meta.is_file()));
        Stderr { file, unsynced: 0 }
    }

    /// Writes `batch` (see [`write_stderr`]).
    fn write(&mut self, batch: &[u8]) {
        write_stderr(batch);
        self.unsynced += batch.len() as u64;
        if let Some(file) = &self.file {
            if self.unsynced >= SYNC_EVERY {
                self.unsynced = 0;
                let _ = file.sync_data();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines from several threads, against a slow writer (so loggers also wait on a full
    /// queue): every line comes out once, whole, and each thread's in its order.
    #[test]
    fn every_line_comes_out_once_whole_and_in_order() {
        const THREADS: usize = 4;
        const LINES: usize = 20_000;
        let queue = Arc::new(Queue::new(write_stderr));
        let out = Arc::new(Mutex::new(Vec::new()));
        let writer = {
            let (queue, out) = (Arc::clone(&queue), Arc::clone(&out));
            std::thread::spawn(move || {
                queue.write_out(|batch| {
                    std::thread::sleep(Duration::from_micros(200));
                    out.lock().unwrap().extend_from_slice(batch);
                });
            })
        };
        let loggers: Vec<_> = (0..THREADS)
            .map(|thread| {
                let queue = Arc::clone(&queue);
                std::thread::spawn(move || {
                    for line in 0..LINES {
                        // Long lines, so the queue fills up past MAX_PENDING at times.
                        let text = format!("{thread} {line} {}\n", "x".repeat(400));
                        (&*queue).write_all(text.as_bytes()).unwrap();
                    }
                })
            })
            .collect();
        for logger in loggers {
            logger.join().unwrap();
        }
        queue.close();
        writer.join().unwrap();
        let out = String::from_utf8(out.lock().unwrap().clone()).unwrap();
        let mut next = [0; THREADS];
        for line in out.lines() {
            let mut words = line.split(' ');
            let thread: usize = words.next().unwrap().parse().unwrap();
            let number: usize = words.next().unwrap().parse().unwrap();
            assert_eq!(words.next().map(str::len), Some(400), "a whole line");
            assert_eq!(number, next[thread], "thread {thread}'s lines in order");
            next[thread] += 1;
        }
        assert_eq!(next, [LINES; THREADS], "every line, once");
    }

    /// Closing while a logger keeps logging: what was queued is written out first, then
    /// the logger's later lines go out directly, all in order, none lost.
    #[test]
    fn lines_around_the_close_keep_their_order() {
        static OUT: Mutex<Vec<u8>> = Mutex::new(Vec::new());
        fn to_out(bytes: &[u8]) {
            OUT.lock().unwrap().extend_from_slice(bytes);
        }
        const LINES: usize = 50_000;
        let queue = Arc::new(Queue::new(to_out));
        let writer = {
            let queue = Arc::clone(&queue);
            std::thread::spawn(move || queue.write_out(to_out))
        };
        let logged = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let logger = {
            let (queue, logged) = (Arc::clone(&queue), Arc::clone(&logged));
            std::thread::spawn(move || {
                for line in 0..LINES {
                    (&*queue).write_all(format!("{line}\n").as_bytes()).unwrap();
                    logged.store(line, std::sync::atomic::Ordering::Relaxed);
                }
            })
        };
        // Close mid-stream, with lines queued and the writer likely in its batch window.
        while logged.load(std::sync::atomic::Ordering::Relaxed) < LINES / 4 {
            std::thread::yield_now();
        }
        queue.close();
        writer.join().unwrap();
        logger.join().unwrap();
        let out = String::from_utf8(OUT.lock().unwrap().clone()).unwrap();
        let numbers: Vec<usize> = out.lines().map(|l| l.parse().unwrap()).collect();
        assert_eq!(numbers, (0..LINES).collect::<Vec<_>>());
    }
}
