//! The token endpoint's wire types (`POST /oauth/token`, RFC 6749 §4.5 with RFC 7522 and
//! RFC 7523): an assertion from a trusted identity provider in, an access token for
//! `Service-Engine-Authorizer: Bearer <token>` out, or an RFC 6749 §5.2 error.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// RFC 7523: a JWT of a trusted OpenID Connect issuer as the grant.
pub const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
/// RFC 7522: a SAML 2.0 assertion of a trusted SAML identity provider as the grant.
pub const SAML2_BEARER: &str = "urn:ietf:params:oauth:grant-type:saml2-bearer";
/// The longest an issued access token lasts, in seconds.
pub const MAX_TOKEN_LIFETIME_S: i64 = 3600;
/// The largest token request body, in bytes (a signed SAML assertion, base64url).
pub const MAX_TOKEN_REQUEST_BYTES: usize = 256 * 1024;

/// The grant types the token endpoint takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub enum GrantType {
    /// A JWT of a trusted OpenID Connect issuer.
    #[serde(rename = "urn:ietf:params:oauth:grant-type:jwt-bearer")]
    JwtBearer,
    /// A SAML 2.0 assertion of a trusted SAML identity provider.
    #[serde(rename = "urn:ietf:params:oauth:grant-type:saml2-bearer")]
    Saml2Bearer,
}

/// Body of `POST /oauth/token`, form-encoded (`application/x-www-form-urlencoded`);
/// each parameter at most once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TokenRequest {
    /// Which kind of assertion `assertion` is.
    pub grant_type: GrantType,
    /// For jwt-bearer, the JWT; for saml2-bearer, the SAML assertion's XML in base64url.
    #[schema(min_length = 1)]
    pub assertion: String,
    /// Ignored (the token carries the account's grants).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

/// A 200 from `POST /oauth/token` (RFC 6749 §5.1). Sent with `Cache-Control: no-store`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({
    "access_token": "eyJhbGciOiJFZERTQSIsImtpZCI6Ii4uLiJ9.eyJpc3MiOiIuLi4ifQ.c2ln",
    "token_type": "Bearer",
    "expires_in": 3600
}))]
pub struct TokenResponse {
    /// The access token: send it as `Service-Engine-Authorizer: Bearer <access_token>`.
    pub access_token: String,
    /// Always `Bearer`.
    #[schema(pattern = "^Bearer$")]
    pub token_type: String,
    /// Seconds the token is valid: at most 3600, never past the assertion's own expiry.
    #[schema(minimum = 1, maximum = 3600)]
    pub expires_in: i64,
}

impl TokenResponse {
    /// The answer for `access_token`, valid `expires_in` seconds.
    pub fn bearer(access_token: String, expires_in: i64) -> TokenResponse {
        TokenResponse {
            access_token,
            token_type: "Bearer".to_owned(),
            expires_in,
        }
    }
}

/// RFC 6749 §5.2 error codes the token endpoint sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OAuthErrorCode {
    /// A parameter is missing, repeated or malformed, or the body is not form-encoded.
    InvalidRequest,
    /// The assertion is not accepted (signature, issuer, audience, time, replay, account).
    InvalidGrant,
    /// `grant_type` is neither jwt-bearer nor saml2-bearer.
    UnsupportedGrantType,
}

/// A 400 from `POST /oauth/token` (RFC 6749 §5.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct OAuthError {
    /// The error code.
    pub error: OAuthErrorCode,
    /// What was wrong with the request, for invalid_request (an assertion's refusal
    /// reason is never told).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_description: Option<String>,
}
