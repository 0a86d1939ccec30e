//! `cargo +nightly fuzz run sav_reader`: see `crosstab_fuzz::check_sav_reader`.
#![no_main]

libfuzzer_sys::fuzz_target!(
    init: crosstab_fuzz::tolerate_panics_inside("ambers"),
    |data: &[u8]| {
        crosstab_fuzz::check_sav_reader(data);
    }
);
