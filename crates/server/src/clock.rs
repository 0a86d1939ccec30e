//! Time, injectable: the server reads it through a [`Clock`] so tests can move it instead
//! of sleeping through expiry and lock-out periods.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// Unix milliseconds: the unit of every time column.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Now, in Unix milliseconds.
    fn now_ms(&self) -> i64;
}

/// The machine's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        now_ms()
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
}

/// The machine's time now, in Unix milliseconds (for records that only stamp a time).
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}
