//! Private local data: a survey file opened in the page and answered by the engine in
//! the app's worker (`crate::worker`, started on first use). Nothing of the file leaves
//! the browser: it is read with the File API and handed to the worker, a thread of this
//! page's own origin, which compiles and queries it; no request carries it.

use std::cell::{Cell, RefCell};

use crosstab_contract::app::{Table, TableRequest};
pub use crosstab_web_worker::{BaseDraft, GuidedDefinition, Opened};
use crosstab_web_worker::{Call, Reply};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;

use crate::worker;

thread_local! {
    /// What the screen shows of the survey opened in the worker, if any, and which
    /// worker holds it: kept while the researcher moves between screens.
    static OPENED: RefCell<Option<(Opened, u32)>> = const { RefCell::new(None) };
    /// How many times a survey was closed: an open posted before the latest close is
    /// not the opened survey, whatever it answers.
    static CLOSES: Cell<u32> = const { Cell::new(0) };
}

/// The worker started since the survey was opened, if it was.
const RESTARTED: &str = "The in-page engine restarted, and the file with it: open it again.";

/// Starts the worker (its module is loaded on first use); returns once it runs, after
/// which opening and computing need no network.
pub async fn start() -> Result<(), String> {
    match worker::call(&Call::Start, &JsValue::UNDEFINED).await? {
        (Reply::Started, _) => Ok(()),
        (other, _) => Err(format!("The in-page engine answered {other:?} to a start.")),
    }
}

/// Posts an open call with its file beside it; the opened survey, unless it was closed
/// meanwhile.
async fn open(call: Call, file: &JsValue) -> Result<Opened, String> {
    let closes = CLOSES.with(Cell::get);
    let answer = worker::call(&call, file).await?;
    if CLOSES.with(Cell::get) != closes {
        return Err("The file was closed while it was opening.".into());
    }
    match (answer, worker::generation()) {
        ((Reply::Opened(opened), _), Some(generation)) => {
            OPENED.with(|slot| *slot.borrow_mut() = Some((*opened.clone(), generation)));
            Ok(*opened)
        }
        ((Reply::Opened(_), _), None) => Err(RESTARTED.into()),
        ((other, _), _) => Err(format!("The in-page engine answered {other:?} to an open.")),
    }
}

/// What the screen shows of the opened survey, if any (none once the worker that held
/// it has stopped).
pub fn opened() -> Option<Opened> {
    OPENED.with(|slot| {
        let held = slot.borrow();
        let (opened, generation) = held.as_ref()?;
        (worker::generation() == Some(*generation)).then(|| opened.clone())
    })
}

/// Closes the opened survey (the worker drops its data).
pub fn close() {
    OPENED.with(|slot| *slot.borrow_mut() = None);
    CLOSES.with(|closes| closes.set(closes.get().wrapping_add(1)));
    if worker::running() {
        leptos::task::spawn_local(async {
            if let Err(message) = worker::call(&Call::Close, &JsValue::UNDEFINED).await {
                web_sys::console::error_1(&JsValue::from_str(&message));
            }
        });
    }
}

/// Compiles a TOML definition and its CSV file, as `crosstab survey import` would. The
/// file itself goes to the worker, which reads it: the page never holds its text.
pub async fn open_csv(
    definition: String,
    csv: &web_sys::File,
    from: String,
) -> Result<Opened, String> {
    open(Call::OpenCsv { definition, from }, csv).await
}

/// Compiles the definition the guided form stands for and its CSV file (read by the
/// worker, as for [`open_csv`]).
pub async fn open_guided(
    definition: GuidedDefinition,
    csv: &web_sys::File,
    from: String,
) -> Result<Opened, String> {
    open(Call::OpenGuided { definition, from }, csv).await
}

/// Loads a compiled survey (the file `crosstab survey import` installs), its bytes as read.
pub async fn open_compiled(bytes: js_sys::Uint8Array, from: String) -> Result<Opened, String> {
    open(Call::OpenCompiled { from }, &bytes).await
}

/// Computes a table from the opened survey, as the server would for a whole-survey grant
/// (but nothing is billed: `billedCalls` is 0).
pub async fn table(request: TableRequest) -> Result<Table, String> {
    if OPENED.with(|slot| slot.borrow().is_some()) && opened().is_none() {
        return Err(RESTARTED.into());
    }
    match worker::call(&Call::Table(request), &JsValue::UNDEFINED).await? {
        (Reply::Table(table), _) => Ok(*table),
        (other, _) => Err(format!("The in-page engine answered {other:?} to a table.")),
    }
}

/// Bytes of a CSV file read for its header row: far more than any header needs, and
/// nothing like a whole survey file.
const HEADER_BYTES: f64 = 1024.0 * 1024.0;

/// The column names of a CSV file's header row, read from its start alone.
pub async fn file_columns(file: &web_sys::File) -> Result<Vec<String>, String> {
    let whole = file.size() <= HEADER_BYTES;
    let start = file
        .slice_with_f64_and_f64(0.0, HEADER_BYTES)
        .map_err(|_| format!("{} could not be read.", file.name()))?;
    let text = blob_text(&start, &file.name()).await?;
    if !whole && !text.contains('\n') {
        return Err(format!(
            "{}: its first line is over 1 MB, which no CSV header is.",
            file.name()
        ));
    }
    csv_columns(&text)
}

/// The column names of a CSV's header row (the rest of `csv`, if any, is not read).
pub fn csv_columns(csv: &str) -> Result<Vec<String>, String> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .from_reader(csv.as_bytes());
    let headers = reader
        .headers()
        .map_err(|error| format!("The file's first line is not a CSV header ({error})."))?;
    let columns: Vec<String> = headers.iter().map(|h| h.trim().to_owned()).collect();
    if columns.len() < 2 {
        return Err("A survey file needs at least an id column and a weight column.".into());
    }
    Ok(columns)
}

/// The text of a file the user picked.
pub async fn read_text(file: &web_sys::File) -> Result<String, String> {
    blob_text(file, &file.name()).await
}

/// The text of `blob`, part or whole of the file `name`.
async fn blob_text(blob: &web_sys::Blob, name: &str) -> Result<String, String> {
    JsFuture::from(blob.text())
        .await
        .map_err(|_| format!("{name} could not be read."))?
        .as_string()
        .ok_or_else(|| format!("{name} is not text."))
}

/// The bytes of a file the user picked, left in JS memory: they go to the worker as they
/// are (a survey file may be hundreds of megabytes).
pub async fn read_bytes(file: &web_sys::File) -> Result<js_sys::Uint8Array, String> {
    let buffer = JsFuture::from(file.array_buffer())
        .await
        .map_err(|_| format!("{} could not be read.", file.name()))?;
    Ok(js_sys::Uint8Array::new(&buffer))
}

/// The first file chosen in the `<input type=file>` an event came from. The input is
/// emptied, so choosing the same file again (after closing it) is a change too.
pub fn chosen_file(event: &web_sys::Event) -> Option<web_sys::File> {
    let input = event
        .target()?
        .dyn_into::<web_sys::HtmlInputElement>()
        .ok()?;
    let file = input.files()?.get(0);
    input.set_value("");
    file
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const CSV: &str = "RESPID,WEIGHT,REGION,GENDER\n1,1.5,1,1\n2,2.5,2,2\n3,1,2,2\n";

    #[test]
    fn a_csv_header_gives_the_columns() {
        assert_eq!(
            csv_columns(CSV).unwrap(),
            ["RESPID", "WEIGHT", "REGION", "GENDER"]
        );
        assert!(csv_columns("ONLY\n1\n").is_err());
    }
}
