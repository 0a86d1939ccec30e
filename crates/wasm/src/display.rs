//! Result figures for display: absolute audiences, thousands separators and the
//! stability marker.

use serde::Serialize;
use tsify::Tsify;

use crosstab_contract::{CrosstabResult, Stability};

/// Appended to figures of an unstable result (`Stbl` = 1).
pub const UNSTABLE_MARKER: &str = "*";
/// What the marker means.
pub const UNSTABLE_NOTE: &str = "* Unstable: low respondent count; use with caution.";

/// The weighted audience in absolute terms: `WgtAud × AudienceReportUnits`.
pub fn absolute_audience(result: &CrosstabResult, units: u32) -> f64 {
    result.wgt_aud * f64::from(units)
}

/// `value` rounded to `decimals` places (at most 6) with `,` between thousands:
/// `1234567.891, 1` → `"1,234,567.9"`. Non-finite values show as `"–"`.
pub fn format_number(value: f64, decimals: u8) -> String {
    if !value.is_finite() {
        return "–".to_owned();
    }
    let decimals = usize::from(decimals.min(6));
    let text = format!("{:.*}", decimals, value.abs());
    let (whole, fraction) = match text.split_once('.') {
        Some((whole, fraction)) => (whole, Some(fraction)),
        None => (text.as_str(), None),
    };
    let mut out = String::with_capacity(text.len() + text.len() / 3 + 2);
    // "-0" and "-0.0" read as zero: only show the sign when something non-zero remains.
    if value.is_sign_negative() && text.bytes().any(|b| matches!(b, b'1'..=b'9')) {
        out.push('-');
    }
    for (index, digit) in whole.chars().enumerate() {
        if index > 0 && (whole.len() - index) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    if let Some(fraction) = fraction {
        out.push('.');
        out.push_str(fraction);
    }
    out
}

/// One result, ready to show.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Tsify)]
#[serde(rename_all = "camelCase")]
pub struct FormattedResult {
    /// `WgtAud` in the report units, one decimal when units are above 1: `"28,411.4"`.
    pub weighted: String,
    /// The absolute audience, rounded: `"28,411,372"`.
    pub absolute: String,
    /// `Resps`: `"5,321"`.
    pub respondents: String,
    /// Whether `Stbl` is 1.
    pub unstable: bool,
    /// `"*"` when unstable, else `""`.
    pub marker: String,
    /// The absolute audience with its marker: `"28,411,372"` or `"1,200*"`.
    pub display: String,
    /// What the marker means, when it is shown.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[tsify(optional)]
    pub note: Option<String>,
}

/// Formats one result for display.
pub fn format_result(result: &CrosstabResult, units: u32) -> FormattedResult {
    let unstable = result.stbl == Stability::Unstable;
    let marker = if unstable { UNSTABLE_MARKER } else { "" };
    let absolute = format_number(absolute_audience(result, units), 0);
    FormattedResult {
        weighted: format_number(result.wgt_aud, if units > 1 { 1 } else { 0 }),
        display: format!("{absolute}{marker}"),
        absolute,
        respondents: format_number(result.resps as f64, 0),
        unstable,
        marker: marker.to_owned(),
        note: unstable.then(|| UNSTABLE_NOTE.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separates_thousands() {
        assert_eq!(format_number(0.0, 0), "0");
        assert_eq!(format_number(999.0, 0), "999");
        assert_eq!(format_number(1000.0, 0), "1,000");
        assert_eq!(format_number(1_234_567.891, 1), "1,234,567.9");
        assert_eq!(format_number(-1234.5, 2), "-1,234.50");
        assert_eq!(format_number(-0.01, 1), "0.0");
        assert_eq!(format_number(f64::NAN, 0), "–");
        assert_eq!(format_number(999_999.6, 0), "1,000,000");
    }

    #[test]
    fn formats_results_with_marker() {
        let stable = CrosstabResult {
            wgt_aud: 28411.372,
            resps: 5321,
            stbl: Stability::Stable,
        };
        let shown = format_result(&stable, 1000);
        assert_eq!(shown.absolute, "28,411,372");
        assert_eq!(shown.weighted, "28,411.4");
        assert_eq!(shown.respondents, "5,321");
        assert_eq!(shown.display, "28,411,372");
        assert!(shown.note.is_none());
        let unstable = CrosstabResult {
            wgt_aud: 1.2,
            resps: 14,
            stbl: Stability::Unstable,
        };
        let shown = format_result(&unstable, 1000);
        assert_eq!(shown.display, "1,200*");
        assert!(shown.unstable);
        assert_eq!(absolute_audience(&unstable, 1000), 1200.0);
    }
}
