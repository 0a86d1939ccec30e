//! CORS for `/v1`: which browser origins may call the API, and the preflight answer.

use axum::http::header::{
    ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS, ACCESS_CONTROL_ALLOW_ORIGIN,
    ACCESS_CONTROL_MAX_AGE, VARY,
};
use axum::http::{HeaderMap, HeaderValue};

/// How long a browser may cache a preflight answer, in seconds.
const MAX_AGE_SECONDS: &str = "600";

/// The allowed origins (`--allowed-origin`, repeatable; `*` allows any).
#[derive(Debug, Clone, Default)]
pub struct Cors {
    any: bool,
    origins: Vec<HeaderValue>,
}

impl Cors {
    /// From the configured origins. Trailing slashes are ignored: an `Origin` has none.
    pub fn new<I: IntoIterator<Item = S>, S: AsRef<str>>(origins: I) -> Cors {
        let mut cors = Cors::default();
        for origin in origins {
            let origin = origin.as_ref().trim().trim_end_matches('/');
            if origin == "*" {
                cors.any = true;
            } else if let Ok(value) = HeaderValue::from_str(origin) {
                cors.origins.push(value);
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
            list.insert(0, "*");
        }
        if list.is_empty() {
            "none".to_owned()
        } else {
            list.join(", ")
        }
    }

    /// `origin`, if it is allowed.
    pub fn allow<'a>(&self, origin: Option<&'a HeaderValue>) -> Option<&'a HeaderValue> {
        let origin = origin?;
        // "null" (sandboxed frames, files) is never an origin worth trusting, even with `*`.
        let allowed =
            origin.as_bytes() != b"null" && (self.any || self.origins.iter().any(|o| o == origin));
        allowed.then_some(origin)
    }

    /// Adds `Access-Control-Allow-Origin` for an allowed origin, and `Vary: Origin`
    /// always (the answer depends on it), to any `/v1` response.
    pub fn decorate(&self, origin: Option<&HeaderValue>, headers: &mut HeaderMap) {
        if let Some(origin) = self.allow(origin) {
            headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
        }
        headers.append(VARY, HeaderValue::from_static("Origin"));
    }

    /// The preflight headers beyond `Allow-Origin`, for an allowed origin, on `/v1`.
    pub fn preflight(&self, origin: Option<&HeaderValue>, headers: &mut HeaderMap) {
        self.preflight_for(
            origin,
            headers,
            "POST, OPTIONS",
            "Content-Type, Service-Engine-Authorizer",
        );
    }

    /// The preflight headers beyond `Allow-Origin` for an allowed origin: these methods
    /// and request headers, cacheable for a while.
    pub fn preflight_for(
        &self,
        origin: Option<&HeaderValue>,
        headers: &mut HeaderMap,
        methods: &'static str,
        request_headers: &'static str,
    ) {
        if self.allow(origin).is_some() {
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
    }
}
