//! The import benchmark's two halves (run by `scripts/bench-import`):
//!
//! `import_bench generate DIR CASES VARIABLES` writes the same respondents as
//! `respondents.csv` and as SPSS `respondents.sav` (bytecode-compressed) and
//! `respondents.zsav` by ambers' writer, with a definition for each.
//!
//! `import_bench import DEFINITION` installs the survey into a temporary data dir, as
//! `crosstab survey import` does, and prints its time per cell and its peak memory
//! (VmHWM) against the compiled survey's size. Run one import per process, so the peak
//! is that import's.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{ArrayRef, Float64Builder, RecordBatch, StringBuilder};
use arrow::datatypes::{DataType, Field, Schema};
use crosstab_engine::import;
use crosstab_engine::store::SurveyStore;
use rand::{Rng, SeedableRng};

fn definition(respondents: &str) -> String {
    format!(
        "code = \"BENCH\"\nname = \"Import bench\"\nrespondents = \"{respondents}\"\n\
         id_column = \"RESPID\"\nweight_column = \"WEIGHT\"\n\n\
         [[population_bases]]\ncode = \"ALL\"\nexpr = \"*\"\n"
    )
}

fn generate(dir: &Path, cases: usize, variables: usize) {
    std::fs::create_dir_all(dir).unwrap();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(19);
    let mut fields = vec![
        Field::new("RESPID", DataType::Utf8, true),
        Field::new("WEIGHT", DataType::Float64, true),
    ];
    fields.extend((0..variables).map(|v| Field::new(format!("Q{v}"), DataType::Float64, true)));
    let schema = Arc::new(Schema::new(fields));
    let mut ids = StringBuilder::new();
    let mut weights = Float64Builder::with_capacity(cases);
    let mut columns: Vec<Float64Builder> = (0..variables)
        .map(|_| Float64Builder::with_capacity(cases))
        .collect();
    let csv = std::fs::File::create(dir.join("respondents.csv")).unwrap();
    let mut csv = std::io::BufWriter::with_capacity(1 << 20, csv);
    write!(csv, "RESPID,WEIGHT").unwrap();
    for v in 0..variables {
        write!(csv, ",Q{v}").unwrap();
    }
    writeln!(csv).unwrap();
    let mut line = String::new();
    for case in 0..cases {
        let id = format!("R{case:08}");
        let weight = f64::from(rng.gen_range(50u32..400)) / 100.0;
        line.clear();
        line.push_str(&id);
        line.push(',');
        line.push_str(&weight.to_string());
        ids.append_value(&id);
        weights.append_value(weight);
        for (v, column) in columns.iter_mut().enumerate() {
            // Survey-like answers: scales of 2 to 11 points, a few percent missing.
            if rng.gen_range(0u32..100) < 3 {
                column.append_null();
                line.push(',');
            } else {
                let value = f64::from(rng.gen_range(1u32..(3 + (v % 10) as u32)));
                column.append_value(value);
                line.push(',');
                line.push_str(&value.to_string());
            }
        }
        line.push('\n');
        csv.write_all(line.as_bytes()).unwrap();
    }
    csv.flush().unwrap();
    let mut arrays: Vec<ArrayRef> = vec![Arc::new(ids.finish()), Arc::new(weights.finish())];
    arrays.extend(columns.iter_mut().map(|c| Arc::new(c.finish()) as ArrayRef));
    let batch = RecordBatch::try_new(schema.clone(), arrays).unwrap();
    let meta = ambers::SpssMetadata::from_arrow_schema(&schema);
    ambers::write_sav(
        dir.join("respondents.sav"),
        &batch,
        &meta,
        ambers::Compression::Bytecode,
        None,
    )
    .unwrap();
    ambers::write_sav(
        dir.join("respondents.zsav"),
        &batch,
        &meta,
        ambers::Compression::Zlib,
        Some(1),
    )
    .unwrap();
    for format in ["csv", "sav", "zsav"] {
        std::fs::write(
            dir.join(format!("survey-{format}.toml")),
            definition(&format!("respondents.{format}")),
        )
        .unwrap();
    }
}

/// Peak resident memory of this process so far, in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn import_one(definition: &Path) {
    let data = tempfile::tempdir().unwrap();
    let store = SurveyStore::open(data.path()).unwrap();
    let start = Instant::now();
    let (survey, prepared) = import::install_file(definition, &store).unwrap();
    let seconds = start.elapsed().as_secs_f64();
    let cells = survey.respondents() as f64 * (survey.variable_names().count() + 2) as f64;
    let compiled = std::fs::metadata(store.path_of(survey.code()))
        .unwrap()
        .len();
    let peak = peak_rss();
    println!(
        "{:<5} {} cases x {} variables: {:.2} s, {:.1} ns/cell, peak RSS {:.0} MB = {:.2}x the compiled {:.0} MB",
        prepared.format.name(),
        survey.respondents(),
        survey.variable_names().count(),
        seconds,
        seconds * 1e9 / cells,
        peak as f64 / 1e6,
        peak as f64 / compiled as f64,
        compiled as f64 / 1e6,
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("generate") if args.len() == 5 => generate(
            Path::new(&args[2]),
            args[3].parse().unwrap(),
            args[4].parse().unwrap(),
        ),
        Some("import") if args.len() == 3 => import_one(Path::new(&args[2])),
        _ => {
            eprintln!("usage: import_bench generate DIR CASES VARIABLES | import DEFINITION");
            std::process::exit(2);
        }
    }
}
