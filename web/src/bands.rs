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
                    axis(format!("{name} = {low}"), shown(low))
                } else {
                    axis(
                        format!("{name} BETWEEN {low} AND {high}"),
                        format!("{}–{}", shown(low), shown(high)),
                    )
                }
            })
            .collect();
    }
    let (Some(min), Some(max)) = (variable.min, variable.max) else {
        return Vec::new();
    };
    if max <= min {
        return vec![axis(format!("{name} = {min}"), shown(min))];
    }
    let step = round_step((max - min) / BANDS as f64);
    let first = (min / step).floor() * step;
    let mut bounds = vec![first];
    while bounds.last().is_some_and(|b| *b + step <= max) {
        bounds.push(bounds[bounds.len() - 1] + step);
    }
    let last = bounds.len() - 1;
    bounds
        .iter()
        .enumerate()
        .map(|(at, low)| {
            let high = low + step;
            match at {
                0 if last == 0 => axis(
                    format!("{name} >= {low}"),
                    format!("{} and over", shown(*low)),
                ),
                0 => axis(format!("{name} < {high}"), format!("under {}", shown(high))),
                at if at == last => axis(
                    format!("{name} >= {low}"),
                    format!("{} and over", shown(*low)),
                ),
                _ => axis(
                    format!("{name} >= {low} AND {name} < {high}"),
                    format!("{} to under {}", shown(*low), shown(high)),
                ),
            }
        })
        .collect()
}

/// A round step at least `raw`: 1, 2, 2.5 or 5 times a power of ten.
fn round_step(raw: f64) -> f64 {
    let power = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|step| *step >= raw)
        .unwrap_or(10.0 * power)
}

/// A bound as a label shows it: grouped thousands, decimals only where it has them.
fn shown(value: f64) -> String {
    let decimals = if value.fract() == 0.0 { 0 } else { 2 };
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
        assert_eq!(round_step(0.3), 0.5);
        assert_eq!(round_step(7.0), 10.0);
        assert_eq!(round_step(20.0), 20.0);
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
