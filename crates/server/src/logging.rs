//! Where the log goes: stderr, written by a thread of its own, in batches.
//!
//! A request never waits on the log's I/O: its line is appended to a shared buffer (one
//! short lock), and the log thread writes the buffer out [`BATCH_WINDOW`] after the first
//! line of a batch arrived: under load one wakeup and one `write` per window, not per
//! line. (A channel with the log thread woken per line cost the billed `POST`, whose
//! requests leave the CPU idle while their bills are flushed, ~1.6 µs per request more
//! than `GET /v1/docs`.)
//!
//! Lossless: the access log is what bills reconcile with. When [`MAX_PENDING`] bytes wait,
//! logging waits for the writer rather than drop a line; after [`LogGuard`] is dropped,
//! lines are written directly.
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

/// Starts logging with `default` as the filter (unless `RUST_LOG` says otherwise). Keep
/// the guard: dropping it writes out what is queued and stops the log thread.
pub fn init(default: &str) -> LogGuard {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let ansi = io::IsTerminal::is_terminal(&io::stderr());
    let queue = Arc::new(Queue::default());
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
            queue.close();
            None
        }
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(LogSink(Arc::clone(&queue)))
        .with_ansi(ansi)
        .try_init();
    LogGuard { queue, writer }
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
#[derive(Debug, Default)]
struct Queue {
    pending: Mutex<Pending>,
    /// The log thread waits here for the first line of a batch (or the close).
    arrived: Condvar,
    /// Loggers wait here while [`MAX_PENDING`] bytes are queued.
    drained: Condvar,
}

#[derive(Debug, Default)]
struct Pending {
    lines: Vec<u8>,
    /// The log thread has stopped, or is writing its last batch: write directly.
    closed: bool,
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `line` (one whole event: the formatter writes each in one call).
    fn append(&self, line: &[u8]) {
        let mut pending = self.lock();
        while pending.lines.len() >= MAX_PENDING && !pending.closed {
            pending = self
                .drained
                .wait(pending)
                .unwrap_or_else(PoisonError::into_inner);
        }
        if pending.closed {
            // Written under the lock, so lines keep their order with the last batch.
            let _ = io::stderr().write_all(line);
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
        self.lock().closed = true;
        self.arrived.notify_all();
        self.drained.notify_all();
    }

    /// The log thread: a batch per [`BATCH_WINDOW`] to `out` while lines come, until
    /// closed.
    fn write_out(&self, mut out: impl FnMut(&[u8])) {
        let mut batch = Vec::new();
        loop {
            let mut pending = self.lock();
            while pending.lines.is_empty() && !pending.closed {
                pending = self
                    .arrived
                    .wait(pending)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            if !pending.closed {
                // Let the batch fill.
                drop(pending);
                std::thread::sleep(BATCH_WINDOW);
                pending = self.lock();
            }
            std::mem::swap(&mut pending.lines, &mut batch);
            if pending.closed {
                // The last batch: written under the lock, before any direct write.
                out(&batch);
                return;
            }
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

    /// Writes `batch`; a failure is dropped (there is nowhere left to report it).
    fn write(&mut self, batch: &[u8]) {
        if io::stderr().write_all(batch).is_err() {
            return;
        }
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
        let queue = Arc::new(Queue::default());
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

    /// Closing writes out what is queued even while the writer waits out a batch window.
    #[test]
    fn closing_writes_out_the_queued_lines() {
        let queue = Arc::new(Queue::default());
        let out = Arc::new(Mutex::new(Vec::new()));
        let writer = {
            let (queue, out) = (Arc::clone(&queue), Arc::clone(&out));
            std::thread::spawn(move || {
                queue.write_out(|b| out.lock().unwrap().extend_from_slice(b))
            })
        };
        (&*queue).write_all(b"last words\n").unwrap();
        queue.close();
        writer.join().unwrap();
        assert_eq!(out.lock().unwrap().as_slice(), b"last words\n");
    }
}
