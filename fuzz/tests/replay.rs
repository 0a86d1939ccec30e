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

/// Regression inputs that still fail, each with why and whether it fails in every build
/// (these tests' included): kept out of the fixed regressions' replay until the owning
/// crate is fixed; then the entry goes and the input stays.
const OPEN: [(&str, &str, bool); 2] = [
    (
        "sav_reader/ambers-info-record-mul-overflow",
        "ambers 0.4.6 multiplies a negative info-record size unchecked (an overflow panic \
         where ambers has overflow checks: the fuzzer's builds); see \
         crates/engine/tests/fuzz_regressions.rs",
        false,
    ),
    (
        "sav_reader/ambers-variable-label-negative-length",
        "ambers 0.4.6 slices a variable label with a negative length (panic in every \
         build); see crates/engine/tests/fuzz_regressions.rs",
        true,
    ),
];

fn is_open(target: &str, path: &Path) -> bool {
    let name = format!("{target}/{}", path.file_name().unwrap().to_string_lossy());
    OPEN.iter().any(|(open, ..)| *open == name)
}

#[test]
fn every_fixed_regression_passes_its_check() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("regressions");
    for (open, why, _) in OPEN {
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

/// The open findings that fail in every build still panic in the library (the engine
/// catches the panic and refuses the file, so the check itself passes): when one no
/// longer panics, its fix has arrived (an ambers release) and it is to leave OPEN, so the
/// fixed regressions hold it from then on.
#[test]
fn open_regressions_still_panic_upstream_until_fixed() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static PANICS: AtomicUsize = AtomicUsize::new(0);
    let mut open = 0;
    for (target, path) in inputs("regressions") {
        let name = format!("{target}/{}", path.file_name().unwrap().to_string_lossy());
        if OPEN
            .iter()
            .any(|(open, _, every_build)| *open == name && *every_build)
        {
            open += 1;
            let data = std::fs::read(&path).unwrap();
            // Panics of this thread only: the other tests run beside this one.
            let this = std::thread::current().id();
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                if std::thread::current().id() == this {
                    PANICS.fetch_add(1, Ordering::SeqCst);
                } else {
                    eprintln!("{info}");
                }
            }));
            let before = PANICS.load(Ordering::SeqCst);
            let _ = std::panic::catch_unwind(|| crosstab_fuzz::run(target, &data));
            let panicked = PANICS.load(Ordering::SeqCst) > before;
            std::panic::set_hook(previous);
            assert!(
                panicked,
                "{}: no longer panics; move it out of OPEN",
                path.display()
            );
        }
    }
    assert_eq!(
        open,
        OPEN.iter().filter(|(.., every_build)| *every_build).count()
    );
}

#[test]
fn an_unknown_target_is_refused() {
    assert_eq!(crosstab_fuzz::run("no_such_target", b""), None);
}

/// A compiled seed changed by a mutation still reaches the reader's checks past the
/// checksum (the harness seals it again), where unsealed it would stop at the checksum.
#[test]
fn mutated_survey_seeds_are_sealed_again() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds/survey_reader/vector-survey");
    let mut bytes = std::fs::read(path).unwrap();
    let at = bytes
        .windows(26)
        .position(|w| w == b"\"name\":\"Test-vector survey")
        .unwrap();
    bytes[at + 8] = b'B';
    assert!(crosstab_engine::Survey::from_bytes(&bytes).is_err());
    assert_eq!(crosstab_fuzz::run("survey_reader", &bytes), Some(true));
}
