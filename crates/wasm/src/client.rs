//! `sendCrosstab`: one logical query sent to `POST /v1/crosstab` as the contract tells
//! clients to: validated first (an invalid request is never sent), one
//! `Idempotency-Key` on all its attempts, retried only as [`RetryPolicy`] says. A retry
//! of a query whose answer was lost gets that answer again and is not billed twice.

use js_sys::{Function, Object, Promise, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

use crosstab_contract::idempotency::{
    is_header_text, is_valid_key, key_from_bytes, IDEMPOTENCY_KEY, IDEMPOTENT_REPLAYED,
};

use crate::js::{error, thrown_message, to_js, validate_js, INVALID_ARGUMENT};
use crate::response::{parse_response, ParsedResponse};
use crate::send::RetryPolicy;

/// The code of the error thrown when the last attempt got no answer.
const NETWORK_ERROR: &str = "network_error";

/// The code of the error thrown when the caller's signal ended the query.
const ABORTED: &str = "aborted";

/// How long an attempt may wait for its whole answer by default, in ms: longer than the
/// service's own query deadline (10 s by default), so a slow answer is still read.
const DEFAULT_ATTEMPT_TIMEOUT_MS: f64 = 30_000.0;

/// The longest `timeoutMs` taken: past it, a stalled connection would hold the query
/// for most of an hour.
const MAX_ATTEMPT_TIMEOUT_MS: f64 = 600_000.0;

#[wasm_bindgen(typescript_custom_section)]
const SEND_TYPES: &str = r#"
/** Where and how `sendCrosstab` sends a query. */
export interface SendOptions {
  /** The service's `/v1` address, e.g. `https://crosstab.example.com/v1`. */
  baseUrl: string;
  /** The `Service-Engine-Authorizer` header: an API key, or `Bearer <token>` from your
   * identity provider. */
  authorizer: string;
  /** The query's `Idempotency-Key` (1 to 255 printable ASCII characters); default a
   * fresh random one. Pass the `idempotencyKey` of an earlier call, or of its
   * `network_error`, to send that query again without a second bill. */
  idempotencyKey?: string;
  /** Attempts at most, the first included (default 3). */
  attempts?: number;
  /** The longest wait before a retry, in ms (default 10000): a 429 whose `Retry-After`
   * is longer ends the query with that answer. */
  longestWaitMs?: number;
  /** How long one attempt may wait for its whole answer, in ms (default 30000, at most
   * 600000): past it the attempt is abandoned as a lost answer (retried with the same
   * key). */
  timeoutMs?: number;
  /** The `fetch` to send with (default `globalThis.fetch`). */
  fetch?: (
    url: string,
    init: { method: string; headers: Record<string, string>; body: string; signal?: any },
  ) => Promise<{ status: number; headers: { get(name: string): string | null }; text(): Promise<string> }>;
  /** An `AbortSignal` that ends the query: the pending attempt is aborted and a
   * `CrosstabError` with code `aborted` thrown, its `cause` the signal's reason and its
   * `idempotencyKey` the query's (an attempt may have reached the service: send the
   * query again with that key). (Typed by what is used of it, so no DOM typings are
   * needed.) */
  signal?: {
    readonly aborted: boolean;
    readonly reason?: unknown;
    addEventListener(type: "abort", listener: () => void, options?: { once?: boolean }): void;
    removeEventListener(type: "abort", listener: () => void): void;
  };
}

/** What `sendCrosstab` got: the last answer, classified as `parseResponse` does (a
 * request that fails validation is its `badRequest`, never sent), and how it came. */
export type SentQuery = ParsedResponse & {
  /** The `Idempotency-Key` every attempt carried. A request that was not sent (`attempts`
   * 0) carries the key it was given, or `""` when none was. */
  idempotencyKey: string;
  /** Attempts made (0: the request was invalid, and not sent). */
  attempts: number;
  /** Whether the answer is the one an earlier attempt was given (`Idempotent-Replayed:
   * true`), billed then and not again. */
  replayed: boolean;
};
"#;

/// What [`send_crosstab`] reads from its options.
struct SendOptions {
    url: String,
    authorizer: String,
    /// The caller's key, if it gave one.
    key: Option<String>,
    policy: RetryPolicy,
    /// How long one attempt may wait for its whole answer, in ms.
    attempt_timeout_ms: f64,
    fetch: Function,
    signal: JsValue,
}

/// Sends a crosstab request to the service and returns its answer, classified as
/// `parseResponse` does, with `idempotencyKey`, `attempts` and `replayed`. The request
/// is validated first: an invalid one is answered `badRequest` with the server's own
/// envelope and not sent. Every attempt carries the same `Idempotency-Key`; an attempt
/// that gets no answer (the connection failed, the body broke off), a 5xx, or a 429 with
/// a short `Retry-After` is tried again after the contract's backoff, up to `attempts`.
/// When the last attempt gets no answer, its fate is unknown (the service may have
/// answered and billed it): throws a `CrosstabError` with code `network_error` and the
/// `idempotencyKey` to send the query again with, which cannot bill it twice. An attempt
/// that gets no whole answer within `timeoutMs` counts as one that got none. An abort
/// (`signal`) ends the query at once, between attempts too: an `aborted` error with the
/// reason as its `cause` and the `idempotencyKey`. Bad options
/// (a getter that throws too), and a `fetch` that resolves to something that is no
/// `Response`, throw `invalid_argument` at once: another attempt would do the same.
#[wasm_bindgen(js_name = sendCrosstab, unchecked_return_type = "Promise<SentQuery>")]
pub fn send_crosstab(
    #[wasm_bindgen(unchecked_param_type = "CrosstabRequest")] request: JsValue,
    #[wasm_bindgen(unchecked_param_type = "SendOptions")] options: JsValue,
) -> Promise {
    wasm_bindgen_futures::future_to_promise(async move { send(request, options).await })
}

async fn send(request: JsValue, options: JsValue) -> Result<JsValue, JsValue> {
    let options = read_options(&options)?;
    let valid = match validate_js(&request) {
        Ok(valid) => valid,
        Err(invalid) => {
            let envelope = serde_json::to_value(invalid.envelope())
                .map_err(|e| error("internal_error", &e.to_string()))?;
            let answer = parse_response(invalid.status(), &envelope, None, None);
            let key = options.key.clone().unwrap_or_default();
            return sent(&answer, &key, 0, false);
        }
    };
    let key = match &options.key {
        Some(key) => key.clone(),
        None => fresh_key()?,
    };
    let body = serde_json::to_string(&valid.request)
        .map_err(|e| error("internal_error", &e.to_string()))?;
    let targets = valid.request.target_codes.len();
    let init = request_init(&options, &key, &body)?;
    let mut attempt = 1;
    loop {
        if aborted(&options.signal) {
            return Err(aborted_error(&options.signal, &key, attempt > 1));
        }
        let outcome = match attempt_once(&options, &init, targets).await? {
            Err(NoAnswer::Aborted) => return Err(aborted_error(&options.signal, &key, true)),
            Err(NoAnswer::Threw(thrown)) => {
                let why = thrown_message(&thrown).unwrap_or_else(|| "it threw".to_owned());
                return Err(keyed_error(
                    INVALID_ARGUMENT,
                    &format!("options.fetch threw ({why}) instead of returning a promise."),
                    &key,
                    Some(&thrown),
                ));
            }
            Err(NoAnswer::NotAResponse(what)) => {
                return Err(keyed_error(
                    INVALID_ARGUMENT,
                    &format!(
                        "options.fetch resolved to something that is no Response ({what}); \
                         the query may have reached the service: send it again with its \
                         idempotencyKey."
                    ),
                    &key,
                    None,
                ));
            }
            Err(NoAnswer::Lost(failure)) => Err(failure),
            Ok(answer) => Ok(answer),
        };
        let wait = options.policy.wait_after(
            attempt,
            outcome.as_ref().ok().map(|(answer, _)| answer),
            js_sys::Math::random(),
        );
        let Some(wait) = wait else {
            return match outcome {
                Ok((answer, replayed)) => sent(&answer, &key, attempt, replayed),
                Err(failure) => Err(network_error(&failure, &key)),
            };
        };
        sleep(wait, &options.signal).await?;
        if aborted(&options.signal) {
            return Err(aborted_error(&options.signal, &key, true));
        }
        attempt += 1;
    }
}

/// How an attempt ended without an answer to classify.
enum NoAnswer {
    /// None came (`fetch` or the body's `text()` failed): the query's fate is unknown,
    /// and another attempt may get it.
    Lost(JsValue),
    /// `fetch` resolved to something that is no `Response`: the options' mistake, which
    /// another attempt would repeat.
    NotAResponse(String),
    /// `fetch` threw instead of returning a promise: the options' mistake too.
    Threw(JsValue),
    /// The caller's signal aborted it.
    Aborted,
}

/// One attempt: `Ok` with the answer (and whether it was replayed), or `Err` with why no
/// answer came. It is given `timeoutMs` for its whole answer: its own `AbortSignal`
/// aborts the `fetch` then, or when the caller's signal aborts.
async fn attempt_once(
    options: &SendOptions,
    init: &Object,
    targets: usize,
) -> Result<Result<(ParsedResponse, bool), NoAnswer>, JsValue> {
    let deadline = AttemptDeadline::start(options.attempt_timeout_ms, &options.signal)?;
    Reflect::set(init, &"signal".into(), &deadline.signal)?;
    let outcome = attempt_with(options, init, targets, &deadline).await;
    let timed_out = aborted(&deadline.signal);
    deadline.end()?;
    Ok(match outcome {
        Ok(answer) => Ok(answer),
        Err(_) if aborted(&options.signal) => Err(NoAnswer::Aborted),
        Err(NoAnswer::Lost(_)) if timed_out => Err(NoAnswer::Lost(error(
            NETWORK_ERROR,
            &format!(
                "no whole answer within {} ms (options.timeoutMs)",
                options.attempt_timeout_ms
            ),
        ))),
        Err(failure) => Err(failure),
    })
}

/// An attempt's own `AbortSignal`: aborted `ms` after it starts, or with the caller's.
struct AttemptDeadline {
    signal: JsValue,
    /// Rejects once `signal` aborts: every wait of the attempt races it, so a `fetch` (or
    /// a body) that ignores the signal still ends on time.
    stopped: Promise,
    timer: JsValue,
    /// `controller.abort`, bound: the timer's callback and the caller's signal's listener.
    abort: Function,
    caller: JsValue,
}

impl AttemptDeadline {
    fn start(ms: f64, caller: &JsValue) -> Result<AttemptDeadline, JsValue> {
        let controller =
            Reflect::construct(&global_function("AbortController")?, &js_sys::Array::new())?;
        let abort: Function = Reflect::get(&controller, &"abort".into())?.dyn_into()?;
        let abort = abort.bind0(&controller);
        let signal = Reflect::get(&controller, &"signal".into())?;
        let mut listening = Ok(JsValue::UNDEFINED);
        let stopped = Promise::new(&mut |_, reject| {
            listening = call_method(
                &signal,
                "addEventListener",
                &["abort".into(), reject.into(), once().into()],
            );
        });
        listening?;
        let timer =
            global_function("setTimeout")?.call2(&JsValue::UNDEFINED, &abort, &ms.into())?;
        if caller.is_object() {
            call_method(
                caller,
                "addEventListener",
                &["abort".into(), abort.clone().into()],
            )?;
        }
        Ok(AttemptDeadline {
            signal,
            stopped,
            timer,
            abort,
            caller: caller.clone(),
        })
    }

    /// `promise`, unless the attempt's signal aborts first: then its reason, rejected.
    fn race(&self, promise: &JsValue) -> JsFuture {
        let both = js_sys::Array::of2(&Promise::resolve(promise), &self.stopped);
        JsFuture::from(Promise::race(&both))
    }

    /// Stops the timer and stops listening to the caller's signal.
    fn end(self) -> Result<(), JsValue> {
        global_function("clearTimeout")?.call1(&JsValue::UNDEFINED, &self.timer)?;
        if self.caller.is_object() {
            call_method(
                &self.caller,
                "removeEventListener",
                &["abort".into(), self.abort.into()],
            )?;
        }
        Ok(())
    }
}

/// The attempt itself: the `fetch` and the reading of its answer.
async fn attempt_with(
    options: &SendOptions,
    init: &Object,
    targets: usize,
    deadline: &AttemptDeadline,
) -> Result<(ParsedResponse, bool), NoAnswer> {
    let answered = async {
        let promise = options
            .fetch
            .call2(&JsValue::UNDEFINED, &JsValue::from_str(&options.url), init)
            .map_err(NoAnswer::Threw)?;
        let response = deadline.race(&promise).await.map_err(NoAnswer::Lost)?;
        let not_a_response = |what: &str| NoAnswer::NotAResponse(what.to_owned());
        let status = Reflect::get(&response, &"status".into())
            .ok()
            .and_then(|status| status.as_f64())
            .filter(|s| s.fract() == 0.0 && (0.0..=999.0).contains(s))
            .ok_or_else(|| not_a_response("its status is not an HTTP status code"))?;
        let headers = Reflect::get(&response, &"headers".into())
            .map_err(|_| not_a_response("its headers can't be read"))?;
        let header = |name: &str| {
            call_method(&headers, "get", &[name.into()])
                .map(|value| value.as_string())
                .map_err(|_| not_a_response("its headers.get(name) failed"))
        };
        let retry_after = header("Retry-After")?;
        let replayed = header(IDEMPOTENT_REPLAYED)?.as_deref() == Some("true");
        let text = call_method(&response, "text", &[])
            .map_err(|_| not_a_response("its text() is not a method"))?;
        let text = deadline
            .race(&text)
            .await
            .map_err(NoAnswer::Lost)?
            .as_string()
            .ok_or_else(|| not_a_response("its text() gave no string"))?;
        let body = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
        // A status in 0..=999 is exact in u16.
        let answer = parse_response(status as u16, &body, Some(targets), retry_after.as_deref());
        Ok::<_, NoAnswer>((answer, replayed))
    };
    answered.await
}

/// The options, checked: `invalid_argument` for a missing or malformed one.
fn read_options(options: &JsValue) -> Result<SendOptions, JsValue> {
    if !options.is_object() {
        return Err(error(
            INVALID_ARGUMENT,
            "options must be an object with baseUrl and authorizer.",
        ));
    }
    // A getter that throws is the options' fault, named like any other bad option.
    let get = |name: &str| {
        Reflect::get(options, &JsValue::from_str(name)).map_err(|thrown| {
            let why = thrown_message(&thrown).unwrap_or_else(|| "it threw".to_owned());
            error(
                INVALID_ARGUMENT,
                &format!("options.{name} could not be read ({why})."),
            )
        })
    };
    let string = |name: &str| -> Result<String, JsValue> {
        get(name)?
            .as_string()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| {
                error(
                    INVALID_ARGUMENT,
                    &format!("options.{name} must be a non-empty string."),
                )
            })
    };
    let base_url = string("baseUrl")?;
    let authorizer = string("authorizer")?;
    // No header carries anything else: sent, it would fail as a network error each try.
    if !is_header_text(&authorizer) {
        let why = if authorizer.trim() != authorizer {
            "it begins or ends with a space"
        } else {
            "it holds a character no HTTP header carries (pasted invisible characters or line breaks?)"
        };
        return Err(error(
            INVALID_ARGUMENT,
            &format!("options.authorizer must be printable ASCII (an API key, or Bearer and a token), neither first nor last a space: {why}."),
        ));
    }
    let key = match get("idempotencyKey")? {
        key if key.is_undefined() || key.is_null() => None,
        key => Some(key.as_string().filter(|key| is_valid_key(key)).ok_or_else(|| {
            error(
                INVALID_ARGUMENT,
                "options.idempotencyKey must be 1 to 255 printable ASCII characters, neither first nor last a space.",
            )
        })?),
    };
    let mut policy = RetryPolicy::default();
    let attempts = get("attempts")?;
    if !attempts.is_undefined() {
        policy.attempts = attempts
            .as_f64()
            .filter(|n| n.fract() == 0.0 && (1.0..=100.0).contains(n))
            .ok_or_else(|| {
                error(
                    INVALID_ARGUMENT,
                    "options.attempts must be an integer from 1 to 100.",
                )
            })? as u32;
    }
    let longest = get("longestWaitMs")?;
    if !longest.is_undefined() {
        policy.longest_wait_ms = longest
            .as_f64()
            .filter(|ms| *ms >= 0.0 && ms.is_finite())
            .ok_or_else(|| {
                error(
                    INVALID_ARGUMENT,
                    "options.longestWaitMs must be a number of milliseconds.",
                )
            })?;
    }
    let mut attempt_timeout_ms = DEFAULT_ATTEMPT_TIMEOUT_MS;
    let timeout = get("timeoutMs")?;
    if !timeout.is_undefined() {
        attempt_timeout_ms = timeout
            .as_f64()
            .filter(|ms| *ms >= 1.0 && *ms <= MAX_ATTEMPT_TIMEOUT_MS)
            .ok_or_else(|| {
                error(
                    INVALID_ARGUMENT,
                    "options.timeoutMs must be a number of milliseconds from 1 to 600000.",
                )
            })?;
    }
    let signal = get("signal")?;
    // Checked now, not when an abort or a retry first needs it: by then an attempt may
    // have been billed.
    if !signal.is_undefined() && !signal.is_null() {
        let method =
            |name: &str| Reflect::get(&signal, &name.into()).is_ok_and(|m| m.is_function());
        if !signal.is_object() || !method("addEventListener") || !method("removeEventListener") {
            return Err(error(
                INVALID_ARGUMENT,
                "options.signal must be an AbortSignal.",
            ));
        }
    }
    let given = get("fetch")?;
    // A fetch of the caller's own (a framework's, in server-side rendering) may take a
    // path without a page to resolve it against.
    check_base_url(&base_url, !given.is_undefined())?;
    let fetch = match given {
        fetch if fetch.is_undefined() => Reflect::get(&js_sys::global(), &"fetch".into())?,
        fetch => fetch,
    };
    let fetch = fetch.dyn_into::<Function>().map_err(|_| {
        error(
            INVALID_ARGUMENT,
            "options.fetch must be a function (no global fetch here).",
        )
    })?;
    Ok(SendOptions {
        url: format!("{}/crosstab", base_url.trim_end_matches('/')),
        authorizer,
        key,
        policy,
        attempt_timeout_ms,
        fetch,
        signal,
    })
}

/// `invalid_argument` unless `base_url` is an http(s) URL, absolute or (in a page)
/// relative to the page, or a path (`/v1`) given to the caller's own fetch: a malformed
/// one would be sent nowhere, yet each attempt would count as a lost answer.
fn check_base_url(base_url: &str, own_fetch: bool) -> Result<(), JsValue> {
    if own_fetch && base_url.starts_with('/') && !base_url.starts_with("//") {
        return Ok(());
    }
    let url = global_function("URL")?;
    let page = Reflect::get(&js_sys::global(), &"location".into())
        .ok()
        .filter(JsValue::is_object)
        .and_then(|location| Reflect::get(&location, &"href".into()).ok())
        .filter(JsValue::is_string);
    let args = js_sys::Array::of1(&base_url.into());
    if let Some(page) = page {
        args.push(&page);
    }
    let protocol = Reflect::construct(&url, &args)
        .ok()
        .and_then(|parsed| Reflect::get(&parsed, &"protocol".into()).ok())
        .and_then(|protocol| protocol.as_string());
    match protocol.as_deref() {
        Some("http:" | "https:") => Ok(()),
        _ => Err(error(
            INVALID_ARGUMENT,
            &format!(
                "options.baseUrl must be the service's http(s) address, e.g. https://crosstab.example.com/v1 (got '{}').",
                base_url.chars().take(200).collect::<String>()
            ),
        )),
    }
}

/// The `fetch` init every attempt sends.
fn request_init(options: &SendOptions, key: &str, body: &str) -> Result<Object, JsValue> {
    let headers = Object::new();
    Reflect::set(&headers, &"Content-Type".into(), &"application/json".into())?;
    Reflect::set(
        &headers,
        &"Service-Engine-Authorizer".into(),
        &options.authorizer.as_str().into(),
    )?;
    Reflect::set(&headers, &IDEMPOTENCY_KEY.into(), &key.into())?;
    let init = Object::new();
    Reflect::set(&init, &"method".into(), &"POST".into())?;
    Reflect::set(&init, &"headers".into(), &headers)?;
    Reflect::set(&init, &"body".into(), &body.into())?;
    // `signal` is each attempt's own (see `attempt_once`).
    Ok(init)
}

/// A fresh key from the platform's CSPRNG (`crypto.getRandomValues`).
fn fresh_key() -> Result<String, JsValue> {
    let crypto = Reflect::get(&js_sys::global(), &"crypto".into())?;
    if crypto.is_undefined() {
        return Err(error(
            INVALID_ARGUMENT,
            "no Web Crypto here (globalThis.crypto): pass options.idempotencyKey.",
        ));
    }
    let bytes = js_sys::Uint8Array::new_with_length(16);
    call_method(&crypto, "getRandomValues", &[bytes.clone().into()])?;
    let mut key = [0u8; 16];
    bytes.copy_to(&mut key);
    Ok(key_from_bytes(key))
}

/// Calls `target[name](...args)`.
fn call_method(target: &JsValue, name: &str, args: &[JsValue]) -> Result<JsValue, JsValue> {
    let method: Function = Reflect::get(target, &name.into())?
        .dyn_into()
        .map_err(|_| error(INVALID_ARGUMENT, &format!("{name} is not a function.")))?;
    method.apply(target, &args.iter().collect())
}

/// The global function `name` (`setTimeout`, `URL`, ...), or `invalid_argument`: this
/// JavaScript has none.
fn global_function(name: &str) -> Result<Function, JsValue> {
    Reflect::get(&js_sys::global(), &name.into())?
        .dyn_into()
        .map_err(|_| error(INVALID_ARGUMENT, &format!("no {name} here.")))
}

/// `{once: true}`: options of a listener that goes with the first event.
fn once() -> Object {
    let once = Object::new();
    let _ = Reflect::set(&once, &"once".into(), &JsValue::TRUE);
    once
}

/// Waits `ms` milliseconds (a `setTimeout` promise), or until `signal` aborts (at once if
/// it has: the caller looks at it after). Whichever ends the wait, the other is undone: a
/// signal kept for many queries gathers no listeners, and no timer outlives an abort.
async fn sleep(ms: f64, signal: &JsValue) -> Result<(), JsValue> {
    if aborted(signal) {
        return Ok(());
    }
    let set_timeout = global_function("setTimeout")?;
    let clear_timeout = global_function("clearTimeout")?;
    let mut failed = None;
    let mut wake = None;
    let mut timer = JsValue::UNDEFINED;
    let promise = Promise::new(&mut |resolve, _| {
        match set_timeout.call2(&JsValue::UNDEFINED, &resolve, &ms.into()) {
            Ok(id) => timer = id,
            Err(e) => failed = Some(e),
        }
        if signal.is_object() {
            let listen = [
                JsValue::from_str("abort"),
                resolve.clone().into(),
                once().into(),
            ];
            if let Err(e) = call_method(signal, "addEventListener", &listen) {
                failed = Some(e);
            }
        }
        wake = Some(resolve);
    });
    let waited = match failed {
        Some(e) => Err(e),
        None => JsFuture::from(promise).await.map(|_| ()),
    };
    clear_timeout.call1(&JsValue::UNDEFINED, &timer)?;
    if let (true, Some(wake)) = (signal.is_object(), wake) {
        call_method(
            signal,
            "removeEventListener",
            &[JsValue::from_str("abort"), wake.into()],
        )?;
    }
    waited
}

/// Whether `signal` (an `AbortSignal`, if any) has aborted.
fn aborted(signal: &JsValue) -> bool {
    signal.is_object()
        && Reflect::get(signal, &"aborted".into()).is_ok_and(|aborted| aborted.is_truthy())
}

/// The caller's signal ended the query: an `aborted` error, its `cause` the signal's
/// reason, with the key to send the query again with (once `sent`, an attempt may have
/// been billed).
fn aborted_error(signal: &JsValue, key: &str, sent: bool) -> JsValue {
    let reason = Reflect::get(signal, &"reason".into()).unwrap_or_else(|e| e);
    let why = thrown_message(&reason).unwrap_or_else(|| "no reason given".to_owned());
    let message = if sent {
        format!("The query was aborted ({why}); an attempt may have reached the service: send it again with its idempotencyKey.")
    } else {
        format!("The query was aborted ({why}) before it was sent.")
    };
    keyed_error(ABORTED, &message, key, Some(&reason))
}

/// A `CrosstabError` for a query that may have been sent: it carries the `idempotencyKey`
/// to send it again with, and what caused it, if anything did.
fn keyed_error(code: &str, message: &str, key: &str, cause: Option<&JsValue>) -> JsValue {
    let js = error(code, message);
    if let Some(cause) = cause {
        let _ = Reflect::set(&js, &"cause".into(), cause);
    }
    let _ = Reflect::set(&js, &"idempotencyKey".into(), &key.into());
    js
}

/// The answer as JS gets it, with how it came.
fn sent(
    answer: &ParsedResponse,
    key: &str,
    attempts: u32,
    replayed: bool,
) -> Result<JsValue, JsValue> {
    let js = to_js(answer)?;
    Reflect::set(&js, &"idempotencyKey".into(), &key.into())?;
    Reflect::set(&js, &"attempts".into(), &attempts.into())?;
    Reflect::set(&js, &"replayed".into(), &replayed.into())?;
    Ok(js)
}

/// The last attempt got no answer: a `network_error` with its failure as the `cause` and
/// the key to send the query again with.
fn network_error(failure: &JsValue, key: &str) -> JsValue {
    let message = thrown_message(failure).unwrap_or_else(|| "no answer".to_owned());
    keyed_error(
        NETWORK_ERROR,
        &format!(
            "No answer from the service ({message}); send the query again with its idempotencyKey."
        ),
        key,
        Some(failure),
    )
}
