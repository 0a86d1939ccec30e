//! SPSS system files (`.sav`, bytecode-compressed or not, and zlib-compressed `.zsav`),
//! read by the pure-Rust `ambers` reader in batches of cases.
//!
//! - Numeric variables become variables; their variable and value labels become the
//!   codebook's labels.
//! - System-missing values and user-missing values (discrete values and ranges, a string's
//!   discrete strings) become missing answers, groups and ids; their labels are left out.
//! - Dates are days since 1970-01-01; date-times are seconds since 1970-01-01 00:00;
//!   times and durations are seconds.
//! - String variables are not variables: the id and the group may be strings, any other
//!   is skipped with a warning. The weight must be numeric.
//! - Multiple-response sets become named codes (see [`set_codes`]).

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{Read, Seek};
use std::path::Path;

use ambers::{MissingSpec, MrType, SpssMetadata, Value};
use arrow::array::{
    Array, ArrayRef, Date32Array, DurationMicrosecondArray, Float64Array, RecordBatch, StringArray,
    StringViewArray, TimestampMicrosecondArray,
};
use arrow::datatypes::{DataType, TimeUnit};
use crosstab_contract::ALL_GROUPS;

use super::Respondents;
use crate::definition::{SourceFormat, SurveyDefinition};
use crate::error::ImportError;
use crate::names::{is_expr_name, is_identifier, shorten};
use crate::source::bytecode::{
    set_field, Input as SavInput, Notes, Overrun, Past, COMPRESSION_FIELD,
};
use crate::source::spss_text::SpssText;
use crate::source::{ColumnEncoder, EncodedColumn, SourceCode, SourceLabels};

/// Cases per batch: small enough that a batch of 1,000 variables stays near 32 MB.
pub(super) const BATCH_CASES: usize = 4096;

/// Most cases room is made for before any is read, whatever a header declares.
const MAX_RESERVED_CASES: usize = 1 << 20;

/// SPSS counts time in seconds from 1582-10-14; this many lie before 1970-01-01.
const SPSS_EPOCH_TO_UNIX: f64 = 12_219_379_200.0;

/// How a variable's stored numbers become the survey's numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Number,
    /// Days since 1970-01-01.
    Date,
    /// Seconds since 1970-01-01 00:00.
    DateTime,
    /// Seconds.
    Duration,
    Text,
}

impl Kind {
    /// How a column of this type reads; `None` for types that are neither numbers,
    /// dates, times nor text.
    pub(crate) fn of(data_type: &DataType) -> Option<Kind> {
        Some(match data_type {
            DataType::Date32 | DataType::Date64 => Kind::Date,
            DataType::Timestamp(_, _) => Kind::DateTime,
            DataType::Duration(_) => Kind::Duration,
            DataType::Utf8View | DataType::Utf8 | DataType::LargeUtf8 => Kind::Text,
            DataType::Dictionary(_, values) if values.is_string() => Kind::Text,
            other if arrow::compute::can_cast_types(other, &DataType::Float64) => Kind::Number,
            _ => return None,
        })
    }

    /// The array type a column of this kind is read as.
    fn array_type(self) -> DataType {
        match self {
            Kind::Number => DataType::Float64,
            Kind::Date => DataType::Date32,
            Kind::DateTime => DataType::Timestamp(TimeUnit::Microsecond, None),
            Kind::Duration => DataType::Duration(TimeUnit::Microsecond),
            Kind::Text => DataType::Utf8View,
        }
    }

    /// A value as SPSS stores it (seconds since 1582 for dates) in this kind's unit,
    /// for user-missing values and value labels, which the file gives in SPSS's unit.
    fn convert_spss(self, value: f64) -> f64 {
        match self {
            Kind::Date => ((value - SPSS_EPOCH_TO_UNIX) / 86_400.0).floor(),
            Kind::DateTime => value - SPSS_EPOCH_TO_UNIX,
            Kind::Number | Kind::Duration | Kind::Text => value,
        }
    }
}

/// User-missing values of one variable, in its unit (a string variable's trimmed, as
/// its answers are read).
#[derive(Debug, Clone, Default)]
pub(super) struct Missing {
    values: Vec<f64>,
    ranges: Vec<(f64, f64)>,
    texts: Vec<String>,
}

impl Missing {
    fn of(meta: &SpssMetadata, name: &str, kind: Kind) -> Missing {
        let mut missing = Missing::default();
        for spec in meta.variable_missing_values.get(name).into_iter().flatten() {
            match spec {
                MissingSpec::Value(v) => missing.values.push(kind.convert_spss(*v)),
                MissingSpec::Range { lo, hi } => missing
                    .ranges
                    .push((kind.convert_spss(*lo), kind.convert_spss(*hi))),
                MissingSpec::StringValue(text) => missing.texts.push(text.trim().to_owned()),
            }
        }
        missing
    }

    /// Whether a string answer, trimmed, is one of the user-missing strings.
    fn contains_text(&self, text: &str) -> bool {
        self.texts.iter().any(|m| m == text)
    }

    /// Whether a labelled value of a variable of `kind`, in SPSS's unit, is one of these.
    fn holds(&self, value: &Value, kind: Kind) -> bool {
        match value {
            Value::Numeric(v) => self.contains(kind.convert_spss(*v)),
            Value::String(text) => self.contains_text(text.trim()),
        }
    }

    /// Whether the file labels any of these values of variable `name` (of `kind`).
    fn labels_some(&self, meta: &SpssMetadata, name: &str, kind: Kind) -> bool {
        let labels = meta.variable_value_labels.get(name).into_iter().flatten();
        labels.into_iter().any(|(value, _)| self.holds(value, kind))
    }

    /// Whether an answer as [`texts`] writes it (a string, or a number as text) is one of
    /// these.
    fn contains_written(&self, written: &str, kind: Kind) -> bool {
        match kind {
            Kind::Text => self.contains_text(written),
            _ => written.parse().is_ok_and(|value| self.contains(value)),
        }
    }

    #[inline]
    fn contains(&self, value: f64) -> bool {
        self.values.contains(&value)
            || self
                .ranges
                .iter()
                .any(|(lo, hi)| *lo <= value && value <= *hi)
    }
}

/// One variable of the file the import keeps.
struct Input {
    name: String,
    /// Its column in the file's record batches.
    at: usize,
    kind: Kind,
    missing: Missing,
}

/// What the scanner reports for a file it can't read.
pub(super) fn source_error(file: &str, variable: Option<&str>, reason: String) -> ImportError {
    ImportError::Source {
        file: file.to_owned(),
        variable: variable.map(str::to_owned),
        reason,
    }
}

/// An SPSS file open for reading, with what the reader alone would miss of it.
struct Opened {
    scanner: ambers::Scanner<SavInput<File>>,
    /// How its text becomes the file's.
    text: SpssText,
    /// The multiple-response sets of its set records before the last ([`earlier_sets`]).
    earlier_sets: Vec<(String, ambers::MrSet)>,
    /// What the reader says of a compressed file's unusual bias, which it does not see
    /// in a bytecode file shown to it decoded.
    bias_warning: Option<String>,
    /// Whether a bytecode file's data goes on past the cases the reader is shown.
    overrun: Overrun,
    /// An uncompressed file's bytes of data after its last whole case, which the reader
    /// leaves unread.
    partial_case: Option<u64>,
}

impl Opened {
    /// The file's metadata as the import reads it: the sets of every set record (the
    /// earlier records' first, a set the last record also has as it has it), and its
    /// text as the file wrote it.
    fn metadata(&self) -> SpssMetadata {
        let mut meta = self.scanner.metadata().clone();
        if !self.earlier_sets.is_empty() {
            let last = std::mem::take(&mut meta.mr_sets);
            let earlier: Vec<_> = self
                .earlier_sets
                .iter()
                .filter(|(name, _)| !last.contains_key(name))
                .cloned()
                .collect();
            meta.mr_sets = earlier.into_iter().chain(last).collect();
        }
        self.text.metadata(&mut meta);
        meta
    }

    /// What the import says of the file that the reader, shown it decoded or taking its
    /// text for another encoding, does not.
    fn warnings(&self) -> impl Iterator<Item = String> + '_ {
        self.text
            .warning()
            .into_iter()
            .chain(self.bias_warning.clone())
    }
}

/// Opens `path` for reading; the reader's errors become [`ImportError::Source`].
fn open(path: &Path) -> Result<Opened, ImportError> {
    let io = |source| ImportError::Io {
        path: path.display().to_string(),
        source,
    };
    let name = path.display().to_string();
    let file = File::open(path).map_err(io)?;
    // A dictionary the walk can't follow (no notes) is the reader's to refuse, below.
    let (input, mut notes) = SavInput::open(file).map_err(|error| match error.kind() {
        // A damaged file, told before the reader saw it.
        std::io::ErrorKind::InvalidData => source_error(
            &name,
            None,
            format!("not a readable SPSS system file: {error}"),
        ),
        _ => io(error),
    })?;
    let text = notes
        .as_ref()
        .map_or(SpssText::AsRead, |notes| SpssText::of(&notes.text));
    let earlier_sets = match &notes {
        Some(notes) => earlier_sets(path, notes, &name)?,
        None => Vec::new(),
    };
    let partial_case = notes.as_mut().and_then(|notes| notes.partial_case.take());
    let bias = notes.and_then(|notes| notes.bytecode_bias);
    let overrun = input.overrun();
    // A file the reader is shown as it is gets the reader's own warning.
    let bias_warning = bias
        .filter(|bias| *bias != 100.0 && matches!(input, SavInput::Inflated(_)))
        .map(|bias| {
            format!(
                "compression bias in the header is {bias} instead of the standard 100: \
                 compressed whole numbers were read with it, so they may differ by {} from \
                 what SPSS shows (SPSS reads such a file assuming 100)",
                100.0 - bias
            )
        });
    Ok(Opened {
        scanner: scan(input, &name)?,
        text,
        earlier_sets,
        bias_warning,
        overrun,
        partial_case,
    })
}

/// Whether the data, read, ended where the header says the cases do (`declared`, as the
/// reader was shown it; `overrun` and `partial_case` as [`Opened`] has them): cases it
/// does not count, or a case cut short, refuse the file; bytes after the declared cases
/// are said.
fn check_data_end(
    file: &str,
    overrun: &Overrun,
    partial_case: Option<u64>,
    declared: Option<u64>,
) -> Result<Option<String>, ImportError> {
    let refused = |reason: String| Err(source_error(file, None, reason));
    match (overrun.past(), partial_case, declared) {
        (Some(Past::MoreCases), ..) => refused(format!(
            "truncated or damaged: the header declares {} cases but its data holds more",
            declared.unwrap_or(0)
        )),
        (Some(Past::CutCase), ..) | (None, Some(_), None) => {
            refused("truncated: its data ends inside a case".to_owned())
        }
        (None, Some(rest), Some(declared)) => Ok(Some(format!(
            "{rest} bytes after the data's last whole case (of the {declared} the header \
             declares) were ignored"
        ))),
        (None, None, _) => Ok(None),
    }
}

/// Largest header and dictionary read a second time by [`earlier_sets`]: SPSS's are
/// kilobytes to a few megabytes.
const MAX_DICTIONARY_REREAD: u64 = 256 << 20;

/// A subtype no reader knows, which the reader skips.
const SKIPPED_SUBTYPE: i32 = 99;

/// Most set records read: SPSS writes at most two, and each one before the last costs a
/// read of the whole dictionary.
const MAX_SET_RECORDS: usize = 4;

/// The multiple-response sets of each of the file's set records but the last. The reader
/// keeps the last record's sets alone, and SPSS writes two: 7, and 19 for dichotomy sets
/// labelled by their counted values (which older readers skip). Each earlier record is
/// read by the reader from the header and dictionary alone, every other set record made
/// one of a subtype it skips and the data marked uncompressed, so it reads none.
fn earlier_sets(
    path: &Path,
    notes: &Notes,
    file: &str,
) -> Result<Vec<(String, ambers::MrSet)>, ImportError> {
    let Some((_, earlier)) = notes.set_records.split_last() else {
        return Ok(Vec::new());
    };
    if earlier.is_empty() {
        return Ok(Vec::new());
    }
    let refused = |reason: String| source_error(file, None, reason);
    if notes.set_records.len() > MAX_SET_RECORDS {
        return Err(refused(format!(
            "its dictionary has {} multiple-response set records, where SPSS writes at most two",
            notes.set_records.len()
        )));
    }
    let head_len = usize::try_from(notes.end)
        .ok()
        .filter(|_| notes.end <= MAX_DICTIONARY_REREAD)
        .ok_or_else(|| {
            refused(format!(
                "its multiple-response sets are in {} records, and its dictionary is too \
                 large ({} bytes) to read them all",
                notes.set_records.len(),
                notes.end
            ))
        })?;
    let mut head = vec![0u8; head_len];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .map_err(|source| ImportError::Io {
            path: file.to_owned(),
            source,
        })?;
    let mut sets = Vec::new();
    for record in earlier {
        let mut alone = head.clone();
        let mut fields = notes
            .set_records
            .iter()
            .filter(|other| *other != record)
            .map(|other| (other.saturating_add(4), SKIPPED_SUBTYPE))
            .chain([(COMPRESSION_FIELD, 0)]);
        fields
            .try_for_each(|(at, value)| set_field(&mut alone, at, value, notes.big_endian))
            .ok_or_else(|| refused("a set record lies outside its dictionary".to_owned()))?;
        let scanner = scan(std::io::Cursor::new(alone), file)?;
        sets.extend(scanner.metadata().mr_sets.clone());
    }
    Ok(sets)
}

fn scan<R: Read + Seek>(reader: R, file: &str) -> Result<ambers::Scanner<R>, ImportError> {
    ambers::scan_sav_from_reader(reader, BATCH_CASES)
        .map_err(|e| source_error(file, None, format!("not a readable SPSS system file: {e}")))
}

/// A value as it reads in a definition and in expressions: integers without a
/// fraction, others in the shortest form that reads back the same.
pub(crate) fn number_text(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{}", value as i64)
    } else {
        format!("{value}")
    }
}

/// A numeric variable's label and value labels as the file gives them, in its unit,
/// but for the labels of its user-missing values: those answers are missing, so no
/// answer has them.
fn labels_of(meta: &SpssMetadata, input: &Input) -> SourceLabels {
    let label = meta
        .variable_labels
        .get(&input.name)
        .filter(|l| !l.trim().is_empty())
        .cloned();
    let values = meta
        .variable_value_labels
        .get(&input.name)
        .into_iter()
        .flatten()
        .filter_map(|(value, label)| match value {
            Value::Numeric(v) if v.is_finite() => {
                Some((input.kind.convert_spss(*v), label.clone()))
            }
            _ => None,
        })
        .filter(|(value, _)| !input.missing.contains(*value))
        .collect();
    SourceLabels { label, values }
}

/// The variables with labelled user-missing values, said once: their answers import as
/// missing, so those labels are left out of the codebook.
fn missing_labels_warning(
    meta: &SpssMetadata,
    layout: &Layout,
    group: Option<&str>,
) -> Option<String> {
    let mut named: Vec<&str> = layout
        .inputs
        .iter()
        .filter(|input| input.missing.labels_some(meta, &input.name, input.kind))
        .map(|input| input.name.as_str())
        .collect();
    // The group's labels of user-missing values name no group (a string group, or one
    // that is not also a variable, is not among the inputs).
    if let (Some(name), Some((_, kind))) = (group, layout.group) {
        if !named.contains(&name) && layout.group_missing.labels_some(meta, name, kind) {
            named.push(name);
        }
    }
    const LISTED: usize = 20;
    let more = match named.len().saturating_sub(LISTED) {
        0 => String::new(),
        more => format!(" and {more} more"),
    };
    (!named.is_empty()).then(|| {
        format!(
            "user-missing values import as missing answers, so their value labels are left out: {}{more}",
            named[..named.len().min(LISTED)].join(", ")
        )
    })
}

/// Named codes for the file's multiple-response sets, over the variables kept, and a
/// warning for each set that can't be one. A set `$S` becomes code `S`:
/// - a multiple-dichotomy set: `S` is any member equal to the counted value;
/// - a multiple-category set: `S_v` is any member equal to category `v` (each value
///   labelled on a member), and `S` is any member in any of those categories.
fn set_codes(meta: &SpssMetadata, layout: &Layout, warnings: &mut Vec<String>) -> Vec<SourceCode> {
    let mut codes: Vec<SourceCode> = Vec::new();
    // A code two sets would make (`$S` with category 1 and a set `$S_1`) is the first's.
    let mut made: HashSet<String> = HashSet::new();
    for (key, set) in &meta.mr_sets {
        let raw = if set.name.is_empty() { key } else { &set.name };
        let code = raw.trim_start_matches('$').to_owned();
        let label = Some(set.label.trim().to_owned()).filter(|l| !l.is_empty());
        if !is_expr_name(&code) {
            warnings.push(format!(
                "multiple-response set '{raw}' skipped: '{code}' can't name a code"
            ));
            continue;
        }
        if let Some(member) = set.variables.iter().find(|m| layout.input(m).is_none()) {
            warnings.push(format!(
                "multiple-response set '{raw}' skipped: its member '{member}' is not a numeric variable"
            ));
            continue;
        }
        if set.variables.is_empty() {
            warnings.push(format!(
                "multiple-response set '{raw}' skipped: it has no members"
            ));
            continue;
        }
        if made.contains(&code) {
            warnings.push(format!(
                "multiple-response set '{raw}' skipped: an earlier set already made code '{code}'"
            ));
            continue;
        }
        let any_equal = |value: f64| {
            set.variables
                .iter()
                .map(|m| format!("{m} = {}", number_text(value)))
                .collect::<Vec<_>>()
                .join(" OR ")
        };
        match set.mr_type {
            MrType::MultipleDichotomy => {
                let counted = set.counted_value.as_deref().unwrap_or("1").trim();
                match counted.parse::<f64>() {
                    Ok(value) if value.is_finite() => {
                        made.insert(code.clone());
                        codes.push(SourceCode {
                            code,
                            label,
                            expr: any_equal(value),
                        });
                    }
                    _ => warnings.push(format!(
                        "multiple-response set '{raw}' skipped: counted value '{counted}' is not a number"
                    )),
                }
            }
            MrType::MultipleCategory => {
                let mut categories: Vec<(f64, String)> = Vec::new();
                for input in set.variables.iter().filter_map(|m| layout.input(m)) {
                    for (value, value_label) in labels_of(meta, input).values {
                        if !categories.iter().any(|(v, _)| *v == value) {
                            categories.push((value, value_label));
                        }
                    }
                }
                categories.sort_by(|a, b| a.0.total_cmp(&b.0));
                if categories.is_empty() {
                    warnings.push(format!(
                        "multiple-response set '{raw}' skipped: its members have no labelled categories"
                    ));
                    continue;
                }
                let listed = categories
                    .iter()
                    .map(|(v, _)| number_text(*v))
                    .collect::<Vec<_>>()
                    .join(", ");
                made.insert(code.clone());
                codes.push(SourceCode {
                    code: code.clone(),
                    label: label.clone(),
                    expr: set
                        .variables
                        .iter()
                        .map(|m| format!("{m} IN ({listed})"))
                        .collect::<Vec<_>>()
                        .join(" OR "),
                });
                for (value, value_label) in &categories {
                    let name = format!("{code}_{}", number_text(*value).replace('.', "_"));
                    if !is_expr_name(&name) {
                        warnings.push(format!(
                            "multiple-response set '{raw}': category {} has no code ('{name}' can't name one)",
                            number_text(*value)
                        ));
                        continue;
                    }
                    if !made.insert(name.clone()) {
                        warnings.push(format!(
                            "multiple-response set '{raw}': category {} has no code ('{name}' is already made)",
                            number_text(*value)
                        ));
                        continue;
                    }
                    codes.push(SourceCode {
                        code: name,
                        label: Some(match &label {
                            Some(set_label) => format!("{set_label}: {value_label}"),
                            None => value_label.clone(),
                        }),
                        expr: any_equal(*value),
                    });
                }
            }
        }
    }
    codes
}

/// The weight variable: where it is, its name, kind and user-missing values.
struct WeightColumn {
    at: usize,
    name: String,
    kind: Kind,
    missing: Missing,
}

/// Where the definition's id, weight and group are, and the variables kept.
pub(super) struct Layout {
    id: (usize, Kind),
    id_missing: Missing,
    /// `None`: an unweighted survey, every weight 1.
    weight: Option<WeightColumn>,
    group: Option<(usize, Kind)>,
    group_missing: Missing,
    inputs: Vec<Input>,
    /// Each input's place in `inputs`, by name.
    by_name: HashMap<String, usize>,
    skipped_strings: Vec<String>,
    /// Columns of other types (lists, structs, binary), skipped.
    skipped_other: Vec<String>,
    /// Numeric variables whose names targets can't use, skipped.
    skipped_names: Vec<String>,
}

impl Layout {
    /// The numeric variable kept under `name`.
    fn input(&self, name: &str) -> Option<&Input> {
        self.by_name.get(name).and_then(|&at| self.inputs.get(at))
    }

    /// The value labels of the group variable `name`, by the group each value reads as
    /// (a string group's labels too), but for its user-missing values: no group.
    fn group_labels(&self, meta: &SpssMetadata, name: &str) -> Vec<(String, String)> {
        let Some((_, kind)) = self.group else {
            return Vec::new();
        };
        let labels = meta.variable_value_labels.get(name).into_iter().flatten();
        labels
            .filter(|(value, _)| !self.group_missing.holds(value, kind))
            .filter_map(|(value, label)| {
                // The group as `texts` reads it: a number as text, a string trimmed.
                let group = match value {
                    Value::Numeric(v) => Some(kind.convert_spss(*v))
                        .filter(|v| v.is_finite())
                        .map(number_text),
                    Value::String(text) => Some(text.trim())
                        .filter(|text| !text.is_empty())
                        .map(str::to_owned),
                }?;
                Some((group, label.clone()))
            })
            .collect()
    }

    /// The columns skipped, said once per kind (names as `listed` gives them).
    pub(super) fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        if !self.skipped_strings.is_empty() {
            warnings.push(format!(
                "string variables are not survey variables; skipped: {}",
                listed(&self.skipped_strings)
            ));
        }
        if !self.skipped_other.is_empty() {
            warnings.push(format!(
                "columns that are neither numbers, dates nor text; skipped: {}",
                listed(&self.skipped_other)
            ));
        }
        if let Some(said) = self.skipped_names_warning() {
            warnings.push(said);
        }
        warnings
    }

    /// The numeric variables skipped for their names, if any.
    fn skipped_names_warning(&self) -> Option<String> {
        (!self.skipped_names.is_empty()).then(|| {
            format!(
                "variables whose names a target can't use (a name starts with a letter or '_', \
                 uses only letters, digits, '_' and '.', and is not AND, OR, NOT, IN or \
                 BETWEEN); skipped, rename them in the file to import them: {}",
                listed(&self.skipped_names)
            )
        })
    }
}

/// User-missing values of a variable (none for sources without them).
pub(super) type MissingOf<'a> = &'a dyn Fn(&str, Kind) -> Missing;

/// A schema's columns as `layout` takes them: name and type, in order.
pub(super) fn fields_of(schema: &arrow::datatypes::Schema) -> Vec<(String, DataType)> {
    schema
        .fields()
        .iter()
        .map(|f| (f.name().clone(), f.data_type().clone()))
        .collect()
}

pub(super) fn layout(
    definition: &SurveyDefinition,
    missing_of: MissingOf<'_>,
    fields: &[(String, DataType)],
    file: &str,
) -> Result<Layout, ImportError> {
    let find = |name: &str, role: &str| {
        fields
            .iter()
            .position(|(field, _)| field == name)
            .ok_or_else(|| {
                source_error(
                    file,
                    Some(name),
                    format!("the {role} variable '{name}' is not in the file"),
                )
            })
    };
    // A Parquet file may name two columns alike (an SPSS file cannot): which one a
    // name means would be a guess.
    let mut names = HashSet::new();
    if let Some((twice, _)) = fields.iter().find(|(name, _)| !names.insert(name.as_str())) {
        return Err(source_error(
            file,
            Some(twice),
            format!("two columns are named '{}'", shorten(twice)),
        ));
    }
    let id = find(&definition.id_column, "id")?;
    let weight = definition
        .weight_column
        .as_deref()
        .map(|name| find(name, "weight").map(|at| (at, name)))
        .transpose()?;
    let group = definition
        .group_column
        .as_deref()
        .map(|name| find(name, "group"))
        .transpose()?;
    let kind_at = |at: usize| {
        Kind::of(&fields[at].1).ok_or_else(|| {
            source_error(
                file,
                Some(&fields[at].0),
                format!("a column of type {} can't be read", fields[at].1),
            )
        })
    };
    let id_kind = kind_at(id)?;
    let weight = match weight {
        None => None,
        Some((at, name)) => {
            let kind = kind_at(at)?;
            if kind == Kind::Text {
                return Err(source_error(
                    file,
                    Some(name),
                    "the weight variable must be numeric, not a string".into(),
                ));
            }
            Some(WeightColumn {
                at,
                name: name.to_owned(),
                kind,
                missing: missing_of(name, kind),
            })
        }
    };
    let group_kind = group.map(kind_at).transpose()?;
    // A numeric group that can name a variable is one too (first, as for CSV).
    let group_is_variable = group.is_some_and(|at| {
        group_kind.is_some_and(|k| k != Kind::Text) && is_expr_name(&fields[at].0)
    });
    let mut inputs = Vec::new();
    let mut skipped_strings = Vec::new();
    let mut skipped_other = Vec::new();
    let mut skipped_names = Vec::new();
    for (at, (name, data_type)) in fields.iter().enumerate() {
        let is_weight = weight.as_ref().is_some_and(|w| w.at == at);
        if at == id || is_weight || (Some(at) == group && !group_is_variable) {
            continue;
        }
        let Some(kind) = Kind::of(data_type) else {
            skipped_other.push(format!("{name} ({data_type})"));
            continue;
        };
        if kind == Kind::Text {
            skipped_strings.push(name.clone());
            continue;
        }
        // One such name (`Größe`, `Q1@a`, `IN`, all valid in SPSS) must not cost the
        // whole file: it is skipped and said.
        if !is_expr_name(name) {
            skipped_names.push(name.clone());
            continue;
        }
        let input = Input {
            name: name.clone(),
            at,
            kind,
            missing: missing_of(name, kind),
        };
        if Some(at) == group {
            inputs.insert(0, input);
        } else {
            inputs.push(input);
        }
    }
    let by_name = inputs
        .iter()
        .enumerate()
        .map(|(at, input)| (input.name.clone(), at))
        .collect();
    Ok(Layout {
        id: (id, id_kind),
        id_missing: missing_of(&definition.id_column, id_kind),
        weight,
        group: group.zip(group_kind),
        group_missing: group
            .zip(group_kind)
            .map(|(at, kind)| missing_of(&fields[at].0, kind))
            .unwrap_or_default(),
        inputs,
        by_name,
        skipped_strings,
        skipped_other,
        skipped_names,
    })
}

/// The array as its kind's array type (a no-op for SPSS files, whose columns already
/// are; other sources' integers, decimals, units and string encodings are cast).
fn as_kind(array: &ArrayRef, kind: Kind) -> Result<ArrayRef, String> {
    let target = kind.array_type();
    if array.data_type() == &target {
        Ok(array.clone())
    } else {
        arrow::compute::cast(array, &target)
            .map_err(|e| format!("{} can't be read as {target}: {e}", array.data_type()))
    }
}

/// The batch's column `at` as numbers in the variable's unit (NaN = system-missing).
fn numbers(array: &ArrayRef, kind: Kind, out: &mut Vec<f64>) -> Result<(), String> {
    out.clear();
    let array = &as_kind(array, kind)?;
    let nulls = array.nulls();
    macro_rules! convert {
        ($type:ty, $map:expr) => {{
            let typed = array
                .as_any()
                .downcast_ref::<$type>()
                .ok_or_else(|| format!("unexpected column type {}", array.data_type()))?;
            out.extend(typed.values().iter().enumerate().map(|(i, v)| {
                if nulls.is_some_and(|n| n.is_null(i)) {
                    f64::NAN
                } else {
                    $map(*v)
                }
            }));
        }};
    }
    match kind {
        Kind::Number => convert!(Float64Array, |v: f64| v),
        Kind::Date => convert!(Date32Array, |v: i32| f64::from(v)),
        Kind::DateTime => convert!(TimestampMicrosecondArray, |v: i64| v as f64 / 1e6),
        Kind::Duration => convert!(DurationMicrosecondArray, |v: i64| v as f64 / 1e6),
        Kind::Text => return Err("a string variable read as a number".into()),
    }
    Ok(())
}

/// A batch's column as text: strings trimmed, numbers written as in a definition; `None`
/// where empty, system-missing or one of `missing`.
fn texts(
    array: &ArrayRef,
    kind: Kind,
    missing: &Missing,
    scratch: &mut Vec<f64>,
    out: &mut Vec<Option<String>>,
) -> Result<(), String> {
    out.clear();
    if kind == Kind::Text {
        let array = &as_kind(array, kind)?;
        let strings = array
            .as_any()
            .downcast_ref::<StringViewArray>()
            .ok_or_else(|| format!("unexpected column type {}", array.data_type()))?;
        out.extend(strings.iter().map(|s| {
            s.map(str::trim)
                .filter(|s| !s.is_empty() && !missing.contains_text(s))
                .map(str::to_owned)
        }));
    } else if kind == Kind::Number && array.data_type().is_integer() {
        // Integers as their digits: through f64, ids past 2^53 would round into others.
        let array = arrow::compute::cast(array, &DataType::Utf8)
            .map_err(|e| format!("{} can't be read as text: {e}", array.data_type()))?;
        let strings = array
            .as_any()
            .downcast_ref::<StringArray>()
            .ok_or_else(|| format!("unexpected column type {}", array.data_type()))?;
        out.extend(strings.iter().map(|s| {
            s.filter(|s| s.parse::<f64>().is_ok_and(|v| !missing.contains(v)))
                .map(str::to_owned)
        }));
    } else {
        numbers(array, kind, scratch)?;
        out.extend(scratch.iter().map(|v| {
            Some(*v)
                .filter(|v| v.is_finite() && !missing.contains(*v))
                .map(number_text)
        }));
    }
    Ok(())
}

/// Reads an SPSS file's respondents for `definition`, streaming its cases into column
/// encoders. Returns them and the warnings (variables skipped, sets not made codes).
pub(crate) fn read(
    definition: &SurveyDefinition,
    path: &Path,
) -> Result<(Respondents, Vec<String>), ImportError> {
    let file = path.display().to_string();
    let file_len = std::fs::metadata(path)
        .map_err(|source| ImportError::Io {
            path: file.clone(),
            source,
        })?
        .len();
    guarded(&file, SPSS_FILE, || {
        let mut opened = open(path)?;
        read_scanner(definition, &mut opened, &file, file_len)
    })
}

/// What the SPSS reader's failures are said to be no readable one of.
const SPSS_FILE: &str = "SPSS system file";

/// Runs a read of a source's reader (`what`: the kind of file) with its panics made
/// errors: the SPSS reader has panicked on damaged files (a negative label length sliced
/// as `usize`), and an import must refuse a file, never take the process down.
pub(super) fn guarded<T>(
    file: &str,
    what: &str,
    read: impl FnOnce() -> Result<T, ImportError>,
) -> Result<T, ImportError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(read)).unwrap_or_else(|_| {
        Err(source_error(
            file,
            None,
            format!("not a readable {what}: the reader failed on damaged data"),
        ))
    })
}

fn read_scanner(
    definition: &SurveyDefinition,
    opened: &mut Opened,
    file: &str,
    file_len: u64,
) -> Result<(Respondents, Vec<String>), ImportError> {
    let meta = opened.metadata();
    let opened_warnings: Vec<String> = opened.warnings().collect();
    let Opened {
        scanner,
        text,
        overrun,
        partial_case,
        ..
    } = opened;
    let fields = fields_of(&scanner.schema());
    let layout = layout(
        definition,
        &|name: &str, kind: Kind| Missing::of(&meta, name, kind),
        &fields,
        file,
    )?;
    let mut warnings = layout.warnings();
    warnings.extend(opened_warnings);
    warnings.extend(missing_labels_warning(
        &meta,
        &layout,
        definition.group_column.as_deref(),
    ));
    let codes = set_codes(&meta, &layout, &mut warnings);

    // Room for the declared cases, but never more than the file could hold: each case
    // takes at least one byte of a compressed file's data (one control byte per eight
    // values), and zlib expands at most about 1032-fold.
    let declared = meta.number_rows.and_then(|n| u64::try_from(n).ok());
    let expansion = if meta.compression == ambers::Compression::Zlib {
        1032
    } else {
        8
    };
    let bound = file_len.saturating_mul(expansion) / (fields.len().max(1) as u64);
    let reserve = usize::try_from(declared.unwrap_or(0).min(bound)).unwrap_or(0);

    let streamed = stream(definition, &layout, file, reserve, || {
        let batch = scanner.next_batch().map_err(|e| e.to_string())?;
        batch.map(|batch| text.batch(batch)).transpose()
    })?;
    warnings.extend(check_data_end(file, overrun, *partial_case, declared)?);
    check_cases(file, declared, streamed.cases)?;
    // What the reader noted in the dictionary and at the data's end (dates it could not
    // represent, set to missing) is said, not dropped.
    warnings.extend(scanner.metadata().warnings.iter().cloned());
    let warnings = warnings
        .into_iter()
        .map(|warning| format!("{file}: {warning}"))
        .collect();

    let labels = layout
        .inputs
        .iter()
        .map(|input| (input.name.clone(), labels_of(&meta, input)))
        .filter(|(_, labels)| labels.label.is_some() || !labels.values.is_empty())
        .collect();
    let format = if meta.compression == ambers::Compression::Zlib {
        SourceFormat::Zsav
    } else {
        SourceFormat::Sav
    };
    Ok((
        Respondents {
            ids: streamed.ids,
            weights: streamed.weights,
            group_values: streamed.group_values,
            group_labels: definition
                .group_column
                .as_deref()
                .map(|name| layout.group_labels(&meta, name))
                .unwrap_or_default(),
            columns: streamed.columns,
            labels,
            codes,
            format,
        },
        warnings,
    ))
}

/// What a source's batches stream into.
pub(crate) struct Streamed {
    pub ids: Vec<String>,
    pub weights: Vec<f64>,
    pub group_values: Vec<Option<String>>,
    pub columns: Vec<(String, EncodedColumn)>,
    pub cases: u64,
}

/// Reads every batch `next` gives into the layout's columns, checking ids, weights and
/// groups case by case.
///
/// A value of an answer variable that is not finite (an infinity from a Parquet
/// division, say) is refused, naming its case and variable, as the CSV import refuses
/// it: no answer can be an infinity, and no codebook could show one.
pub(super) fn stream(
    definition: &SurveyDefinition,
    layout: &Layout,
    file: &str,
    reserve: usize,
    mut next: impl FnMut() -> Result<Option<RecordBatch>, String>,
) -> Result<Streamed, ImportError> {
    // A header's count is a hint, not a promise: room for at most this many up front,
    // and the rest as cases arrive (a hostile count asks for no gigabytes at once).
    let reserve = reserve.min(MAX_RESERVED_CASES);
    let mut ids: Vec<String> = Vec::with_capacity(reserve);
    // The id map grows as ids arrive: a header's word takes no more than a little room.
    let mut seen_ids: HashMap<String, u64> = HashMap::with_capacity(reserve.min(1 << 16));
    let mut weights: Vec<f64> = Vec::with_capacity(reserve);
    let mut group_values: Vec<Option<String>> = Vec::new();
    let mut encoders: Vec<ColumnEncoder> = layout
        .inputs
        .iter()
        .map(|_| ColumnEncoder::with_capacity(reserve))
        .collect();
    let mut scratch: Vec<f64> = Vec::with_capacity(BATCH_CASES);
    let mut text: Vec<Option<String>> = Vec::with_capacity(BATCH_CASES);
    let mut cases: u64 = 0;
    let case_error = |case: u64, variable: &str, reason: String| ImportError::Case {
        file: file.to_owned(),
        case,
        variable: variable.to_owned(),
        reason,
    };
    loop {
        let batch = match next() {
            Ok(Some(batch)) => batch,
            Ok(None) => break,
            Err(e) => {
                return Err(source_error(
                    file,
                    None,
                    format!("unreadable data after case {cases}: {e}"),
                ))
            }
        };
        let rows = batch.num_rows();
        let column = |at: usize| batch.column(at);

        let (id_at, id_kind) = layout.id;
        // Read whole, so that a user-missing id is refused as such, not as an empty one.
        let whole = Missing::default();
        texts(column(id_at), id_kind, &whole, &mut scratch, &mut text)
            .map_err(|reason| source_error(file, Some(&definition.id_column), reason))?;
        for (row, id) in text.drain(..).enumerate() {
            let case = cases + row as u64 + 1;
            let id = id.ok_or_else(|| {
                case_error(case, &definition.id_column, "missing respondent id".into())
            })?;
            if layout.id_missing.contains_written(&id, id_kind) {
                return Err(case_error(
                    case,
                    &definition.id_column,
                    format!(
                        "missing respondent id: '{}' is a user-missing value",
                        shorten(&id)
                    ),
                ));
            }
            if let Some(first) = seen_ids.insert(id.clone(), case) {
                return Err(case_error(
                    case,
                    &definition.id_column,
                    format!(
                        "duplicate respondent id '{}' (first in case {first})",
                        shorten(&id)
                    ),
                ));
            }
            ids.push(id);
        }

        match &layout.weight {
            None => weights.resize(weights.len() + rows, 1.0),
            Some(weight_column) => {
                numbers(column(weight_column.at), weight_column.kind, &mut scratch)
                    .map_err(|reason| source_error(file, Some(&weight_column.name), reason))?;
                for (row, weight) in scratch.iter().enumerate() {
                    let case = cases + row as u64 + 1;
                    let reason = if weight.is_nan() || weight_column.missing.contains(*weight) {
                        Some("missing weight".to_owned())
                    } else if !weight.is_finite() {
                        Some(format!("weight {weight} is not finite"))
                    } else if *weight < 0.0 {
                        Some(format!("weight {weight} is negative"))
                    } else {
                        None
                    };
                    if let Some(reason) = reason {
                        return Err(case_error(case, &weight_column.name, reason));
                    }
                    weights.push(*weight);
                }
            }
        }

        if let (Some((at, kind)), Some(name)) = (layout.group, &definition.group_column) {
            texts(
                column(at),
                kind,
                &layout.group_missing,
                &mut scratch,
                &mut text,
            )
            .map_err(|reason| source_error(file, Some(name), reason))?;
            for (row, value) in text.drain(..).enumerate() {
                if let Some(value) = &value {
                    if !is_identifier(value) || value == ALL_GROUPS {
                        return Err(case_error(
                            cases + row as u64 + 1,
                            name,
                            format!(
                                "group '{}' must be 1 to 64 of A-Z a-z 0-9 _ . - and not {ALL_GROUPS}",
                                shorten(value)
                            ),
                        ));
                    }
                }
                group_values.push(value);
            }
        }

        for (input, encoder) in layout.inputs.iter().zip(encoders.iter_mut()) {
            numbers(column(input.at), input.kind, &mut scratch)
                .map_err(|reason| source_error(file, Some(&input.name), reason))?;
            for (row, value) in scratch.iter().enumerate() {
                if input.missing.contains(*value) {
                    encoder.push(f64::NAN);
                } else if value.is_infinite() {
                    return Err(case_error(
                        cases + row as u64 + 1,
                        &input.name,
                        format!("value {value} is not finite"),
                    ));
                } else {
                    encoder.push(*value);
                }
            }
        }
        cases += rows as u64;
    }

    let columns: Vec<(String, EncodedColumn)> = layout
        .inputs
        .iter()
        .map(|input| input.name.clone())
        .zip(encoders.into_iter().map(ColumnEncoder::finish))
        .collect();
    Ok(Streamed {
        ids,
        weights,
        group_values,
        columns,
        cases,
    })
}

/// The file must hold the cases its header declares, and at least one.
pub(super) fn check_cases(
    file: &str,
    declared: Option<u64>,
    cases: u64,
) -> Result<(), ImportError> {
    if let Some(declared) = declared {
        if declared != cases {
            return Err(source_error(
                file,
                None,
                format!(
                    "truncated or damaged: the header declares {declared} cases but {cases} were read"
                ),
            ));
        }
    }
    if cases == 0 {
        return Err(source_error(
            file,
            None,
            "the file has no respondents".into(),
        ));
    }

    Ok(())
}

/// Names from a file as a warning (or a definition's comment) says them: each escaped
/// (a newline or a terminal's escape in a name stays on its line, as text), at most 50.
fn listed(names: &[String]) -> String {
    const LISTED: usize = 50;
    let mut text = names
        .iter()
        .take(LISTED)
        .map(|name| name.escape_debug().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > LISTED {
        text.push_str(&format!(" and {} more", names.len() - LISTED));
    }
    text
}

/// A TOML string literal.
fn quoted(text: &str) -> String {
    toml::Value::String(text.to_owned()).to_string()
}

/// Which SPSS format the file at `path` is: by its extension, else by its first bytes
/// (`$FL3` begins a zlib-compressed `.zsav`).
fn spss_format(path: &Path) -> SourceFormat {
    let by_name = SourceFormat::from_extension(&path.to_string_lossy()).filter(|f| f.is_spss());
    by_name.unwrap_or_else(|| {
        let mut magic = [0u8; 4];
        let zsav = File::open(path)
            .and_then(|mut file| file.read_exact(&mut magic))
            .is_ok_and(|()| &magic == b"$FL3");
        if zsav {
            SourceFormat::Zsav
        } else {
            SourceFormat::Sav
        }
    })
}

/// A starting definition for the SPSS file at `path` (`weight` `None`: an unweighted
/// survey): every numeric variable's label and value labels, the group's value labels,
/// the multiple-response sets as codes, and the base `ALL = "*"`. The file is named
/// relative to `definition_dir`, the directory the definition is to be written in (so
/// the two can move together), or by its absolute path when that is not known.
pub fn init_definition(
    path: &Path,
    code: &str,
    id: &str,
    weight: Option<&str>,
    group: Option<&str>,
    definition_dir: Option<&Path>,
) -> Result<String, ImportError> {
    let file = path.display().to_string();
    if !is_identifier(code) {
        return Err(source_error(
            &file,
            None,
            format!("survey code '{code}' must be 1 to 64 of A-Z a-z 0-9 _ . -"),
        ));
    }
    let opened = guarded(&file, SPSS_FILE, || open(path))?;
    let scanner = &opened.scanner;
    // An import resolves a relative path from the definition's own directory, which
    // need not be where `init` ran: without that directory, the absolute path.
    let canonical = |path: &Path| {
        std::fs::canonicalize(path).map_err(|source| ImportError::Io {
            path: path.display().to_string(),
            source,
        })
    };
    let absolute = canonical(path)?;
    let named = match definition_dir {
        Some(dir) => pathdiff::diff_paths(&absolute, canonical(dir)?).unwrap_or(absolute),
        None => absolute,
    };
    let meta = &opened.metadata();
    let fields = fields_of(&scanner.schema());
    let definition = SurveyDefinition {
        code: code.to_owned(),
        name: String::new(),
        respondents: file.clone(),
        format: None,
        id_column: id.to_owned(),
        weight_column: weight.map(str::to_owned),
        unweighted: weight.is_none(),
        group_column: group.map(str::to_owned),
        audience_report_units: crosstab_contract::limits::DEFAULT_AUDIENCE_REPORT_UNITS,
        unstable_max_resps: crosstab_contract::limits::DEFAULT_UNSTABLE_MAX_RESPS,
        groups: Default::default(),
        variables: Vec::new(),
        codes: Vec::new(),
        population_bases: Vec::new(),
    };
    let layout = layout(
        &definition,
        &|name: &str, kind: Kind| Missing::of(meta, name, kind),
        &fields,
        &file,
    )?;
    let mut warnings: Vec<String> = opened.warnings().collect();
    warnings.extend(missing_labels_warning(meta, &layout, group));
    let codes = set_codes(meta, &layout, &mut warnings);

    let name = Some(meta.file_label.trim())
        .filter(|l| !l.is_empty())
        .unwrap_or(code);
    let mut out = String::new();
    let mut line = |text: String| {
        out.push_str(&text);
        out.push('\n');
    };
    line(format!(
        "# A starting definition written by `crosstab survey init` from {file}: edit it."
    ));
    for warning in &warnings {
        line(format!("# {warning}"));
    }
    if !layout.skipped_strings.is_empty() {
        line(format!(
            "# string variables, not imported: {}",
            listed(&layout.skipped_strings)
        ));
    }
    if let Some(said) = layout.skipped_names_warning() {
        line(format!("# {said}"));
    }
    line(format!("code = {}", quoted(code)));
    line(format!("name = {}", quoted(name)));
    line(format!(
        "respondents = {}",
        quoted(&named.display().to_string())
    ));
    // Said outright: a file named without .sav or .zsav would otherwise be read as CSV.
    line(format!("format = {}", quoted(spss_format(path).name())));
    line(format!("id_column = {}", quoted(id)));
    match weight {
        Some(weight) => line(format!("weight_column = {}", quoted(weight))),
        None => line("unweighted = true".into()),
    }
    if let Some(group) = group {
        line(format!("group_column = {}", quoted(group)));
        let group_labels = layout.group_labels(meta, group);
        // Such a value in the data fails the import: said now, while it is a recode away.
        let refused: Vec<String> = group_labels
            .iter()
            .filter(|(value, _)| !is_identifier(value) || value == ALL_GROUPS)
            // Escaped: a line break in one must not end the comment.
            .map(|(value, _)| format!("\"{}\"", shorten(value).escape_debug()))
            .collect();
        if !refused.is_empty() {
            line(format!(
                "# the import refuses these labelled group values (a group is 1 to 64 of A-Z a-z 0-9 _ . -, not {ALL_GROUPS}): {}; recode them in the file first",
                refused.join(", ")
            ));
        }
        if !group_labels.is_empty() {
            line(String::new());
            line("[groups]".into());
            for (value, label) in group_labels {
                if is_identifier(&value) && value != ALL_GROUPS {
                    line(format!("{} = {}", quoted(&value), quoted(&label)));
                }
            }
        }
    }
    for input in &layout.inputs {
        let labels = labels_of(meta, input);
        line(String::new());
        line("[[variables]]".into());
        line(format!("name = {}", quoted(&input.name)));
        if let Some(label) = &labels.label {
            line(format!("label = {}", quoted(label)));
        }
        match input.kind {
            Kind::Date => line("# a date: days since 1970-01-01".into()),
            Kind::DateTime => line("# a date and time: seconds since 1970-01-01 00:00".into()),
            Kind::Duration => line("# a time: seconds".into()),
            Kind::Number | Kind::Text => {}
        }
        if !labels.values.is_empty() {
            let values = labels
                .values
                .iter()
                .map(|(value, label)| {
                    format!("{} = {}", quoted(&number_text(*value)), quoted(label))
                })
                .collect::<Vec<_>>()
                .join(", ");
            line(format!("values = {{ {values} }}"));
        }
    }
    for code in &codes {
        line(String::new());
        line("[[codes]]".into());
        line(format!("code = {}", quoted(&code.code)));
        if let Some(label) = &code.label {
            line(format!("label = {}", quoted(label)));
        }
        line(format!("expr = {}", quoted(&code.expr)));
    }
    line(String::new());
    line("[[population_bases]]".into());
    line("code = \"ALL\"".into());
    line("label = \"All respondents\"".into());
    line("expr = \"*\"".into());
    Ok(out)
}
