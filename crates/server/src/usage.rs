//! `crosstab usage`: billed calls per account, key and survey.

use sqlx::Row;

use crate::db::{Database, DbError};

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct UsageRow {
    /// The account.
    pub account: String,
    /// The key.
    pub key_id: String,
    /// The key's environment (`live` or `test`): test traffic reads apart from real.
    pub env: String,
    /// The survey.
    pub survey: String,
    /// Billed calls.
    pub calls: i64,
    /// First billed call, RFC 3339.
    pub first: String,
    /// Last billed call, RFC 3339.
    pub last: String,
}

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

fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_default()
}

/// The report, for one account or all, from `since_ms` on.
pub async fn report(
    db: &Database,
    account: Option<&str>,
    since_ms: i64,
) -> Result<Vec<UsageRow>, DbError> {
    // Bills are grouped first and named after (accounts and keys are looked up once per
    // line, not per bill); a named account is one range of the (account_id, at) index.
    let bills = match account {
        Some(_) => "at >= $1 AND account_id = (SELECT id FROM accounts WHERE name = $2)",
        None => "at >= $1",
    };
    let sql = format!(
        "SELECT a.name, g.key_id, COALESCE(k.env, ''), g.survey, g.calls, g.first_at, g.last_at \
         FROM (SELECT account_id, key_id, survey, COUNT(*) AS calls, \
                      MIN(at) AS first_at, MAX(at) AS last_at \
               FROM ledger WHERE {bills} GROUP BY account_id, key_id, survey) g \
         JOIN accounts a ON a.id = g.account_id \
         LEFT JOIN api_keys k ON k.id = g.key_id \
         ORDER BY a.name, g.key_id, g.survey"
    );
    let mut query = sqlx::query(&sql).bind(since_ms);
    if let Some(account) = account {
        query = query.bind(account);
    }
    let rows = query.fetch_all(db.pool()).await?;
    rows.iter()
        .map(|row| {
            Ok(UsageRow {
                account: row.try_get(0)?,
                key_id: row.try_get(1)?,
                env: row.try_get(2)?,
                survey: row.try_get(3)?,
                calls: row.try_get(4)?,
                first: rfc3339(row.try_get(5)?),
                last: rfc3339(row.try_get(6)?),
            })
        })
        .collect()
}

fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_owned()
    }
}

/// The report as text in `format`.
pub fn render(rows: &[UsageRow], format: Format) -> String {
    const HEADER: [&str; 7] = [
        "account", "key_id", "env", "survey", "calls", "first", "last",
    ];
    let cells = |r: &UsageRow| {
        [
            r.account.clone(),
            r.key_id.clone(),
            r.env.clone(),
            r.survey.clone(),
            r.calls.to_string(),
            r.first.clone(),
            r.last.clone(),
        ]
    };
    match format {
        Format::Json => {
            let mut out = serde_json::to_string_pretty(rows).unwrap_or_default();
            out.push('\n');
            out
        }
        Format::Csv => {
            let mut out = HEADER.join(",");
            out.push('\n');
            for row in rows {
                let line: Vec<String> = cells(row).iter().map(|c| csv_field(c)).collect();
                out.push_str(&line.join(","));
                out.push('\n');
            }
            out
        }
        Format::Table => {
            let body: Vec<[String; 7]> = rows.iter().map(cells).collect();
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
            out
        }
    }
}
