//! CORS: which browser origins may call `/v1` (any with `*`) and `/app` (credentialed:
//! only origins named), and the preflight answer.

use axum::http::header::{
    ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS, ACCESS_CONTROL_ALLOW_ORIGIN,
    ACCESS_CONTROL_EXPOSE_HEADERS, ACCESS_CONTROL_MAX_AGE, VARY,
};
use axum::http::{HeaderMap, HeaderValue};

/// How long a browser may cache a preflight answer, in seconds.
const MAX_AGE_SECONDS: &str = "600";

/// The allowed origins (`--allowed-origin`, repeatable; `*` allows any, on `/v1` only).
#[derive(Debug, Clone, Default)]
pub struct Cors {
    any: bool,
    origins: Vec<HeaderValue>,
    /// Configured values that can never match an `Origin` (for the start-up log).
    ignored: Vec<String>,
}

impl Cors {
    /// From the configured origins, each as a browser sends it: `scheme://host[:port]`,
    /// in lower case, without a default port or a trailing slash. A value that can never
    /// be one (no scheme, a path, "null", a scheme other than http or https) is ignored
    /// and said at start.
    pub fn new<I: IntoIterator<Item = S>, S: AsRef<str>>(origins: I) -> Cors {
        let mut cors = Cors::default();
        for origin in origins {
            let origin = origin.as_ref().trim();
            if origin == "*" {
                cors.any = true;
                continue;
            }
            match as_sent(origin) {
                Some(value) => cors.origins.push(value),
                None => cors.ignored.push(format!("{origin:?}")),
            }
        }
        cors
    }

    /// What the configuration allows, for the start-up log.
    pub fn describe(&self) -> String {
        let mut list: Vec<&str> = self
            .origins
            .iter()
            .filter_map(|o| o.to_str().ok())
            .collect();
        if self.any {
            list.insert(0, "* (for /v1; /app only the named ones)");
        }
        let mut text = if list.is_empty() {
            "none".to_owned()
        } else {
            list.join(", ")
        };
        if !self.ignored.is_empty() {
            text.push_str(&format!(" (ignored: {})", self.ignored.join(", ")));
        }
        text
    }

    /// `origin`, if `/v1` may answer it: a listed origin, or any with `*` (its calls carry
    /// a key, never a cookie, so `*` exposes nothing a page could not already send).
    pub fn allow<'a>(&self, origin: Option<&'a HeaderValue>) -> Option<&'a HeaderValue> {
        let origin = origin?;
        let allowed = origin.as_bytes() != b"null" && (self.any || self.lists(origin));
        allowed.then_some(origin)
    }

    /// `origin`, if it is listed by name: for credentialed routes (`/app`, whose cookie is
    /// a session), where `*` would let every site act as the signed-in user.
    pub fn allow_listed<'a>(&self, origin: Option<&'a HeaderValue>) -> Option<&'a HeaderValue> {
        origin.filter(|origin| self.lists(origin))
    }

    fn lists(&self, origin: &HeaderValue) -> bool {
        self.origins.iter().any(|o| o == origin)
    }

    /// Adds `Access-Control-Allow-Origin` for an allowed origin, and `Vary: Origin`
    /// always (the answer depends on it), to any `/v1` response.
    pub fn decorate(&self, origin: Option<&HeaderValue>, headers: &mut HeaderMap) {
        if let Some(origin) = self.allow(origin) {
            headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
            headers.insert(
                ACCESS_CONTROL_EXPOSE_HEADERS,
                HeaderValue::from_static(EXPOSED),
            );
        }
        headers.append(VARY, HeaderValue::from_static("Origin"));
    }

    /// The preflight headers beyond `Allow-Origin`, for an allowed origin, on `/v1`.
    pub fn preflight(&self, origin: Option<&HeaderValue>, headers: &mut HeaderMap) {
        if self.allow(origin).is_some() {
            preflight_headers(
                headers,
                "POST, OPTIONS",
                "Content-Type, Service-Engine-Authorizer, Idempotency-Key",
            );
        }
    }
}

/// `origin` as a browser's `Origin` header has it, if it can be one (with no path).
fn as_sent(origin: &str) -> Option<HeaderValue> {
    // "null" (sandboxed frames, files) is never an origin worth trusting; it is no URL.
    let url = crate::service::transport::web_url(origin)
        .ok()
        .filter(|url| url.path() == "/")?;
    HeaderValue::from_str(&url.origin().ascii_serialization()).ok()
}

/// Response headers a page on an allowed origin may read: when to retry, whether an
/// answer was given before, and the id to quote.
pub const EXPOSED: &str = "Retry-After, Idempotent-Replayed, X-Request-Id";

/// The preflight headers beyond `Allow-Origin`, for an origin the caller has allowed:
/// these methods and request headers, cacheable for a while.
pub fn preflight_headers(
    headers: &mut HeaderMap,
    methods: &'static str,
    request_headers: &'static str,
) {
    headers.insert(
        ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static(methods),
    );
    headers.insert(
        ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static(request_headers),
    );
    headers.insert(
        ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static(MAX_AGE_SECONDS),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(text: &'static str) -> HeaderValue {
        HeaderValue::from_static(text)
    }

    #[test]
    fn a_wildcard_admits_any_origin_on_v1_but_only_named_ones_with_credentials() {
        let cors = Cors::new(["*", "https://app.example.com"]);
        let named = header("https://app.example.com");
        let other = header("https://evil.example.com");
        assert_eq!(cors.allow(Some(&other)), Some(&other));
        assert_eq!(cors.allow_listed(Some(&other)), None);
        assert_eq!(cors.allow_listed(Some(&named)), Some(&named));
        assert_eq!(cors.allow(Some(&header("null"))), None);
        assert_eq!(cors.allow(None), None);
    }

    #[test]
    fn configured_origins_match_as_browsers_send_them() {
        let cors = Cors::new([
            "HTTPS://App.Example.com/",
            "https://other.example.com:443",
            "null",
            "bad\nvalue",
            "app.example.com",
            "https://app.example.com/app",
        ]);
        let sent = header("https://app.example.com");
        assert_eq!(cors.allow_listed(Some(&sent)), Some(&sent));
        // A default port is what a browser leaves out.
        let other = header("https://other.example.com");
        assert_eq!(cors.allow_listed(Some(&other)), Some(&other));
        assert_eq!(cors.allow(Some(&header("null"))), None);
        assert_eq!(
            cors.describe(),
            r#"https://app.example.com, https://other.example.com (ignored: "null", "bad\nvalue", "app.example.com", "https://app.example.com/app")"#
        );
    }
}
