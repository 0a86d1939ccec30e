//! The OpenAPI 3 document, generated from the wire types. `GET /docs` serves it and the
//! WASM package exports it, so the two can't disagree.

use utoipa::openapi::schema::{ArrayItems, Schema};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, SecurityScheme};
use utoipa::openapi::{example::Example, OpenApi as Document, RefOr};
use utoipa::{Modify, OpenApi};

use crate::error::{ApiError, ErrorDetail, ErrorEnvelope};
use crate::limits::MAX_TARGET_CODE_CHARS;
use crate::oauth::{GrantType, OAuthError, OAuthErrorCode, TokenRequest, TokenResponse};
use crate::wire::{CrosstabRequest, CrosstabResponse, CrosstabResult, Stability};
use crate::CONTRACT_VERSION;

/// Name of the security scheme that carries the API key.
pub const SECURITY_SCHEME: &str = "ServiceEngineAuthorizer";
/// Name of the security scheme that carries a single sign-on bearer token (same header).
pub const BEARER_SCHEME: &str = "ServiceEngineAuthorizerBearer";

const DESCRIPTION: &str = "\
Survey-audience query service. `POST /crosstab` takes one survey, one population base, an \
optional authorization group and one or two target codes, and answers with each target's \
weighted projected audience (`WgtAud`, in `AudienceReportUnits`), unweighted respondents \
(`Resps`) and stability flag (`Stbl`). Only a successful crosstab call is billed.

## ResultCode on HTTP 200
| ResultCode | Meaning |
|---|---|
| 0 | Success. `ResultDescription` is the empty string. |
| 1 | Partial: one or more target codes name a variable or code the survey does not define. Each such entry is `{WgtAud: 0, Resps: 0, Stbl: 1}` and `ResultDescription` names the unknown codes (up to ten of each kind: not defined, a variable named alone, a named code compared; each cut to 32 characters). |

On 4xx and 5xx, `ResultCode` equals the HTTP status and `error.code` is machine-readable. \
A path of this API called with a method it does not serve (`GET /crosstab`) is 405 \
`method_not_allowed` in the same envelope, with an `Allow` header; a path it does not have \
is 404 `not_found`, also in the envelope.

## Limits
| Limit | Value |
|---|---|
| Target codes per request | 1 to 2 |
| Target code length | 1 to 1024 characters |
| SurveyCode, PopulationBaseCode, AuthorizationGroup | 1 to 64 of `A-Z a-z 0-9 _ . -` |
| Target expression nesting | at most 64 |
| Request body | at most 65536 bytes |
| Maximum rows per axis | 5000 (may change in future versions) |

## Target codes
A target code is a named code (`F2554`) or an expression over the survey's variables: \
`GENDER = 2`, `AGE BETWEEN 25 AND 54`, `REGION IN (1, 2)`, combined with `AND`, `OR`, `NOT` \
and parentheses; `*` is every respondent.

```text
expr    := and ( OR and )*
and     := unary ( AND unary )*
unary   := NOT unary | primary
primary := '(' expr ')' | '*' | NAME
         | NAME op NUMBER | NAME IN '(' NUMBER (',' NUMBER)* ')'
         | NAME BETWEEN NUMBER AND NUMBER
op      := '=' | '!=' | '<' | '<=' | '>' | '>='
NAME    := [A-Za-z_][A-Za-z0-9_.]*
NUMBER  := '-'? [0-9]+ ('.' [0-9]+)?
```

Keywords (`AND OR NOT IN BETWEEN`) are case-insensitive and reserved; names are \
case-sensitive. A bare `NAME` is a named code, a `NAME` compared is a variable. `BETWEEN` \
includes both bounds, low first (`AGE BETWEEN 54 AND 25` matches nobody, as in SQL). A \
missing answer satisfies no comparison; `NOT x` is the complement \
of `x` within all respondents, so it includes those whose answer is missing (`NOT AGE < 30` \
counts them, `AGE >= 30` does not). A target naming a variable or code the survey does not \
define is not refused: it is answered `{WgtAud: 0, Resps: 0, Stbl: 1}` with `ResultCode` 1.

## Authentication
`POST /crosstab` takes either an API key, `Service-Engine-Authorizer: <API_KEY>`, or a \
single sign-on token, `Service-Engine-Authorizer: Bearer <JWT>`: a JWT signed (RS256, \
ES256 or EdDSA) by an identity provider the operator trusts, naming this service as its \
audience, or an access token from `POST /oauth/token`, which exchanges a trusted \
provider's JWT (RFC 7523) or SAML 2.0 assertion (RFC 7522) for one. Either way the call \
is billed to the account the key or token maps to; a token that is not accepted is the \
same 401 as a bad key.";

#[allow(dead_code)] // Only carries the operation's documentation.
#[utoipa::path(
    get,
    path = "/docs",
    operation_id = "docs",
    tag = "service",
    summary = "OpenAPI description of the service",
    description = "Returns this document. Needs no key and is not billed: a 200 with a parseable body is a cheap liveness probe.",
    security(()),
    responses(
        (status = 200, description = "The OpenAPI 3 document", content_type = "application/json", body = Object),
    )
)]
fn docs() {}

#[allow(dead_code)] // Only carries the operation's documentation.
#[utoipa::path(
    post,
    path = "/crosstab",
    operation_id = "crosstab",
    tag = "crosstab",
    summary = "Run a crosstab query",
    description = "Answers one survey, one population base, an optional authorization group and one or two target codes with each target's weighted audience, respondents and stability. Billed only on HTTP 200.",
    request_body(content = CrosstabRequest, content_type = "application/json", description = "The query: a JSON object of at most 65536 bytes that names no member twice (at any depth). Members the contract does not define are ignored."),
    params(
        ("Idempotency-Key" = Option<String>, Header, min_length = 1, max_length = 255, pattern = r"^[\x21-\x7E]([\x20-\x7E]{0,253}[\x21-\x7E])?$",
            description = "Optional: one fresh value (e.g. a UUID) per logical query, sent again unchanged on its retries. A retry of the same body within 24 h gets the first 200 again, marked `Idempotent-Replayed: true`, and is not billed again; the same key with another body is 422. 1 to 255 printable ASCII characters (HTTP drops spaces around a header value, so it neither starts nor ends with one)."),
    ),
    security(("ServiceEngineAuthorizer" = []), ("ServiceEngineAuthorizerBearer" = [])),
    responses(
        (status = 200, description = "Success (ResultCode 0) or partial result (ResultCode 1). Billed, once per Idempotency-Key.", body = CrosstabResponse,
            headers(("Access-Control-Allow-Origin" = String, description = "The caller's origin when it is allowed"),
                    ("X-Request-Id" = String, description = "Identifier of this request"),
                    ("Idempotent-Replayed" = String, description = "`true` when this is the stored answer to an earlier request with the same Idempotency-Key and body (not billed again); absent otherwise"))),
        (status = 400, description = "invalid_request (including a body naming a member twice, or a malformed Idempotency-Key), invalid_target_codes or invalid_population_base. Not retryable, not billed.", body = ErrorEnvelope),
        (status = 401, description = "unauthorized: the Service-Engine-Authorizer header is missing, malformed, invalid or expired (a key, or a bearer token that is not accepted). Fetch a fresh key or token before retrying. Not billed.", body = ErrorEnvelope),
        (status = 403, description = "forbidden_survey: the key is not entitled to the survey or authorization group. Not retryable, not billed.", body = ErrorEnvelope),
        (status = 408, description = "request_timeout: the body did not arrive whole within the server's deadline; the connection is closed. Not billed.", body = ErrorEnvelope),
        (status = 413, description = "payload_too_large: the body exceeds 65536 bytes. Not billed.", body = ErrorEnvelope),
        (status = 415, description = "unsupported_media_type: Content-Type is not application/json, or names a charset other than UTF-8. Not billed.", body = ErrorEnvelope),
        (status = 422, description = "idempotency_key_reused: the account already used this Idempotency-Key with another body. Send a new key for a new query. Not billed.", body = ErrorEnvelope),
        (status = 429, description = "rate_limited: over the account's request rate or daily quota, or too many failed authentications from this address. Retry after the Retry-After header's seconds. Not billed.", body = ErrorEnvelope,
            headers(("Retry-After" = u64, description = "Seconds to wait before retrying"))),
        (status = 500, description = "internal_error. Retry with exponential backoff. Not billed.", body = ErrorEnvelope),
        (status = 503, description = "deadline_exceeded: the query took longer than the server allows. Retry with exponential backoff (with the same Idempotency-Key). Not billed.", body = ErrorEnvelope),
    )
)]
fn crosstab() {}

#[allow(dead_code)] // Only carries the operation's documentation.
#[utoipa::path(
    options,
    path = "/crosstab",
    operation_id = "crosstabOptions",
    tag = "crosstab",
    summary = "CORS preflight for /crosstab",
    description = "Issued by browsers before a cross-origin POST. Needs no key and is not billed. For an allowed origin the allow headers are present; for any other origin they are absent.",
    security(()),
    responses(
        (status = 200, description = "Preflight answer",
            headers(("Access-Control-Allow-Origin" = String, description = "The allowed origin"),
                    ("Access-Control-Allow-Methods" = String, description = "POST, OPTIONS"),
                    ("Access-Control-Allow-Headers" = String, description = "Content-Type, Service-Engine-Authorizer, Idempotency-Key"),
                    ("Access-Control-Max-Age" = String, description = "Seconds the preflight may be cached"),
                    ("Vary" = String, description = "Origin"))),
    )
)]
fn crosstab_options() {}

#[allow(dead_code)] // Only carries the operation's documentation.
#[utoipa::path(
    post,
    path = "/oauth/token",
    operation_id = "token",
    tag = "sso",
    summary = "Exchange an identity provider's assertion for an access token",
    description = "The OAuth 2.0 token endpoint (RFC 6749) for single sign-on. `grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer` with `assertion=<JWT>` (RFC 7523) takes a JWT of a trusted OpenID Connect issuer; `grant_type=urn:ietf:params:oauth:grant-type:saml2-bearer` with `assertion=<base64url SAML assertion>` (RFC 7522) takes a signed SAML 2.0 assertion of a trusted SAML identity provider (each assertion once). The access token answered is valid at most an hour and never past the assertion's own expiry; send it as `Service-Engine-Authorizer: Bearer <access_token>` on `POST /crosstab`. Needs no key and is not billed.",
    request_body(content = TokenRequest, content_type = "application/x-www-form-urlencoded", description = "Form-encoded parameters, each at most once; at most 262144 bytes."),
    security(()),
    responses(
        (status = 200, description = "The access token. Not billed.", body = TokenResponse,
            headers(("Cache-Control" = String, description = "no-store"),
                    ("X-Request-Id" = String, description = "Identifier of this request"))),
        (status = 400, description = "RFC 6749 error: invalid_request (a parameter missing, repeated or malformed, or a body that is not form-encoded), unsupported_grant_type, or invalid_grant (the assertion is not accepted; why is logged, never told). Not billed.", body = OAuthError,
            headers(("Cache-Control" = String, description = "no-store"))),
        (status = 429, description = "rate_limited (the contract's envelope): too many refused assertions or bad credentials from this address. Retry after the Retry-After header's seconds.", body = ErrorEnvelope,
            headers(("Retry-After" = u64, description = "Seconds to wait before retrying"))),
        (status = 500, description = "internal_error (the contract's envelope). Retry with exponential backoff.", body = ErrorEnvelope),
    )
)]
fn token() {}

#[allow(dead_code)] // Only carries the operation's documentation.
#[utoipa::path(
    options,
    path = "/oauth/token",
    operation_id = "tokenOptions",
    tag = "sso",
    summary = "CORS preflight for /oauth/token",
    description = "Issued by browsers before a cross-origin POST. Needs no key and is not billed. For an allowed origin the allow headers are present; for any other origin they are absent.",
    security(()),
    responses(
        (status = 200, description = "Preflight answer",
            headers(("Access-Control-Allow-Origin" = String, description = "The allowed origin"),
                    ("Access-Control-Allow-Methods" = String, description = "POST, OPTIONS"),
                    ("Access-Control-Allow-Headers" = String, description = "Content-Type"),
                    ("Access-Control-Max-Age" = String, description = "Seconds the preflight may be cached"),
                    ("Vary" = String, description = "Origin"))),
    )
)]
fn token_options() {}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Crosstab Audience Query Service",
        description = DESCRIPTION,
        license(name = "Apache-2.0")
    ),
    servers((url = "/v1", description = "Version 1 of the service, relative to the host serving this document")),
    paths(docs, crosstab, crosstab_options, token, token_options),
    components(schemas(CrosstabRequest, CrosstabResponse, CrosstabResult, Stability, ErrorEnvelope, ErrorDetail,
        TokenRequest, GrantType, TokenResponse, OAuthError, OAuthErrorCode)),
    modifiers(&ContractDetails),
    tags(
        (name = "crosstab", description = "Audience queries"),
        (name = "sso", description = "Single sign-on: access tokens for identity providers' assertions"),
        (name = "service", description = "Service description")
    )
)]
struct ApiDoc;

/// Fills in what attributes can't carry: the version constant, the security scheme and
/// examples built by the same code that builds real responses.
struct ContractDetails;

impl Modify for ContractDetails {
    fn modify(&self, openapi: &mut Document) {
        openapi.info.version = CONTRACT_VERSION.to_owned();
        constrain_target_codes(openapi);
        if let Some(components) = openapi.components.as_mut() {
            components.add_security_scheme(
                SECURITY_SCHEME,
                SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                    crate::AUTH_HEADER,
                    "The API key from the developer portal. Keep it server-side.",
                ))),
            );
            components.add_security_scheme(
                BEARER_SCHEME,
                SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                    crate::AUTH_HEADER,
                    "Single sign-on: `Bearer <JWT>`, a JWT of an identity provider the operator trusts (RS256, ES256 or EdDSA; audience: this service) or an access token from POST /oauth/token.",
                ))),
            );
        }
        let Some(post) = openapi
            .paths
            .paths
            .get_mut("/crosstab")
            .and_then(|item| item.post.as_mut())
        else {
            return;
        };
        for (status, examples) in error_examples() {
            let Some(RefOr::T(response)) = post.responses.responses.get_mut(status) else {
                continue;
            };
            if let Some(content) = response.content.get_mut("application/json") {
                for (name, envelope) in examples {
                    let value = serde_json::to_value(envelope.envelope()).unwrap_or_default();
                    content.examples.insert(
                        name.to_owned(),
                        RefOr::T(Example::builder().value(Some(value)).build()),
                    );
                }
            }
        }
        if let Some(RefOr::T(response)) = post.responses.responses.get_mut("200") {
            if let Some(content) = response.content.get_mut("application/json") {
                let partial = crate::wire::CrosstabResponse::new(
                    vec![
                        crate::wire::CrosstabResult {
                            wgt_aud: 28411.372,
                            resps: 5321,
                            stbl: Stability::Stable,
                        },
                        crate::wire::CrosstabResult::UNKNOWN,
                    ],
                    1000,
                    &[crate::wire::Unknown::Undefined("NOSUCHCODE".to_owned())],
                );
                let success = crate::wire::CrosstabResponse::new(
                    vec![crate::wire::CrosstabResult {
                        wgt_aud: 28411.372,
                        resps: 5321,
                        stbl: Stability::Stable,
                    }],
                    1000,
                    &[],
                );
                for (name, body) in [("success", success), ("partial", partial)] {
                    let value = serde_json::to_value(body).unwrap_or_default();
                    content.examples.insert(
                        name.to_owned(),
                        RefOr::T(Example::builder().value(Some(value)).build()),
                    );
                }
            }
        }
    }
}

/// States on `TargetCodes`' items the length the validator enforces (an attribute on a
/// `Vec<String>` constrains only the array).
fn constrain_target_codes(openapi: &mut Document) {
    let Some(RefOr::T(Schema::Object(request))) = openapi
        .components
        .as_mut()
        .and_then(|components| components.schemas.get_mut("CrosstabRequest"))
    else {
        return;
    };
    let Some(RefOr::T(Schema::Array(targets))) = request.properties.get_mut("TargetCodes") else {
        return;
    };
    if let ArrayItems::RefOrSchema(items) = &mut targets.items {
        if let RefOr::T(Schema::Object(item)) = items.as_mut() {
            item.min_length = Some(1);
            item.max_length = Some(MAX_TARGET_CODE_CHARS);
        }
    }
}

/// What the validator answers `body`: the examples are the server's own refusals.
fn refusal(body: &[u8]) -> ApiError {
    match crate::validate_body(body) {
        Err(error) => error,
        Ok(_) => ApiError::Internal,
    }
}

fn error_examples() -> Vec<(&'static str, Vec<(&'static str, ApiError)>)> {
    vec![
        (
            "400",
            vec![
                (
                    "invalid_target_codes",
                    refusal(br#"{"SurveyCode":"S1","PopulationBaseCode":"ALL","TargetCodes":["A","B","C"]}"#),
                ),
                ("invalid_request", refusal(b"{}")),
                (
                    "invalid_population_base",
                    ApiError::InvalidPopulationBase {
                        base: "TEENS".to_owned(),
                    },
                ),
            ],
        ),
        ("401", vec![("unauthorized", ApiError::Unauthorized)]),
        ("403", vec![("forbidden_survey", ApiError::ForbiddenSurvey)]),
        ("408", vec![("request_timeout", ApiError::RequestTimeout)]),
        ("413", vec![("payload_too_large", ApiError::PayloadTooLarge)]),
        ("415", vec![("unsupported_media_type", ApiError::UnsupportedMediaType)]),
        (
            "422",
            vec![("idempotency_key_reused", ApiError::IdempotencyKeyReused)],
        ),
        (
            "429",
            vec![
                ("rate_limited", ApiError::RateLimited { retry_after_s: 1 }),
                (
                    "rate_limited_daily_quota",
                    ApiError::OverDailyQuota {
                        retry_after_s: 3600,
                    },
                ),
            ],
        ),
        ("500", vec![("internal_error", ApiError::Internal)]),
        ("503", vec![("deadline_exceeded", ApiError::DeadlineExceeded)]),
    ]
}

/// The OpenAPI document.
pub fn document() -> Document {
    ApiDoc::openapi()
}

/// The OpenAPI document as JSON text, as `GET /docs` serves it.
pub fn document_json() -> String {
    // Serializing a document of plain maps and strings can't fail; fall back to an empty
    // object rather than panic.
    document().to_json().unwrap_or_else(|_| "{}".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn doc() -> Value {
        serde_json::from_str(&document_json()).unwrap()
    }

    #[test]
    fn the_400_examples_are_the_validators_own_refusals() {
        let doc = doc();
        let examples = &doc["paths"]["/crosstab"]["post"]["responses"]["400"]["content"]
            ["application/json"]["examples"];
        for (name, body) in [
            ("invalid_request", &b"{}"[..]),
            (
                "invalid_target_codes",
                br#"{"SurveyCode":"S1","PopulationBaseCode":"ALL","TargetCodes":["A","B","C"]}"#,
            ),
        ] {
            let refused = crate::validate_body(body).err().unwrap();
            assert_eq!(
                examples[name]["value"],
                serde_json::to_value(refused.envelope()).unwrap(),
                "{examples}"
            );
        }
    }

    #[test]
    fn carries_version_server_and_operation_ids() {
        let doc = doc();
        assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
        assert_eq!(doc["info"]["version"], CONTRACT_VERSION);
        assert!(doc["servers"][0]["url"].as_str().unwrap().ends_with("/v1"));
        assert_eq!(doc["paths"]["/docs"]["get"]["operationId"], "docs");
        assert_eq!(doc["paths"]["/crosstab"]["post"]["operationId"], "crosstab");
        assert_eq!(
            doc["paths"]["/crosstab"]["options"]["operationId"],
            "crosstabOptions"
        );
        assert_eq!(doc["paths"]["/oauth/token"]["post"]["operationId"], "token");
    }

    #[test]
    fn the_token_endpoint_is_form_encoded_and_answers_rfc_6749_bodies() {
        let doc = doc();
        let token = &doc["paths"]["/oauth/token"]["post"];
        let form = &token["requestBody"]["content"]["application/x-www-form-urlencoded"];
        assert!(form["schema"].is_object(), "{token}");
        let grant = &doc["components"]["schemas"]["GrantType"]["enum"];
        assert_eq!(
            grant,
            &serde_json::json!([crate::oauth::JWT_BEARER, crate::oauth::SAML2_BEARER])
        );
        let errors = &doc["components"]["schemas"]["OAuthErrorCode"]["enum"];
        assert_eq!(
            errors,
            &serde_json::json!(["invalid_request", "invalid_grant", "unsupported_grant_type"])
        );
        assert!(token["responses"]["200"]["headers"]["Cache-Control"].is_object());
        let security = token["security"].as_array().unwrap();
        assert!(security
            .iter()
            .all(|r| r.as_object().is_some_and(|o| o.is_empty())));
        let bearer = &doc["components"]["securitySchemes"][BEARER_SCHEME];
        assert_eq!(bearer["name"], crate::AUTH_HEADER);
        assert!(doc["paths"]["/crosstab"]["post"]["security"][1][BEARER_SCHEME].is_array());
    }

    #[test]
    fn security_is_on_crosstab_only() {
        let doc = doc();
        let scheme = &doc["components"]["securitySchemes"][SECURITY_SCHEME];
        assert_eq!(scheme["type"], "apiKey");
        assert_eq!(scheme["in"], "header");
        assert_eq!(scheme["name"], crate::AUTH_HEADER);
        assert!(doc["paths"]["/crosstab"]["post"]["security"][0][SECURITY_SCHEME].is_array());
        for (path, method) in [
            ("/docs", "get"),
            ("/crosstab", "options"),
            ("/oauth/token", "post"),
            ("/oauth/token", "options"),
        ] {
            let security = &doc["paths"][path][method]["security"];
            assert!(
                security.as_array().is_some_and(|s| s
                    .iter()
                    .all(|r| r.as_object().is_some_and(|o| o.is_empty()))),
                "{path} {method}: {security}"
            );
        }
    }

    #[test]
    fn the_schema_states_every_limit_the_validator_enforces() {
        use crate::limits::{MAX_IDENTIFIER_CHARS, MAX_TARGET_CODES, MIN_TARGET_CODES};
        let doc = doc();
        let request = &doc["components"]["schemas"]["CrosstabRequest"];
        let targets = &request["properties"]["TargetCodes"];
        assert_eq!(targets["minItems"], MIN_TARGET_CODES);
        assert_eq!(targets["maxItems"], MAX_TARGET_CODES);
        assert_eq!(targets["items"]["minLength"], 1);
        assert_eq!(targets["items"]["maxLength"], MAX_TARGET_CODE_CHARS);
        for field in ["SurveyCode", "PopulationBaseCode", "AuthorizationGroup"] {
            let schema = &request["properties"][field];
            assert_eq!(schema["minLength"], 1, "{field}");
            assert_eq!(schema["maxLength"], MAX_IDENTIFIER_CHARS, "{field}");
            assert_eq!(schema["pattern"], "^[A-Za-z0-9_.-]+$", "{field}");
        }
        let required = request["required"].as_array().unwrap();
        for field in ["SurveyCode", "PopulationBaseCode", "TargetCodes"] {
            assert!(required.iter().any(|r| r == field), "{field}");
        }
        let post = &doc["paths"]["/crosstab"]["post"];
        let body = post["requestBody"]["description"].as_str().unwrap();
        assert!(
            body.contains(&crate::limits::MAX_BODY_BYTES.to_string()),
            "{body}"
        );
        let key = post["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "Idempotency-Key")
            .unwrap();
        assert_eq!(key["in"], "header");
        assert_eq!(key["required"], false);
        assert_eq!(key["schema"]["maxLength"], 255);
        assert_eq!(
            post["responses"]["429"]["headers"]["Retry-After"]["schema"]["type"],
            "integer"
        );
        assert!(post["responses"]["200"]["headers"]["Idempotent-Replayed"].is_object());
    }

    #[test]
    fn every_crosstab_status_has_schema_and_example() {
        let doc = doc();
        let responses = &doc["paths"]["/crosstab"]["post"]["responses"];
        for status in [
            "200", "400", "401", "403", "408", "413", "415", "422", "429", "500", "503",
        ] {
            let content = &responses[status]["content"]["application/json"];
            assert!(content["schema"].is_object(), "{status}");
            let examples = content["examples"].as_object().unwrap();
            assert!(!examples.is_empty(), "{status}");
            for example in examples.values() {
                let code = example["value"]["ResultCode"].as_i64().unwrap();
                if status != "200" {
                    assert_eq!(code.to_string(), status);
                }
            }
        }
        let preflight = &doc["paths"]["/crosstab"]["options"]["responses"]["200"]["headers"];
        for header in [
            "Access-Control-Allow-Origin",
            "Access-Control-Allow-Methods",
            "Access-Control-Allow-Headers",
        ] {
            assert!(preflight[header].is_object(), "{header}");
        }
        assert!(responses["200"]["headers"]["Access-Control-Allow-Origin"].is_object());
        let description = doc["info"]["description"].as_str().unwrap();
        assert!(description.contains("| 1 | Partial"));
        assert!(description.contains("5000"));
    }
}
