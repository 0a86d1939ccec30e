//! How a client sends one logical query: one `Idempotency-Key` on all its attempts, and
//! a retry only where the key makes it safe and the contract says to (no answer, a 5xx,
//! a 429 with a short `Retry-After`). The app and the npm package's `sendCrosstab` both
//! follow these rules.

use crate::response::ParsedResponse;

/// Attempts of one query at most, by default (the first and two retries).
pub const DEFAULT_ATTEMPTS: u32 = 3;

/// The longest wait before a retry, by default, in milliseconds: a longer `Retry-After`
/// (a spent daily quota) ends the query, to be shown rather than waited out.
pub const DEFAULT_LONGEST_WAIT_MS: f64 = 10_000.0;

/// How many attempts a query gets, and how long it may wait before one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Attempts at most, the first one included.
    pub attempts: u32,
    /// The longest wait before a retry, in milliseconds.
    pub longest_wait_ms: f64,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            attempts: DEFAULT_ATTEMPTS,
            longest_wait_ms: DEFAULT_LONGEST_WAIT_MS,
        }
    }
}

impl RetryPolicy {
    /// Milliseconds to wait before the attempt after number `attempt` (1 for the first),
    /// given how it ended (`None`: no answer came, as when the connection failed) and a
    /// uniform `random` in `[0, 1)`; `None` when the query ends with it.
    pub fn wait_after(
        &self,
        attempt: u32,
        answer: Option<&ParsedResponse>,
        random: f64,
    ) -> Option<f64> {
        if attempt >= self.attempts {
            return None;
        }
        let wait = match answer {
            None => Some(crosstab_contract::retry::retry_delay_ms(attempt, random)),
            Some(answer) => answer.retry_delay_ms(attempt, random),
        };
        wait.filter(|ms| *ms <= self.longest_wait_ms)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::response::parse_response;
    use serde_json::Value;

    fn answer(status: u16, retry_after: Option<&str>) -> ParsedResponse {
        parse_response(status, &Value::Null, None, retry_after)
    }

    #[test]
    fn retries_what_a_key_makes_safe_and_nothing_else() {
        let policy = RetryPolicy::default();
        assert_eq!(policy.wait_after(1, None, 0.0), Some(125.0));
        assert_eq!(
            policy.wait_after(2, Some(&answer(503, None)), 1.0),
            Some(500.0)
        );
        assert_eq!(
            policy.wait_after(1, Some(&answer(429, Some("2"))), 0.5),
            Some(2000.0)
        );
        // A spent daily quota is shown, not waited out.
        assert_eq!(
            policy.wait_after(1, Some(&answer(429, Some("3600"))), 0.5),
            None
        );
        // A body that did not arrive in time was never read: sent again, it may.
        assert_eq!(
            policy.wait_after(1, Some(&answer(408, None)), 1.0),
            Some(250.0)
        );
        for status in [200, 400, 401, 403, 404, 413, 422] {
            assert_eq!(
                policy.wait_after(1, Some(&answer(status, None)), 0.5),
                None,
                "{status}"
            );
        }
    }

    #[test]
    fn the_last_attempt_is_not_retried() {
        let policy = RetryPolicy {
            attempts: 2,
            ..RetryPolicy::default()
        };
        assert!(policy.wait_after(1, None, 0.5).is_some());
        assert_eq!(policy.wait_after(2, None, 0.5), None);
        assert_eq!(policy.wait_after(2, Some(&answer(503, None)), 0.5), None);
    }
}
