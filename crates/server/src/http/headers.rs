//! Security headers on everything but `/v1`: the app's page and its backend. The content
//! security policy admits no inline script but the ones in the built `index.html` itself
//! (by hash: Trunk's loader), WebAssembly compilation, and only this origin.

use std::path::Path;

use axum::http::header::{
    CONTENT_SECURITY_POLICY, REFERRER_POLICY, STRICT_TRANSPORT_SECURITY, X_CONTENT_TYPE_OPTIONS,
    X_FRAME_OPTIONS,
};
use axum::http::{HeaderMap, HeaderValue};
use base64::Engine as _;
use sha2::{Digest, Sha256};

/// The headers sent with every non-`/v1` response.
#[derive(Debug, Clone)]
pub struct SecurityHeaders {
    csp: HeaderValue,
    hsts: bool,
}

impl SecurityHeaders {
    /// The policy for the app built in `app_dir` (its inline scripts allowed by hash);
    /// HSTS when the service is reached over `https`.
    pub fn new(app_dir: Option<&Path>, https: bool) -> Result<SecurityHeaders, String> {
        let page = match app_dir.map(|dir| dir.join("index.html")) {
            Some(index) if index.exists() => std::fs::read_to_string(&index)
                .map_err(|error| format!("{} not read: {error}", index.display()))?,
            _ => String::new(),
        };
        let hashes: String = inline_scripts(&page)
            .map(|script| {
                let digest = Sha256::digest(script.as_bytes());
                let hash = base64::engine::general_purpose::STANDARD.encode(digest);
                format!(" 'sha256-{hash}'")
            })
            .collect();
        let csp = format!(
            "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'{hashes}; \
             style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; \
             connect-src 'self'; object-src 'none'; base-uri 'none'; \
             form-action 'self'; frame-ancestors 'none'"
        );
        let csp = HeaderValue::from_str(&csp)
            .map_err(|error| format!("content security policy not a header: {error}"))?;
        Ok(SecurityHeaders { csp, hsts: https })
    }
}

/// The contents of the `<script>` elements without a `src` in `page`.
fn inline_scripts(page: &str) -> impl Iterator<Item = &str> {
    page.split("<script").skip(1).filter_map(|rest| {
        let (attributes, body) = rest.split_once('>')?;
        let (content, _) = body.split_once("</script>")?;
        (!attributes.contains("src=")).then_some(content)
    })
}

impl SecurityHeaders {
    /// Adds the headers to a response: `nosniff` to every one, the rest outside `/v1`
    /// (`api`). Called by [`super::observe`], the layer every response passes anyway.
    pub fn apply(&self, api: bool, headers: &mut HeaderMap) {
        headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
        if api {
            return;
        }
        headers.insert(CONTENT_SECURITY_POLICY, self.csp.clone());
        headers.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
        headers.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
        if self.hsts {
            headers.insert(
                STRICT_TRANSPORT_SECURITY,
                HeaderValue::from_static("max-age=31536000; includeSubDomains"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_inline_scripts_are_hashed() {
        let page = r#"<head><script type="module" src="/a.js"></script>
            <script type="module">import init from '/a.js';</script></head>"#;
        let found: Vec<&str> = inline_scripts(page).collect();
        assert_eq!(found, ["import init from '/a.js';"]);
    }
}
