//! `POST /v1/oauth/token`: the token endpoint (RFC 6749 §4.5 extension grants, form-
//! encoded in, RFC 6749 §5.1/§5.2 JSON out, never cached). The rules are
//! [`crate::service::sso::exchange`]'s; nothing here is billed. A refused assertion
//! counts as a failed authentication of the client's address, paced as bad keys are
//! (429 past the pace).

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, ORIGIN, PRAGMA};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use crosstab_contract::oauth::{
    OAuthError, OAuthErrorCode, TokenResponse, MAX_TOKEN_REQUEST_BYTES,
};

use super::extract::{credentials_accepted, credentials_refused, ClientAddress};
use super::HttpState;
use crate::service::sso::exchange::GrantError;
use crosstab_contract::oauth::SAML2_BEARER;

/// `POST /v1/oauth/token`.
pub async fn token(
    State(state): State<Arc<HttpState>>,
    ClientAddress(address): ClientAddress,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    if !is_form(&parts.headers) {
        return invalid_request("the body must be application/x-www-form-urlencoded");
    }
    let Ok(bytes) = axum::body::to_bytes(body, MAX_TOKEN_REQUEST_BYTES).await else {
        return invalid_request("the body is too large or did not arrive whole");
    };
    let params = match parameters(&bytes) {
        Ok(params) => params,
        Err(message) => return invalid_request(&message),
    };
    let Some(grant_type) = params.get("grant_type") else {
        return invalid_request("grant_type is missing");
    };
    let assertion = params.get("assertion").map(String::as_str).unwrap_or("");
    // A SAML assertion costs XML parsing and a signature check: from an address past its
    // pace it waits, good or not, before any of that (a JWT is cheap to refuse, so a good
    // one from a shared address still goes through, as on /v1).
    if grant_type == SAML2_BEARER {
        if let Some(retry_after_s) = state.services.limits.auth_waiting(address) {
            return super::api_error_response(&crosstab_contract::ApiError::RateLimited {
                retry_after_s,
            });
        }
    }
    // Counted against the address's pace: past it, 429 rather than `answer`.
    let paced = |answer: Response| {
        credentials_refused(&parts, &state, address)
            .map_or(answer, |limited| super::api_error_response(&limited))
    };
    match state.services.exchange(grant_type, assertion).await {
        Ok(issued) => {
            credentials_accepted(&parts);
            no_store(
                StatusCode::OK,
                &TokenResponse::bearer(issued.access_token, issued.expires_in),
            )
        }
        Err(GrantError::InvalidRequest(message)) => invalid_request(&message),
        Err(GrantError::UnsupportedGrantType) => {
            oauth_error(OAuthErrorCode::UnsupportedGrantType, None)
        }
        Err(GrantError::InvalidGrant(reason)) => {
            tracing::info!(?reason, "token exchange refused");
            paced(oauth_error(OAuthErrorCode::InvalidGrant, None))
        }
        // A fault of ours (the assertion may be good), yet paced like a refusal so that
        // made-up assertions can't come unpaced while a provider's keys are out of reach.
        Err(unavailable @ GrantError::Unavailable(_)) => {
            paced(super::error::fault(unavailable.to_string()))
        }
        Err(fault @ (GrantError::Store(_) | GrantError::Signing(_))) => {
            super::error::fault(fault.to_string())
        }
    }
}

/// `OPTIONS /v1/oauth/token`: the CORS preflight (a form POST needs none, but a client
/// that sets another header does).
pub async fn preflight(State(state): State<Arc<HttpState>>, headers: HeaderMap) -> Response {
    let mut response = StatusCode::OK.into_response();
    if state.cors.allow(headers.get(ORIGIN)).is_some() {
        super::cors::preflight_headers(response.headers_mut(), "POST, OPTIONS", "Content-Type");
    }
    response
}

fn is_form(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|media| {
            media
                .trim()
                .eq_ignore_ascii_case("application/x-www-form-urlencoded")
        })
}

/// The form's parameters; a repeated one is an error (RFC 6749 §3.2).
fn parameters(body: &[u8]) -> Result<HashMap<String, String>, String> {
    let mut params = HashMap::new();
    for (name, value) in form_urlencoded::parse(body) {
        if params
            .insert(name.clone().into_owned(), value.into_owned())
            .is_some()
        {
            return Err(format!("{name} is given more than once"));
        }
    }
    Ok(params)
}

fn invalid_request(message: &str) -> Response {
    oauth_error(OAuthErrorCode::InvalidRequest, Some(message.to_owned()))
}

fn oauth_error(error: OAuthErrorCode, error_description: Option<String>) -> Response {
    no_store(
        StatusCode::BAD_REQUEST,
        &OAuthError {
            error,
            error_description,
        },
    )
}

/// A JSON answer no cache may keep (RFC 6749 §5.1).
fn no_store(status: StatusCode, body: &impl serde::Serialize) -> Response {
    let body = match serde_json::to_vec(body) {
        Ok(body) => body,
        Err(error) => return super::error::fault(format!("token answer not written: {error}")),
    };
    let mut response = (status, Body::from(body)).into_response();
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(PRAGMA, HeaderValue::from_static("no-cache"));
    response
}
