//! Query history in local storage: the last queries run, re-run with a click.

use gloo_storage::{LocalStorage, Storage};
use leptos::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::Value;

const KEY: &str = "crosstab.history";
const MAX_ENTRIES: usize = 50;

/// One past query.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// When it ran (ISO 8601, from the browser clock).
    pub at: String,
    /// The request as sent.
    pub request: Value,
    /// A one-line summary of the answer.
    pub summary: String,
}

/// Every stored entry, newest first.
pub fn entries() -> Vec<Entry> {
    LocalStorage::get(KEY).unwrap_or_default()
}

/// Stores a query run, newest first, replacing an identical earlier request.
pub fn record(request: &Value, summary: String) {
    let mut all = entries();
    all.retain(|entry| &entry.request != request);
    all.insert(
        0,
        Entry {
            at: js_sys::Date::new_0().to_iso_string().into(),
            request: request.clone(),
            summary,
        },
    );
    all.truncate(MAX_ENTRIES);
    let _ = LocalStorage::set(KEY, &all);
}

fn describe(request: &Value) -> String {
    let text = |key: &str| {
        request
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let targets = crate::api::target_codes(request).join(" | ");
    let group = request
        .get("AuthorizationGroup")
        .and_then(Value::as_str)
        .unwrap_or("_ALL_");
    format!(
        "{} · base {} · group {} · {}",
        text("SurveyCode"),
        text("PopulationBaseCode"),
        group,
        targets
    )
}

#[component]
pub fn HistoryScreen(on_pick: Callback<Value>) -> impl IntoView {
    let items = RwSignal::new(entries());
    let clear = move |_| {
        LocalStorage::delete(KEY);
        items.set(Vec::new());
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
                    view! {
                        <ul class="history">
                            {list.into_iter().map(|entry| {
                                let request = entry.request.clone();
                                view! {
                                    <li>
                                        <button class="history-item" on:click=move |_| on_pick.run(request.clone())>
                                            <span class="history-query">{describe(&entry.request)}</span>
                                            <span class="muted">{format!("{} — {}", entry.at, entry.summary)}</span>
                                        </button>
                                    </li>
                                }
                            }).collect_view()}
                        </ul>
                    }.into_any()
                }
            }}
        </section>
    }
}
