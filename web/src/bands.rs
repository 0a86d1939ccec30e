//! A variable with many unlabelled values (an age, an income) as a few bands of them: a
//! table's rows or columns, where a row per value would be dozens of thin ones.

use crosstab_contract::app::{TableAxis, VariableEntry};
use crosstab_wasm::display::format_number;

/// An unlabelled variable with more distinct values than this is added as bands.
pub const MAX_SINGLE_VALUES: usize = 12;

/// Bands a variable is cut into.
const BANDS: usize = 5;

/// The bands of `variable`: from its listed values, each band as many of them as the
/// others (`AGE BETWEEN 18 AND 33`); past the codebook's list of values, from its range in
/// round steps (`INCOME >= 50000 AND INCOME < 100000`). None when it has no values.
pub fn bands(variable: &VariableEntry) -> Vec<TableAxis> {
    let mut values: Vec<f64> = variable.values.iter().map(|v| v.value).collect();
    values.sort_by(f64::total_cmp);
    values.dedup();
    let title = variable.label.as_deref().unwrap_or(&variable.name);
    let name = &variable.name;
    let axis = |expression: String, label: String| TableAxis {
        expression,
        label: Some(format!("{title}: {label}")),
    };
    if !values.is_empty() {
        let count = values.len();
        let parts = BANDS.min(count);
        return (0..parts)
            .map(|band| {
                let (low, high) = (
                    values[band * count / parts],
                    values[(band + 1) * count / parts - 1],
                );
                if low == high {
                    axis(format!("{name} = {low}"), value_text(low))
                } else {
                    axis(
                        format!("{name} BETWEEN {low} AND {high}"),
                        format!("{}–{}", value_text(low), value_text(high)),
                    )
                }
            })
            .collect();
    }
    let (Some(min), Some(max)) = (variable.min, variable.max) else {
        return Vec::new();
    };
    if max <= min {
        return vec![axis(format!("{name} = {min}"), value_text(min))];
    }
    let Some(Cut {
        step,
        decimals,
        bounds,
    }) = cut(min, max)
    else {
        return Vec::new();
    };
    let last = bounds.len() - 1;
    bounds
        .iter()
        .enumerate()
        .map(|(at, &low)| {
            let high = rounded(low + step, decimals);
            let (low_text, high_text) = (shown(low, decimals), shown(high, decimals));
            if at == last {
                axis(format!("{name} >= {low}"), format!("{low_text} and over"))
            } else if at == 0 {
                axis(format!("{name} < {high}"), format!("under {high_text}"))
            } else {
                axis(
                    format!("{name} >= {low} AND {name} < {high}"),
                    format!("{low_text} to under {high_text}"),
                )
            }
        })
        .collect()
}

/// A range cut in round steps: each band's lower bound.
struct Cut {
    step: f64,
    /// The decimals the step (and so every bound) has.
    decimals: u8,
    /// At most [`BANDS`], the first at or below the minimum, the last below the maximum.
    bounds: Vec<f64>,
}

/// The smallest round step (1, 2, 2.5 or 5 times a power of ten) that cuts `min..=max`
/// into at most [`BANDS`] bands, each bound the step times a whole number.
fn cut(min: f64, max: f64) -> Option<Cut> {
    let raw = (max - min) / BANDS as f64;
    let mut exponent = raw.log10().floor() as i32;
    for _ in 0..4 {
        for multiple in [1.0, 2.0, 2.5, 5.0] {
            // 2.5 has a decimal of its own below 10.
            let places = i32::from(multiple == 2.5) - exponent;
            let decimals = u8::try_from(places.max(0)).ok()?;
            let step = rounded(multiple * 10f64.powi(exponent), decimals);
            if step < raw {
                continue;
            }
            let first = (min / step).floor();
            // Each bound from its index, not by adding steps: no drift (0.1 + 0.2).
            let bounds: Vec<f64> = (0..=BANDS)
                .map(|k| rounded((first + k as f64) * step, decimals))
                .take_while(|bound| *bound < max)
                .collect();
            if bounds.len() <= BANDS {
                return Some(Cut {
                    step,
                    decimals,
                    bounds,
                })
                .filter(|cut| !cut.bounds.is_empty());
            }
        }
        exponent += 1;
    }
    None
}

/// A listed value as a label shows it: grouped thousands, and its decimals (up to 4).
fn value_text(value: f64) -> String {
    let decimals = (0..4u8).find(|d| rounded(value, *d) == value).unwrap_or(4);
    format_number(value, decimals)
}

/// `value` to `decimals` places.
fn rounded(value: f64, decimals: u8) -> f64 {
    let scale = 10f64.powi(i32::from(decimals));
    (value * scale).round() / scale
}

/// A bound as a label shows it: grouped thousands, with `decimals` places.
fn shown(value: f64, decimals: u8) -> String {
    format_number(value, decimals)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crosstab_contract::app::ValueEntry;

    fn variable(values: impl IntoIterator<Item = f64>, min: f64, max: f64) -> VariableEntry {
        let values: Vec<ValueEntry> = values
            .into_iter()
            .map(|value| ValueEntry { value, label: None })
            .collect();
        VariableEntry {
            name: "AGE".into(),
            label: Some("Age".into()),
            distinct: values.len(),
            min: Some(min),
            max: Some(max),
            values,
        }
    }

    fn expressions(axes: &[TableAxis]) -> Vec<&str> {
        axes.iter().map(|a| a.expression.as_str()).collect()
    }

    #[test]
    fn listed_values_make_five_bands_of_as_many_values() {
        let age = bands(&variable((18..=99).map(f64::from), 18.0, 99.0));
        assert_eq!(
            expressions(&age),
            [
                "AGE BETWEEN 18 AND 33",
                "AGE BETWEEN 34 AND 49",
                "AGE BETWEEN 50 AND 66",
                "AGE BETWEEN 67 AND 82",
                "AGE BETWEEN 83 AND 99"
            ]
        );
        assert_eq!(age[0].label.as_deref(), Some("Age: 18–33"));
        // Every value is in exactly one band.
        let covered: usize = age
            .iter()
            .map(|a| {
                let words: Vec<&str> = a.expression.split(' ').collect();
                let (low, high): (u32, u32) =
                    (words[2].parse().unwrap(), words[4].parse().unwrap());
                (high - low + 1) as usize
            })
            .sum();
        assert_eq!(covered, 82);
    }

    #[test]
    fn a_range_without_listed_values_is_cut_in_round_steps() {
        let income = bands(&VariableEntry {
            name: "INCOME".into(),
            label: None,
            ..variable([], 1_200.0, 238_000.0)
        });
        assert_eq!(
            expressions(&income),
            [
                "INCOME < 50000",
                "INCOME >= 50000 AND INCOME < 100000",
                "INCOME >= 100000 AND INCOME < 150000",
                "INCOME >= 150000 AND INCOME < 200000",
                "INCOME >= 200000"
            ]
        );
        assert_eq!(income[0].label.as_deref(), Some("INCOME: under 50,000"));
        assert_eq!(income[4].label.as_deref(), Some("INCOME: 200,000 and over"));
        // A round maximum is in the last band, not one of its own: still five.
        let round = bands(&variable([], 0.0, 250_000.0));
        assert_eq!(round.len(), 5);
        assert_eq!(round[4].expression, "AGE >= 200000");
        // A minimum off the step: the next round step keeps it to five.
        let off = bands(&variable([], 30.0, 130.0));
        assert_eq!(
            expressions(&off),
            [
                "AGE < 50",
                "AGE >= 50 AND AGE < 75",
                "AGE >= 75 AND AGE < 100",
                "AGE >= 100 AND AGE < 125",
                "AGE >= 125"
            ]
        );
        // Fractions: each bound exact (no 0.30000000000000004), labelled with the step's
        // decimals.
        let share = bands(&variable([], 0.0, 0.5));
        assert_eq!(share[3].expression, "AGE >= 0.3 AND AGE < 0.4");
        assert_eq!(share[3].label.as_deref(), Some("Age: 0.3 to under 0.4"));
        let quarters = bands(&variable([], 0.0, 1.2));
        assert_eq!(
            quarters[1].label.as_deref(),
            Some("Age: 0.25 to under 0.50")
        );
        // One value, or none: one entry, or nothing.
        assert_eq!(expressions(&bands(&variable([], 4.0, 4.0))), ["AGE = 4"]);
        assert!(bands(&VariableEntry {
            min: None,
            max: None,
            ..variable([], 0.0, 0.0)
        })
        .is_empty());
    }
}
