//! `cargo +nightly fuzz run survey_reader`: see `crosstab_fuzz::check_survey_reader`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    crosstab_fuzz::check_survey_reader(data);
});
