//! Keyed requests that may have been billed without their answer arriving, with their
//! `Idempotency-Key`: the same request sent again, even after a reload, goes with that
//! key, so the server gives the answer it kept instead of billing it a second time. A
//! request is recorded before it is sent (a reload or a closed tab may end the page while
//! it is on its way) and forgotten once its answer has come. Kept in the signed-in
//! user's local storage (as the history is), for an hour less than the server keeps a
//! key.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crosstab_contract::idempotency::KEY_KEPT_MS;

use crate::stored::StoredList;

/// The list's storage key (per user, see [`crate::stored`]).
pub const KEY: &str = "crosstab.unsettled";

/// Requests kept at most: the latest ones (a researcher re-runs what just failed).
const KEPT: usize = 20;

/// How long before the server forgets a key this list does: a key sent as the server
/// forgets it could be replayed by one attempt and billed by a retry, so the list keeps
/// well clear of that (the browser's clock and the server's may differ by minutes too).
const MARGIN_MS: f64 = 60.0 * 60.0 * 1000.0;

/// Which endpoint a request went to: a crosstab's key never answers a table's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sent {
    /// `POST /app/api/crosstab`.
    Crosstab,
    /// `POST /app/api/table`.
    Table,
}

/// One request whose fate is unknown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Entry {
    sent: Sent,
    /// The request as sent (its JSON).
    request: Value,
    key: String,
    /// When it was first sent with `key` (ms since the Unix epoch).
    at_ms: f64,
}

/// The unsettled requests.
#[derive(Debug, Clone, PartialEq)]
pub struct Unsettled(StoredList<Entry>);

impl Unsettled {
    /// The storage key of the current user's list: read and written through it, a
    /// request's record stays its sender's even if the session ends while it runs.
    pub fn storage_key() -> String {
        crate::stored::owned(KEY)
    }

    /// The list under `storage_key` ([`Unsettled::storage_key`]).
    pub fn load(storage_key: &str) -> Unsettled {
        Unsettled(StoredList::load_at(storage_key))
    }

    /// Writes the list back under `storage_key`.
    pub fn store(&self, storage_key: &str) {
        // Storage full or off: the key is then kept for this run's retries alone.
        let _ = self.0.store_at(storage_key);
    }

    /// The key `request` went with when it may have been billed unseen, while the server
    /// still keeps it.
    pub fn key_for(&self, sent: Sent, request: &Value, now_ms: f64) -> Option<String> {
        self.0
            .entries
            .iter()
            .find(|e| e.sent == sent && e.request == *request && live(e, now_ms))
            .map(|e| e.key.clone())
    }

    /// Records `request` with `key`: `unsettled` (it is about to be sent, or its answer
    /// may have been lost) keeps the key for the request's next run, dated when the key
    /// was first recorded; otherwise (answered) it is forgotten. Entries the server no
    /// longer keeps are dropped, and the oldest past [`KEPT`].
    pub fn record(&mut self, sent: Sent, request: &Value, key: &str, unsettled: bool, now_ms: f64) {
        let entries = &mut self.0.entries;
        let first_ms = entries
            .iter()
            .find(|e| e.sent == sent && e.key == key)
            .map_or(now_ms, |e| e.at_ms);
        entries.retain(|e| !(e.sent == sent && e.request == *request) && live(e, now_ms));
        if unsettled {
            entries.push(Entry {
                sent,
                request: request.clone(),
                key: key.to_owned(),
                at_ms: first_ms,
            });
        }
        let excess = entries.len().saturating_sub(KEPT);
        entries.drain(..excess);
    }
}

impl Default for Unsettled {
    fn default() -> Self {
        Unsettled(StoredList::of(Vec::new()))
    }
}

/// Whether the server still keeps `entry`'s key (with an hour to spare).
fn live(entry: &Entry, now_ms: f64) -> bool {
    now_ms - entry.at_ms < KEY_KEPT_MS as f64 - MARGIN_MS
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    const HOUR: f64 = 3_600_000.0;

    #[test]
    fn an_unsettled_request_keeps_its_key_for_the_same_request_only() {
        let mut list = Unsettled::default();
        let table = json!({"survey": "DEMO", "rows": ["A"]});
        list.record(Sent::Table, &table, "k1", true, 0.0);
        assert_eq!(
            list.key_for(Sent::Table, &table, HOUR).as_deref(),
            Some("k1")
        );
        let other = json!({"survey": "DEMO", "rows": ["B"]});
        assert_eq!(list.key_for(Sent::Table, &other, HOUR), None);
        // The same body to the other endpoint is another request.
        assert_eq!(list.key_for(Sent::Crosstab, &table, HOUR), None);

        // Answered (or refused for good) on its next run: forgotten.
        list.record(Sent::Table, &table, "k1", false, HOUR);
        assert_eq!(list.key_for(Sent::Table, &table, HOUR), None);
    }

    #[test]
    fn a_key_is_forgotten_an_hour_before_the_server_forgets_it() {
        let mut list = Unsettled::default();
        let query = json!({"SurveyCode": "DEMO"});
        list.record(Sent::Crosstab, &query, "k", true, 0.0);
        // Run again and lost again: still the first sending's clock.
        list.record(Sent::Crosstab, &query, "k", true, 20.0 * HOUR);
        assert!(list.key_for(Sent::Crosstab, &query, 22.9 * HOUR).is_some());
        assert_eq!(list.key_for(Sent::Crosstab, &query, 23.0 * HOUR), None);
    }

    #[test]
    fn the_latest_requests_are_kept_and_survive_storage() {
        let mut list = Unsettled::default();
        for n in 0..KEPT + 5 {
            list.record(Sent::Crosstab, &json!(n), &format!("k{n}"), true, 0.0);
        }
        assert_eq!(list.0.entries.len(), KEPT);
        assert_eq!(list.key_for(Sent::Crosstab, &json!(4), 1.0), None);
        assert_eq!(
            list.key_for(Sent::Crosstab, &json!(5), 1.0).as_deref(),
            Some("k5")
        );
        let read = Unsettled(StoredList::from_value(list.0.to_value()));
        assert_eq!(read, list);
    }
}
