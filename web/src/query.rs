//! The query builder: survey, group, base and up to two targets, validated live by the
//! same rules the server applies (the WASM crate's validator) before anything is sent.

use crosstab_contract::app::{Codebook, CodebookSearch, SurveySummary};
use crosstab_contract::CrosstabRequest;
use leptos::prelude::*;

use crate::api;
use crate::choices::{Choice, ChoiceList};
use crate::labels::{self, Labelled};
use crate::results::{Outcome, ResultsView};

/// What the validator says about the draft, by request field.
#[derive(Debug, Clone, PartialEq, Default)]
struct Problems {
    /// `(field, message)` of the first rule broken, as the server would report it.
    field: Option<(String, String)>,
}

impl Problems {
    fn of(draft: &CrosstabRequest) -> Problems {
        // Validated as the JSON text the backend receives, by the server's own rules.
        let checked = serde_json::to_string(draft)
            .map_err(|e| crosstab_wasm::validate::unserializable(&e.to_string()))
            .and_then(|text| crosstab_wasm::validate::validate_text(Some(&text)));
        match checked {
            Ok(_) => Problems::default(),
            Err(error) => {
                let envelope = error.envelope();
                let field = envelope
                    .error
                    .and_then(|detail| detail.field)
                    .unwrap_or_else(|| "request".to_owned());
                Problems {
                    field: Some((field, envelope.result_description)),
                }
            }
        }
    }

    fn for_field(&self, name: &str) -> Option<String> {
        self.field
            .as_ref()
            .filter(|(field, _)| field == name)
            .map(|(_, message)| message.clone())
    }
}

/// A searchable codebook entry: a named code, or one value of a variable.
#[derive(Debug, Clone, PartialEq)]
pub struct Pick {
    /// The target it adds.
    pub target: String,
    /// Its label.
    pub label: String,
}

/// Entries a search shows at most (the rest are counted: a narrower search finds them).
pub const SHOWN_PICKS: usize = 40;

/// What to say of a search that found more than it shows, if it did.
pub fn more_than_shown(found: usize) -> Option<String> {
    (found > SHOWN_PICKS).then(|| {
        format!("Showing the first {SHOWN_PICKS} of {found}: add a word to narrow the search.")
    })
}

/// The codebook entries a search finds, every one (show [`SHOWN_PICKS`] of them).
pub fn picks(codebook: &Codebook, query: &str) -> Vec<Pick> {
    let Some(search) = CodebookSearch::new(query) else {
        return Vec::new();
    };
    let mut out: Vec<Pick> = codebook
        .codes
        .iter()
        .filter(|c| search.matches_code(c))
        .map(|c| Pick {
            target: c.code.clone(),
            label: c.label.clone().unwrap_or_else(|| c.expr.clone()),
        })
        .collect();
    for variable in &codebook.variables {
        for value in &variable.values {
            if search.matches_value(variable, value) {
                out.push(Pick {
                    target: labels::value_target(variable, value),
                    label: labels::value_label(variable, value),
                });
            }
        }
    }
    out
}

/// Removes target `index`, keeping one (empty) input when the last one goes.
fn remove_target(list: &mut Vec<String>, index: usize) {
    if index < list.len() {
        list.remove(index);
    }
    if list.is_empty() {
        list.push(String::new());
    }
}

#[component]
pub fn QueryScreen(rerun: RwSignal<Option<CrosstabRequest>>) -> impl IntoView {
    let surveys = RwSignal::new(None::<Result<Vec<SurveySummary>, api::ApiFailure>>);
    let survey = RwSignal::new(String::new());
    let codebook = RwSignal::new(None::<Result<Codebook, api::ApiFailure>>);
    let group = RwSignal::new(String::new());
    let base = RwSignal::new(String::new());
    let targets = RwSignal::new(vec![String::new()]);
    let search = RwSignal::new(String::new());
    let outcome = RwSignal::new(Outcome::Idle);
    // A re-run from history waits for its survey's codebook, then runs once.
    let pending_run = RwSignal::new(false);

    load_surveys(surveys, survey);

    // Load the codebook whenever the survey changes, and default the group and base.
    Effect::new(move |_| {
        let code = survey.get();
        if code.is_empty() {
            return;
        }
        codebook.set(None);
        // Results of another survey stay out of this one's screen (a run still in flight
        // drops its own answer).
        if !matches!(outcome.get_untracked(), Outcome::Idle | Outcome::Loading) {
            outcome.set(Outcome::Idle);
        }
        leptos::task::spawn_local(async move {
            let loaded = api::codebook(&code).await;
            // The survey changed again while this one loaded, or the screen is gone
            // (its signals with it): the answer is stale.
            if survey.try_get_untracked().as_ref() != Some(&code) {
                return;
            }
            if let Ok(book) = &loaded {
                let all = surveys
                    .get_untracked()
                    .and_then(Result::ok)
                    .and_then(|list| list.iter().find(|s| s.code == code).map(|s| s.all_groups));
                // Before the survey list is in, `_ALL_` (say, from history) is kept.
                let valid_group = group.get_untracked() == "_ALL_" && all != Some(false)
                    || book.groups.iter().any(|g| g.value == group.get_untracked());
                if !valid_group {
                    group.set(if all == Some(true) {
                        "_ALL_".to_owned()
                    } else {
                        book.groups
                            .first()
                            .map(|g| g.value.clone())
                            .unwrap_or_default()
                    });
                }
                if !book.bases.iter().any(|b| b.code == base.get_untracked()) {
                    base.set(
                        book.bases
                            .first()
                            .map(|b| b.code.clone())
                            .unwrap_or_default(),
                    );
                }
            }
            codebook.set(Some(loaded));
        });
    });

    let draft = Memo::new(move |_| {
        let group = group.get();
        CrosstabRequest {
            survey_code: survey.get(),
            authorization_group: (!group.is_empty()).then_some(group),
            population_base_code: base.get(),
            target_codes: targets.get(),
        }
    });
    let problems = Memo::new(move |_| Problems::of(&draft.get()));

    // A field left empty so far is not yet an error: it is said once a run is asked.
    let attempted = RwSignal::new(false);
    let run = move || {
        if let Some((field, _)) = problems.get_untracked().field {
            attempted.set(true);
            // The field's message is tied to it (aria-describedby): focused, it is read.
            let id = match field.as_str() {
                "SurveyCode" => "survey".to_owned(),
                "AuthorizationGroup" => "group".to_owned(),
                "PopulationBaseCode" => "base".to_owned(),
                _ => {
                    let first_blank = targets.with_untracked(|list| {
                        list.iter().position(|t| t.trim().is_empty()).unwrap_or(0)
                    });
                    format!("target-{first_blank}")
                }
            };
            request_animation_frame(move || crate::dom::focus(&id));
            return;
        }
        if matches!(outcome.get_untracked(), Outcome::Loading) {
            return;
        }
        let request = draft.get_untracked();
        let book = codebook.get_untracked().and_then(Result::ok);
        outcome.set(Outcome::Loading);
        leptos::task::spawn_local(async move {
            let call = api::crosstab(&request).await;
            // The survey changed while this ran: its answer belongs to another screen
            // (and if the screen is gone, so is its place to show it).
            match survey.try_get_untracked() {
                None => return,
                Some(now) if now != request.survey_code => {
                    outcome.set(Outcome::Idle);
                    return;
                }
                Some(_) => {}
            }
            outcome.set(Outcome::from_call(request.clone(), book, call));
            if let Some(summary) = outcome.get_untracked().summary() {
                crate::history::record(&request, summary);
            }
        });
    };

    // History hands over a request: load it into the form, then run it.
    Effect::new(move |_| {
        if let Some(request) = rerun.get() {
            survey.set(request.survey_code);
            group.set(request.authorization_group.unwrap_or_default());
            base.set(request.population_base_code);
            targets.set(request.target_codes);
            rerun.set(None);
            pending_run.set(true);
        }
    });
    Effect::new(move |_| {
        if pending_run.get() && matches!(codebook.get(), Some(Ok(_))) {
            pending_run.set(false);
            run();
        }
    });

    let add_target = move |target: String| {
        targets.update(|list| match list.iter_mut().find(|t| t.trim().is_empty()) {
            Some(slot) => *slot = target,
            None => list.push(target),
        });
    };

    // Not alerts: checked on every keystroke, they would interrupt a screen reader at
    // each one. Each is tied to its input (aria-describedby, aria-invalid) instead.
    let untouched = move |name: &str| {
        !attempted.get()
            && match name {
                "SurveyCode" => survey.with(String::is_empty),
                "PopulationBaseCode" => base.with(String::is_empty),
                "TargetCodes" => targets.with(|list| list.iter().all(|t| t.trim().is_empty())),
                _ => false,
            }
    };
    let shown =
        move |name: &'static str| problems.get().for_field(name).filter(|_| !untouched(name));
    let field_error = move |name: &'static str| {
        move || {
            shown(name).map(|message| {
                view! { <p class="error" id=format!("error-{name}") data-field=name>{message}</p> }
            })
        }
    };
    let invalid = move |name: &'static str| move || shown(name).is_some().to_string();

    view! {
        <div class="layout">
            <section class="card builder" aria-labelledby="builder-title">
                <h1 id="builder-title">"Build a query"</h1>
                {move || match surveys.get() {
                    None => view! { <p class="status" role="status">"Loading surveys…"</p> }.into_any(),
                    Some(Err(failure)) => view! { <p class="error" role="alert">{failure.message}</p> }.into_any(),
                    Some(Ok(list)) if list.is_empty() => view! {
                        <p class="empty">"Your account has no surveys yet. Ask your administrator to license one."</p>
                    }.into_any(),
                    Some(Ok(list)) => view! {
                        <label for="survey">"Survey"</label>
                        <select id="survey" on:change=move |ev| survey.set(event_target_value(&ev))
                            prop:value=move || survey.get()>
                            {list.into_iter().map(|s| {
                                let code = s.code.clone();
                                view! { <option value=code.clone() selected=move || survey.get() == code>{format!("{} — {} ({} respondents)", s.code, s.name, crosstab_wasm::display::format_number(s.respondents as f64, 0))}</option> }
                            }).collect_view()}
                        </select>
                        {field_error("SurveyCode")}
                    }.into_any(),
                }}
                {move || match codebook.get() {
                    None if !survey.get().is_empty() => view! { <p class="status" role="status">"Loading the codebook…"</p> }.into_any(),
                    None => ().into_any(),
                    Some(Err(failure)) => view! { <p class="error" role="alert">{failure.message}</p> }.into_any(),
                    Some(Ok(book)) => {
                        let all_groups = surveys.get().and_then(Result::ok)
                            .and_then(|list| list.into_iter().find(|s| s.code == book.code))
                            .is_some_and(|s| s.all_groups);
                        view! {
                            <div class="two">
                                <div>
                                    <label for="group">"Authorization group"</label>
                                    <select id="group" on:change=move |ev| group.set(event_target_value(&ev)) prop:value=move || group.get()>
                                        {all_groups.then(|| view! { <option value="_ALL_" selected=move || group.get() == "_ALL_">"All groups"</option> })}
                                        {book.groups.iter().map(|g| {
                                            let value = g.value.clone();
                                            let label = g.label.clone().map_or_else(|| value.clone(), |l| format!("{l} ({value})"));
                                            view! { <option value=value.clone() selected=move || group.get() == value>{label}</option> }
                                        }).collect_view()}
                                    </select>
                                    {field_error("AuthorizationGroup")}
                                </div>
                                <div>
                                    <label for="base">"Population base"</label>
                                    <select id="base" on:change=move |ev| base.set(event_target_value(&ev)) prop:value=move || base.get()>
                                        {book.bases.iter().map(|b| {
                                            let code = b.code.clone();
                                            let label = format!("{} — {}", b.code, b.label.clone().unwrap_or_default());
                                            view! { <option value=code.clone() selected=move || base.get() == code>{label}</option> }
                                        }).collect_view()}
                                    </select>
                                    {field_error("PopulationBaseCode")}
                                </div>
                            </div>
                        }.into_any()
                    }
                }}
                <fieldset class="targets">
                    <legend>"Targets (one or two)"</legend>
                    // Rows keyed by position: typing updates the list without rebuilding
                    // the inputs, so every keystroke is validated and focus stays put.
                    <For each=move || 0..targets.with(Vec::len) key=|index| *index let(index)>
                        {
                            let id = format!("target-{index}");
                            view! {
                                <div class="target-row">
                                    <label for=id.clone() class="sr-only">{format!("Target {}", index + 1)}</label>
                                    <input id=id class="target" placeholder="F2554 or GENDER = 2 AND AGE BETWEEN 25 AND 54"
                                        aria-invalid=invalid("TargetCodes") aria-describedby="error-TargetCodes"
                                        prop:value=move || targets.with(|list| list.get(index).cloned().unwrap_or_default())
                                        on:input=move |ev| { let v = event_target_value(&ev); targets.update(|list| if let Some(slot) = list.get_mut(index) { *slot = v; }); } />
                                    <span class="target-named muted" data-target-label=index>{move || {
                                        let target = targets.with(|list| list.get(index).cloned().unwrap_or_default());
                                        let book = codebook.get().and_then(Result::ok);
                                        Labelled::of(book.as_ref(), &target).label
                                    }}</span>
                                    <button class="secondary" aria-label=format!("Remove target {}", index + 1)
                                        on:click=move |_| targets.update(|list| remove_target(list, index))>
                                        "×"
                                    </button>
                                </div>
                            }
                        }
                    </For>
                    <button class="secondary" id="add-target" on:click=move |_| targets.update(|list| list.push(String::new()))>"+ Add target"</button>
                    {field_error("TargetCodes")}
                </fieldset>
                {move || problems.get().for_field("request").map(|m| view! { <p class="error" role="alert">{m}</p> })}
                <div class="row">
                    // aria-disabled, not disabled: the button keeps the keyboard's focus while
                    // the query runs (`run` refuses the click itself).
                    <button id="run" on:click=move |_| run()
                        aria-disabled=move || (problems.get().field.is_some() || matches!(outcome.get(), Outcome::Loading)).to_string()>
                        {move || if matches!(outcome.get(), Outcome::Loading) { "Running…" } else { "Run query" }}
                    </button>
                </div>
            </section>
            <section class="card codebook" aria-labelledby="codebook-title">
                <h2 id="codebook-title">"Codebook"</h2>
                <label for="search">"Search codes and variables by label or code"</label>
                <input id="search" type="search" placeholder="e.g. coffee, women, income"
                    prop:value=move || search.get()
                    on:input=move |ev| search.set(event_target_value(&ev)) />
                {move || {
                    let Some(Ok(book)) = codebook.get() else { return ().into_any() };
                    let found = picks(&book, &search.get());
                    if search.get().trim().is_empty() {
                        view! { <p class="muted">{format!("{} named codes, {} variables. Type to search; pick one to add it as a target.", book.codes.len(), book.variables.len())}</p> }.into_any()
                    } else if found.is_empty() {
                        view! { <p class="empty">"Nothing matches."</p> }.into_any()
                    } else {
                        let more = more_than_shown(found.len());
                        let choices = found.into_iter().take(SHOWN_PICKS).map(|pick| Choice {
                            primary: view! { <span class="pick-label">{pick.label}</span> }.into_any(),
                            secondary: view! { <code>{pick.target.clone()}</code> }.into_any(),
                            value: pick.target,
                        }).collect();
                        view! {
                            {more.map(|said| view! { <p class="muted" id="picks-more">{said}</p> })}
                            <ChoiceList list_class="picks" button_class="pick" choices on_pick=Callback::new(add_target) />
                        }.into_any()
                    }
                }}
            </section>
        </div>
        // One live region, there from the start, so that a screen reader hears each run
        // end (a region inserted with its text is often not read).
        <p class="sr-only" role="status" id="query-announce">{move || match outcome.get() {
            Outcome::Idle => "",
            Outcome::Loading => "Running the query…",
            Outcome::Failed(_) => "The query failed.",
            Outcome::Answered(_) => "Results ready.",
        }}</p>
        <ResultsView outcome=outcome />
    }
}

/// Fetches the surveys into `surveys`, picking the first when `survey` is still empty.
pub(crate) fn load_surveys(
    surveys: RwSignal<Option<Result<Vec<SurveySummary>, api::ApiFailure>>>,
    survey: RwSignal<String>,
) {
    leptos::task::spawn_local(async move {
        let list = api::surveys().await;
        if let Ok(list) = &list {
            // `None`: the screen that asked is gone.
            if survey.try_get_untracked().is_some_and(|s| s.is_empty()) {
                if let Some(first) = list.first() {
                    survey.set(first.code.clone());
                }
            }
        }
        surveys.set(Some(list));
    });
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::testing::codebook;

    fn targets(book: &Codebook, query: &str) -> Vec<String> {
        picks(book, query).into_iter().map(|p| p.target).collect()
    }

    #[test]
    fn picks_follow_the_codebook_search() {
        let book = codebook();
        assert!(picks(&book, "  ").is_empty());
        assert_eq!(targets(&book, " WOMEN "), ["F2554"]);
        // A variable's name finds each of its values, and the codes defined on it.
        assert_eq!(
            targets(&book, "gender"),
            ["F2554", "GENDER = 1", "GENDER = 2"]
        );
        // A value's label finds that value alone.
        assert_eq!(targets(&book, "drinks"), ["P_COFFEE_01 = 1"]);
        assert_eq!(targets(&book, "female"), ["GENDER = 2"]);
        let gender = picks(&book, "female").remove(0);
        assert_eq!(gender.label, "Gender: Female");
        // An unlabelled value shows as its number under the variable's name.
        let coffee = picks(&book, "p_coffee");
        assert_eq!(coffee[0].label, "P_COFFEE_01: 0");
        // Words in any order, across the variable and its value.
        assert_eq!(targets(&book, "female gender"), ["GENDER = 2"]);
    }

    #[test]
    fn a_search_past_what_is_shown_says_how_many_it_found() {
        assert_eq!(more_than_shown(SHOWN_PICKS), None);
        assert_eq!(
            more_than_shown(412).as_deref(),
            Some("Showing the first 40 of 412: add a word to narrow the search.")
        );
    }
}
