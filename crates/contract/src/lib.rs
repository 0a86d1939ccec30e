//! The crosstab service's wire contract.
//!
//! This crate is the single source of truth for what crosses the wire: the request and
//! response types with the spec's exact JSON names, the one validation function that the
//! server and the WASM validator share, the target-expression language, every error
//! envelope the service can send, and the OpenAPI document generated from these types.
//! It does no I/O and builds for `wasm32-unknown-unknown`.
//!
//! Features: `app` adds the `app` module, the bodies of the researcher app's backend
//! (`/app`), shared by the server and the app, and the `table` module, the researcher's
//! crosstab table; `ts` derives TypeScript declarations
//! (tsify) on the wire types and, with `app`, the codebook, for the npm package's `.d.ts`.

#[cfg(feature = "app")]
pub mod app;
pub mod error;
pub mod expr;
pub mod idempotency;
pub mod json;
pub mod limits;
pub mod oauth;
pub mod openapi;
pub mod retry;
#[cfg(feature = "app")]
pub mod table;
pub mod validate;
#[cfg(feature = "test-vectors")]
#[allow(clippy::unwrap_used, clippy::expect_used)]
pub mod vectors;
pub mod wire;

pub use error::{ApiError, ErrorDetail, ErrorEnvelope};
pub use expr::{CmpOp, Expr, ParseError};
pub use validate::{validate_body, validate_value, ValidRequest};
pub use wire::{
    CrosstabRequest, CrosstabResponse, CrosstabResult, ResultCode, Stability, Unknown, ALL_GROUPS,
};

/// The contract's version: `info.version` of the OpenAPI document.
pub const CONTRACT_VERSION: &str = "1.0.0";

/// The header that carries the API key (or `Bearer <token>`) on `POST /crosstab`.
pub const AUTH_HEADER: &str = "Service-Engine-Authorizer";

/// The operation ids the spec defines, in its order (the service adds `token` and
/// `tokenOptions`, its single sign-on token endpoint).
pub const OPERATION_IDS: [&str; 3] = ["docs", "crosstab", "crosstabOptions"];
