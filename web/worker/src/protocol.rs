//! What the page and the worker say to each other.

use crosstab_contract::app::{Codebook, Table, TableRequest};
use crosstab_engine::AlignedBytes;
use serde::{Deserialize, Serialize};

/// What the page asks of the worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Call {
    /// Nothing but an answer: the worker is running (the page asks when it starts it).
    Start,
    /// Compile a TOML definition and the CSV in the payload (text), as `crosstab survey
    /// import` would, and open it; `from` is what the screen says it came from.
    OpenCsv { definition: String, from: String },
    /// The same, with the definition the guided form stands for.
    OpenGuided {
        definition: GuidedDefinition,
        from: String,
    },
    /// Open the compiled survey in the payload (bytes).
    OpenCompiled { from: String },
    /// Compute a table from the opened survey.
    Table(TableRequest),
    /// Close the opened survey (its data is dropped).
    Close,
    /// Write a table's sheet as an XLSX workbook (its bytes come back in the payload).
    Xlsx(Sheet),
}

/// What comes with a call or an answer besides its JSON.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Payload {
    /// Nothing.
    #[default]
    None,
    /// A file's text.
    Text(String),
    /// A file that came but could not be read, and why.
    Unread(String),
    /// A workbook's bytes.
    Bytes(Vec<u8>),
    /// A compiled survey's bytes, copied once from the page's array into the aligned
    /// memory the survey reads in place; or why they could not be (too large).
    Compiled(Result<AlignedBytes, String>),
}

/// The worker's answer to a call: what it did, or why it could not.
pub type Answer = Result<Reply, String>;

/// What a call did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Reply {
    /// Running.
    Started,
    /// The survey is open.
    Opened(Box<Opened>),
    /// The table.
    Table(Box<Table>),
    /// The survey is closed.
    Closed,
    /// The workbook is in the payload.
    Xlsx,
}

/// What the screen shows of the opened survey.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Opened {
    /// Its codebook (labels, bases, groups).
    pub codebook: Codebook,
    /// Where it came from: the file names, for the screen only.
    pub from: String,
}

/// One population base of the guided form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BaseDraft {
    /// `PopulationBaseCode`.
    pub code: String,
    /// Display label.
    pub label: String,
    /// Its expression (`*` for everyone).
    pub expr: String,
}

/// The guided form's answers: what a definition needs when the file came alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuidedDefinition {
    /// The `SurveyCode`.
    pub code: String,
    /// Display name.
    pub name: String,
    /// The id column.
    pub id_column: String,
    /// The weight column (`None`: an unweighted survey, every respondent weighing 1).
    pub weight_column: Option<String>,
    /// The group column, if any.
    pub group_column: Option<String>,
    /// What `WgtAud` counts in: 1 (the weights' sums as they are), 1000 (thousands)...
    pub audience_report_units: u32,
    /// At least one base.
    pub bases: Vec<BaseDraft>,
}

/// A table as the lines of a spreadsheet, as the page lays it out for its CSV too.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sheet {
    /// The lines above the table: a name and its value (`Survey`, `DEMO — ...`).
    pub caption: Vec<(String, String)>,
    /// The head: `Row`, `Figure`, then a label per column.
    pub head: Vec<String>,
    /// A line per row and figure.
    pub lines: Vec<SheetLine>,
    /// The legend, a line each.
    pub legend: Vec<String>,
}

/// One line of a sheet's body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SheetLine {
    /// The row's label (on its first line only).
    pub row: String,
    /// What the line shows.
    pub what: String,
    /// Decimal places its numbers are shown with (stored with every digit).
    pub decimals: u8,
    /// Whether its numbers are percentages (`12.5` is 12.5%).
    pub percent: bool,
    /// A value per column.
    pub values: Vec<Cell>,
}

/// One value of a sheet's line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Cell {
    /// A figure.
    Number(f64),
    /// A marker.
    Text(String),
    /// Nothing (a figure that does not apply).
    Empty,
}
