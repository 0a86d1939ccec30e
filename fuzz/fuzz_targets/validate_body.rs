//! `cargo +nightly fuzz run validate_body`: see `crosstab_fuzz::check_validate_body`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    crosstab_fuzz::check_validate_body(data);
});
