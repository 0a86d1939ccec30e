//! The researcher's workbench: a table of rows against a banner of columns, built from
//! the codebook by labels, computed on the server (billed as the `/v1` calls it stands
//! for, said before it runs) or in the page from a survey file that never leaves it.

use crosstab_contract::app::{
    Codebook, Confidence, Correction, DailyQuota, SurveySummary, TableAxis, TableRequest,
    UsageQuery, VariableEntry, TABLE_COST_PROMPT_THRESHOLD,
};
use crosstab_contract::{ApiError, ALL_GROUPS};
use leptos::prelude::*;

use crate::api::{self, ApiFailure};
use crate::bands;
use crate::dom::{confirmed, focus};
use crate::export::Caption;
use crate::figures::Figures;
use crate::grid::Arrangement;
use crate::labels::{self, Labelled};
use crate::local::{self, BaseDraft, GuidedDefinition, Opened};
use crate::query::{load_surveys, more_than_shown, picks, SHOWN_PICKS};
use crate::saved::{self, Spec};
use crate::table_view::{Computed, Origin, TableView};

/// Where a table is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// On the server, from a survey the account may query: billed.
    Server,
    /// In this page, from a file the researcher opened: nothing sent, nothing billed.
    Local,
}

/// Where a run is.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Idle,
    Running,
    Failed(String),
    Done(Box<Computed>),
}

fn now_ms() -> f64 {
    web_sys::window()
        .and_then(|w| w.performance())
        .map_or(0.0, |p| p.now())
}

/// A target with its codebook label, as an axis entry.
fn axis_entry(book: Option<&Codebook>, expression: &str) -> TableAxis {
    TableAxis {
        expression: expression.trim().to_owned(),
        label: Labelled::of(book, expression.trim()).label,
    }
}

/// Whether a CSV column's name says it holds survey weights (`WEIGHT`, `wgt_final`,
/// `PopWeight`, `WT`), not a measure that happens to be one (`BODY_WEIGHT_KG`,
/// `OVERWEIGHT`, `weight_lbs`): one of its words is a weight's, none a unit's.
fn looks_like_weight(column: &str) -> bool {
    // Words split at anything not a letter or digit, and at a lower-to-upper case step.
    let mut words: Vec<String> = Vec::new();
    let mut previous_lower = false;
    for c in column.chars() {
        if !c.is_alphanumeric() {
            previous_lower = false;
            words.push(String::new());
            continue;
        }
        if c.is_uppercase() && previous_lower {
            words.push(String::new());
        }
        previous_lower = c.is_lowercase();
        match words.last_mut() {
            Some(word) => word.extend(c.to_lowercase()),
            None => words.push(c.to_lowercase().collect()),
        }
    }
    let weighty = |w: &str| matches!(w, "weight" | "weights" | "weighting" | "wgt" | "wt" | "wts");
    let unit = |w: &str| {
        matches!(
            w,
            "kg" | "kgs" | "lb" | "lbs" | "g" | "grams" | "oz" | "body" | "birth"
        )
    };
    words.iter().any(|w| weighty(w)) && !words.iter().any(|w| unit(w))
}

/// One entry per value of `variable`: its labelled values, or every value when none is
/// labelled, or bands of them when there are many (an age, an income).
fn value_entries(book: &Codebook, variable: &str) -> Vec<TableAxis> {
    let Some(variable) = book.variables.iter().find(|v| v.name == variable) else {
        return Vec::new();
    };
    let labelled = variable.values.iter().any(|v| v.label.is_some());
    if !labelled && variable.distinct > bands::MAX_SINGLE_VALUES {
        return bands::bands(variable);
    }
    variable
        .values
        .iter()
        .filter(|value| !labelled || value.label.is_some())
        .map(|value| TableAxis {
            expression: labels::value_target(variable, value),
            label: Some(labels::value_label(variable, value)),
        })
        .collect()
}

/// What the builder says of the table shown, or of the run or load before.
#[derive(Debug, Clone, PartialEq)]
enum Notice {
    /// A kept answer is not shown: its survey's data changed since.
    DataChanged,
    /// Anything else: a late answer, a local file to open.
    Said(String),
}

impl std::fmt::Display for Notice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Notice::DataChanged => f.write_str(
                "The survey's data changed since this table's answer was kept: run it again for today's figures.",
            ),
            Notice::Said(text) => f.write_str(text),
        }
    }
}

/// Whether [`value_entries`] gives `variable` any entry: listed values, or a range to
/// cut into bands (the codebook lists no values past 200 of them).
fn has_entries(variable: &VariableEntry) -> bool {
    !variable.values.is_empty()
        || (variable.min.is_some() && variable.distinct > bands::MAX_SINGLE_VALUES)
}

/// `Label · EXPRESSION`, or the expression.
fn entry_text(entry: &TableAxis) -> String {
    Labelled {
        target: entry.expression.clone(),
        label: entry.label.clone(),
    }
    .display()
}

/// A correction's value in the builder's select.
fn correction_key(correction: Correction) -> &'static str {
    match correction {
        Correction::None => "none",
        Correction::Bonferroni => "bonferroni",
        Correction::Holm => "holm",
    }
}

/// A correction as the builder's select offers it.
fn correction_label(correction: Correction) -> &'static str {
    match correction {
        Correction::None => "None: each pair at the level",
        Correction::Bonferroni => "Bonferroni: each pair at the level ÷ the pairs",
        Correction::Holm => "Holm: step-down, never fewer letters than Bonferroni",
    }
}

/// The lines above a table in its files.
fn caption_of(book: Option<&Codebook>, request: &TableRequest, source: Source) -> Caption {
    let survey = book.map_or_else(
        || request.survey.clone(),
        |b| format!("{} — {}", b.code, b.name),
    );
    let base = book
        .and_then(|b| b.bases.iter().find(|x| x.code == request.population_base))
        .and_then(|b| b.label.clone())
        .map_or_else(
            || request.population_base.clone(),
            |label| format!("{} — {label}", request.population_base),
        );
    let group = match request.group.as_deref() {
        None | Some(ALL_GROUPS) => "All groups".to_owned(),
        Some(value) => book
            .and_then(|b| b.groups.iter().find(|g| g.value == value))
            .and_then(|g| g.label.clone())
            .map_or_else(|| value.to_owned(), |label| format!("{label} ({value})")),
    };
    let source = match source {
        Source::Server => "On the server (billed to your account)".to_owned(),
        Source::Local => "In the browser from a local file (not uploaded, not billed)".to_owned(),
    };
    Caption {
        survey,
        base,
        group,
        filter: request.filter.clone(),
        source,
    }
}

#[component]
pub fn WorkbenchScreen(signed_in: bool) -> impl IntoView {
    let opened = RwSignal::new(local::opened());
    let source = RwSignal::new(if signed_in && opened.get_untracked().is_none() {
        Source::Server
    } else {
        Source::Local
    });
    let surveys = RwSignal::new(None::<Result<Vec<SurveySummary>, ApiFailure>>);
    let survey = RwSignal::new(String::new());
    let server_book = RwSignal::new(None::<Result<Codebook, ApiFailure>>);
    let group = RwSignal::new(String::new());
    let base = RwSignal::new(String::new());
    // The filter as typed: sent trimmed, and only when not empty.
    let filter = RwSignal::new(String::new());
    let rows = RwSignal::new(Vec::<TableAxis>::new());
    let columns = RwSignal::new(Vec::<TableAxis>::new());
    let confidence = RwSignal::new(Confidence::default());
    let correction = RwSignal::new(Correction::default());
    let figures = RwSignal::new(Figures::default());
    let arrangement = RwSignal::new(Arrangement::default());
    let outcome = RwSignal::new(Outcome::Idle);
    // The request a cost prompt asks about, frozen when it opened: what is confirmed is
    // what was priced, whatever the builder behind it becomes.
    let confirming = RwSignal::new(None::<TableRequest>);
    let runs = RwSignal::new(0u32);
    // Bumped as each run is recorded in the history, which the history list follows.
    let recorded = RwSignal::new(0u32);
    // A run was asked for: what stops it is said, though the builder is not yet full.
    let attempted = RwSignal::new(false);
    // Bumped by every run and by whatever makes a run in flight stale (a switch of
    // source, a saved table loaded, Clear): an answer comes in only if it is unchanged.
    let epoch = RwSignal::new(0u32);
    let notice = RwSignal::new(None::<Notice>);
    // Another survey chosen: a data-changed notice was about this one's kept answer (one
    // of a late answer stays true).
    let choose_survey = move |code: String| {
        if notice.get_untracked() == Some(Notice::DataChanged) {
            notice.set(None);
        }
        survey.set(code);
    };

    if signed_in {
        load_surveys(surveys, survey);
        // A survey the account no longer has (a restored draft's, a saved table's): the
        // first it has instead, as when none was chosen.
        Effect::new(move |_| {
            let Some(Ok(list)) = surveys.get() else {
                return;
            };
            let chosen = survey.get();
            if !list.iter().any(|s| s.code == chosen) {
                if let Some(first) = list.first() {
                    choose_survey(first.code.clone());
                }
            }
        });
        Effect::new(move |_| {
            let code = survey.get();
            if code.is_empty() {
                return;
            }
            server_book.set(None);
            leptos::task::spawn_local(async move {
                let loaded = api::codebook(&code).await;
                // The survey changed meanwhile, or the screen is gone with its signals.
                if survey.try_get_untracked().as_ref() == Some(&code) {
                    server_book.set(Some(loaded));
                }
            });
        });
    }

    let book = Memo::new(move |_| match source.get() {
        Source::Server => server_book.get().and_then(Result::ok),
        Source::Local => opened.get().map(|o| o.codebook),
    });
    // Whether `_ALL_` may be asked: always of a local file, else as the account's grant.
    let all_groups = Memo::new(move |_| match source.get() {
        Source::Local => true,
        Source::Server => surveys
            .get()
            .and_then(Result::ok)
            .and_then(|list| list.into_iter().find(|s| s.code == survey.get()))
            .is_some_and(|s| s.all_groups),
    });
    // A base and a group the codebook has, by default its first ones.
    Effect::new(move |_| {
        let Some(book) = book.get() else { return };
        if !book.bases.iter().any(|b| b.code == base.get_untracked()) {
            base.set(
                book.bases
                    .first()
                    .map(|b| b.code.clone())
                    .unwrap_or_default(),
            );
        }
        // Whether `_ALL_` may be asked is known once the surveys are in: until then a
        // group (a restored draft's `_ALL_`) is left as it is.
        if source.get_untracked() == Source::Server && surveys.with(Option::is_none) {
            return;
        }
        let current = group.get_untracked();
        let valid = (current == ALL_GROUPS && all_groups.get())
            || book.groups.iter().any(|g| g.value == current);
        if !valid {
            group.set(if all_groups.get() {
                ALL_GROUPS.to_owned()
            } else {
                book.groups
                    .first()
                    .map(|g| g.value.clone())
                    .unwrap_or_default()
            });
        }
    });

    // Entries are labelled by the codebook they were picked in; in another survey's, or
    // in the server's after a local file's, they are named again by that one (labels it
    // lacks dropped), so no table shows one survey's labels over another's codes.
    let labelled_by = StoredValue::new(None::<(Source, String)>);
    // Names every entry by `book`'s labels (none without a book).
    let relabel = move |book: Option<&Codebook>| {
        let name = |list: &mut Vec<TableAxis>| {
            for entry in list {
                entry.label = Labelled::of(book, &entry.expression).label;
            }
        };
        rows.update(name);
        columns.update(name);
    };
    Effect::new(move |_| {
        let Some(book) = book.get() else { return };
        let now = (source.get_untracked(), book.code.clone());
        let before = labelled_by.get_value();
        labelled_by.set_value(Some(now.clone()));
        if before.is_some_and(|before| before != now) {
            relabel(Some(&book));
        }
    });

    let request = Memo::new(move |_| {
        let code = match source.get() {
            Source::Server => survey.get(),
            Source::Local => opened.get().map(|o| o.codebook.code).unwrap_or_default(),
        };
        let group = group.get();
        let filter = filter.get();
        TableRequest {
            survey: code,
            population_base: base.get(),
            group: (!group.is_empty()).then_some(group),
            filter: Some(filter.trim().to_owned()).filter(|f| !f.is_empty()),
            rows: rows.get(),
            columns: columns.get(),
            confidence: confidence.get(),
            bonferroni: correction.get() == Correction::Bonferroni,
            holm: correction.get() == Correction::Holm,
        }
    });
    // What stops a run: an invalid request, or entries naming what the survey lacks
    // (all-zero cells, billed on the server), said before it runs.
    let problem = Memo::new(move |_| match request.get().validate() {
        // In the page, no survey is a file still to open, not a request's mistake.
        Err(_) if source.get() == Source::Local && opened.with(Option::is_none) => {
            Some("Open a survey file first (above), then run the table.".to_owned())
        }
        Err(error) => Some(ApiError::from(error).to_string()),
        Ok(valid) => book
            .get()
            .filter(|book| book.code == valid.request.survey)
            .and_then(|book| book.unknown_in_table(&valid)),
    });
    // A server table runs only once its survey's codebook is in: its names are checked
    // against it first.
    let waiting = Memo::new(move |_| {
        source.get() == Source::Server
            && !book.with(|book| book.as_ref().is_some_and(|b| b.code == survey.get()))
    });
    let cost = Memo::new(move |_| request.with(TableRequest::billed_calls));

    let spec_of = move |name: String, request: TableRequest| Spec {
        name,
        at: saved::now(),
        request,
        figures: figures.get_untracked(),
        arrangement: arrangement.get_untracked(),
        local: source.get_untracked() == Source::Local,
    };

    let spec = move |name: String| spec_of(name, request.get_untracked());

    let run_now = move |request: TableRequest| {
        confirming.set(None);
        notice.set(None);
        let from = source.get_untracked();
        // The codebook of the request's survey only (a prompt confirmed after a switch of
        // survey runs the request it priced, of the survey it was priced for).
        let request_book = book
            .get_untracked()
            .filter(|book| book.code == request.survey);
        let caption = caption_of(request_book.as_ref(), &request, from);
        let data = request_book.as_ref().map(saved::SurveyData::of);
        let started = now_ms();
        // What runs, as it is now: the builder stays editable while it computes.
        let entry = spec_of(String::new(), request.clone());
        let late_entry = entry.clone();
        runs.update(|r| *r += 1);
        let run = runs.get_untracked();
        epoch.update(|e| *e += 1);
        let mine = epoch.get_untracked();
        let asked = request.clone();
        // A server table's answer is kept, to be shown again without billing it again.
        let (kept_request, kept_caption) = (request.clone(), caption.clone());
        let keep = move |table: &crosstab_contract::app::Table| {
            if let (Source::Server, Some(data)) = (from, &data) {
                saved::keep_answer(saved::Kept {
                    at: saved::now(),
                    data: data.clone(),
                    request: kept_request.clone(),
                    caption: kept_caption.clone(),
                    table: table.clone(),
                });
            }
        };
        let keep_late = keep.clone();
        let done =
            move |result: Result<(crosstab_contract::app::Table, Origin), String>| match result {
                Ok((table, origin)) => {
                    // The history first: a full storage gives up answers, not records.
                    saved::record(entry);
                    keep(&table);
                    recorded.update(|n| *n += 1);
                    outcome.set(Outcome::Done(Box::new(Computed {
                        table,
                        caption,
                        origin,
                        ms: now_ms() - started,
                        run,
                        asked,
                    })));
                }
                Err(message) => outcome.set(Outcome::Failed(message)),
            };
        outcome.set(Outcome::Running);
        leptos::task::spawn_local(async move {
            let answer = match from {
                Source::Local => local::table(request)
                    .await
                    .map(|table| (table, Origin::Page)),
                Source::Server => api::table(&request)
                    .await
                    .map(|answer| {
                        let origin = if answer.replayed {
                            Origin::ServerAgain
                        } else {
                            Origin::Server
                        };
                        (answer.table, origin)
                    })
                    .map_err(|f| f.message),
            };
            // Another run started meanwhile, or the source was switched, a saved table
            // loaded or the builder cleared: this answer is stale. `None`: the screen is
            // gone (its signals with it), and nothing is shown.
            match epoch.try_get_untracked() {
                Some(now) if now == mine => done(answer),
                // Billed all the same: kept where it can be opened again, and said.
                Some(_) => {
                    if let (Source::Server, Ok((table, origin))) = (from, &answer) {
                        saved::record(late_entry);
                        keep_late(table);
                        let _ = recorded.try_update(|n| *n += 1);
                        let calls = format!(
                            "{} call{}",
                            table.billed_calls,
                            if table.billed_calls == 1 { "" } else { "s" }
                        );
                        notice.set(Some(Notice::Said(match origin {
                            Origin::ServerAgain => format!(
                                "A table run before your change came back (billed {calls} the first time, not again) and is not shown: it is under Recently run."
                            ),
                            _ => format!(
                                "A table run before your change was billed ({calls}) and not shown: it is under Recently run."
                            ),
                        })));
                    }
                }
                None => {}
            }
        });
    };
    // The builder starts over from `to`: a run in flight is dropped, a prompt closed.
    // A notice is about the table shown or the run before: it goes with them.
    let reset = move |to: Outcome| {
        epoch.update(|e| *e += 1);
        confirming.set(None);
        notice.set(None);
        outcome.set(to);
    };
    // A kept answer shown before its survey's codebook came in: once it is, the answer
    // goes if the survey's data changed since it was computed.
    let unchecked = StoredValue::new(None::<(String, saved::SurveyData)>);
    Effect::new(move |_| {
        let Some(book) = book.get() else { return };
        let Some((code, data)) = unchecked.get_value() else {
            return;
        };
        if book.code != code {
            return;
        }
        unchecked.set_value(None);
        let kept_shown = outcome.with_untracked(|shown| {
            matches!(shown, Outcome::Done(computed) if matches!(computed.origin, Origin::Kept { .. }))
        });
        if kept_shown && saved::SurveyData::of(&book) != data {
            reset(Outcome::Idle);
            notice.set(Some(Notice::DataChanged));
        }
    });
    let switch = move |to: Source| {
        let from_file = matches!(labelled_by.get_value(), Some((Source::Local, _)));
        if to == Source::Server && from_file {
            // A local file's labels are not sent with a server table: the server's
            // codebook names the entries again once it is in (see the relabelling).
            relabel(None);
        }
        source.set(to);
        reset(Outcome::Idle);
    };
    let run = move |_| {
        if problem.get_untracked().is_some() {
            // Said once asked for, even before a row and a column are in.
            attempted.set(true);
            return;
        }
        if waiting.get_untracked() || outcome.get_untracked() == Outcome::Running {
            return;
        }
        let request = request.get_untracked();
        if source.get_untracked() == Source::Server
            && cost.get_untracked() > TABLE_COST_PROMPT_THRESHOLD
        {
            confirming.set(Some(request));
        } else {
            run_now(request);
        }
    };

    let load = Callback::new(move |spec: Spec| {
        let local = spec.local;
        let request = spec.request;
        let asked = request.clone();
        // The entries come labelled by their survey's codebook: its arrival is no switch
        // to relabel them for (which would drop labels the codebook cannot rebuild, such
        // as bands', and leave a kept answer out of date at once).
        let from = if local { Source::Local } else { Source::Server };
        labelled_by.set_value(Some((from, request.survey.clone())));
        let mut unopened = None;
        if local {
            source.set(Source::Local);
            if opened.get_untracked().map(|o| o.codebook.code) != Some(request.survey.clone()) {
                unopened = Some(Notice::Said(format!(
                    "This table was made from a local file of survey {}: open that file to run it.",
                    request.survey
                )));
            }
        } else if signed_in {
            source.set(Source::Server);
            if survey.get_untracked() != request.survey {
                server_book.set(None);
                survey.set(request.survey.clone());
            }
        }
        correction.set(request.correction());
        base.set(request.population_base);
        group.set(request.group.unwrap_or_default());
        filter.set(request.filter.unwrap_or_default());
        rows.set(request.rows);
        columns.set(request.columns);
        confidence.set(request.confidence);
        figures.set(spec.figures);
        arrangement.set(spec.arrangement);
        reset(Outcome::Idle);
        notice.set(unopened);
        // A server table answered before is shown as it was, not billed again, while its
        // survey's data is as it was (checked again when the codebook comes, if not in).
        let kept = (!local).then(|| saved::kept_answer(&asked)).flatten();
        if let Some(kept) = kept {
            let now = book
                .get_untracked()
                .filter(|book| book.code == asked.survey)
                .map(|book| saved::SurveyData::of(&book));
            if now.as_ref().is_some_and(|now| *now != kept.data) {
                notice.set(Some(Notice::DataChanged));
                return;
            }
            unchecked.set_value(now.is_none().then(|| (asked.survey.clone(), kept.data)));
            runs.update(|r| *r += 1);
            outcome.set(Outcome::Done(Box::new(Computed {
                table: kept.table,
                caption: kept.caption,
                origin: Origin::Kept { at: kept.at },
                ms: 0.0,
                run: runs.get_untracked(),
                asked,
            })));
        }
    });

    let add = move |to_rows: bool, entries: Vec<TableAxis>| {
        let axis = if to_rows { rows } else { columns };
        axis.update(|list| {
            for entry in entries {
                if !list.contains(&entry) {
                    list.push(entry);
                }
            }
        });
    };
    let search = RwSignal::new(String::new());
    // The server table being built is kept as it changes (the user's own, in this
    // browser) and brought back when the screen opens again: after the session ended and
    // the user signed in again, or a reload.
    if signed_in {
        if let Some(draft) = saved::draft().filter(|draft| !draft.local) {
            load.run(draft);
        }
        Effect::new(move |_| {
            // `spec_of` reads these untracked: a change to either is kept too.
            figures.track();
            arrangement.track();
            if source.get() == Source::Server {
                saved::keep_draft(spec_of(String::new(), request.get()));
            }
        });
    }

    view! {
        <div class="layout workbench">
            <section class="card builder" aria-labelledby="workbench-title">
                <h1 id="workbench-title">"Build a table"</h1>
                {signed_in.then(|| view! {
                    <fieldset class="source">
                        <legend>"Compute"</legend>
                        <label class="check" for="source-server">
                            <input type="radio" name="source" id="source-server"
                                prop:checked=move || source.get() == Source::Server
                                on:change=move |_| switch(Source::Server) />
                            "On the server, from a survey your account licenses (billed)"
                        </label>
                        <label class="check" for="source-local">
                            <input type="radio" name="source" id="source-local"
                                prop:checked=move || source.get() == Source::Local
                                on:change=move |_| switch(Source::Local) />
                            "In this page, from a survey file on this computer (private, not billed)"
                        </label>
                    </fieldset>
                })}
                {move || match source.get() {
                    Source::Local => view! { <LocalOpen opened=opened /> }.into_any(),
                    Source::Server => match surveys.get() {
                        None => view! { <p class="status" role="status">"Loading surveys…"</p> }.into_any(),
                        Some(Err(failure)) => view! { <p class="error" role="alert">{failure.message}</p> }.into_any(),
                        Some(Ok(list)) => view! {
                            <label for="table-survey">"Survey"</label>
                            <select id="table-survey" on:change=move |ev| choose_survey(event_target_value(&ev))>
                                {list.into_iter().map(|s| {
                                    let code = s.code.clone();
                                    view! { <option value=code.clone() selected=move || survey.get() == code>{format!("{} — {}", s.code, s.name)}</option> }
                                }).collect_view()}
                            </select>
                        }.into_any(),
                    },
                }}
                {move || book.get().map(|book| view! {
                    <div class="two">
                        <div>
                            <label for="table-base">"Population base"</label>
                            <select id="table-base" on:change=move |ev| base.set(event_target_value(&ev))>
                                {book.bases.iter().map(|b| {
                                    let code = b.code.clone();
                                    let text = Labelled { target: b.code.clone(), label: b.label.clone() }.display();
                                    view! { <option value=code.clone() selected=move || base.get() == code>{text}</option> }
                                }).collect_view()}
                            </select>
                        </div>
                        <div>
                            <label for="table-group">"Authorization group"</label>
                            <select id="table-group" on:change=move |ev| group.set(event_target_value(&ev))>
                                {all_groups.get().then(|| view! { <option value=ALL_GROUPS selected=move || group.get() == ALL_GROUPS>"All groups"</option> })}
                                {book.groups.iter().map(|g| {
                                    let value = g.value.clone();
                                    let text = g.label.clone().map_or_else(|| value.clone(), |l| format!("{l} ({value})"));
                                    view! { <option value=value.clone() selected=move || group.get() == value>{text}</option> }
                                }).collect_view()}
                            </select>
                        </div>
                    </div>
                })}
                <div class="filter">
                    <label for="table-filter">"Filter (optional): every figure within it too"</label>
                    <input id="table-filter" placeholder="e.g. AGE >= 35 AND SMOKER = 1" spellcheck="false" autocomplete="off"
                        prop:value=move || filter.get() on:change=move |ev| filter.set(event_target_value(&ev)) />
                </div>
                <AxisEditor name="rows" title="Rows" items=rows book=book />
                <AxisEditor name="columns" title="Columns (banner)" items=columns book=book />
                <fieldset class="tests">
                    <legend>"Tests and intervals"</legend>
                    <label for="table-confidence">"Confidence"</label>
                    <select id="table-confidence" prop:value=move || confidence.get().percent().to_string()
                        on:change=move |ev| {
                            let chosen = event_target_value(&ev).parse::<u8>().ok()
                                .and_then(|percent| Confidence::try_from(percent).ok());
                            if let Some(level) = chosen {
                                confidence.set(level);
                            }
                        }>
                        {Confidence::ALL.into_iter().map(|level| {
                            let percent = level.percent();
                            view! { <option value=percent.to_string() selected=move || confidence.get() == level>{format!("{percent}%")}</option> }
                        }).collect_view()}
                    </select>
                    <label for="table-correction">"Column letters' correction for their many comparisons"</label>
                    <select id="table-correction" prop:value=move || correction_key(correction.get())
                        on:change=move |ev| {
                            let key = event_target_value(&ev);
                            if let Some(chosen) = Correction::ALL.into_iter().find(|c| correction_key(*c) == key) {
                                correction.set(chosen);
                            }
                        }>
                        {Correction::ALL.into_iter().map(|choice| {
                            view! { <option value=correction_key(choice) selected=move || correction.get() == choice>{correction_label(choice)}</option> }
                        }).collect_view()}
                    </select>
                </fieldset>
                {move || problem.get().filter(|_| attempted.get() || !rows.with(Vec::is_empty) && !columns.with(Vec::is_empty))
                    .map(|message| view! { <p class="error" role="alert" id="table-problem">{message}</p> })}
                {move || notice.get().map(|notice| view! { <p class="warning" role="status">{notice.to_string()}</p> })}
                <p class="muted" id="table-price" role="status">{move || match source.get() {
                    Source::Local => "Computed in this page: your file is not uploaded and nothing is billed.".to_owned(),
                    Source::Server => format!(
                        "On the server this table takes {} billed call{} (one per two of its {} cells and totals), as /v1 would bill the same questions.",
                        cost.get(), if cost.get() == 1 { "" } else { "s" },
                        request.with(TableRequest::targets)
                    ),
                }}</p>
                <div class="row">
                    // aria-disabled, not disabled: the button keeps the keyboard's focus while
                    // the table computes (`run` refuses the click itself).
                    <button id="table-run" on:click=run
                        aria-disabled=move || (problem.get().is_some() || waiting.get() || outcome.get() == Outcome::Running).to_string()>
                        {move || if outcome.get() == Outcome::Running { "Running…" } else { "Run table" }}
                    </button>
                    <button class="secondary" id="table-clear" on:click=move |_| { rows.set(Vec::new()); columns.set(Vec::new()); filter.set(String::new()); attempted.set(false); reset(Outcome::Idle); }>"Clear"</button>
                </div>
                {move || confirming.get().map(|frozen| {
                    let calls = frozen.billed_calls();
                    // Either way the keyboard's focus goes back to the Run button.
                    view! { <CostPrompt calls=calls
                        on_run=Callback::new(move |()| { run_now(frozen.clone()); focus("table-run"); })
                        on_cancel=Callback::new(move |()| { confirming.set(None); focus("table-run"); }) /> }
                })}
            </section>
            <section class="card codebook" aria-labelledby="table-codebook-title">
                <h2 id="table-codebook-title">"Codebook"</h2>
                <label for="table-search">"Search codes and variables by label or code"</label>
                <input id="table-search" type="search" placeholder="e.g. coffee, women, region"
                    prop:value=move || search.get() on:input=move |ev| search.set(event_target_value(&ev)) />
                {move || {
                    let Some(book) = book.get() else {
                        // A codebook the server refused says why, not "choose a survey".
                        if let (Source::Server, Some(Err(failure))) = (source.get(), server_book.get()) {
                            return view! { <p class="error" role="alert" id="codebook-error">{format!("The codebook could not be loaded: {}", failure.message)}</p> }.into_any();
                        }
                        return view! { <p class="muted">"Choose a survey or open a file to see its codebook."</p> }.into_any();
                    };
                    let query = search.get();
                    if query.trim().is_empty() {
                        return view! { <p class="muted">{format!("{} named codes, {} variables. Type to search; add any entry as a row or a column.", book.codes.len(), book.variables.len())}</p> }.into_any();
                    }
                    let found = picks(&book, &query);
                    if found.is_empty() {
                        return view! { <p class="empty">"Nothing matches."</p> }.into_any();
                    }
                    let more = more_than_shown(found.len());
                    view! {
                        {more.map(|said| view! { <p class="muted" id="table-picks-more">{said}</p> })}
                        <ul class="picks table-picks">
                            {found.into_iter().take(SHOWN_PICKS).map(|pick| {
                                let text = Labelled { target: pick.target.clone(), label: Some(pick.label.clone()) }.display();
                                let entry = TableAxis { expression: pick.target.clone(), label: Some(pick.label.clone()) };
                                let as_column = entry.clone();
                                view! {
                                    <li class="table-pick">
                                        <span class="pick-text">{text.clone()}</span>
                                        <button class="secondary add-row" aria-label=format!("Add {text} to the rows")
                                            on:click=move |_| add(true, vec![entry.clone()])>"+ Row"</button>
                                        <button class="secondary add-column" aria-label=format!("Add {text} to the columns")
                                            on:click=move |_| add(false, vec![as_column.clone()])>"+ Column"</button>
                                    </li>
                                }
                            }).collect_view()}
                        </ul>
                    }.into_any()
                }}
                <SavedTables current=Callback::new(spec) on_load=load recorded=recorded.read_only() />
            </section>
        </div>
        // One live region for the whole screen, there from the start, so that a screen
        // reader hears each change of the run (a region inserted with its text is often
        // not read).
        <p class="sr-only" role="status" id="table-announce">{move || match outcome.get() {
            Outcome::Idle => String::new(),
            Outcome::Running => "Computing the table…".to_owned(),
            Outcome::Failed(message) => format!("The table failed: {message}"),
            Outcome::Done(computed) => {
                let size = format!(
                    "{} by {}, with totals",
                    crate::labels::counted(computed.table.rows.len(), "row"),
                    crate::labels::counted(computed.table.columns.len(), "column")
                );
                match &computed.origin {
                    Origin::Kept { at } => format!(
                        "Table from your run of {}, kept in this browser and shown again: {size}.",
                        crate::dom::local_time(at)
                    ),
                    _ => format!("Table ready: {size}."),
                }
            }
        }}</p>
        {move || match outcome.get() {
            Outcome::Idle => view! { <section class="card results empty-state"><p class="empty">"Add rows and columns, then run the table."</p></section> }.into_any(),
            Outcome::Running => view! { <section class="card results"><p class="status">"Computing the table…"</p></section> }.into_any(),
            Outcome::Failed(message) => view! { <section class="card results"><p class="error" role="alert" id="table-error">{message}</p></section> }.into_any(),
            Outcome::Done(computed) => view! { <TableView computed=*computed figures=figures arrangement=arrangement current=request /> }.into_any(),
        }}
    }
}

/// What the cost prompt says of the daily quota: what is left, and whether the table fits.
fn quota_left_text(calls: u32, quota: &DailyQuota) -> String {
    let left = quota.left();
    if u64::from(calls) > left {
        format!(
            "Your account has {left} of its {} daily calls left: this table would be refused until the quota starts again at midnight UTC.",
            quota.calls
        )
    } else {
        format!(
            "Your account has {left} of its {} daily calls left; {} after this table.",
            quota.calls,
            left - u64::from(calls)
        )
    }
}

/// "This table takes N billed calls": asked before a table above the threshold runs.
#[component]
fn CostPrompt(calls: u32, on_run: Callback<()>, on_cancel: Callback<()>) -> impl IntoView {
    let dialog = NodeRef::<leptos::html::Dialog>::new();
    let confirm = NodeRef::<leptos::html::Button>::new();
    Effect::new(move |_| {
        if let Some(dialog) = dialog.get() {
            // Modal: the page behind is inert until the prompt is answered.
            if !dialog.open() {
                let _ = dialog.show_modal();
            }
            if let Some(button) = confirm.get() {
                let _ = button.focus();
            }
        }
    });
    // What is left of the account's daily quota, asked when the prompt opens (today's
    // usage alone: no rows to speak of). None until it comes, and without a quota.
    let left = RwSignal::new(None::<DailyQuota>);
    leptos::task::spawn_local(async move {
        let today = js_sys::Date::new_0()
            .to_iso_string()
            .as_string()
            .map(|iso| iso.chars().take(10).collect::<String>());
        let query = UsageQuery {
            from: today.clone(),
            to: today,
        };
        if let Ok(report) = api::usage(&query).await {
            left.try_set(report.quota);
        }
    });
    // Closed before the answer is acted on: the page is inert while it is open, so the
    // focus could not go back to it.
    let answer = move |run: bool| {
        if let Some(dialog) = dialog.get_untracked() {
            dialog.close();
        }
        if run {
            on_run.run(());
        } else {
            on_cancel.run(());
        }
    };
    view! {
        <dialog class="dialog" role="alertdialog" aria-labelledby="cost-title" aria-describedby="cost-text" id="cost-prompt" node_ref=dialog
            on:cancel=move |ev: web_sys::Event| { ev.prevent_default(); answer(false) }>
            <h2 id="cost-title">"Run this table on the server?"</h2>
            <p id="cost-text">{format!(
                "It takes {calls} billed calls on your account, more than {TABLE_COST_PROMPT_THRESHOLD}: the calls /v1 would bill for the same questions."
            )}</p>
            {move || left.get().map(|quota| {
                let class = if u64::from(calls) > quota.left() { "warning" } else { "muted" };
                view! { <p id="cost-quota" class=class>{quota_left_text(calls, &quota)}</p> }
            })}
            <div class="row">
                <button id="cost-confirm" node_ref=confirm on:click=move |_| answer(true)>{format!("Run ({calls} calls)")}</button>
                <button class="secondary" id="cost-cancel" on:click=move |_| answer(false)>"Cancel"</button>
            </div>
        </dialog>
    }
}

/// The rows or the columns: entries in order, each movable and removable; added from
/// the codebook search, a variable's values, or a typed expression.
#[component]
fn AxisEditor(
    name: &'static str,
    title: &'static str,
    items: RwSignal<Vec<TableAxis>>,
    book: Memo<Option<Codebook>>,
) -> impl IntoView {
    let typed = RwSignal::new(String::new());
    let variable = RwSignal::new(String::new());
    let add_typed = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let text = typed.get_untracked();
        if text.trim().is_empty() {
            return;
        }
        let entry = axis_entry(book.get_untracked().as_ref(), &text);
        items.update(|list| list.push(entry));
        typed.set(String::new());
    };
    let add_variable = move |_| {
        let Some(book) = book.get_untracked() else {
            return;
        };
        let chosen = variable.get_untracked();
        let chosen = if chosen.is_empty() {
            book.variables
                .iter()
                .find(|v| has_entries(v))
                .map(|v| v.name.clone())
                .unwrap_or_default()
        } else {
            chosen
        };
        let entries = value_entries(&book, &chosen);
        items.update(|list| {
            for entry in entries {
                if !list.contains(&entry) {
                    list.push(entry);
                }
            }
        });
    };
    // The list is drawn again after a change: the keyboard's focus goes to the same
    // button of the moved entry, or to the next entry's Remove, once it is drawn.
    let focus_later = move |id: String| {
        request_animation_frame(move || focus(&id));
    };
    let move_by = move |index: usize, up: bool| {
        let mut moved = None;
        items.update(|list| {
            let other = if up {
                index.checked_sub(1)
            } else {
                Some(index + 1)
            };
            if let Some(other) = other.filter(|o| *o < list.len()) {
                list.swap(index, other);
                moved = Some(other);
            }
        });
        if let Some(to) = moved {
            focus_later(format!("{name}-{}-{to}", if up { "up" } else { "down" }));
        }
    };
    let remove = move |index: usize| {
        let mut left = None;
        items.update(|list| {
            if index < list.len() {
                list.remove(index);
                left = Some(list.len());
            }
        });
        match left {
            Some(0) => focus_later(format!("{name}-variable")),
            Some(len) => focus_later(format!("{name}-remove-{}", index.min(len - 1))),
            None => {}
        }
    };
    view! {
        <fieldset class="axis" id=format!("{name}-axis")>
            <legend>{move || format!("{title} ({})", items.with(Vec::len))}</legend>
            <ol class="axis-list" id=format!("{name}-list")>
                {move || items.get().into_iter().enumerate().map(|(index, entry)| {
                    let text = entry_text(&entry);
                    view! {
                        <li>
                            <span class="axis-entry" data-expression=entry.expression.clone()>{text.clone()}</span>
                            <span class="axis-buttons">
                                <button class="secondary icon" id=format!("{name}-up-{index}") aria-label=format!("Move {text} up") on:click=move |_| move_by(index, true)>"↑"</button>
                                <button class="secondary icon" id=format!("{name}-down-{index}") aria-label=format!("Move {text} down") on:click=move |_| move_by(index, false)>"↓"</button>
                                <button class="secondary icon" id=format!("{name}-remove-{index}") aria-label=format!("Remove {text}")
                                    on:click=move |_| remove(index)>"×"</button>
                            </span>
                        </li>
                    }
                }).collect_view()}
            </ol>
            <div class="axis-add">
                <label for=format!("{name}-variable")>"Add every value of a variable"</label>
                <div class="target-row">
                    <select id=format!("{name}-variable") on:change=move |ev| variable.set(event_target_value(&ev))>
                        {move || book.get().map(|book| book.variables.iter().filter(|v| has_entries(v)).map(|v| {
                            let value = v.name.clone();
                            let text = Labelled { target: v.name.clone(), label: v.label.clone() }.display();
                            view! { <option value=value.clone() selected=move || variable.get() == value>{text}</option> }
                        }).collect_view())}
                    </select>
                    <button class="secondary" id=format!("{name}-add-variable") on:click=add_variable>"Add values"</button>
                </div>
                <form on:submit=add_typed>
                    <label for=format!("{name}-expression")>"Or type a code or an expression"</label>
                    <div class="target-row">
                        <input id=format!("{name}-expression") class="target" placeholder="F2554 or AGE BETWEEN 25 AND 54"
                            prop:value=move || typed.get() on:input=move |ev| typed.set(event_target_value(&ev)) />
                        <button type="submit" class="secondary" id=format!("{name}-add-expression")>"Add"</button>
                    </div>
                </form>
            </div>
        </fieldset>
    }
}

/// "Open a survey file": a CSV with its TOML definition or the guided form, or a
/// compiled survey; read and compiled in the page.
#[component]
fn LocalOpen(opened: RwSignal<Option<Opened>>) -> impl IntoView {
    // The chosen CSV file, by name: a handle, not its text, which only the worker reads.
    let csv = RwSignal::new_local(None::<(String, web_sys::File)>);
    let definition = RwSignal::new(None::<(String, String)>);
    let columns = RwSignal::new(Vec::<String>::new());
    let error = RwSignal::new(None::<String>);
    let busy = RwSignal::new(false);
    // The in-page engine (the app's worker) is loaded when this panel first shows, again
    // on request after a failure, and when a compiled file is chosen without it.
    let engine = RwSignal::new(None::<Result<(), String>>);
    // Starts the engine, the panel saying so meanwhile and then how it went.
    let start_engine = move || async move {
        engine.set(None);
        let started = local::start().await;
        engine.set(Some(started.clone()));
        started
    };
    let load_engine = move || {
        error.set(None);
        leptos::task::spawn_local(async move {
            let _ = start_engine().await;
        });
    };
    load_engine();
    let code = RwSignal::new(String::new());
    let name = RwSignal::new(String::new());
    let id_column = RwSignal::new(String::new());
    let weight_column = RwSignal::new(String::new());
    // Said outright, as a definition says `unweighted = true`: never a forgotten choice.
    let unweighted = RwSignal::new(false);
    let group_column = RwSignal::new(String::new());
    // Weights as they are by default: a small file's audiences in thousands read as 0.0.
    let units = RwSignal::new(1u32);
    let bases = RwSignal::new(vec![BaseDraft {
        code: "ALL".into(),
        label: "All respondents".into(),
        expr: "*".into(),
    }]);

    let finish = move |result: Result<Opened, String>| {
        match result {
            Ok(survey) => {
                opened.set(Some(survey));
                error.set(None);
                csv.set(None);
                definition.set(None);
            }
            Err(message) => error.set(Some(message)),
        }
        busy.set(false);
    };
    let on_data = move |ev: leptos::ev::Event| {
        let Some(file) = local::chosen_file(&ev) else {
            return;
        };
        busy.set(true);
        error.set(None);
        let file_name = file.name();
        leptos::task::spawn_local(async move {
            if file_name.to_lowercase().ends_with(".csv") {
                match local::file_columns(&file).await {
                    Ok(found) => {
                        let stem: String = file_name
                            .trim_end_matches(".csv")
                            .chars()
                            .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
                            .collect::<String>()
                            .to_uppercase();
                        code.set(if stem.is_empty() {
                            "LOCAL".into()
                        } else {
                            stem.chars().take(64).collect()
                        });
                        name.set(file_name.clone());
                        id_column.set(found.first().cloned().unwrap_or_default());
                        // Only a column named as a weight is taken for one: any other
                        // (a category's codes) would weight every figure wrongly, silently.
                        weight_column.set(
                            found
                                .iter()
                                .find(|c| looks_like_weight(c))
                                .cloned()
                                .unwrap_or_default(),
                        );
                        unweighted.set(false);
                        group_column.set(String::new());
                        columns.set(found);
                        csv.set(Some((file_name, file)));
                    }
                    Err(message) => error.set(Some(message)),
                }
                busy.set(false);
            } else {
                // A compiled survey goes straight to the engine: if it is not in yet (or
                // failed to load), this waits for it (or loads it again), and the panel
                // says so.
                if !matches!(engine.get_untracked(), Some(Ok(()))) || !crate::worker::running() {
                    if let Err(message) = start_engine().await {
                        finish(Err(message));
                        return;
                    }
                }
                let result = match local::read_bytes(&file).await {
                    Ok(bytes) => local::open_compiled(bytes, file_name).await,
                    Err(message) => Err(message),
                };
                finish(result);
            }
        });
    };
    let on_definition = move |ev: leptos::ev::Event| {
        let Some(file) = local::chosen_file(&ev) else {
            return;
        };
        leptos::task::spawn_local(async move {
            match local::read_text(&file).await {
                Ok(text) => definition.set(Some((file.name(), text))),
                Err(message) => error.set(Some(message)),
            }
        });
    };
    let open = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let Some((data_name, file)) = csv.get_untracked() else {
            error.set(Some("Choose the respondent file first.".into()));
            return;
        };
        let definition = definition.get_untracked();
        let unweighted = unweighted.get_untracked();
        if definition.is_none() && !unweighted && weight_column.get_untracked().is_empty() {
            error.set(Some(
                "Choose the weight column: every figure is a sum of respondents' weights. For an unweighted survey, tick \"No weight column\"."
                    .into(),
            ));
            return;
        }
        busy.set(true);
        let guided = GuidedDefinition {
            code: code.get_untracked(),
            name: name.get_untracked(),
            id_column: id_column.get_untracked(),
            weight_column: (!unweighted).then(|| weight_column.get_untracked()),
            group_column: Some(group_column.get_untracked()).filter(|g| !g.is_empty()),
            audience_report_units: units.get_untracked(),
            bases: bases.get_untracked(),
        };
        leptos::task::spawn_local(async move {
            let result = match definition {
                Some((definition_name, toml)) => {
                    local::open_csv(toml, &file, format!("{data_name} + {definition_name}")).await
                }
                None => local::open_guided(guided, &file, data_name).await,
            };
            finish(result);
        });
    };
    // `empty`: what the select's empty choice says (none: it has none).
    let column_select = move |id: &'static str,
                              value: RwSignal<String>,
                              empty: Option<&'static str>| {
        view! {
            <select id=id on:change=move |ev| value.set(event_target_value(&ev))>
                {empty.map(|text| view! { <option value="" selected=move || value.get().is_empty()>{text}</option> })}
                {move || columns.get().into_iter().map(|c| {
                    let option = c.clone();
                    let shown = c.clone();
                    view! { <option value=c selected=move || value.get() == option>{shown}</option> }
                }).collect_view()}
            </select>
        }
    };
    view! {
        <div class="local" aria-labelledby="local-title">
            <h2 id="local-title">"Open a survey file"</h2>
            <p class="private" id="local-private">"Your file stays on this computer: it is read and computed in this page, never uploaded, and nothing is billed. Once it is open, tables work offline."</p>
            <p class="status" role="status" id="local-engine">{move || match engine.get() {
                None => "Loading the in-page engine…".into_any(),
                Some(Ok(())) => "The in-page engine is ready: from here on, opening and computing need no network.".into_any(),
                Some(Err(message)) => view! {
                    {message}" "
                    <button type="button" class="link-button" id="local-engine-retry" on:click=move |_| load_engine()>"Try again"</button>
                }.into_any(),
            }}</p>
            {move || opened.get().map(|survey| view! {
                <p class="opened" role="status" id="local-opened">
                    {format!("Open: {} — {} ({} respondents), from {}.", survey.codebook.code, survey.codebook.name,
                        crosstab_wasm::display::format_number(survey.codebook.respondents as f64, 0), survey.from)}
                    " "
                    <button class="link-button" on:click=move |_| { local::close(); opened.set(None); }>"Close the file"</button>
                </p>
            })}
            <label for="local-data">"Respondent file (CSV) or compiled survey"</label>
            <input type="file" id="local-data" accept=".csv,.ctxs,text/csv" on:change=on_data />
            {move || busy.get().then(|| view! { <p class="status" role="status">"Reading the file…"</p> })}
            {move || csv.get().map(|(file_name, _)| view! {
                <form class="guided" on:submit=open>
                    <p class="muted">{format!("{file_name}: {} columns. Give its definition (survey.toml), or describe it here.", columns.with(Vec::len))}</p>
                    <label for="local-definition">"Definition (survey.toml), optional"</label>
                    <input type="file" id="local-definition" accept=".toml,text/plain" on:change=on_definition />
                    {move || match definition.get() {
                        Some((definition_name, _)) => view! { <p class="muted">{format!("Using {definition_name}.")}</p> }.into_any(),
                        None => view! {
                            <div class="two">
                                <div>
                                    <label for="local-code">"Survey code"</label>
                                    <input id="local-code" prop:value=move || code.get() on:input=move |ev| code.set(event_target_value(&ev)) />
                                </div>
                                <div>
                                    <label for="local-name">"Name"</label>
                                    <input id="local-name" prop:value=move || name.get() on:input=move |ev| name.set(event_target_value(&ev)) />
                                </div>
                                <div>
                                    <label for="local-id">"Id column"</label>
                                    {column_select("local-id", id_column, None)}
                                </div>
                                <div>
                                    <label for="local-weight">"Weight column"</label>
                                    <fieldset class="plain" prop:disabled=move || unweighted.get()>
                                        {column_select("local-weight", weight_column, Some("(choose one)"))}
                                    </fieldset>
                                    <label class="check" for="local-unweighted">
                                        <input type="checkbox" id="local-unweighted" prop:checked=move || unweighted.get()
                                            on:change=move |ev| unweighted.set(event_target_checked(&ev)) />
                                        "No weight column: every respondent counts 1"
                                    </label>
                                </div>
                                <div>
                                    <label for="local-group">"Group column (optional)"</label>
                                    {column_select("local-group", group_column, Some("(none)"))}
                                </div>
                                <div>
                                    <label for="local-units">"Weighted audiences in"</label>
                                    <select id="local-units" on:change=move |ev| {
                                        if let Ok(chosen) = event_target_value(&ev).parse() { units.set(chosen); }
                                    }>
                                        {[(1u32, "the weights' own units"), (1_000, "thousands"), (1_000_000, "millions")].into_iter().map(|(value, text)| view! {
                                            <option value=value.to_string() selected=move || units.get() == value>{text}</option>
                                        }).collect_view()}
                                    </select>
                                </div>
                            </div>
                            <fieldset class="bases">
                                <legend>"Population bases"</legend>
                                // The columns' names for the eye; each input has its own label.
                                <div class="base-row base-head" aria-hidden="true">
                                    <span>"Code"</span><span>"Label"</span><span>"Expression (* for everyone)"</span>
                                </div>
                                {move || bases.get().into_iter().enumerate().map(|(index, draft)| {
                                    let field = move |part: &'static str, value: String| view! {
                                        <input id=format!("local-base-{index}-{part}") aria-label=format!("Base {} {part}", index + 1) prop:value=value
                                            on:change=move |ev| { let text = event_target_value(&ev); bases.update(|list| if let Some(b) = list.get_mut(index) {
                                                match part { "code" => b.code = text, "label" => b.label = text, _ => b.expr = text }
                                            }); } />
                                    };
                                    view! {
                                        <div class="base-row">
                                            {field("code", draft.code)}{field("label", draft.label)}{field("expression", draft.expr)}
                                            <button type="button" class="secondary icon" aria-label=format!("Remove base {}", index + 1)
                                                on:click=move |_| bases.update(|list| { if list.len() > 1 { list.remove(index); } })>"×"</button>
                                        </div>
                                    }
                                }).collect_view()}
                                <button type="button" class="secondary" on:click=move |_| bases.update(|list| list.push(BaseDraft { code: String::new(), label: String::new(), expr: "*".into() }))>"+ Add base"</button>
                            </fieldset>
                        }.into_any(),
                    }}
                    <button type="submit" id="local-open" disabled=move || busy.get() || engine.with(|e| !matches!(e, Some(Ok(()))))>"Open"</button>
                </form>
            })}
            {move || error.get().map(|message| view! { <p class="error" role="alert" id="local-error">{message}</p> })}
        </div>
    }
}

/// Saved tables and the last ones run, from local storage.
#[component]
fn SavedTables(
    current: Callback<String, Spec>,
    on_load: Callback<Spec>,
    recorded: ReadSignal<u32>,
) -> impl IntoView {
    let saved_list = RwSignal::new(saved::saved());
    let history = RwSignal::new(saved::history());
    // Each run here as it is recorded; another tab's when the list is opened.
    Effect::new(move |_| {
        recorded.track();
        history.set(saved::history());
    });
    let name = RwSignal::new(String::new());
    let message = RwSignal::new(None::<String>);
    let save = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let chosen = name.get_untracked().trim().to_owned();
        if chosen.is_empty() {
            message.set(Some("Name the table to save it.".into()));
            return;
        }
        let taken = saved::saved().iter().any(|spec| spec.name == chosen);
        if taken && !confirmed(&format!("Replace the saved table {chosen} with this one?")) {
            message.set(Some(format!("{chosen} kept as it was.")));
            return;
        }
        message.set(Some(match saved::save(current.run(chosen.clone())) {
            Ok(()) => format!("Saved as {chosen}."),
            Err(error) => error,
        }));
        saved_list.set(saved::saved());
    };
    let list = move |specs: Vec<Spec>, deletable: bool| {
        specs
            .into_iter()
            .map(|spec| {
                let title = if spec.name.is_empty() { crate::dom::local_time(&spec.at) } else { spec.name.clone() };
                let described = spec.describe();
                let name = spec.name.clone();
                view! {
                    <li>
                        <button class="history-item" on:click=move |_| on_load.run(spec.clone())>
                            <span>{title}</span><span class="muted">{described}</span>
                        </button>
                        {deletable.then(|| view! {
                            <button class="secondary icon" aria-label=format!("Delete {name}")
                                on:click=move |_| {
                                    if confirmed(&format!("Delete the saved table {name}? This can't be undone.")) {
                                        saved::delete(&name);
                                        saved_list.set(saved::saved());
                                    }
                                }>"×"</button>
                        })}
                    </li>
                }
            })
            .collect_view()
    };
    view! {
        <details class="saved" id="saved-tables"
            on:toggle=move |_| { history.set(saved::history()); saved_list.set(saved::saved()); }>
            <summary>"Saved tables and history"</summary>
            <form class="row" on:submit=save>
                <label for="save-name">"Name"</label>
                <input id="save-name" prop:value=move || name.get() on:input=move |ev| name.set(event_target_value(&ev)) />
                <button type="submit" class="secondary" id="save-table">"Save table"</button>
            </form>
            {move || message.get().map(|m| view! { <p class="muted" role="status">{m}</p> })}
            <h3>"Saved"</h3>
            <ul class="history saved-list">{move || list(saved_list.get(), true)}</ul>
            <h3>"Recently run"</h3>
            <button class="secondary" on:click=move |_| {
                if confirmed("Clear the list of tables run recently? Saved tables stay. This can't be undone.") {
                    saved::clear_history();
                    history.set(Vec::new());
                }
            }>"Clear history"</button>
            <ul class="history">{move || list(history.get(), false)}</ul>
        </details>
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::codebook;

    #[test]
    fn a_variable_adds_its_labelled_values() {
        let book = codebook();
        let gender = value_entries(&book, "GENDER");
        let texts: Vec<String> = gender.iter().map(entry_text).collect();
        assert_eq!(
            texts,
            ["Gender: Male · GENDER = 1", "Gender: Female · GENDER = 2"]
        );
        // Only the labelled value of a partly labelled variable.
        let coffee = value_entries(&book, "P_COFFEE_01");
        assert_eq!(coffee.len(), 1);
        assert_eq!(coffee[0].expression, "P_COFFEE_01 = 1");
        assert!(value_entries(&book, "NOPE").is_empty());
    }

    #[test]
    fn only_a_column_named_as_a_weight_is_taken_for_one() {
        for weight in [
            "WEIGHT",
            "wgt_final",
            "WT",
            "wt_2024",
            "PopWeight",
            "final weight",
        ] {
            assert!(looks_like_weight(weight), "{weight}");
        }
        for other in [
            "GENDER",
            "RESPID",
            "WTV",
            "HEIGHT",
            "W",
            "OVERWEIGHT",
            "BODY_WEIGHT_KG",
            "weight_lbs",
        ] {
            assert!(!looks_like_weight(other), "{other}");
        }
    }

    #[test]
    fn typed_entries_keep_their_expression() {
        let book = codebook();
        assert_eq!(
            entry_text(&axis_entry(Some(&book), " F2554 ")),
            "Women, 25-54 · F2554"
        );
        assert_eq!(entry_text(&axis_entry(Some(&book), "AGE > 30")), "AGE > 30");
    }

    #[test]
    fn the_cost_prompt_says_what_is_left_of_the_quota() {
        let quota = DailyQuota {
            day: "2026-11-29".into(),
            calls: 500,
            used: 450,
        };
        assert_eq!(
            quota_left_text(22, &quota),
            "Your account has 50 of its 500 daily calls left; 28 after this table."
        );
        assert_eq!(
            quota_left_text(51, &quota),
            "Your account has 50 of its 500 daily calls left: this table would be refused until the quota starts again at midnight UTC."
        );
    }

    #[test]
    fn captions_name_survey_base_group_and_place() {
        let book = codebook();
        let request = TableRequest {
            survey: "DEMO".into(),
            population_base: "ADULTS".into(),
            group: Some("N".into()),
            filter: None,
            rows: Vec::new(),
            columns: Vec::new(),
            confidence: Default::default(),
            bonferroni: false,
            holm: false,
        };
        let caption = caption_of(Some(&book), &request, Source::Local);
        assert_eq!(caption.survey, "DEMO — Demo");
        assert_eq!(caption.base, "ADULTS");
        assert_eq!(caption.group, "N");
        assert!(caption.source.contains("not uploaded"));
        assert_eq!(caption.filter, None);
        assert_eq!(caption.heading(), "DEMO — Demo — ADULTS — N");
        let filtered = TableRequest {
            filter: Some("AGE >= 35".into()),
            ..request
        };
        let caption = caption_of(Some(&book), &filtered, Source::Local);
        assert_eq!(
            caption.heading(),
            "DEMO — Demo — ADULTS — N — filtered to AGE >= 35"
        );
    }
}
