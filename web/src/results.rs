//! The results of a query: a table in either orientation the spec allows, a bar chart,
//! CSV export and the request as a curl command (with a placeholder, never a key).

use crosstab_contract::app::Codebook;
use crosstab_contract::{CrosstabRequest, CrosstabResponse, CrosstabResult};
use crosstab_wasm::display::{absolute_audience, format_number, format_result, UNSTABLE_NOTE};
use crosstab_wasm::response::{parse_response, ParsedResponse, Retry};
use leptos::prelude::*;
use wasm_bindgen::JsCast;

use crate::api::{ApiFailure, KeyedAnswer};
use crate::export::csv_field;
use crate::labels::Labelled;

/// Where a query run is.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Nothing run yet.
    Idle,
    /// Waiting for the answer.
    Loading,
    /// The backend could not be reached or answered outside the contract.
    Failed(String),
    /// An answer, classified by the contract's rules (boxed: it is much larger than the
    /// other states).
    Answered(Box<Answer>),
}

/// A query's answer with what it was asked from.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The request as sent.
    request: CrosstabRequest,
    /// The codebook it was built from (labels and base totals).
    codebook: Option<Codebook>,
    /// The classified answer.
    parsed: ParsedResponse,
    /// Whether it is the answer an earlier run of the same query got and lost on the way
    /// (given again, not billed again).
    replayed: bool,
}

impl Outcome {
    /// Classifies a backend answer.
    pub fn from_call(
        request: CrosstabRequest,
        codebook: Option<Codebook>,
        call: Result<KeyedAnswer, ApiFailure>,
    ) -> Outcome {
        match call {
            Err(failure) => Outcome::Failed(failure.message),
            Ok(answer) => {
                let count = request.target_codes.len();
                Outcome::Answered(Box::new(Answer {
                    parsed: parse_response(
                        answer.status,
                        &answer.body,
                        Some(count),
                        answer.retry_after.as_deref(),
                    ),
                    request,
                    codebook,
                    replayed: answer.replayed,
                }))
            }
        }
    }

    /// One line for the history, for answers worth re-running.
    pub fn summary(&self) -> Option<String> {
        let Outcome::Answered(answer) = self else {
            return None;
        };
        let response = match &answer.parsed {
            ParsedResponse::Success { response, .. } | ParsedResponse::Partial { response, .. } => {
                response
            }
            _ => return None,
        };
        Some(
            response
                .results
                .iter()
                .map(|r| format_result(r, response.audience_report_units).display)
                .collect::<Vec<_>>()
                .join(" | "),
        )
    }
}

/// One row of the results: a target and its figures.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    target: String,
    label: String,
    result: CrosstabResult,
    weighted: String,
    absolute: f64,
    display: String,
    respondents: String,
    share: Option<f64>,
    unstable: bool,
}

fn rows(
    request: &CrosstabRequest,
    codebook: Option<&Codebook>,
    response: &CrosstabResponse,
) -> Vec<Row> {
    let base_total = codebook
        .and_then(|book| {
            book.bases
                .iter()
                .find(|b| b.code == request.population_base_code)
        })
        .map(|base| {
            // Within a named group, the share is of the base within that group.
            let in_group = request.group_filter().and_then(|group| {
                base.group_totals
                    .as_ref()
                    .and_then(|totals| totals.get(group))
            });
            in_group.map_or(base.weighted, |totals| totals.weighted)
        });
    let units = response.audience_report_units;
    request
        .target_codes
        .iter()
        .cloned()
        .zip(response.results.iter())
        .map(|(target, result)| {
            let formatted = format_result(result, units);
            let absolute = absolute_audience(result, units);
            let label = Labelled::of(codebook, &target).label.unwrap_or_default();
            Row {
                share: base_total
                    .filter(|t| *t > 0.0)
                    .map(|t| 100.0 * absolute / t),
                target,
                label,
                result: *result,
                weighted: formatted.weighted,
                absolute,
                display: formatted.display,
                respondents: formatted.respondents,
                unstable: formatted.unstable,
            }
        })
        .collect()
}

fn share_text(share: Option<f64>) -> String {
    share.map_or_else(|| "–".to_owned(), |s| format!("{}%", format_number(s, 1)))
}

/// The table as CSV, one line per target.
fn to_csv(rows: &[Row], units: u32) -> String {
    let mut out = format!("Target,Label,WgtAud (x{units}),Audience,Respondents,% of base,Stbl\n");
    for row in rows {
        out.push_str(&format!(
            "{},{},{},{},{},{},{}\n",
            csv_field(&row.target),
            csv_field(&row.label),
            row.result.wgt_aud,
            row.absolute.round(),
            row.result.resps,
            // Rounded as the screen rounds (a share is at most 100: no thousands comma).
            row.share.map_or(String::new(), |s| format_number(s, 2)),
            row.result.stbl as u8
        ));
    }
    out
}

/// The request as a curl command for the `/v1` API, with a placeholder for the key.
fn curl(request: &CrosstabRequest) -> String {
    let origin = match crate::api::backend_origin() {
        origin if !origin.is_empty() => origin,
        _ => web_sys::window()
            .and_then(|w| w.location().origin().ok())
            .unwrap_or_default(),
    };
    // A request always serializes; an empty body would only make the command fail.
    let body = serde_json::to_string(request)
        .unwrap_or_default()
        .replace('\'', "'\\''");
    format!(
        "curl -X POST '{origin}/v1/crosstab' \\\n  -H 'Content-Type: application/json' \\\n  -H \"Service-Engine-Authorizer: $CROSSTAB_API_KEY\" \\\n  -d '{body}'"
    )
}

/// Copies `text` to the clipboard: whether the browser said it did (`writeText` settles
/// its promise only then; it refuses without permission or outside a secure context).
async fn copy_to_clipboard(text: String) -> bool {
    let Some(window) = web_sys::window() else {
        return false;
    };
    let navigator = window.navigator();
    let Ok(clipboard) = js_sys::Reflect::get(&navigator, &"clipboard".into()) else {
        return false;
    };
    let Ok(write) = js_sys::Reflect::get(&clipboard, &"writeText".into()) else {
        return false;
    };
    let promise = write
        .dyn_into::<js_sys::Function>()
        .ok()
        .and_then(|f| f.call1(&clipboard, &text.into()).ok())
        .and_then(|p| p.dyn_into::<js_sys::Promise>().ok());
    match promise {
        Some(promise) => wasm_bindgen_futures::JsFuture::from(promise).await.is_ok(),
        None => false,
    }
}

/// The copy button's text: what the last copy of this answer's command did.
fn copy_text(copied: Option<bool>) -> &'static str {
    match copied {
        None => "Copy curl command",
        Some(true) => "Copied",
        Some(false) => "Not copied: select the command and copy it",
    }
}

fn advice(retry: Retry) -> &'static str {
    match retry {
        Retry::Never => "Change the request before trying again: sending it unchanged fails the same way.",
        Retry::AfterFreshKey => "The server's API key was refused. Ask an administrator to replace the app's key; retrying with the same key fails.",
        Retry::Backoff => "A server error: the app already retried with backoff. Try again in a moment.",
        Retry::AfterDelay => "Too many queries for your account just now: the app already waited and retried. Try again after the time the message gives.",
    }
}

#[component]
pub fn ResultsView(outcome: RwSignal<Outcome>) -> impl IntoView {
    let targets_as_rows = RwSignal::new(true);
    move || {
        // Each answer's own: a copy or an export of an earlier answer says nothing of it.
        let copied = RwSignal::new(None::<bool>);
        let export_error = RwSignal::new(None::<String>);
        match outcome.get() {
        Outcome::Idle => view! {
            <section class="card results empty-state"><p class="empty">"Run a query to see the audience figures here."</p></section>
        }.into_any(),
        Outcome::Loading => view! {
            <section class="card results"><p class="status">"Running the query…"</p></section>
        }.into_any(),
        Outcome::Failed(message) => view! {
            <section class="card results"><p class="error" role="alert">{message}</p></section>
        }.into_any(),
        Outcome::Answered(answer) => {
            let Answer { request, codebook, parsed, replayed } = *answer;
            match parsed {
            ParsedResponse::Success { response, .. } | ParsedResponse::Partial { response, .. } => {
                let partial = (response.result_code > 0).then(|| response.result_description.clone());
                let units = response.audience_report_units;
                let rows = rows(&request, codebook.as_ref(), &response);
                let csv = to_csv(&rows, units);
                let command = curl(&request);
                let file_name = crate::export::query_file_name(&request);
                let command_for_copy = command.clone();
                let any_unstable = rows.iter().any(|r| r.unstable);
                let max = rows.iter().map(|r| r.absolute).fold(0.0f64, f64::max);
                let unit_label = if units == 1 { String::new() } else { format!(" (×{})", format_number(f64::from(units), 0)) };
                let table_rows = rows.clone();
                let chart_rows = rows;
                view! {
                    <section class="card results" aria-labelledby="results-title">
                        <div class="row spread">
                            <h2 id="results-title">"Results"</h2>
                            <div class="row">
                                <button class="secondary" id="flip" aria-pressed=move || (!targets_as_rows.get()).to_string()
                                    on:click=move |_| targets_as_rows.update(|v| *v = !*v)>
                                    {move || if targets_as_rows.get() { "Show targets as columns" } else { "Show targets as rows" }}
                                </button>
                                <button class="secondary" id="export-csv" on:click=move |_| export_error.set(crate::export::download_csv(&format!("{file_name}-{}.csv", crate::dom::file_stamp()), &csv).err())>"Export CSV"</button>
                            </div>
                        </div>
                        {move || export_error.get().map(|message| view! { <p class="error" role="alert">{format!("Not exported: {message}")}</p> })}
                        {partial.map(|description| view! { <p class="warning" role="status" id="partial">{description}</p> })}
                        {replayed.then(|| view! { <p class="note" id="result-replayed">"The answer to an earlier attempt of this query, lost on the way: given again, not billed again."</p> })}
                        {move || {
                            let rows = table_rows.clone();
                            let weighted_head = format!("Weighted audience{unit_label}");
                            if targets_as_rows.get() {
                                view! {
                                    <div class="table-wrap">
                                    <table id="results-table" data-orientation="rows">
                                        <thead><tr>
                                            <th scope="col">"Target"</th><th scope="col">{weighted_head}</th>
                                            <th scope="col">"Audience"</th><th scope="col">"Respondents"</th>
                                            <th scope="col">"% of base"</th><th scope="col">"Stability"</th>
                                        </tr></thead>
                                        <tbody>
                                            {rows.into_iter().map(|row| view! {
                                                <tr class:unstable=row.unstable>
                                                    <th scope="row"><code>{row.target.clone()}</code>
                                                        {(!row.label.is_empty()).then(|| view! { <span class="muted target-label">{row.label.clone()}</span> })}</th>
                                                    <td class="num">{row.weighted.clone()}</td>
                                                    <td class="num" data-absolute=row.absolute.to_string()>{row.display.clone()}</td>
                                                    <td class="num">{row.respondents.clone()}</td>
                                                    <td class="num">{share_text(row.share)}</td>
                                                    <td>{if row.unstable { view! { <span class="badge unstable-badge" title=UNSTABLE_NOTE>"Unstable*"</span> }.into_any() } else { view! { <span class="badge">"Stable"</span> }.into_any() }}</td>
                                                </tr>
                                            }).collect_view()}
                                        </tbody>
                                    </table>
                                    </div>
                                }.into_any()
                            } else {
                                let measure = |name: String, cells: Vec<String>| view! {
                                    <tr><th scope="row">{name}</th>{cells.into_iter().map(|c| view! { <td class="num">{c}</td> }).collect_view()}</tr>
                                };
                                view! {
                                    <div class="table-wrap">
                                    <table id="results-table" data-orientation="columns">
                                        <thead><tr><th scope="col">"Measure"</th>
                                            {rows.iter().map(|r| view! { <th scope="col"><code>{r.target.clone()}</code>
                                                {(!r.label.is_empty()).then(|| view! { <span class="muted target-label">{r.label.clone()}</span> })}</th> }).collect_view()}
                                        </tr></thead>
                                        <tbody>
                                            {measure(weighted_head, rows.iter().map(|r| r.weighted.clone()).collect())}
                                            {measure("Audience".into(), rows.iter().map(|r| r.display.clone()).collect())}
                                            {measure("Respondents".into(), rows.iter().map(|r| r.respondents.clone()).collect())}
                                            {measure("% of base".into(), rows.iter().map(|r| share_text(r.share)).collect())}
                                            {measure("Stability".into(), rows.iter().map(|r| if r.unstable { "Unstable*".to_owned() } else { "Stable".to_owned() }).collect())}
                                        </tbody>
                                    </table>
                                    </div>
                                }.into_any()
                            }
                        }}
                        {any_unstable.then(|| view! { <p class="note" id="unstable-note">{UNSTABLE_NOTE}</p> })}
                        <figure class="chart" aria-label="Audience by target">
                            {chart_rows.into_iter().map(|row| {
                                let width = if max > 0.0 { 100.0 * row.absolute / max } else { 0.0 };
                                view! {
                                    <div class="bar-row">
                                        <span class="bar-label"><code>{row.target.clone()}</code>
                                            {(!row.label.is_empty()).then(|| view! { <span class="muted target-label">{row.label.clone()}</span> })}</span>
                                        <span class="bar-track"><span class="bar" class:unstable=row.unstable style=format!("width: {width:.1}%")></span></span>
                                        <span class="bar-value">{row.display.clone()}</span>
                                    </div>
                                }
                            }).collect_view()}
                        </figure>
                        <details class="curl">
                            <summary>"Use this query from code (curl)"</summary>
                            <pre id="curl">{command}</pre>
                            <button class="secondary" id="copy-curl" on:click=move |_| {
                                let text = command_for_copy.clone();
                                leptos::task::spawn_local(async move {
                                    let done = copy_to_clipboard(text).await;
                                    // The answer may have been replaced meanwhile.
                                    let _ = copied.try_set(Some(done));
                                });
                            }>
                                {move || copy_text(copied.get())}
                            </button>
                            <p class="muted">"Set CROSSTAB_API_KEY to a key from the API keys page; keep it server-side."</p>
                        </details>
                    </section>
                }.into_any()
            }
            ParsedResponse::BadRequest(answer) | ParsedResponse::Unauthorized(answer)
            | ParsedResponse::Forbidden(answer) | ParsedResponse::RateLimited(answer)
            | ParsedResponse::ServerError(answer) => {
                let message = answer.envelope.as_ref().map(|e| e.result_description.clone())
                    .unwrap_or_else(|| format!("The server answered {}.", answer.status));
                view! {
                    <section class="card results">
                        <p class="error" role="alert" id="result-error">{format!("{} ({})", message, answer.code.clone().unwrap_or_else(|| answer.status.to_string()))}</p>
                        <p class="muted">{advice(answer.retry)}</p>
                    </section>
                }.into_any()
            }
            ParsedResponse::Invalid { status, problems, .. } => view! {
                <section class="card results">
                    <p class="error" role="alert">{format!("The server's answer ({status}) does not follow the contract: {}", problems.join("; "))}</p>
                </section>
            }.into_any(),
            }
        }
    }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::testing::codebook;
    use crosstab_contract::{Stability, ALL_GROUPS};

    fn request(group: Option<&str>) -> CrosstabRequest {
        CrosstabRequest {
            survey_code: "DEMO".into(),
            authorization_group: group.map(str::to_owned),
            population_base_code: "ADULTS".into(),
            target_codes: vec!["F2554".into(), "GENDER = 1".into()],
        }
    }

    fn response() -> CrosstabResponse {
        let result = |wgt_aud, resps, stbl| CrosstabResult {
            wgt_aud,
            resps,
            stbl,
        };
        CrosstabResponse::new(
            vec![
                result(0.125, 5, Stability::Stable),
                result(0.0625, 2, Stability::Unstable),
            ],
            1000,
            &[],
        )
    }

    #[test]
    fn shares_are_of_the_base_within_the_requested_group() {
        let book = codebook();
        for group in [None, Some(ALL_GROUPS)] {
            let shares: Vec<_> = rows(&request(group), Some(&book), &response())
                .iter()
                .map(|row| row.share)
                .collect();
            assert_eq!(shares, [Some(12.5), Some(6.25)], "{group:?}");
        }
        let in_group: Vec<_> = rows(&request(Some("N")), Some(&book), &response())
            .iter()
            .map(|row| row.share)
            .collect();
        assert_eq!(in_group, [Some(50.0), Some(25.0)]);
        assert!(rows(&request(None), None, &response())
            .iter()
            .all(|row| row.share.is_none()));
    }

    #[test]
    fn csv_cells_never_start_a_formula() {
        for (text, cell) in [
            (
                "=HYPERLINK(\"http://x\")",
                "\"'=HYPERLINK(\"\"http://x\"\")\"",
            ),
            ("+1", "'+1"),
            ("-2+3", "'-2+3"),
            ("@SUM(A1)", "'@SUM(A1)"),
            ("\t=1", "'\t=1"),
            ("\r=1", "\"'\r=1\""),
            ("GENDER = 1", "GENDER = 1"),
            ("a, b", "\"a, b\""),
            ("", ""),
        ] {
            assert_eq!(csv_field(text), cell, "{text:?}");
        }
    }

    #[test]
    fn rows_carry_labels_and_the_csv_the_figures() {
        let table = rows(&request(None), Some(&codebook()), &response());
        let labels: Vec<&str> = table.iter().map(|row| row.label.as_str()).collect();
        assert_eq!(labels, ["Women, 25-54", "Gender: Male"]);
        assert_eq!(table[0].absolute, 125.0);
        assert!(table[1].unstable);
        assert_eq!(
            to_csv(&table, 1000),
            "Target,Label,WgtAud (x1000),Audience,Respondents,% of base,Stbl\n\
             F2554,\"Women, 25-54\",0.125,125,5,12.50,0\n\
             GENDER = 1,Gender: Male,0.0625,63,2,6.25,1\n"
        );
    }
}
