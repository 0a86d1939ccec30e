//! Private local data: a survey file opened in the page and answered by the engine in
//! the app's worker (`web/worker`, started on first use). Nothing of the file leaves the
//! browser: it is read with the File API and handed to the worker, this page's own
//! thread, which compiles and queries it; no request carries it.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use crosstab_contract::app::{Table, TableRequest};
use crosstab_web_worker::{Answer, Call, Payload, Reply, Sheet};
pub use crosstab_web_worker::{BaseDraft, GuidedDefinition, Opened};
use futures_channel::oneshot;
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;

/// The worker's script (Trunk's loader for `web/worker`, next to `index.html`).
const WORKER_SCRIPT: &str = "./crosstab-web-worker_loader.js";

thread_local! {
    /// What the screen shows of the survey opened in the worker, if any: kept while the
    /// researcher moves between screens.
    static OPENED: RefCell<Option<Opened>> = const { RefCell::new(None) };
    /// The worker, once started.
    static WORKER: RefCell<Option<Rc<Worker>>> = const { RefCell::new(None) };
}

/// Calls waiting for the worker's answer, by id.
type Waiting = Rc<RefCell<HashMap<u32, oneshot::Sender<Result<(String, JsValue), String>>>>>;

/// Calls posted before the worker said it is ready (`None` once it has), which it would
/// otherwise miss.
type Unsent = Rc<RefCell<Option<Vec<js_sys::Object>>>>;

/// The worker and the calls it has not answered yet.
struct Worker {
    worker: web_sys::Worker,
    waiting: Waiting,
    unsent: Unsent,
    next: std::cell::Cell<u32>,
    _on_message: Closure<dyn FnMut(web_sys::MessageEvent)>,
    _on_error: Closure<dyn FnMut(web_sys::ErrorEvent)>,
}

impl Worker {
    /// The worker, started on first use.
    fn get() -> Result<Rc<Worker>, String> {
        if let Some(worker) = WORKER.with(|slot| slot.borrow().clone()) {
            return Ok(worker);
        }
        let worker = Rc::new(Worker::start()?);
        WORKER.with(|slot| *slot.borrow_mut() = Some(Rc::clone(&worker)));
        Ok(worker)
    }

    fn start() -> Result<Worker, String> {
        let worker = web_sys::Worker::new(WORKER_SCRIPT)
            .map_err(|_| "The page's worker could not be started.".to_owned())?;
        let waiting: Waiting = Rc::default();
        let unsent: Unsent = Rc::new(RefCell::new(Some(Vec::new())));
        let answered = Rc::clone(&waiting);
        let held = Rc::clone(&unsent);
        let ready_worker = worker.clone();
        let on_message = Closure::<dyn FnMut(web_sys::MessageEvent)>::new(
            move |event: web_sys::MessageEvent| {
                let message = event.data();
                let field = |name: &str| {
                    js_sys::Reflect::get(&message, &JsValue::from_str(name))
                        .unwrap_or(JsValue::UNDEFINED)
                };
                if field("ready").is_truthy() {
                    for message in held.borrow_mut().take().unwrap_or_default() {
                        if let Err(error) = ready_worker.post_message(&message) {
                            web_sys::console::error_1(&error);
                        }
                    }
                    return;
                }
                let Some(id) = field("id")
                    .as_f64()
                    .and_then(|id| u32::try_from(id as i64).ok())
                else {
                    return;
                };
                let answer = field("answer").as_string().unwrap_or_default();
                if let Some(sender) = answered.borrow_mut().remove(&id) {
                    let _ = sender.send(Ok((answer, field("data"))));
                }
            },
        );
        // A worker that fails (its script not found, a panic) answers nothing more: every
        // waiting call is told so, and the next call starts a new worker.
        let failed = Rc::clone(&waiting);
        let on_error =
            Closure::<dyn FnMut(web_sys::ErrorEvent)>::new(move |event: web_sys::ErrorEvent| {
                let reason = format!("The page's worker stopped: {}", event.message());
                WORKER.with(|slot| *slot.borrow_mut() = None);
                for (_, sender) in failed.borrow_mut().drain() {
                    let _ = sender.send(Err(reason.clone()));
                }
            });
        worker.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
        worker.set_onerror(Some(on_error.as_ref().unchecked_ref()));
        Ok(Worker {
            worker,
            waiting,
            unsent,
            next: std::cell::Cell::new(0),
            _on_message: on_message,
            _on_error: on_error,
        })
    }

    /// Posts `call` with `payload` beside it; the worker's answer and its payload.
    async fn call(&self, call: &Call, payload: Payload) -> Result<(Reply, JsValue), String> {
        let id = self.next.get();
        self.next.set(id.wrapping_add(1));
        let message = js_sys::Object::new();
        let set = |name: &str, value: &JsValue| {
            let _ = js_sys::Reflect::set(&message, &JsValue::from_str(name), value);
        };
        set("id", &JsValue::from(id));
        let call = serde_json::to_string(call).map_err(|error| error.to_string())?;
        set("call", &JsValue::from_str(&call));
        match payload {
            Payload::None => {}
            Payload::Text(text) => set("data", &JsValue::from_str(&text)),
            Payload::Bytes(bytes) => {
                set("data", &js_sys::Uint8Array::from(bytes.as_slice()).into())
            }
        }
        let (sender, answer) = oneshot::channel();
        self.waiting.borrow_mut().insert(id, sender);
        if let Some(unsent) = self.unsent.borrow_mut().as_mut() {
            unsent.push(message);
        } else if self.worker.post_message(&message).is_err() {
            self.waiting.borrow_mut().remove(&id);
            return Err("The page's worker could not be given the call.".into());
        }
        let (answer, data) = answer
            .await
            .map_err(|_| "The page's worker stopped.".to_owned())??;
        let answer: Answer = serde_json::from_str(&answer).map_err(|error| {
            format!("The page's worker answered what the page cannot read: {error}")
        })?;
        Ok((answer?, data))
    }
}

/// Posts `call` to the worker (started first if need be).
async fn call(call: Call, payload: Payload) -> Result<(Reply, JsValue), String> {
    Worker::get()?.call(&call, payload).await
}

/// Starts the worker (its module is loaded on first use); returns once it runs, after
/// which opening and computing need no network.
pub async fn start() -> Result<(), String> {
    match call(Call::Start, Payload::None).await? {
        (Reply::Started, _) => Ok(()),
        (other, _) => Err(format!("The page's worker answered {other:?} to a start.")),
    }
}

/// Makes the worker's answer to an open call the opened survey.
fn opened_by(answer: Result<(Reply, JsValue), String>) -> Result<Opened, String> {
    match answer? {
        (Reply::Opened(opened), _) => {
            OPENED.with(|slot| *slot.borrow_mut() = Some(opened.clone()));
            Ok(opened)
        }
        (other, _) => Err(format!("The page's worker answered {other:?} to an open.")),
    }
}

/// What the screen shows of the opened survey, if any.
pub fn opened() -> Option<Opened> {
    OPENED.with(|slot| slot.borrow().clone())
}

/// Closes the opened survey (the worker drops its data).
pub fn close() {
    OPENED.with(|slot| *slot.borrow_mut() = None);
    if WORKER.with(|slot| slot.borrow().is_some()) {
        leptos::task::spawn_local(async {
            if let Err(message) = call(Call::Close, Payload::None).await {
                web_sys::console::error_1(&JsValue::from_str(&message));
            }
        });
    }
}

/// Compiles a TOML definition and its CSV, as `crosstab survey import` would.
pub async fn open_csv(definition: String, csv: String, from: String) -> Result<Opened, String> {
    opened_by(call(Call::OpenCsv { definition, from }, Payload::Text(csv)).await)
}

/// Compiles the definition the guided form stands for and its CSV.
pub async fn open_guided(
    definition: GuidedDefinition,
    csv: String,
    from: String,
) -> Result<Opened, String> {
    opened_by(call(Call::OpenGuided { definition, from }, Payload::Text(csv)).await)
}

/// Loads a compiled survey (the file `crosstab survey import` installs).
pub async fn open_compiled(bytes: Vec<u8>, from: String) -> Result<Opened, String> {
    opened_by(call(Call::OpenCompiled { from }, Payload::Bytes(bytes)).await)
}

/// Computes a table from the opened survey, as the server would for a whole-survey grant
/// (but nothing is billed: `billedCalls` is 0).
pub async fn table(request: TableRequest) -> Result<Table, String> {
    match call(Call::Table(request), Payload::None).await? {
        (Reply::Table(table), _) => Ok(*table),
        (other, _) => Err(format!("The page's worker answered {other:?} to a table.")),
    }
}

/// A sheet as an XLSX workbook, written by the worker.
pub async fn xlsx(sheet: Sheet) -> Result<Vec<u8>, String> {
    match call(Call::Xlsx(sheet), Payload::None).await? {
        (Reply::Xlsx, data) if data.is_instance_of::<js_sys::Uint8Array>() => {
            Ok(js_sys::Uint8Array::from(data).to_vec())
        }
        (other, _) => Err(format!(
            "The page's worker answered {other:?} to a workbook."
        )),
    }
}

/// The column names of a CSV's header row.
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
    let text = JsFuture::from(file.text())
        .await
        .map_err(|_| format!("{} could not be read.", file.name()))?;
    text.as_string()
        .ok_or_else(|| format!("{} is not text.", file.name()))
}

/// The bytes of a file the user picked.
pub async fn read_bytes(file: &web_sys::File) -> Result<Vec<u8>, String> {
    let buffer = JsFuture::from(file.array_buffer())
        .await
        .map_err(|_| format!("{} could not be read.", file.name()))?;
    Ok(js_sys::Uint8Array::new(&buffer).to_vec())
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
