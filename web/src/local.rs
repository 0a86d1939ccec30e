//! Private local data: a survey file opened in the page and answered by the engine
//! compiled into the app. Nothing of the file leaves the browser: it is read with the
//! File API, compiled and queried here, and no request carries it.

use std::cell::RefCell;
use std::rc::Rc;

use crosstab_contract::app::{Codebook, Table, TableRequest};
use crosstab_contract::ApiError;
use crosstab_engine::Survey;
use serde::Serialize;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

thread_local! {
    /// The survey opened from a file, if any (one at a time), and what the screen shows
    /// of it: kept while the researcher moves between screens.
    static OPENED: RefCell<Option<(Rc<Survey>, Opened)>> = const { RefCell::new(None) };
}

/// What the screen shows of the opened survey.
#[derive(Debug, Clone, PartialEq)]
pub struct Opened {
    /// Its codebook (labels, bases, groups).
    pub codebook: Codebook,
    /// Where it came from: the file names, for the screen only.
    pub from: String,
}

/// Makes `survey` the opened one; returns what the screen shows of it.
fn open(survey: Survey, from: String) -> Opened {
    let opened = Opened {
        codebook: survey.codebook(),
        from,
    };
    OPENED.with(|slot| *slot.borrow_mut() = Some((Rc::new(survey), opened.clone())));
    opened
}

/// What the screen shows of the opened survey, if any.
pub fn opened() -> Option<Opened> {
    OPENED.with(|slot| slot.borrow().as_ref().map(|(_, opened)| opened.clone()))
}

/// Closes the opened survey (its data is dropped from memory).
pub fn close() {
    OPENED.with(|slot| *slot.borrow_mut() = None);
}

/// The opened survey, if any.
pub fn survey() -> Option<Rc<Survey>> {
    OPENED.with(|slot| slot.borrow().as_ref().map(|(survey, _)| Rc::clone(survey)))
}

/// Compiles a TOML definition and its CSV, as `crosstab survey import` would.
pub fn open_csv(definition: &str, csv: &str, from: String) -> Result<Opened, String> {
    let survey =
        crosstab_engine::survey_from_csv(definition, csv).map_err(|error| error.to_string())?;
    Ok(open(survey, from))
}

/// Loads a compiled survey (the file `crosstab survey import` installs).
pub fn open_compiled(bytes: &[u8], from: String) -> Result<Opened, String> {
    let survey = Survey::from_bytes(bytes).map_err(|error| error.to_string())?;
    Ok(open(survey, from))
}

/// Computes a table from the opened survey, as the server would for a whole-survey grant
/// (but nothing is billed: `billedCalls` is 0).
pub fn table(request: &TableRequest) -> Result<Table, ApiError> {
    let valid = request.clone().validate().map_err(ApiError::from)?;
    let survey = survey()
        .filter(|s| s.code() == valid.request.survey)
        .ok_or(ApiError::ForbiddenSurvey)?;
    if valid.group_filter().is_some_and(|g| !survey.has_group(g)) {
        return Err(ApiError::ForbiddenSurvey);
    }
    if !survey.has_base(&valid.request.population_base) {
        return Err(ApiError::InvalidPopulationBase {
            base: valid.request.population_base.clone(),
        });
    }
    survey.table(&valid).map_err(ApiError::from)
}

/// The column names of a CSV's header row.
pub fn csv_columns(csv: &str) -> Result<Vec<String>, String> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .from_reader(csv.as_bytes());
    let headers = reader
        .headers()
        .map_err(|error| format!("The file's first line is not a CSV header ({error})."))?;
    let columns: Vec<String> = headers.iter().map(|h| h.trim().to_owned()).collect();
    if columns.len() < 2 {
        return Err("A survey file needs at least an id column and a weight column.".into());
    }
    Ok(columns)
}

/// One population base of the guided form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BaseDraft {
    /// `PopulationBaseCode`.
    pub code: String,
    /// Display label.
    pub label: String,
    /// Its expression (`*` for everyone).
    pub expr: String,
}

/// The guided form's answers: what a definition needs when the file came alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuidedDefinition {
    /// The `SurveyCode`.
    pub code: String,
    /// Display name.
    pub name: String,
    /// The id column.
    pub id_column: String,
    /// The weight column.
    pub weight_column: String,
    /// The group column, if any.
    pub group_column: Option<String>,
    /// At least one base.
    pub bases: Vec<BaseDraft>,
}

/// The definition file the guided form stands for.
#[derive(Serialize)]
struct DefinitionFile<'a> {
    code: &'a str,
    name: &'a str,
    respondents: &'a str,
    id_column: &'a str,
    weight_column: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    group_column: Option<&'a str>,
    population_bases: &'a [BaseDraft],
}

impl GuidedDefinition {
    /// The TOML definition (the engine checks it, as import does).
    pub fn to_toml(&self) -> Result<String, String> {
        if self.bases.is_empty() {
            return Err("Give at least one population base.".into());
        }
        let file = DefinitionFile {
            code: self.code.trim(),
            name: self.name.trim(),
            respondents: "respondents.csv",
            id_column: &self.id_column,
            weight_column: &self.weight_column,
            group_column: self.group_column.as_deref().filter(|g| !g.is_empty()),
            population_bases: &self.bases,
        };
        toml::to_string(&file).map_err(|error| error.to_string())
    }
}

/// The text of a file the user picked.
pub async fn read_text(file: &web_sys::File) -> Result<String, String> {
    let text = JsFuture::from(file.text())
        .await
        .map_err(|_| format!("{} could not be read.", file.name()))?;
    text.as_string()
        .ok_or_else(|| format!("{} is not text.", file.name()))
}

/// The bytes of a file the user picked.
pub async fn read_bytes(file: &web_sys::File) -> Result<Vec<u8>, String> {
    let buffer = JsFuture::from(file.array_buffer())
        .await
        .map_err(|_| format!("{} could not be read.", file.name()))?;
    Ok(js_sys::Uint8Array::new(&buffer).to_vec())
}

/// The first file chosen in the `<input type=file>` an event came from. The input is
/// emptied, so choosing the same file again (after closing it) is a change too.
pub fn chosen_file(event: &web_sys::Event) -> Option<web_sys::File> {
    let input = event
        .target()?
        .dyn_into::<web_sys::HtmlInputElement>()
        .ok()?;
    let file = input.files()?.get(0);
    input.set_value("");
    file
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crosstab_contract::app::TableAxis;

    const CSV: &str = "RESPID,WEIGHT,REGION,GENDER\n1,1.5,1,1\n2,2.5,2,2\n3,1,2,2\n";

    fn guided() -> GuidedDefinition {
        GuidedDefinition {
            code: "PRIV".into(),
            name: "Private \"panel\"".into(),
            id_column: "RESPID".into(),
            weight_column: "WEIGHT".into(),
            group_column: Some("REGION".into()),
            bases: vec![
                BaseDraft {
                    code: "ALL".into(),
                    label: "Everyone".into(),
                    expr: "*".into(),
                },
                BaseDraft {
                    code: "WOMEN".into(),
                    label: "Women".into(),
                    expr: "GENDER = 2".into(),
                },
            ],
        }
    }

    #[test]
    fn the_guided_form_writes_a_definition_the_engine_imports() {
        let toml = guided().to_toml().unwrap();
        let opened = open_csv(&toml, CSV, "test".into()).unwrap();
        assert_eq!(opened.codebook.code, "PRIV");
        assert_eq!(opened.codebook.name, "Private \"panel\"");
        assert_eq!(opened.codebook.respondents, 3);
        let bases: Vec<(&str, u64, f64)> = opened
            .codebook
            .bases
            .iter()
            .map(|b| (b.code.as_str(), b.respondents, b.weighted))
            .collect();
        assert_eq!(bases, [("ALL", 3, 5.0), ("WOMEN", 2, 3.5)]);
        let groups: Vec<&str> = opened
            .codebook
            .groups
            .iter()
            .map(|g| g.value.as_str())
            .collect();
        assert_eq!(groups, ["1", "2"]);
        // A table's cells are the crosstabs of (row) AND (column), unbilled.
        let axis = |expression: &str| TableAxis {
            expression: expression.into(),
            label: None,
        };
        let request = TableRequest {
            survey: "PRIV".into(),
            population_base: "ALL".into(),
            group: None,
            rows: vec![axis("GENDER = 2"), axis("GENDER = 1")],
            columns: vec![axis("REGION = 2")],
        };
        let answer = table(&request).unwrap();
        assert_eq!(answer.billed_calls, 0);
        assert_eq!(
            (answer.cells[0][0].resps, answer.cells[0][0].weight),
            (2, 3.5)
        );
        assert_eq!(
            (answer.cells[1][0].resps, answer.cells[1][0].weight),
            (0, 0.0)
        );
        assert_eq!(answer.row_totals[1].weight, 1.5);
        // Within a group: respondent 1 (a man, group 1) is left out.
        let in_group = table(&TableRequest {
            group: Some("2".into()),
            ..request.clone()
        })
        .unwrap();
        assert_eq!(in_group.row_totals[1].resps, 0);
        assert_eq!(in_group.total.weight, 3.5);
        let elsewhere = TableRequest {
            survey: "DEMO".into(),
            ..request
        };
        assert_eq!(table(&elsewhere).unwrap_err(), ApiError::ForbiddenSurvey);
        close();
        assert!(survey().is_none());
    }

    #[test]
    fn a_form_without_bases_or_a_bad_file_says_why() {
        let mut form = guided();
        form.bases.clear();
        assert!(form.to_toml().unwrap_err().contains("base"));
        let mut form = guided();
        form.weight_column = "NOPE".into();
        let error = open_csv(&form.to_toml().unwrap(), CSV, "test".into()).unwrap_err();
        assert!(error.contains("NOPE"), "{error}");
        assert_eq!(
            csv_columns(CSV).unwrap(),
            ["RESPID", "WEIGHT", "REGION", "GENDER"]
        );
        assert!(csv_columns("ONLY\n1\n").is_err());
    }
}
