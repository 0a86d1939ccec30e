//! The checks behind the fuzz targets, one function per target.
//!
//! Each function takes the fuzzer's input, feeds it to one public entry of the contract or
//! the engine, and panics only when an invariant breaks: a clean error is a pass. The
//! targets in `fuzz_targets/` are one line each around these, so the same checks replay
//! the seeds and the regressions on the stable toolchain (`cargo test` in `fuzz/`).
//!
//! A panic here is a finding; the harness's own setup (a temporary directory) failing is
//! not, and aborts with a message saying so.

use std::path::PathBuf;

use tempfile::TempDir;

use crosstab_contract::json::from_slice_strict;
use crosstab_contract::limits::MAX_BODY_BYTES;
use crosstab_contract::{validate_body, validate_value, Expr, ValidRequest};
use crosstab_engine::{import, Survey};

/// The byte that separates the definition (TOML) from the respondents (CSV) in a
/// `survey_import` input.
pub const IMPORT_SEPARATOR: u8 = 0;

/// Names of the targets, as `cargo fuzz list` prints them and as `seeds/` and
/// `regressions/` name their directories.
pub const TARGETS: [&str; 5] = [
    "validate_body",
    "expression",
    "survey_reader",
    "survey_import",
    "sav_reader",
];

/// Runs the check of the target called `name` on `data`: whether the input was accepted,
/// or `None` for an unknown name.
pub fn run(name: &str, data: &[u8]) -> Option<bool> {
    Some(match name {
        "validate_body" => check_validate_body(data),
        "expression" => check_expression(data),
        "survey_reader" => check_survey_reader(data),
        "survey_import" => check_survey_import(data),
        "sav_reader" => check_sav_reader(data),
        _ => return None,
    })
}

/// `validate_body`: never panics; it answers as reading the body into a JSON tree and
/// validating that would (it reads most valid bodies another way); an accepted body
/// re-serialises to a body that validates to the same request, its targets are its target
/// codes parsed, and every refusal has an envelope whose status is its `ResultCode`.
pub fn check_validate_body(data: &[u8]) -> bool {
    let answer = validate_body(data);
    if data.len() <= MAX_BODY_BYTES {
        match from_slice_strict(data) {
            Ok(tree) => assert_eq!(answer, validate_value(&tree), "the two readings differ"),
            Err(_) => assert!(answer.is_err(), "accepted a body that is not strict JSON"),
        }
    }
    match answer {
        Ok(valid) => {
            let targets = &valid.request.target_codes;
            assert!(
                (1..=2).contains(&targets.len()),
                "accepted {} target codes",
                targets.len()
            );
            assert_eq!(valid.targets.len(), targets.len());
            for (code, parsed) in targets.iter().zip(&valid.targets) {
                assert_eq!(
                    Expr::parse(code).as_ref(),
                    Ok(parsed),
                    "target {code:?} parses differently on its own"
                );
            }
            let again = serde_json::to_vec(&valid.request)
                .map_err(|e| e.to_string())
                .and_then(|body| validate_body(&body).map_err(|e| format!("{e:?}")));
            assert_eq!(again.as_ref(), Ok(&valid), "re-serialised request");
            true
        }
        Err(error) => {
            let envelope = error.envelope();
            assert_eq!(envelope.result_code, i64::from(error.status()));
            false
        }
    }
}

/// The expression parser: never panics; an accepted expression's canonical text parses
/// back to an equal expression, and that text is a fixed point.
pub fn check_expression(data: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(data) else {
        return false;
    };
    let Ok(expr) = Expr::parse(text) else {
        return false;
    };
    let canonical = expr.to_string();
    let reparsed = Expr::parse(&canonical);
    assert_eq!(
        reparsed.as_ref(),
        Ok(&expr),
        "{text:?} displays as {canonical:?}"
    );
    if let Ok(reparsed) = reparsed {
        assert_eq!(reparsed.to_string(), canonical, "canonical text moved");
    }
    expr.visit_names(&mut |_, name| assert!(!name.is_empty(), "empty name in {text:?}"));
    true
}

/// The compiled-survey reader: never panics on any bytes; a survey it accepts answers
/// every base, with `*` and with each named code, for everyone and for each group, with
/// counts within the respondents, and builds its codebook.
pub fn check_survey_reader(data: &[u8]) -> bool {
    // A mutated file fails its checksum nearly always: sealed again, the fuzzer explores
    // what lies past the checksum (the engine's tests cover the checksum itself).
    let resealed = crosstab_engine::testing::resealed(data);
    let Ok(survey) = Survey::from_bytes(resealed.as_deref().unwrap_or(data)) else {
        return false;
    };
    exercise(&survey);
    true
}

/// The CSV import: the input is a definition (TOML), a NUL byte, then the respondents
/// (CSV). Never panics; a survey it compiles loads, is compiled to the same bytes again,
/// and answers like any loaded survey.
pub fn check_survey_import(data: &[u8]) -> bool {
    let split = data
        .iter()
        .position(|&b| b == IMPORT_SEPARATOR)
        .unwrap_or(data.len());
    let (toml, csv) = data.split_at(split);
    let csv = csv.get(1..).unwrap_or_default();
    let Ok(toml) = std::str::from_utf8(toml) else {
        return false;
    };
    let Ok(bytes) = import::compile(toml, "survey.toml", csv, "respondents.csv") else {
        return false;
    };
    let again = import::compile(toml, "survey.toml", csv, "respondents.csv");
    match again {
        Ok(again) => assert!(again == bytes, "the same survey compiled differently"),
        Err(error) => panic!("the same survey compiled, then failed: {error}"),
    }
    let survey = match Survey::from_bytes(&bytes) {
        Ok(survey) => survey,
        Err(error) => panic!("a compiled survey does not load: {error}"),
    };
    exercise(&survey);
    true
}

/// The definition every `sav_reader` input is imported with: the columns of the
/// committed fixtures (`crates/engine/tests/fixtures/sav`), so their seeds import.
const SAV_DEFINITION: &str = include_str!("../sav_definition.toml");

/// A directory holding the SPSS definition, one per thread: each input overwrites its
/// `data.sav`, and the replay tests run side by side in one process.
fn sav_dir() -> PathBuf {
    thread_local! {
        static DIR: TempDir = make_sav_dir();
    }
    DIR.with(|dir| dir.path().to_path_buf())
}

fn make_sav_dir() -> TempDir {
    let dir = match tempfile::Builder::new()
        .prefix("crosstab-fuzz-sav-")
        .tempdir()
    {
        Ok(dir) => dir,
        Err(error) => panic!("harness setup, not a finding: temporary directory: {error}"),
    };
    if let Err(error) = std::fs::write(dir.path().join("survey.toml"), SAV_DEFINITION) {
        panic!("harness setup, not a finding: writing the definition: {error}");
    }
    dir
}

/// Lets panics raised inside the crate named `krate` unwind instead of aborting, and
/// keeps libFuzzer's abort for every other panic. The SPSS reader (`ambers`) panics on
/// some damaged files and the import catches that (`catch_unwind`) and refuses the file;
/// libFuzzer's hook would abort first and report a finding the product already handles.
/// A panic in our own code, even inside such a call, still aborts.
///
/// "Inside" is decided by the innermost frame outside the standard library: a panic the
/// standard library raises for the crate (`vec![0; n]` with a negative size read as
/// `usize`: "capacity overflow") is located in `alloc`, yet raised by the crate's code.
pub fn tolerate_panics_inside(krate: &'static str) {
    let abort = std::panic::take_hook();
    let marker = format!("{krate}-");
    std::panic::set_hook(Box::new(move |info| {
        let in_crate = |file: &str| {
            file.rsplit(['/', '\\'])
                .any(|part| part.starts_with(&marker))
        };
        let inside = match info.location() {
            Some(at) if in_crate(at.file()) => true,
            Some(at) if is_std(at.file()) => innermost_caller_file().is_some_and(|f| in_crate(&f)),
            _ => false,
        };
        if !inside {
            abort(info);
        }
    }));
}

/// Whether `file` is the standard library's source (`/rustc/<hash>/library/...`).
fn is_std(file: &str) -> bool {
    file.contains("/rustc/") || file.starts_with("library/")
}

/// The source file of the innermost frame of the current stack outside the standard
/// library and this file (the hook), if the stack can be resolved.
fn innermost_caller_file() -> Option<String> {
    let trace = format!("{:?}", std::backtrace::Backtrace::force_capture());
    trace
        .split("file: \"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .find(|file| !is_std(file) && file.trim_start_matches("./") != file!())
        .map(str::to_owned)
}

/// The SPSS `.sav`/`.zsav` reader, through the engine's file import (its only public
/// entry): never panics; a file it imports compiles to a survey that loads and answers.
pub fn check_sav_reader(data: &[u8]) -> bool {
    let dir = sav_dir();
    if let Err(error) = std::fs::write(dir.join("data.sav"), data) {
        panic!("harness setup, not a finding: writing the input: {error}");
    }
    let Ok(prepared) = import::prepare_file(&dir.join("survey.toml")) else {
        return false;
    };
    let bytes = match prepared.to_bytes() {
        Ok(bytes) => bytes,
        Err(error) => panic!("an imported survey does not compile: {error}"),
    };
    let survey = match Survey::from_bytes(&bytes) {
        Ok(survey) => survey,
        Err(error) => panic!("an imported survey does not load: {error}"),
    };
    exercise(&survey);
    true
}

/// Asks a loaded survey what a client could: each base with each group (and none), with
/// `*`, each named code and a comparison on each variable as targets, two at a time, each
/// pair asked at least once. Bounded: a header may declare thousands of names.
fn exercise(survey: &Survey) {
    let respondents = survey.respondents() as u64;
    let _ = survey.codebook();
    let mut targets: Vec<String> = vec!["*".into()];
    targets.extend(survey.code_names().take(5).map(str::to_owned));
    targets.extend(
        survey
            .variable_names()
            .take(2)
            .map(|name| format!("NOT {name} >= 0")),
    );
    let pairs: Vec<&[String]> = targets.chunks(2).collect();
    let groups: Vec<Option<&str>> = std::iter::once(None)
        .chain(survey.group_names().take(2).map(Some))
        .collect();
    let scopes: Vec<(&str, Option<&str>)> = survey
        .base_codes()
        .take(3)
        .flat_map(|base| groups.iter().map(move |&group| (base, group)))
        .collect();
    if scopes.is_empty() {
        return;
    }
    // Round robin: every scope is asked once and every pair at least once.
    for i in 0..scopes.len().max(pairs.len()) {
        let (base, group) = scopes[i % scopes.len()];
        let Some(request) = request(survey, base, group, pairs[i % pairs.len()]) else {
            continue;
        };
        match survey.crosstab(&request) {
            Ok(response) => {
                for result in &response.results {
                    assert!(
                        result.resps <= respondents,
                        "{} of {respondents} respondents",
                        result.resps
                    );
                }
            }
            Err(error) => panic!("a known base and group were refused: {error}"),
        }
    }
}

/// The validated request for these names, or `None` when a name is not one a client
/// could send (the header of a corrupt survey may hold any string).
fn request(
    survey: &Survey,
    base: &str,
    group: Option<&str>,
    targets: &[String],
) -> Option<ValidRequest> {
    let mut body = serde_json::json!({
        "SurveyCode": survey.code(),
        "PopulationBaseCode": base,
        "TargetCodes": targets,
    });
    if let Some(group) = group {
        body["AuthorizationGroup"] = group.into();
    }
    validate_value(&body).ok()
}
