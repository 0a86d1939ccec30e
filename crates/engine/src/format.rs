//! The compiled survey file: a small JSON header, then 8-byte-aligned little-endian
//! sections that are used in place (memory-mapped where the platform allows).
//!
//! ```text
//! 0      magic "CTXSURV" + format byte
//! 8      u64 header length H
//! 16     H bytes of JSON header (see `Header`)
//! ...    zero padding to a multiple of 8, then the sections the header points at
//! end-16 the xxh3-128 checksum of every byte before it (u128), when the header says
//!        `"checksum": "xxh3-128"` (files written before checksums have neither)
//! ```

use std::io::Write;

use serde::{Deserialize, Serialize};

use crate::error::LoadError;

/// The file's first bytes; the eighth is its format version.
const MAGIC: &[u8; 7] = b"CTXSURV";
/// Written in every file (byte 8 and the header's `format`); 2 added two-bit columns
/// ([`Width::TwoBits`]). In the magic bytes too, so a build that reads only older
/// versions refuses a newer file as such before it parses the header.
pub(crate) const FORMAT_VERSION: u32 = 2;
/// The version of an unweighted survey's file (no `weight_column`), which builds before
/// it could not read: only such files are written as 3, so every other file stays
/// readable by them.
pub(crate) const UNWEIGHTED_FORMAT_VERSION: u32 = 3;
/// Versions this build reads: a version 1 file is a version 2 file without two-bit
/// columns, a version 2 file a version 3 file with a weight column.
const READABLE_VERSIONS: [u32; 3] = [1, 2, 3];

/// The checksum this build writes and verifies, as the header names it.
pub(crate) const CHECKSUM: &str = "xxh3-128";
/// Bytes of the checksum at the end of the file.
const CHECKSUM_LEN: usize = 16;

/// A byte range of the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub(crate) struct Section {
    pub offset: u64,
    pub len: u64,
}

/// Width of a variable's codes: 2 bits, or 1, 2 or 4 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Width {
    /// Two bit planes of `⌈n / 64⌉` words each (bit 0 of every code, then bit 1), for a
    /// variable of at most three values: a yes/no question and its missing answers read
    /// a quarter of the bytes they would as bytes.
    TwoBits,
    U8,
    U16,
    U32,
}

impl Width {
    pub fn for_distinct(distinct: usize) -> Width {
        // Code 0 is "missing", so a width holds one fewer value than it can count.
        if distinct <= TWO_BIT_VALUES {
            Width::TwoBits
        } else if distinct < usize::from(u8::MAX) {
            Width::U8
        } else if distinct < usize::from(u16::MAX) {
            Width::U16
        } else {
            Width::U32
        }
    }

    /// Size of one element of the section and how many `respondents` take.
    pub fn layout(self, respondents: u64) -> (u64, u64) {
        match self {
            Width::TwoBits => (8, 2 * respondents.div_ceil(64)),
            Width::U8 => (1, respondents),
            Width::U16 => (2, respondents),
            Width::U32 => (4, respondents),
        }
    }
}

/// The most distinct values a [`Width::TwoBits`] column holds (codes 1 to 3).
pub(crate) const TWO_BIT_VALUES: usize = 3;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Header {
    pub format: u32,
    pub code: String,
    pub name: String,
    pub audience_report_units: u32,
    pub unstable_max_resps: u64,
    pub respondents: u64,
    pub id_column: String,
    /// `None`: an unweighted survey (every weight 1).
    #[serde(default)]
    pub weight_column: Option<String>,
    pub group_column: Option<String>,
    /// Where the respondents came from: "csv", "sav", "zsav" (absent in older files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_format: Option<String>,
    /// f64 per respondent.
    pub weights: Section,
    /// The weights again as exact integers in bit planes, when they are short decimals
    /// (absent in older files and for other weights).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_planes: Option<PlanesHeader>,
    /// u32 offsets (respondents + 1) into `id_bytes`.
    pub id_offsets: Section,
    pub id_bytes: Section,
    pub groups: Vec<GroupHeader>,
    /// u16 per respondent: 0 no group, k is `groups[k - 1]`.
    pub group_codes: Option<Section>,
    pub variables: Vec<VariableHeader>,
    pub codes: Vec<ExprHeader>,
    pub bases: Vec<ExprHeader>,
    /// The checksum at the end of the file ([`CHECKSUM`]); absent in older files, which
    /// end with their last section. Builds before it ignore both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<String>,
}

/// Where the weight planes are and what they hold (see `weights.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PlanesHeader {
    /// Each weight is its integer over `10^decimals`.
    pub decimals: u32,
    /// Number of planes (bits of the largest integer).
    pub bits: u32,
    /// u64 words, [`crate::weights::plane_words`] of them.
    pub section: Section,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct GroupHeader {
    pub value: String,
    pub label: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct VariableHeader {
    pub name: String,
    pub label: Option<String>,
    pub value_labels: Vec<(f64, String)>,
    pub width: Width,
    /// Sorted distinct values, f64 each: code k (1-based) is `dict[k - 1]`.
    pub dict: Section,
    /// One code per respondent, 0 = missing.
    pub codes: Section,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ExprHeader {
    pub code: String,
    pub label: Option<String>,
    pub expr: String,
}

/// Lays out sections after the header, remembering where each goes. Sections are
/// borrowed, not copied, so a large survey is written out without a second copy in memory;
/// words made only for the file (the weight planes) are handed over ([`Writer::owned_section`]).
pub(crate) struct Writer<'a> {
    parts: Vec<(u64, Part<'a>)>,
    len: u64,
}

/// A section's bytes: borrowed from what is being written, or words made for the file.
enum Part<'a> {
    Borrowed(&'a [u8]),
    Words(Vec<u64>),
}

impl Part<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Part::Borrowed(bytes) => bytes,
            Part::Words(words) => bytemuck::cast_slice(words),
        }
    }
}

impl<'a> Writer<'a> {
    pub fn new() -> Self {
        Writer {
            parts: Vec::new(),
            len: 0,
        }
    }

    /// Places `bytes` at the next 8-aligned offset (relative to the body start).
    pub fn section(&mut self, bytes: &'a [u8]) -> Section {
        self.place(Part::Borrowed(bytes))
    }

    /// [`Writer::section`] for words the writer keeps until it writes them.
    pub fn owned_section(&mut self, words: Vec<u64>) -> Section {
        self.place(Part::Words(words))
    }

    fn place(&mut self, part: Part<'a>) -> Section {
        let offset = align8(self.len);
        let len = part.bytes().len() as u64;
        self.parts.push((offset, part));
        self.len = offset + len;
        Section { offset, len }
    }

    /// Bytes of the body laid out so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Lays out the file in memory: header first, then the body.
    pub fn finish(self, header: Header) -> std::io::Result<Vec<u8>> {
        let mut out = Vec::with_capacity(usize::try_from(self.len).unwrap_or(0) + 4096);
        self.write_to(header, &mut out)?;
        Ok(out)
    }

    /// Writes the file: header first, then the body, with section offsets rebased, then
    /// the checksum of it all.
    pub fn write_to(self, mut header: Header, out: &mut impl Write) -> std::io::Result<()> {
        header.checksum = Some(CHECKSUM.to_owned());
        let mut out = Checksummed {
            out,
            hasher: xxhash_rust::xxh3::Xxh3::new(),
        };
        // The header's length depends on the offsets it holds, so fix the body's start
        // first with a generous bound, then rebase every section by it.
        let provisional = serde_json::to_vec(&header)?.len() as u64;
        let body_start = align8(16 + provisional + 64 + 20 * section_count(&header));
        rebase(&mut header, body_start);
        let json = serde_json::to_vec(&header)?;
        out.write_all(MAGIC)?;
        out.write_all(&[u8::try_from(header.format).unwrap_or(u8::MAX)])?;
        out.write_all(&(json.len() as u64).to_le_bytes())?;
        out.write_all(&json)?;
        let mut at = 16 + json.len() as u64;
        for (offset, bytes) in std::iter::once((body_start, &[][..])).chain(
            self.parts
                .iter()
                .map(|(offset, part)| (body_start + offset, part.bytes())),
        ) {
            write_zeros(&mut out, offset - at)?;
            out.write_all(bytes)?;
            at = offset + bytes.len() as u64;
        }
        let digest = out.hasher.digest128();
        out.out.write_all(&digest.to_le_bytes())
    }
}

/// A writer that hashes what it passes on.
struct Checksummed<'w, W> {
    out: &'w mut W,
    hasher: xxhash_rust::xxh3::Xxh3,
}

impl<W: Write> Write for Checksummed<'_, W> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let written = self.out.write(bytes)?;
        self.hasher.update(&bytes[..written]);
        Ok(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// Writes the checksum `bytes`' header names again over their end, after a test or a
/// fuzzer changed them: a crafted file, not a damaged one, so what it holds is checked for
/// itself. Whether it did (not for bytes with no readable header naming a checksum).
#[cfg(any(test, feature = "testing"))]
pub(crate) fn reseal(bytes: &mut [u8]) -> bool {
    let named = read_header(bytes).is_ok_and(|header| header.checksum.is_some());
    let Some(at) = bytes.len().checked_sub(CHECKSUM_LEN).filter(|_| named) else {
        return false;
    };
    let digest = xxhash_rust::xxh3::xxh3_128(&bytes[..at]);
    bytes[at..].copy_from_slice(&digest.to_le_bytes());
    true
}

/// The checksum a file ends with, if its header says it has one (see [`read_header`]).
pub(crate) fn stored_checksum(header: &Header, bytes: &[u8]) -> Option<u128> {
    header.checksum.as_ref()?;
    let at = bytes.len().checked_sub(CHECKSUM_LEN)?;
    let mut digest = [0u8; CHECKSUM_LEN];
    digest.copy_from_slice(bytes.get(at..)?);
    Some(u128::from_le_bytes(digest))
}

/// Whether the bytes are those the file's checksum was made of: `Ok(false)` for a file
/// written before checksums, which has none to check.
pub(crate) fn verify(header: &Header, bytes: &[u8]) -> Result<bool, LoadError> {
    let Some(stored) = stored_checksum(header, bytes) else {
        return Ok(false);
    };
    let content = &bytes[..bytes.len() - CHECKSUM_LEN];
    compared(xxhash_rust::xxh3::xxh3_128(content), stored)
}

/// [`verify`] of a file of `len` bytes read a piece at a time by `read_at` (into the
/// buffer, from the offset), so that it never needs to be in memory whole.
#[cfg(feature = "fs")]
pub(crate) fn verify_read(
    header: &Header,
    len: u64,
    mut read_at: impl FnMut(&mut [u8], u64) -> Result<(), LoadError>,
) -> Result<bool, LoadError> {
    const PIECE: usize = 1 << 20;
    if header.checksum.is_none() {
        return Ok(false);
    }
    let content = len
        .checked_sub(CHECKSUM_LEN as u64)
        .ok_or_else(|| LoadError::Corrupt("no room for its checksum".into()))?;
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    let mut piece = vec![0u8; PIECE];
    let mut at = 0;
    while at < content {
        let n = usize::try_from(content - at).map_or(PIECE, |left| left.min(PIECE));
        read_at(&mut piece[..n], at)?;
        hasher.update(&piece[..n]);
        at += n as u64;
    }
    let mut stored = [0u8; CHECKSUM_LEN];
    read_at(&mut stored, content)?;
    compared(hasher.digest128(), u128::from_le_bytes(stored))
}

/// `Ok(true)` when the checksum computed is the one stored.
fn compared(computed: u128, stored: u128) -> Result<bool, LoadError> {
    if computed == stored {
        Ok(true)
    } else {
        Err(LoadError::Corrupt(
            "its checksum does not match its bytes: the file was damaged after it was written"
                .into(),
        ))
    }
}

fn write_zeros(out: &mut impl Write, mut count: u64) -> std::io::Result<()> {
    const ZEROS: [u8; 64] = [0; 64];
    while count > 0 {
        let n = count.min(ZEROS.len() as u64) as usize;
        out.write_all(&ZEROS[..n])?;
        count -= n as u64;
    }
    Ok(())
}

fn section_count(header: &Header) -> u64 {
    5 + 2 * header.variables.len() as u64
}

fn rebase(header: &mut Header, by: u64) {
    let shift = |section: &mut Section| section.offset += by;
    shift(&mut header.weights);
    if let Some(planes) = header.weight_planes.as_mut() {
        shift(&mut planes.section);
    }
    shift(&mut header.id_offsets);
    shift(&mut header.id_bytes);
    if let Some(section) = header.group_codes.as_mut() {
        shift(section);
    }
    for variable in &mut header.variables {
        shift(&mut variable.dict);
        shift(&mut variable.codes);
    }
}

fn align8(n: u64) -> u64 {
    n.div_ceil(8) * 8
}

/// Reads and checks the header of a compiled file.
pub(crate) fn read_header(bytes: &[u8]) -> Result<Header, LoadError> {
    if bytes.len() < 16 || bytes[..7] != MAGIC[..] {
        return Err(LoadError::NotASurvey);
    }
    let version = u32::from(bytes[7]);
    if !READABLE_VERSIONS.contains(&version) {
        return Err(LoadError::UnsupportedVersion(version));
    }
    let mut len = [0u8; 8];
    len.copy_from_slice(&bytes[8..16]);
    let header_len = usize::try_from(u64::from_le_bytes(len))
        .map_err(|_| LoadError::Corrupt("header length".into()))?;
    let json = bytes
        .get(16..16usize.saturating_add(header_len))
        .ok_or_else(|| LoadError::Corrupt("header length past the end of the file".into()))?;
    let header: Header =
        serde_json::from_slice(json).map_err(|e| LoadError::Corrupt(format!("header: {e}")))?;
    if header.format != version {
        return Err(LoadError::Corrupt(format!(
            "header of format {} in a file of version {version}",
            header.format
        )));
    }
    if version < 2 && header.variables.iter().any(|v| v.width == Width::TwoBits) {
        return Err(LoadError::Corrupt(
            "a two-bit column in a version 1 file".into(),
        ));
    }
    if (version < UNWEIGHTED_FORMAT_VERSION) != header.weight_column.is_some() {
        return Err(LoadError::Corrupt(format!(
            "a file of version {version} {} a weight column",
            if header.weight_column.is_some() {
                "with"
            } else {
                "without"
            }
        )));
    }
    // The checksum ends the file: no section may reach into it.
    let sections_end = match header.checksum.as_deref() {
        None => bytes.len(),
        Some(CHECKSUM) => bytes
            .len()
            .checked_sub(CHECKSUM_LEN)
            .filter(|end| *end >= 16 + header_len)
            .ok_or_else(|| LoadError::Corrupt("no room for its checksum".into()))?,
        Some(other) => {
            return Err(LoadError::Corrupt(format!(
                "a checksum of kind '{}', which this build does not know",
                crate::names::shorten(other)
            )))
        }
    };
    // Every writer ends the sections where the last one ends: bytes past it are a file
    // padded or cut, or a checksum whose naming in the header was damaged.
    let last = check_sections(&header, sections_end as u64)?;
    if last != sections_end as u64 {
        return Err(LoadError::Corrupt(format!(
            "{sections_end} bytes where its sections end at {last}"
        )));
    }
    Ok(header)
}

/// Every section lies inside the file, is aligned for its element type and has the
/// length the respondent count implies, so later slicing can't fail. Returns where the
/// last of them ends.
fn check_sections(header: &Header, file_len: u64) -> Result<u64, LoadError> {
    let n = header.respondents;
    let check = |what: &str, section: Section, element: u64, expected_len: Option<u64>| {
        let end = section
            .offset
            .checked_add(section.len)
            .filter(|end| *end <= file_len);
        let aligned = section.offset.is_multiple_of(8) && section.len.is_multiple_of(element);
        let sized =
            expected_len.is_none_or(|count| Some(section.len) == count.checked_mul(element));
        match end {
            Some(end) if aligned && sized => Ok(end),
            _ => Err(LoadError::Corrupt(format!("section {what}"))),
        }
    };
    let mut last = check("weights", header.weights, 8, Some(n))?;
    if let Some(planes) = header.weight_planes {
        let valid =
            planes.decimals <= crate::weights::MAX_DECIMALS && (1..=53).contains(&planes.bits);
        let words = valid
            .then(|| crate::weights::plane_words(n, planes.bits))
            .flatten();
        if words.is_none() {
            return Err(LoadError::Corrupt("weight planes".into()));
        }
        last = last.max(check("weight planes", planes.section, 8, words)?);
    }
    last = last.max(check("id offsets", header.id_offsets, 4, Some(n + 1))?);
    last = last.max(check("id bytes", header.id_bytes, 1, None)?);
    if let Some(section) = header.group_codes {
        last = last.max(check("groups", section, 2, Some(n))?);
    }
    for variable in &header.variables {
        last = last.max(check(&variable.name, variable.dict, 8, None)?);
        let (element, count) = variable.width.layout(n);
        last = last.max(check(&variable.name, variable.codes, element, Some(count))?);
    }
    Ok(last)
}
