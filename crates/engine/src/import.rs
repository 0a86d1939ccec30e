//! Importing a survey: a TOML definition and a respondent file (CSV, or with the `fs`
//! feature SPSS `.sav`/`.zsav`), checked and compiled.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Read;

use crosstab_contract::expr::NameKind;
use crosstab_contract::{Expr, ALL_GROUPS};

use crate::builder::{NamedExpr, SurveyBuilder, SurveyMeta};
use crate::definition::{line_of, ExprDefinition, SourceFormat, SurveyDefinition};
use crate::error::ImportError;
use crate::names::shorten;
pub use crate::names::{is_expr_name, is_identifier};
pub(crate) use crate::source::Respondents;
use crate::source::{ColumnEncoder, EncodedColumn};
use crate::survey::MAX_CODE_NESTING;

/// Parses a definition file's text.
pub fn parse_definition(text: &str, file: &str) -> Result<SurveyDefinition, ImportError> {
    toml::from_str(text).map_err(|error| ImportError::Definition {
        file: file.to_owned(),
        line: error.span().map_or(1, |span| line_of(text, span.start)),
        reason: error.message().to_owned(),
    })
}

/// Compiles a survey from its definition text and its respondent CSV. Nothing is
/// written: the caller installs the returned bytes.
pub fn compile(
    definition_text: &str,
    definition_file: &str,
    csv: impl Read,
    csv_file: &str,
) -> Result<Vec<u8>, ImportError> {
    let definition = parse_definition(definition_text, definition_file)?;
    check_definition(&definition, definition_text, definition_file)?;
    let data = read_respondents(&definition, csv, csv_file)?;
    assemble(
        &definition,
        definition_text,
        definition_file,
        data,
        csv_file,
    )?
    .to_bytes()
}

fn definition_error(file: &str, line: usize, reason: String) -> ImportError {
    ImportError::Definition {
        file: file.to_owned(),
        line,
        reason,
    }
}

/// 1-based line of the first line starting with `key` (1 when there is none).
fn line_of_key(text: &str, key: &str) -> usize {
    text.lines()
        .position(|l| l.trim_start().starts_with(key))
        .map_or(1, |i| i + 1)
}

fn check_definition(
    definition: &SurveyDefinition,
    definition_text: &str,
    definition_file: &str,
) -> Result<(), ImportError> {
    let def_error = |line: usize, reason: String| definition_error(definition_file, line, reason);
    let line_of_key = |key: &str| line_of_key(definition_text, key);
    if !is_identifier(&definition.code) {
        return Err(def_error(
            line_of_key("code"),
            format!(
                "survey code '{}' must be 1 to 64 of A-Z a-z 0-9 _ . -",
                definition.code
            ),
        ));
    }
    if definition.audience_report_units == 0 {
        return Err(def_error(
            line_of_key("audience_report_units"),
            "audience_report_units must be at least 1".into(),
        ));
    }
    if definition.population_bases.is_empty() {
        return Err(def_error(
            1,
            "at least one [[population_bases]] is required".into(),
        ));
    }
    match (&definition.weight_column, definition.unweighted) {
        (Some(_), true) => {
            return Err(def_error(
                line_of_key("unweighted"),
                "unweighted = true and a weight_column: give one or the other".into(),
            ))
        }
        (None, false) => {
            return Err(def_error(
                1,
                "name the weight column (weight_column = \"...\"), or say unweighted = true for a survey whose respondents all weigh 1".into(),
            ))
        }
        _ => {}
    }
    // Without the column no respondent is in any group: every group's answer would be 0.
    if definition.group_column.is_none() && !definition.groups.is_empty() {
        return Err(def_error(
            line_of_key("[groups]"),
            "[groups] labels the values of the group column: give group_column too (or remove [groups])".into(),
        ));
    }
    Ok(())
}

/// A variable's label and its value labels.
type VariableLabels = (Option<String>, Vec<(f64, String)>);

/// Checks the definition against the data and compiles both into a builder.
pub(crate) fn assemble(
    definition: &SurveyDefinition,
    definition_text: &str,
    definition_file: &str,
    data: Respondents,
    csv_file: &str,
) -> Result<SurveyBuilder, ImportError> {
    let def_error = |line: usize, reason: String| definition_error(definition_file, line, reason);
    let line_of_key = |key: &str| line_of_key(definition_text, key);
    // Each weight was checked as it was read; what is left is their total.
    crate::weights::check(&data.weights).map_err(|bad| ImportError::Source {
        file: csv_file.to_owned(),
        variable: definition.weight_column.clone(),
        reason: bad.to_string(),
    })?;
    let mut builder = SurveyBuilder::new(
        SurveyMeta {
            code: definition.code.clone(),
            name: definition.name.clone(),
            audience_report_units: definition.audience_report_units,
            unstable_max_resps: definition.unstable_max_resps,
            id_column: definition.id_column.clone(),
            weight_column: definition.weight_column.clone(),
            group_column: definition.group_column.clone(),
            source_format: Some(data.format.name().to_owned()),
        },
        data.ids,
        data.weights,
    );

    // Variable labels: the source's, then each [[variables]] entry replaces the label
    // and (when it gives any) the value labels. Each must name a variable column; value
    // keys must be numbers.
    let mut labels: HashMap<&str, VariableLabels> = data
        .labels
        .iter()
        .map(|(name, labels)| (name.as_str(), (labels.label.clone(), labels.values.clone())))
        .collect();
    // Looked up by name, and a line found only for an error: a definition of 10,000
    // variables would otherwise be scanned from its start for each.
    let columns: HashSet<&str> = data
        .columns
        .iter()
        .map(|(column, _)| column.as_str())
        .collect();
    for variable in &definition.variables {
        let line = || line_of(definition_text, variable.name.span().start);
        let name = variable.name.get_ref();
        if !columns.contains(name.as_str()) {
            return Err(def_error(
                line(),
                format!("[[variables]] '{name}' is not a numeric column of {csv_file}"),
            ));
        }
        let mut values = Vec::new();
        for (key, label) in &variable.values {
            let value: f64 = key
                .trim()
                .parse()
                .ok()
                .filter(|v: &f64| v.is_finite())
                .ok_or_else(|| {
                    def_error(
                        line(),
                        format!("value label key '{key}' of '{name}' is not a number"),
                    )
                })?;
            values.push((value, label.clone()));
        }
        let source = labels.remove(name.as_str()).unwrap_or_default();
        let values = if values.is_empty() { source.1 } else { values };
        labels.insert(name.as_str(), (variable.label.clone().or(source.0), values));
    }

    // Groups: every value seen in the data plus every labelled one, sorted by value.
    if definition.group_column.is_some() || !definition.groups.is_empty() {
        let mut groups: BTreeMap<String, Option<String>> = BTreeMap::new();
        for (value, label) in &definition.groups {
            if !is_identifier(value) || value == ALL_GROUPS {
                return Err(def_error(
                    line_of_key("[groups]"),
                    format!(
                        "group '{value}' must be 1 to 64 of A-Z a-z 0-9 _ . - and not {ALL_GROUPS}"
                    ),
                ));
            }
            groups.insert(value.clone(), Some(label.clone()));
        }
        // The source's labels of its groups label those the definition leaves
        // unlabelled.
        let source_labels: HashMap<&str, &str> = data
            .group_labels
            .iter()
            .map(|(group, label)| (group.as_str(), label.as_str()))
            .collect();
        for value in data.group_values.iter().flatten() {
            let label = groups.entry(value.clone()).or_insert(None);
            if label.is_none() {
                *label = source_labels.get(value.as_str()).map(|l| (*l).to_owned());
            }
        }
        let position: HashMap<&str, u16> = groups
            .keys()
            .enumerate()
            .map(|(i, value)| (value.as_str(), u16::try_from(i + 1).unwrap_or(u16::MAX)))
            .collect();
        if groups.len() >= usize::from(u16::MAX) {
            return Err(def_error(1, "more than 65534 authorization groups".into()));
        }
        let membership = data
            .group_values
            .iter()
            .map(|g| {
                g.as_deref()
                    .and_then(|v| position.get(v).copied())
                    .unwrap_or(0)
            })
            .collect();
        builder.groups(groups.into_iter().collect(), membership);
    }

    let variable_names: HashSet<String> =
        data.columns.iter().map(|(name, _)| name.clone()).collect();
    let variable_names: HashSet<&str> = variable_names.iter().map(String::as_str).collect();
    let mut labels: HashMap<String, VariableLabels> = labels
        .into_iter()
        .map(|(name, labels)| (name.to_owned(), labels))
        .collect();
    for (name, column) in data.columns {
        let (label, value_labels) = labels.remove(name.as_str()).unwrap_or((None, Vec::new()));
        builder.encoded_variable(name, label, value_labels, column.dict, column.codes);
    }

    // Codes the source defines come first, so the definition's codes may use them; a
    // definition code of the same name replaces the source's.
    let source_codes: Vec<ExprDefinition> = data
        .codes
        .iter()
        .filter(|code| {
            !definition
                .codes
                .iter()
                .any(|c| c.code.get_ref() == &code.code)
        })
        .map(|code| ExprDefinition {
            code: toml::Spanned::new(0..0, code.code.clone()),
            label: code.label.clone(),
            expr: toml::Spanned::new(0..0, code.expr.clone()),
        })
        .collect();
    let all_codes: Vec<ExprDefinition> = source_codes
        .into_iter()
        .chain(definition.codes.iter().cloned())
        .collect();
    let codes = check_expressions(
        &all_codes,
        "code",
        definition_text,
        definition_file,
        &variable_names,
        &[],
    )?;
    let bases = check_expressions(
        &definition.population_bases,
        "population base",
        definition_text,
        definition_file,
        &variable_names,
        &codes,
    )?;
    for base in &definition.population_bases {
        let code = base.code.get_ref();
        if !is_identifier(code) {
            return Err(def_error(
                line_of(definition_text, base.code.span().start),
                format!(
                    "population base code '{}' must be 1 to 64 of A-Z a-z 0-9 _ . -",
                    shorten(code)
                ),
            ));
        }
    }
    builder.expressions(codes, bases);
    Ok(builder)
}

/// Checks named codes or bases: unique codes, expressions that parse and name only known
/// variables and (for codes) earlier codes, nested no deeper than [`MAX_CODE_NESTING`].
fn check_expressions(
    definitions: &[ExprDefinition],
    what: &str,
    text: &str,
    file: &str,
    variables: &HashSet<&str>,
    earlier_codes: &[NamedExpr],
) -> Result<Vec<NamedExpr>, ImportError> {
    let mut out: Vec<NamedExpr> = Vec::new();
    let mut levels: HashMap<String, usize> =
        earlier_codes.iter().map(|c| (c.code.clone(), 1)).collect();
    let is_codes = earlier_codes.is_empty() && what == "code";
    for definition in definitions {
        let code = definition.code.get_ref();
        let error = |span: std::ops::Range<usize>, reason: String| ImportError::Definition {
            file: file.to_owned(),
            line: line_of(text, span.start),
            reason,
        };
        if is_codes && !is_expr_name(code) {
            return Err(error(
                definition.code.span(),
                format!("code '{code}' must start with a letter or '_' and use only letters, digits, '_' and '.'"),
            ));
        }
        if out.iter().any(|o| &o.code == code) {
            return Err(error(
                definition.code.span(),
                format!("duplicate {what} '{code}'"),
            ));
        }
        let expr = Expr::parse(definition.expr.get_ref()).map_err(|e| {
            error(
                definition.expr.span(),
                format!("{what} '{code}': expression does not parse: {e}"),
            )
        })?;
        let mut problem = None;
        let mut level = 1;
        expr.visit_names(&mut |kind, name| {
            if problem.is_some() {
                return;
            }
            match kind {
                NameKind::Variable if !variables.contains(name) => {
                    problem = Some(format!("{what} '{code}' names unknown variable '{name}'"));
                }
                NameKind::Code => match levels.get(name) {
                    Some(l) => level = level.max(l + 1),
                    None => {
                        problem = Some(format!(
                            "{what} '{code}' names '{name}', which is not a code defined before it"
                        ))
                    }
                },
                NameKind::Variable => {}
            }
        });
        if let Some(reason) = problem {
            return Err(error(definition.expr.span(), reason));
        }
        if level > MAX_CODE_NESTING {
            return Err(error(
                definition.expr.span(),
                format!("{what} '{code}' nests named codes more than {MAX_CODE_NESTING} deep"),
            ));
        }
        if is_codes {
            levels.insert(code.clone(), level);
        }
        out.push(NamedExpr {
            code: code.clone(),
            label: definition.label.clone(),
            expr: expr.to_string(),
        });
    }
    Ok(out)
}

fn read_respondents(
    definition: &SurveyDefinition,
    csv: impl Read,
    file: &str,
) -> Result<Respondents, ImportError> {
    let data_error = |line: u64, column: &str, reason: String| ImportError::Data {
        file: file.to_owned(),
        line,
        column: column.to_owned(),
        reason,
    };
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .trim(csv::Trim::All)
        .from_reader(csv);
    let headers = reader
        .headers()
        .map_err(|e| data_error(1, "-", format!("unreadable header: {e}")))?
        .clone();
    // A file separated by semicolons or tabs (a spreadsheet's export) reads as one column.
    let separated_otherwise = match headers.iter().collect::<Vec<_>>().as_slice() {
        [one] if one.contains(';') => " (it is separated by semicolons: save it with commas)",
        [one] if one.contains('\t') => " (it is separated by tabs: save it with commas)",
        _ => "",
    };
    let find = |name: &str, role: &str| {
        headers.iter().position(|h| h == name).ok_or_else(|| {
            data_error(
                1,
                name,
                format!("the {role} column '{name}' is not in the header{separated_otherwise}"),
            )
        })
    };
    let id_at = find(&definition.id_column, "id")?;
    let weight_at = definition
        .weight_column
        .as_deref()
        .map(|name| find(name, "weight"))
        .transpose()?;
    let group_at = definition
        .group_column
        .as_deref()
        .map(|name| find(name, "group"))
        .transpose()?;
    let mut seen_headers = HashSet::new();
    for header in headers.iter() {
        if !seen_headers.insert(header) {
            return Err(data_error(1, header, "duplicate column name".into()));
        }
    }
    // Every other column is a variable; the group column is one too when it is numeric.
    let variable_columns: Vec<usize> = (0..headers.len())
        .filter(|i| *i != id_at && Some(*i) != weight_at && Some(*i) != group_at)
        .collect();
    for &i in &variable_columns {
        if !is_expr_name(&headers[i]) {
            return Err(data_error(
                1,
                &headers[i],
                "a variable column's name must start with a letter or '_' and use only letters, digits, '_' and '.' (and not be AND, OR, NOT, IN or BETWEEN)".into(),
            ));
        }
    }
    let mut ids = Vec::new();
    let mut seen_ids: HashMap<String, u64> = HashMap::new();
    let mut weights = Vec::new();
    let mut group_values = Vec::new();
    let mut group_numbers: Option<ColumnEncoder> =
        group_at.map(|_| ColumnEncoder::with_capacity(0));
    let mut columns: Vec<ColumnEncoder> = (0..variable_columns.len())
        .map(|_| ColumnEncoder::with_capacity(0))
        .collect();
    let mut record = csv::StringRecord::new();
    loop {
        let line = reader.position().line();
        match reader.read_record(&mut record) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => {
                let line = e.position().map_or(line, csv::Position::line);
                return Err(data_error(line, "-", format!("malformed CSV: {e}")));
            }
        }
        let line = record.position().map_or(line, csv::Position::line);
        let id = &record[id_at];
        if id.is_empty() {
            return Err(data_error(
                line,
                &headers[id_at],
                "missing respondent id".into(),
            ));
        }
        if let Some(first) = seen_ids.insert(id.to_owned(), line) {
            return Err(data_error(
                line,
                &headers[id_at],
                format!(
                    "duplicate respondent id '{}' (first on line {first})",
                    shorten(id)
                ),
            ));
        }
        ids.push(id.to_owned());
        let weight = match weight_at {
            None => 1.0,
            Some(weight_at) => {
                let weight_text = &record[weight_at];
                match weight_text.parse::<f64>() {
                    _ if weight_text.is_empty() => Err("missing weight".to_owned()),
                    Ok(w) if !w.is_finite() => Err(format!("weight '{weight_text}' is not finite")),
                    Ok(w) if w < 0.0 => Err(format!("weight {weight_text} is negative")),
                    Ok(w) => Ok(w),
                    Err(_) => Err(format!("weight '{}' is not a number", shorten(weight_text))),
                }
                .map_err(|reason| data_error(line, &headers[weight_at], reason))?
            }
        };
        weights.push(weight);
        if let Some(at) = group_at {
            let value = &record[at];
            if value.is_empty() {
                group_values.push(None);
                if let Some(numbers) = group_numbers.as_mut() {
                    numbers.push(f64::NAN);
                }
            } else {
                if !is_identifier(value) || value == ALL_GROUPS {
                    return Err(data_error(
                        line,
                        &headers[at],
                        format!(
                            "group '{}' must be 1 to 64 of A-Z a-z 0-9 _ . - and not {ALL_GROUPS}",
                            shorten(value)
                        ),
                    ));
                }
                match value.parse::<f64>() {
                    Ok(number) if number.is_finite() => {
                        if let Some(numbers) = group_numbers.as_mut() {
                            numbers.push(number);
                        }
                    }
                    _ => group_numbers = None,
                }
                group_values.push(Some(value.to_owned()));
            }
        }
        for (column, &at) in columns.iter_mut().zip(&variable_columns) {
            let cell = &record[at];
            let value = if cell.is_empty() {
                f64::NAN
            } else {
                match cell.parse::<f64>() {
                    Ok(v) if v.is_finite() => v,
                    _ => {
                        return Err(data_error(
                            line,
                            &headers[at],
                            format!(
                                "'{}' is not a number (leave the cell empty for a missing answer)",
                                shorten(cell)
                            ),
                        ))
                    }
                }
            };
            column.push(value);
        }
    }
    if ids.is_empty() {
        return Err(data_error(2, "-", "the file has no respondents".into()));
    }
    let mut named: Vec<(String, EncodedColumn)> = variable_columns
        .iter()
        .map(|at| headers[*at].to_owned())
        .zip(columns.into_iter().map(ColumnEncoder::finish))
        .collect();
    if let (Some(at), Some(numbers)) = (group_at, group_numbers) {
        if is_expr_name(&headers[at]) {
            named.insert(0, (headers[at].to_owned(), numbers.finish()));
        }
    }
    Ok(Respondents {
        ids,
        weights,
        group_values,
        group_labels: Vec::new(),
        columns: named,
        labels: Vec::new(),
        codes: Vec::new(),
        format: SourceFormat::Csv,
    })
}

/// A survey compiled from files, ready to write or install.
#[cfg(feature = "fs")]
#[derive(Debug)]
pub struct Prepared {
    builder: SurveyBuilder,
    code: String,
    /// What the import skipped or could not use, one line each, naming the file.
    pub warnings: Vec<String>,
    /// The respondent file's format.
    pub format: SourceFormat,
}

#[cfg(feature = "fs")]
impl Prepared {
    /// The compiled survey's bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>, ImportError> {
        self.builder.to_bytes()
    }

    /// Writes the compiled survey to `out`, without a second copy of it in memory.
    pub fn write_to(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        self.builder.write_to(out)
    }
}

/// What an install reports besides the survey.
#[cfg(feature = "fs")]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportReport {
    /// What the import skipped or could not use, one line each, naming the file.
    pub warnings: Vec<String>,
    /// The respondent file's format.
    pub format: SourceFormat,
}

/// Checks and compiles the survey defined by the TOML file at `path`, reading its
/// respondent file (CSV, `.sav`, `.zsav` or `.parquet`, by `format` or extension) beside it.
#[cfg(feature = "fs")]
pub fn prepare_file(path: &std::path::Path) -> Result<Prepared, ImportError> {
    let io = |p: &std::path::Path| {
        let p = p.display().to_string();
        move |source| ImportError::Io { path: p, source }
    };
    let text = std::fs::read_to_string(path).map_err(io(path))?;
    let file = path.display().to_string();
    let definition = parse_definition(&text, &file)?;
    check_definition(&definition, &text, &file)?;
    let data_path = path
        .parent()
        .unwrap_or_else(|| std::path::Path::new("."))
        .join(&definition.respondents);
    let data_file = data_path.display().to_string();
    // Said against the definition that names it: the fix is most often there.
    if !data_path.is_file() {
        let why = match data_path.try_exists() {
            Ok(true) => "is not a file".to_owned(),
            Ok(false) => "does not exist".to_owned(),
            Err(error) => format!("can't be read ({error})"),
        };
        return Err(definition_error(
            &file,
            line_of_key(&text, "respondents"),
            format!(
                "the respondents file {data_file} {why} (a relative path is read from this \
                 definition's directory)"
            ),
        ));
    }
    let format = definition.source_format();
    let (data, mut warnings) = if format.is_spss() {
        crate::source::sav::read(&definition, &data_path)?
    } else if format == SourceFormat::Parquet {
        #[cfg(feature = "parquet")]
        {
            crate::source::parquet::read(&definition, &data_path)?
        }
        #[cfg(not(feature = "parquet"))]
        return Err(definition_error(
            &file,
            line_of_key(&text, "respondents"),
            format!(
                "{data_file} is Parquet, which this build does not read (the engine's \
                 `parquet` feature is off)"
            ),
        ));
    } else {
        let csv = std::fs::File::open(&data_path).map_err(io(&data_path))?;
        let data = read_respondents(&definition, std::io::BufReader::new(csv), &data_file)?;
        (data, Vec::new())
    };
    warnings.extend(zero_weights_warning(&data.weights, &data_file));
    let format = data.format;
    let builder = assemble(&definition, &text, &file, data, &data_file)?;
    Ok(Prepared {
        builder,
        code: definition.code,
        warnings,
        format,
    })
}

/// What to say of respondents weighted 0: they are respondents all the same (counted in
/// `Resps` and stability, and in a table's sample sizes), which a data team that meant
/// to leave them out (screen-outs, a boost) should know.
#[cfg(feature = "fs")]
fn zero_weights_warning(weights: &[f64], file: &str) -> Option<String> {
    let zero = weights.iter().filter(|w| **w == 0.0).count();
    (zero > 0).then(|| {
        format!(
            "{file}: {zero} respondent{} weighted 0: counted as respondents (Resps, stability) \
             though they add nothing to WgtAud; leave them out of the file to exclude them",
            if zero == 1 { " is" } else { "s are" }
        )
    })
}

/// Compiles the survey defined by the TOML file at `path` (its respondent file beside it).
#[cfg(feature = "fs")]
pub fn compile_file(path: &std::path::Path) -> Result<Vec<u8>, ImportError> {
    prepare_file(path)?.to_bytes()
}

/// Compiles the survey defined by the TOML file at `path` and installs it in `store`
/// atomically, writing the compiled file straight to disk (never whole in memory). On
/// any error but a failed sync of the directory after the rename (see
/// [`crate::store::persist`]) nothing is left behind.
#[cfg(feature = "fs")]
pub fn install_file(
    path: &std::path::Path,
    store: &crate::store::SurveyStore,
) -> Result<(crate::Survey, ImportReport), ImportError> {
    use std::io::Write;

    let prepared = prepare_file(path)?;
    let target = store.path_of(&prepared.code);
    let dir = target
        .parent()
        .unwrap_or_else(|| std::path::Path::new("."))
        .to_path_buf();
    let io = |source| ImportError::Io {
        path: target.display().to_string(),
        source,
    };
    // Same protocol as `SurveyStore::install`: a temporary file beside the target,
    // checked by loading it, then renamed over it; dropping it on error removes it.
    let mut temp = crate::store::installing(&dir).map_err(io)?;
    {
        let mut out = std::io::BufWriter::with_capacity(1 << 20, temp.as_file_mut());
        prepared.write_to(&mut out).map_err(io)?;
        out.flush().map_err(io)?;
    }
    temp.as_file().sync_all().map_err(io)?;
    // The columns go before the written file is checked, so the two never add up.
    let Prepared {
        builder,
        warnings,
        format,
        ..
    } = prepared;
    drop(builder);
    let survey = crate::Survey::open(temp.path()).map_err(ImportError::compiled)?;
    crate::store::persist(temp, &target)?;
    Ok((survey, ImportReport { warnings, format }))
}

/// A starting definition for the SPSS file at `data` (see `crosstab survey init`).
#[cfg(feature = "fs")]
pub use crate::source::sav::init_definition;

#[cfg(all(test, feature = "fs"))]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A Parquet respondents file is read with the `parquet` feature and refused against
    /// the definition's `respondents` line without it (the fuzzers' build; `scripts/test`
    /// runs this test in both).
    #[test]
    fn parquet_respondents_are_read_only_with_the_parquet_feature() {
        let dir = tempfile::tempdir().unwrap();
        // Not Parquet inside: the build without the feature must refuse it unread.
        std::fs::write(dir.path().join("r.parquet"), b"not parquet").unwrap();
        let definition = dir.path().join("survey.toml");
        std::fs::write(
            &definition,
            "code = \"P\"\nname = \"P\"\nrespondents = \"r.parquet\"\nid_column = \"RESPID\"\n\
             weight_column = \"WEIGHT\"\n[[population_bases]]\ncode = \"ALL\"\nexpr = \"*\"\n",
        )
        .unwrap();
        let error = prepare_file(&definition).unwrap_err();
        let off = "which this build does not read (the engine's `parquet` feature is off)";
        if cfg!(feature = "parquet") {
            assert!(!error.to_string().contains(off), "{error}");
        } else {
            match &error {
                ImportError::Definition { line, reason, .. } => {
                    assert_eq!(*line, 3, "{error}");
                    assert!(reason.contains(off), "{error}");
                }
                other => panic!("not the definition's error: {other}"),
            }
        }
    }
}
