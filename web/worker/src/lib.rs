//! The app's second WebAssembly module, run in a Web Worker that the page starts on first
//! use: surveys opened from the researcher's files (the engine, TOML definitions) and
//! XLSX export. They are most of the app's code, and most sessions use neither, so the
//! page's first download leaves them out; a table computed from a file also no longer
//! holds the page up while it is computed.
//!
//! The page posts a [`Call`] (as JSON, with a file's text or bytes beside it) and gets
//! an [`Answer`] (the workbook's bytes beside it). Nothing of a file leaves the browser:
//! the worker is this page's own thread.

mod local;
mod protocol;
mod xlsx;

pub use local::answer;
pub use protocol::{
    Answer, BaseDraft, Call, Cell, GuidedDefinition, Opened, Payload, Reply, Sheet, SheetLine,
};
