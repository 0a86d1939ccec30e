//! Who is calling, as extractors: [`Authenticated`] for `/v1` (the
//! `Service-Engine-Authorizer` credential; a cookie is never looked at) and
//! [`SessionUser`] for `/app` (the session cookie).

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::header::COOKIE;
use axum::http::request::Parts;
use axum::http::HeaderMap;
use crosstab_contract::{ApiError, AUTH_HEADER};

use super::app::AppFailure;
use super::observe::AccessNote;
use super::proxy::Sender;
use super::HttpState;
use crate::service::auth::AuthError;
use crate::service::principal::Principal;
use crate::service::users::User;
use crate::service::ServiceError;

/// The session cookie's name over plain http.
pub const SESSION_COOKIE: &str = "crosstab_session";
/// Its name over https: the `__Host-` prefix makes browsers take it only when `Secure`,
/// from this very host, for `Path=/`, so no subdomain or plain-http page can plant one.
pub const HOST_SESSION_COOKIE: &str = "__Host-crosstab_session";

/// The session cookie's name when clients reach the service over https or not.
pub fn session_cookie(https: bool) -> &'static str {
    if https {
        HOST_SESSION_COOKIE
    } else {
        SESSION_COOKIE
    }
}

/// The caller of a `/v1` operation that needs one.
#[derive(Debug, Clone)]
pub struct Authenticated(pub Arc<Principal>);

impl FromRequestParts<Arc<HttpState>> for Authenticated {
    type Rejection = ServiceError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<HttpState>,
    ) -> Result<Self, Self::Rejection> {
        let address = client_address(parts, state);
        let token = parts
            .headers
            .get(AUTH_HEADER)
            .and_then(|value| value.to_str().ok());
        match state.services.auth.authenticate(token).await {
            Ok(principal) => {
                credentials_accepted(parts);
                if let Some(note) = parts.extensions.get::<Arc<AccessNote>>() {
                    note.caller(&principal.account, None);
                }
                Ok(Authenticated(principal))
            }
            Err(AuthError::Unauthorized) => Err(credentials_refused(parts, state, address)
                .unwrap_or(ApiError::Unauthorized)
                .into()),
            Err(AuthError::Store(error)) => Err(error.into()),
            // Not a refusal (the token may be good), but paced like one: while a provider is
            // down, made-up tokens naming its issuer must not come unpaced.
            Err(AuthError::Unavailable(reason)) => Err(credentials_refused(parts, state, address)
                .map_or(ServiceError::Internal(reason), ServiceError::from)),
        }
    }
}

/// Counts a refused credential against its connection (which then slows down) and its
/// address; the 429 to answer instead when the address is past its pace (good
/// credentials from the same address still work: one guesser behind a shared address
/// must not lock out everyone else there).
pub fn credentials_refused(
    parts: &Parts,
    state: &HttpState,
    address: Option<IpAddr>,
) -> Option<ApiError> {
    // A proxy's connection carries many clients' requests: it is not slowed for one of
    // them (the address's pace still counts the client). Any other is.
    let from_proxy = sender(parts, state).carried;
    if !from_proxy {
        if let Some(refusals) = super::listener::refusals(&parts.extensions) {
            refusals.refused();
        }
    }
    state
        .services
        .limits
        .auth_failed(address)
        .map(|retry_after_s| ApiError::RateLimited { retry_after_s })
}

/// Good credentials: the connection's count of refusals starts over.
pub fn credentials_accepted(parts: &Parts) {
    if let Some(refusals) = super::listener::refusals(&parts.extensions) {
        refusals.accepted();
    }
}

/// The signed-in user of an `/app` request.
#[derive(Debug, Clone)]
pub struct SessionUser(pub User);

impl FromRequestParts<Arc<HttpState>> for SessionUser {
    type Rejection = AppFailure;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<HttpState>,
    ) -> Result<Self, Self::Rejection> {
        let token = session_token(&parts.headers, state.https);
        let address = client_address(parts, state);
        let user = state.app.session_user(token, address).await?;
        if let Some(note) = parts.extensions.get::<Arc<AccessNote>>() {
            note.caller(&Arc::from(user.account.as_str()), Some(&user.username));
        }
        Ok(SessionUser(user))
    }
}

/// The client's address ([`Sender::client`]), for a route that paces it: a proxy's
/// request without one is said (at most once a minute).
pub fn client_address(parts: &Parts, state: &HttpState) -> Option<IpAddr> {
    let sender = sender(parts, state);
    if let (true, Some(proxy)) = (sender.unforwarded, &state.trusted_proxy) {
        proxy.warn_unforwarded(sender.client);
    }
    sender.client
}

/// Who sent the request: as the access log found it (see [`sender_of`]), or found now
/// for one that came another way.
fn sender(parts: &Parts, state: &HttpState) -> Sender {
    parts
        .extensions
        .get::<Sender>()
        .copied()
        .unwrap_or_else(|| sender_of(&parts.headers, &parts.extensions, state))
}

/// Who sent a request with `headers` and `extensions`: found once per request, by the
/// access log, which leaves it among the request's extensions for the extractors.
pub fn sender_of(
    headers: &HeaderMap,
    extensions: &axum::http::Extensions,
    state: &HttpState,
) -> Sender {
    let peer = super::listener::peer(extensions).map(|address| address.ip());
    match &state.trusted_proxy {
        Some(proxy) => proxy.sender(headers, peer),
        None => Sender::direct(peer),
    }
}

/// The client's address (see [`client_address`]); `None` for a request that came through
/// no listener (in-process tests).
#[derive(Debug, Clone, Copy)]
pub struct ClientAddress(pub Option<IpAddr>);

impl FromRequestParts<Arc<HttpState>> for ClientAddress {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<HttpState>,
    ) -> Result<Self, Self::Rejection> {
        Ok(ClientAddress(client_address(parts, state)))
    }
}

/// The session token among the request's cookies (the cookie of [`session_cookie`]).
pub fn session_token(headers: &HeaderMap, https: bool) -> Option<&str> {
    let name = session_cookie(https);
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|h| h.to_str().ok())
        .find_map(|header| token_from_cookies(header, name))
}

/// The value of cookie `name` in a `Cookie` header, if any.
fn token_from_cookies<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header
        .split(';')
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(cookie, _)| *cookie == name)
        .map(|(_, value)| value)
        .filter(|value| !value.is_empty())
}

/// The `Set-Cookie` value for `token` lasting `max_age_s` (empty token: clear the cookie);
/// over https, `Secure` and `__Host-` named.
pub fn set_cookie(token: &str, max_age_s: i64, https: bool) -> String {
    cookie(session_cookie(https), token, max_age_s, https)
}

/// Over https, what expires the plain-named cookie earlier builds set there.
pub fn expire_plain_cookie() -> String {
    cookie(SESSION_COOKIE, "", 0, true)
}

/// The session cookie `name` holding `token` for `max_age_s` (none for no token).
fn cookie(name: &str, token: &str, max_age_s: i64, secure: bool) -> String {
    let max_age = if token.is_empty() { 0 } else { max_age_s };
    let secure = if secure { "; Secure" } else { "" };
    format!("{name}={token}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn over_https_the_session_cookie_is_secure_and_host_only() {
        let cookie = set_cookie("t0k", 60, true);
        assert_eq!(
            cookie,
            "__Host-crosstab_session=t0k; Path=/; HttpOnly; SameSite=Strict; Max-Age=60; Secure"
        );
        assert_eq!(
            set_cookie("", 60, false),
            "crosstab_session=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"
        );
        let mut headers = HeaderMap::new();
        headers.insert(
            COOKIE,
            "crosstab_session=plain; __Host-crosstab_session=host"
                .parse()
                .unwrap(),
        );
        // Each mode reads only its own name: over https a cookie a plain-http page (or
        // a subdomain) could have set is not a session.
        assert_eq!(session_token(&headers, true), Some("host"));
        assert_eq!(session_token(&headers, false), Some("plain"));
        headers.insert(COOKIE, "crosstab_session=plain".parse().unwrap());
        assert_eq!(session_token(&headers, true), None);
        // What expires the plain name is that name, expired, as it was set over https.
        assert_eq!(
            expire_plain_cookie(),
            "crosstab_session=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0; Secure"
        );
    }
}
