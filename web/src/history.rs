//! Query history in local storage: the last queries run, re-run with a click.

use crosstab_contract::{CrosstabRequest, ALL_GROUPS};
use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use crate::choices::{Choice, ChoiceList};
use crate::stored::StoredList;

/// The list's name in local storage (each user's under it, see `stored`).
pub const KEY: &str = "crosstab.history";
const MAX_ENTRIES: usize = 50;

/// One past query.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// When it ran (ISO 8601, from the browser clock).
    pub at: String,
    /// The request as sent.
    pub request: CrosstabRequest,
    /// A one-line summary of the answer.
    pub summary: String,
}

/// Every stored entry, newest first.
pub fn entries() -> Vec<Entry> {
    StoredList::load(KEY).entries
}

/// Stores a query run, newest first, replacing an identical earlier request.
pub fn record(request: &CrosstabRequest, summary: String) {
    let mut all: StoredList<Entry> = StoredList::load(KEY);
    all.entries.retain(|entry| &entry.request != request);
    all.entries.insert(
        0,
        Entry {
            at: js_sys::Date::new_0().to_iso_string().into(),
            request: request.clone(),
            summary,
        },
    );
    all.entries.truncate(MAX_ENTRIES);
    let _ = all.store(KEY);
}

fn describe(request: &CrosstabRequest) -> String {
    format!(
        "{} · base {} · group {} · {}",
        request.survey_code,
        request.population_base_code,
        request.authorization_group.as_deref().unwrap_or(ALL_GROUPS),
        request.target_codes.join(" | ")
    )
}

#[component]
pub fn HistoryScreen(on_pick: Callback<CrosstabRequest>) -> impl IntoView {
    let items = RwSignal::new(entries());
    let clear = move |_| {
        if crate::dom::confirmed("Clear the query history? This can't be undone.") {
            crate::stored::delete(KEY);
            items.set(Vec::new());
        }
    };
    view! {
        <section class="card">
            <div class="row spread">
                <h1>"Query history"</h1>
                <button class="secondary" on:click=clear disabled=move || items.get().is_empty()>"Clear history"</button>
            </div>
            {move || {
                let list = items.get();
                if list.is_empty() {
                    view! { <p class="empty">"No queries yet. Run one from the Query screen and it appears here."</p> }.into_any()
                } else {
                    let choices = list.into_iter().map(|entry| Choice {
                        primary: view! { <span class="history-query">{describe(&entry.request)}</span> }.into_any(),
                        secondary: view! { <span class="muted"><time datetime=entry.at.clone()>{crate::dom::local_time(&entry.at)}</time>{format!(" — {}", entry.summary)}</span> }.into_any(),
                        value: entry.request,
                    }).collect();
                    view! {
                        <p class="muted">"Choosing a query runs it again on the Query screen, billed as any run."</p>
                        <ChoiceList list_class="history" button_class="history-item" choices on_pick />
                    }.into_any()
                }
            }}
        </section>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describes_a_request_on_one_line() {
        let mut request = CrosstabRequest {
            survey_code: "DEMO".into(),
            authorization_group: None,
            population_base_code: "ADULTS".into(),
            target_codes: vec!["F2554".into(), "GENDER = 1".into()],
        };
        assert_eq!(
            describe(&request),
            "DEMO · base ADULTS · group _ALL_ · F2554 | GENDER = 1"
        );
        request.authorization_group = Some("N".into());
        assert!(describe(&request).contains("group N"));
    }
}
