//! Evaluating target expressions to respondent sets.

use crosstab_contract::Expr;

use crate::bitset::Bitset;
use crate::survey::{Codes, Column, Survey};

/// Which codes of a column satisfy a predicate, as a lookup over code values.
struct CodeMatch {
    /// `matches[k]` for code k; code 0 (missing) never matches.
    matches: Vec<bool>,
}

impl CodeMatch {
    fn new(dict: &[f64], predicate: impl Fn(f64) -> bool) -> Self {
        let mut matches = Vec::with_capacity(dict.len() + 1);
        matches.push(false);
        matches.extend(dict.iter().map(|v| predicate(*v)));
        CodeMatch { matches }
    }

    /// The matching codes as one inclusive range, when they are contiguous.
    fn single_range(&self) -> Option<(u32, u32)> {
        let first = self.matches.iter().position(|m| *m)?;
        let last = self.matches.iter().rposition(|m| *m)?;
        self.matches[first..=last]
            .iter()
            .all(|m| *m)
            .then_some((first as u32, last as u32))
    }
}

/// An expression compiled against one survey: each node yields the bits of any 64
/// respondents on demand, so a whole target evaluates in one pass over its columns
/// without materializing a set per leaf.
pub(crate) enum Plan<'a> {
    /// Every respondent.
    All,
    /// Nobody.
    Empty,
    /// A set computed earlier (a named code).
    Set(&'a Bitset),
    /// Codes in one contiguous range.
    Range { codes: Codes<'a>, lo: u32, hi: u32 },
    /// Codes listed in a table (`!=`, `IN` with gaps).
    Table { codes: Codes<'a>, table: Vec<bool> },
    /// Complement within all respondents.
    Not(Box<Plan<'a>>),
    /// All of these.
    And(Vec<Plan<'a>>),
    /// Any of these.
    Or(Vec<Plan<'a>>),
}

impl Plan<'_> {
    /// Bits for respondents `64 * index ..`; bits past the last respondent may be set
    /// (callers AND with a filter or clear the tail).
    pub(crate) fn word(&self, index: usize) -> u64 {
        match self {
            Plan::All => u64::MAX,
            Plan::Empty => 0,
            Plan::Set(set) => set.words().get(index).copied().unwrap_or(0),
            Plan::Range { codes, lo, hi } => {
                let span = hi.wrapping_sub(*lo);
                match codes {
                    Codes::U8(c) => {
                        pack_word(chunk(c, index), |x| u32::from(x).wrapping_sub(*lo) <= span)
                    }
                    Codes::U16(c) => {
                        pack_word(chunk(c, index), |x| u32::from(x).wrapping_sub(*lo) <= span)
                    }
                    Codes::U32(c) => pack_word(chunk(c, index), |x| x.wrapping_sub(*lo) <= span),
                }
            }
            Plan::Table { codes, table } => {
                let hit = |x: u32| table.get(x as usize).copied().unwrap_or(false);
                match codes {
                    Codes::U8(c) => pack_word(chunk(c, index), |x| hit(u32::from(x))),
                    Codes::U16(c) => pack_word(chunk(c, index), |x| hit(u32::from(x))),
                    Codes::U32(c) => pack_word(chunk(c, index), hit),
                }
            }
            Plan::Not(inner) => !inner.word(index),
            Plan::And(items) => items.iter().fold(u64::MAX, |word, item| {
                if word == 0 {
                    0
                } else {
                    word & item.word(index)
                }
            }),
            Plan::Or(items) => items.iter().fold(0, |word, item| {
                if word == u64::MAX {
                    word
                } else {
                    word | item.word(index)
                }
            }),
        }
    }
}

fn chunk<T>(codes: &[T], index: usize) -> &[T] {
    let start = (index * 64).min(codes.len());
    &codes[start..(start + 64).min(codes.len())]
}

impl Survey {
    /// Compiles an expression whose names are all defined (unknown names match nobody).
    pub(crate) fn plan(&self, expr: &Expr) -> Plan<'_> {
        match expr {
            Expr::All => Plan::All,
            Expr::Code(name) => self.code_set(name).map_or(Plan::Empty, Plan::Set),
            Expr::Compare { var, op, value } => {
                let (op, value) = (*op, *value);
                self.leaf(var, move |v| op.holds(v, value))
            }
            Expr::In { var, values } => self.leaf(var, |v| values.contains(&v)),
            Expr::Between { var, low, high } => {
                let (low, high) = (*low, *high);
                self.leaf(var, move |v| low <= v && v <= high)
            }
            Expr::Not(inner) => Plan::Not(Box::new(self.plan(inner))),
            Expr::And(items) => Plan::And(items.iter().map(|item| self.plan(item)).collect()),
            Expr::Or(items) => Plan::Or(items.iter().map(|item| self.plan(item)).collect()),
        }
    }

    fn leaf(&self, var: &str, predicate: impl Fn(f64) -> bool) -> Plan<'_> {
        let Some(index) = self.variable_position(var) else {
            return Plan::Empty;
        };
        let Column { dict, codes } = self.column(index);
        let matching = CodeMatch::new(dict, predicate);
        match matching.single_range() {
            Some((lo, hi)) => Plan::Range { codes, lo, hi },
            None if !matching.matches.contains(&true) => Plan::Empty,
            None => Plan::Table {
                codes,
                table: matching.matches,
            },
        }
    }

    /// Evaluates an expression whose names are all defined to a respondent set.
    pub(crate) fn evaluate_known(&self, expr: &Expr) -> Bitset {
        let n = self.respondents();
        let plan = self.plan(expr);
        Bitset::from_words((0..n.div_ceil(64)).map(|i| plan.word(i)).collect(), n)
    }
}

/// Bits for up to 64 codes: each becomes a 0/1 byte, and eight such bytes pack into
/// eight bits with one multiply; both steps vectorize, unlike shifting each compare into
/// the word.
#[inline]
fn pack_word<T: Copy>(codes: &[T], hit: impl Fn(T) -> bool) -> u64 {
    // Multiplying eight 0/1 bytes by this gathers byte k's bit into bit 56 + k.
    const GATHER: u64 = 0x0102_0408_1020_4080;
    if let Ok(full) = <&[T; 64]>::try_from(codes) {
        let mut hits = [0u8; 64];
        for (slot, code) in hits.iter_mut().zip(full) {
            *slot = u8::from(hit(*code));
        }
        let mut word = 0u64;
        for (group, bytes) in hits.chunks_exact(8).enumerate() {
            let mut eight = [0u8; 8];
            eight.copy_from_slice(bytes);
            word |= (u64::from_le_bytes(eight).wrapping_mul(GATHER) >> 56) << (group * 8);
        }
        word
    } else {
        codes
            .iter()
            .enumerate()
            .fold(0u64, |word, (j, code)| word | u64::from(hit(*code)) << j)
    }
}

/// Bits for 16-bit codes in `lo..=hi` (group membership).
pub(crate) fn scan_range_u16(codes: &[u16], lo: u32, hi: u32) -> Vec<u64> {
    let plan = Plan::Range {
        codes: Codes::U16(codes),
        lo,
        hi,
    };
    (0..codes.len().div_ceil(64))
        .map(|i| plan.word(i))
        .collect()
}
