//! Writes the committed seed corpora, `fuzz/seeds/<target>/`, from the project's own test
//! data: the request bodies and target codes of `tests/vectors/*.json`, the vector survey
//! (as a definition and CSV, and compiled, also as a file from before checksums, and as an
//! earlier build wrote it with weight planes: `fuzz/fixtures/`), and the SPSS fixtures of
//! the engine's tests.
//!
//! `fuzz/make-seeds` runs it; rerun it when the vectors or the compiled format change.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use crosstab_engine::import;
use crosstab_fuzz::IMPORT_SEPARATOR;
use serde_json::Value;

fn main() {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = fuzz.parent().expect("fuzz/ has a parent");
    let seeds = fuzz.join("seeds");
    let vectors = root.join("tests/vectors");
    let sav = root.join("crates/engine/tests/fixtures/sav");

    let mut bodies = Seeds::new(seeds.join("validate_body"));
    let mut expressions = Seeds::new(seeds.join("expression"));
    let mut paths: Vec<PathBuf> = fs::read_dir(&vectors)
        .expect("tests/vectors")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();
    for path in &paths {
        let vector: Value = serde_json::from_slice(&fs::read(path).unwrap()).unwrap();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let request = &vector["request"];
        // The oversized body says nothing a short one doesn't; it only slows the fuzzer.
        let body = serde_json::to_vec(request).unwrap();
        if body.len() <= crosstab_contract::limits::MAX_BODY_BYTES {
            bodies.add(&name, &body);
        }
        if let Some(Value::Array(targets)) = request.get("TargetCodes") {
            for (i, target) in targets.iter().enumerate() {
                if let Value::String(text) = target {
                    if text.len() <= 1024 {
                        expressions.add(&format!("{name}-{i}"), text.as_bytes());
                    }
                }
            }
        }
    }

    let survey = root.join("tests/vectors/survey");
    let toml = fs::read(survey.join("survey.toml")).unwrap();
    let csv = fs::read(survey.join("respondents.csv")).unwrap();
    let definition = String::from_utf8(toml.clone()).unwrap();
    for expr in definition.lines().filter_map(|l| l.strip_prefix("expr = ")) {
        let text: String = serde_json::from_str(expr).unwrap();
        expressions.add(&format!("vector-survey-{text}"), text.as_bytes());
    }
    let mut imports = Seeds::new(seeds.join("survey_import"));
    imports.add("vector-survey", &import_input(&toml, &csv));
    let sav_csv = fs::read(sav.join("respondents.csv")).unwrap();
    let sav_toml = sav_definition_as_csv();
    imports.add(
        "sav-fixture-as-csv",
        &import_input(sav_toml.as_bytes(), &sav_csv),
    );

    let mut compiled = Seeds::new(seeds.join("survey_reader"));
    let vector_survey = import::compile_file(&survey.join("survey.toml")).unwrap();
    compiled.add("vector-survey", &vector_survey);
    compiled.add(
        "vector-survey-before-checksums",
        &before_checksums(&vector_survey),
    );
    // A builder writes weight planes only beside ten times their bytes (a block's planes
    // take ~40 KB): a small file with them, as an earlier build wrote the vector survey,
    // keeps the planes' checks within the fuzzer's reach.
    let with_planes = fs::read(fuzz.join("fixtures/vector-survey-with-planes.ctxs")).unwrap();
    assert!(String::from_utf8_lossy(&with_planes).contains("\"weight_planes\""));
    compiled.add("vector-survey-with-planes", &with_planes);
    compiled.add(
        "sav-fixture-as-csv",
        &import::compile(&sav_toml, "survey.toml", &sav_csv[..], "respondents.csv").unwrap(),
    );

    let mut spss = Seeds::new(seeds.join("sav_reader"));
    for name in ["labelled.sav", "labelled-rows.sav", "labelled.zsav"] {
        spss.add(name, &fs::read(sav.join(name)).unwrap());
    }
    // Paths only some files take: a bytecode file leaving its case count unset (-1, at
    // offset 80), and text declared in DOS's code page 437 (REGION's label with an é).
    let mut uncounted = fs::read(sav.join("labelled-rows.sav")).unwrap();
    uncounted[80..84].copy_from_slice(&(-1i32).to_le_bytes());
    spss.add("labelled-rows-uncounted.sav", &uncounted);
    let mut dos = fs::read(sav.join("labelled.sav")).unwrap();
    let encoding_record = [7i32, 20, 1, 5].map(i32::to_le_bytes).concat();
    for (from, to) in [
        (
            [&encoding_record[..], b"UTF-8"].concat(),
            [&encoding_record[..], b"cp437"].concat(),
        ),
        (b"Region".to_vec(), b"R\x82gion".to_vec()),
    ] {
        let at = dos.windows(from.len()).position(|w| w == from).unwrap();
        dos[at..at + to.len()].copy_from_slice(&to);
    }
    spss.add("labelled-cp437.sav", &dos);

    for set in [bodies, expressions, imports, compiled, spss] {
        set.finish();
    }
}

/// A `survey_import` input: the definition, the separator, the CSV.
fn import_input(toml: &[u8], csv: &[u8]) -> Vec<u8> {
    let mut input = toml.to_vec();
    input.push(IMPORT_SEPARATOR);
    input.extend_from_slice(csv);
    input
}

/// The SPSS fixtures' data as CSV, with the definition `sav_reader` uses.
fn sav_definition_as_csv() -> String {
    r#"code = "FIX"
name = "Fixture"
respondents = "respondents.csv"
id_column = "RESPID"
weight_column = "WEIGHT"
group_column = "REGION"

[[variables]]
name = "GENDER"
label = "Gender"
values = { "1" = "Male", "2" = "Female" }

[[codes]]
code = "HAPPY"
expr = "SAT >= 4"

[[population_bases]]
code = "ALL"
expr = "*"

[[population_bases]]
code = "HAPPY_WOMEN"
expr = "HAPPY AND GENDER = 2"
"#
    .to_owned()
}

/// A compiled file as builds before checksums wrote it: its header without the
/// `checksum` member (padded with spaces to its length, so the sections stay put), and
/// without the 16 bytes of checksum at its end.
fn before_checksums(bytes: &[u8]) -> Vec<u8> {
    let len = usize::try_from(u64::from_le_bytes(bytes[8..16].try_into().unwrap())).unwrap();
    let mut header: Value = serde_json::from_slice(&bytes[16..16 + len]).unwrap();
    header
        .as_object_mut()
        .unwrap()
        .remove("checksum")
        .expect("a checksum named");
    let mut json = serde_json::to_vec(&header).unwrap();
    json.resize(len, b' ');
    let mut out = bytes[..bytes.len() - 16].to_vec();
    out[16..16 + len].copy_from_slice(&json);
    out
}

/// One target's seed directory, rewritten whole: files from an earlier run that are no
/// longer produced are removed.
struct Seeds {
    dir: PathBuf,
    written: BTreeSet<String>,
}

impl Seeds {
    fn new(dir: PathBuf) -> Seeds {
        fs::create_dir_all(&dir).unwrap();
        Seeds {
            dir,
            written: BTreeSet::new(),
        }
    }

    fn add(&mut self, name: &str, bytes: &[u8]) {
        let file: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .take(80)
            .collect();
        // Two seeds with one sanitised name: the later one gets a counter.
        let mut unique = file.clone();
        let mut n = 1;
        while self.written.contains(&unique) {
            n += 1;
            unique = format!("{file}-{n}");
        }
        fs::write(self.dir.join(&unique), bytes).unwrap();
        self.written.insert(unique);
    }

    fn finish(self) {
        for entry in fs::read_dir(&self.dir).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            if !self.written.contains(&name) {
                fs::remove_file(entry.path()).unwrap();
            }
        }
        println!("{}: {} seeds", self.dir.display(), self.written.len());
    }
}
