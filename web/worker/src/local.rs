//! The survey opened from a file, and the answer to each call.

use std::cell::RefCell;

use crosstab_contract::app::{Table, TableRequest};
use crosstab_contract::ApiError;
use crosstab_engine::{AlignedBytes, Survey};
use serde::Serialize;

use crate::protocol::{Answer, Call, GuidedDefinition, Opened, Payload, Reply};
use crate::xlsx;

thread_local! {
    /// The survey opened from a file, if any (one at a time).
    static OPENED: RefCell<Option<Survey>> = const { RefCell::new(None) };
}

/// Answers `call`, with the file that came with it in `payload`; the workbook's bytes
/// come back in the returned payload.
pub fn answer(call: Call, payload: Payload) -> (Answer, Payload) {
    match (call, payload) {
        (_, Payload::Unread(reason)) => (
            Err(format!("The file could not be read: {reason}")),
            Payload::None,
        ),
        (Call::Start, Payload::None) => (Ok(Reply::Started), Payload::None),
        (Call::OpenCsv { definition, from }, Payload::Text(csv)) => (
            open_csv(&definition, &csv, from).map(|opened| Reply::Opened(Box::new(opened))),
            Payload::None,
        ),
        (Call::OpenGuided { definition, from }, Payload::Text(csv)) => (
            definition
                .to_toml()
                .and_then(|toml| open_csv(&toml, &csv, from))
                .map(|opened| Reply::Opened(Box::new(opened))),
            Payload::None,
        ),
        (Call::OpenCompiled { from }, Payload::Compiled(bytes)) => (
            bytes
                .and_then(|bytes| open_compiled(bytes, from))
                .map(|opened| Reply::Opened(Box::new(opened))),
            Payload::None,
        ),
        (Call::Table(request), Payload::None) => (
            table(&request)
                .map(|table| Reply::Table(Box::new(table)))
                .map_err(|error| error.to_string()),
            Payload::None,
        ),
        (Call::Close, Payload::None) => {
            OPENED.with(|slot| *slot.borrow_mut() = None);
            (Ok(Reply::Closed), Payload::None)
        }
        (Call::Xlsx(sheet), Payload::None) => match xlsx::workbook(&sheet) {
            Ok(bytes) => (Ok(Reply::Xlsx), Payload::Bytes(bytes)),
            Err(error) => (Err(error.to_string()), Payload::None),
        },
        (call, _) => (
            Err(format!("the worker got {call:?} without the file it needs")),
            Payload::None,
        ),
    }
}

/// Makes `survey` the opened one; returns what the screen shows of it.
fn open(survey: Survey, from: String) -> Opened {
    let opened = Opened {
        codebook: survey.codebook(),
        from,
    };
    OPENED.with(|slot| *slot.borrow_mut() = Some(survey));
    opened
}

/// Compiles a TOML definition and its CSV, as `crosstab survey import` would.
fn open_csv(definition: &str, csv: &str, from: String) -> Result<Opened, String> {
    let survey =
        crosstab_engine::survey_from_csv(definition, csv).map_err(|error| error.to_string())?;
    Ok(open(survey, from))
}

/// Loads a compiled survey (the file `crosstab survey import` installs), in place.
fn open_compiled(bytes: AlignedBytes, from: String) -> Result<Opened, String> {
    let survey = Survey::from_aligned(bytes).map_err(|error| error.to_string())?;
    Ok(open(survey, from))
}

/// Computes a table from the opened survey, as the server would for a whole-survey grant
/// (but nothing is billed: `billedCalls` is 0).
fn table(request: &TableRequest) -> Result<Table, ApiError> {
    OPENED.with(|slot| match slot.borrow().as_ref() {
        Some(survey) => survey.answer_table(request.clone()),
        None => Err(ApiError::ForbiddenSurvey),
    })
}

/// The definition file the guided form stands for.
#[derive(Serialize)]
struct DefinitionFile<'a> {
    code: &'a str,
    name: &'a str,
    respondents: &'a str,
    id_column: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    weight_column: Option<&'a str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    unweighted: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    group_column: Option<&'a str>,
    audience_report_units: u32,
    population_bases: &'a [crate::protocol::BaseDraft],
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
            weight_column: self.weight_column.as_deref(),
            unweighted: self.weight_column.is_none(),
            group_column: self.group_column.as_deref().filter(|g| !g.is_empty()),
            audience_report_units: self.audience_report_units,
            population_bases: &self.bases,
        };
        toml::to_string(&file).map_err(|error| error.to_string())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::protocol::{BaseDraft, Cell, Sheet, SheetLine};
    use crosstab_contract::app::TableAxis;

    const CSV: &str = "RESPID,WEIGHT,REGION,GENDER\n1,1.5,1,1\n2,2.5,2,2\n3,1,2,2\n";

    fn guided() -> GuidedDefinition {
        GuidedDefinition {
            code: "PRIV".into(),
            name: "Private \"panel\"".into(),
            id_column: "RESPID".into(),
            weight_column: Some("WEIGHT".into()),
            group_column: Some("REGION".into()),
            audience_report_units: 1,
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

    /// Each base of an opened survey: its code, respondents and weighted total.
    fn bases_of(opened: &Opened) -> Vec<(&str, u64, f64)> {
        opened
            .codebook
            .bases
            .iter()
            .map(|b| (b.code.as_str(), b.respondents, b.weighted))
            .collect()
    }

    fn opened(answer: (Answer, Payload)) -> Opened {
        match answer {
            (Ok(Reply::Opened(opened)), Payload::None) => *opened,
            other => panic!("not opened: {other:?}"),
        }
    }

    fn table_of(request: &TableRequest) -> Result<Table, String> {
        match answer(Call::Table(request.clone()), Payload::None) {
            (Ok(Reply::Table(table)), Payload::None) => Ok(*table),
            (Err(message), Payload::None) => Err(message),
            other => panic!("not a table: {other:?}"),
        }
    }

    #[test]
    fn a_file_the_worker_could_not_read_is_said_so_and_opens_nothing() {
        let call = Call::OpenGuided {
            definition: guided(),
            from: "test".into(),
        };
        let (answer, payload) = answer(call, Payload::Unread("NotReadableError".into()));
        assert_eq!(
            answer.unwrap_err(),
            "The file could not be read: NotReadableError"
        );
        assert!(matches!(payload, Payload::None));
        assert!(OPENED.with(|slot| slot.borrow().is_none()));
    }

    /// "No weight column": the definition says `unweighted = true`, and every respondent
    /// counts 1 (the file's WEIGHT then a variable like any other).
    #[test]
    fn an_unweighted_form_counts_every_respondent_one() {
        let form = GuidedDefinition {
            weight_column: None,
            ..guided()
        };
        let toml = form.to_toml().unwrap();
        assert!(toml.contains("unweighted = true"), "{toml}");
        assert!(!toml.contains("weight_column"), "{toml}");
        let call = Call::OpenGuided {
            definition: form,
            from: "test".into(),
        };
        let opened = opened(answer(call, Payload::Text(CSV.into())));
        let bases = bases_of(&opened);
        assert_eq!(bases, [("ALL", 3, 3.0), ("WOMEN", 2, 2.0)]);
        assert!(opened.codebook.variables.iter().any(|v| v.name == "WEIGHT"));
        // The weighted form says nothing of it.
        assert!(!guided().to_toml().unwrap().contains("unweighted"));
    }

    /// The form's choice of units is the survey's: a large file's audiences in
    /// thousands, a small one's as they are.
    #[test]
    fn the_guided_form_sets_the_report_units() {
        let call = Call::OpenGuided {
            definition: GuidedDefinition {
                audience_report_units: 1000,
                ..guided()
            },
            from: "test".into(),
        };
        let opened = opened(answer(call, Payload::Text(CSV.into())));
        assert_eq!(opened.codebook.audience_report_units, 1000);
        let table = table_of(&TableRequest {
            survey: "PRIV".into(),
            population_base: "ALL".into(),
            group: None,
            filter: None,
            rows: vec![TableAxis {
                expression: "GENDER = 2".into(),
                label: None,
            }],
            columns: vec![TableAxis {
                expression: "REGION = 2".into(),
                label: None,
            }],
            confidence: Default::default(),
            bonferroni: false,
            holm: false,
        })
        .unwrap();
        assert_eq!(table.audience_report_units, 1000);
        assert_eq!(table.cells[0][0].wgt_aud, 0.0035);
    }

    #[test]
    fn the_guided_form_writes_a_definition_the_engine_imports() {
        let call = Call::OpenGuided {
            definition: guided(),
            from: "test".into(),
        };
        let opened = opened(answer(call, Payload::Text(CSV.into())));
        assert_eq!(opened.codebook.code, "PRIV");
        assert_eq!(opened.codebook.name, "Private \"panel\"");
        assert_eq!(opened.codebook.respondents, 3);
        assert_eq!(opened.codebook.audience_report_units, 1);
        let bases = bases_of(&opened);
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
            filter: None,
            rows: vec![axis("GENDER = 2"), axis("GENDER = 1")],
            columns: vec![axis("REGION = 2")],
            confidence: Default::default(),
            bonferroni: false,
            holm: false,
        };
        let answer_ = table_of(&request).unwrap();
        assert_eq!(answer_.billed_calls, 0);
        assert_eq!(
            (answer_.cells[0][0].resps, answer_.cells[0][0].weight),
            (2, 3.5)
        );
        assert_eq!(
            (answer_.cells[1][0].resps, answer_.cells[1][0].weight),
            (0, 0.0)
        );
        assert_eq!(answer_.row_totals[1].weight, 1.5);
        // Within a group: respondent 1 (a man, group 1) is left out.
        let in_group = table_of(&TableRequest {
            group: Some("2".into()),
            ..request.clone()
        })
        .unwrap();
        assert_eq!(in_group.row_totals[1].resps, 0);
        assert_eq!(in_group.total.weight, 3.5);
        // Filtered to women: every figure within them, the same as the group here.
        let filtered = table_of(&TableRequest {
            filter: Some("GENDER = 2".into()),
            ..request.clone()
        })
        .unwrap();
        assert_eq!(filtered.filter.as_deref(), Some("GENDER = 2"));
        assert_eq!(filtered.total.weight, 3.5);
        assert_eq!(filtered.row_totals[1].resps, 0);
        assert_eq!(filtered.cells[0][0].weight, 3.5);
        // A filter naming what the survey lacks is refused: it would empty every cell.
        let refused = table_of(&TableRequest {
            filter: Some("GENDR = 2".into()),
            ..request.clone()
        })
        .unwrap_err();
        assert!(
            refused.contains("The filter names what survey PRIV does not define"),
            "{refused}"
        );
        let elsewhere = TableRequest {
            survey: "DEMO".into(),
            ..request.clone()
        };
        assert_eq!(
            table_of(&elsewhere).unwrap_err(),
            ApiError::ForbiddenSurvey.to_string()
        );
        assert_eq!(answer(Call::Start, Payload::None).0, Ok(Reply::Started));
        assert_eq!(answer(Call::Close, Payload::None).0, Ok(Reply::Closed));
        assert_eq!(
            table_of(&request).unwrap_err(),
            ApiError::ForbiddenSurvey.to_string()
        );
    }

    #[test]
    fn a_form_without_bases_or_a_bad_file_or_a_missing_file_says_why() {
        let mut form = guided();
        form.bases.clear();
        assert!(form.to_toml().unwrap_err().contains("base"));
        let mut form = guided();
        form.weight_column = Some("NOPE".into());
        let call = Call::OpenCsv {
            definition: form.to_toml().unwrap(),
            from: "test".into(),
        };
        let error = answer(call, Payload::Text(CSV.into())).0.unwrap_err();
        assert!(error.contains("NOPE"), "{error}");
        let without_file = Call::OpenCompiled { from: "x".into() };
        assert!(answer(without_file, Payload::None)
            .0
            .unwrap_err()
            .contains("without the file"));
        let not_a_survey = Call::OpenCompiled { from: "x".into() };
        let nope = AlignedBytes::copy_of(b"nope").map_err(|e| e.to_string());
        assert!(answer(not_a_survey, Payload::Compiled(nope)).0.is_err());
        // Bytes too large to hold: their reason is the answer.
        let too_large = Call::OpenCompiled { from: "x".into() };
        let reason = "the survey's 5000000000 bytes do not fit in memory".to_owned();
        let (answer_, _) = answer(too_large, Payload::Compiled(Err(reason.clone())));
        assert_eq!(answer_.unwrap_err(), reason);
    }

    #[test]
    fn a_sheet_becomes_a_workbook() {
        let sheet = Sheet {
            caption: vec![("Survey".into(), "DEMO".into())],
            head: vec!["Row".into(), "Figure".into(), "Total".into()],
            lines: vec![SheetLine {
                row: "Women".into(),
                what: "Weighted (000)".into(),
                decimals: 1,
                percent: false,
                values: vec![Cell::Number(1.25)],
            }],
            legend: vec!["* unstable".into()],
        };
        let (reply, payload) = answer(Call::Xlsx(sheet), Payload::None);
        assert_eq!(reply, Ok(Reply::Xlsx));
        let Payload::Bytes(bytes) = payload else {
            panic!("no workbook")
        };
        // An XLSX file is a zip archive.
        assert_eq!(&bytes[..2], b"PK");
    }
}
