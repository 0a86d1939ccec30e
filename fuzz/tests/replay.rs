//! Replays the committed seeds and regression inputs through their targets' checks on the
//! stable toolchain, without libFuzzer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

/// Every input under `fuzz/<kind>/<target>/`, with its target's name.
fn inputs(kind: &str) -> Vec<(&'static str, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(kind);
    let mut found = Vec::new();
    for target in crosstab_fuzz::TARGETS {
        let Ok(entries) = std::fs::read_dir(root.join(target)) else {
            continue;
        };
        for entry in entries {
            found.push((target, entry.unwrap().path()));
        }
    }
    found.sort();
    found
}

#[test]
fn every_target_has_seeds_and_its_survey_seeds_are_accepted() {
    let seeds = inputs("seeds");
    for target in crosstab_fuzz::TARGETS {
        assert!(
            seeds.iter().any(|(t, _)| *t == target),
            "fuzz/seeds/{target} is empty: run fuzz/make-seeds"
        );
    }
    for (target, path) in seeds {
        let accepted = crosstab_fuzz::run(target, &std::fs::read(&path).unwrap());
        // A survey seed the target refuses would explore nothing past the first check;
        // bodies and expressions include the vectors' refused ones on purpose.
        if ["survey_reader", "survey_import", "sav_reader"].contains(&target) {
            assert_eq!(accepted, Some(true), "seed {} is refused", path.display());
        } else {
            assert!(accepted.is_some());
        }
    }
}

/// Regression inputs that still fail, each with why: replayed only by the ignored test
/// below until the owning crate is fixed; then the entry goes and the input stays.
const OPEN: [(&str, &str); 2] = [
    (
        "sav_reader/ambers-info-record-mul-overflow",
        "ambers 0.4.6 multiplies a negative info-record size unchecked (overflow panic in \
         debug builds); see crates/engine/tests/fuzz_regressions.rs",
    ),
    (
        "sav_reader/ambers-variable-label-negative-length",
        "ambers 0.4.6 slices a variable label with a negative length (panic in every \
         build); see crates/engine/tests/fuzz_regressions.rs",
    ),
];

fn is_open(target: &str, path: &Path) -> bool {
    let name = format!("{target}/{}", path.file_name().unwrap().to_string_lossy());
    OPEN.iter().any(|(open, _)| *open == name)
}

#[test]
fn every_fixed_regression_passes_its_check() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("regressions");
    for (open, why) in OPEN {
        assert!(
            root.join(open).is_file(),
            "OPEN names a missing input {open} ({why})"
        );
    }
    for (target, path) in inputs("regressions") {
        if !is_open(target, &path) {
            let data = std::fs::read(&path).unwrap();
            assert!(crosstab_fuzz::run(target, &data).is_some());
        }
    }
}

#[test]
#[ignore = "open findings: see OPEN"]
fn open_regressions_pass_their_checks() {
    for (target, path) in inputs("regressions") {
        if is_open(target, &path) {
            let data = std::fs::read(&path).unwrap();
            assert!(crosstab_fuzz::run(target, &data).is_some());
        }
    }
}

#[test]
fn an_unknown_target_is_refused() {
    assert_eq!(crosstab_fuzz::run("no_such_target", b""), None);
}
