//! The messages between the page and the worker, as the plain objects `postMessage`
//! clones. Their members are named here only, for both sides.

use wasm_bindgen::JsValue;

/// The worker is ready: `{ready: true, protocol}`.
pub fn ready() -> js_sys::Object {
    object(&[
        ("ready", &JsValue::TRUE),
        ("protocol", &JsValue::from_str(&crate::PROTOCOL.to_string())),
    ])
}

/// A call: `{id, call, data}`, the call as JSON and a file beside it (`undefined` if
/// none).
pub fn call(id: u32, call: &str, data: &JsValue) -> js_sys::Object {
    object(&[
        ("id", &JsValue::from(id)),
        ("call", &JsValue::from_str(call)),
        ("data", data),
    ])
}

/// An answer to call `id`: `{id, answer, data}`, the answer as JSON and a workbook beside
/// it (`undefined` if none).
pub fn answer(id: &JsValue, answer: &str, data: &JsValue) -> js_sys::Object {
    object(&[
        ("id", id),
        ("answer", &JsValue::from_str(answer)),
        ("data", data),
    ])
}

/// What the page got from the worker.
#[derive(Debug)]
pub enum ToPage {
    /// The worker is ready, speaking `protocol`.
    Ready { protocol: Option<String> },
    /// An answer (to call `id`, if it has one).
    Answer {
        id: Option<u32>,
        answer: String,
        data: JsValue,
    },
}

/// Reads a message the page got.
pub fn to_page(message: &JsValue) -> ToPage {
    if member(message, "ready").is_truthy() {
        return ToPage::Ready {
            protocol: member(message, "protocol").as_string(),
        };
    }
    ToPage::Answer {
        id: member(message, "id")
            .as_f64()
            .and_then(|id| u32::try_from(id as i64).ok()),
        answer: member(message, "answer").as_string().unwrap_or_default(),
        data: member(message, "data"),
    }
}

/// What the worker got from the page: the call's id (sent back as it came), its JSON,
/// and the file beside it.
#[derive(Debug)]
pub struct ToWorker {
    /// The call's id.
    pub id: JsValue,
    /// The call, as JSON.
    pub call: Option<String>,
    /// A CSV's `File` (or its text), a compiled survey's bytes, or `undefined`.
    pub data: JsValue,
}

/// Reads a message the worker got.
pub fn to_worker(message: &JsValue) -> ToWorker {
    ToWorker {
        id: member(message, "id"),
        call: member(message, "call").as_string(),
        data: member(message, "data"),
    }
}

fn object(members: &[(&str, &JsValue)]) -> js_sys::Object {
    let object = js_sys::Object::new();
    for (name, value) in members {
        // Setting a member of a plain object just made cannot fail.
        let _ = js_sys::Reflect::set(&object, &JsValue::from_str(name), value);
    }
    object
}

fn member(message: &JsValue, name: &str) -> JsValue {
    js_sys::Reflect::get(message, &JsValue::from_str(name)).unwrap_or(JsValue::UNDEFINED)
}
