//! Inputs the fuzzer (`scripts/fuzz`) crashed the engine with, kept in
//! `fuzz/regressions/<target>/` and replayed here through the same public entries: each
//! must now give a clean error, or a survey that loads.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use crosstab_engine::{import, Survey};

/// The regression inputs of one fuzz target, in name order.
fn regressions(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/regressions")
        .join(target);
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&path).unwrap())
        })
        .collect()
}

/// The definition the `sav_reader` target imports every input with (`fuzz/src/lib.rs`).
const SAV_DEFINITION: &str = include_str!("../../../fuzz/sav_definition.toml");

/// All open, all in ambers 0.4.6, reached through `import::prepare_file`:
/// - `ambers-info-record-mul-overflow`: an info record (type 7) whose element size and
///   count are negative; `InfoRecordHeader::data_len` multiplies them as `usize`, which
///   panics with overflow checks on (debug builds, the tests) and wraps in release builds
///   (where the file-length check then refuses it).
/// - `ambers-variable-label-negative-length`: a variable record whose label length is
///   negative; `variable.rs:110` slices `label_bytes[..label_len]` with `usize::MAX`, a
///   panic in every build, release included.
/// - `ambers-zsav-negative-block-size`, `ambers-zsav-huge-block-size`: a `.zsav` whose
///   block table declares a negative or a huge uncompressed block size, which
///   `zlib.rs:96` allocates (`vec![0u8; size as usize]`); the engine now refuses such a
///   table before the reader sees the file.
///
/// The import refuses such files with an error (the engine catches the library's panic).
#[test]
fn hostile_sav_files_are_refused_or_imported_without_a_panic() {
    let inputs = regressions("sav_reader");
    assert!(!inputs.is_empty());
    for (name, bytes) in inputs {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("survey.toml"), SAV_DEFINITION).unwrap();
        std::fs::write(dir.path().join("data.sav"), &bytes).unwrap();
        match import::prepare_file(&dir.path().join("survey.toml")) {
            Ok(prepared) => {
                let bytes = prepared
                    .to_bytes()
                    .unwrap_or_else(|e| panic!("{name}: imported but does not compile: {e}"));
                Survey::from_bytes(&bytes)
                    .unwrap_or_else(|e| panic!("{name}: imported but does not load: {e}"));
            }
            Err(error) => assert!(!error.to_string().is_empty(), "{name}"),
        }
    }
}
