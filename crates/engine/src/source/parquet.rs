//! Parquet respondent files, read in batches of cases by the `parquet` crate (arrow-rs).
//!
//! Columns read as SPSS ones do (see [`super::sav`]): numbers of any width, decimals and
//! booleans (1/0) are numbers, dates are days since 1970-01-01, timestamps seconds since
//! 1970-01-01 00:00 and durations seconds; nulls are missing answers; text columns may be
//! the id or the group, any other is skipped with a warning, as are columns of other
//! types. Parquet carries no labels: the definition's `[[variables]]` give them.

use std::fs::File;
use std::path::Path;

use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::sav::{check_cases, guarded, layout, source_error, stream, Missing, BATCH_CASES};
use super::Respondents;
use crate::definition::{SourceFormat, SurveyDefinition};
use crate::error::ImportError;

/// Reads a Parquet file's respondents for `definition`, streaming its row groups in
/// batches into column encoders. Returns them and the warnings (columns skipped).
pub(crate) fn read(
    definition: &SurveyDefinition,
    path: &Path,
) -> Result<(Respondents, Vec<String>), ImportError> {
    // The arrow and parquet readers may panic on a damaged file, as the SPSS reader has.
    guarded(&path.display().to_string(), "Parquet file", || {
        read_file(definition, path)
    })
}

fn read_file(
    definition: &SurveyDefinition,
    path: &Path,
) -> Result<(Respondents, Vec<String>), ImportError> {
    let file_name = path.display().to_string();
    let io = |source| ImportError::Io {
        path: file_name.clone(),
        source,
    };
    let file = File::open(path).map_err(io)?;
    let file_len = file.metadata().map_err(io)?.len();
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| {
        source_error(
            &file_name,
            None,
            format!("not a readable Parquet file: {e}"),
        )
    })?;
    let declared = u64::try_from(builder.metadata().file_metadata().num_rows()).ok();
    let fields = super::sav::fields_of(builder.schema());
    let layout = layout(
        definition,
        &|_: &str, _| Missing::default(),
        &fields,
        &file_name,
    )?;
    let warnings = layout
        .warnings()
        .into_iter()
        .map(|warning| format!("{file_name}: {warning}"))
        .collect();
    // Room for the declared rows, within what the file's bytes can plausibly encode.
    let bound = file_len.saturating_mul(8) / (fields.len().max(1) as u64);
    let reserve = usize::try_from(declared.unwrap_or(0).min(bound)).unwrap_or(0);
    let mut reader = builder.with_batch_size(BATCH_CASES).build().map_err(|e| {
        source_error(
            &file_name,
            None,
            format!("not a readable Parquet file: {e}"),
        )
    })?;
    let streamed = stream(definition, &layout, &file_name, reserve, || {
        reader.next().transpose().map_err(|e| e.to_string())
    })?;
    check_cases(&file_name, declared, streamed.cases)?;
    Ok((
        Respondents {
            ids: streamed.ids,
            weights: streamed.weights,
            group_values: streamed.group_values,
            group_labels: Vec::new(),
            columns: streamed.columns,
            labels: Vec::new(),
            codes: Vec::new(),
            format: SourceFormat::Parquet,
        },
        warnings,
    ))
}
