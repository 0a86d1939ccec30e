//! The crosstab contract and engine for browsers and Node, packaged for npm as
//! `crosstab-wasm`.
//!
//! Front ends validate requests and render results with exactly the server's rules: the
//! validation is the contract crate's own function, the envelopes come from
//! [`crosstab_contract::ApiError::envelope`], and `Survey` (feature `engine`, on by default)
//! answers requests with the server's engine.
//!
//! Every JS export in [`js`] is a thin wrapper over a plain Rust function in the other
//! modules, so a Rust front end (the Leptos app) uses the same code without going through
//! JS values: [`validate::validate_text`], [`response::parse_response`],
//! [`retry::retry_delay_ms`], [`display::format_result`], [`crosstab`] and [`table`].

pub mod client;
pub mod display;
pub mod js;
pub mod response;
pub mod retry;
pub mod send;
#[cfg(feature = "engine")]
pub mod survey;
pub mod validate;

pub use crosstab_contract::{ApiError, ValidRequest, CONTRACT_VERSION};

/// Talc in place of the standard library's dlmalloc: a request's parsing and validation
/// make many small allocations, and talc serves them faster.
#[cfg(all(target_family = "wasm", not(target_feature = "atomics")))]
#[global_allocator]
static ALLOCATOR: talc::wasm::WasmDynamicTalc = talc::wasm::new_wasm_dynamic_allocator();

/// The OpenAPI document exactly as `GET /v1/docs` serves it: rendered at build time by
/// the contract crate's `openapi::document_json()` (see `build.rs`), so the WASM builds
/// don't carry the document generator.
pub const OPENAPI_JSON: &str = include_str!(concat!(env!("OUT_DIR"), "/openapi.json"));

/// Answers a validated request from `survey` as the server does for a caller granted the
/// whole survey: a request naming another `SurveyCode` is `forbidden_survey`, an unknown
/// base `invalid_population_base`, an unknown group `forbidden_survey`.
#[cfg(feature = "engine")]
pub fn crosstab(
    survey: &crosstab_engine::Survey,
    request: &ValidRequest,
) -> Result<crosstab_contract::CrosstabResponse, ApiError> {
    let named = (request.request.survey_code == survey.code()).then_some(survey);
    crosstab_engine::respond(named, request)
}

/// Reads a table request from its JSON text (what `JSON.stringify` gives for the value
/// JS passes) exactly as the server reads a body: anything else is its 400
/// `invalid_request`.
#[cfg(feature = "engine")]
pub fn table_request(text: &str) -> Result<crosstab_contract::app::TableRequest, ApiError> {
    Ok(crosstab_contract::app::TableRequest::from_json(
        text.as_bytes(),
    )?)
}

#[cfg(test)]
mod tests {
    #[test]
    fn embedded_openapi_is_the_served_document() {
        assert_eq!(
            super::OPENAPI_JSON,
            crosstab_contract::openapi::document_json()
        );
    }
}
