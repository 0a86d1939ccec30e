//! The `#[wasm_bindgen]` exports: thin wrappers that turn JS values into the bytes a
//! client would send, call the plain Rust functions, and hand results back as plain JS
//! objects. Failures are JS `Error`s with the contract's code in `.code`, never panics.

use js_sys::{Reflect, JSON};
use serde::Serialize;
use wasm_bindgen::prelude::*;

use crosstab_contract::{ApiError, CrosstabResult, ValidRequest};

use crate::display;
use crate::response;
use crate::validate::{self, Validation};

/// Error code for a JS argument of the wrong type (not a contract code: the caller's bug).
pub const INVALID_ARGUMENT: &str = "invalid_argument";

#[wasm_bindgen(typescript_custom_section)]
const ERROR_TYPES: &str = r#"
/** The `Error` every function of this package throws: `code` is machine-readable (the
 * contract's `error.code`, such as `invalid_request`, or `invalid_argument`,
 * `invalid_survey`, `invalid_survey_source`, `survey_freed`); `status` and `body` are the HTTP status
 * and envelope the server would answer with, for contract errors. `instanceof CrosstabError`
 * holds for an error from either entry of the package, or from another copy of it (of this
 * version or later). */
export class CrosstabError extends Error {
  constructor(code: string, message: string);
  code: string;
  /** `sendCrosstab`'s `network_error`: the key to send the same query again with. */
  idempotencyKey?: string;
  status?: number;
  body?: ErrorEnvelope;
}
"#;

/// Debug builds only: panics (which are bugs) print their message to the console.
#[cfg(debug_assertions)]
#[wasm_bindgen(start)]
fn start() {
    console_error_panic_hook::set_once();
}

/// Hands a serializable value to JS as a plain object (one JSON round trip: cheaper than
/// building the object member by member across the boundary).
pub(crate) fn to_js<T: Serialize>(value: &T) -> Result<JsValue, JsValue> {
    let mut text = Vec::with_capacity(512);
    serde_json::to_writer(&mut text, value)
        .map_err(|e| error("internal_error", &format!("serializing the result: {e}")))?;
    // serde_json writes UTF-8 only.
    let text = String::from_utf8(text)
        .map_err(|e| error("internal_error", &format!("serializing the result: {e}")))?;
    JSON::parse(&text)
}

/// Whether `value` is an error this package threw: an `Error` named `CrosstabError` with
/// a string `code`. In TypeScript a type guard, for the `unknown` a `catch` clause gets.
#[wasm_bindgen(js_name = isCrosstabError, unchecked_return_type = "value is CrosstabError")]
pub fn is_crosstab_error(
    #[wasm_bindgen(unchecked_param_type = "unknown")] value: &JsValue,
) -> bool {
    let member = |name: &str| Reflect::get(value, &JsValue::from_str(name)).ok();
    value.is_instance_of::<js_sys::Error>()
        && member("name").and_then(|name| name.as_string()).as_deref() == Some("CrosstabError")
        && member("code").is_some_and(|code| code.is_string())
}

#[wasm_bindgen(module = "/js/error.js")]
extern "C" {
    /// A new `CrosstabError` (the class the package exports, js/error.js).
    #[wasm_bindgen(js_name = crosstabError)]
    fn crosstab_error(code: &str, message: &str) -> JsValue;
}

/// A `CrosstabError`: a JS `Error` named so, with `code` set.
pub(crate) fn error(code: &str, message: &str) -> JsValue {
    crosstab_error(code, message)
}

/// A contract error as a JS `Error` carrying the server's status and envelope.
#[cfg(feature = "engine")]
pub(crate) fn api_error(api: &ApiError) -> JsValue {
    let js = error(api.code(), &api.to_string());
    let _ = Reflect::set(
        &js,
        &JsValue::from_str("status"),
        &JsValue::from(api.status()),
    );
    if let Ok(body) = to_js(&api.envelope()) {
        let _ = Reflect::set(&js, &JsValue::from_str("body"), &body);
    }
    js
}

#[wasm_bindgen]
extern "C" {
    /// `JSON.stringify` returning the text straight into WASM memory (one boundary
    /// crossing instead of a `JsString` handle and a second call to read it).
    #[wasm_bindgen(js_namespace = JSON, js_name = stringify, catch)]
    fn stringify_text(value: &JsValue) -> Result<Option<String>, JsValue>;
}

/// The message of what JS threw, when it is an `Error` or a string.
pub(crate) fn thrown_message(thrown: &JsValue) -> Option<String> {
    thrown
        .dyn_ref::<js_sys::Error>()
        .and_then(|e| e.message().as_string())
        // `throw "text"` and `controller.abort("text")` give a bare string.
        .or_else(|| thrown.as_string().filter(|text| !text.is_empty()))
}

/// The JSON text a client would send for `value` (`JSON.stringify`): `None` when it
/// sends no body (`undefined`, a function, a symbol). When no client could send it
/// (`JSON.stringify` throws), `unserializable` makes the refusal from the reason.
fn json_text<E>(
    value: &JsValue,
    unserializable: impl FnOnce(&str) -> E,
) -> Result<Option<String>, E> {
    stringify_text(value).map_err(|thrown| {
        let reason = thrown_message(&thrown)
            .and_then(|m| m.lines().next().map(str::to_owned))
            .unwrap_or_else(|| "JSON.stringify threw".to_owned());
        unserializable(&reason)
    })
}

/// Validates a JS value as a request: first JSON text, as a client would send it, then
/// the server's own validation of those bytes.
pub(crate) fn validate_js(value: &JsValue) -> Result<ValidRequest, ApiError> {
    validate::validate_text(json_text(value, validate::unserializable)?.as_deref())
}

/// Validates a request body with exactly the server's rules. `value` is what you would
/// pass to `JSON.stringify` to send it: the answer is `{ok: true, request}` with the
/// request as the server reads it, or `{ok: false, status, body}` with the status and
/// error envelope the server would answer that body with.
#[wasm_bindgen(js_name = validateRequest, unchecked_return_type = "Validation")]
pub fn validate_request(
    #[wasm_bindgen(unchecked_param_type = "unknown")] value: JsValue,
) -> Result<JsValue, JsValue> {
    let outcome = Validation::from(validate_js(&value));
    to_js(&outcome)
}

/// Validates a raw request body (JSON text), exactly as the server reads it. Anything
/// but a string (an already-parsed object, a Buffer) throws `invalid_argument`.
#[wasm_bindgen(js_name = validateJson, unchecked_return_type = "Validation")]
pub fn validate_json(
    #[wasm_bindgen(unchecked_param_type = "string")] text: JsValue,
) -> Result<JsValue, JsValue> {
    let text = string_arg(&text, "text")?;
    let outcome = Validation::from(validate::validate_text(Some(&text)));
    to_js(&outcome)
}

/// `value` as a string, or `invalid_argument` naming the parameter (checked here: the
/// generated glue would read any value's `length` and copy it unchecked).
fn string_arg(value: &JsValue, name: &str) -> Result<String, JsValue> {
    value
        .as_string()
        .ok_or_else(|| error(INVALID_ARGUMENT, &format!("{name} must be a string.")))
}

/// Checks a server answer against the contract and classifies it: `success`, `partial`
/// (with `description`), `badRequest`, `unauthorized` (fetch a fresh key before trying
/// again), `forbidden`, `rateLimited` (retry after `retryAfterMs`), `serverError` (retry
/// with backoff: `retryDelayMs`), or `invalid` (not an answer the contract allows).
/// `body` is the parsed JSON body (or its raw text); pass the `request` to check that
/// `Results` has one entry per `TargetCodes` entry, and the `Retry-After` header
/// (`res.headers.get("Retry-After")`) so a 429 says when to retry.
#[wasm_bindgen(js_name = parseResponse, unchecked_return_type = "ParsedResponse")]
pub fn parse_response(
    #[wasm_bindgen(unchecked_param_type = "number")] status: JsValue,
    #[wasm_bindgen(unchecked_param_type = "unknown")] body: JsValue,
    #[wasm_bindgen(unchecked_optional_param_type = "CrosstabRequest | null")] request: Option<
        JsValue,
    >,
    #[wasm_bindgen(js_name = retryAfter, unchecked_optional_param_type = "string | number | null")]
    retry_after: Option<JsValue>,
) -> Result<JsValue, JsValue> {
    const STATUS: &str = "status must be an HTTP status code (an integer from 0 to 999).";
    let status = number(&status, STATUS)?;
    if !(status.fract() == 0.0 && (0.0..=999.0).contains(&status)) {
        return Err(error(INVALID_ARGUMENT, STATUS));
    }
    // A status in 0..=999 is exact in u16.
    let status = status as u16;
    // Raw text, or a parsed body's JSON text; text that is not JSON is kept as a string
    // for the checks, and no body at all (`undefined`) is checked as `null`.
    let text = match body.as_string() {
        Some(text) => Some(text),
        None => json_text(&body, |reason| {
            error(
                INVALID_ARGUMENT,
                &format!(
                    "body must be the answer's body, as text or parsed JSON; no server sends \
                     this one ({reason})."
                ),
            )
        })?,
    };
    let body_value = text.map_or(serde_json::Value::Null, |text| {
        serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text))
    });
    let target_count = match request.filter(|r| !r.is_undefined() && !r.is_null()) {
        None => None,
        Some(request) => {
            // `length` read through Reflect (which catches), never by copying the array: a
            // proxy or a sparse array of 2^32-1 holes costs one property read.
            let targets = Reflect::get(&request, &JsValue::from_str("TargetCodes"))
                .ok()
                .filter(js_sys::Array::is_array)
                .and_then(|targets| Reflect::get(&targets, &JsValue::from_str("length")).ok())
                .and_then(|length| length.as_f64())
                .map(|length| length as usize);
            match targets {
            Some(count) => Some(count),
            None => return Err(error(
                INVALID_ARGUMENT,
                "request must be the CrosstabRequest that was sent (with its TargetCodes array).",
            )),
        }
        }
    };
    let retry_after = match retry_after.filter(|v| !v.is_undefined() && !v.is_null()) {
        None => None,
        Some(value) => match (value.as_string(), value.as_f64()) {
            (Some(text), _) => Some(text),
            (None, Some(seconds)) if seconds.is_finite() => Some(format!("{seconds}")),
            _ => return Err(error(
                INVALID_ARGUMENT,
                "retryAfter must be the Retry-After header: a string, a number of seconds or null.",
            )),
        },
    };
    let parsed =
        response::parse_response(status, &body_value, target_count, retry_after.as_deref());
    to_js(&parsed)
}

/// The delay in milliseconds before retry number `attempt` (1 for the first retry) of an
/// answer classified `serverError`: exponential backoff from 250 ms with jitter, capped at
/// 30 s.
#[wasm_bindgen(js_name = retryDelayMs)]
pub fn retry_delay_ms(
    #[wasm_bindgen(unchecked_param_type = "number")] attempt: JsValue,
) -> Result<f64, JsValue> {
    let attempt = number(
        &attempt,
        "attempt must be a number (1 for the first retry).",
    )?;
    let attempt = if attempt.is_finite() {
        attempt.clamp(0.0, f64::from(u32::MAX)) as u32
    } else {
        u32::MAX
    };
    Ok(crate::retry::retry_delay_ms(
        attempt,
        js_sys::Math::random(),
    ))
}

/// `value` as a number, else `invalid_argument` with `message`: JS would turn a string
/// into a number unasked, and a BigInt into a bare `TypeError`.
fn number(value: &JsValue, message: &str) -> Result<f64, JsValue> {
    value
        .as_f64()
        .ok_or_else(|| error(INVALID_ARGUMENT, message))
}

/// A `CrosstabResult` as the contract allows it: `Stbl` 0 or 1, `WgtAud` at least 0.
fn result_from_js(result: JsValue) -> Result<CrosstabResult, JsValue> {
    // JSON.stringify would write NaN or Infinity as null: said as what it is.
    let wgt_aud = Reflect::get(&result, &"WgtAud".into()).ok();
    if wgt_aud
        .and_then(|w| w.as_f64())
        .is_some_and(|w| !w.is_finite())
    {
        return Err(error(
            INVALID_ARGUMENT,
            "result must be a CrosstabResult: WgtAud a finite number of 0 or more, not NaN or Infinity.",
        ));
    }
    let text = json_text(&result, |_| ())
        .ok()
        .flatten()
        .ok_or_else(|| error(INVALID_ARGUMENT, "result must be a CrosstabResult object."))?;
    // Deserializing checks that Stbl is 0 or 1.
    let result: CrosstabResult = serde_json::from_str(&text).map_err(|e| {
        // The place in the JSON text is the package's own, nothing the caller wrote.
        let said = e.to_string();
        let said = said.split(" at line ").next().unwrap_or(&said);
        error(
            INVALID_ARGUMENT,
            &format!("result must be a CrosstabResult {{WgtAud, Resps, Stbl 0 or 1}}: {said}."),
        )
    })?;
    // From JSON text, WgtAud is never NaN (JSON.stringify writes NaN as null).
    if result.wgt_aud < 0.0 {
        return Err(error(
            INVALID_ARGUMENT,
            "result must be a CrosstabResult: WgtAud at least 0.",
        ));
    }
    Ok(result)
}

fn units_from_js(units: &JsValue) -> Result<u32, JsValue> {
    const UNITS: &str = "units must be AudienceReportUnits: a positive integer.";
    let units = number(units, UNITS)?;
    if units.fract() == 0.0 && (1.0..=f64::from(u32::MAX)).contains(&units) {
        Ok(units as u32)
    } else {
        Err(error(INVALID_ARGUMENT, UNITS))
    }
}

/// The weighted audience in absolute terms: `WgtAud × AudienceReportUnits`.
#[wasm_bindgen(js_name = absoluteAudience)]
pub fn absolute_audience(
    #[wasm_bindgen(unchecked_param_type = "CrosstabResult")] result: JsValue,
    #[wasm_bindgen(unchecked_param_type = "number")] units: JsValue,
) -> Result<f64, JsValue> {
    Ok(display::absolute_audience(
        &result_from_js(result)?,
        units_from_js(&units)?,
    ))
}

/// One result ready to show: thousands separators and the unstable marker (`*`).
#[wasm_bindgen(js_name = formatResult, unchecked_return_type = "FormattedResult")]
pub fn format_result(
    #[wasm_bindgen(unchecked_param_type = "CrosstabResult")] result: JsValue,
    #[wasm_bindgen(unchecked_param_type = "number")] units: JsValue,
) -> Result<JsValue, JsValue> {
    let formatted = display::format_result(&result_from_js(result)?, units_from_js(&units)?);
    to_js(&formatted)
}

/// `value` with `,` between thousands and `decimals` places (an integer from 0 to 6;
/// anything else throws `invalid_argument`), halves rounded as a spreadsheet shows them
/// ([`display::format_number`]).
#[wasm_bindgen(js_name = formatNumber)]
pub fn format_number(
    #[wasm_bindgen(unchecked_param_type = "number")] value: JsValue,
    #[wasm_bindgen(unchecked_optional_param_type = "number")] decimals: Option<JsValue>,
) -> Result<String, JsValue> {
    const DECIMALS: &str = "decimals must be an integer from 0 to 6.";
    let value = number(&value, "value must be a number.")?;
    let decimals = match decimals.filter(|d| !d.is_undefined() && !d.is_null()) {
        None => 0,
        Some(d) => match number(&d, DECIMALS)? {
            d if d.fract() == 0.0 && (0.0..=6.0).contains(&d) => d as u8,
            _ => return Err(error(INVALID_ARGUMENT, DECIMALS)),
        },
    };
    Ok(display::format_number(value, decimals))
}

/// What the unstable marker means, for a footnote.
#[wasm_bindgen(js_name = unstableNote)]
pub fn unstable_note() -> String {
    display::UNSTABLE_NOTE.to_owned()
}

/// The contract version: `info.version` of the OpenAPI document.
#[wasm_bindgen(js_name = contractVersion)]
pub fn contract_version() -> String {
    crosstab_contract::CONTRACT_VERSION.to_owned()
}

/// The OpenAPI document, exactly as `GET /v1/docs` serves it.
#[wasm_bindgen(js_name = openapi, unchecked_return_type = "Record<string, any>")]
pub fn openapi() -> Result<JsValue, JsValue> {
    JSON::parse(crate::OPENAPI_JSON)
}

#[cfg(feature = "engine")]
pub use engine::Survey;

#[cfg(feature = "engine")]
mod engine {
    use js_sys::{ArrayBuffer, Reflect, Uint8Array};
    use wasm_bindgen::prelude::*;

    use crosstab_contract::app::{TableError, TableRequest};
    use crosstab_contract::{ApiError, CrosstabResponse, CrosstabResult};

    use super::{
        api_error, error, json_text, string_arg, thrown_message, to_js, validate_js,
        INVALID_ARGUMENT,
    };
    use crate::survey::{INVALID_SURVEY, INVALID_SURVEY_SOURCE, OUT_OF_MEMORY};
    use crosstab_engine::{AlignedBytes, LoadError};

    #[wasm_bindgen(module = "/js/answer.js")]
    extern "C" {
        /// The answer object of one or two targets' figures (`w1` unset for one; an unset
        /// description is the empty one, which then crosses without a text decoding).
        #[wasm_bindgen(js_name = crosstabAnswer)]
        #[allow(clippy::too_many_arguments)]
        fn crosstab_answer(
            code: f64,
            description: Option<&str>,
            units: u32,
            w0: f64,
            r0: f64,
            s0: u8,
            w1: Option<f64>,
            r1: f64,
            s1: u8,
        ) -> JsValue;
    }

    /// `response` as a plain JS object: built in JS from its figures when it has the
    /// contract's one or two results, all finite (as every engine answer has); otherwise
    /// through JSON, which writes a non-finite figure as `null` as the server would.
    fn answer_js(response: &CrosstabResponse) -> Result<JsValue, JsValue> {
        // Figures as JS numbers: codes and counts are far below 2^53, so exact.
        let figures = |r: &CrosstabResult| (r.wgt_aud, r.resps as f64, r.stbl as u8);
        let (first, second) = match response.results.as_slice() {
            [a] if a.wgt_aud.is_finite() => (figures(a), None),
            [a, b] if a.wgt_aud.is_finite() && b.wgt_aud.is_finite() => {
                (figures(a), Some(figures(b)))
            }
            _ => return to_js(response),
        };
        let (w1, r1, s1) = second.map_or((None, 0.0, 0), |(w, r, s)| (Some(w), r, s));
        Ok(crosstab_answer(
            response.result_code as f64,
            Some(response.result_description.as_str()).filter(|text| !text.is_empty()),
            response.audience_report_units,
            first.0,
            first.1,
            first.2,
            w1,
            r1,
            s1,
        ))
    }

    /// A survey loaded in memory, answering requests with the server's engine.
    #[wasm_bindgen]
    #[derive(Debug)]
    pub struct Survey {
        inner: crosstab_engine::Survey,
    }

    #[wasm_bindgen]
    impl Survey {
        /// Loads a compiled survey (the bytes `crosstab import` writes).
        #[wasm_bindgen(js_name = fromCompiled)]
        pub fn from_compiled(
            #[wasm_bindgen(unchecked_param_type = "Uint8Array | ArrayBuffer")] bytes: JsValue,
        ) -> Result<Survey, JsValue> {
            // By the object's own tag, not `instanceof`: an array from another realm
            // (an iframe, a `vm` context, jsdom) is one too.
            let tag = Reflect::get(&js_sys::global(), &"Object".into())
                .and_then(|object| Reflect::get(&object, &"prototype".into()))
                .and_then(|prototype| Reflect::get(&prototype, &"toString".into()))
                .ok()
                .and_then(|to_string| to_string.dyn_into::<js_sys::Function>().ok())
                .and_then(|to_string| to_string.call0(&bytes).ok())
                .and_then(|tag| tag.as_string());
            let not_bytes = || {
                error(
                    INVALID_ARGUMENT,
                    "bytes must be a Uint8Array or an ArrayBuffer.",
                )
            };
            let array = match tag.as_deref() {
                // A tag can be claimed (`Symbol.toStringTag`); a view's slot can't.
                Some("[object Uint8Array]")
                    if ArrayBuffer::is_view(&bytes)
                        && Reflect::get(&bytes, &"BYTES_PER_ELEMENT".into())
                            .ok()
                            .and_then(|size| size.as_f64())
                            == Some(1.0) =>
                {
                    bytes.unchecked_into::<Uint8Array>()
                }
                Some("[object ArrayBuffer]") => {
                    let constructor = Reflect::get(&js_sys::global(), &"Uint8Array".into())
                        .ok()
                        .and_then(|c| c.dyn_into::<js_sys::Function>().ok())
                        .ok_or_else(not_bytes)?;
                    // A detached buffer (transferred to a worker) can't be viewed.
                    Reflect::construct(&constructor, &js_sys::Array::of1(&bytes))
                        .map_err(|thrown| {
                            let why = thrown_message(&thrown)
                                .unwrap_or_else(|| "it can't be read".to_owned());
                            error(
                                INVALID_ARGUMENT,
                                &format!("bytes: the ArrayBuffer can't be read ({why}); was it transferred?"),
                            )
                        })?
                        .unchecked_into::<Uint8Array>()
                }
                _ => return Err(not_bytes()),
            };
            // The length as JS has it: `length()` is a u32, and an array may hold 2^32.
            let length = Reflect::get(&array, &"length".into())
                .ok()
                .and_then(|length| length.as_f64())
                .unwrap_or(0.0);
            // Copied once, from JS straight into the survey's aligned memory.
            let loaded = AlignedBytes::filled(length as u64, |into| array.copy_to(into))
                .and_then(crosstab_engine::Survey::from_aligned);
            loaded.map(|inner| Survey { inner }).map_err(|e| match e {
                LoadError::OutOfMemory { .. } => error(OUT_OF_MEMORY, &e.to_string()),
                e => error(INVALID_SURVEY, &e.to_string()),
            })
        }

        /// Imports a survey from its TOML definition and its respondent CSV text.
        #[wasm_bindgen(js_name = fromCsv)]
        pub fn from_csv(
            #[wasm_bindgen(js_name = definitionToml, unchecked_param_type = "string")]
            definition_toml: JsValue,
            #[wasm_bindgen(unchecked_param_type = "string")] csv: JsValue,
        ) -> Result<Survey, JsValue> {
            let definition = string_arg(&definition_toml, "definitionToml")?;
            let csv = string_arg(&csv, "csv")?;
            crosstab_engine::survey_from_csv(&definition, &csv)
                .map(|inner| Survey { inner })
                .map_err(|e| error(INVALID_SURVEY_SOURCE, &e.to_string()))
        }

        /// The survey's `SurveyCode`.
        #[wasm_bindgen(getter)]
        pub fn code(&self) -> String {
            self.inner.code().to_owned()
        }

        /// Number of respondents.
        #[wasm_bindgen(getter)]
        pub fn respondents(&self) -> f64 {
            self.inner.respondents() as f64
        }

        /// Variables, values, named codes, bases (with totals) and groups, with labels.
        #[wasm_bindgen(unchecked_return_type = "Codebook")]
        pub fn codebook(&self) -> Result<JsValue, JsValue> {
            to_js(&self.inner.codebook())
        }

        /// Answers a request as the server does for a caller granted this whole survey.
        /// Throws a `CrosstabError` with the server's `code`, `status` and `body` when the
        /// server would refuse it (invalid or over 64 KiB, another survey, unknown base or
        /// group).
        #[wasm_bindgen(unchecked_return_type = "CrosstabResponse")]
        pub fn crosstab(
            &self,
            #[wasm_bindgen(unchecked_param_type = "CrosstabRequest")] request: JsValue,
        ) -> Result<JsValue, JsValue> {
            let answer =
                validate_js(&request).and_then(|valid| crate::crosstab(&self.inner, &valid));
            match answer {
                Ok(response) => answer_js(&response),
                Err(api) => Err(api_error(&api)),
            }
        }

        /// Computes a table here (rows × columns within a base, with the Total column and
        /// row, reliability and the column test), as `POST /app/api/table` would, with
        /// `billedCalls` 0: nothing leaves the page. `request.survey` may be left out (the
        /// loaded survey answers; another survey is refused). Throws a `CrosstabError` with the server's `code`,
        /// `status` and `body` when it would refuse the request.
        #[wasm_bindgen(unchecked_return_type = "Table")]
        pub fn table(
            &self,
            #[wasm_bindgen(unchecked_param_type = "TableRequest")] request: JsValue,
        ) -> Result<JsValue, JsValue> {
            let answer =
                table_request(&request).and_then(|request| self.inner.answer_table(request));
            match answer {
                Ok(table) => to_js(&table),
                Err(api) => Err(api_error(&api)),
            }
        }
    }

    /// A JS value as a table request, read from its JSON text as the server reads a body.
    fn table_request(value: &JsValue) -> Result<TableRequest, ApiError> {
        let text = json_text(value, TableError::unserializable)?;
        crate::table_request(text.as_deref().unwrap_or_default())
    }
}
