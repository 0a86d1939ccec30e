//! Time, injectable: the server reads it through a [`Clock`] so tests can move it instead
//! of sleeping through expiry and lock-out periods.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
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
#[derive(Default)]
pub struct ManualClock {
    now: AtomicI64,
    /// A move to make at the first reading once its condition holds.
    jump: Mutex<Option<Jump>>,
}

struct Jump {
    ms: i64,
    when: Box<dyn Fn() -> bool + Send + Sync>,
}

impl ManualClock {
    /// A clock standing at `now_ms`.
    pub fn at(now_ms: i64) -> Arc<ManualClock> {
        Arc::new(ManualClock {
            now: AtomicI64::new(now_ms),
            jump: Mutex::new(None),
        })
    }

    /// Moves the clock on by `ms`.
    pub fn advance(&self, ms: i64) {
        self.now.fetch_add(ms, Ordering::SeqCst);
    }

    /// Moves the clock on by `ms` at its first reading once `when` holds: time passing at
    /// a given point inside a request, whichever thread reads the clock next and however
    /// the threads are scheduled (a later call replaces a move not yet made). `when` runs
    /// at each reading, on the reading thread, under the clock's lock: it must be quick
    /// and take no lock (the service reads the clock under its own) nor read this clock.
    pub fn advance_once(&self, ms: i64, when: impl Fn() -> bool + Send + Sync + 'static) {
        *self.jump() = Some(Jump {
            ms,
            when: Box::new(when),
        });
    }

    fn jump(&self) -> MutexGuard<'_, Option<Jump>> {
        self.jump.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl std::fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManualClock")
            .field("now", &self.now)
            // Not waiting on the lock: `when` may be what is being formatted from.
            .field(
                "jump",
                &self
                    .jump
                    .try_lock()
                    .ok()
                    .map(|jump| jump.as_ref().map(|j| j.ms)),
            )
            .finish()
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        // Read under the lock: no reading after the move sees the time before it.
        let mut jump = self.jump();
        if let Some(Jump { ms, .. }) = jump.take_if(|jump| (jump.when)()) {
            self.advance(ms);
        }
        self.now.load(Ordering::SeqCst)
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
