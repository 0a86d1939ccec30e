//! Time, injectable: the server reads it through a [`Clock`] so tests can move it instead
//! of sleeping through expiry and lock-out periods.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Unix milliseconds: the unit of every time column.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Now, in Unix milliseconds.
    fn now_ms(&self) -> i64;

    /// Time since a fixed point, never going back: what rate limits pace by, since a
    /// wall clock set back by an hour would hold a paced caller off for that hour.
    fn monotonic(&self) -> Duration;
}

/// The machine's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        now_ms()
    }

    fn monotonic(&self) -> Duration {
        static ORIGIN: OnceLock<Instant> = OnceLock::new();
        ORIGIN.get_or_init(Instant::now).elapsed()
    }
}

/// A clock that moves only when told to (tests).
#[derive(Debug, Default)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    /// A clock standing at `now_ms`.
    pub fn at(now_ms: i64) -> Arc<ManualClock> {
        Arc::new(ManualClock(AtomicI64::new(now_ms)))
    }

    /// Moves the clock on by `ms`.
    pub fn advance(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }

    /// The Unix time itself: a test moves this clock forward only.
    fn monotonic(&self) -> Duration {
        Duration::from_millis(u64::try_from(self.now_ms()).unwrap_or(0))
    }
}

/// The machine's time now, in Unix milliseconds (for records that only stamp a time).
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}
