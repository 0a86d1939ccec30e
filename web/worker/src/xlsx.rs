//! A sheet as an XLSX workbook.

use rust_xlsxwriter::{Format, Workbook, XlsxError};

use crate::protocol::{Cell, Sheet};

/// The sheet as an XLSX workbook: numbers as numbers (shown with the line's decimals,
/// stored with every digit), the caption and the head in bold, the head frozen.
pub fn workbook(sheet: &Sheet) -> Result<Vec<u8>, XlsxError> {
    let mut workbook = Workbook::new();
    let out = workbook.add_worksheet();
    out.set_name("Table")?;
    let bold = Format::new().set_bold();
    let mut row: u32 = 0;
    for (name, value) in &sheet.caption {
        out.write_string_with_format(row, 0, name, &bold)?;
        out.write_string(row, 1, value)?;
        row += 1;
    }
    row += 1;
    for (col, text) in sheet.head.iter().enumerate() {
        out.write_string_with_format(row, column(col)?, text, &bold)?;
    }
    out.set_freeze_panes(row + 1, 2)?;
    row += 1;
    for line in &sheet.lines {
        let format = Format::new().set_num_format(number_format(line.decimals, line.percent));
        out.write_string_with_format(row, 0, &line.row, &bold)?;
        out.write_string(row, 1, &line.what)?;
        for (index, value) in line.values.iter().enumerate() {
            let col = column(index + 2)?;
            match value {
                Cell::Number(n) => {
                    out.write_number_with_format(row, col, *n, &format)?;
                }
                Cell::Text(t) => {
                    out.write_string(row, col, t)?;
                }
                Cell::Empty => {}
            }
        }
        row += 1;
    }
    row += 1;
    out.write_string_with_format(row, 0, "Legend", &bold)?;
    for legend in &sheet.legend {
        row += 1;
        out.write_string(row, 0, legend)?;
    }
    out.set_column_width(0, 36)?;
    out.set_column_width(1, 24)?;
    workbook.save_to_buffer()
}

/// A line's number format: thousands grouped, its decimals, and a percentage's `%` as
/// a literal (Excel's own `%` would show 12.5 as 1250%).
fn number_format(decimals: u8, percent: bool) -> String {
    let mut format = "#,##0".to_owned();
    if decimals > 0 {
        format.push('.');
        format.push_str(&"0".repeat(usize::from(decimals)));
    }
    if percent {
        format.push_str("\"%\"");
    }
    format
}

fn column(index: usize) -> Result<u16, XlsxError> {
    u16::try_from(index).map_err(|_| XlsxError::ParameterError("too many columns".to_owned()))
}

#[cfg(test)]
mod tests {
    use super::number_format;

    #[test]
    fn percentages_carry_their_sign_unscaled() {
        assert_eq!(number_format(0, false), "#,##0");
        assert_eq!(number_format(1, false), "#,##0.0");
        assert_eq!(number_format(1, true), "#,##0.0\"%\"");
        assert_eq!(number_format(0, true), "#,##0\"%\"");
    }
}
