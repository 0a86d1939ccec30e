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
/// `1234567.891, 1` → `"1,234,567.9"`. Non-finite values show as `"–"`. Rounded as a
/// spreadsheet shows the number (the XLSX export's cells hold every digit): halves away
/// from zero, of the value read to 15 significant digits (`2.5` → `3`, `1.005, 2` →
/// `1.01`), so the screen and the workbook agree.
pub fn format_number(value: f64, decimals: u8) -> String {
    if !value.is_finite() {
        return "–".to_owned();
    }
    let decimals = usize::from(decimals.min(6));
    let text = spreadsheet_rounded(value.abs(), decimals);
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

/// A finite `abs` ≥ 0 as plain digits with `decimals` places: its exact value first to
/// 15 significant digits, then to `decimals` places, halves rounded up each time.
fn spreadsheet_rounded(abs: f64, decimals: usize) -> String {
    // `d.dddddddddddddddde±x`: 17 significant digits (enough to tell every f64 apart),
    // and the power of ten of the first.
    let mut scientific = format!("{abs:.16e}");
    // A 16th and 17th digit of `50` may be a value a hair below a 15-digit tie, rounded up
    // onto it: then every digit is read (an f64's exact decimal has at most 767).
    if scientific
        .split_once('e')
        .is_some_and(|(mantissa, _)| mantissa.ends_with("50"))
    {
        scientific = format!("{abs:.766e}");
    }
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i64 = exponent.parse().unwrap_or(0);
    let mut digits: Vec<u8> = mantissa
        .bytes()
        .filter(u8::is_ascii_digit)
        .map(|b| b - b'0')
        .collect();
    // The value is 0.d₁d₂… × 10^(exponent + 1): `whole` digits before the point.
    let mut whole = exponent + 1;
    // Read to 15 significant digits as a spreadsheet does, then to `decimals` places.
    round_half_up(&mut digits, 15, &mut whole);
    let decimals_i = i64::try_from(decimals).unwrap_or(0);
    match usize::try_from(whole + decimals_i) {
        Ok(keep) => round_half_up(&mut digits, keep, &mut whole),
        Err(_) => digits.clear(),
    }
    // Digit at place `i` (0 = the first significant one), zero where there is none.
    let digit = |i: i64| {
        usize::try_from(i)
            .ok()
            .and_then(|i| digits.get(i))
            .map_or('0', |d| char::from(b'0' + d))
    };
    let mut text = String::new();
    if whole <= 0 {
        text.push('0');
    } else {
        text.extend((0..whole).map(digit));
    }
    if decimals > 0 {
        text.push('.');
        text.extend((whole..whole + decimals_i).map(digit));
    }
    text
}

/// `digits` (of a value with `whole` digits before the point) cut to the first `keep`,
/// rounded half up; a carry past the first digit adds a leading 1 (and a whole digit).
fn round_half_up(digits: &mut Vec<u8>, keep: usize, whole: &mut i64) {
    if keep >= digits.len() {
        return;
    }
    let up = digits[keep] >= 5;
    digits.truncate(keep);
    if !up {
        return;
    }
    for place in (0..keep).rev() {
        if digits[place] == 9 {
            digits[place] = 0;
        } else {
            digits[place] += 1;
            return;
        }
    }
    digits.insert(0, 1);
    *whole += 1;
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

    /// A value a hair below a 15-digit tie is read as the digits below it, however close:
    /// its 17 digits (`…50`) would round up onto the tie, and then past it.
    #[test]
    fn a_value_just_below_a_15_digit_tie_rounds_down() {
        let mut close = 0;
        for k in 0..20_000u32 {
            // 123,456,789.kkkkkk5: a tie at the 15th digit, the 6th decimal.
            let tie = format!("123456789{k:06}5");
            let value: f64 = format!("123456789.{k:06}5").parse().unwrap();
            // Exact: the value has at most 9 + 26 significant digits.
            let exact = format!("{value:.40e}");
            let digits: String = exact[..exact.find('e').unwrap()].replace('.', "");
            let below = digits.as_str() < format!("{tie:0<41}").as_str();
            let shown = spreadsheet_rounded(value, 6);
            let expected = if below { k } else { k + 1 };
            assert_eq!(shown, format!("123456789.{expected:06}"), "{exact}");
            let seventeen = format!("{value:.16e}");
            close += usize::from(below && seventeen.starts_with(&format!("{}50", &exact[..16])));
        }
        assert!(close > 0, "no value with 17 digits on the tie and below it");
    }

    #[test]
    fn halves_round_away_from_zero_as_a_spreadsheet_shows_them() {
        for (value, decimals, shown) in [
            (0.25, 1, "0.3"),
            (12.25, 1, "12.3"),
            (2.5, 0, "3"),
            (-2.5, 0, "-3"),
            (0.125, 2, "0.13"),
            // 1.00499999999999989… in binary, 1.00500000000000 to 15 digits.
            (1.005, 2, "1.01"),
            (999.95, 1, "1,000.0"),
            (9.995, 2, "10.00"),
            (0.5, 0, "1"),
            (0.05, 0, "0"),
            (0.0004, 3, "0.000"),
            (0.0005, 3, "0.001"),
            (0.000_000_4, 6, "0.000000"),
            (12.24, 1, "12.2"),
            (1e20, 0, "100,000,000,000,000,000,000"),
            (123_456_789.123_456_7, 2, "123,456,789.12"),
            (7.0, 2, "7.00"),
            // A tie at the 15th significant digit rounds up too, as a spreadsheet's does.
            (100_000_000_000_000.5, 0, "100,000,000,000,001"),
            (0.95, 1, "1.0"),
            (9.999_999_9, 6, "10.000000"),
            (0.0096, 2, "0.01"),
            (0.000_000_5, 6, "0.000001"),
        ] {
            assert_eq!(
                format_number(value, decimals),
                shown,
                "{value} to {decimals}"
            );
        }
        // Every count shows as itself, and no value moves more than half a last place.
        for n in [0u64, 1, 9, 10, 999, 1_000_000, 123_456_789_012] {
            let shown = format_number(n as f64, 0).replace(',', "");
            assert_eq!(shown, n.to_string());
        }
        for step in 0..2000 {
            let value = f64::from(step) * 0.0137 - 7.0;
            for decimals in 0..=3u8 {
                let shown: f64 = format_number(value, decimals)
                    .replace(',', "")
                    .parse()
                    .unwrap();
                let half = 0.5 * 10f64.powi(-i32::from(decimals));
                assert!(
                    (shown - value).abs() <= half + 1e-9,
                    "{value} {decimals} {shown}"
                );
            }
        }
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
