//! `cargo +nightly fuzz run expression`: see `crosstab_fuzz::check_expression`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    crosstab_fuzz::check_expression(data);
});
