//! The engine's error types.

use crosstab_contract::ApiError;

/// A compiled survey that can't be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The bytes are not a compiled survey.
    #[error("not a compiled crosstab survey")]
    NotASurvey,
    /// Written by a newer or older format.
    #[error("unsupported compiled survey format {0}")]
    UnsupportedVersion(u32),
    /// Structurally broken.
    #[error("corrupt compiled survey: {0}")]
    Corrupt(String),
    /// No memory for the survey's bytes.
    #[error("the survey's {bytes} bytes do not fit in memory")]
    OutOfMemory {
        /// The survey's size.
        bytes: u64,
    },
    /// Reading the file failed.
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// A survey definition or respondent file that can't be imported. Every variant names
/// the file, and where it applies the line, the column and the reason.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The definition itself is wrong.
    #[error("{file}:{line}: {reason}")]
    Definition {
        /// The definition file.
        file: String,
        /// 1-based line (1 when the whole file is at fault).
        line: usize,
        /// Why.
        reason: String,
    },
    /// A cell or row of the respondent file is wrong.
    #[error("{file}:{line}: column {column}: {reason}")]
    Data {
        /// The respondent file.
        file: String,
        /// 1-based line (the header is line 1).
        line: u64,
        /// The column's name.
        column: String,
        /// Why.
        reason: String,
    },
    /// A case (row) of an SPSS respondent file is wrong.
    #[error("{file}: case {case}: variable {variable}: {reason}")]
    Case {
        /// The respondent file.
        file: String,
        /// 1-based case number.
        case: u64,
        /// The variable's name.
        variable: String,
        /// Why.
        reason: String,
    },
    /// A respondent file that can't be read as its format: unreadable, truncated,
    /// data that does not decompress, or a variable it needs that it lacks.
    #[error("{file}: {}{reason}", variable.as_ref().map(|v| format!("variable {v}: ")).unwrap_or_default())]
    Source {
        /// The respondent file.
        file: String,
        /// The variable at fault, when one is.
        variable: Option<String>,
        /// Why.
        reason: String,
    },
    /// The survey exceeds what the compiled format can hold, or its header can't be
    /// written.
    #[error("survey {survey}: {reason}")]
    Compile {
        /// The `SurveyCode`.
        survey: String,
        /// Why.
        reason: String,
    },
    /// A file can't be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// A query the engine can't answer for a reason the caller must hear about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// The base is not defined in the survey.
    #[error("population base '{0}' is not defined")]
    UnknownPopulationBase(String),
    /// The survey has no such authorization group.
    #[error("authorization group '{0}' is not defined")]
    UnknownGroup(String),
    /// A query or a table given up before it was done (its caller's deadline passed).
    #[error("the query was given up before it was done")]
    GaveUp,
    /// A table's filter names what the survey does not define.
    #[error("The filter names what survey {survey} does not define: {reasons}.")]
    UnknownInFilter {
        /// The survey's code.
        survey: String,
        /// Which names, and why ([`crosstab_contract::Unknown::reasons`]).
        reasons: String,
    },
}

#[cfg(feature = "fs")]
impl ImportError {
    /// Compiled bytes refused on install: they do not load, or are not the survey
    /// expected.
    pub(crate) fn compiled(reason: impl std::fmt::Display) -> ImportError {
        ImportError::Definition {
            file: "(compiled survey)".into(),
            line: 1,
            reason: reason.to_string(),
        }
    }
}

impl From<QueryError> for ApiError {
    fn from(error: QueryError) -> Self {
        match error {
            QueryError::UnknownPopulationBase(base) => ApiError::InvalidPopulationBase { base },
            // No existence oracle: an unknown group looks exactly like one not granted.
            QueryError::UnknownGroup(_) => ApiError::ForbiddenSurvey,
            QueryError::GaveUp => ApiError::DeadlineExceeded,
            QueryError::UnknownInFilter { .. } => ApiError::InvalidRequest {
                field: Some("filter".to_owned()),
                message: error.to_string(),
                hint: Some(
                    "Use the survey's own variables and codes, as its codebook lists them."
                        .to_owned(),
                ),
            },
        }
    }
}
