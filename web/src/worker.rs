//! The page's side of the app's worker (`web/worker`): a second WebAssembly module, run
//! in a Web Worker of this origin and started on first use, which holds the engine for
//! surveys opened from files and the XLSX writer.
//!
//! A call goes as JSON with a file's text or bytes beside it, and its answer comes back
//! by the call's id (`crosstab_web_worker::wire`). Calls wait until the worker
//! says it is ready (messages posted before its handler is set would be lost) and its
//! protocol is this page's. A worker that fails, or is not ready within a minute, fails
//! every call waiting on it; the next call starts a new one (a new `generation`).

mod calls;

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use crosstab_web_worker::wire::{self, ToPage};
use crosstab_web_worker::{Answer, Call, Reply, PROTOCOL};
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};

use calls::{Calls, Unexpected};

/// The worker's script: Trunk's loader for `web/worker`, at the root as the page's own
/// module is (the page may be served at any path).
const SCRIPT: &str = "/crosstab-web-worker_loader.js";

/// How long a new worker may take to say it is ready (its module is fetched and compiled
/// first).
const START_MS: f64 = 60_000.0;

thread_local! {
    /// The worker, once started.
    static WORKER: RefCell<Option<Rc<Worker>>> = const { RefCell::new(None) };
    /// How many workers were started: a survey opened in one is gone with it.
    static GENERATION: Cell<u32> = const { Cell::new(0) };
}

/// The calls to the worker now running, with the answer's JSON and the data beside it.
type Open = Rc<RefCell<Calls<js_sys::Object, (String, JsValue)>>>;

/// The worker and the calls it has not answered yet.
struct Worker {
    worker: web_sys::Worker,
    generation: u32,
    calls: Open,
    _on_message: Closure<dyn FnMut(web_sys::MessageEvent)>,
    _on_error: Closure<dyn FnMut(web_sys::Event)>,
}

/// Posts `call` with `data` beside it (a file's text or bytes, as read; `undefined` if
/// none) to the worker (started first if need be); its answer and the data that came
/// with it.
pub async fn call(call: &Call, data: &JsValue) -> Result<(Reply, JsValue), String> {
    let worker = match WORKER.with(|slot| slot.borrow().clone()) {
        Some(worker) => worker,
        None => start()?,
    };
    worker.call(call, data).await
}

/// The worker now running, if any, counted from the page's load: a survey opened in an
/// earlier one is gone.
pub fn generation() -> Option<u32> {
    WORKER.with(|slot| slot.borrow().as_ref().map(|worker| worker.generation))
}

/// Whether a worker is running.
pub fn running() -> bool {
    generation().is_some()
}

fn start() -> Result<Rc<Worker>, String> {
    let worker = web_sys::Worker::new(SCRIPT)
        .map_err(|_| "The in-page engine could not be started.".to_owned())?;
    let generation = GENERATION.with(|g| {
        g.set(g.get().wrapping_add(1));
        g.get()
    });
    let calls: Open = Rc::default();
    let on_message = {
        let (calls, worker) = (Rc::clone(&calls), worker.clone());
        Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |event: web_sys::MessageEvent| {
            match wire::to_page(&event.data()) {
                ToPage::Ready { protocol } => {
                    if protocol != Some(PROTOCOL.to_string()) {
                        // A tab loaded before a deploy, meeting the new worker.
                        fail(
                            generation,
                            "The app was updated since this page was loaded: reload the page.",
                        );
                        return;
                    }
                    let held = calls.borrow_mut().ready();
                    for (id, message) in held {
                        post(&worker, &calls, id, &message);
                    }
                }
                ToPage::Answer { id, answer, data } => {
                    if let Err(Unexpected) = calls.borrow_mut().answer(id, (answer, data)) {
                        web_sys::console::error_1(&JsValue::from_str(
                            "the in-page engine answered a call nobody is waiting for",
                        ));
                    }
                }
            }
        })
    };
    // A script that cannot be fetched gives a plain `Event`; an error thrown in the
    // worker, an `ErrorEvent` with its message.
    let on_error = Closure::<dyn FnMut(web_sys::Event)>::new(move |event: web_sys::Event| {
        let reason = match event.dyn_ref::<web_sys::ErrorEvent>() {
            Some(error) => format!("The in-page engine stopped: {}", error.message()),
            None => "The in-page engine could not be loaded.".to_owned(),
        };
        fail(generation, &reason);
    });
    worker.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    worker.set_onerror(Some(on_error.as_ref().unchecked_ref()));
    let worker = Rc::new(Worker {
        worker,
        generation,
        calls,
        _on_message: on_message,
        _on_error: on_error,
    });
    WORKER.with(|slot| *slot.borrow_mut() = Some(Rc::clone(&worker)));
    // A module that fails to load in the worker rejects a promise there, which the page
    // never hears of: past the wait, the calls still queued fail instead of hanging.
    let calls = Rc::clone(&worker.calls);
    leptos::task::spawn_local(async move {
        crate::api::sleep(START_MS).await;
        if calls.borrow().holding() {
            fail(
                generation,
                "The in-page engine did not start within a minute.",
            );
        }
    });
    Ok(worker)
}

/// Posts call `id`'s `message`; if it cannot be posted, the call fails.
fn post(worker: &web_sys::Worker, calls: &Open, id: u32, message: &js_sys::Object) {
    if worker.post_message(message).is_err() {
        calls
            .borrow_mut()
            .refuse(id, "The in-page engine could not be given the call.");
    }
}

/// Gives up on worker `generation` (if it is still the one running): every call waiting
/// on it is told `reason`, and the next call starts a new one.
fn fail(generation: u32, reason: &str) {
    let worker = WORKER.with(|slot| {
        let mut slot = slot.borrow_mut();
        match slot.as_ref() {
            Some(worker) if worker.generation == generation => slot.take(),
            _ => None,
        }
    });
    if let Some(worker) = worker {
        worker.worker.terminate();
        worker.calls.borrow_mut().fail(reason);
    }
}

impl Worker {
    async fn call(&self, call: &Call, data: &JsValue) -> Result<(Reply, JsValue), String> {
        let call = serde_json::to_string(call).map_err(|error| error.to_string())?;
        let (answer, now) = self
            .calls
            .borrow_mut()
            .open(|id| wire::call(id, &call, data));
        if let Some((id, message)) = now {
            post(&self.worker, &self.calls, id, &message);
        }
        let (answer, data) = answer
            .await
            .map_err(|_| "The in-page engine stopped.".to_owned())??;
        let answer: Answer = serde_json::from_str(&answer).map_err(|error| {
            format!("The in-page engine answered what the page cannot read: {error}")
        })?;
        Ok((answer?, data))
    }
}
