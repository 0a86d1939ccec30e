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

impl Survey {
    /// Evaluates an expression whose names are all defined (unknown names match nobody).
    pub(crate) fn evaluate_known(&self, expr: &Expr) -> Bitset {
        let n = self.respondents();
        match expr {
            Expr::All => Bitset::full(n),
            Expr::Code(name) => self
                .code_set(name)
                .cloned()
                .unwrap_or_else(|| Bitset::empty(n)),
            Expr::Compare { var, op, value } => {
                let (op, value) = (*op, *value);
                self.scan(var, move |v| op.holds(v, value))
            }
            Expr::In { var, values } => self.scan(var, |v| values.contains(&v)),
            Expr::Between { var, low, high } => {
                let (low, high) = (*low, *high);
                self.scan(var, move |v| low <= v && v <= high)
            }
            Expr::Not(inner) => {
                let mut set = self.evaluate_known(inner);
                set.negate();
                set
            }
            Expr::And(items) => self.combine(items, Bitset::and_with),
            Expr::Or(items) => self.combine(items, Bitset::or_with),
        }
    }

    fn combine(&self, items: &[Expr], op: fn(&mut Bitset, &Bitset)) -> Bitset {
        let mut iter = items.iter();
        let mut acc = match iter.next() {
            Some(first) => self.evaluate_known(first),
            None => return Bitset::empty(self.respondents()),
        };
        for item in iter {
            op(&mut acc, &self.evaluate_known(item));
        }
        acc
    }

    fn scan(&self, var: &str, predicate: impl Fn(f64) -> bool) -> Bitset {
        let n = self.respondents();
        let Some(index) = self.variable_position(var) else {
            return Bitset::empty(n);
        };
        let Column { dict, codes } = self.column(index);
        let matching = CodeMatch::new(dict, predicate);
        let words = match (matching.single_range(), codes) {
            (None, _) if !matching.matches.contains(&true) => vec![0; n.div_ceil(64)],
            (Some((lo, hi)), Codes::U8(codes)) => scan_range(codes, lo, hi),
            (Some((lo, hi)), Codes::U16(codes)) => scan_range_u16(codes, lo, hi),
            (Some((lo, hi)), Codes::U32(codes)) => scan_range(codes, lo, hi),
            (None, Codes::U8(codes)) => scan_table(codes, &matching.matches),
            (None, Codes::U16(codes)) => scan_table(codes, &matching.matches),
            (None, Codes::U32(codes)) => scan_table(codes, &matching.matches),
        };
        Bitset::from_words(words, n)
    }
}

/// Bits for the codes in `lo..=hi`, 64 respondents a word. Each code becomes a 0/1 byte
/// (one unsigned compare, `c - lo <= hi - lo`), and eight such bytes pack into eight bits
/// with one multiply; both steps vectorize, unlike shifting each compare into the word.
fn scan_range<T: Copy + Into<u32>>(codes: &[T], lo: u32, hi: u32) -> Vec<u64> {
    let span = hi.wrapping_sub(lo);
    pack_hits(codes, |code| code.into().wrapping_sub(lo) <= span)
}

/// Packs `hit(code)` for each code into words of 64 bits.
fn pack_hits<T: Copy>(codes: &[T], hit: impl Fn(T) -> bool) -> Vec<u64> {
    // Multiplying eight 0/1 bytes by this gathers byte k's bit into bit 56 + k.
    const GATHER: u64 = 0x0102_0408_1020_4080;
    let mut words = Vec::with_capacity(codes.len().div_ceil(64));
    let mut chunks = codes.chunks_exact(64);
    for chunk in &mut chunks {
        let mut hits = [0u8; 64];
        for (slot, code) in hits.iter_mut().zip(chunk) {
            *slot = u8::from(hit(*code));
        }
        let mut word = 0u64;
        for (group, bytes) in hits.chunks_exact(8).enumerate() {
            let mut eight = [0u8; 8];
            eight.copy_from_slice(bytes);
            word |= (u64::from_le_bytes(eight).wrapping_mul(GATHER) >> 56) << (group * 8);
        }
        words.push(word);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let word = rest
            .iter()
            .enumerate()
            .fold(0u64, |word, (j, code)| word | u64::from(hit(*code)) << j);
        words.push(word);
    }
    words
}

/// [`scan_range`] for 16-bit codes (also used for group membership).
pub(crate) fn scan_range_u16(codes: &[u16], lo: u32, hi: u32) -> Vec<u64> {
    scan_range(codes, lo, hi)
}

/// Bits for the codes whose entry in `table` is true.
fn scan_table<T: Copy + Into<u32>>(codes: &[T], table: &[bool]) -> Vec<u64> {
    pack_hits(codes, |code| {
        table.get(code.into() as usize).copied().unwrap_or(false)
    })
}
