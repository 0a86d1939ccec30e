//! The shared test vectors (`tests/vectors/*.json`): request → expected response. The
//! Rust tests of every crate and the Node tests of the WASM package run the same files.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

/// One vector.
#[derive(Debug, Clone, Deserialize)]
pub struct Vector {
    /// Its name (the file's stem).
    pub name: String,
    /// Why it exists, for people.
    #[serde(default)]
    pub note: Option<String>,
    /// The request body, any JSON (absent when `body` gives it as text).
    #[serde(default)]
    pub request: Value,
    /// The request body as raw text, for bodies a JSON value can't hold (a member named
    /// twice); sent instead of `request` when present.
    #[serde(default)]
    pub body: Option<String>,
    /// The expected answer.
    pub expect: Expected,
}

/// The expected HTTP status and body.
#[derive(Debug, Clone, Deserialize)]
pub struct Expected {
    /// HTTP status.
    pub status: u16,
    /// Response body (a `CrosstabResponse` or an error envelope).
    pub body: Value,
}

impl Vector {
    /// The request body exactly as a client sends it: `body`, else `request`'s JSON text.
    pub fn body_text(&self) -> String {
        self.body
            .clone()
            .unwrap_or_else(|| self.request.to_string())
    }

    /// Whether the contract's validation of the body alone decides this vector (its size,
    /// then its content).
    pub fn is_validation_error(&self) -> bool {
        matches!(
            self.expect
                .body
                .pointer("/error/code")
                .and_then(Value::as_str),
            Some("invalid_request" | "invalid_target_codes" | "payload_too_large")
        )
    }
}

/// The repository's vector directory.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors")
}

/// Every vector, sorted by name, with the file each came from.
pub fn load() -> Vec<(PathBuf, Vector)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir())
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "json"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    assert!(!files.is_empty(), "no test vectors in {}", dir().display());
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let vector: Vector =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (path, vector)
        })
        .collect()
}

/// Whether `actual` matches `expected`: same shape and members, numbers equal as f64
/// within a relative 1e-12 (so `0` matches `0.0`).
pub fn matches(expected: &Value, actual: &Value) -> bool {
    match (expected, actual) {
        (Value::Number(e), Value::Number(a)) => {
            let (e, a) = (
                e.as_f64().unwrap_or(f64::NAN),
                a.as_f64().unwrap_or(f64::NAN),
            );
            e == a || (e - a).abs() <= 1e-12 * e.abs().max(a.abs())
        }
        (Value::Array(e), Value::Array(a)) => {
            e.len() == a.len() && e.iter().zip(a).all(|(e, a)| matches(e, a))
        }
        (Value::Object(e), Value::Object(a)) => {
            e.len() == a.len()
                && e.iter()
                    .all(|(k, e)| a.get(k).is_some_and(|a| matches(e, a)))
        }
        _ => expected == actual,
    }
}

/// Rewrites a vector file's expected body (`CROSSTAB_BLESS=1`): used only to fill in
/// human-facing wording; status, codes and fields stay hand-written and are checked.
pub fn bless(path: &Path, body: &Value) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut doc: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    if let Some(slot) = doc.pointer_mut("/expect/body") {
        *slot = body.clone();
    }
    let mut out = serde_json::to_string_pretty(&doc).unwrap_or_default();
    out.push('\n');
    let _ = std::fs::write(path, out);
}

/// Whether the run asked to bless vectors.
pub fn blessing() -> bool {
    std::env::var_os("CROSSTAB_BLESS").is_some()
}
