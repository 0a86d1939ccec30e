//! Retry timing the spec prescribes for 5xx answers: exponential backoff with jitter
//! and a cap. Clients in Rust (the app backend) and JS (the npm package) share it.

/// Delay before the first retry, before jitter, in milliseconds.
pub const RETRY_BASE_MS: f64 = 250.0;
/// Longest delay between two attempts, in milliseconds.
pub const RETRY_CAP_MS: f64 = 30_000.0;

/// The delay before retry number `attempt` (1 for the first retry) given a uniform
/// random number `random` in `[0, 1)`: `min(cap, base × 2^(attempt−1))`, scaled by a
/// jitter factor in `[0.5, 1)` ("equal jitter"), so clients that failed together don't
/// retry together and no delay is shorter than half the exponential step. Attempt 0 and
/// out-of-range randoms are clamped; the result is always finite and at most the cap.
pub fn retry_delay_ms(attempt: u32, random: f64) -> f64 {
    let exponent = attempt.saturating_sub(1).min(30);
    let step = (RETRY_BASE_MS * f64::from(1u32 << exponent)).min(RETRY_CAP_MS);
    let random = if random.is_finite() {
        random.clamp(0.0, 1.0)
    } else {
        0.5
    };
    (step / 2.0 + step / 2.0 * random).min(RETRY_CAP_MS).round()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_exponentially_within_jitter_and_cap() {
        assert_eq!(retry_delay_ms(1, 0.0), 125.0);
        assert_eq!(retry_delay_ms(1, 1.0), 250.0);
        assert_eq!(retry_delay_ms(2, 0.0), 250.0);
        assert_eq!(retry_delay_ms(3, 0.5), 750.0);
        assert_eq!(retry_delay_ms(0, 1.0), 250.0);
        for attempt in [10, 31, 1000, u32::MAX] {
            assert!(retry_delay_ms(attempt, 0.999) <= RETRY_CAP_MS);
            assert!(retry_delay_ms(attempt, 0.0) >= RETRY_CAP_MS / 2.0);
        }
        assert_eq!(retry_delay_ms(1, f64::NAN), retry_delay_ms(1, 0.5));
    }
}
