//! SPSS import: files written by pyreadstat (committed fixtures, regenerated when
//! `CROSSTAB_PYREADSTAT` names a python with pyreadstat) and by ambers' own writer
//! import to exactly the figures of the same data as CSV, with every label; hostile
//! files give clean errors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{Float64Builder, RecordBatch, StringBuilder};
use arrow::datatypes::{DataType, Field, Schema};
use crosstab_engine::store::SurveyStore;
use crosstab_engine::{import, ImportError, Survey};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sav")
}

/// The definition both the SPSS files and the CSV are imported with.
fn definition(respondents: &Path) -> String {
    format!(
        r#"code = "FIX"
name = "Fixture"
respondents = {respondents:?}
id_column = "RESPID"
weight_column = "WEIGHT"
group_column = "REGION"

[[codes]]
code = "HAPPY"
expr = "SAT >= 4"

[[population_bases]]
code = "ALL"
expr = "*"

[[population_bases]]
code = "WOMEN"
label = "Women"
expr = "GENDER = 2"

[[population_bases]]
code = "HAPPY_OLD"
expr = "HAPPY AND AGE >= 50"

[[population_bases]]
code = "RICH_RECENT"
expr = "INCOME > 75000 AND VISITED >= 19800 AND NOT SCORE < 0"
"#,
        respondents = respondents.display().to_string()
    )
}

fn import_with(dir: &Path, toml: &str) -> Result<(Survey, import::Prepared), ImportError> {
    let path = dir.join("survey.toml");
    std::fs::write(&path, toml).unwrap();
    let prepared = import::prepare_file(&path)?;
    let survey = Survey::from_bytes(&prepared.to_bytes().unwrap()).unwrap();
    Ok((survey, prepared))
}

fn import(respondents: &Path) -> Result<(Survey, import::Prepared), ImportError> {
    let dir = tempfile::tempdir().unwrap();
    import_with(dir.path(), &definition(respondents))
}

/// Every figure of `a` equals `b`'s: respondents, ids, weights, groups, every value of
/// every variable, and each base's totals.
fn assert_same_figures(a: &Survey, b: &Survey) {
    assert_eq!(a.respondents(), b.respondents());
    assert_eq!(a.weights(), b.weights());
    let names: Vec<&str> = a.variable_names().collect();
    assert_eq!(names, b.variable_names().collect::<Vec<_>>());
    for row in 0..a.respondents() {
        assert_eq!(a.id(row), b.id(row));
        assert_eq!(a.group_of(row), b.group_of(row));
        for name in &names {
            assert_eq!(a.value(name, row), b.value(name, row), "{name} row {row}");
        }
    }
    let (ca, cb) = (a.codebook(), b.codebook());
    assert_eq!(ca.bases.len(), cb.bases.len());
    for (x, y) in ca.bases.iter().zip(&cb.bases) {
        assert_eq!(
            (&x.code, x.respondents, x.weighted),
            (&y.code, y.respondents, y.weighted)
        );
    }
    for (x, y) in ca.variables.iter().zip(&cb.variables) {
        assert_eq!(
            (x.distinct, x.min, x.max),
            (y.distinct, y.min, y.max),
            "{}",
            x.name
        );
    }
}

/// The codebook shows every label the fixture script wrote, for each value that occurs.
fn assert_labels(survey: &Survey, dir: &Path) {
    let labels: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("labels.json")).unwrap()).unwrap();
    let codebook = survey.codebook();
    for (name, expected) in labels.as_object().unwrap() {
        let variable = codebook
            .variables
            .iter()
            .find(|v| &v.name == name)
            .unwrap_or_else(|| panic!("no variable {name}"));
        assert_eq!(
            variable.label.as_deref(),
            expected["label"].as_str(),
            "{name}"
        );
        for (value, label) in expected["values"].as_object().unwrap() {
            let value: f64 = value.parse().unwrap();
            if let Some(entry) = variable.values.iter().find(|v| v.value == value) {
                assert_eq!(entry.label.as_deref(), label.as_str(), "{name} = {value}");
            }
        }
    }
    // The group's value labels name the groups.
    let northeast = codebook.groups.iter().find(|g| g.value == "1").unwrap();
    assert_eq!(northeast.label.as_deref(), Some("Northeast"));
}

fn check_fixtures(dir: &Path) {
    let (csv, csv_prepared) = import(&dir.join("respondents.csv")).unwrap();
    assert_eq!(csv.source_format(), Some("csv"));
    assert!(csv_prepared.warnings.is_empty());
    assert_eq!(csv.respondents(), 300);
    for (file, format) in [
        ("labelled.sav", "sav"),
        ("labelled-rows.sav", "sav"),
        ("labelled.zsav", "zsav"),
    ] {
        let (sav, prepared) = import(&dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(sav.source_format(), Some(format), "{file}");
        assert_same_figures(&sav, &csv);
        assert_labels(&sav, dir);
        // COMMENT is a string: skipped, and said so; so are the labelled user-missing
        // values (AGE 99, SAT 8 and 9), whose labels no answer keeps.
        assert_eq!(prepared.warnings.len(), 2, "{:?}", prepared.warnings);
        assert!(
            prepared.warnings[0].contains("COMMENT") && prepared.warnings[0].contains(file),
            "{}",
            prepared.warnings[0]
        );
        assert!(
            prepared.warnings[1].ends_with("their value labels are left out: AGE, SAT"),
            "{}",
            prepared.warnings[1]
        );
        // User-missing values (AGE 99, SAT 8-9) and system-missing ones are missing.
        let missing_age = (0..sav.respondents())
            .filter(|row| sav.value("AGE", *row).is_none())
            .count();
        assert!(missing_age > 0);
        assert!((0..sav.respondents()).all(|row| sav.value("SAT", row).is_none_or(|v| v <= 5.0)));
    }
    // The same figures from Parquet written by pyarrow: integer columns, nulls, a large
    // string id; no labels (Parquet has none) and nothing skipped.
    let (parquet, prepared) = import(&dir.join("respondents.parquet")).unwrap();
    assert_eq!(parquet.source_format(), Some("parquet"));
    assert!(prepared.warnings.is_empty(), "{:?}", prepared.warnings);
    assert_same_figures(&parquet, &csv);
}

#[test]
fn pyreadstat_files_import_to_the_csv_figures_with_every_label() {
    check_fixtures(&fixtures());
}

#[test]
fn regenerated_pyreadstat_files_import_to_the_csv_figures() {
    // Only where the venv exists: `CROSSTAB_PYREADSTAT=$HOME/.cache/crosstab-venv/bin/python`.
    let Ok(python) = std::env::var("CROSSTAB_PYREADSTAT") else {
        eprintln!("CROSSTAB_PYREADSTAT not set: checked the committed fixtures only");
        return;
    };
    let out = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/make-sav-fixtures.py");
    let status = std::process::Command::new(python)
        .arg(script)
        .arg(out.path())
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(
        std::fs::read(out.path().join("respondents.csv")).unwrap(),
        std::fs::read(fixtures().join("respondents.csv")).unwrap(),
        "the committed CSV is the script's"
    );
    check_fixtures(out.path());
}

#[test]
fn definition_labels_override_the_files() {
    let dir = tempfile::tempdir().unwrap();
    let toml = definition(&fixtures().join("labelled.sav")).replace(
        "[[codes]]",
        "[groups]\n\"1\" = \"NE\"\n\n[[variables]]\nname = \"GENDER\"\nlabel = \"Sex\"\nvalues = { \"2\" = \"Woman\" }\n\n[[variables]]\nname = \"SAT\"\nlabel = \"Happiness\"\n\n[[codes]]",
    );
    let (survey, _) = import_with(dir.path(), &toml).unwrap();
    let codebook = survey.codebook();
    let find = |name: &str| codebook.variables.iter().find(|v| v.name == name).unwrap();
    assert_eq!(find("GENDER").label.as_deref(), Some("Sex"));
    let labels: Vec<_> = find("GENDER")
        .values
        .iter()
        .map(|v| v.label.clone())
        .collect();
    assert_eq!(labels, vec![None, Some("Woman".into())]);
    // A label alone keeps the file's value labels.
    assert_eq!(find("SAT").label.as_deref(), Some("Happiness"));
    assert_eq!(find("SAT").values[0].label.as_deref(), Some("Very unhappy"));
    assert_eq!(codebook.groups[0].label.as_deref(), Some("NE"));
}

#[test]
fn format_key_overrides_the_extension() {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("data.bin");
    std::fs::copy(fixtures().join("labelled.zsav"), &copy).unwrap();
    let toml = definition(&copy).replace("id_column", "format = \"sav\"\nid_column");
    let (survey, _) = import_with(dir.path(), &toml).unwrap();
    assert_eq!(survey.source_format(), Some("zsav"));
    // Without it, the unknown extension is read as CSV, and fails as one.
    assert!(import_with(dir.path(), &definition(&copy)).is_err());
}

/// `init` says the file's format outright: its definition imports a file named without
/// .sav or .zsav (read as CSV otherwise).
#[test]
fn init_names_the_format_of_a_file_without_its_extension() {
    let dir = tempfile::tempdir().unwrap();
    for (fixture, format) in [("labelled.zsav", "zsav"), ("labelled.sav", "sav")] {
        let copy = dir.path().join(format!("{format}-data.bin"));
        std::fs::copy(fixtures().join(fixture), &copy).unwrap();
        let text =
            import::init_definition(&copy, "FIX", "RESPID", Some("WEIGHT"), None, None).unwrap();
        assert!(text.contains(&format!("format = \"{format}\"\n")), "{text}");
        let (survey, _) = import_with(dir.path(), &text).unwrap();
        assert_eq!(survey.respondents(), 300);
    }
}

/// `init --unweighted` says so in the definition, which imports the SPSS file with every
/// respondent weighing 1 (the file's WEIGHT then a variable like any other).
#[test]
fn an_unweighted_definition_weighs_every_case_one() {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("data.sav");
    std::fs::copy(fixtures().join("labelled.sav"), &copy).unwrap();
    let text = import::init_definition(&copy, "FIX", "RESPID", None, None, None).unwrap();
    assert!(text.contains("\nunweighted = true\n"), "{text}");
    assert!(!text.contains("weight_column"), "{text}");
    let (survey, _) = import_with(dir.path(), &text).unwrap();
    assert_eq!(survey.respondents(), 300);
    assert!(survey.weights().iter().all(|w| *w == 1.0));
    assert!(survey.variable_names().any(|name| name == "WEIGHT"));
    let (weighted, _) = import(&fixtures().join("labelled.sav")).unwrap();
    assert!(weighted.weights().iter().any(|w| *w != 1.0));
}

/// A definition of `respondents` with its id RESPID, its weight WEIGHT and one base, ALL.
fn plain_definition(respondents: &Path) -> String {
    format!(
        "code = \"T\"\nname = \"T\"\nrespondents = {:?}\nid_column = \"RESPID\"\n\
         weight_column = \"WEIGHT\"\n[[population_bases]]\ncode = \"ALL\"\nexpr = \"*\"\n",
        respondents.display().to_string()
    )
}

fn source_reason(error: ImportError) -> String {
    match error {
        ImportError::Source { file, reason, .. } => {
            assert!(!file.is_empty());
            reason
        }
        other => panic!("expected a source error, got {other}"),
    }
}

fn import_bytes(bytes: &[u8], extension: &str) -> Result<(Survey, import::Prepared), ImportError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("hostile.{extension}"));
    std::fs::write(&path, bytes).unwrap();
    import_with(dir.path(), &definition(&path))
}

#[test]
fn case_errors_name_file_case_variable_and_reason() {
    // Negative and missing weights, a duplicate id: written by ambers' own writer.
    let write = |weights: &[Option<f64>], ids: &[&str]| {
        let mut id = StringBuilder::new();
        let mut weight = Float64Builder::new();
        let mut x = Float64Builder::new();
        for (i, w) in weights.iter().enumerate() {
            id.append_value(ids[i]);
            weight.append_option(*w);
            x.append_value(1.0);
        }
        let schema = Arc::new(Schema::new(vec![
            Field::new("RESPID", DataType::Utf8, true),
            Field::new("WEIGHT", DataType::Float64, true),
            Field::new("X", DataType::Float64, true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(id.finish()),
                Arc::new(weight.finish()),
                Arc::new(x.finish()),
            ],
        )
        .unwrap();
        let meta = ambers::SpssMetadata::from_arrow_schema(&schema);
        let mut out = Cursor::new(Vec::new());
        ambers::write_sav_to_writer(&mut out, &batch, &meta, ambers::Compression::Bytecode, None)
            .unwrap();
        out.into_inner()
    };
    let toml = plain_definition;
    let cases = [
        (
            write(&[Some(1.0), Some(-2.0)], &["a", "b"]),
            2,
            "WEIGHT",
            "negative",
        ),
        (
            write(&[Some(1.0), None], &["a", "b"]),
            2,
            "WEIGHT",
            "missing weight",
        ),
        (
            write(&[Some(1.0), Some(1.0), Some(1.0)], &["a", "b", "a"]),
            3,
            "RESPID",
            "duplicate respondent id 'a' (first in case 1)",
        ),
        (
            write(&[Some(1.0), Some(1.0)], &["a", " "]),
            2,
            "RESPID",
            "missing respondent id",
        ),
    ];
    for (bytes, case, variable, reason) in cases {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.sav");
        std::fs::write(&path, bytes).unwrap();
        match import_with(dir.path(), &toml(&path)).unwrap_err() {
            ImportError::Case {
                file,
                case: c,
                variable: v,
                reason: r,
            } => {
                assert_eq!(file, path.display().to_string());
                assert_eq!((c, v.as_str()), (case, variable), "{r}");
                assert!(r.contains(reason), "{r}");
            }
            other => panic!("expected a case error, got {other}"),
        }
    }
    // A string weight, a missing id variable.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.sav");
    std::fs::write(&path, write(&[Some(1.0)], &["a"])).unwrap();
    let text = toml(&path).replace("\"WEIGHT\"", "\"RESPID\"");
    assert!(source_reason(import_with(dir.path(), &text).unwrap_err()).contains("must be numeric"));
    let text = toml(&path).replace("id_column = \"RESPID\"", "id_column = \"NOPE\"");
    let error = import_with(dir.path(), &text).unwrap_err();
    assert!(error.to_string().contains("variable NOPE"), "{error}");
}

/// A survey with a dichotomy set `$BRANDS` and a category set `$COLOURS`, written by
/// ambers' own writer (which puts every set in both set records, 7 and 19) to `dir` as
/// `mr.sav` with `compression`, and as `mr.csv`: their paths.
fn write_sets(dir: &Path, compression: ambers::Compression) -> (PathBuf, PathBuf) {
    let n = 200;
    let schema = Arc::new(Schema::new(vec![
        Field::new("RESPID", DataType::Utf8, true),
        Field::new("WEIGHT", DataType::Float64, true),
        Field::new("Q_A", DataType::Float64, true),
        Field::new("Q_B", DataType::Float64, true),
        Field::new("Q_C", DataType::Float64, true),
        Field::new("CAT1", DataType::Float64, true),
        Field::new("CAT2", DataType::Float64, true),
    ]));
    let mut id = StringBuilder::new();
    let mut columns: Vec<Float64Builder> = (0..6).map(|_| Float64Builder::new()).collect();
    let mut csv = String::from("RESPID,WEIGHT,Q_A,Q_B,Q_C,CAT1,CAT2\n");
    for i in 0..n {
        let w = 0.5 + f64::from(i % 7) * 0.25;
        let values = [
            w,
            f64::from(u8::from(i % 3 == 0)),
            f64::from(u8::from(i % 5 == 0)),
            f64::from(u8::from(i % 11 == 0)),
            f64::from(i % 3 + 1),
            f64::from((i / 3) % 4 + 1),
        ];
        id.append_value(format!("r{i}"));
        csv.push_str(&format!("r{i}"));
        for (builder, value) in columns.iter_mut().zip(values) {
            builder.append_value(value);
            csv.push_str(&format!(",{value}"));
        }
        csv.push('\n');
    }
    let mut arrays: Vec<arrow::array::ArrayRef> = vec![Arc::new(id.finish())];
    arrays.extend(
        columns
            .iter_mut()
            .map(|b| Arc::new(b.finish()) as arrow::array::ArrayRef),
    );
    let batch = RecordBatch::try_new(schema.clone(), arrays).unwrap();
    let mut meta = ambers::SpssMetadata::from_arrow_schema(&schema);
    meta.variable_labels.insert("Q_A".into(), "Brand A".into());
    let colours: indexmap::IndexMap<ambers::Value, String> =
        [(1.0, "Red"), (2.0, "Green"), (3.0, "Blue"), (4.0, "Black")]
            .into_iter()
            .map(|(v, l)| (ambers::Value::Numeric(v), l.to_owned()))
            .collect();
    meta.variable_value_labels
        .insert("CAT1".into(), colours.clone());
    meta.variable_value_labels.insert("CAT2".into(), colours);
    meta.mr_sets.insert(
        "$BRANDS".into(),
        ambers::MrSet {
            name: "$BRANDS".into(),
            label: "Brands bought".into(),
            mr_type: ambers::MrType::MultipleDichotomy,
            counted_value: Some("1".into()),
            variables: vec!["Q_A".into(), "Q_B".into(), "Q_C".into()],
        },
    );
    meta.mr_sets.insert(
        "$COLOURS".into(),
        ambers::MrSet {
            name: "$COLOURS".into(),
            label: "Colours liked".into(),
            mr_type: ambers::MrType::MultipleCategory,
            counted_value: None,
            variables: vec!["CAT1".into(), "CAT2".into()],
        },
    );
    let sav = dir.join("mr.sav");
    ambers::write_sav(&sav, &batch, &meta, compression, None).unwrap();
    let csv_path = dir.join("mr.csv");
    std::fs::write(&csv_path, csv).unwrap();
    (sav, csv_path)
}

#[test]
fn multiple_response_sets_become_codes() {
    let dir = tempfile::tempdir().unwrap();
    let (sav, csv_path) = write_sets(dir.path(), ambers::Compression::Bytecode);

    let bases = "[[population_bases]]\ncode = \"ALL\"\nexpr = \"*\"\n\
        [[population_bases]]\ncode = \"B\"\nexpr = \"BRANDS\"\n\
        [[population_bases]]\ncode = \"C\"\nexpr = \"COLOURS_2 AND NOT COLOURS_4\"\n";
    let toml = |path: &Path, codes: &str| {
        format!(
            "code = \"MR\"\nname = \"MR\"\nrespondents = {:?}\nid_column = \"RESPID\"\nweight_column = \"WEIGHT\"\n{codes}{bases}",
            path.display().to_string()
        )
    };
    let (from_sav, _) = import_with(dir.path(), &toml(&sav, "")).unwrap();
    let by_hand = "[[codes]]\ncode = \"BRANDS\"\nexpr = \"Q_A = 1 OR Q_B = 1 OR Q_C = 1\"\n\
        [[codes]]\ncode = \"COLOURS_2\"\nexpr = \"CAT1 = 2 OR CAT2 = 2\"\n\
        [[codes]]\ncode = \"COLOURS_4\"\nexpr = \"CAT1 = 4 OR CAT2 = 4\"\n";
    let (from_csv, _) = import_with(dir.path(), &toml(&csv_path, by_hand)).unwrap();
    assert_same_figures(&from_sav, &from_csv);
    let codebook = from_sav.codebook();
    let code = |name: &str| codebook.codes.iter().find(|c| c.code == name).unwrap();
    assert_eq!(code("BRANDS").label.as_deref(), Some("Brands bought"));
    assert_eq!(code("BRANDS").expr, "Q_A = 1 OR Q_B = 1 OR Q_C = 1");
    assert_eq!(
        code("COLOURS_3").label.as_deref(),
        Some("Colours liked: Blue")
    );
    assert!(code("COLOURS").expr.contains("CAT1 IN (1, 2, 3, 4)"));
    let b = codebook.bases.iter().find(|b| b.code == "B").unwrap();
    assert!(b.respondents > 0 && b.respondents < 200);
    assert_eq!(
        codebook
            .variables
            .iter()
            .find(|v| v.name == "Q_A")
            .unwrap()
            .label
            .as_deref(),
        Some("Brand A")
    );

    // `survey init` writes the sets as codes, the labels, and a base; it imports as is.
    let text = import::init_definition(&sav, "MR", "RESPID", Some("WEIGHT"), None, None).unwrap();
    assert!(text.contains("code = \"BRANDS\""), "{text}");
    assert!(text.contains("label = \"Brand A\""), "{text}");
    assert!(text.contains("code = \"ALL\""), "{text}");
    let (from_init, _) = import_with(dir.path(), &text).unwrap();
    assert_eq!(
        from_init.code_names().count(),
        from_sav.code_names().count()
    );
}

/// A file of ambers' own writing: a string id, a numeric group and a string group, each
/// with user-missing values, and two multiple-response sets that would make one code.
fn user_missing_file(ids: &[&str], regions: &[f64], teams: &[&str]) -> Vec<u8> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("RESPID", DataType::Utf8, true),
        Field::new("WEIGHT", DataType::Float64, true),
        Field::new("REGION", DataType::Float64, true),
        Field::new("TEAM", DataType::Utf8, true),
        Field::new("S1", DataType::Float64, true),
        Field::new("S2", DataType::Float64, true),
        Field::new("T1", DataType::Float64, true),
    ]));
    let numbers = |values: Vec<f64>| Arc::new(arrow::array::Float64Array::from(values));
    let n = ids.len();
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(arrow::array::StringArray::from(ids.to_vec())),
            numbers(vec![1.5; n]),
            numbers(regions.to_vec()),
            Arc::new(arrow::array::StringArray::from(teams.to_vec())),
            numbers((0..n).map(|i| (i % 2 + 1) as f64).collect()),
            numbers((0..n).map(|i| (i % 3 + 1) as f64).collect()),
            numbers((0..n).map(|i| (i % 2) as f64).collect()),
        ],
    )
    .unwrap();
    let mut meta = ambers::SpssMetadata::from_arrow_schema(&schema);
    let labels = |pairs: &[(ambers::Value, &str)]| -> indexmap::IndexMap<ambers::Value, String> {
        pairs
            .iter()
            .map(|(v, l)| (v.clone(), (*l).to_owned()))
            .collect()
    };
    let n = ambers::Value::Numeric;
    let t = |s: &str| ambers::Value::String(s.to_owned());
    meta.variable_value_labels.insert(
        "REGION".into(),
        labels(&[(n(1.0), "North"), (n(2.0), "South"), (n(9.0), "No region")]),
    );
    meta.variable_value_labels.insert(
        "TEAM".into(),
        labels(&[(t("red"), "Red team"), (t("none"), "No team")]),
    );
    let category = labels(&[(n(1.0), "One"), (n(2.0), "Two"), (n(3.0), "Refused")]);
    meta.variable_value_labels
        .insert("S1".into(), category.clone());
    meta.variable_value_labels.insert("S2".into(), category);
    let missing = &mut meta.variable_missing_values;
    missing.insert(
        "RESPID".into(),
        vec![ambers::MissingSpec::StringValue("NA".into())],
    );
    missing.insert("REGION".into(), vec![ambers::MissingSpec::Value(9.0)]);
    missing.insert(
        "TEAM".into(),
        vec![ambers::MissingSpec::StringValue("none".into())],
    );
    missing.insert("S1".into(), vec![ambers::MissingSpec::Value(3.0)]);
    missing.insert("S2".into(), vec![ambers::MissingSpec::Value(3.0)]);
    let set = |name: &str, mr_type, variables: &[&str]| ambers::MrSet {
        name: name.into(),
        label: String::new(),
        mr_type,
        counted_value: Some("1".into()),
        variables: variables.iter().map(|v| (*v).to_owned()).collect(),
    };
    meta.mr_sets.insert(
        "$S".into(),
        set("$S", ambers::MrType::MultipleCategory, &["S1", "S2"]),
    );
    meta.mr_sets.insert(
        "$S_1".into(),
        set("$S_1", ambers::MrType::MultipleDichotomy, &["T1"]),
    );
    let mut out = Cursor::new(Vec::new());
    ambers::write_sav_to_writer(&mut out, &batch, &meta, ambers::Compression::Bytecode, None)
        .unwrap();
    out.into_inner()
}

#[test]
fn user_missing_ids_and_groups_are_missing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.sav");
    let toml = |group: &str| {
        format!(
            "code = \"T\"\nname = \"T\"\nrespondents = {:?}\nid_column = \"RESPID\"\nweight_column = \"WEIGHT\"\ngroup_column = \"{group}\"\n[[population_bases]]\ncode = \"ALL\"\nexpr = \"*\"\n",
            path.display().to_string()
        )
    };
    let regions = [1.0, 9.0, 2.0, 9.0];
    let teams = ["red", "none", " none ", "blue"];
    std::fs::write(
        &path,
        user_missing_file(&["a", "b", "c", "d"], &regions, &teams),
    )
    .unwrap();

    // A group's user-missing value is no group, numeric or string (trimmed, as answers).
    let (survey, prepared) = import_with(dir.path(), &toml("REGION")).unwrap();
    let groups: Vec<_> = (0..4).map(|row| survey.group_of(row)).collect();
    assert_eq!(groups, [Some("1"), None, Some("2"), None]);
    // REGION is a variable too: its 9s are missing answers.
    assert_eq!(survey.value("REGION", 1), None);
    let (survey, team) = import_with(dir.path(), &toml("TEAM")).unwrap();
    let groups: Vec<_> = (0..4).map(|row| survey.group_of(row)).collect();
    assert_eq!(groups, [Some("red"), None, None, Some("blue")]);
    // The import says whose labelled user-missing values it left out, the groups' too.
    let said = |prepared: &import::Prepared, list: &str| {
        assert!(
            prepared
                .warnings
                .iter()
                .any(|w| w.ends_with(&format!("their value labels are left out: {list}"))),
            "{:?}",
            prepared.warnings
        )
    };
    said(&prepared, "REGION, S1, S2");
    said(&team, "REGION, S1, S2, TEAM");
    // A string group's value labels name its groups, as a numeric group's do.
    let labels: Vec<_> = survey
        .codebook()
        .groups
        .iter()
        .map(|g| (g.value.clone(), g.label.clone()))
        .collect();
    assert_eq!(
        labels,
        [
            ("blue".into(), None),
            ("red".into(), Some("Red team".into()))
        ]
    );

    // Two sets that would make one code: the first keeps it, the second is said and
    // skipped (the import used to fail, blaming the definition's first line).
    let codes: Vec<&str> = survey.code_names().collect();
    assert_eq!(codes, ["S", "S_1", "S_2"], "{:?}", prepared.warnings);
    assert!(
        prepared
            .warnings
            .iter()
            .any(|w| w.ends_with("set '$S_1' skipped: an earlier set already made code 'S_1'")),
        "{:?}",
        prepared.warnings
    );
    // The category user-missing on every member (3, "Refused") makes no code.
    assert!(!codes.contains(&"S_3"));

    // `survey init` leaves the missing groups' labels out, keeps a string group's.
    let init =
        |group| import::init_definition(&path, "T", "RESPID", Some("WEIGHT"), Some(group), None);
    let text = init("REGION").unwrap();
    assert!(text.contains("\"1\" = \"North\""), "{text}");
    assert!(!text.contains("No region"), "{text}");
    let text = init("TEAM").unwrap();
    assert!(text.contains("\"red\" = \"Red team\""), "{text}");
    assert!(
        !text.contains("No team") && !text.contains("Refused"),
        "{text}"
    );

    // A user-missing id is a missing id.
    std::fs::write(
        &path,
        user_missing_file(&["a", "NA", "c", "d"], &regions, &teams),
    )
    .unwrap();
    match import_with(dir.path(), &toml("REGION")).unwrap_err() {
        ImportError::Case {
            case,
            variable,
            reason,
            ..
        } => assert_eq!(
            (case, variable.as_str(), reason.as_str()),
            (
                2,
                "RESPID",
                "missing respondent id: 'NA' is a user-missing value"
            )
        ),
        other => panic!("expected a case error, got {other}"),
    }
}

/// A labelled group value the import would refuse (not a group name) is said by `survey
/// init`, which leaves it out of `[groups]`, so the file is recoded before an import fails.
#[test]
fn init_says_which_labelled_group_values_the_import_refuses() {
    let schema = Arc::new(Schema::new(vec![
        Field::new("RESPID", DataType::Utf8, true),
        Field::new("WEIGHT", DataType::Float64, true),
        Field::new("TEAM", DataType::Utf8, true),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(arrow::array::StringArray::from(vec!["a", "b", "c"])),
            Arc::new(arrow::array::Float64Array::from(vec![1.0, 2.0, 3.0])),
            Arc::new(arrow::array::StringArray::from(vec![
                "red",
                "S\u{fc}d",
                "two\nlines",
            ])),
        ],
    )
    .unwrap();
    let mut meta = ambers::SpssMetadata::from_arrow_schema(&schema);
    let t = |s: &str| ambers::Value::String(s.to_owned());
    meta.variable_value_labels.insert(
        "TEAM".into(),
        [
            (t("red"), "Red team".to_owned()),
            (t("S\u{fc}d"), "South".to_owned()),
            (t("two\nlines"), "Two".to_owned()),
        ]
        .into_iter()
        .collect(),
    );
    let mut out = Cursor::new(Vec::new());
    ambers::write_sav_to_writer(&mut out, &batch, &meta, ambers::Compression::Bytecode, None)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("teams.sav");
    std::fs::write(&path, out.into_inner()).unwrap();
    let text =
        import::init_definition(&path, "T", "RESPID", Some("WEIGHT"), Some("TEAM"), None).unwrap();
    assert!(
        text.contains("# the import refuses these labelled group values")
            && text.contains("\"S\u{fc}d\", \"two\\nlines\"; recode them in the file first"),
        "{text}"
    );
    assert!(text.contains("\"red\" = \"Red team\""), "{text}");
    assert!(!text.contains("\"S\u{fc}d\" ="), "{text}");
    // The definition written is still TOML.
    assert!(text.parse::<toml::Table>().is_ok(), "{text}");
}

#[test]
fn init_writes_every_label_and_a_base() {
    let sav = fixtures().join("labelled.sav");
    let text = import::init_definition(&sav, "FIX", "RESPID", Some("WEIGHT"), Some("REGION"), None)
        .unwrap();
    for expected in [
        "code = \"FIX\"",
        "name = \"Fixture survey\"",
        "group_column = \"REGION\"",
        "\"1\" = \"Northeast\"",
        "label = \"Satisfaction (1-5)\"",
        "\"5\" = \"Very happy\"",
        "# user-missing values import as missing answers, so their value labels are left out: AGE, SAT",
        "# a date: days since 1970-01-01",
        "# string variables, not imported: COMMENT",
        "code = \"ALL\"",
        "expr = \"*\"",
    ] {
        assert!(text.contains(expected), "{expected} not in:\n{text}");
    }
    // The file by its absolute path, whatever directory the definition is put in (cargo
    // runs tests in the crate's directory, so this relative path names the same file).
    let relative = Path::new("tests/fixtures/sav/labelled.sav");
    let from_relative =
        import::init_definition(relative, "FIX", "RESPID", Some("WEIGHT"), None, None).unwrap();
    let absolute = sav.canonicalize().unwrap().display().to_string();
    assert!(
        from_relative.contains(&format!("respondents = {absolute:?}")),
        "{from_relative}"
    );
    // Given the directory the definition goes in, relative to it: the two move together.
    let moved = tempfile::tempdir().unwrap();
    let defs = moved.path().join("defs");
    let data = moved.path().join("data");
    std::fs::create_dir_all(&defs).unwrap();
    std::fs::create_dir_all(&data).unwrap();
    std::fs::copy(&sav, data.join("labelled.sav")).unwrap();
    let beside = import::init_definition(
        &data.join("labelled.sav"),
        "FIX",
        "RESPID",
        Some("WEIGHT"),
        None,
        Some(&defs),
    )
    .unwrap();
    assert!(
        beside.contains("respondents = \"../data/labelled.sav\""),
        "{beside}"
    );
    std::fs::write(defs.join("survey.toml"), &beside).unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let moved_to = elsewhere.path().join("moved");
    std::fs::rename(moved.path(), &moved_to).unwrap();
    // Both moved: the definition still finds its file.
    let prepared = import::prepare_file(&moved_to.join("defs/survey.toml"));
    assert!(prepared.is_ok(), "{:?}", prepared.err());
    // A user-missing value's label labels no answer.
    assert!(
        !text.contains("Don't know") && !text.contains("No answer"),
        "{text}"
    );
    let dir = tempfile::tempdir().unwrap();
    let (survey, _) = import_with(dir.path(), &text).unwrap();
    assert_eq!(survey.respondents(), 300);
    // Unknown roles are refused, naming the variable.
    let error =
        import::init_definition(&sav, "FIX", "RESPID", Some("NOPE"), None, None).unwrap_err();
    assert!(error.to_string().contains("NOPE"), "{error}");
}

#[test]
fn hostile_files_fail_cleanly() {
    let sav = std::fs::read(fixtures().join("labelled.sav")).unwrap();
    let rows = std::fs::read(fixtures().join("labelled-rows.sav")).unwrap();
    let zsav = std::fs::read(fixtures().join("labelled.zsav")).unwrap();

    // Wrong magic.
    let mut bad = sav.clone();
    bad[..4].copy_from_slice(b"XXXX");
    assert!(source_reason(import_bytes(&bad, "sav").unwrap_err()).contains("SPSS"));
    assert!(import_bytes(b"", "sav").is_err());
    assert!(import_bytes(b"RESPID,WEIGHT\nr1,1\n", "sav").is_err());

    // Truncated anywhere: in the header, the dictionary, the data.
    for file in [&sav, &rows, &zsav] {
        for cut in [
            10,
            100,
            500,
            file.len() / 2,
            file.len() - 100,
            file.len() - 3,
        ] {
            let error = import_bytes(&file[..cut], "sav").unwrap_err();
            assert!(
                matches!(error, ImportError::Source { .. }),
                "cut at {cut}: {error}"
            );
        }
    }

    // Huge declared counts: cases (refused: the data does not hold them, and room is
    // made only for what the file can hold), and the case size (a hint the reader
    // checks against the dictionary: refused, or read right).
    let (csv, _) = import(&fixtures().join("respondents.csv")).unwrap();
    for (offset, value) in [(80, i32::MAX), (80, 1_000_000), (68, i32::MAX), (68, 3)] {
        let mut bad = sav.clone();
        bad[offset..offset + 4].copy_from_slice(&value.to_le_bytes());
        match import_bytes(&bad, "sav") {
            Ok((survey, _)) => {
                assert_eq!(offset, 68, "{value} cases");
                assert_same_figures(&survey, &csv);
            }
            Err(error) => assert!(matches!(error, ImportError::Source { .. }), "{error}"),
        }
    }

    // zlib data that does not decompress.
    let mut bad = zsav.clone();
    let middle = zsav.len() / 2;
    for byte in &mut bad[middle..middle + 64] {
        *byte ^= 0x5a;
    }
    assert!(import_bytes(&bad, "zsav").is_err());

    // Labels with bytes that are not UTF-8: decoded lossily (the reader may then guess
    // another encoding for the label), never a panic or a refusal of the data.
    let mut bad = sav.clone();
    let at = sav
        .windows(b"Household income".len())
        .position(|w| w == b"Household income")
        .unwrap();
    bad[at..at + 4].copy_from_slice(&[0xff, 0xfe, 0xc3, 0x28]);
    let (survey, _) = import_bytes(&bad, "sav").unwrap();
    assert_same_figures(&survey, &csv);
    let codebook = survey.codebook();
    let income = codebook
        .variables
        .iter()
        .find(|v| v.name == "INCOME")
        .unwrap();
    assert!(income
        .label
        .as_deref()
        .is_some_and(|l| !l.is_empty() && l != "Household income"));

    // Random damage anywhere: an error or a survey, never a panic.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for file in [&sav, &rows, &zsav] {
        for _ in 0..60 {
            let mut bad = file.to_vec();
            for _ in 0..1 + next() % 8 {
                let at = (next() % bad.len() as u64) as usize;
                bad[at] = next() as u8;
            }
            let _ = import_bytes(&bad, "sav");
        }
    }
}

#[test]
fn install_writes_the_survey_and_leaves_nothing_on_failure() {
    let data = tempfile::tempdir().unwrap();
    let store = SurveyStore::open(data.path()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("survey.toml");
    std::fs::write(&toml, definition(&fixtures().join("labelled.zsav"))).unwrap();
    let (survey, prepared) = import::install_file(&toml, &store).unwrap();
    assert_eq!(prepared.format, crosstab_engine::SourceFormat::Zsav);
    assert_eq!(store.codes().unwrap(), vec!["FIX".to_owned()]);
    let loaded = store.load("FIX").unwrap();
    assert_eq!(loaded.source_format(), Some("zsav"));
    assert_same_figures(&loaded, &survey);
    // Same bytes as compiling in memory.
    assert_eq!(
        std::fs::read(store.path_of("FIX")).unwrap(),
        import::compile_file(&toml).unwrap()
    );

    let truncated = dir.path().join("cut.sav");
    let bytes = std::fs::read(fixtures().join("labelled.sav")).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() - 50]).unwrap();
    std::fs::write(&toml, definition(&truncated).replace("\"FIX\"", "\"CUT\"")).unwrap();
    assert!(import::install_file(&toml, &store).is_err());
    let left: BTreeMap<String, u64> = std::fs::read_dir(data.path().join("surveys"))
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                e.metadata().unwrap().len(),
            )
        })
        .collect();
    assert_eq!(left.keys().collect::<Vec<_>>(), vec!["FIX.ctxs"]);
}

/// `batch` as a Parquet file at `path`.
fn write_parquet(path: &Path, batch: &RecordBatch) {
    let file = std::fs::File::create(path).unwrap();
    let mut writer = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).unwrap();
    writer.write(batch).unwrap();
    writer.close().unwrap();
}

/// `batch` as `dir/r.parquet`, imported with a definition of id `RESPID`, weight
/// `WEIGHT`, the base `ALL` and `extra` lines.
fn import_parquet(
    dir: &Path,
    batch: &RecordBatch,
    extra: &str,
) -> Result<(Survey, import::Prepared), ImportError> {
    let path = dir.join("r.parquet");
    write_parquet(&path, batch);
    let toml = format!(
        "code = \"P\"\nname = \"P\"\nrespondents = {:?}\nid_column = \"RESPID\"\nweight_column = \"WEIGHT\"\n{extra}[[population_bases]]\ncode = \"ALL\"\nexpr = \"*\"\n",
        path.display().to_string()
    );
    import_with(dir, &toml)
}

/// Integer ids past 2^53 keep every digit (through f64, neighbours would collide).
#[test]
fn parquet_integer_ids_keep_every_digit() {
    use arrow::array::{Float64Array, Int64Array, UInt64Array};
    let ids: Vec<i64> = vec![20_240_512_000_012_345, 20_240_512_000_012_344, 7];
    let schema = Arc::new(Schema::new(vec![
        Field::new("RESPID", DataType::Int64, true),
        Field::new("WEIGHT", DataType::Float64, true),
        Field::new("G", DataType::UInt64, true),
    ]));
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(ids.clone())),
            Arc::new(Float64Array::from(vec![1.0, 2.0, 3.0])),
            Arc::new(UInt64Array::from(vec![u64::MAX, u64::MAX - 1, 2])),
        ],
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (survey, _) = import_parquet(dir.path(), &batch, "group_column = \"G\"\n").unwrap();
    let read: Vec<String> = (0..3)
        .map(|row| survey.id(row).unwrap().to_owned())
        .collect();
    let want: Vec<String> = ids.iter().map(i64::to_string).collect();
    assert_eq!(read, want);
    let groups: Vec<String> = survey
        .codebook()
        .groups
        .into_iter()
        .map(|g| g.value)
        .collect();
    assert_eq!(
        groups,
        ["18446744073709551614", "18446744073709551615", "2"]
    );
}

/// A numeric variable whose name no target can use is skipped and said, not a refusal
/// of the whole file.
#[test]
fn variables_named_as_no_target_can_name_them_are_skipped() {
    use arrow::array::{Float64Array, Int16Array, StringArray};
    let schema = Arc::new(Schema::new(vec![
        Field::new("RESPID", DataType::Utf8, true),
        Field::new("WEIGHT", DataType::Float64, true),
        Field::new("Größe", DataType::Int16, true),
        Field::new("IN", DataType::Int16, true),
        Field::new("X", DataType::Int16, true),
        Field::new("A\nB", DataType::Int16, true),
    ]));
    let small = || Arc::new(Int16Array::from(vec![1, 2])) as arrow::array::ArrayRef;
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from(vec!["a", "b"])),
            Arc::new(Float64Array::from(vec![1.0, 2.0])),
            small(),
            small(),
            small(),
            small(),
        ],
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (survey, prepared) = import_parquet(dir.path(), &batch, "").unwrap();
    let names: Vec<String> = survey
        .codebook()
        .variables
        .into_iter()
        .map(|v| v.name)
        .collect();
    assert_eq!(names, ["X"]);
    assert!(
        prepared
            .warnings
            .iter()
            .any(|w| w.ends_with("rename them in the file to import them: Größe, IN, A\\nB")),
        "{:?}",
        prepared.warnings
    );
}

#[test]
fn parquet_columns_of_every_numeric_type_read_as_numbers() {
    use arrow::array::{
        ArrayRef, BooleanArray, Date64Array, Float32Array, Float64Array, Int16Array, ListArray,
        StringArray, TimestampMillisecondArray,
    };
    use arrow::datatypes::{Int32Type, TimeUnit};
    let schema = Arc::new(Schema::new(vec![
        Field::new("RESPID", DataType::Utf8, true),
        Field::new("WEIGHT", DataType::Float32, true),
        Field::new("X", DataType::Int16, true),
        Field::new("FLAG", DataType::Boolean, true),
        Field::new("DAY", DataType::Date64, true),
        Field::new("AT", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        Field::new(
            "L",
            DataType::List(Arc::new(Field::new("item", DataType::Int32, true))),
            true,
        ),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(StringArray::from(vec!["a", "b", "c"])),
            Arc::new(Float32Array::from(vec![1.5, 2.0, 0.25])),
            Arc::new(Int16Array::from(vec![Some(3), None, Some(-7)])),
            Arc::new(BooleanArray::from(vec![Some(true), Some(false), None])),
            Arc::new(Date64Array::from(vec![86_400_000 * 3, 0, 86_400_000])),
            Arc::new(TimestampMillisecondArray::from(vec![1_500, 0, 60_000])),
            Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
                Some(vec![Some(1)]),
                None,
                Some(vec![]),
            ])),
        ],
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.parquet");
    write_parquet(&path, &batch);
    let toml = format!(
        "code = \"P\"\nname = \"P\"\nrespondents = {:?}\nid_column = \"RESPID\"\nweight_column = \"WEIGHT\"\n[[population_bases]]\ncode = \"ALL\"\nexpr = \"*\"\n",
        path.display().to_string()
    );
    let (survey, prepared) = import_with(dir.path(), &toml).unwrap();
    assert_eq!(survey.weights(), &[1.5, 2.0, 0.25]);
    let column = |name: &str| {
        (0..3)
            .map(|row| survey.value(name, row))
            .collect::<Vec<_>>()
    };
    assert_eq!(column("X"), vec![Some(3.0), None, Some(-7.0)]);
    assert_eq!(column("FLAG"), vec![Some(1.0), Some(0.0), None]);
    assert_eq!(column("DAY"), vec![Some(3.0), Some(0.0), Some(1.0)]);
    assert_eq!(column("AT"), vec![Some(1.5), Some(0.0), Some(60.0)]);
    assert_eq!(prepared.warnings.len(), 1, "{:?}", prepared.warnings);
    assert!(
        prepared.warnings[0].contains("L (List"),
        "{}",
        prepared.warnings[0]
    );

    // An answer that is an infinity (a Parquet division by zero) is refused, naming its
    // case and column, as the CSV import refuses it.
    let infinite = dir.path().join("inf.parquet");
    let numbers = |values: Vec<f64>| Arc::new(Float64Array::from(values)) as ArrayRef;
    let ids = |ids: Vec<&str>| Arc::new(StringArray::from(ids)) as ArrayRef;
    let batch = RecordBatch::try_from_iter([
        ("RESPID", ids(vec!["a", "b"])),
        ("WEIGHT", numbers(vec![1.0, 1.0])),
        ("X", numbers(vec![2.0, f64::INFINITY])),
    ])
    .unwrap();
    write_parquet(&infinite, &batch);
    let error = import_with(
        dir.path(),
        &toml.replace(&path.display().to_string(), &infinite.display().to_string()),
    )
    .unwrap_err();
    assert!(
        matches!(&error, ImportError::Case { case: 2, variable, .. } if variable == "X"),
        "{error}"
    );
    assert!(error.to_string().contains("inf is not finite"), "{error}");

    // Two columns of one name: refused, naming the respondent file and the column.
    let twice = dir.path().join("twice.parquet");
    let batch = RecordBatch::try_from_iter([
        ("RESPID", ids(vec!["a"])),
        ("WEIGHT", numbers(vec![1.0])),
        ("X", numbers(vec![1.0])),
        ("X", numbers(vec![1.0])),
    ])
    .unwrap();
    write_parquet(&twice, &batch);
    let error = import_with(
        dir.path(),
        &toml.replace(&path.display().to_string(), &twice.display().to_string()),
    )
    .unwrap_err();
    assert!(
        matches!(&error, ImportError::Source { file, .. } if file.ends_with("twice.parquet")),
        "{error}"
    );
    assert!(
        error.to_string().contains("two columns are named 'X'"),
        "{error}"
    );

    // Damaged: cut, or not Parquet at all.
    let bytes = std::fs::read(&path).unwrap();
    for cut in [bytes.len() - 10, bytes.len() / 2, 4] {
        std::fs::write(&path, &bytes[..cut]).unwrap();
        let error = import_with(dir.path(), &toml).unwrap_err();
        assert!(matches!(error, ImportError::Source { .. }), "{error}");
    }
    std::fs::write(&path, b"RESPID,WEIGHT\na,1\n").unwrap();
    assert!(import_with(dir.path(), &toml).is_err());
}

/// The uncompressed fixture as a file written in DOS's code page 437 would hold it:
/// REGION's label "Région", its value label "Söuth" and the first id "Ré001" (é is byte
/// 0x82 there, ö 0x94), declared by the encoding record's `name` (five bytes, replacing
/// "UTF-8") or, with `name` `None`, by the machine record's code page alone (the
/// encoding record made one of a subtype no reader knows).
fn in_code_page_437(name: Option<&[u8; 5]>) -> Vec<u8> {
    let mut bytes = std::fs::read(fixtures().join("labelled.sav")).unwrap();
    let mut replace = |from: &[u8], to: &[u8]| {
        let at = bytes
            .windows(from.len())
            .position(|w| w == from)
            .unwrap_or_else(|| panic!("{from:?} is not in the fixture"));
        bytes[at..at + to.len()].copy_from_slice(to);
    };
    replace(b"Region", b"R\x82gion");
    replace(b"South", b"S\x94uth");
    replace(b"R0001", b"R\x82001");
    // Extension record 20 (one-byte elements, five of them): "UTF-8".
    let encoding_record = [7i32, 20, 1, 5].map(i32::to_le_bytes).concat();
    match name {
        Some(name) => replace(
            &[&encoding_record[..], b"UTF-8"].concat(),
            &[&encoding_record[..], name].concat(),
        ),
        None => {
            let unknown = [7i32, 99, 1, 5].map(i32::to_le_bytes).concat();
            replace(&encoding_record, &unknown);
            // Extension record 3, eight integers: the character code is the last.
            let machine_record = [7i32, 3, 4, 8].map(i32::to_le_bytes).concat();
            let code_page = [&machine_record[..], &[0; 28], &65001i32.to_le_bytes()].concat();
            let at = bytes.windows(16).position(|w| w == machine_record).unwrap();
            assert_eq!(bytes[at + 44..at + 48], code_page[44..]);
            bytes[at + 44..at + 48].copy_from_slice(&437i32.to_le_bytes());
        }
    }
    bytes
}

#[test]
fn text_in_a_dos_code_page_reads_as_written() {
    // The reader decodes code page 437 as IBM866 ("RВgion") and a name it does not
    // know as windows-1252 ("R‚gion"): both are read again as the file wrote them.
    for (how, bytes) in [
        ("by name", in_code_page_437(Some(b"cp437"))),
        ("by code page", in_code_page_437(None)),
    ] {
        let (survey, prepared) = import_bytes(&bytes, "sav").unwrap();
        let codebook = survey.codebook();
        let region = codebook.variables.iter().find(|v| v.name == "REGION");
        assert_eq!(region.unwrap().label.as_deref(), Some("Région"), "{how}");
        let south = codebook.groups.iter().find(|g| g.value == "3").unwrap();
        assert_eq!(south.label.as_deref(), Some("Söuth"), "{how}");
        assert_eq!(survey.id(0), Some("Ré001"), "{how}");
        // `survey init` writes the labels as the file has them too.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dos.sav");
        std::fs::write(&path, &bytes).unwrap();
        let text = import::init_definition(&path, "FIX", "RESPID", None, None, None).unwrap();
        assert!(
            text.contains("\"Région\"") && text.contains("\"Söuth\""),
            "{how}: {text}"
        );
        assert!(
            prepared
                .warnings
                .iter()
                .all(|w| !w.contains("windows-1252")),
            "{how}: {:?}",
            prepared.warnings
        );
    }

    // An encoding no table here knows: read as windows-1252, and said so.
    let (survey, prepared) = import_bytes(&in_code_page_437(Some(b"x-bad")), "sav").unwrap();
    assert_eq!(survey.id(0), Some("R\u{201a}001"));
    assert!(
        prepared
            .warnings
            .iter()
            .any(|w| w.contains("'x-bad'") && w.contains("windows-1252")),
        "{:?}",
        prepared.warnings
    );
}

/// `bytes`, a file ambers wrote with every set in both set records, as SPSS writes such
/// a file: the category set in record 7 alone and the dichotomy set in record 19 alone,
/// in the form labelled by its counted value that only record 19 may hold.
fn split_set_records(bytes: &[u8]) -> Vec<u8> {
    // Where the record of `subtype` begins, and where its text ends.
    let record = |subtype: i32| {
        let head = [7i32, subtype, 1].map(i32::to_le_bytes).concat();
        let at = bytes.windows(12).position(|w| w == head).unwrap();
        let len = i32::from_le_bytes(bytes[at + 12..at + 16].try_into().unwrap());
        let end = at + 16 + usize::try_from(len).unwrap();
        assert_eq!(bytes[at + 16], b'$');
        (at, end)
    };
    let text = |(at, end): (usize, usize)| String::from_utf8(bytes[at + 16..end].to_vec()).unwrap();
    let with = |subtype: i32, text: String| {
        let len = i32::try_from(text.len()).unwrap();
        [
            [7, subtype, 1, len].map(i32::to_le_bytes).concat(),
            text.into_bytes(),
        ]
        .concat()
    };
    let (seven, nineteen) = (record(7), record(19));
    assert!(seven.1 <= nineteen.0);
    let colours = text(seven)
        .lines()
        .find(|l| l.contains("COLOURS=C "))
        .unwrap()
        .to_owned();
    let brands = text(nineteen)
        .lines()
        .find(|l| l.contains("BRANDS=D1 1 "))
        .unwrap()
        .replacen("=D1 1 ", "=E 1 1 1 ", 1);
    [
        &bytes[..seven.0],
        &with(7, colours + "\n"),
        &bytes[seven.1..nineteen.0],
        &with(19, brands + "\n"),
        &bytes[nineteen.1..],
    ]
    .concat()
}

#[test]
fn sets_in_both_set_records_all_become_codes() {
    // The reader keeps the last set record's sets alone: read as it is, the split file
    // would have BRANDS and no COLOURS.
    let codes = |survey: &Survey| {
        let mut codes: Vec<_> = survey
            .codebook()
            .codes
            .iter()
            .map(|c| (c.code.clone(), c.expr.clone(), c.label.clone()))
            .collect();
        codes.sort();
        codes
    };
    let toml = plain_definition;
    for compression in [ambers::Compression::None, ambers::Compression::Bytecode] {
        let dir = tempfile::tempdir().unwrap();
        let (sav, _) = write_sets(dir.path(), compression);
        let split = dir.path().join("split.sav");
        std::fs::write(&split, split_set_records(&std::fs::read(&sav).unwrap())).unwrap();
        let (whole, _) = import_with(dir.path(), &toml(&sav)).unwrap();
        let (from_split, _) = import_with(dir.path(), &toml(&split)).unwrap();
        let names: Vec<String> = codes(&from_split).into_iter().map(|c| c.0).collect();
        assert!(
            names.contains(&"BRANDS".to_owned()) && names.contains(&"COLOURS_2".to_owned()),
            "{compression:?}: {names:?}"
        );
        assert_eq!(codes(&from_split), codes(&whole), "{compression:?}");
        assert_same_figures(&from_split, &whole);
        let text =
            import::init_definition(&split, "MR", "RESPID", Some("WEIGHT"), None, None).unwrap();
        assert!(
            text.contains("code = \"BRANDS\"") && text.contains("code = \"COLOURS_2\""),
            "{text}"
        );
    }
    // Five set records (SPSS writes two, and each before the last costs a read of the
    // dictionary): refused, not read five times over.
    let dir = tempfile::tempdir().unwrap();
    let (sav, _) = write_sets(dir.path(), ambers::Compression::None);
    let bytes = std::fs::read(&sav).unwrap();
    let head = [7i32, 7, 1].map(i32::to_le_bytes).concat();
    let at = bytes.windows(12).position(|w| w == head).unwrap();
    let len = usize::try_from(i32::from_le_bytes(
        bytes[at + 12..at + 16].try_into().unwrap(),
    ));
    let record = &bytes[at..at + 16 + len.unwrap()];
    let many = [&bytes[..at], record, record, record, &bytes[at..]].concat();
    let reason = source_reason(import_bytes(&many, "sav").unwrap_err());
    assert!(
        reason.contains("5 multiple-response set records"),
        "{reason}"
    );

    // A .zsav's set records are read again as well, its data then marked uncompressed
    // (else the reader would look for compressed blocks past the dictionary).
    let dir = tempfile::tempdir().unwrap();
    let (zsav, _) = write_sets(dir.path(), ambers::Compression::Zlib);
    std::fs::create_dir(dir.path().join("sav")).unwrap();
    let (sav, _) = write_sets(&dir.path().join("sav"), ambers::Compression::None);
    let (from_zsav, _) = import_with(dir.path(), &toml(&zsav)).unwrap();
    let (from_sav, _) = import_with(dir.path(), &toml(&sav)).unwrap();
    assert_eq!(codes(&from_zsav), codes(&from_sav));
}

#[test]
fn an_unusual_compression_bias_is_said() {
    // The reader warns of it for a compressed file it decodes itself; a bytecode file is
    // shown to it decoded, so the import says it instead.
    let mut bytes = std::fs::read(fixtures().join("labelled-rows.sav")).unwrap();
    assert_eq!(bytes[84..92], 100f64.to_le_bytes());
    bytes[84..92].copy_from_slice(&99f64.to_le_bytes());
    let (_, prepared) = import_bytes(&bytes, "sav").unwrap();
    let said: Vec<_> = prepared
        .warnings
        .iter()
        .filter(|w| w.contains("compression bias in the header is 99 instead of the standard 100"))
        .collect();
    assert_eq!(said.len(), 1, "{:?}", prepared.warnings);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("biased.sav");
    std::fs::write(&path, &bytes).unwrap();
    let text = import::init_definition(&path, "FIX", "RESPID", None, None, None).unwrap();
    assert!(text.contains("compression bias"), "{text}");
}

#[test]
fn data_past_the_cases_a_header_declares_is_never_dropped_unsaid() {
    let sav = std::fs::read(fixtures().join("labelled.sav")).unwrap();
    let rows = std::fs::read(fixtures().join("labelled-rows.sav")).unwrap();
    let (csv, _) = import(&fixtures().join("respondents.csv")).unwrap();
    let with_count = |bytes: &[u8], count: i32| {
        let mut bytes = bytes.to_vec();
        bytes[80..84].copy_from_slice(&count.to_le_bytes());
        bytes
    };
    // The reader stops at the header's count: a bytecode file declaring fewer cases than
    // its data holds is refused, not cut to the count.
    let reason = source_reason(import_bytes(&with_count(&rows, 200), "sav").unwrap_err());
    assert!(
        reason.contains("the header declares 200 cases but its data holds more"),
        "{reason}"
    );
    // Uncompressed, the reader reads on and the count is checked against what it read.
    let reason = source_reason(import_bytes(&with_count(&sav, 200), "sav").unwrap_err());
    assert!(reason.contains("declares 200 cases"), "{reason}");

    // With the count unset, whole files read whole, and a file whose data ends inside a
    // case is refused rather than read without its last case.
    for (file, cut) in [(&rows, 20), (&sav, 20)] {
        let unset = with_count(file, -1);
        let (survey, _) = import_bytes(&unset, "sav").unwrap();
        assert_same_figures(&survey, &csv);
        let reason = source_reason(import_bytes(&unset[..unset.len() - cut], "sav").unwrap_err());
        assert!(
            reason.contains("truncated: its data ends inside a case"),
            "{reason}"
        );
    }

    // Bytes after the cases a header declares, in an uncompressed file: read, and said.
    let mut padded = sav.clone();
    padded.extend_from_slice(&[0; 5]);
    let (survey, prepared) = import_bytes(&padded, "sav").unwrap();
    assert_same_figures(&survey, &csv);
    assert!(
        prepared.warnings.iter().any(|w| w.ends_with(
            "hostile.sav: 5 bytes after the data's last whole case (of the 300 the header \
             declares) were ignored"
        )),
        "{:?}",
        prepared.warnings
    );
}
