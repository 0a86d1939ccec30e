//! The app's second WebAssembly module, run in a Web Worker that the page starts on first
//! use: surveys opened from the researcher's files (the engine, TOML definitions) and
//! XLSX export. They are most of the app's code, and most sessions use neither, so the
//! page's first download leaves them out; a table computed from a file also no longer
//! holds the page up while it is computed.
//!
//! The page posts a [`Call`] (as JSON, with a CSV's `File` or a compiled survey's bytes
//! beside it; the worker reads the `File`, so the page holds no copy of it) and gets
//! an [`Answer`] (the workbook's bytes beside it). Nothing of a file leaves the browser:
//! the worker is a thread of the page's own origin.

mod local;
mod protocol;
pub mod wire;
mod xlsx;

pub use local::answer;
pub use protocol::{
    Answer, BaseDraft, Call, Cell, GuidedDefinition, Opened, Payload, Reply, Sheet, SheetLine,
};

/// The protocol's version: a hash of the files that define it (the calls and answers,
/// the messages' shape, and the contract's table and codebook they carry), so a page and
/// a worker built from different definitions (a tab loaded before a deploy) know it.
pub const PROTOCOL: u64 = fnv1a(
    fnv1a(
        fnv1a(
            fnv1a(FNV_OFFSET, include_bytes!("protocol.rs")),
            include_bytes!("wire.rs"),
        ),
        include_bytes!("../../../crates/contract/src/table.rs"),
    ),
    include_bytes!("../../../crates/contract/src/app.rs"),
);

/// FNV-1a's starting state.
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// 64-bit FNV-1a of `bytes`, continued from `hash`.
const fn fnv1a(mut hash: u64, bytes: &[u8]) -> u64 {
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u64;
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    hash
}
