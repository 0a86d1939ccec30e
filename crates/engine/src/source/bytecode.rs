//! Bytecode-compressed `.sav` files, presented to the reader as uncompressed ones.
//!
//! `ambers` reads a bytecode-compressed file's whole data section into memory before
//! decoding it, which alone is about the size of the compiled survey. [`Inflated`]
//! instead shows the reader the same file with its header's compression field set to
//! "none" and decodes the bytecode as the reader asks for cases, so an import holds
//! a few megabytes of the file at a time. Only what the reader needs for that is parsed
//! here: the record layout up to the end of the dictionary (to know where the data
//! starts) and the bytecode itself; anything unexpected leaves the file to the reader's
//! own path.

use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

/// Offset of the header's compression field (after magic, product, layout, case size).
const COMPRESSION_AT: usize = 72;
/// Offset of the header's case count, and the count of a file that leaves it unset.
const CASES_AT: usize = 80;
const UNKNOWN_CASES: i32 = -1;
/// Offset of the header's compression bias (a float, 100 as SPSS writes it).
const BIAS_AT: usize = 84;
const HEADER_LEN: usize = 176;
/// No compression, and bytecode compression, in the header's compression field.
const UNCOMPRESSED: i32 = 0;
const BYTECODE: i32 = 1;

/// What the dictionary walk found.
#[derive(Debug, Clone, Copy)]
struct Layout {
    big_endian: bool,
    /// Offset of the first byte of case data.
    data_at: u64,
    /// 8-byte slots per case.
    slots: u64,
    /// Declared cases, or counted when the header leaves them unset.
    cases: u64,
    /// The header left them unset.
    counted: bool,
    bias: f64,
}

/// One value of a case in the bytecode: a one-byte code, or eight bytes as they are.
enum Slot {
    Code(u8),
    Raw([u8; 8]),
}

/// The bytecode's instructions, read block by block: eight codes to a control block.
struct Instructions {
    control: [u8; 8],
    /// Next instruction in `control` (8 = read the next block).
    next: usize,
    ended: bool,
}

impl Instructions {
    fn new() -> Instructions {
        Instructions {
            control: [0; 8],
            next: 8,
            ended: false,
        }
    }

    /// The next slot `reader` holds; `None` at the end of the data (its end code, or a
    /// block or raw value cut short: the end of what the file holds).
    #[inline]
    fn next_slot(&mut self, reader: &mut impl BufRead) -> io::Result<Option<Slot>> {
        let cut = |error: io::Error| {
            if error.kind() == io::ErrorKind::UnexpectedEof {
                Ok(())
            } else {
                Err(error)
            }
        };
        loop {
            if self.ended {
                return Ok(None);
            }
            if self.next == 8 {
                if reader.fill_buf()?.is_empty() {
                    self.ended = true;
                    continue;
                }
                if let Err(error) = reader.read_exact(&mut self.control) {
                    cut(error)?;
                    self.ended = true;
                    continue;
                }
                self.next = 0;
            }
            let code = self.control[self.next];
            self.next += 1;
            match code {
                0 => continue,
                252 => self.ended = true,
                253 => {
                    let mut raw = [0u8; 8];
                    match reader.read_exact(&mut raw) {
                        Ok(()) => return Ok(Some(Slot::Raw(raw))),
                        Err(error) => {
                            cut(error)?;
                            self.ended = true;
                        }
                    }
                }
                _ => return Ok(Some(Slot::Code(code))),
            }
        }
    }
}

/// The whole cases the bytecode from `reader`'s position holds, each of `slots` values:
/// the slots [`Inflated::next_slot`] would decode, counted without keeping them.
fn count_cases(reader: &mut impl BufRead, slots: u64) -> io::Result<u64> {
    let mut instructions = Instructions::new();
    let mut decoded = 0u64;
    while instructions.next_slot(reader)?.is_some() {
        decoded += 1;
    }
    Ok(decoded / slots)
}

/// The `N` bytes at the start of `bytes`, in little-endian order whatever the file's.
fn le_word<const N: usize>(bytes: &[u8], big_endian: bool) -> [u8; N] {
    let mut word = [0u8; N];
    word.copy_from_slice(&bytes[..N]);
    if big_endian {
        word.reverse();
    }
    word
}

fn i32_at(bytes: &[u8], big_endian: bool) -> i32 {
    i32::from_le_bytes(le_word(bytes, big_endian))
}

fn i64_at(bytes: &[u8], big_endian: bool) -> i64 {
    i64::from_le_bytes(le_word(bytes, big_endian))
}

/// Whether a system file's header is big-endian, told by its layout code (2 or 3);
/// `None` when neither byte order gives one.
fn big_endian(header: &[u8; HEADER_LEN]) -> Option<bool> {
    match (i32_at(&header[64..], false), i32_at(&header[64..], true)) {
        (2 | 3, _) => Some(false),
        (_, 2 | 3) => Some(true),
        _ => None,
    }
}

/// Reads a count or size that must be non-negative.
fn read_count(reader: &mut impl Read, big_endian: bool) -> io::Result<u64> {
    let mut word = [0u8; 4];
    reader.read_exact(&mut word)?;
    u64::try_from(i32_at(&word, big_endian))
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "negative count"))
}

fn skip(reader: &mut BufReader<impl Read + Seek>, bytes: u64) -> io::Result<()> {
    let bytes =
        i64::try_from(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "size"))?;
    reader.seek_relative(bytes)
}

/// How a bytecode-compressed file with a readable dictionary (its data at `data_at`,
/// `slots` slots a case) decodes; `None` for any other file (left to the reader as it
/// is). `reader` stands at the data.
fn layout<R: Read + Seek>(
    reader: &mut BufReader<R>,
    header: &[u8; HEADER_LEN],
    big_endian: bool,
    (data_at, slots): (u64, u64),
    file_len: u64,
) -> io::Result<Option<Layout>> {
    let declared = i32_at(&header[CASES_AT..], big_endian);
    if !header.starts_with(b"$FL2")
        || declared < UNKNOWN_CASES
        || i32_at(&header[COMPRESSION_AT..], big_endian) != BYTECODE
        || data_at > file_len
        || slots == 0
    {
        return Ok(None);
    }
    let bias = f64::from_le_bytes(le_word(&header[BIAS_AT..], big_endian));
    let cases = match u64::try_from(declared) {
        Ok(cases) => cases,
        // Counted here, so the file is still decoded as it is read, never held whole;
        // the reader is shown the count (a header's field holds at most `i32::MAX`).
        Err(_) => match count_cases(reader, slots)? {
            cases if cases <= i32::MAX as u64 => cases,
            _ => return Ok(None),
        },
    };
    Ok(Some(Layout {
        big_endian,
        data_at,
        slots,
        cases,
        counted: declared == UNKNOWN_CASES,
        bias,
    }))
}

/// The character encoding a file's dictionary declares, in either of its two records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct DeclaredText {
    /// The encoding record's name (extension record 20), as written.
    pub name: Option<String>,
    /// The machine record's character code (extension record 3): a code page number.
    pub code_page: Option<i32>,
}

/// What the dictionary walk notes of a system file for its import.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Notes {
    pub big_endian: bool,
    /// The header's compression bias when the data is bytecode-compressed: the reader,
    /// shown such a file decoded, does not see it to say it is not the standard 100.
    pub bytecode_bias: Option<f64>,
    pub text: DeclaredText,
    /// Where each multiple-response set record (extension records 7 and 19) begins.
    pub set_records: Vec<u64>,
    /// Where the dictionary ends: the header and dictionary are the bytes before it.
    pub end: u64,
    /// For an uncompressed file, the bytes of data after its last whole case, if any.
    pub partial_case: Option<u64>,
}

/// What a bytecode file's data turned out to hold after the cases the reader was shown,
/// known once they are read: the reader stops at the count it is given, so it cannot
/// tell.
#[derive(Debug, Clone, Default)]
pub(crate) struct Overrun(Arc<AtomicU8>);

/// How a bytecode file's data goes on past the cases shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Past {
    /// Past the cases its header declares: cases the header does not count.
    MoreCases,
    /// Past its last whole case, the header leaving the count unset: a case cut short.
    CutCase,
}

impl Overrun {
    fn set(&self, past: Past) {
        self.0.store(past as u8 + 1, Ordering::Relaxed);
    }

    /// How the data went on past the cases read, if it did.
    pub fn past(&self) -> Option<Past> {
        match self.0.load(Ordering::Relaxed) {
            1 => Some(Past::MoreCases),
            2 => Some(Past::CutCase),
            _ => None,
        }
    }
}

/// The header's compression field and an extension record's subtype field (4 bytes into
/// the record) as `value`, in the file's byte order: what [`Notes`] makes of a header and
/// dictionary for a second read of them.
pub(crate) fn set_field(bytes: &mut [u8], at: u64, value: i32, big_endian: bool) -> Option<()> {
    let at = usize::try_from(at).ok()?;
    let field = bytes.get_mut(at..at.checked_add(4)?)?;
    field.copy_from_slice(&if big_endian {
        value.to_be_bytes()
    } else {
        value.to_le_bytes()
    });
    Some(())
}

/// The header's compression field.
pub(crate) const COMPRESSION_FIELD: u64 = COMPRESSION_AT as u64;

/// Largest encoding name kept from an encoding record: IANA's longest is 45 bytes.
const MAX_ENCODING_NAME: u64 = 64;

/// Walks the dictionary records that follow the header to the end of the dictionary,
/// noting what [`Notes`] holds on the way: the offset of the first byte of data and the
/// number of 8-byte slots per case; `None` at a record type the walk does not know.
fn dictionary_walk<R: Read + Seek>(
    reader: &mut BufReader<R>,
    big_endian: bool,
    notes: &mut Notes,
) -> io::Result<Option<(u64, u64)>> {
    let mut slots = 0u64;
    loop {
        match read_count(reader, big_endian)? {
            // A variable (or a long string's continuation slot).
            2 => {
                let mut fixed = [0u8; 28];
                reader.read_exact(&mut fixed)?;
                slots += 1;
                let has_label = i32_at(&fixed[4..], big_endian) == 1;
                let missing = u64::from(i32_at(&fixed[8..], big_endian).unsigned_abs());
                if has_label {
                    let len = read_count(reader, big_endian)?;
                    skip(reader, len.div_ceil(4) * 4)?;
                }
                skip(reader, missing * 8)?;
            }
            // Value labels: value, length byte, label padded to 8.
            3 => {
                let count = read_count(reader, big_endian)?;
                for _ in 0..count {
                    let mut entry = [0u8; 9];
                    reader.read_exact(&mut entry)?;
                    skip(reader, (u64::from(entry[8]) + 1).div_ceil(8) * 8 - 1)?;
                }
            }
            // The variables value labels apply to.
            4 => {
                let count = read_count(reader, big_endian)?;
                skip(reader, count.saturating_mul(4))?;
            }
            // Documents: 80-byte lines.
            6 => {
                let lines = read_count(reader, big_endian)?;
                skip(reader, lines.saturating_mul(80))?;
            }
            // Extension records: subtype, element size, element count.
            7 => {
                let subtype = read_count(reader, big_endian)?;
                let size = read_count(reader, big_endian)?;
                let count = read_count(reader, big_endian)?;
                let len = size.saturating_mul(count);
                match (subtype, size, count) {
                    // The machine record: eight integers, the character code last.
                    (3, 4, 8) => {
                        let mut words = [0u8; 32];
                        reader.read_exact(&mut words)?;
                        notes.text.code_page = Some(i32_at(&words[28..], big_endian));
                    }
                    (20, 1, 1..=MAX_ENCODING_NAME) => {
                        let mut name = vec![0u8; count as usize];
                        reader.read_exact(&mut name)?;
                        notes.text.name = Some(String::from_utf8_lossy(&name).into_owned());
                    }
                    _ => {
                        if subtype == 7 || subtype == 19 {
                            // The record began with its four fields, 16 bytes back.
                            let at = reader.stream_position()?.saturating_sub(16);
                            notes.set_records.push(at);
                        }
                        skip(reader, len)?;
                    }
                }
            }
            999 => {
                skip(reader, 4)?;
                return Ok(Some((reader.stream_position()?, slots)));
            }
            _ => return Ok(None),
        }
    }
}

/// Zlib compression (`.zsav`) in the header's compression field.
const ZLIB: i32 = 2;
/// Largest uncompressed `.zsav` block accepted: SPSS writes blocks of about 4 MB, and the
/// reader allocates each block's declared size before decompressing it.
const MAX_ZSAV_BLOCK: i64 = 64 << 20;

fn invalid(message: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

/// A `.zsav`'s dictionary or block table that could not be read to its end.
fn zsav_unread(error: io::Error) -> io::Error {
    match error.kind() {
        io::ErrorKind::UnexpectedEof => {
            invalid("a .zsav cut short in its dictionary or block table")
        }
        _ => error,
    }
}

/// For a `.zsav` whose dictionary ends at `data_at`: the block table (the trailer the
/// zlib header there points to) must describe blocks inside the file, each at most
/// [`MAX_ZSAV_BLOCK`] uncompressed. The reader trusts those sizes for its allocations, so
/// a small damaged file could otherwise make it reserve gigabytes.
fn zsav_block_table<R: Read + Seek>(
    reader: &mut BufReader<R>,
    data_at: u64,
    file_len: u64,
    big_endian: bool,
) -> io::Result<()> {
    let mut zheader = [0u8; 24];
    reader.seek(SeekFrom::Start(data_at))?;
    reader.read_exact(&mut zheader)?;
    let trailer_at = i64_at(&zheader[8..], big_endian);
    let trailer_at = u64::try_from(trailer_at)
        .ok()
        .filter(|&at| at.saturating_add(24) <= file_len)
        .ok_or_else(|| invalid("a .zsav block table outside the file"))?;
    reader.seek(SeekFrom::Start(trailer_at))?;
    let mut head = [0u8; 24];
    reader.read_exact(&mut head)?;
    let blocks = u64::try_from(i32_at(&head[20..], big_endian))
        .ok()
        .filter(|&n| trailer_at + 24 + n.saturating_mul(24) <= file_len)
        .ok_or_else(|| invalid("a .zsav block count the file cannot hold"))?;
    for _ in 0..blocks {
        let mut entry = [0u8; 24];
        reader.read_exact(&mut entry)?;
        let compressed_at = i64_at(&entry[8..], big_endian);
        let uncompressed = i64::from(i32_at(&entry[16..], big_endian));
        let compressed = i64::from(i32_at(&entry[20..], big_endian));
        // `checked_add`: an offset near `i64::MAX` must be refused, not overflow.
        let inside = compressed_at >= 0
            && compressed >= 0
            && compressed_at
                .checked_add(compressed)
                .and_then(|end| u64::try_from(end).ok())
                .is_some_and(|end| end <= file_len);
        if !inside || !(0..=MAX_ZSAV_BLOCK).contains(&uncompressed) {
            return Err(invalid("a .zsav block outside the file or over 64 MiB"));
        }
    }
    Ok(())
}

/// A bytecode-compressed file read as the uncompressed file it encodes (see the module).
pub(crate) struct Inflated<R: Read + Seek> {
    inner: BufReader<R>,
    /// The header and dictionary, compression field set to none.
    head: Vec<u8>,
    layout: Layout,
    /// Length of the uncompressed file: head plus declared cases.
    len: u64,
    pos: u64,
    instructions: Instructions,
    /// Decoded bytes of the current slot not yet returned.
    slot: [u8; 8],
    slot_used: usize,
    /// The 8 bytes each one-byte code stands for (codes 1-251, 254 and 255).
    decoded: Box<[[u8; 8]; 256]>,
    /// Decoding has begun: the data can only be read forward from here.
    started: bool,
    /// Set once the last case shown is out, if the data goes on.
    overrun: Overrun,
    looked_past: bool,
}

impl<R: Read + Seek> std::fmt::Debug for Inflated<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inflated")
            .field("len", &self.len)
            .field("pos", &self.pos)
            .finish_non_exhaustive()
    }
}

impl<R: Read + Seek> Inflated<R> {
    /// The file of `layout` as uncompressed.
    fn new(mut inner: BufReader<R>, layout: Layout) -> io::Result<Inflated<R>> {
        let head_len = usize::try_from(layout.data_at)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "dictionary size"))?;
        let mut head = vec![0u8; head_len];
        inner.seek(SeekFrom::Start(0))?;
        inner.read_exact(&mut head)?;
        let none = if layout.big_endian {
            0i32.to_be_bytes()
        } else {
            0i32.to_le_bytes()
        };
        head[COMPRESSION_AT..COMPRESSION_AT + 4].copy_from_slice(&none);
        let cases = i32::try_from(layout.cases)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "case count"))?;
        let cases = if layout.big_endian {
            cases.to_be_bytes()
        } else {
            cases.to_le_bytes()
        };
        head[CASES_AT..CASES_AT + 4].copy_from_slice(&cases);
        let bytes = |value: f64| {
            if layout.big_endian {
                value.to_be_bytes()
            } else {
                value.to_le_bytes()
            }
        };
        let mut decoded = Box::new([[0u8; 8]; 256]);
        for code in 1..=251u8 {
            decoded[usize::from(code)] = bytes(f64::from(code) - layout.bias);
        }
        decoded[254] = [b' '; 8];
        // System-missing.
        decoded[255] = bytes(-f64::MAX);
        let len = layout
            .data_at
            .saturating_add(layout.cases.saturating_mul(layout.slots).saturating_mul(8));
        Ok(Inflated {
            inner,
            head,
            layout,
            len,
            pos: 0,
            instructions: Instructions::new(),
            slot: [0; 8],
            slot_used: 8,
            decoded,
            started: false,
            overrun: Overrun::default(),
            looked_past: false,
        })
    }

    /// Decodes the next slot into `self.slot`; false at the end of the data.
    #[inline]
    fn next_slot(&mut self) -> io::Result<bool> {
        self.slot = match self.instructions.next_slot(&mut self.inner)? {
            None => return Ok(false),
            Some(Slot::Raw(raw)) => raw,
            Some(Slot::Code(code)) => self.decoded[usize::from(code)],
        };
        self.slot_used = 0;
        Ok(true)
    }
}

impl<R: Read + Seek> Read for Inflated<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pos < self.layout.data_at {
            let at = self.pos as usize;
            let n = buf.len().min(self.head.len() - at);
            buf[..n].copy_from_slice(&self.head[at..at + n]);
            self.pos += n as u64;
            return Ok(n);
        }
        if !self.started {
            if self.pos != self.layout.data_at {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    "read from inside bytecode-compressed data",
                ));
            }
            self.inner.seek(SeekFrom::Start(self.layout.data_at))?;
            self.started = true;
        }
        let mut written = 0;
        while written < buf.len() && self.pos < self.len {
            if self.slot_used == 8 {
                if !self.next_slot()? {
                    break;
                }
                // Whole slots go straight out.
                if buf.len() - written >= 8 && self.len - self.pos >= 8 {
                    buf[written..written + 8].copy_from_slice(&self.slot);
                    written += 8;
                    self.pos += 8;
                    self.slot_used = 8;
                    continue;
                }
            }
            let n = (8 - self.slot_used).min(buf.len() - written);
            buf[written..written + n]
                .copy_from_slice(&self.slot[self.slot_used..self.slot_used + n]);
            self.slot_used += n;
            written += n;
            self.pos += n as u64;
        }
        if self.pos == self.len && !self.looked_past {
            self.looked_past = true;
            if self.instructions.next_slot(&mut self.inner)?.is_some() {
                self.overrun.set(if self.layout.counted {
                    Past::CutCase
                } else {
                    Past::MoreCases
                });
            }
        }
        Ok(written)
    }
}

impl<R: Read + Seek> Seek for Inflated<R> {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let target = match to {
            SeekFrom::Start(at) => Some(at),
            SeekFrom::End(delta) => self.len.checked_add_signed(delta),
            SeekFrom::Current(delta) => self.pos.checked_add_signed(delta),
        }
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "seek out of range"))?;
        // The decoded data can only be read forward; the reader seeks only to learn the
        // length, back to the start, and to its own position, all before it decodes.
        if self.started && target != self.pos {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "seek in bytecode-compressed data",
            ));
        }
        self.pos = target;
        Ok(target)
    }
}

/// An SPSS file as the reader gets it: decoded on the fly when bytecode-compressed,
/// else as it is.
#[derive(Debug)]
pub(crate) enum Input<R: Read + Seek> {
    Inflated(Inflated<R>),
    Plain(BufReader<R>),
}

impl<R: Read + Seek> Input<R> {
    /// The file, decoded as it is read when bytecode-compressed with a dictionary this
    /// walk understands (else as it is), and what its dictionary holds for the import
    /// (`None` when the walk does not reach its end: the reader's to refuse). A `.zsav`
    /// whose block table the reader would trust into a huge allocation is refused here.
    /// The header and dictionary are walked once, for all three.
    pub fn open(reader: R) -> io::Result<(Input<R>, Option<Notes>)> {
        let mut inner = BufReader::with_capacity(1 << 20, reader);
        let file_len = inner.seek(SeekFrom::End(0))?;
        inner.seek(SeekFrom::Start(0))?;
        let mut header = [0u8; HEADER_LEN];
        let big_endian = match inner.read_exact(&mut header) {
            Ok(()) => big_endian(&header).filter(|_| header.starts_with(b"$FL")),
            Err(_) => None,
        };
        let Some(big_endian) = big_endian else {
            return Input::plain(inner, None);
        };
        let compression = i32_at(&header[COMPRESSION_AT..], big_endian);
        let zsav = compression == ZLIB;
        let mut notes = Notes {
            big_endian,
            bytecode_bias: (compression == BYTECODE)
                .then(|| f64::from_le_bytes(le_word(&header[BIAS_AT..], big_endian))),
            ..Notes::default()
        };
        let end = match dictionary_walk(&mut inner, big_endian, &mut notes) {
            Ok(Some(end)) => end,
            Ok(None) if zsav => {
                return Err(invalid("a .zsav dictionary with an unknown record type"))
            }
            Err(error) if zsav => return Err(zsav_unread(error)),
            // Anything unexpected is the reader's to report.
            Ok(None) | Err(_) => return Input::plain(inner, None),
        };
        let (data_at, slots) = end;
        let case_len = slots.saturating_mul(8);
        let notes = Some(Notes {
            end: data_at,
            partial_case: (compression == UNCOMPRESSED && case_len > 0)
                .then(|| file_len.saturating_sub(data_at) % case_len)
                .filter(|&rest| rest > 0),
            ..notes
        });
        if zsav {
            zsav_block_table(&mut inner, data_at, file_len, big_endian).map_err(zsav_unread)?;
            return Input::plain(inner, notes);
        }
        match layout(&mut inner, &header, big_endian, end, file_len) {
            Ok(Some(layout)) => Ok((Input::Inflated(Inflated::new(inner, layout)?), notes)),
            Ok(None) | Err(_) => Input::plain(inner, notes),
        }
    }

    /// How the data went on past the cases the reader was shown, once they are read (a
    /// bytecode file's; a file read as it is is read to its end by the reader itself).
    pub fn overrun(&self) -> Overrun {
        match self {
            Input::Inflated(inflated) => inflated.overrun.clone(),
            Input::Plain(_) => Overrun::default(),
        }
    }

    /// The file as it is, rewound, with `notes`.
    fn plain(
        mut inner: BufReader<R>,
        notes: Option<Notes>,
    ) -> io::Result<(Input<R>, Option<Notes>)> {
        inner.seek(SeekFrom::Start(0))?;
        Ok((Input::Plain(inner), notes))
    }
}

impl<R: Read + Seek> Read for Input<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Input::Inflated(inner) => inner.read(buf),
            Input::Plain(inner) => inner.read(buf),
        }
    }
}

impl<R: Read + Seek> Seek for Input<R> {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        match self {
            Input::Inflated(inner) => inner.seek(to),
            Input::Plain(inner) => inner.seek(to),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn fixture() -> Vec<u8> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/sav/labelled-rows.sav");
        std::fs::read(path).unwrap()
    }

    /// The offset of the first block table entry of a little-endian `.zsav`, and the
    /// number of entries.
    fn zsav_blocks(bytes: &[u8]) -> (usize, usize) {
        let (_, notes) = Input::open(Cursor::new(bytes)).unwrap();
        let data_at = usize::try_from(notes.unwrap().end).unwrap();
        let trailer = usize::try_from(i64_at(&bytes[data_at + 8..], false)).unwrap();
        let blocks = usize::try_from(i32_at(&bytes[trailer + 20..], false)).unwrap();
        (trailer + 24, blocks)
    }

    #[test]
    fn a_zsav_whose_block_table_claims_huge_or_outside_blocks_is_refused() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/sav/labelled.zsav");
        let bytes = std::fs::read(path).unwrap();
        assert!(matches!(
            Input::open(Cursor::new(&bytes)).unwrap().0,
            Input::Plain(_)
        ));
        let (first, blocks) = zsav_blocks(&bytes);
        assert!(blocks >= 1);
        let patched = |at: usize, value: i32| {
            let mut bytes = bytes.clone();
            bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
            bytes
        };
        // A block offset so large that offset + size overflows.
        let mut far = bytes.clone();
        far[first + 8..first + 16].copy_from_slice(&(i64::MAX - 1).to_le_bytes());
        // Uncompressed size over the bound, negative; compressed size past the end.
        for damaged in [
            patched(first + 16, 1 << 30),
            patched(first + 16, -5),
            patched(first + 20, i32::MAX),
            patched(first + 20, -1),
            far,
        ] {
            let refused = Input::open(Cursor::new(&damaged)).unwrap_err();
            assert_eq!(refused.kind(), io::ErrorKind::InvalidData, "{refused}");
        }
    }

    #[test]
    fn decoded_file_reads_as_the_compressed_one() {
        let bytes = fixture();
        let (expected, expected_meta) = ambers::read_sav_from_reader(Cursor::new(&bytes)).unwrap();
        assert_eq!(expected_meta.compression, ambers::Compression::Bytecode);
        let input = Input::open(Cursor::new(&bytes)).unwrap().0;
        assert!(matches!(input, Input::Inflated(_)));
        let (got, meta) = ambers::read_sav_from_reader(input).unwrap();
        assert_eq!(meta.compression, ambers::Compression::None);
        assert_eq!(got, expected);
        assert_eq!(
            meta.variable_value_labels,
            expected_meta.variable_value_labels
        );
    }

    #[test]
    fn a_file_without_its_case_count_is_counted_and_still_decoded_as_read() {
        let bytes = fixture();
        let (expected, _) = ambers::read_sav_from_reader(Cursor::new(&bytes)).unwrap();
        let mut unset = bytes.clone();
        unset[CASES_AT..CASES_AT + 4].copy_from_slice(&UNKNOWN_CASES.to_le_bytes());
        // Whole, and cut short: the whole cases before the cut.
        for len in [unset.len(), unset.len() - 700] {
            let input = Input::open(Cursor::new(&unset[..len])).unwrap().0;
            assert!(matches!(input, Input::Inflated(_)));
            let (got, meta) = ambers::read_sav_from_reader(input).unwrap();
            let rows = got.num_rows();
            assert_eq!(meta.number_rows, Some(rows as i64));
            assert_eq!(got, expected.slice(0, rows));
            assert_eq!(rows == 300, len == unset.len(), "{rows} rows");
        }
    }

    #[test]
    fn a_cut_file_reads_fewer_cases_and_other_files_pass_through() {
        let bytes = fixture();
        let cut = &bytes[..bytes.len() - 700];
        let input = Input::open(Cursor::new(cut)).unwrap().0;
        assert!(matches!(input, Input::Inflated(_)));
        let (got, _) = ambers::read_sav_from_reader(input).unwrap();
        assert!(got.num_rows() < 300, "{}", got.num_rows());

        let plain = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/sav/labelled.zsav");
        let input = Input::open(std::fs::File::open(plain).unwrap()).unwrap().0;
        assert!(matches!(input, Input::Plain(_)));
        let input = Input::open(Cursor::new(b"not an SPSS file".to_vec()))
            .unwrap()
            .0;
        assert!(matches!(input, Input::Plain(_)));
    }
}
