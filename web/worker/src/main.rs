//! The worker's entry: once its handler is set it says `{ready: true, protocol}`; then each message
//! from the page is a call (`{id, call, data}`: the call as JSON, the file beside it as
//! text or bytes), answered with `{id, answer, data}` in the order it came.

#[cfg(target_arch = "wasm32")]
fn main() {
    use wasm_bindgen::closure::Closure;
    use wasm_bindgen::{JsCast, JsValue};

    console_error_panic_hook::set_once();
    let scope: web_sys::DedicatedWorkerGlobalScope = js_sys::global().unchecked_into();
    let reply_to = scope.clone();
    let on_message =
        Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |event: web_sys::MessageEvent| {
            let message = event.data();
            let field = |name: &str| {
                js_sys::Reflect::get(&message, &JsValue::from_str(name))
                    .unwrap_or(JsValue::UNDEFINED)
            };
            let id = field("id");
            let data = field("data");
            let payload = if let Some(text) = data.as_string() {
                crosstab_web_worker::Payload::Text(text)
            } else if data.is_instance_of::<js_sys::Uint8Array>() {
                crosstab_web_worker::Payload::Bytes(js_sys::Uint8Array::from(data).to_vec())
            } else {
                crosstab_web_worker::Payload::None
            };
            let (answer, payload) =
                match serde_json::from_str(&field("call").as_string().unwrap_or_default()) {
                    Ok(call) => crosstab_web_worker::answer(call, payload),
                    Err(error) => (
                        Err(format!("the worker could not read a call: {error}")),
                        crosstab_web_worker::Payload::None,
                    ),
                };
            let answer = serde_json::to_string(&answer).unwrap_or_else(|error| {
                let reason = format!("the worker could not write its answer: {error}");
                serde_json::json!({ "Err": reason }).to_string()
            });
            let reply = js_sys::Object::new();
            let set = |name: &str, value: &JsValue| {
                let _ = js_sys::Reflect::set(&reply, &JsValue::from_str(name), value);
            };
            set("id", &id);
            set("answer", &JsValue::from_str(&answer));
            if let crosstab_web_worker::Payload::Bytes(bytes) = payload {
                set("data", &js_sys::Uint8Array::from(bytes.as_slice()).into());
            }
            if let Err(error) = reply_to.post_message(&reply) {
                web_sys::console::error_1(&error);
            }
        });
    scope.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    // The handler lives as long as the worker.
    on_message.forget();
    // Messages posted before the handler was set are lost: the page waits for this, and
    // checks that it speaks this worker's protocol.
    let ready = js_sys::Object::new();
    let _ = js_sys::Reflect::set(&ready, &JsValue::from_str("ready"), &JsValue::TRUE);
    let _ = js_sys::Reflect::set(
        &ready,
        &JsValue::from_str("protocol"),
        &JsValue::from_str(&crosstab_web_worker::PROTOCOL.to_string()),
    );
    if let Err(error) = scope.post_message(&ready) {
        web_sys::console::error_1(&error);
    }
}

/// Natively there is no worker: the crate's logic is tested through its library.
#[cfg(not(target_arch = "wasm32"))]
fn main() {}
