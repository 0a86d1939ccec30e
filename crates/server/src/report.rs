//! `crosstab usage`'s output: the ledger's report as an aligned table, JSON or CSV.

use crate::store::usage::UsageRow;

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned columns.
    Table,
    /// A JSON array.
    Json,
    /// CSV with a header row.
    Csv,
}

fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_owned()
    }
}

/// The report as text in `format`.
pub fn render(rows: &[UsageRow], format: Format) -> Result<String, serde_json::Error> {
    const HEADER: [&str; 10] = [
        "account", "key_id", "env", "user", "idp", "subject", "survey", "calls", "first", "last",
    ];
    let cells = |r: &UsageRow| {
        let text = |value: &Option<String>| value.clone().unwrap_or_default();
        [
            r.account.clone(),
            text(&r.key_id),
            text(&r.env),
            text(&r.user),
            text(&r.idp),
            text(&r.subject),
            r.survey.clone(),
            r.calls.to_string(),
            r.first.clone(),
            r.last.clone(),
        ]
    };
    match format {
        Format::Json => {
            let mut out = serde_json::to_string_pretty(rows)?;
            out.push('\n');
            Ok(out)
        }
        Format::Csv => {
            let mut out = HEADER.join(",");
            out.push('\n');
            for row in rows {
                let line: Vec<String> = cells(row).iter().map(|c| csv_field(c)).collect();
                out.push_str(&line.join(","));
                out.push('\n');
            }
            Ok(out)
        }
        Format::Table => {
            let body: Vec<[String; 10]> = rows.iter().map(cells).collect();
            let mut widths = HEADER.map(str::len);
            for line in &body {
                for (width, cell) in widths.iter_mut().zip(line) {
                    *width = (*width).max(cell.chars().count());
                }
            }
            let mut out = String::new();
            let mut push = |line: &[String]| {
                let padded: Vec<String> = line
                    .iter()
                    .zip(widths)
                    .map(|(cell, width)| format!("{cell:<width$}"))
                    .collect();
                out.push_str(padded.join("  ").trim_end());
                out.push('\n');
            };
            push(&HEADER.map(str::to_owned));
            for line in &body {
                push(line);
            }
            let total: i64 = rows.iter().map(|r| r.calls).sum();
            out.push_str(&format!("total billed calls: {total}\n"));
            Ok(out)
        }
    }
}
