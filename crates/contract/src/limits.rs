//! The contract's limits, in one place so the validator, the server and the docs agree.

/// Fewest target codes in one request.
pub const MIN_TARGET_CODES: usize = 1;
/// Most target codes in one request.
pub const MAX_TARGET_CODES: usize = 2;
/// Longest target code, in characters.
pub const MAX_TARGET_CODE_CHARS: usize = 1024;
/// Longest survey code, population base code or authorization group, in characters.
pub const MAX_IDENTIFIER_CHARS: usize = 64;
/// Deepest nesting of parentheses and `NOT` in a target expression.
pub const MAX_EXPR_DEPTH: usize = 64;
/// Largest request body the server reads, in bytes.
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// Maximum rows per axis of a result (spec: may change in future versions).
pub const MAX_ROWS_PER_AXIS: usize = 5000;
/// Default audience unit multiplier: `WgtAud` in thousands.
pub const DEFAULT_AUDIENCE_REPORT_UNITS: u32 = 1000;
/// Default stability threshold: `Stbl` is 1 when `Resps` is at most this.
pub const DEFAULT_UNSTABLE_MAX_RESPS: u64 = 60;
/// Most rows of an app table (`/app/api/table`, `Survey.table`).
pub const MAX_TABLE_ROWS: usize = 200;
/// Most columns of an app table, not counting its Total column.
pub const MAX_TABLE_COLUMNS: usize = 50;
/// Longest label of a table's row or column, in characters.
pub const MAX_TABLE_LABEL_CHARS: usize = 256;
/// Largest app table request body (`/app/api/table`), in bytes: room for every row and
/// column at its longest expression and label, in UTF-8.
pub const MAX_TABLE_BODY_BYTES: usize = 1024 * 1024;
