//! Respondent data from a source file, encoded column by column as it streams in.
//!
//! Every source (CSV, SPSS) pushes each case's values into one [`ColumnEncoder`] per
//! variable, so an import holds the survey's columns as codes of one to four bytes a
//! cell (a column of at most three values becomes two bit planes only when it is
//! written) and never the file's rows.

use std::collections::HashMap;

use crate::builder::CodeVec;
use crate::definition::SourceFormat;
use crate::survey::Survey;

/// Respondent data as read from a source file (or generated), before compilation.
pub(crate) struct Respondents {
    pub ids: Vec<String>,
    pub weights: Vec<f64>,
    pub group_values: Vec<Option<String>>,
    /// Labels the source gives its groups, by group (as in `group_values`).
    pub group_labels: Vec<(String, String)>,
    /// Variable columns in file order.
    pub columns: Vec<(String, EncodedColumn)>,
    /// Labels the source carries, by variable.
    pub labels: Vec<(String, SourceLabels)>,
    /// Named codes the source defines.
    pub codes: Vec<SourceCode>,
    /// The source's format.
    pub format: SourceFormat,
}

#[cfg(feature = "fs")]
mod bytecode;
#[cfg(feature = "parquet")]
pub(crate) mod parquet;
#[cfg(feature = "fs")]
pub(crate) mod sav;
#[cfg(feature = "fs")]
mod spss_text;

/// Distinct values up to this many are found by a linear scan, which beats hashing for
/// the flags and scales that most survey columns are.
const LINEAR: usize = 16;

/// Whole numbers below this have a code slot of their own in [`ColumnEncoder`].
const SMALL: usize = 256;

/// The bits a value is keyed by: -0.0 and 0.0 are one value.
fn key(value: f64) -> u64 {
    if value == 0.0 {
        0.0f64.to_bits()
    } else {
        value.to_bits()
    }
}

/// A column dictionary-encoded as the compiled file holds it: sorted distinct values,
/// and per respondent the 1-based position of its value (0 = missing).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct EncodedColumn {
    pub dict: Vec<f64>,
    pub codes: CodeVec,
}

impl EncodedColumn {
    /// Encodes a whole column of values (NaN = missing).
    pub fn from_values(values: &[f64]) -> EncodedColumn {
        let (dict, codes) = crate::builder::encode_column(values);
        EncodedColumn { dict, codes }
    }

    /// The value of respondent `row`, NaN when missing.
    pub fn value(&self, row: usize) -> f64 {
        let code = match &self.codes {
            CodeVec::U8(codes) => codes.get(row).map(|c| u32::from(*c)),
            CodeVec::U16(codes) => codes.get(row).map(|c| u32::from(*c)),
            CodeVec::U32(codes) => codes.get(row).copied(),
        };
        match code {
            Some(code) if code > 0 => self.dict[code as usize - 1],
            _ => f64::NAN,
        }
    }
}

/// Encodes one column as its values arrive: codes in order of first appearance,
/// widened from one to two to four bytes as distinct values grow, then renumbered in
/// value order by [`ColumnEncoder::finish`].
#[derive(Debug, Clone)]
pub(crate) struct ColumnEncoder {
    /// Distinct values in order of first appearance.
    values: Vec<f64>,
    /// Value key to code, once there are more than [`LINEAR`] distinct values.
    lookup: Option<HashMap<u64, u32>>,
    /// Code of each whole number 0 to 255 seen (0 = not yet): most survey answers are
    /// such codes, and this finds them without a search.
    small: Box<[u32; SMALL]>,
    codes: CodeVec,
}

impl ColumnEncoder {
    /// An encoder with room for `respondents` codes.
    pub fn with_capacity(respondents: usize) -> ColumnEncoder {
        ColumnEncoder {
            values: Vec::new(),
            lookup: None,
            small: Box::new([0; SMALL]),
            codes: CodeVec::U8(Vec::with_capacity(respondents)),
        }
    }

    /// Appends one respondent's value (NaN = missing).
    #[inline]
    pub fn push(&mut self, value: f64) {
        // `as` saturates, and NaN becomes 0 (which then fails the round trip check).
        let whole = value as usize;
        let code = if whole < SMALL && whole as f64 == value {
            match self.small[whole] {
                0 => {
                    let code = self.code_of(value);
                    self.small[whole] = code;
                    code
                }
                code => code,
            }
        } else if value.is_nan() {
            0
        } else {
            self.code_of(value)
        };
        match &mut self.codes {
            // `code_of` widened the codes before handing out a code they can't hold.
            CodeVec::U8(codes) => codes.push(code as u8),
            CodeVec::U16(codes) => codes.push(code as u16),
            CodeVec::U32(codes) => codes.push(code),
        }
    }

    fn code_of(&mut self, value: f64) -> u32 {
        let k = key(value);
        match &self.lookup {
            Some(lookup) => {
                if let Some(code) = lookup.get(&k) {
                    return *code;
                }
            }
            None => {
                if let Some(i) = self.values.iter().position(|v| key(*v) == k) {
                    return i as u32 + 1;
                }
            }
        }
        self.values.push(if value == 0.0 { 0.0 } else { value });
        let code = self.values.len() as u32;
        match &mut self.lookup {
            Some(lookup) => {
                lookup.insert(k, code);
            }
            None if self.values.len() > LINEAR => {
                self.lookup = Some(
                    self.values
                        .iter()
                        .enumerate()
                        .map(|(i, v)| (key(*v), i as u32 + 1))
                        .collect(),
                );
            }
            None => {}
        }
        self.widen_for(self.values.len());
        code
    }

    /// Widens the codes when `distinct` values no longer fit (code 0 is "missing").
    fn widen_for(&mut self, distinct: usize) {
        let codes = std::mem::replace(&mut self.codes, CodeVec::U8(Vec::new()));
        self.codes = match codes {
            CodeVec::U8(codes) if distinct >= usize::from(u8::MAX) => {
                let mut wide = Vec::with_capacity(codes.capacity());
                wide.extend(codes.iter().map(|c| u16::from(*c)));
                CodeVec::U16(wide)
            }
            CodeVec::U16(codes) if distinct >= usize::from(u16::MAX) => {
                let mut wide = Vec::with_capacity(codes.capacity());
                wide.extend(codes.iter().map(|c| u32::from(*c)));
                CodeVec::U32(wide)
            }
            codes => codes,
        };
    }

    /// The column with its dictionary sorted and its codes renumbered to match.
    pub fn finish(self) -> EncodedColumn {
        let ColumnEncoder {
            values, mut codes, ..
        } = self;
        let mut order: Vec<u32> = (0..values.len() as u32).collect();
        order.sort_by(|a, b| values[*a as usize].total_cmp(&values[*b as usize]));
        // renumber[old code] = new code; code 0 (missing) stays 0.
        let mut renumber = vec![0u32; values.len() + 1];
        for (new, old) in order.iter().enumerate() {
            renumber[*old as usize + 1] = new as u32 + 1;
        }
        match &mut codes {
            CodeVec::U8(codes) => codes
                .iter_mut()
                .for_each(|c| *c = renumber[usize::from(*c)] as u8),
            CodeVec::U16(codes) => codes
                .iter_mut()
                .for_each(|c| *c = renumber[usize::from(*c)] as u16),
            CodeVec::U32(codes) => codes.iter_mut().for_each(|c| *c = renumber[*c as usize]),
        }
        let dict = order.iter().map(|i| values[*i as usize]).collect();
        EncodedColumn { dict, codes }
    }
}

/// A named code a source defines (an SPSS multiple-response set).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceCode {
    /// The code.
    pub code: String,
    /// Display label.
    pub label: Option<String>,
    /// Its expression over the source's variables.
    pub expr: String,
}

/// Labels a source carries for one variable.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SourceLabels {
    /// The variable's label.
    pub label: Option<String>,
    /// Labels of its values.
    pub values: Vec<(f64, String)>,
}

impl Survey {
    /// The format the survey's respondents were imported from (`csv`, `sav`, `zsav`, `parquet`),
    /// `None` for surveys compiled before the format was recorded.
    pub fn source_format(&self) -> Option<&str> {
        self.header().source_format.as_deref()
    }
}

impl SourceFormat {
    /// The format of an installed survey's respondents, from its recorded name.
    pub fn from_name(name: &str) -> Option<SourceFormat> {
        match name {
            "csv" => Some(SourceFormat::Csv),
            "sav" => Some(SourceFormat::Sav),
            "zsav" => Some(SourceFormat::Zsav),
            "parquet" => Some(SourceFormat::Parquet),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn streamed(values: &[f64]) -> EncodedColumn {
        let mut encoder = ColumnEncoder::with_capacity(0);
        for value in values {
            encoder.push(*value);
        }
        encoder.finish()
    }

    #[test]
    fn streaming_encoding_matches_whole_column_encoding() {
        let few = [3.0, f64::NAN, 1.0, 3.0, -0.0, 0.0, 2.5];
        // Past 254 and 65,534 distinct values the codes widen mid-stream.
        let many: Vec<f64> = (0..70_000)
            .map(|i| f64::from((i * 7919) % 66_000))
            .collect();
        let mid: Vec<f64> = (0..1000).map(|i| f64::from(i % 300) - 150.0).collect();
        for values in [&few[..], &many, &mid] {
            let encoded = streamed(values);
            assert_eq!(encoded, EncodedColumn::from_values(values));
            for (row, value) in values.iter().enumerate() {
                let got = encoded.value(row);
                assert!(got == *value || (value.is_nan() && got.is_nan()), "{row}");
            }
        }
        assert!(matches!(streamed(&many).codes, CodeVec::U32(_)));
        assert!(matches!(streamed(&mid).codes, CodeVec::U16(_)));
    }
}
