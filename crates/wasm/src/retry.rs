//! Retry timing for 5xx answers: the contract's policy (exponential backoff with jitter
//! and a cap), shared with the server's app backend.

pub use crosstab_contract::retry::{retry_delay_ms, RETRY_BASE_MS, RETRY_CAP_MS};
