//! Log lines said at most once a second, however often what they report happens: a
//! client connecting in a loop at the connection limit, or a database outage turning
//! every request into a 500, would otherwise write a line each time. Each line says how
//! many occurrences went unsaid since the one before (the access log still has every
//! request).

use std::time::{Duration, Instant};

/// The occurrences of one kind of event, and when its last line was said.
#[derive(Debug, Default)]
pub struct Paced {
    last_line: Option<Instant>,
    unsaid: u64,
}

impl Paced {
    /// The least time between two lines.
    pub const EVERY: Duration = Duration::from_secs(1);

    /// Counts one occurrence at `now`: `Some(n)` when its line is due, `n` the earlier
    /// occurrences not yet said; `None` when it is left for the next line.
    pub fn occurred(&mut self, now: Instant) -> Option<u64> {
        if self.last_line.is_some_and(|at| now < at + Self::EVERY) {
            self.unsaid += 1;
            return None;
        }
        Some(self.said(now))
    }

    /// When the occurrences not yet said are due, if there are any.
    pub fn unsaid_until(&self) -> Option<Instant> {
        let last = self.last_line?;
        (self.unsaid > 0).then(|| last + Self::EVERY)
    }

    /// Marks a line said at `now`: the occurrences it says (those not yet said).
    pub fn said(&mut self, now: Instant) -> u64 {
        self.last_line = Some(now);
        std::mem::take(&mut self.unsaid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_a_second_each_saying_what_went_unsaid() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let mut paced = Paced::default();
        assert_eq!(paced.unsaid_until(), None);
        assert_eq!(paced.occurred(at(0)), Some(0), "the first is said at once");
        for ms in 1..=999 {
            assert_eq!(paced.occurred(at(ms)), None);
        }
        assert_eq!(paced.unsaid_until(), Some(at(1000)));
        assert_eq!(
            paced.occurred(at(1000)),
            Some(999),
            "then with the 999 unsaid"
        );
        assert_eq!(paced.unsaid_until(), None);
        // Unsaid ones are said when due, even if no more come.
        assert_eq!(paced.occurred(at(1500)), None);
        assert_eq!(paced.said(at(2000)), 1);
        assert_eq!(paced.unsaid_until(), None);
        assert_eq!(paced.occurred(at(3100)), Some(0));
    }
}
