//! Import: errors name the file, line, column and reason; compiled surveys round-trip
//! exactly; installs are atomic and a catalog follows replacements.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use crosstab_contract::app::TableRequest;
use crosstab_contract::validate_value;
use crosstab_engine::store::{Catalog, SurveyStore};
use crosstab_engine::{import, ImportError, MemoryBudget, Survey, DOORKEEPER_BYTES};
use serde_json::json;

const TOML: &str = r#"code = "T"
name = "Test"
respondents = "r.csv"
id_column = "ID"
weight_column = "W"
group_column = "G"

[[variables]]
name = "X"
label = "Ex"
values = { "1" = "one" }

[[codes]]
code = "X1"
expr = "X = 1"

[[population_bases]]
code = "ALL"
expr = "*"
"#;

const CSV: &str = "ID,W,G,X,Y\nr1,1.5,A,1,10\nr2,2.25,B,,20\nr3,0,A,2,\n";

fn compile(toml: &str, csv: &str) -> Result<Vec<u8>, ImportError> {
    import::compile(toml, "s.toml", csv.as_bytes(), "r.csv")
}

fn data_error(csv: &str) -> (u64, String, String) {
    match compile(TOML, csv).unwrap_err() {
        ImportError::Data {
            file,
            line,
            column,
            reason,
        } => {
            assert_eq!(file, "r.csv");
            (line, column, reason)
        }
        other => panic!("expected a data error, got {other}"),
    }
}

fn definition_error(toml: &str) -> (usize, String) {
    match compile(toml, CSV).unwrap_err() {
        ImportError::Definition { file, line, reason } => {
            assert_eq!(file, "s.toml");
            (line, reason)
        }
        other => panic!("expected a definition error, got {other}"),
    }
}

#[test]
fn data_errors_name_line_column_and_reason() {
    let cases = [
        ("ID,W,G,X,Y\nr1,,A,1,1\n", 2, "W", "missing weight"),
        ("ID,W,G,X,Y\nr1,1,A,1,1\nr2,-3,A,1,1\n", 3, "W", "negative"),
        ("ID,W,G,X,Y\nr1,inf,A,1,1\n", 2, "W", "not finite"),
        ("ID,W,G,X,Y\nr1,NaN,A,1,1\n", 2, "W", "not finite"),
        ("ID,W,G,X,Y\nr1,abc,A,1,1\n", 2, "W", "not a number"),
        (
            "ID,W,G,X,Y\nr1,1,A,1,1\nr1,1,A,1,1\n",
            3,
            "ID",
            "duplicate respondent id 'r1' (first on line 2)",
        ),
        (
            "ID,W,G,X,Y\nr1,1,A,yes,1\n",
            2,
            "X",
            "'yes' is not a number",
        ),
        (
            "ID,W,G,X,Y\nr1,1,A,1,nan\n",
            2,
            "Y",
            "'nan' is not a number",
        ),
        ("ID,W,G,X,Y\nr1,1,_ALL_,1,1\n", 2, "G", "not _ALL_"),
        ("ID,W,G,X,Y\n,1,A,1,1\n", 2, "ID", "missing respondent id"),
        ("ID,W,G,X,Y\nr1,1,A,1\n", 2, "-", "malformed CSV"),
        ("ID,W,G,X,X\nr1,1,A,1,1\n", 1, "X", "duplicate column name"),
        (
            "ID,G,X\nr1,A,1\n",
            1,
            "W",
            "weight column 'W' is not in the header",
        ),
        ("ID,W,G,X,Y\n", 2, "-", "no respondents"),
        (
            "ID,W,G,X,bad name\nr1,1,A,1,1\n",
            1,
            "bad name",
            "variable column's name",
        ),
    ];
    for (csv, line, column, reason) in cases {
        let (l, c, r) = data_error(csv);
        assert_eq!((l, c.as_str()), (line, column), "{csv:?}: {r}");
        assert!(r.contains(reason), "{csv:?}: {r}");
    }
}

/// Weights each finite but too large together (a sum, or a sum's square, would not be a
/// number: `WgtAud` would be sent as `null`) are refused, naming the weight column.
#[test]
fn weights_too_large_together_are_refused() {
    let csv = |weights: &[&str]| {
        let rows: Vec<String> = weights
            .iter()
            .enumerate()
            .map(|(i, w)| format!("r{i},{w},A,1,1"))
            .collect();
        format!("ID,W,G,X,Y\n{}\n", rows.join("\n"))
    };
    for weights in [&["1e308", "1e308"][..], &["6e99", "5e99"]] {
        match compile(TOML, &csv(weights)).unwrap_err() {
            ImportError::Source {
                file,
                variable,
                reason,
            } => {
                assert_eq!((file.as_str(), variable.as_deref()), ("r.csv", Some("W")));
                assert!(reason.contains("the weights add up to"), "{reason}");
                assert!(reason.contains("1e100"), "{reason}");
            }
            other => panic!("{weights:?}: expected the weights refused, got {other}"),
        }
    }
    // Up to the bound, a survey's figures are numbers.
    let bytes = compile(TOML, &csv(&["5e99", "5e99"])).unwrap();
    let survey = Survey::from_bytes(&bytes).unwrap();
    let request = json!({"SurveyCode": "T", "PopulationBaseCode": "ALL", "TargetCodes": ["X1"]});
    let answer = survey.crosstab(&validate_value(&request).unwrap()).unwrap();
    // In thousands, the default AudienceReportUnits.
    assert_eq!(answer.results[0].wgt_aud, 1e100 / 1000.0);
    // And every figure of a table over them is a number (or absent, as for any survey).
    let table: TableRequest = serde_json::from_value(json!({
        "survey": "T", "populationBase": "ALL",
        "rows": [{"expression": "X1"}, {"expression": "*"}],
        "columns": [{"expression": "X = 1"}, {"expression": "NOT X = 1"}]
    }))
    .unwrap();
    let table = survey.table(&table.validate().unwrap()).unwrap();
    let cells = table
        .cells
        .iter()
        .flatten()
        .chain(&table.row_totals)
        .chain(&table.column_totals)
        .chain([&table.total]);
    for cell in cells {
        let figures = [
            Some(cell.weight),
            Some(cell.weight_squared),
            Some(cell.wgt_aud),
            cell.vertical_pct,
            cell.horizontal_pct,
            cell.vertical_pct_se,
            cell.horizontal_pct_se,
            cell.index,
            cell.effective_n,
            cell.standard_error,
            cell.ci_low,
            cell.ci_high,
            cell.relative_standard_error,
        ];
        assert!(figures.iter().flatten().all(|f| f.is_finite()), "{cell:?}");
    }
}

/// A respondents file that is not there is refused against the definition naming it, at
/// its `respondents` line.
#[test]
fn a_missing_respondents_file_names_the_definition_and_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.toml");
    std::fs::write(&path, TOML).unwrap();
    match import::prepare_file(&path) {
        Err(ImportError::Definition { file, line, reason }) => {
            assert_eq!((file, line), (path.display().to_string(), 3));
            assert!(reason.contains("r.csv does not exist"), "{reason}");
            assert!(reason.contains("definition's directory"), "{reason}");
        }
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("imported without its respondents"),
    }
    std::fs::create_dir(dir.path().join("r.csv")).unwrap();
    match import::prepare_file(&path) {
        Err(ImportError::Definition { reason, .. }) => {
            assert!(reason.contains("r.csv is not a file"), "{reason}");
        }
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("imported a directory"),
    }
}

/// Respondents weighted 0 are respondents all the same: the import says how many.
#[test]
fn respondents_weighted_zero_are_counted_in_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.toml");
    std::fs::write(&path, TOML).unwrap();
    let warnings = |csv: &str| {
        std::fs::write(dir.path().join("r.csv"), csv).unwrap();
        import::prepare_file(&path).unwrap().warnings
    };
    let said = warnings(CSV);
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].ends_with("r.csv: 1 respondent is weighted 0: counted as respondents (Resps, stability) though they add nothing to WgtAud; leave them out of the file to exclude them"), "{said:?}");
    assert!(warnings(&CSV.replace("r2,2.25", "r2,0"))
        .iter()
        .any(|w| w.contains(": 2 respondents are weighted 0")));
    assert_eq!(
        warnings(&CSV.replace("r3,0,", "r3,1,")),
        Vec::<String>::new()
    );
}

/// A spreadsheet's export separated by semicolons or tabs is one column to a CSV reader:
/// the error says what the file is separated by.
#[test]
fn a_file_separated_otherwise_is_said_to_be() {
    for (separator, said) in [(";", "semicolons"), ("\t", "tabs")] {
        let csv = CSV.replace(',', separator);
        let (line, column, reason) = data_error(&csv);
        assert_eq!((line, column.as_str()), (1, "ID"));
        assert!(
            reason.ends_with(&format!("(it is separated by {said}: save it with commas)")),
            "{reason}"
        );
    }
    let (_, _, reason) = data_error(&CSV.replace("ID,", "RESPID,"));
    assert_eq!(reason, "the id column 'ID' is not in the header");
}

#[test]
fn definition_errors_name_the_line() {
    let bad_expr = TOML.replace("expr = \"X = 1\"", "expr = \"X = \"");
    let (line, reason) = definition_error(&bad_expr);
    assert_eq!(line, 15);
    assert!(reason.contains("does not parse"), "{reason}");

    let unknown_var = TOML.replace("expr = \"X = 1\"", "expr = \"Z = 1\"");
    let (line, reason) = definition_error(&unknown_var);
    assert_eq!(line, 15);
    assert!(reason.contains("unknown variable 'Z'"), "{reason}");

    let duplicate = format!("{TOML}\n[[codes]]\ncode = \"X1\"\nexpr = \"X = 2\"\n");
    let (line, reason) = definition_error(&duplicate);
    assert!(reason.contains("duplicate code 'X1'"), "{reason}");
    assert!(line > 15);

    let base_unknown = TOML.replace("expr = \"*\"", "expr = \"NOPE\"");
    let (_, reason) = definition_error(&base_unknown);
    assert!(reason.contains("'NOPE'"), "{reason}");

    let later_code = TOML.replace("expr = \"X = 1\"", "expr = \"X1\"");
    let (_, reason) = definition_error(&later_code);
    assert!(reason.contains("not a code defined before it"), "{reason}");

    let (line, reason) = definition_error(&TOML.replace("weight_column", "weight_colum"));
    assert_eq!(line, 5);
    assert!(reason.contains("unknown field"), "{reason}");

    let (_, reason) = definition_error(&TOML.replace("name = \"X\"", "name = \"Q\""));
    assert!(reason.contains("'Q' is not a numeric column"), "{reason}");

    let no_bases = TOML.replace("[[population_bases]]\ncode = \"ALL\"\nexpr = \"*\"\n", "");
    assert!(definition_error(&no_bases).1.contains("population_bases"));

    // Group labels without the group column: every group would be empty.
    let labels_alone = format!(
        "{}\n[groups]\nA = \"North\"\n",
        TOML.replace("group_column = \"G\"\n", "")
    );
    let (line, reason) = definition_error(&labels_alone);
    assert!(reason.contains("give group_column too"), "{reason}");
    let groups_line = labels_alone.lines().position(|l| l == "[groups]").unwrap() + 1;
    assert_eq!(line, groups_line);

    let bad_code = TOML.replace("code = \"T\"", "code = \"T T\"");
    assert!(definition_error(&bad_code).1.contains("survey code"));

    // A base's code is no identifier: its own line, not the file's first.
    let (line, reason) = definition_error(&TOML.replace("code = \"ALL\"", "code = \"ALL ADULTS\""));
    assert_eq!(line, 18);
    assert!(
        reason.contains("population base code 'ALL ADULTS'"),
        "{reason}"
    );
}

#[test]
fn compiled_survey_round_trips_exactly() {
    let bytes = compile(TOML, CSV).unwrap();
    let survey = Survey::from_bytes(&bytes).unwrap();
    assert_eq!(
        (survey.code(), survey.name(), survey.respondents()),
        ("T", "Test", 3)
    );
    assert_eq!(survey.weights(), &[1.5, 2.25, 0.0]);
    assert_eq!(
        (0..3).map(|r| survey.id(r).unwrap()).collect::<Vec<_>>(),
        vec!["r1", "r2", "r3"]
    );
    assert_eq!(
        (0..3).map(|r| survey.group_of(r)).collect::<Vec<_>>(),
        vec![Some("A"), Some("B"), Some("A")]
    );
    assert_eq!(
        (0..3).map(|r| survey.value("X", r)).collect::<Vec<_>>(),
        vec![Some(1.0), None, Some(2.0)]
    );
    assert_eq!(
        (0..3).map(|r| survey.value("Y", r)).collect::<Vec<_>>(),
        vec![Some(10.0), Some(20.0), None]
    );
    // G is not numeric, so it is a group column only.
    assert_eq!(survey.variable_names().collect::<Vec<_>>(), vec!["X", "Y"]);
    // Same input, same bytes.
    assert_eq!(compile(TOML, CSV).unwrap(), bytes);
    let codebook = survey.codebook();
    assert_eq!(
        codebook.variables[0].values[0].label.as_deref(),
        Some("one")
    );
    assert_eq!(codebook.bases[0].respondents, 3);
    assert_eq!(codebook.bases[0].weighted, 3.75);
}

/// An unweighted survey, said outright: every respondent weighs 1, so `WgtAud` counts
/// respondents; a definition naming neither a weight column nor `unweighted` is refused,
/// as is one naming both.
#[test]
fn an_unweighted_survey_weighs_every_respondent_one() {
    let toml = TOML.replace("weight_column = \"W\"", "unweighted = true");
    let csv = "ID,G,X,Y\nr1,A,1,10\nr2,B,,20\nr3,A,2,\n";
    let bytes = compile(&toml, csv).unwrap();
    // Version 3, which builds before unweighted surveys refuse as newer than they read;
    // a weighted survey stays version 2.
    assert_eq!(bytes[7], 3);
    assert_eq!(compile(TOML, CSV).unwrap()[7], 2);
    for (edit, what) in [
        (
            with_header(&bytes, |h| h["weight_column"] = json!("W")),
            "a version 3 file with a weight column",
        ),
        (
            {
                let mut out = with_header(&bytes, |h| h["format"] = json!(2));
                out[7] = 2;
                out
            },
            "a version 2 file without one",
        ),
    ] {
        match Survey::from_bytes(&edit) {
            Err(e) => assert!(e.to_string().contains("corrupt"), "{what}: {e}"),
            Ok(_) => panic!("{what}: loaded"),
        }
    }
    let survey = Survey::from_bytes(&bytes).unwrap();
    assert_eq!(survey.weights(), &[1.0, 1.0, 1.0]);
    assert_eq!(survey.variable_names().collect::<Vec<_>>(), vec!["X", "Y"]);
    let request = validate_value(&json!({"SurveyCode": "T", "PopulationBaseCode": "ALL",
        "TargetCodes": ["X1", "Y >= 10"]}))
    .unwrap();
    let answer = survey.crosstab(&request).unwrap();
    let figures: Vec<(f64, u64)> = answer
        .results
        .iter()
        .map(|r| (r.wgt_aud * f64::from(answer.audience_report_units), r.resps))
        .collect();
    assert_eq!(figures, [(1.0, 1), (2.0, 2)]);
    // A W column in the file is then a variable like any other.
    let with_w = "ID,W,G,X,Y\nr1,7,A,1,10\n";
    let survey = Survey::from_bytes(&compile(&toml, with_w).unwrap()).unwrap();
    assert_eq!(survey.weights(), &[1.0]);
    assert_eq!(survey.value("W", 0), Some(7.0));

    let forgot = TOML.replace("weight_column = \"W\"\n", "");
    let (line, reason) = definition_error(&forgot);
    assert_eq!(line, 1);
    assert!(reason.contains("unweighted = true"), "{reason}");
    let both = TOML.replace(
        "weight_column = \"W\"",
        "weight_column = \"W\"\nunweighted = true",
    );
    let (line, reason) = definition_error(&both);
    assert_eq!(line, 6);
    assert!(reason.contains("one or the other"), "{reason}");
}

#[test]
fn numeric_group_column_is_also_a_variable() {
    let csv = "ID,W,G,X,Y\nr1,1,1,1,1\nr2,2,2,1,1\n";
    let survey = Survey::from_bytes(&compile(TOML, csv).unwrap()).unwrap();
    assert_eq!(
        survey.variable_names().collect::<Vec<_>>(),
        vec!["G", "X", "Y"]
    );
    assert_eq!(survey.value("G", 1), Some(2.0));
}

#[test]
fn garbage_is_refused_without_panicking() {
    for bytes in [
        &b""[..],
        b"CTXSURV",
        b"CTXSURV\x01\xff\xff\xff\xff\xff\xff\xff\xff",
        b"not a survey at all",
    ] {
        assert!(Survey::from_bytes(bytes).is_err());
    }
    let mut bytes = compile(TOML, CSV).unwrap();
    let len = bytes.len();
    assert!(Survey::from_bytes(&bytes[..len - 1]).is_err(), "truncated");
    bytes[7] = 9;
    assert!(
        matches!(
            Survey::from_bytes(&bytes),
            Err(crosstab_engine::LoadError::UnsupportedVersion(9))
        ),
        "version"
    );
}

/// The JSON header of compiled `bytes`, and its length in the file.
fn header_of(bytes: &[u8]) -> (serde_json::Value, usize) {
    let len = usize::try_from(u64::from_le_bytes(bytes[8..16].try_into().unwrap())).unwrap();
    (serde_json::from_slice(&bytes[16..16 + len]).unwrap(), len)
}

/// Asserts that surveys `a` and `b` (code T) answer `targets` over base ALL alike.
fn answer_alike(a: &Survey, b: &Survey, targets: [&str; 2]) {
    let request = validate_value(&json!({
        "SurveyCode": "T", "PopulationBaseCode": "ALL", "TargetCodes": targets,
    }))
    .unwrap();
    assert_eq!(a.crosstab(&request).unwrap(), b.crosstab(&request).unwrap());
}

/// `bytes` with its header rewritten by `edit`, padded to the same length so the body
/// stays where the header's offsets say, and sealed: a crafted file, not a damaged one.
fn with_header(bytes: &[u8], edit: impl FnOnce(&mut serde_json::Value)) -> Vec<u8> {
    let (mut header, len) = header_of(bytes);
    edit(&mut header);
    let mut json = serde_json::to_vec(&header).unwrap();
    assert!(json.len() <= len, "the edit must not lengthen the header");
    json.resize(len, b' ');
    let mut out = bytes.to_vec();
    out[16..16 + len].copy_from_slice(&json);
    sealed(out)
}

/// Bytes of the checksum that ends a compiled file.
const CHECKSUM_LEN: usize = 16;

/// `bytes` with the checksum their header names written again over their end (what a
/// writer of crafted files would do): what they hold is then checked for itself.
fn sealed(bytes: Vec<u8>) -> Vec<u8> {
    crosstab_engine::testing::resealed(&bytes).unwrap_or(bytes)
}

/// The same file as a build before checksums wrote it: no checksum named, none at the end.
fn unchecked(bytes: &[u8]) -> Vec<u8> {
    let mut old = with_header(bytes, |h| {
        h.as_object_mut().unwrap().remove("checksum");
    });
    old.truncate(old.len() - CHECKSUM_LEN);
    old
}

/// A compiled file ends with its checksum: bytes damaged anywhere (header, body, end)
/// are refused when loaded from memory and found by `verify` in an installed file; the
/// checksum names the survey's data; files from before checksums still load.
#[test]
fn damaged_files_are_refused_by_their_checksum() {
    let bytes = compile(TOML, CSV).unwrap();
    let (header, header_len) = header_of(&bytes);
    assert_eq!(header["checksum"], "xxh3-128");
    let survey = Survey::from_bytes(&bytes).unwrap();
    assert!(survey.verify().unwrap());
    let version = survey.data_version().unwrap();
    assert!(version.len() == 32 && version.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(survey.codebook().data_version.as_ref(), Some(&version));
    // Compiled again, the same version; from other respondents, another.
    let again = Survey::from_bytes(&compile(TOML, CSV).unwrap()).unwrap();
    assert_eq!(again.data_version(), Some(version.clone()));
    let other = compile(TOML, &CSV.replace("r3,0,A,2,", "r3,0,A,1,")).unwrap();
    assert_ne!(
        Survey::from_bytes(&other).unwrap().data_version(),
        Some(version)
    );

    let weight = bytes
        .windows(8)
        .position(|w| w == 2.25f64.to_le_bytes())
        .unwrap();
    let name = 16 + header_len / 2;
    let damaged = |at: usize| {
        let mut out = bytes.clone();
        out[at] ^= 0x01;
        out
    };
    let mut longer = bytes.clone();
    longer.push(0);
    for (edited, what) in [
        (damaged(weight), "a weight's bit"),
        (damaged(name), "a header's bit"),
        (damaged(bytes.len() - 1), "the checksum's bit"),
        (longer, "a byte added"),
        (bytes[..bytes.len() - 1].to_vec(), "the last byte lost"),
    ] {
        match Survey::from_bytes(&edited) {
            Err(e) => assert!(
                e.to_string().starts_with("corrupt compiled survey"),
                "{what}: {e}"
            ),
            Ok(_) => panic!("{what}: loaded"),
        }
    }
    match Survey::from_bytes(&damaged(weight)) {
        Err(e) => assert!(e.to_string().contains("checksum does not match"), "{e}"),
        Ok(_) => panic!("loaded"),
    }
    // Installing damaged bytes changes nothing.
    let dir = tempfile::tempdir().unwrap();
    let store = SurveyStore::open(dir.path()).unwrap();
    let error = store.install(&damaged(weight)).unwrap_err();
    assert!(
        error.to_string().contains("checksum does not match"),
        "{error}"
    );
    assert_eq!(store.codes().unwrap(), Vec::<String>::new());
    // An installed file opens by its header alone; `verify` reads it all.
    store.install(&bytes).unwrap();
    assert!(store.load("T").unwrap().verify().unwrap());
    std::fs::write(store.path_of("T"), damaged(weight)).unwrap();
    let opened = store.load("T").unwrap();
    assert!(opened
        .verify()
        .unwrap_err()
        .to_string()
        .contains("checksum does not match"));
    // A file cut short under an open survey: `verify` reads the file, not the map (whose
    // pages past the end would stop the process), and says it could not.
    std::fs::write(store.path_of("T"), &bytes).unwrap();
    let opened = store.load("T").unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(store.path_of("T"))
        .unwrap()
        .set_len(100)
        .unwrap();
    match opened.verify() {
        Err(error @ crosstab_engine::LoadError::Io { .. }) => {
            assert!(error.to_string().contains("T.ctxs"), "{error}");
        }
        other => panic!("{other:?}"),
    }
    drop(opened);

    // A file from before checksums: no version, nothing to verify, the same answers.
    let old = Survey::from_bytes(&unchecked(&bytes)).unwrap();
    assert_eq!((old.data_version(), old.verify().unwrap()), (None, false));
    assert_eq!(old.codebook().data_version, None);
    answer_alike(&old, &survey, ["X = 1", "Y >= 10"]);
    // A header whose checksum's name was damaged is not taken for one from before them:
    // its file ends 16 bytes past its sections.
    let renamed = with_header(&bytes, |h| {
        let object = h.as_object_mut().unwrap();
        let kind = object.remove("checksum").unwrap();
        object.insert("checksul".into(), kind);
    });
    match Survey::from_bytes(&renamed) {
        Err(e) => assert!(e.to_string().contains("where its sections end at"), "{e}"),
        Ok(_) => panic!("loaded"),
    }
    // A checksum this build does not know is not taken for none.
    let unknown = with_header(&bytes, |h| h["checksum"] = json!("sha-1"));
    match Survey::from_bytes(&unknown) {
        Err(e) => assert!(
            e.to_string()
                .contains("'sha-1', which this build does not know"),
            "{e}"
        ),
        Ok(_) => panic!("loaded"),
    }
}

#[test]
fn corrupt_sections_are_load_errors_that_say_so() {
    let bytes = compile(TOML, CSV).unwrap();
    let corrupt = |edited: Vec<u8>, what: &str| match Survey::from_bytes(&edited) {
        Err(e) => assert!(e.to_string().contains("corrupt"), "{what}: {e}"),
        Ok(_) => panic!("{what}: a corrupt survey loaded"),
    };
    corrupt(
        with_header(&bytes, |h| h["group_codes"] = serde_json::Value::Null),
        "groups without group codes",
    );
    corrupt(
        with_header(&bytes, |h| {
            let offset = h["variables"][0]["dict"]["offset"].as_u64().unwrap();
            h["variables"][0]["dict"]["offset"] = json!(offset - 4);
        }),
        "a misaligned section",
    );
    corrupt(
        with_header(&bytes, |h| h["weights"]["len"] = json!(8)),
        "weights shorter than the respondents",
    );
    // X has two values, so its codes are two bit planes of one word each.
    assert_eq!(
        Survey::from_bytes(&bytes).unwrap().variable_names().next(),
        Some("X")
    );
    corrupt(
        with_header(&bytes, |h| h["variables"][0]["codes"]["len"] = json!(8)),
        "two-bit planes shorter than the respondents",
    );
    corrupt(
        with_header(&bytes, |h| h["variables"][0]["width"] = json!("U8")),
        "two-bit planes read as bytes",
    );
    // What the import refuses, a damaged file may not bring in: units of 0 (every WgtAud
    // infinite), and a weight not finite or below 0 (every sum wrong).
    corrupt(
        with_header(&bytes, |h| h["audience_report_units"] = json!(0)),
        "audience report units of 0",
    );
    let second = 2.25f64.to_le_bytes();
    let at = bytes
        .windows(8)
        .position(|w| w == second)
        .expect("the second weight is in the file");
    for (weight, said) in [
        (f64::NAN, "respondent 1's weight"),
        (f64::INFINITY, "respondent 1's weight"),
        (-1.0, "respondent 1's weight"),
        // Finite, but sums and their squares would not be numbers.
        (f64::MAX, "the weights add up to"),
    ] {
        let mut edited = bytes.clone();
        edited[at..at + 8].copy_from_slice(&weight.to_le_bytes());
        match Survey::from_bytes(&sealed(edited)) {
            Err(e) => assert!(e.to_string().contains(said), "{weight}: {e}"),
            Ok(_) => panic!("a weight of {weight} loaded"),
        }
    }
    // The untouched file still loads: the rewriting itself is sound.
    assert!(Survey::from_bytes(&with_header(&bytes, |_| {})).is_ok());
}

/// A version 1 file (from before two-bit columns) still loads; one claiming a two-bit
/// column, or whose header and first bytes disagree on the version, is corrupt.
#[test]
fn version_1_files_load_and_two_bit_columns_need_version_2() {
    let as_version_1 = |bytes: &[u8]| {
        let mut out = with_header(bytes, |h| h["format"] = json!(1));
        out[7] = 1;
        sealed(out)
    };
    // Four values in each column: byte codes, as version 1 wrote them.
    let wide = "ID,W,G,X,Y\nr1,1,A,1,10\nr2,2,B,2,20\nr3,3,A,3,30\nr4,4,B,4,40\n";
    let current = compile(TOML, wide).unwrap();
    assert_eq!(current[7], 2, "written as version 2");
    let old = Survey::from_bytes(&as_version_1(&current)).unwrap();
    assert_eq!(old.value("Y", 3), Some(40.0));
    answer_alike(
        &old,
        &Survey::from_bytes(&current).unwrap(),
        ["X >= 2", "Y = 10"],
    );
    let narrow = compile(TOML, CSV).unwrap();
    for (bytes, what) in [
        (
            as_version_1(&narrow),
            "a two-bit column in a version 1 file",
        ),
        (
            with_header(&narrow, |h| h["format"] = json!(1)),
            "a version 1 header in a version 2 file",
        ),
    ] {
        match Survey::from_bytes(&bytes) {
            Err(e) => assert!(e.to_string().contains("corrupt"), "{what}: {e}"),
            Ok(_) => panic!("{what}: loaded"),
        }
    }
}

/// Bits set past the last respondent in a two-bit column (a hostile file; a compiled one
/// has none) answer for nobody.
#[test]
fn two_bit_planes_past_the_last_respondent_count_for_nobody() {
    let bytes = compile(TOML, CSV).unwrap();
    let (header, _) = header_of(&bytes);
    let offset =
        usize::try_from(header["variables"][0]["codes"]["offset"].as_u64().unwrap()).unwrap();
    let mut hostile = bytes.clone();
    // Rows 56-63 of X's low plane: code 1 (X = 1) for eight respondents who don't exist.
    hostile[offset + 7] = 0xff;
    let survey = Survey::from_bytes(&sealed(hostile)).unwrap();
    assert_eq!(survey.value("X", 60), None);
    answer_alike(
        &survey,
        &Survey::from_bytes(&bytes).unwrap(),
        ["X = 1", "NOT X = 2"],
    );
}

/// A replacement damaged on disk is found by the catalog's check before it is served:
/// the version before stays served, the failure is said once (not read and said again
/// every refresh), and a sound replacement after it is loaded, even one repaired in place.
#[test]
fn a_catalog_serves_no_damaged_file_and_says_so_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = SurveyStore::open(dir.path()).unwrap();
    let bytes = compile(TOML, CSV).unwrap();
    store.install(&bytes).unwrap();
    let (catalog, first) = Catalog::new(store.clone());
    assert_eq!(first.loaded, vec!["T".to_owned()]);
    // What a disk can do to a file after it was written: one bit of a weight flipped, in a
    // file put in place as installs are (by rename), so the catalog sees a new version.
    let replacement = compile(TOML, &CSV.replace("r3,0,A,2,", "r3,0,A,1,")).unwrap();
    let weight = replacement
        .windows(8)
        .position(|w| w == 2.25f64.to_le_bytes())
        .unwrap();
    let mut damaged = replacement.clone();
    damaged[weight] ^= 0x01;
    let put = |bytes: &[u8]| {
        let temp = dir.path().join("surveys/.put");
        std::fs::write(&temp, bytes).unwrap();
        std::fs::rename(&temp, store.path_of("T")).unwrap();
    };
    put(&damaged);
    let refused = catalog.refresh();
    assert_eq!(refused.loaded, Vec::<String>::new());
    assert_eq!(refused.failed.len(), 1);
    assert!(
        refused.failed[0].1.contains("checksum does not match"),
        "{refused:?}"
    );
    let served = catalog.get("T").unwrap();
    assert_eq!(
        served.data_version(),
        Survey::from_bytes(&bytes).unwrap().data_version()
    );
    assert_eq!(catalog.refresh(), Default::default(), "said once");
    // One that cannot be read at all (a directory here) is said once too, for a while.
    std::fs::create_dir(store.path_of("U")).unwrap();
    let unread = catalog.refresh();
    assert_eq!(unread.failed.len(), 1, "{unread:?}");
    assert_eq!(unread.failed[0].0, "U");
    assert_eq!(
        catalog.refresh(),
        Default::default(),
        "said once, not every refresh"
    );
    std::fs::remove_dir(store.path_of("U")).unwrap();
    // Repaired in place, as `rsync --inplace` would: the same file, length and
    // modification time, one byte written back; seen by the inode's change time (unix).
    #[cfg(unix)]
    {
        use std::io::{Seek as _, SeekFrom, Write as _};
        use std::os::unix::fs::MetadataExt as _;
        let path = store.path_of("T");
        let before = std::fs::metadata(&path).unwrap();
        // Past a coarse clock's tick (kernels before multigrain timestamps), so the
        // change time moves.
        std::thread::sleep(std::time::Duration::from_millis(25));
        let mut file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.seek(SeekFrom::Start(weight as u64)).unwrap();
        file.write_all(&replacement[weight..=weight]).unwrap();
        file.set_modified(before.modified().unwrap()).unwrap();
        drop(file);
        let after = std::fs::metadata(&path).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), replacement);
        assert_eq!(
            (after.len(), after.modified().unwrap(), after.ino()),
            (before.len(), before.modified().unwrap(), before.ino())
        );
        assert_ne!(
            (after.ctime(), after.ctime_nsec()),
            (before.ctime(), before.ctime_nsec())
        );
        assert_eq!(
            catalog.refresh().loaded,
            vec!["T".to_owned()],
            "the repair is seen"
        );
        assert_eq!(
            catalog.get("T").unwrap().data_version(),
            Survey::from_bytes(&replacement).unwrap().data_version()
        );
    }
    // Replaced by rename, as installs are.
    put(&bytes);
    assert_eq!(catalog.refresh().loaded, vec!["T".to_owned()]);
    assert_eq!(
        catalog.get("T").unwrap().data_version(),
        Survey::from_bytes(&bytes).unwrap().data_version()
    );
    // A served file whose mode or links change (a backup's hard link) is the same
    // version: not read and loaded again.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let path = store.path_of("T");
        std::thread::sleep(std::time::Duration::from_millis(25));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::hard_link(&path, dir.path().join("backup.ctxs")).unwrap();
        assert_eq!(catalog.refresh(), Default::default(), "the same version");
    }
}

#[test]
fn every_surveys_caches_stay_within_one_budget_and_give_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let store = SurveyStore::open(dir.path()).unwrap();
    // Three respondents: a set is 8 bytes, so 2 KiB beside the two surveys' doorkeepers
    // holds a few dozen entries.
    store.install(&compile(TOML, CSV).unwrap()).unwrap();
    let other = TOML.replacen("code = \"T\"", "code = \"U\"", 1);
    store.install(&compile(&other, CSV).unwrap()).unwrap();
    let fixed = 2 * DOORKEEPER_BYTES;
    let budget = MemoryBudget::new(2048 + fixed);
    let (catalog, refresh) = Catalog::within(store.clone(), &budget);
    assert_eq!(refresh.loaded.len(), 2);
    let mut peak = 0;
    for n in 0..400 {
        for code in ["T", "U"] {
            let survey = catalog.get(code).unwrap();
            let fresh = Survey::open(&store.path_of(code)).unwrap();
            // Distinct composite targets, each asked twice (kept on its second sight).
            let target = format!("Y >= {n} OR X = 1");
            let request = validate_value(&json!({
                "SurveyCode": code, "PopulationBaseCode": "ALL",
                "TargetCodes": [target.clone(), target],
            }))
            .unwrap();
            assert_eq!(
                survey.crosstab(&request).unwrap(),
                fresh.crosstab(&request).unwrap()
            );
            peak = peak.max(budget.used());
        }
    }
    assert!(peak > 1024 + fixed, "the caches were used: {peak}");
    assert!(peak <= budget.limit(), "{peak} > {}", budget.limit());
    drop(catalog);
    assert_eq!(budget.used(), 0, "unloaded surveys give their bytes back");
}

#[test]
fn mmap_and_bytes_answer_alike_and_installs_replace_atomically() {
    let dir = tempfile::tempdir().unwrap();
    let store = SurveyStore::open(dir.path()).unwrap();
    let first = compile(TOML, CSV).unwrap();
    store.install(&first).unwrap();
    let (catalog, refresh) = Catalog::new(store.clone());
    assert_eq!(refresh.loaded, vec!["T".to_owned()]);
    let request = validate_value(
        &json!({"SurveyCode": "T", "PopulationBaseCode": "ALL", "TargetCodes": ["X1", "Y >= 10"]}),
    )
    .unwrap();
    let old = catalog.get("T").unwrap();
    let from_bytes = Survey::from_bytes(&first).unwrap();
    assert_eq!(
        old.crosstab(&request).unwrap(),
        from_bytes.crosstab(&request).unwrap()
    );

    // A bad import leaves nothing behind and the old survey installed.
    assert!(store.install(b"garbage").is_err());
    let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("surveys"))
        .unwrap()
        .collect();
    assert_eq!(leftovers.len(), 1);

    // Replace: the catalog serves the old survey until refresh, then the new one; a
    // holder of the old Arc keeps answering from the old data.
    let second = compile(TOML, &CSV.replace("r1,1.5", "r1,100")).unwrap();
    store.install(&second).unwrap();
    assert_eq!(catalog.get("T").unwrap().weights()[0], 1.5);
    let refresh = catalog.refresh();
    assert_eq!(refresh.loaded, vec!["T".to_owned()]);
    assert_eq!(catalog.get("T").unwrap().weights()[0], 100.0);
    assert_eq!(old.weights()[0], 1.5);
    assert_eq!(
        catalog.refresh().loaded.len(),
        0,
        "unchanged file is not reloaded"
    );

    // A store that can't be listed (here: its directory replaced by a file) changes
    // nothing: every survey stays served, and the refresh says why.
    let surveys = dir.path().join("surveys");
    let aside = dir.path().join("surveys.aside");
    std::fs::rename(&surveys, &aside).unwrap();
    std::fs::write(&surveys, b"not a directory").unwrap();
    let refresh = catalog.refresh();
    assert!(refresh.unlisted.is_some(), "{refresh:?}");
    assert!(refresh.removed.is_empty() && refresh.loaded.is_empty());
    assert_eq!(catalog.get("T").unwrap().weights()[0], 100.0);
    std::fs::remove_file(&surveys).unwrap();
    std::fs::rename(&aside, &surveys).unwrap();
    assert_eq!(catalog.refresh(), Default::default(), "back as it was");

    std::fs::remove_file(store.path_of("T")).unwrap();
    assert_eq!(catalog.refresh().removed, vec!["T".to_owned()]);
    assert!(catalog.get("T").is_none());
}

#[test]
fn vector_survey_file_compiles_from_disk() {
    let path = crosstab_contract::vectors::dir().join("survey/survey.toml");
    let survey = Survey::from_bytes(&import::compile_file(Path::new(&path)).unwrap()).unwrap();
    assert_eq!(survey.respondents(), 8);
    assert_eq!(survey.group_names().collect::<Vec<_>>(), vec!["N", "S"]);
    let totals = survey.base_totals("ALL").unwrap();
    assert_eq!((totals.count, totals.weight), (8, 15500.0));
}
