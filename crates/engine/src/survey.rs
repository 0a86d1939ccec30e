//! A compiled survey, loaded: the data every query reads, used in place.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use crosstab_contract::expr::NameKind;
use crosstab_contract::{Expr, Unknown};

use crate::aligned::AlignedBytes;
use crate::bitset::Bitset;
use crate::budget::MemoryBudget;
use crate::cache::SetCache;
use crate::error::LoadError;
use crate::eval::{plan, Codes, Column, Plan, Ranges, Source, BLOCK_WORDS};
use crate::format::{read_header, Header, Section, VariableHeader, Width};
use crate::weights::{MadePlanes, PlaneView, Squares, Weights};

/// Longest chain of named codes referring to named codes.
pub(crate) const MAX_CODE_NESTING: usize = 16;

/// Where the compiled bytes live.
enum Backing {
    /// A read-only memory map of an installed survey file, with the file (to read it
    /// otherwise than through the map) and its path.
    #[cfg(feature = "fs")]
    Mapped {
        map: memmap2::Mmap,
        file: std::fs::File,
        path: std::path::PathBuf,
    },
    /// Bytes in 8-aligned memory (WASM, or bytes from elsewhere).
    Owned(AlignedBytes),
}

impl Backing {
    /// Maps an installed survey file.
    #[cfg(feature = "fs")]
    fn map(path: &std::path::Path) -> Result<Backing, LoadError> {
        let io = |source| LoadError::Io {
            path: path.display().to_string(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: survey files are only ever replaced by atomic rename, never written in
        // place, so the mapped bytes can't change under us.
        #[allow(unsafe_code)]
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        Ok(Backing::Mapped {
            map,
            file,
            path: path.to_path_buf(),
        })
    }

    /// Whether every byte is in memory (not a map, read page by page as it is queried).
    fn in_memory(&self) -> bool {
        match self {
            #[cfg(feature = "fs")]
            Backing::Mapped { .. } => false,
            Backing::Owned(_) => true,
        }
    }

    fn bytes(&self) -> &[u8] {
        match self {
            #[cfg(feature = "fs")]
            Backing::Mapped { map, .. } => map,
            Backing::Owned(bytes) => bytes.as_bytes(),
        }
    }
}

/// A survey ready to answer queries.
pub struct Survey {
    backing: Backing,
    header: Header,
    variable_index: HashMap<String, usize>,
    code_index: HashMap<String, usize>,
    code_exprs: Vec<Expr>,
    base_index: HashMap<String, usize>,
    base_exprs: Vec<Expr>,
    group_index: HashMap<String, usize>,
    base_sets: Vec<OnceLock<Bitset>>,
    group_sets: Vec<OnceLock<Bitset>>,
    code_sets: Vec<OnceLock<Bitset>>,
    set_cache: Arc<SetCache>,
    /// Bytes kept for the survey's life (base, group and code sets, squares, made
    /// planes), taken from the budget.
    kept_bytes: AtomicUsize,
    /// How tables sum `w²`: squared decimal planes made when a table first needs them, or
    /// each member's exact square from the weights.
    squares: OnceLock<Squares>,
    /// Whether the weight planes (if any) keep every sum below 2^53, as the sums assume:
    /// checked once, on first use (a file not written by this build may break it).
    planes_fit: OnceLock<bool>,
    /// When the file holds no usable planes: planes made from the weights on first use
    /// (`None`: weights too spread out, or negative, for any).
    made_planes: OnceLock<Option<MadePlanes>>,
}

impl std::fmt::Debug for Survey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Survey")
            .field("code", &self.header.code)
            .field("respondents", &self.header.respondents)
            .field("variables", &self.header.variables.len())
            .finish_non_exhaustive()
    }
}

impl Survey {
    /// Loads a compiled survey from bytes (copied once into aligned memory), with a cache
    /// budget of its own (a quarter of the survey at a byte a respondent for every column,
    /// within 1-256 MiB). Bytes from elsewhere are checked against their checksum (see
    /// [`Survey::verify`]).
    pub fn from_bytes(bytes: &[u8]) -> Result<Survey, LoadError> {
        Survey::from_aligned(AlignedBytes::copy_of(bytes)?)
    }

    /// Loads a compiled survey from bytes already in aligned memory, which it keeps and
    /// reads in place (no copy), with a cache budget of its own.
    pub fn from_aligned(bytes: AlignedBytes) -> Result<Survey, LoadError> {
        Survey::from_backing(Backing::Owned(bytes), None)
    }

    /// Loads a compiled survey from bytes, its caches drawing on `budget`.
    pub fn from_bytes_within(
        bytes: &[u8],
        budget: &Arc<MemoryBudget>,
    ) -> Result<Survey, LoadError> {
        Survey::from_backing(Backing::Owned(AlignedBytes::copy_of(bytes)?), Some(budget))
    }

    /// Opens an installed survey file by memory map, with a cache budget of its own.
    /// Loading reads the header and the weights, not every byte, so the checksum is not
    /// checked here: [`Survey::verify`] does (the catalog, before it serves the file).
    #[cfg(feature = "fs")]
    pub fn open(path: &std::path::Path) -> Result<Survey, LoadError> {
        Survey::from_backing(Backing::map(path)?, None)
    }

    /// Opens an installed survey file by memory map, its caches drawing on `budget`.
    #[cfg(feature = "fs")]
    pub fn open_within(
        path: &std::path::Path,
        budget: &Arc<MemoryBudget>,
    ) -> Result<Survey, LoadError> {
        Survey::from_backing(Backing::map(path)?, Some(budget))
    }

    /// The survey in `backing`, its caches drawing on `budget` (`None`: one of its own).
    fn from_backing(
        backing: Backing,
        budget: Option<&Arc<MemoryBudget>>,
    ) -> Result<Survey, LoadError> {
        let header = read_header(backing.bytes())?;
        // Bytes in memory are all read anyway; a mapped file is read as it is queried.
        if backing.in_memory() {
            crate::format::verify(&header, backing.bytes())?;
        }
        // The code names the survey's file in a data dir: never a path.
        if !crate::names::is_identifier(&header.code) {
            return Err(LoadError::Corrupt(format!(
                "survey code '{}' is not an identifier",
                crate::names::shorten(&header.code)
            )));
        }
        let budget = match budget {
            Some(budget) => Arc::clone(budget),
            None => own_budget(backing.bytes().len(), &header),
        };
        let index = |names: &mut dyn Iterator<Item = &String>, what: &str| {
            let mut map = HashMap::new();
            for (i, name) in names.enumerate() {
                if map.insert(name.clone(), i).is_some() {
                    return Err(LoadError::Corrupt(format!("duplicate {what} '{name}'")));
                }
            }
            Ok(map)
        };
        let variable_index = index(&mut header.variables.iter().map(|v| &v.name), "variable")?;
        let code_index = index(&mut header.codes.iter().map(|c| &c.code), "code")?;
        let base_index = index(&mut header.bases.iter().map(|b| &b.code), "base")?;
        let group_index = index(&mut header.groups.iter().map(|g| &g.value), "group")?;
        let parse = |text: &str| {
            Expr::parse(text).map_err(|e| LoadError::Corrupt(format!("expression '{text}': {e}")))
        };
        let code_exprs = header
            .codes
            .iter()
            .map(|c| parse(&c.expr))
            .collect::<Result<Vec<_>, _>>()?;
        let base_exprs = header
            .bases
            .iter()
            .map(|b| parse(&b.expr))
            .collect::<Result<Vec<_>, _>>()?;
        let survey = Survey {
            base_sets: (0..base_exprs.len()).map(|_| OnceLock::new()).collect(),
            group_sets: (0..header.groups.len()).map(|_| OnceLock::new()).collect(),
            code_sets: (0..code_exprs.len()).map(|_| OnceLock::new()).collect(),
            set_cache: SetCache::new(&budget, header.respondents as usize),
            kept_bytes: AtomicUsize::new(0),
            squares: OnceLock::new(),
            planes_fit: OnceLock::new(),
            made_planes: OnceLock::new(),
            backing,
            header,
            variable_index,
            code_index,
            code_exprs,
            base_index,
            base_exprs,
            group_index,
        };
        survey.check_slices()?;
        // What the import refuses, a damaged or crafted file must not bring in: a unit of
        // 0 makes every WgtAud infinite, a weight not finite or below 0 every sum wrong,
        // and weights too large together sums that are not numbers.
        if survey.header.audience_report_units == 0 {
            return Err(LoadError::Corrupt("audience report units of 0".into()));
        }
        crate::weights::check(survey.weights())
            .map_err(|bad| LoadError::Corrupt(bad.to_string()))?;
        // Named codes may refer only to earlier codes, so evaluation always terminates.
        for (i, expr) in survey.code_exprs.iter().enumerate() {
            if let Some(name) = survey.first_unknown(expr, i) {
                return Err(LoadError::Corrupt(format!(
                    "code refers to unknown '{name}'"
                )));
            }
        }
        let mut levels = vec![0usize; survey.code_exprs.len()];
        for (i, expr) in survey.code_exprs.iter().enumerate() {
            let mut level = 1;
            expr.visit_names(&mut |kind, name| {
                if let (NameKind::Code, Some(j)) = (kind, survey.code_index.get(name)) {
                    level = level.max(levels.get(*j).map_or(0, |l| l + 1));
                }
            });
            if level > MAX_CODE_NESTING {
                return Err(LoadError::Corrupt("named codes nested too deeply".into()));
            }
            levels[i] = level;
        }
        for expr in &survey.base_exprs {
            if let Some(name) = survey.first_unknown(expr, survey.code_exprs.len()) {
                return Err(LoadError::Corrupt(format!(
                    "base refers to unknown '{name}'"
                )));
            }
        }
        Ok(survey)
    }

    /// The first name in `expr` the survey does not define, counting only the first
    /// `codes_visible` named codes as defined.
    fn first_unknown(&self, expr: &Expr, codes_visible: usize) -> Option<String> {
        let mut unknown = None;
        expr.visit_names(&mut |kind, name| {
            let known = match kind {
                NameKind::Variable => self.variable_index.contains_key(name),
                NameKind::Code => self
                    .code_index
                    .get(name)
                    .is_some_and(|i| *i < codes_visible),
            };
            if !known && unknown.is_none() {
                unknown = Some(name.to_owned());
            }
        });
        unknown
    }

    /// Every name in `expr` the survey does not define as it is used there (a variable
    /// named alone, a code compared, or neither), without repeats, in order.
    pub fn unknown_names(&self, expr: &Expr) -> Vec<Unknown> {
        Unknown::in_expr(
            expr,
            |name| self.variable_index.contains_key(name),
            |name| self.code_index.contains_key(name),
        )
    }

    /// A section's elements. Every section was proven in bounds and aligned for its
    /// element type when the survey loaded (`check_slices`), so a failure here is a broken
    /// invariant, not bad input: it panics (a 500 at the HTTP layer) rather than answer
    /// from an empty slice.
    fn slice<T: bytemuck::Pod>(&self, section: Section) -> &[T] {
        match section_slice(self.backing.bytes(), section) {
            Ok(slice) => slice,
            Err(e) => unreachable!("section checked at load: {e}"),
        }
    }

    /// Proves at load that every section slices as its element type, so that `slice`
    /// can't fail later.
    fn check_slices(&self) -> Result<(), LoadError> {
        let bytes = self.backing.bytes();
        let header = &self.header;
        section_slice::<f64>(bytes, header.weights)?;
        if let Some(planes) = header.weight_planes {
            section_slice::<u64>(bytes, planes.section)?;
        }
        section_slice::<u32>(bytes, header.id_offsets)?;
        section_slice::<u8>(bytes, header.id_bytes)?;
        match header.group_codes {
            Some(section) => section_slice::<u16>(bytes, section).map(drop)?,
            None if header.groups.is_empty() => {}
            None => return Err(LoadError::Corrupt("groups without group codes".into())),
        }
        if header.groups.len() > usize::from(u16::MAX) {
            return Err(LoadError::Corrupt(
                "more groups than group codes can name".into(),
            ));
        }
        for variable in &header.variables {
            section_slice::<f64>(bytes, variable.dict)?;
            match variable.width {
                Width::TwoBits => section_slice::<u64>(bytes, variable.codes).map(drop)?,
                Width::U8 => section_slice::<u8>(bytes, variable.codes).map(drop)?,
                Width::U16 => section_slice::<u16>(bytes, variable.codes).map(drop)?,
                Width::U32 => section_slice::<u32>(bytes, variable.codes).map(drop)?,
            }
        }
        Ok(())
    }

    /// Whether every byte of the survey's file is as it was written: `Ok(true)` when its
    /// checksum matches, `Ok(false)` for a file written before checksums (nothing to
    /// check), an error when the file was damaged. Reads the whole file.
    pub fn verify(&self) -> Result<bool, LoadError> {
        match &self.backing {
            // Read, not through the map: a sector the disk cannot read is then an error
            // (`LoadError::Io`), where a mapped page that cannot be read stops the process.
            #[cfg(all(feature = "fs", unix))]
            Backing::Mapped { map, file, path } => {
                use std::os::unix::fs::FileExt;
                crate::format::verify_read(&self.header, map.len() as u64, |buffer, at| {
                    file.read_exact_at(buffer, at)
                        .map_err(|source| LoadError::Io {
                            path: path.display().to_string(),
                            source,
                        })
                })
            }
            backing => crate::format::verify(&self.header, backing.bytes()),
        }
    }

    /// What identifies the survey's data: its file's checksum, as 32 hex digits (`None`
    /// for a file written before checksums). Compiling the same survey again gives the
    /// same; any change to its respondents, labels, codes or bases another.
    pub fn data_version(&self) -> Option<String> {
        crate::format::stored_checksum(&self.header, self.backing.bytes())
            .map(|digest| format!("{digest:032x}"))
    }

    /// The `SurveyCode`.
    pub fn code(&self) -> &str {
        &self.header.code
    }

    /// Display name.
    pub fn name(&self) -> &str {
        &self.header.name
    }

    /// Number of respondents.
    pub fn respondents(&self) -> usize {
        self.header.respondents as usize
    }

    /// Unit multiplier for `WgtAud`.
    pub fn audience_report_units(&self) -> u32 {
        self.header.audience_report_units
    }

    /// `Stbl` is 1 when `Resps` is at most this.
    pub fn unstable_max_resps(&self) -> u64 {
        self.header.unstable_max_resps
    }

    /// Each respondent's projection weight.
    pub fn weights(&self) -> &[f64] {
        self.slice(self.header.weights)
    }

    /// Respondent `row`'s id.
    pub fn id(&self, row: usize) -> Option<&str> {
        let offsets: &[u32] = self.slice(self.header.id_offsets);
        let bytes: &[u8] = self.slice(self.header.id_bytes);
        let (start, end) = (*offsets.get(row)? as usize, *offsets.get(row + 1)? as usize);
        std::str::from_utf8(bytes.get(start..end)?).ok()
    }

    /// Respondent `row`'s authorization group.
    pub fn group_of(&self, row: usize) -> Option<&str> {
        let codes: &[u16] = self.slice(self.header.group_codes?);
        let code = usize::from(*codes.get(row)?);
        self.header
            .groups
            .get(code.checked_sub(1)?)
            .map(|g| g.value.as_str())
    }

    /// Respondent `row`'s value of `variable`, `None` where missing or unknown.
    pub fn value(&self, variable: &str, row: usize) -> Option<f64> {
        // Two-bit columns have words for rows up to the next multiple of 64.
        if row >= self.respondents() {
            return None;
        }
        let column = self.column(*self.variable_index.get(variable)?)?;
        let code = column.codes.get(row) as usize;
        column.dict.get(code.checked_sub(1)?).copied()
    }

    /// Variable names in file order.
    pub fn variable_names(&self) -> impl Iterator<Item = &str> {
        self.header.variables.iter().map(|v| v.name.as_str())
    }

    /// Population base codes in definition order.
    pub fn base_codes(&self) -> impl Iterator<Item = &str> {
        self.header.bases.iter().map(|b| b.code.as_str())
    }

    /// Named codes in definition order.
    pub fn code_names(&self) -> impl Iterator<Item = &str> {
        self.header.codes.iter().map(|c| c.code.as_str())
    }

    /// Authorization group values.
    pub fn group_names(&self) -> impl Iterator<Item = &str> {
        self.header.groups.iter().map(|g| g.value.as_str())
    }

    /// Whether the survey defines this population base.
    pub fn has_base(&self, code: &str) -> bool {
        self.base_index.contains_key(code)
    }

    /// Whether the survey defines this authorization group.
    pub fn has_group(&self, value: &str) -> bool {
        self.group_index.contains_key(value)
    }

    pub(crate) fn header(&self) -> &Header {
        &self.header
    }

    pub(crate) fn variable_position(&self, name: &str) -> Option<usize> {
        self.variable_index.get(name).copied()
    }

    /// The column of the variable at `index`, `None` past the last.
    pub(crate) fn column(&self, index: usize) -> Option<Column<'_>> {
        self.header.variables.get(index).map(|v| self.column_of(v))
    }

    pub(crate) fn column_of(&self, variable: &VariableHeader) -> Column<'_> {
        let codes = match variable.width {
            Width::TwoBits => {
                let planes: &[u64] = self.slice(variable.codes);
                let (low, high) = planes.split_at(planes.len() / 2);
                Codes::TwoBits { low, high }
            }
            Width::U8 => Codes::U8(self.slice(variable.codes)),
            Width::U16 => Codes::U16(self.slice(variable.codes)),
            Width::U32 => Codes::U32(self.slice(variable.codes)),
        };
        Column {
            dict: self.slice(variable.dict),
            codes,
        }
    }

    pub(crate) fn set_cache(&self) -> &SetCache {
        &self.set_cache
    }

    /// Where weighted sums come from: the file's decimal planes when it has them (and
    /// they keep every sum below 2^53, as a file this build wrote does); else planes made
    /// from the f64 weights, decimal or binary, exact too; else (weights too spread out
    /// for those) the f64 weights themselves, each member's added exactly.
    pub(crate) fn weight_source(&self) -> Weights<'_> {
        if let Some(planes) = self.header.weight_planes {
            let words = self.slice(planes.section);
            let fit = *self
                .planes_fit
                .get_or_init(|| crate::weights::planes_fit(words, planes.bits));
            if fit {
                return Weights::Planes {
                    decimals: planes.decimals,
                    planes: PlaneView {
                        bits: planes.bits as usize,
                        stride: BLOCK_WORDS,
                        words,
                    },
                };
            }
        }
        let made = self.made_planes.get_or_init(|| {
            let planes = MadePlanes::of(self.weights())?;
            self.keep_bytes(planes.bytes());
            Some(planes)
        });
        match made {
            Some(planes) => planes.source(),
            None => Weights::Column(self.weights()),
        }
    }

    /// Does now what the first weighted sum would otherwise do while a query waits: checks
    /// that the file's planes keep every sum exact, or makes the planes from the weights
    /// when the file holds none (milliseconds per million respondents, more for
    /// full-precision weights). The catalog calls it before it serves a survey.
    pub fn prepare_sums(&self) {
        self.weight_source();
    }

    /// Whether [`Survey::prepare_sums`]'s work is done.
    #[cfg(test)]
    pub(crate) fn sums_prepared(&self) -> bool {
        self.planes_fit.get().is_some() || self.made_planes.get().is_some()
    }

    /// Evaluates an expression whose names are all defined to a respondent set.
    pub(crate) fn evaluate_known(&self, expr: &Expr) -> Bitset {
        plan(self, expr).materialize(self.respondents())
    }

    pub(crate) fn code_set(&self, name: &str) -> Option<&Bitset> {
        let index = *self.code_index.get(name)?;
        let expr = self.code_exprs.get(index)?;
        Some(
            self.code_sets
                .get(index)?
                .get_or_init(|| self.kept(self.evaluate_known(expr))),
        )
    }

    /// The respondents in base `code`, computed once.
    pub fn base_set(&self, code: &str) -> Option<&Bitset> {
        let index = *self.base_index.get(code)?;
        let expr = self.base_exprs.get(index)?;
        Some(
            self.base_sets
                .get(index)?
                .get_or_init(|| self.kept(self.evaluate_known(expr))),
        )
    }

    /// The respondents in authorization group `value`, computed once.
    pub fn group_set(&self, value: &str) -> Option<&Bitset> {
        let index = *self.group_index.get(value)?;
        Some(self.group_sets.get(index)?.get_or_init(|| {
            let codes: &[u16] = match self.header.group_codes {
                Some(section) => self.slice(section),
                None => unreachable!("a survey with groups but no group codes fails to load"),
            };
            // At most u16::MAX groups (checked at load), so the code fits.
            let code = index as u32 + 1;
            self.kept(
                Plan::Ranges {
                    codes: Codes::U16(codes),
                    ranges: Ranges::one(code, code),
                }
                .materialize(self.respondents()),
            )
        }))
    }

    /// Counts a base, group or code set, kept for the survey's life, against the budget:
    /// the survey's definition bounds how many there are, so they are never evicted, but
    /// the evictable caches shrink to make room for them.
    fn kept(&self, set: Bitset) -> Bitset {
        self.keep_bytes(self.set_cache.set_bytes());
        set
    }

    /// Takes `bytes` the survey keeps for its life (kept sets, squares, made planes) from
    /// the budget, which never refuses them, and counts them to give back on drop.
    fn keep_bytes(&self, bytes: usize) {
        self.set_cache.budget().take_anyway(bytes);
        self.kept_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// How tables sum `w²`: with decimal weights, planes of the squares made on first use
    /// and counted against the budget as the kept sets are; otherwise nothing is kept.
    pub(crate) fn squares(&self) -> &Squares {
        self.squares.get_or_init(|| {
            let squares = Squares::new(self.weight_source(), self.weights());
            self.keep_bytes(squares.bytes());
            squares
        })
    }
}

impl Source for Survey {
    fn column_named(&self, name: &str) -> Option<(usize, Column<'_>)> {
        let index = self.variable_position(name)?;
        Some((index, self.column(index)?))
    }

    fn named_set(&self, name: &str) -> Option<&Bitset> {
        self.code_set(name)
    }

    fn set_cache(&self) -> &SetCache {
        &self.set_cache
    }

    fn universe(&self) -> usize {
        self.respondents()
    }
}

impl Drop for Survey {
    fn drop(&mut self) {
        self.set_cache
            .budget()
            .give_back(self.kept_bytes.load(Ordering::Relaxed));
    }
}

/// The budget of a survey loaded on its own: a quarter of the file, counting a byte a
/// respondent for every column (two-bit columns take less, but their sets don't), within
/// bounds, so resident memory stays near the file's.
fn own_budget(file_len: usize, header: &Header) -> Arc<MemoryBudget> {
    MemoryBudget::new(own_budget_bytes(file_len, header))
}

fn own_budget_bytes(file_len: usize, header: &Header) -> usize {
    let respondents = usize::try_from(header.respondents).unwrap_or(usize::MAX);
    // At most four times the file: columns may share a section in a crafted file.
    let cells = respondents
        .saturating_mul(header.variables.len())
        .min(file_len.saturating_mul(4));
    (file_len.max(cells) / 4).clamp(1 << 20, 256 << 20)
}

/// `section` of `bytes` as a slice of `T`: in bounds and aligned, or why not.
fn section_slice<T: bytemuck::Pod>(bytes: &[u8], section: Section) -> Result<&[T], LoadError> {
    let corrupt = |why: &str| LoadError::Corrupt(format!("section at {}: {why}", section.offset));
    let start = usize::try_from(section.offset).map_err(|_| corrupt("offset"))?;
    let len = usize::try_from(section.len).map_err(|_| corrupt("length"))?;
    let end = start.checked_add(len).ok_or_else(|| corrupt("length"))?;
    let bytes = bytes
        .get(start..end)
        .ok_or_else(|| corrupt("past the end"))?;
    bytemuck::try_cast_slice(bytes).map_err(|e| corrupt(&format!("{e:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demo::{compile, DemoConfig};

    #[test]
    fn a_surveys_own_budget_counts_a_byte_a_cell_within_four_times_its_file() {
        let respondents = 20_000;
        let bytes = compile(&DemoConfig {
            respondents,
            flags: 300,
            seed: 1,
        })
        .unwrap();
        let mut header = read_header(&bytes).unwrap();
        let cells = respondents * header.variables.len();
        // Its yes/no questions are two-bit columns: the file is smaller than its cells.
        assert!(
            bytes.len() * 2 < cells,
            "{} bytes, {cells} cells",
            bytes.len()
        );
        assert_eq!(own_budget_bytes(bytes.len(), &header), cells / 4);
        // A header claiming far more cells than the file could hold gets the file's size.
        header.respondents = 1 << 40;
        assert_eq!(own_budget_bytes(bytes.len(), &header), bytes.len());
    }

    #[test]
    fn bytes_filled_in_place_load_and_too_many_are_an_error_not_an_abort() {
        let bytes = compile(&DemoConfig {
            respondents: 500,
            flags: 3,
            seed: 1,
        })
        .unwrap();
        let filled = AlignedBytes::filled(bytes.len() as u64, |into| into.copy_from_slice(&bytes));
        let survey = Survey::from_aligned(filled.unwrap()).unwrap();
        assert_eq!(survey.respondents(), 500);
        assert_eq!(survey.backing.bytes(), bytes);
        for len in [u64::MAX - 7, u64::MAX] {
            let error = AlignedBytes::filled(len, |_| unreachable!()).unwrap_err();
            assert!(
                matches!(error, LoadError::OutOfMemory { bytes } if bytes == len),
                "{error}"
            );
        }
    }

    /// A compiled survey of `rows` respondents, row `n` weighing `weight(n)` with `X = n % x`.
    fn weighted(rows: usize, weight: impl Fn(usize) -> String, x: usize) -> Vec<u8> {
        let mut csv = String::from("ID,W,X\n");
        for n in 0..rows {
            csv.push_str(&format!("r{n},{},{}\n", weight(n), n % x));
        }
        let toml = "code = \"S\"\nname = \"s\"\nrespondents = \"r.csv\"\n\
                    id_column = \"ID\"\nweight_column = \"W\"\n\
                    [[population_bases]]\ncode = \"ALL\"\nexpr = \"*\"\n";
        crate::import::compile(toml, "s.toml", csv.as_bytes(), "r.csv").unwrap()
    }

    /// Weight planes are in the file only when they add at most a tenth to it (they are
    /// laid out in whole blocks, so a survey just past a whole number of blocks would grow
    /// by more); every survey sums its decimals exactly all the same, from planes made on
    /// first use when the file has none.
    #[test]
    fn planes_in_the_file_never_grow_it_by_more_than_a_tenth() {
        const BLOCK: usize = 64 * crate::eval::BLOCK_WORDS;
        let mut held = Vec::new();
        for rows in [8, 300, BLOCK, BLOCK + 100, 3 * BLOCK + 1, 6 * BLOCK] {
            let bytes = weighted(rows, |n| format!("{}.25", n % 7), 2);
            let planes = read_header(&bytes).unwrap().weight_planes;
            if let Some(planes) = planes {
                let rest = bytes.len() as u64 - planes.section.len;
                assert!(
                    planes.section.len * 10 <= rest,
                    "{rows} respondents: {} bytes of planes beside {rest}",
                    planes.section.len
                );
            }
            held.push((rows, planes.is_some()));
            let survey = Survey::from_bytes(&bytes).unwrap();
            assert!(matches!(
                survey.weight_source(),
                Weights::Planes { decimals: 2, .. }
            ));
            let all = survey.base_set("ALL").unwrap().clone();
            let tally = survey.tally(&Expr::parse("X = 1").unwrap(), &all);
            // The file's planes when it has them; made in memory only when it has none.
            assert_eq!(
                survey.made_planes.get().is_some(),
                planes.is_none(),
                "{rows} respondents"
            );
            let hundredths: u64 = (1..rows).step_by(2).map(|n| n as u64 % 7 * 100 + 25).sum();
            assert_eq!(tally.count, rows as u64 / 2, "{rows} respondents");
            assert_eq!(
                tally.weight,
                hundredths as f64 / 100.0,
                "{rows} respondents"
            );
            if rows == 8 {
                assert!(
                    bytes.len() < 4096,
                    "{} bytes for 8 respondents",
                    bytes.len()
                );
            }
        }
        // A survey of exactly a block (no padding) holds its planes; one just past a
        // block, whose planes are half padding, does not; from a few blocks on the
        // padding matters less.
        assert_eq!(
            held,
            [
                (8, false),
                (300, false),
                (BLOCK, true),
                (BLOCK + 100, false),
                (3 * BLOCK + 1, true),
                (6 * BLOCK, true)
            ]
        );
    }

    /// Weight planes that would carry a sum past 2^53 (a damaged or crafted file) are not
    /// used: the f64 weights answer instead, and nothing overflows or panics.
    #[test]
    fn planes_past_their_bound_give_way_to_the_weights() {
        use crate::builder::{encode_column, NamedExpr, SurveyBuilder, SurveyMeta};
        // Weights of nine decimals: 39 planes, so planes of all ones pass 2^53. Two whole
        // blocks, and forty one-byte variables beside `X`, so the file holds the planes.
        let rows = 2 * 64 * crate::eval::BLOCK_WORDS;
        let meta = SurveyMeta {
            code: "S".into(),
            name: "s".into(),
            audience_report_units: 1,
            unstable_max_resps: 0,
            id_column: "ID".into(),
            weight_column: Some("W".into()),
            group_column: None,
            source_format: None,
        };
        let weights = (0..rows)
            .map(|n| format!("{}.123456789", n % 500).parse().unwrap())
            .collect();
        let mut builder =
            SurveyBuilder::new(meta, (0..rows).map(|n| format!("r{n}")).collect(), weights);
        for (name, modulus) in
            std::iter::once(("X".to_owned(), 3)).chain((0..40).map(|v| (format!("F{v}"), 200)))
        {
            let values: Vec<f64> = (0..rows).map(|n| (n % modulus) as f64).collect();
            let (dict, codes) = encode_column(&values);
            builder.encoded_variable(name, None, Vec::new(), dict, codes);
        }
        let all = NamedExpr {
            code: "ALL".into(),
            label: None,
            expr: "*".into(),
        };
        builder.expressions(Vec::new(), vec![all]);
        let mut bytes = builder.to_bytes().unwrap();
        let planes = read_header(&bytes).unwrap().weight_planes.unwrap().section;
        let intact = Survey::from_bytes(&bytes).unwrap();
        let (start, end) = (
            planes.offset as usize,
            (planes.offset + planes.len) as usize,
        );
        bytes[start..end].fill(0xff);
        assert!(crate::format::reseal(&mut bytes));
        let crafted = Survey::from_bytes(&bytes).unwrap();
        assert!(matches!(intact.weight_source(), Weights::Planes { .. }));
        // Made again from the weights: the same decimal planes the file should have held.
        assert!(matches!(crafted.weight_source(), Weights::Planes { .. }));
        let target = Expr::parse("X = 1").unwrap();
        let all = intact.base_set("ALL").unwrap().clone();
        let (exact, fallback) = (intact.tally(&target, &all), crafted.tally(&target, &all));
        assert_eq!(exact.count, (0..rows).filter(|n| n % 3 == 1).count() as u64);
        assert_eq!(exact.count, fallback.count);
        assert_eq!(exact, fallback);
    }
}
