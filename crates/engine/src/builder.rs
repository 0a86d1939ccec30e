//! Compiles columns into the survey file format.

use std::collections::HashMap;

use crate::error::ImportError;
use crate::eval::BLOCK_WORDS;
use crate::format::{
    ExprHeader, GroupHeader, Header, PlanesHeader, VariableHeader, Width, Writer, FORMAT_VERSION,
    UNWEIGHTED_FORMAT_VERSION,
};

/// Survey-level settings of a survey being built.
#[derive(Debug, Clone)]
pub struct SurveyMeta {
    /// The `SurveyCode`.
    pub code: String,
    /// Display name.
    pub name: String,
    /// Unit multiplier for `WgtAud`.
    pub audience_report_units: u32,
    /// `Stbl` is 1 when `Resps` is at most this.
    pub unstable_max_resps: u64,
    /// Name of the id column in the source.
    pub id_column: String,
    /// Name of the weight column in the source (`None`: unweighted, every weight 1).
    pub weight_column: Option<String>,
    /// Name of the group column in the source.
    pub group_column: Option<String>,
    /// The respondent file's format ("csv", "sav", "zsav").
    pub source_format: Option<String>,
}

/// A named code or population base: code, label and expression text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedExpr {
    /// Its code.
    pub code: String,
    /// Display label.
    pub label: Option<String>,
    /// Expression text (already checked by the caller).
    pub expr: String,
}

/// One column's codes at the narrowest width that holds them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CodeVec {
    U8(Vec<u8>),
    U16(Vec<u16>),
    U32(Vec<u32>),
}

#[derive(Debug, Clone)]
struct EncodedVariable {
    name: String,
    label: Option<String>,
    value_labels: Vec<(f64, String)>,
    dict: Vec<f64>,
    codes: StoredCodes,
}

/// A column's codes as the file stores them.
#[derive(Debug, Clone, PartialEq, Eq)]
enum StoredCodes {
    /// [`Width::TwoBits`]: bit 0 of every code, then bit 1, 64 respondents a word.
    TwoBits(Vec<u64>),
    Integers(CodeVec),
}

impl StoredCodes {
    /// The narrowest form of `codes` for a column of `distinct` values.
    fn new(distinct: usize, codes: CodeVec) -> StoredCodes {
        match codes {
            CodeVec::U8(codes) if Width::for_distinct(distinct) == Width::TwoBits => {
                StoredCodes::TwoBits(two_bit_planes(&codes))
            }
            codes => StoredCodes::Integers(codes),
        }
    }
}

/// Codes of at most two bits as two planes of `⌈rows / 64⌉` words: bit 0 of each code,
/// then bit 1.
fn two_bit_planes(codes: &[u8]) -> Vec<u64> {
    let words = codes.len().div_ceil(64);
    let mut planes = vec![0u64; 2 * words];
    let (low, high) = planes.split_at_mut(words);
    for ((chunk, low), high) in codes.chunks(64).zip(low).zip(high) {
        for (i, code) in chunk.iter().enumerate() {
            debug_assert!(*code <= 3, "a two-bit column holds codes 0 to 3");
            *low |= u64::from(code & 1) << i;
            *high |= u64::from(code >> 1 & 1) << i;
        }
    }
    planes
}

/// Collects a survey column by column, then writes the compiled file.
#[derive(Debug, Clone)]
pub struct SurveyBuilder {
    meta: SurveyMeta,
    ids: Vec<String>,
    weights: Vec<f64>,
    groups: Vec<(String, Option<String>)>,
    group_codes: Option<Vec<u16>>,
    variables: Vec<EncodedVariable>,
    codes: Vec<NamedExpr>,
    bases: Vec<NamedExpr>,
}

impl SurveyBuilder {
    /// Starts a survey of `ids.len()` respondents with these weights (already checked).
    pub fn new(meta: SurveyMeta, ids: Vec<String>, weights: Vec<f64>) -> Self {
        SurveyBuilder {
            meta,
            ids,
            weights,
            groups: Vec::new(),
            group_codes: None,
            variables: Vec::new(),
            codes: Vec::new(),
            bases: Vec::new(),
        }
    }

    /// Sets the authorization groups (value, label) and each respondent's group:
    /// `None`, or an index into `groups`.
    pub fn groups(&mut self, groups: Vec<(String, Option<String>)>, membership: Vec<u16>) {
        self.groups = groups;
        self.group_codes = Some(membership);
    }

    /// Adds a variable dictionary-encoded as [`encode_column`] does (sorted
    /// distinct values; per respondent the 1-based code of its value, 0 = missing), as
    /// streaming imports build them.
    pub(crate) fn encoded_variable(
        &mut self,
        name: String,
        label: Option<String>,
        value_labels: Vec<(f64, String)>,
        dict: Vec<f64>,
        codes: CodeVec,
    ) {
        self.variables.push(EncodedVariable {
            name,
            label,
            value_labels,
            codes: StoredCodes::new(dict.len(), codes),
            dict,
        });
    }

    /// Sets the named codes and the population bases.
    pub fn expressions(&mut self, codes: Vec<NamedExpr>, bases: Vec<NamedExpr>) {
        self.codes = codes;
        self.bases = bases;
    }

    /// Writes the compiled survey.
    pub fn to_bytes(&self) -> Result<Vec<u8>, ImportError> {
        let (offsets, id_bytes) = self.id_sections()?;
        let (writer, header) = self.layout(&offsets, &id_bytes);
        writer
            .finish(header)
            .map_err(|e| self.compile_error(e.to_string()))
    }

    /// Writes the compiled survey to `out` without assembling it in memory first. A
    /// survey the format can't hold is an `InvalidData` error carrying the reason.
    #[cfg(feature = "fs")]
    pub(crate) fn write_to(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        let (offsets, id_bytes) = self
            .id_sections()
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))?;
        let (writer, header) = self.layout(&offsets, &id_bytes);
        writer.write_to(header, out)
    }

    /// The ids as offsets into one byte string (u32 offsets: at most 4 GiB of ids).
    fn id_sections(&self) -> Result<(Vec<u32>, Vec<u8>), ImportError> {
        let mut offsets = Vec::with_capacity(self.ids.len() + 1);
        let mut id_bytes = Vec::new();
        offsets.push(0u32);
        for id in &self.ids {
            id_bytes.extend_from_slice(id.as_bytes());
            let end = u32::try_from(id_bytes.len()).map_err(|_| {
                self.compile_error("respondent ids total more than 4 GiB".to_owned())
            })?;
            offsets.push(end);
        }
        Ok((offsets, id_bytes))
    }

    fn compile_error(&self, reason: String) -> ImportError {
        ImportError::Compile {
            survey: self.meta.code.clone(),
            reason,
        }
    }

    fn layout<'a>(&'a self, offsets: &'a [u32], id_bytes: &'a [u8]) -> (Writer<'a>, Header) {
        let mut writer = Writer::new();
        let weights = writer.section(bytemuck::cast_slice(&self.weights));
        let id_offsets = writer.section(bytemuck::cast_slice(offsets));
        let id_bytes = writer.section(id_bytes);
        let group_codes = self
            .group_codes
            .as_ref()
            .map(|codes| writer.section(bytemuck::cast_slice(codes)));
        let variables = self
            .variables
            .iter()
            .map(|variable| {
                let dict = writer.section(bytemuck::cast_slice(&variable.dict));
                let (width, codes) = match &variable.codes {
                    StoredCodes::TwoBits(planes) => {
                        (Width::TwoBits, writer.section(bytemuck::cast_slice(planes)))
                    }
                    StoredCodes::Integers(CodeVec::U8(codes)) => (Width::U8, writer.section(codes)),
                    StoredCodes::Integers(CodeVec::U16(codes)) => {
                        (Width::U16, writer.section(bytemuck::cast_slice(codes)))
                    }
                    StoredCodes::Integers(CodeVec::U32(codes)) => {
                        (Width::U32, writer.section(bytemuck::cast_slice(codes)))
                    }
                };
                VariableHeader {
                    name: variable.name.clone(),
                    label: variable.label.clone(),
                    value_labels: variable.value_labels.clone(),
                    width,
                    dict,
                    codes,
                }
            })
            .collect();
        // Last, so the rest of the file is known: planes that would add more than a tenth
        // to it are left out (and made in memory when the survey is opened), sized from
        // the weights' scale before they are laid out, so none are made only to be dropped.
        // A survey under a block lays its planes out shorter than the file's whole blocks:
        // it makes them in memory when opened instead.
        let respondents = self.weights.len() as u64;
        let weight_planes = (crate::weights::plane_stride(self.weights.len()) == BLOCK_WORDS)
            .then(|| crate::weights::DecimalScale::of(&self.weights))
            .flatten()
            .filter(|scale| {
                crate::weights::plane_words(respondents, scale.bits).is_some_and(|words| {
                    crate::weights::planes_belong_in_file(words.saturating_mul(8), writer.len())
                })
            })
            .and_then(|scale| scale.lay_out(&self.weights))
            .map(|planes| PlanesHeader {
                decimals: planes.decimals,
                bits: planes.laid.bits,
                section: writer.owned_section(planes.laid.words),
            });
        let exprs = |list: &[NamedExpr]| {
            list.iter()
                .map(|named| ExprHeader {
                    code: named.code.clone(),
                    label: named.label.clone(),
                    expr: named.expr.clone(),
                })
                .collect()
        };
        let header = Header {
            format: if self.meta.weight_column.is_some() {
                FORMAT_VERSION
            } else {
                UNWEIGHTED_FORMAT_VERSION
            },
            code: self.meta.code.clone(),
            name: self.meta.name.clone(),
            audience_report_units: self.meta.audience_report_units,
            unstable_max_resps: self.meta.unstable_max_resps,
            respondents: self.ids.len() as u64,
            id_column: self.meta.id_column.clone(),
            weight_column: self.meta.weight_column.clone(),
            group_column: self.meta.group_column.clone(),
            source_format: self.meta.source_format.clone(),
            weights,
            weight_planes,
            id_offsets,
            id_bytes,
            groups: self
                .groups
                .iter()
                .map(|(value, label)| GroupHeader {
                    value: value.clone(),
                    label: label.clone(),
                })
                .collect(),
            group_codes,
            variables,
            codes: exprs(&self.codes),
            bases: exprs(&self.bases),
            // The writer sets it as it writes the checksum.
            checksum: None,
        };
        (writer, header)
    }
}

/// Dictionary-encodes a column: sorted distinct values, and per respondent the 1-based
/// position of its value (0 = missing). Few distinct values are found by a linear scan,
/// which beats hashing for the flags and scales that most survey columns are.
pub(crate) fn encode_column(values: &[f64]) -> (Vec<f64>, CodeVec) {
    const LINEAR: usize = 16;
    let key = |v: f64| {
        if v == 0.0 {
            0.0f64.to_bits()
        } else {
            v.to_bits()
        }
    };
    let mut small: Vec<f64> = Vec::new();
    let mut large: Option<HashMap<u64, f64>> = None;
    for &value in values.iter().filter(|v| !v.is_nan()) {
        match large.as_mut() {
            Some(map) => {
                // -0 is kept as 0, as the small dictionary keeps it.
                map.entry(key(value))
                    .or_insert(if value == 0.0 { 0.0 } else { value });
            }
            None => {
                if !small.iter().any(|s| key(*s) == key(value)) {
                    small.push(if value == 0.0 { 0.0 } else { value });
                    if small.len() > LINEAR {
                        large = Some(small.iter().map(|v| (key(*v), *v)).collect());
                    }
                }
            }
        }
    }
    let mut dict: Vec<f64> = match large {
        Some(map) => map.into_values().collect(),
        None => small,
    };
    dict.sort_by(f64::total_cmp);
    let lookup: HashMap<u64, u32> = if dict.len() > LINEAR {
        dict.iter()
            .enumerate()
            .map(|(i, v)| (key(*v), i as u32 + 1))
            .collect()
    } else {
        HashMap::new()
    };
    let code_of = |value: f64| -> u32 {
        if value.is_nan() {
            0
        } else if dict.len() > LINEAR {
            lookup.get(&key(value)).copied().unwrap_or(0)
        } else {
            dict.iter()
                .position(|d| key(*d) == key(value))
                .map_or(0, |i| i as u32 + 1)
        }
    };
    let codes = match Width::for_distinct(dict.len()) {
        Width::TwoBits | Width::U8 => {
            CodeVec::U8(values.iter().map(|v| code_of(*v) as u8).collect())
        }
        Width::U16 => CodeVec::U16(values.iter().map(|v| code_of(*v) as u16).collect()),
        Width::U32 => CodeVec::U32(values.iter().map(|v| code_of(*v)).collect()),
    };
    (dict, codes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_sorted_dictionary_with_missing_as_zero() {
        let (dict, codes) = encode_column(&[3.0, f64::NAN, 1.0, 3.0, -0.0, 0.0]);
        assert_eq!(dict, vec![0.0, 1.0, 3.0]);
        assert_eq!(codes, CodeVec::U8(vec![3, 0, 2, 3, 1, 1]));
        // Past the small dictionary's size too: -0 is stored as 0.
        let mut many: Vec<f64> = (1..=20).map(f64::from).collect();
        many.push(-0.0);
        let (dict, _) = encode_column(&many);
        assert_eq!(dict[0].to_bits(), 0.0f64.to_bits());
    }

    #[test]
    fn three_values_are_stored_as_two_bit_planes() {
        let rows: Vec<u8> = (0..130).map(|row| (row * 7 % 4) as u8).collect();
        let StoredCodes::TwoBits(planes) = StoredCodes::new(3, CodeVec::U8(rows.clone())) else {
            panic!("expected two bit planes")
        };
        assert_eq!(planes.len(), 2 * 3);
        for (row, code) in rows.iter().enumerate() {
            let bit = |word: u64| (word >> (row % 64) & 1) as u8;
            let (low, high) = (bit(planes[row / 64]), bit(planes[3 + row / 64]));
            assert_eq!(low | high << 1, *code, "row {row}");
        }
        // Past the last respondent every bit is clear (code 0, missing).
        assert_eq!(planes[2] >> 2, 0);
        assert_eq!(planes[5] >> 2, 0);
        let four = StoredCodes::new(4, CodeVec::U8(vec![4, 1]));
        assert_eq!(four, StoredCodes::Integers(CodeVec::U8(vec![4, 1])));
    }

    #[test]
    fn widens_for_many_distinct_values() {
        let values: Vec<f64> = (0..300).map(f64::from).collect();
        let (dict, codes) = encode_column(&values);
        assert_eq!(dict.len(), 300);
        let CodeVec::U16(codes) = codes else {
            panic!("expected u16")
        };
        assert_eq!(codes[299], 300);
    }
}
