//! Saved tables and the history of tables run, in local storage: what was asked (the
//! request, with its labels), how it was shown, and where it ran; and the last server
//! tables' answers, so reopening one shows it without billing it again. Never a local
//! file's data: a local table is saved as its request alone, and its answer not kept.

use crosstab_contract::app::{Codebook, Table, TableRequest};
use serde::{Deserialize, Serialize};

use crate::export::Caption;
use crate::figures::Figures;
use crate::grid::Arrangement;
use crate::stored::StoredList;

/// The saved tables' name in local storage (each user's under it, see `stored`).
pub const SAVED: &str = "crosstab.tables";
/// The tables run lately, likewise.
pub const HISTORY: &str = "crosstab.table-history";
const MAX_HISTORY: usize = 30;
/// The table being built on the server, likewise: kept as it changes, so a session that
/// ends (or a reload) does not lose it.
pub const DRAFT: &str = "crosstab.table-draft";

/// The last server tables' answers, likewise, newest first: a cache, the first to give
/// way when storage is full (`stored`), and forgotten at sign-out.
pub const ANSWERS: &str = crate::stored::ANSWERS;
const MAX_ANSWERS: usize = 10;
/// Local storage holds about 5 MB for the whole app, shared by the users of a browser: a
/// user's answers take at most 1 MB, none over 300 KB (a 20 × 10 table with every figure
/// takes about 100 KB).
const MAX_ANSWERS_BYTES: usize = 1024 * 1024;
const MAX_ANSWER_BYTES: usize = 300 * 1024;

/// What a survey's codebook says of its data, as the account sees it: a kept answer is
/// shown only while it says the same (not after a re-import, or a change of the groups
/// granted).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SurveyData {
    /// Respondents.
    pub respondents: u64,
    /// Their weights' sum.
    pub weight_total: f64,
    /// The codebook's `dataVersion` (absent for surveys compiled before checksums, and
    /// from answers kept by builds before it: once the survey has one, they are taken
    /// for out of date, since nothing says they are not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

impl SurveyData {
    /// What `book` says.
    pub fn of(book: &Codebook) -> SurveyData {
        SurveyData {
            respondents: book.respondents,
            weight_total: book.weight_total,
            version: book.data_version.clone(),
        }
    }
}

/// A server table's answer, kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Kept {
    /// When it was computed (ISO 8601, the browser's clock).
    pub at: String,
    /// The survey's data then.
    pub data: SurveyData,
    /// What it answers.
    pub request: TableRequest,
    /// The lines above it, as they were.
    pub caption: Caption,
    /// The answer.
    pub table: Table,
}

/// Keeps a server table's answer (replacing one to the same request), unless it is too
/// large; the oldest go past the budget, or when storage is full.
pub fn keep_answer(kept: Kept) {
    let size = |kept: &Kept| serde_json::to_string(kept).map_or(usize::MAX, |t| t.len());
    if size(&kept) > MAX_ANSWER_BYTES {
        return;
    }
    // Entries this build cannot read (an older `Table`) are dropped, not carried along.
    let mut entries = StoredList::<Kept>::load(ANSWERS).entries;
    entries.retain(|k| k.request != kept.request);
    entries.insert(0, kept);
    let mut used = 0;
    let within = entries
        .iter()
        .take(MAX_ANSWERS)
        .take_while(|k| {
            used += size(k);
            used <= MAX_ANSWERS_BYTES
        })
        .count();
    entries.truncate(within);
    while StoredList::of(entries.clone()).store(ANSWERS).is_err() && entries.len() > 1 {
        entries.pop();
    }
}

/// The kept answer to `request`, if any.
pub fn kept_answer(request: &TableRequest) -> Option<Kept> {
    StoredList::<Kept>::load(ANSWERS)
        .entries
        .into_iter()
        .find(|k| &k.request == request)
}

/// A table as the researcher built it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Spec {
    /// The name it was saved under (the history names it by its request).
    pub name: String,
    /// When (ISO 8601, the browser's clock).
    pub at: String,
    /// What it asks.
    pub request: TableRequest,
    /// The figures shown.
    pub figures: Figures,
    /// Flip, sort, hide.
    pub arrangement: Arrangement,
    /// Computed in the page from a local file (else on the server).
    pub local: bool,
}

impl Spec {
    /// One line saying what it is.
    pub fn describe(&self) -> String {
        let request = &self.request;
        // Tests other than the default's are part of what the table is.
        let tests = match (request.confidence.percent(), request.correction().name()) {
            (95, None) => String::new(),
            (percent, None) => format!(" · {percent}%"),
            (percent, Some(correction)) => format!(" · {percent}%, {correction}"),
        };
        format!(
            "{} · {}{} · {} × {}{tests}{}",
            request.survey,
            request.population_base,
            request
                .filter
                .as_deref()
                .map_or(String::new(), |filter| format!(" · filtered to {filter}")),
            crate::labels::counted(request.rows.len(), "row"),
            crate::labels::counted(request.columns.len(), "column"),
            if self.local { " · local file" } else { "" }
        )
    }
}

/// The browser's clock, ISO 8601.
pub fn now() -> String {
    js_sys::Date::new_0().to_iso_string().into()
}

/// Saved tables, by name.
pub fn saved() -> Vec<Spec> {
    StoredList::load(SAVED).entries
}

/// Tables run, newest first.
pub fn history() -> Vec<Spec> {
    StoredList::load(HISTORY).entries
}

/// Saves `spec` under its name, replacing one of the same name.
pub fn save(spec: Spec) -> Result<(), String> {
    let mut all: StoredList<Spec> = StoredList::load(SAVED);
    all.entries.retain(|s| s.name != spec.name);
    all.entries.push(spec);
    all.entries.sort_by(|a, b| a.name.cmp(&b.name));
    all.store(SAVED)
        .map_err(|error| format!("Not saved: {error}"))
}

/// Deletes the saved table `name` (and its kept answer, unless the history has it).
pub fn delete(name: &str) {
    let mut all: StoredList<Spec> = StoredList::load(SAVED);
    all.entries.retain(|s| s.name != name);
    let _ = all.store(SAVED);
    forget_answers_unlisted();
}

/// Records a table run, newest first, replacing an identical earlier one.
pub fn record(spec: Spec) {
    let mut all: StoredList<Spec> = StoredList::load(HISTORY);
    all.entries
        .retain(|s| s.request != spec.request || s.local != spec.local);
    all.entries.insert(0, spec);
    all.entries.truncate(MAX_HISTORY);
    let _ = all.store(HISTORY);
}

/// The table the user was building, if kept.
pub fn draft() -> Option<Spec> {
    StoredList::load(DRAFT).entries.into_iter().next()
}

/// Keeps `spec` as the table being built.
pub fn keep_draft(spec: Spec) {
    let _ = StoredList::of(vec![spec]).store(DRAFT);
}

/// Forgets the history, and the answers kept of tables not saved.
pub fn clear_history() {
    crate::stored::delete(HISTORY);
    forget_answers_unlisted();
}

/// Forgets the answers of tables neither saved nor in the history.
fn forget_answers_unlisted() {
    let listed: Vec<Spec> = saved().into_iter().chain(history()).collect();
    let mut answers = StoredList::<Kept>::load(ANSWERS).entries;
    answers.retain(|k| listed.iter().any(|s| !s.local && s.request == k.request));
    let _ = StoredList::of(answers).store(ANSWERS);
}

/// Forgets the signed-in user's kept answers (at sign-out: figures of licensed surveys
/// do not stay in a browser someone else may use next).
pub fn forget_answers() {
    crate::stored::delete(ANSWERS);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crosstab_contract::app::TableAxis;

    #[test]
    fn an_answer_kept_by_an_older_build_has_no_data_version() {
        let stored: SurveyData =
            serde_json::from_str(r#"{"respondents":100,"weight_total":2.5}"#).unwrap();
        assert_eq!(stored.version, None);
        let now = SurveyData {
            version: Some("aa".into()),
            ..stored.clone()
        };
        assert_ne!(stored, now, "nothing says the survey is as it was");
    }

    #[test]
    fn a_spec_reads_on_one_line() {
        let axis = |e: &str| TableAxis {
            expression: e.into(),
            label: None,
        };
        let spec = Spec {
            name: "coffee".into(),
            at: "2026-01-01T00:00:00Z".into(),
            request: TableRequest {
                survey: "DEMO".into(),
                population_base: "ADULTS".into(),
                group: None,
                filter: None,
                rows: vec![axis("F2554"), axis("GENDER = 1")],
                columns: vec![axis("REGION = 1")],
                confidence: Default::default(),
                bonferroni: false,
                holm: false,
            },
            figures: Figures::default(),
            arrangement: Arrangement::default(),
            local: true,
        };
        assert_eq!(
            spec.describe(),
            "DEMO · ADULTS · 2 rows × 1 column · local file"
        );
        let mut filtered = spec;
        filtered.request.filter = Some("AGE >= 35".into());
        assert_eq!(
            filtered.describe(),
            "DEMO · ADULTS · filtered to AGE >= 35 · 2 rows × 1 column · local file"
        );
        filtered.request.confidence = crosstab_contract::app::Confidence::NinetyNine;
        assert!(filtered
            .describe()
            .ends_with("2 rows × 1 column · 99% · local file"));
        filtered.request.bonferroni = true;
        assert!(filtered
            .describe()
            .ends_with("2 rows × 1 column · 99%, Bonferroni · local file"));
        filtered.request.bonferroni = false;
        filtered.request.holm = true;
        assert!(filtered
            .describe()
            .ends_with("2 rows × 1 column · 99%, Holm · local file"));
        // A spec saved before the tests were chosen reads as 95%, uncorrected; one saved
        // with Bonferroni's before Holm's was offered reads as Bonferroni's.
        use crosstab_contract::app::Correction;
        let mut older = serde_json::to_value(&filtered).unwrap();
        let request = older["request"].as_object_mut().unwrap();
        for member in ["confidence", "bonferroni", "holm"] {
            request.remove(member);
        }
        let older: Spec = serde_json::from_value(older).unwrap();
        assert_eq!(
            (
                older.request.confidence.percent(),
                older.request.correction()
            ),
            (95, Correction::None)
        );
        filtered.request.holm = false;
        filtered.request.bonferroni = true;
        // Written as a spec was before Holm's was offered: no `holm`.
        let before_holm = serde_json::to_value(&filtered).unwrap();
        assert!(before_holm["request"].get("holm").is_none());
        let before_holm: Spec = serde_json::from_value(before_holm).unwrap();
        assert_eq!(before_holm.request.correction(), Correction::Bonferroni);
    }
}
