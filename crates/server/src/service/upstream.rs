//! The app backend's client for another `/v1` service (`serve --upstream URL`): it adds
//! the key held here for the signed-in user's account and follows the spec's client
//! rules (5xx retried with exponential backoff and jitter, 4xx never), passing the
//! upstream's status and body back unchanged.

use std::time::Duration;

use axum::body::Bytes;
use crosstab_contract::idempotency::{key_from_bytes, IDEMPOTENCY_KEY};
use crosstab_contract::retry::retry_delay_ms;
use crosstab_contract::{AUTH_HEADER, CONTRACT_VERSION, OPERATION_IDS};
use rand::Rng;
use serde_json::Value;

/// Retries after the first attempt, for 5xx answers and connection failures.
pub const MAX_RETRIES: u32 = 3;

/// An upstream that answered (any status) or could not be reached.
#[derive(Debug, thiserror::Error)]
#[error("the upstream could not be reached: {0}")]
pub struct Unreachable(String);

/// The `/v1` service the app forwards to.
#[derive(Debug, Clone)]
pub struct Upstream {
    client: reqwest::Client,
    /// Base URL ending in `/v1`.
    base: String,
}

impl Upstream {
    /// A client for `base` (ending in `/v1`). It follows no redirect: one would carry the
    /// account's key (a header of our own, which redirects keep) to wherever it points.
    pub fn new(base: &str) -> Result<Upstream, Unreachable> {
        if !super::transport::is_private(base) {
            tracing::warn!(
                upstream = base,
                "the upstream is plain http to another machine: accounts' keys cross the \
                 network readable; use https"
            );
        }
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|error| Unreachable(format!("HTTP client not built: {error}")))?;
        Ok(Upstream {
            client,
            base: base.trim_end_matches('/').to_owned(),
        })
    }

    /// The base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Forwards a crosstab body with `key` and an `Idempotency-Key` (the request's, or a
    /// fresh one), so the upstream bills it once however often it is sent; returns the
    /// upstream's status and body.
    pub async fn crosstab(
        &self,
        key: &str,
        body: Bytes,
        idempotency_key: Option<&str>,
    ) -> Result<(u16, Bytes), Unreachable> {
        // Every attempt carries one key, the caller's or a fresh one: a 5xx may follow a
        // bill whose outcome the upstream could not tell (a commit left unanswered), and
        // the key makes the retry get that answer instead of a second bill.
        let fresh;
        let idempotency_key = match idempotency_key {
            Some(key) => key,
            None => {
                fresh = key_from_bytes(rand::thread_rng().gen());
                fresh.as_str()
            }
        };
        let mut attempt = 0;
        loop {
            let request = self
                .client
                .post(format!("{}/crosstab", self.base))
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .header(AUTH_HEADER, key)
                .header(IDEMPOTENCY_KEY, idempotency_key)
                .body(body.clone());
            let sent = request.send().await;
            // Retried only on a 5xx (a bill it may follow is answered again under the key,
            // not billed twice) or a connection that never opened. A timeout, or a 2xx-4xx
            // whose body broke off, is not: an upstream that keeps no keys would bill again.
            let outcome = match sent {
                Ok(response) if response.status().is_redirection() => {
                    // Not followed (the key would go along); not retried (it may follow a
                    // bill, as any answer may).
                    let to = response
                        .headers()
                        .get(reqwest::header::LOCATION)
                        .and_then(|to| to.to_str().ok())
                        .unwrap_or("nowhere");
                    return Err(Unreachable(format!(
                        "it answered {} to {to}, which is not followed",
                        response.status()
                    )));
                }
                Ok(response) => {
                    let status = response.status().as_u16();
                    match response.bytes().await {
                        Ok(bytes) if status < 500 => return Ok((status, bytes)),
                        Ok(bytes) => Ok((status, bytes)),
                        Err(error) if status < 500 => return Err(Unreachable(error.to_string())),
                        Err(error) => Err(Unreachable(error.to_string())),
                    }
                }
                Err(error) if error.is_connect() => Err(Unreachable(error.to_string())),
                Err(error) => return Err(Unreachable(error.to_string())),
            };
            if attempt >= MAX_RETRIES {
                return outcome;
            }
            attempt += 1;
            let delay = retry_delay_ms(attempt, rand::thread_rng().gen::<f64>());
            tracing::warn!(
                attempt,
                delay_ms = delay,
                "upstream crosstab failed; retrying"
            );
            tokio::time::sleep(Duration::from_millis(delay as u64)).await;
        }
    }

    /// Compares the upstream's `/docs` with this build's contract; returns the differences.
    pub async fn check_contract(&self) -> Result<Vec<String>, Unreachable> {
        let doc: Value = self
            .client
            .get(format!("{}/docs", self.base))
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|e| Unreachable(e.to_string()))?
            .json()
            .await
            .map_err(|e| Unreachable(e.to_string()))?;
        Ok(contract_differences(&doc))
    }
}

/// How an OpenAPI document departs from this build's contract (version, operation ids).
pub fn contract_differences(doc: &Value) -> Vec<String> {
    let mut differences = Vec::new();
    let version = doc
        .pointer("/info/version")
        .and_then(Value::as_str)
        .unwrap_or("");
    if version != CONTRACT_VERSION {
        differences.push(format!(
            "info.version is '{version}', expected '{CONTRACT_VERSION}'"
        ));
    }
    let ids: Vec<&str> = doc
        .get("paths")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|paths| paths.values())
        .filter_map(Value::as_object)
        .flat_map(|methods| methods.values())
        .filter_map(|op| op.get("operationId").and_then(Value::as_str))
        .collect();
    // The contract's operations must all be there; a service may offer more (this one's
    // token endpoint, say), which the app never calls.
    let missing: Vec<&str> = OPERATION_IDS
        .iter()
        .copied()
        .filter(|id| !ids.contains(id))
        .collect();
    if !missing.is_empty() {
        differences.push(format!(
            "operationIds {missing:?} are missing (it has {ids:?})"
        ));
    }
    differences
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_document_has_no_differences() {
        let doc: Value =
            serde_json::from_str(&crosstab_contract::openapi::document_json()).unwrap();
        assert!(contract_differences(&doc).is_empty());
        let mut changed = doc.clone();
        changed["info"]["version"] = "2.0.0".into();
        changed["paths"]["/docs"]["get"]["operationId"] = "getDocs".into();
        assert_eq!(contract_differences(&changed).len(), 2);
    }
}
