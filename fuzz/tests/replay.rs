//! Replays every committed seed and regression input through its target's check on the
//! stable toolchain: the checks run on known inputs without libFuzzer, and a fixed crash
//! stays fixed here as well as in the owning crate's `fuzz_regressions.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

#[test]
fn every_seed_and_regression_passes_its_check() {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut replayed = 0;
    for kind in ["seeds", "regressions"] {
        for target in crosstab_fuzz::TARGETS {
            let dir = fuzz.join(kind).join(target);
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries {
                let path = entry.unwrap().path();
                let data = std::fs::read(&path).unwrap();
                let accepted = crosstab_fuzz::run(target, &data);
                // A survey seed is a good survey: one the target refuses explores nothing past
                // the first check. A regression input is anything that once crashed.
                if kind == "seeds"
                    && ["survey_reader", "survey_import", "sav_reader"].contains(&target)
                {
                    assert_eq!(accepted, Some(true), "seed {} is refused", path.display());
                }
                assert!(accepted.is_some(), "{target}");
                replayed += 1;
            }
        }
    }
    for target in crosstab_fuzz::TARGETS {
        let seeds = fuzz.join("seeds").join(target);
        assert!(
            std::fs::read_dir(&seeds).is_ok_and(|mut d| d.next().is_some()),
            "{} has no seeds: run fuzz/make-seeds",
            seeds.display()
        );
    }
    assert!(replayed > 0);
}

#[test]
fn unknown_target_is_refused() {
    assert_eq!(crosstab_fuzz::run("no_such_target", b""), None);
}
