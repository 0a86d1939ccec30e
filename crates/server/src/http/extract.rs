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
use super::HttpState;
use crate::service::auth::AuthError;
use crate::service::limits::RateLimits;
use crate::service::principal::Principal;
use crate::service::users::User;
use crate::service::ServiceError;

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "crosstab_session";

/// The caller of a `/v1` operation that needs one.
#[derive(Debug, Clone)]
pub struct Authenticated(pub Arc<Principal>);

impl FromRequestParts<Arc<HttpState>> for Authenticated {
    type Rejection = ServiceError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<HttpState>,
    ) -> Result<Self, Self::Rejection> {
        let limits = &state.services.limits;
        let address = client_address(parts, state);
        let token = parts
            .headers
            .get(AUTH_HEADER)
            .and_then(|value| value.to_str().ok());
        match state.services.auth.authenticate(token).await {
            Ok(principal) => {
                credentials_accepted(parts);
                Ok(Authenticated(principal))
            }
            Err(AuthError::Unauthorized) => match credentials_refused(parts, limits, address) {
                Some(retry_after_s) => Err(ApiError::RateLimited { retry_after_s }.into()),
                None => Err(ApiError::Unauthorized.into()),
            },
            Err(AuthError::Store(error)) => Err(error.into()),
        }
    }
}

/// Counts a refused credential against its connection (which then slows down) and its
/// address; the seconds to wait when the address is past its pace, to be answered with
/// 429 instead (good credentials from the same address still work: one guesser behind a
/// shared address must not lock out everyone else there).
pub fn credentials_refused(
    parts: &Parts,
    limits: &RateLimits,
    address: Option<IpAddr>,
) -> Option<u64> {
    if let Some(refusals) = super::listener::refusals(&parts.extensions) {
        refusals.refused();
    }
    limits.auth_failed(address)
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
        let token = session_token(&parts.headers);
        Ok(SessionUser(state.app.session_user(token).await?))
    }
}

/// The client's address: the connection's peer, or with `--trust-proxy-header`, the
/// address the proxy in front of this server appended last to that header.
pub fn client_address(parts: &Parts, state: &HttpState) -> Option<IpAddr> {
    if let Some(header) = &state.trusted_proxy_header {
        return parts
            .headers
            .get_all(header)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .next_back()
            .and_then(|address| address.trim().parse().ok());
    }
    super::listener::peer(&parts.extensions).map(|address| address.ip())
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

/// The session token among the request's cookies.
pub fn session_token(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|h| h.to_str().ok())
        .find_map(token_from_cookies)
}

/// The session token in a `Cookie` header, if any.
fn token_from_cookies(header: &str) -> Option<&str> {
    header
        .split(';')
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == SESSION_COOKIE)
        .map(|(_, value)| value)
        .filter(|value| !value.is_empty())
}

/// The `Set-Cookie` value for `token` lasting `max_age_s` (empty token: clear the cookie).
pub fn set_cookie(token: &str, max_age_s: i64, secure: bool) -> String {
    let max_age = if token.is_empty() { 0 } else { max_age_s };
    let secure = if secure { "; Secure" } else { "" };
    format!(
        "{SESSION_COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}"
    )
}
