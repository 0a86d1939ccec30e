//! The text of SPSS files written in a code page the SPSS reader reads as another.
//!
//! ambers decodes a file's labels and text answers in the encoding its dictionary
//! declares, except DOS's code pages 437 and 850, which it reads as IBM866 and
//! windows-1252, and any name or code page it does not know, which it reads as
//! windows-1252. Both of those give every byte a character of its own, so encoding the
//! text again gives back the file's bytes exactly; decoded with the declared code page's
//! table (`oem_cp`), they read as written.

use std::borrow::Cow;
use std::sync::Arc;

use ambers::{MissingSpec, SpssMetadata, Value};
use arrow::array::{Array, ArrayRef, StringArray, StringViewArray};
use arrow::record_batch::RecordBatch;
use encoding_rs::{Encoding, IBM866, WINDOWS_1252};
use oem_cp::code_table::DECODING_TABLE_CP_MAP;
use oem_cp::code_table_type::TableType;

use super::bytecode::DeclaredText;

/// How the text the reader gives becomes the text the file holds.
#[derive(Debug, Clone)]
pub(crate) enum SpssText {
    /// The reader decodes the declared encoding itself.
    AsRead,
    /// Read as `read_as`, written in the OEM code page whose table is `table`.
    Recoded {
        read_as: &'static Encoding,
        table: TableType,
    },
    /// Declared in an encoding neither the reader nor `oem_cp` knows (as said here): the
    /// reader took it for windows-1252.
    Unknown(String),
}

/// The code pages ambers 0.4.6 decodes as they are declared, and SPSS's own character
/// codes for 7-bit and 8-bit ASCII (2 and 3), which it reads as windows-1252.
fn read_as_declared(code_page: i32) -> bool {
    matches!(
        code_page,
        2 | 3
            | 874
            | 932
            | 936
            | 949
            | 950
            | 1200
            | 1201
            | 1250..=1258
            | 20127
            | 20936
            | 28591..=28599
            | 28603
            | 28605
            | 50220
            | 51932
            | 51949
            | 52936
            | 54936
            | 65001
    )
}

/// The OEM code page an encoding name stands for: `IBM437`, `cp850`, `ibm-852`, `437`.
fn oem_page(name: &str) -> Option<u16> {
    let digits = ["ibm-", "ibm", "cp-", "cp", ""]
        .iter()
        .find_map(|prefix| name.strip_prefix(prefix))?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

impl SpssText {
    /// What the reader makes of the text `declared` describes (its rule: the encoding
    /// record's name first, else the machine record's code page, else windows-1252).
    pub(crate) fn of(declared: &DeclaredText) -> SpssText {
        let recoded = |read_as, page: u16| {
            DECODING_TABLE_CP_MAP
                .get(&page)
                .map(|table| SpssText::Recoded {
                    read_as,
                    table: table.clone(),
                })
        };
        if let Some(name) = &declared.name {
            // Padded with spaces or NULs, as the reader reads it.
            let name = name.trim_matches(|c: char| c == '\0' || c.is_whitespace());
            let label = name.to_ascii_lowercase();
            if Encoding::for_label(label.as_bytes()).is_some() {
                return SpssText::AsRead;
            }
            return oem_page(&label)
                .and_then(|page| recoded(WINDOWS_1252, page))
                .unwrap_or_else(|| SpssText::Unknown(format!("'{name}'")));
        }
        match declared.code_page {
            None => SpssText::AsRead,
            Some(page) if read_as_declared(page) => SpssText::AsRead,
            Some(437) => recoded(IBM866, 437).unwrap_or(SpssText::AsRead),
            Some(page) => u16::try_from(page)
                .ok()
                .and_then(|page| recoded(WINDOWS_1252, page))
                .unwrap_or_else(|| SpssText::Unknown(format!("code page {page}"))),
        }
    }

    /// A warning for an import of a file whose text the reader may have misread.
    pub(crate) fn warning(&self) -> Option<String> {
        match self {
            SpssText::Unknown(declared) => Some(format!(
                "its text is declared as {declared}, which the SPSS reader does not know: \
                 labels and text answers were read as windows-1252, so letters outside ASCII \
                 may be wrong (saving the file in Unicode (UTF-8) avoids it)"
            )),
            SpssText::AsRead | SpssText::Recoded { .. } => None,
        }
    }

    /// `text` as the file wrote it.
    pub(crate) fn recode<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let SpssText::Recoded { read_as, table, .. } = self else {
            return Cow::Borrowed(text);
        };
        if text.is_ascii() {
            return Cow::Borrowed(text);
        }
        let (bytes, _, unmappable) = read_as.encode(text);
        if unmappable {
            // Not text this encoding decoded: left as it is.
            return Cow::Borrowed(text);
        }
        Cow::Owned(table.decode_string_lossy(&bytes))
    }

    fn recode_owned(&self, text: &mut String) {
        if let Cow::Owned(recoded) = self.recode(text) {
            *text = recoded;
        }
    }

    /// The labels, text missing values and set labels of `meta` as the file wrote them
    /// (variable names are left as read: a name must be ASCII to be kept).
    pub(crate) fn metadata(&self, meta: &mut SpssMetadata) {
        if !matches!(self, SpssText::Recoded { .. }) {
            return;
        }
        self.recode_owned(&mut meta.file_label);
        for label in meta.variable_labels.values_mut() {
            self.recode_owned(label);
        }
        for labels in meta.variable_value_labels.values_mut() {
            *labels = std::mem::take(labels)
                .into_iter()
                .map(|(mut value, mut label)| {
                    if let Value::String(text) = &mut value {
                        self.recode_owned(text);
                    }
                    self.recode_owned(&mut label);
                    (value, label)
                })
                .collect();
        }
        for specs in meta.variable_missing_values.values_mut() {
            for spec in specs {
                if let MissingSpec::StringValue(text) = spec {
                    self.recode_owned(text);
                }
            }
        }
        for set in meta.mr_sets.values_mut() {
            self.recode_owned(&mut set.label);
            if let Some(counted) = &mut set.counted_value {
                self.recode_owned(counted);
            }
        }
    }

    /// `batch` with its text columns as the file wrote them.
    pub(crate) fn batch(&self, batch: RecordBatch) -> Result<RecordBatch, String> {
        if !matches!(self, SpssText::Recoded { .. }) {
            return Ok(batch);
        }
        let columns: Vec<ArrayRef> = batch
            .columns()
            .iter()
            .map(|column| self.column(column))
            .collect();
        RecordBatch::try_new(batch.schema(), columns).map_err(|e| e.to_string())
    }

    fn column(&self, column: &ArrayRef) -> ArrayRef {
        let any = column.as_any();
        if let Some(strings) = any.downcast_ref::<StringViewArray>() {
            if strings.iter().flatten().any(|s| !s.is_ascii()) {
                let recoded: StringViewArray =
                    strings.iter().map(|s| s.map(|s| self.recode(s))).collect();
                return Arc::new(recoded);
            }
        } else if let Some(strings) = any.downcast_ref::<StringArray>() {
            if strings.iter().flatten().any(|s| !s.is_ascii()) {
                let recoded: StringArray =
                    strings.iter().map(|s| s.map(|s| self.recode(s))).collect();
                return Arc::new(recoded);
            }
        }
        Arc::clone(column)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn declared(name: Option<&str>, code_page: Option<i32>) -> SpssText {
        SpssText::of(&DeclaredText {
            name: name.map(str::to_owned),
            code_page,
        })
    }

    /// What byte 0x9B reads as: ¢ in code page 437, ø in 850, Ť in 852, Ы in 866.
    fn byte_9b(text: &SpssText) -> Option<char> {
        let SpssText::Recoded { read_as, .. } = text else {
            return None;
        };
        let read = read_as.decode_without_bom_handling(&[0x9B]).0;
        text.recode(&read).chars().next()
    }

    #[test]
    fn the_declared_encoding_picks_the_recoding() {
        // Names the reader knows, and the file's default, are read as they are.
        for name in [
            "UTF-8",
            "windows-1252",
            " utf-8 ",
            "UTF-8\0\0",
            "IBM866",
            "macintosh",
        ] {
            assert!(matches!(declared(Some(name), Some(437)), SpssText::AsRead));
        }
        assert!(matches!(declared(None, None), SpssText::AsRead));
        for page in [65001, 1252, 2, 3, 28605, 874] {
            assert!(matches!(declared(None, Some(page)), SpssText::AsRead));
        }
        // DOS's code pages, by name or by number.
        assert_eq!(byte_9b(&declared(Some("IBM437"), None)), Some('¢'));
        assert_eq!(byte_9b(&declared(Some("cp850"), Some(65001))), Some('ø'));
        assert_eq!(byte_9b(&declared(Some("ibm-852"), None)), Some('Ť'));
        assert_eq!(byte_9b(&declared(None, Some(437))), Some('¢'));
        assert_eq!(byte_9b(&declared(None, Some(850))), Some('ø'));
        assert_eq!(byte_9b(&declared(None, Some(866))), Some('Ы'));
        // Neither the reader's nor a table's: said, not guessed.
        assert!(matches!(
            declared(Some("x-klingon"), None),
            SpssText::Unknown(_)
        ));
        assert!(matches!(declared(None, Some(10000)), SpssText::Unknown(_)));
        assert!(matches!(declared(None, Some(-5)), SpssText::Unknown(_)));
        assert!(declared(None, Some(10000))
            .warning()
            .unwrap()
            .contains("code page 10000"));
        assert!(declared(None, Some(437)).warning().is_none());
    }

    #[test]
    fn text_read_as_another_code_page_reads_as_written() {
        // "Région - 5½" in code page 437 is 52 82 67 69 6F 6E 20 2D 20 35 AB; the reader
        // decodes 437 as IBM866 ("RВgion - 5л") and 850 as windows-1252.
        let bytes = b"R\x82gion - 5\xab";
        let as_866 = IBM866.decode_without_bom_handling(bytes).0;
        assert_eq!(declared(None, Some(437)).recode(&as_866), "Région - 5½");
        let as_1252 = WINDOWS_1252.decode_without_bom_handling(bytes).0;
        assert_eq!(declared(None, Some(850)).recode(&as_1252), "Région - 5½");
        // Every byte comes back: each of the 128 past ASCII, in both readings.
        let high: Vec<u8> = (0x80..=0xFF).collect();
        for (read_as, page) in [(IBM866, 437u16), (WINDOWS_1252, 850)] {
            let read = read_as.decode_without_bom_handling(&high).0;
            let want = DECODING_TABLE_CP_MAP[&page].decode_string_lossy(&high);
            assert_eq!(declared(None, Some(i32::from(page))).recode(&read), want);
        }
        assert!(matches!(
            declared(Some("UTF-8"), None).recode("Région"),
            Cow::Borrowed("Région")
        ));
    }
}
