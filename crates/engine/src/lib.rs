//! The crosstab engine: survey datasets, population bases, targets and weighted counts.
//!
//! A survey is defined by a TOML file beside a respondent CSV ([`definition`]), imported
//! and compiled to a compact file ([`import`]), and loaded in place ([`Survey`]) to answer
//! crosstab requests ([`Survey::crosstab`]) and the app's tables with their reliability
//! figures ([`Survey::table`]). With the default `fs` feature it also reads
//! files, memory-maps installed surveys and keeps a data dir ([`store`]); without it the
//! crate builds for `wasm32-unknown-unknown`.

mod aligned;
pub mod bitset;
mod budget;
mod builder;
mod cache;
pub mod codebook;
pub mod definition;
pub mod demo;
mod doorkeeper;
mod error;
mod eval;
mod exact;
mod format;
pub mod import;
mod names;
mod query;
pub mod source;
mod stats;
#[cfg(feature = "fs")]
pub mod store;
mod survey;
mod table;
#[cfg(feature = "testing")]
pub mod testing;
mod weights;

pub use aligned::AlignedBytes;
pub use bitset::{Bitset, Tally};
pub use budget::{Evict, MemoryBudget};
pub use codebook::Codebook;
pub use definition::SourceFormat;
pub use doorkeeper::{Doorkeeper, DOORKEEPER_BYTES};
pub use error::{ImportError, LoadError, QueryError};
pub use stats::Moments;
pub use survey::Survey;
pub use table::TableSums;
pub use weights::exact_sum;

/// Compiles and loads a survey from its definition text and CSV text in one step.
pub fn survey_from_csv(definition_toml: &str, csv: &str) -> Result<Survey, ImportError> {
    let bytes = import::compile(
        definition_toml,
        "survey.toml",
        csv.as_bytes(),
        "respondents.csv",
    )?;
    Survey::from_bytes(&bytes).map_err(|e| ImportError::Definition {
        file: "survey.toml".into(),
        line: 1,
        reason: e.to_string(),
    })
}

/// Answers a validated request from the survey it names: `None` when the survey is
/// unknown or not granted (the two look the same to the caller).
pub fn respond(
    survey: Option<&Survey>,
    request: &crosstab_contract::ValidRequest,
) -> Result<crosstab_contract::CrosstabResponse, crosstab_contract::ApiError> {
    let survey = survey.ok_or(crosstab_contract::ApiError::ForbiddenSurvey)?;
    survey.crosstab(request).map_err(Into::into)
}
