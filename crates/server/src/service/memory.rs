//! Holds the process's anonymous resident memory (its heap, stacks and the sets kept on
//! pages of their own; not the mapped survey files) to `--cache-memory`.
//!
//! The caches count what they keep, but the process holds more than that: connections,
//! requests in flight, the database driver's page caches, and the allocator's slack
//! between the blocks the caches keep and free all day. None of it is a cache entry, and
//! all of it is resident. So ten times a second the server reads its resident memory and
//! gives the caches what the rest leaves: their limit becomes the configured bytes less
//! the largest excess (resident beyond what the caches count) of the last five minutes,
//! plus the most it grew there between two readings (it may grow as much again before the
//! next). The largest, not the latest: resident memory swings between readings, and
//! memory the caches free reaches the system a moment later. The limit falls at once
//! (evicting) but rises by a 256th of the configured bytes a reading at most (from an
//! eighth at the start, full in about 20 s): when load begins, the working memory it
//! brings is measured before the caches may fill the room it needs, and an excess that
//! comes back now and then finds the caches still short of the room it takes.

use std::collections::VecDeque;
use std::sync::Arc;

use crosstab_engine::MemoryBudget;

/// How often resident memory is read.
pub const READ_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// Excess readings the caches' limit allows for (five minutes of them).
const WINDOW: usize = 3000;

/// The limit rises by at most the configured bytes over this, a reading.
const RISE_DIVISOR: usize = 256;

/// The caches never get less than this share of the configured bytes, whatever the rest
/// of the process holds (below it they would keep too little to be of use).
const FLOOR_DIVISOR: usize = 8;

/// The configured bytes, the budget whose limit follows what the rest of the process
/// holds, and the recent excess readings.
#[derive(Debug)]
pub struct ResidentMemory {
    configured: usize,
    budget: Arc<MemoryBudget>,
    excess: VecDeque<usize>,
}

/// What one reading changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    /// Resident bytes beyond what the caches count: the largest of the window, plus the
    /// most it grew between two readings there.
    pub excess: usize,
    /// The caches' limit now.
    pub limit: usize,
    /// Whether the rest of the process alone holds more than the configured bytes allow
    /// it (the caches are at their floor and resident memory may exceed the setting).
    pub over: bool,
}

impl ResidentMemory {
    /// Holds the process to `budget`'s limit as configured now (lowering the limit to its
    /// floor, from which it rises as readings come).
    pub fn new(budget: &Arc<MemoryBudget>) -> ResidentMemory {
        let configured = budget.limit();
        budget.set_limit(configured / FLOOR_DIVISOR);
        ResidentMemory {
            configured,
            budget: Arc::clone(budget),
            excess: VecDeque::with_capacity(WINDOW),
        }
    }

    /// Takes a reading of the process's anonymous resident bytes and moves the caches'
    /// limit (evicting when it falls).
    pub fn observe(&mut self, resident: usize) -> Reading {
        if self.excess.len() == WINDOW {
            self.excess.pop_front();
        }
        self.excess
            .push_back(resident.saturating_sub(self.budget.used()));
        // The largest excess, and the most it grew between two readings: what it may
        // grow again before the next one.
        let largest = self.excess.iter().copied().max().unwrap_or(0);
        let growth = self
            .excess
            .iter()
            .zip(self.excess.iter().skip(1))
            .map(|(before, after)| after.saturating_sub(*before))
            .max()
            .unwrap_or(0);
        let excess = largest.saturating_add(growth);
        let floor = self.configured / FLOOR_DIVISOR;
        let room = self.configured.saturating_sub(excess).max(floor);
        let rise = self.configured / RISE_DIVISOR;
        let limit = room.min(self.budget.limit().saturating_add(rise));
        self.budget.set_limit(limit);
        Reading {
            excess,
            limit,
            over: excess > self.configured - floor,
        }
    }
}

/// The process's anonymous resident bytes (`RssAnon` of `/proc/self/status`); `None`
/// where the system does not say.
pub fn resident_anonymous() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    bytes_of(&status, "RssAnon")
}

/// The machine's memory (`MemTotal` of `/proc/meminfo`), or why it is unknown.
pub fn machine_memory() -> Result<usize, String> {
    let info = std::fs::read_to_string("/proc/meminfo").map_err(|e| e.to_string())?;
    bytes_of(&info, "MemTotal").ok_or_else(|| "no MemTotal in /proc/meminfo".to_owned())
}

/// The bytes of a `Name:   123 kB` line of a `/proc` file.
fn bytes_of(text: &str, name: &str) -> Option<usize> {
    let kib: usize = text
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;
    /// The most a 64 MiB budget's limit rises a reading.
    const STEP: usize = 64 * MIB / RISE_DIVISOR;

    /// A budget of 64 MiB whose limit has risen as far as `resident` allows.
    fn risen(resident: usize) -> (Arc<MemoryBudget>, ResidentMemory) {
        let budget = MemoryBudget::new(64 * MIB);
        let mut memory = ResidentMemory::new(&budget);
        for _ in 0..RISE_DIVISOR {
            memory.observe(resident);
        }
        (budget, memory)
    }

    #[test]
    fn the_caches_get_what_the_rest_of_the_process_leaves() {
        let (budget, mut memory) = risen(12 * MIB);
        budget.take_anyway(10 * MIB);
        // 10 MiB counted, 22 resident: 12 MiB are not the caches'.
        let reading = memory.observe(22 * MIB);
        assert_eq!(reading.excess, 12 * MIB, "steady: no growth to allow for");
        assert_eq!(reading.limit, 52 * MIB);
        assert_eq!(budget.limit(), 52 * MIB);
        assert!(!reading.over);
    }

    #[test]
    fn the_limit_starts_at_its_floor_and_rises_a_step_a_reading() {
        let budget = MemoryBudget::new(64 * MIB);
        let mut memory = ResidentMemory::new(&budget);
        assert_eq!(budget.limit(), 8 * MIB);
        assert_eq!(memory.observe(4 * MIB).limit, 8 * MIB + STEP);
        assert_eq!(memory.observe(4 * MIB).limit, 8 * MIB + 2 * STEP);
        for _ in 0..RISE_DIVISOR {
            memory.observe(4 * MIB);
        }
        assert_eq!(
            budget.limit(),
            60 * MIB,
            "up to what the rest leaves, no further"
        );
    }

    #[test]
    fn the_largest_excess_of_the_window_holds_until_it_leaves_the_window() {
        let (budget, mut memory) = risen(8 * MIB);
        // 20 MiB, up 12 from the reading before: room is left for 12 more.
        assert_eq!(memory.observe(20 * MIB).limit, 32 * MIB, "falls at once");
        for _ in 2..WINDOW {
            assert_eq!(
                memory.observe(8 * MIB).limit,
                32 * MIB,
                "still in the window"
            );
        }
        // The reading before the 20 leaves the window, then the 20 itself: the limit
        // rises a step a reading, up to what the rest leaves.
        assert_eq!(memory.observe(8 * MIB).limit, 32 * MIB + STEP);
        assert_eq!(memory.observe(8 * MIB).limit, 32 * MIB + 2 * STEP);
        for _ in 0..RISE_DIVISOR {
            memory.observe(8 * MIB);
        }
        assert_eq!(budget.limit(), 56 * MIB);
    }

    #[test]
    fn the_caches_keep_a_floor_and_say_when_the_process_outgrows_the_setting() {
        let (_, mut memory) = risen(8 * MIB);
        let reading = memory.observe(100 * MIB);
        assert_eq!(reading.limit, 8 * MIB);
        assert!(reading.over);
    }

    #[test]
    fn proc_lines_are_read_in_bytes() {
        let status = "VmRSS:\t   20480 kB\nRssAnon:\t    8192 kB\n";
        assert_eq!(bytes_of(status, "RssAnon"), Some(8 * MIB));
        assert_eq!(bytes_of(status, "Rss"), None, "a whole name only");
        assert_eq!(bytes_of("RssAnon: many kB", "RssAnon"), None);
    }

    #[test]
    fn this_process_has_a_resident_size_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(resident_anonymous().is_some_and(|bytes| bytes > 0));
        }
    }
}
