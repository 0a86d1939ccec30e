//! `cargo +nightly fuzz run survey_import`: see `crosstab_fuzz::check_survey_import`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    crosstab_fuzz::check_survey_import(data);
});
