//! The worker's entry: once its handler is set it says it is ready (`wire::ready`); then
//! each message from the page is a call (the call as JSON, the file beside it as a `File`
//! to read, text or bytes), answered (a workbook's bytes beside it) in the order it came.

#[cfg(target_arch = "wasm32")]
fn main() {
    use crosstab_engine::AlignedBytes;
    use crosstab_web_worker::{wire, Payload};
    use wasm_bindgen::closure::Closure;
    use wasm_bindgen::{JsCast, JsValue};

    console_error_panic_hook::set_once();
    let scope: web_sys::DedicatedWorkerGlobalScope = js_sys::global().unchecked_into();
    let reply_to = scope.clone();
    let on_message =
        Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |event: web_sys::MessageEvent| {
            let message = wire::to_worker(&event.data());
            let payload = if let Some(text) = message.data.as_string() {
                Payload::Text(text)
            } else if let Some(file) = message.data.dyn_ref::<web_sys::Blob>() {
                // A CSV comes as the file the researcher chose, read here and only here
                // (the page keeps no copy of a text that may be hundreds of megabytes).
                match web_sys::FileReaderSync::new().and_then(|reader| reader.read_as_text(file)) {
                    Ok(text) => Payload::Text(text),
                    Err(error) => Payload::Unread(
                        error
                            .dyn_ref::<js_sys::Error>()
                            .map_or_else(|| format!("{error:?}"), |e| String::from(e.message())),
                    ),
                }
            } else if message.data.is_instance_of::<js_sys::Uint8Array>() {
                // Only a compiled survey comes as bytes: copied once, into its own
                // memory. `length()` is a u32; an array may hold 2^32.
                let array = js_sys::Uint8Array::from(message.data);
                let length = js_sys::Reflect::get(&array, &"length".into())
                    .ok()
                    .and_then(|length| length.as_f64())
                    .unwrap_or(0.0) as u64;
                let bytes = AlignedBytes::filled(length, |into| array.copy_to(into));
                Payload::Compiled(bytes.map_err(|error| error.to_string()))
            } else {
                Payload::None
            };
            let (answer, payload) = match serde_json::from_str(&message.call.unwrap_or_default()) {
                Ok(call) => crosstab_web_worker::answer(call, payload),
                Err(error) => (
                    Err(format!("the worker could not read a call: {error}")),
                    Payload::None,
                ),
            };
            let answer = serde_json::to_string(&answer).unwrap_or_else(|error| {
                let reason = format!("the worker could not write its answer: {error}");
                serde_json::json!({ "Err": reason }).to_string()
            });
            let data = match payload {
                Payload::Bytes(bytes) => js_sys::Uint8Array::from(bytes.as_slice()).into(),
                _ => JsValue::UNDEFINED,
            };
            if let Err(error) = reply_to.post_message(&wire::answer(&message.id, &answer, &data)) {
                web_sys::console::error_1(&error);
            }
        });
    scope.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    // The handler lives as long as the worker.
    on_message.forget();
    // Messages posted before the handler was set are lost: the page waits for this, and
    // checks that it speaks this worker's protocol.
    if let Err(error) = scope.post_message(&wire::ready()) {
        web_sys::console::error_1(&error);
    }
}

/// Natively there is no worker: the crate's logic is tested through its library.
#[cfg(not(target_arch = "wasm32"))]
fn main() {}
