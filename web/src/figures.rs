//! The figures a researcher can show in each cell of a table, how each reads, and the
//! markers (stability and the column test) with their legend.

use crosstab_contract::app::{
    Confidence, Correction, Significance, Table, TableCell, UnstableReason,
};
use crosstab_contract::table::{MIN_TESTED_EFFECTIVE_N, MIN_TESTED_EXPECTED};
use crosstab_wasm::display::format_number;
use serde::{Deserialize, Serialize};

/// One figure of a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Figure {
    /// Weighted audience in the survey's report units (`/v1`'s `WgtAud`).
    Weighted,
    /// Weighted audience, absolute.
    Absolute,
    /// Unweighted respondents.
    Respondents,
    /// Share of the column.
    Vertical,
    /// Share of the row.
    Horizontal,
    /// The column's rate over the base's rate, × 100.
    Index,
    /// Effective sample size.
    EffectiveN,
    /// Standard error of the weighted total (absolute).
    StandardError,
    /// Confidence interval of the weighted total (absolute), at the table's confidence.
    Interval,
    /// Confidence interval of the vertical %, at the table's confidence.
    VerticalInterval,
    /// Confidence interval of the horizontal %, at the table's confidence.
    HorizontalInterval,
    /// Relative standard error.
    Rse,
}

impl Figure {
    /// Every figure, in the order cells show them.
    pub const ALL: [Figure; 12] = [
        Figure::Weighted,
        Figure::Absolute,
        Figure::Respondents,
        Figure::Vertical,
        Figure::Horizontal,
        Figure::Index,
        Figure::EffectiveN,
        Figure::StandardError,
        Figure::Interval,
        Figure::VerticalInterval,
        Figure::HorizontalInterval,
        Figure::Rse,
    ];

    /// Its name on screen and in exports (`units` as in the survey: 1000 = thousands; an
    /// interval's `confidence`).
    pub fn name(self, units: u32, confidence: Confidence) -> String {
        let percent = confidence.percent();
        match self {
            Figure::Weighted if units > 1 => format!(
                "Weighted audience (×{})",
                format_number(f64::from(units), 0)
            ),
            Figure::Weighted => "Weighted audience".to_owned(),
            Figure::Absolute => "Audience".to_owned(),
            Figure::Respondents => "Respondents".to_owned(),
            Figure::Vertical => "Vertical %".to_owned(),
            Figure::Horizontal => "Horizontal %".to_owned(),
            Figure::Index => "Index".to_owned(),
            Figure::EffectiveN => "Effective n".to_owned(),
            Figure::StandardError => "Standard error".to_owned(),
            Figure::Interval => format!("{percent}% interval"),
            Figure::VerticalInterval => format!("Vertical % {percent}% interval"),
            Figure::HorizontalInterval => format!("Horizontal % {percent}% interval"),
            Figure::Rse => "RSE %".to_owned(),
        }
    }

    /// A stable id, for the DOM (`data-figure`) and the checkboxes.
    pub fn id(self) -> &'static str {
        match self {
            Figure::Weighted => "weighted",
            Figure::Absolute => "absolute",
            Figure::Respondents => "respondents",
            Figure::Vertical => "vertical",
            Figure::Horizontal => "horizontal",
            Figure::Index => "index",
            Figure::EffectiveN => "effective-n",
            Figure::StandardError => "se",
            Figure::Interval => "ci",
            Figure::VerticalInterval => "vertical-ci",
            Figure::HorizontalInterval => "horizontal-ci",
            Figure::Rse => "rse",
        }
    }

    /// The figure's value in `cell`, of the totals `wholes`: `None` where it is undefined
    /// (a share of an empty column, say). An interval's value is its lower end (see
    /// [`Figure::values`]).
    pub fn value(
        self,
        cell: &TableCell,
        wholes: Wholes<'_>,
        confidence: Confidence,
    ) -> Option<f64> {
        self.values(cell, wholes, confidence)
            .map(|(value, _)| value)
    }

    /// The figure's value in `cell` (of the totals `wholes`), and for an interval (at
    /// `confidence`) its upper end too.
    pub fn values(
        self,
        cell: &TableCell,
        wholes: Wholes<'_>,
        confidence: Confidence,
    ) -> Option<(f64, Option<f64>)> {
        let one = |v: f64| Some((v, None));
        match self {
            Figure::Weighted => one(cell.wgt_aud),
            Figure::Absolute => one(cell.weight),
            Figure::Respondents => one(cell.resps as f64),
            Figure::Vertical => cell.vertical_pct.and_then(one),
            Figure::Horizontal => cell.horizontal_pct.and_then(one),
            Figure::Index => cell.index.and_then(one),
            Figure::EffectiveN => cell.effective_n.and_then(one),
            Figure::StandardError => cell.standard_error.and_then(one),
            Figure::Interval => cell
                .ci_low
                .zip(cell.ci_high)
                .map(|(low, high)| (low, Some(high))),
            Figure::VerticalInterval => wholes
                .column
                .and_then(|column| cell.vertical_interval(column, confidence))
                .map(|(low, high)| (low, Some(high))),
            Figure::HorizontalInterval => wholes
                .row
                .and_then(|row| cell.horizontal_interval(row, confidence))
                .map(|(low, high)| (low, Some(high))),
            Figure::Rse => cell.relative_standard_error.map(|r| (100.0 * r, None)),
        }
    }

    /// Decimals shown (exports keep every digit).
    pub fn decimals(self, units: u32) -> u8 {
        match self {
            Figure::Weighted if units > 1 => 1,
            figure if figure.is_percentage() => 1,
            _ => 0,
        }
    }

    /// How the figure reads in `cell` (of the totals `wholes`): `"–"` where it is undefined.
    pub fn text(
        self,
        cell: &TableCell,
        wholes: Wholes<'_>,
        units: u32,
        confidence: Confidence,
    ) -> String {
        let decimals = self.decimals(units);
        let unit = self.unit();
        match self.values(cell, wholes, confidence) {
            None => "–".to_owned(),
            Some((low, Some(high))) => format!(
                "{}{unit} – {}{unit}",
                format_number(low, decimals),
                format_number(high, decimals)
            ),
            Some((value, None)) => format!("{}{unit}", format_number(value, decimals)),
        }
    }

    /// What follows each number of the figure on screen: `%` for percentages.
    fn unit(self) -> &'static str {
        if self.is_percentage() {
            "%"
        } else {
            ""
        }
    }

    /// Whether the figure is in percent: a share, a share's interval or the RSE.
    pub fn is_percentage(self) -> bool {
        matches!(
            self,
            Figure::Vertical
                | Figure::Horizontal
                | Figure::VerticalInterval
                | Figure::HorizontalInterval
                | Figure::Rse
        )
    }

    /// Whether the figure is an interval: two numbers, its low and high ends.
    pub fn is_interval(self) -> bool {
        matches!(
            self,
            Figure::Interval | Figure::VerticalInterval | Figure::HorizontalInterval
        )
    }
}

/// The totals a cell's shares are of (as `Grid::wholes` gives them): its column's (on
/// the Total column, the base's) and its row's (on the Total line, the base's); `None`
/// where the cell is that total itself, its share 100% by definition, with no interval.
#[derive(Debug, Clone, Copy)]
pub struct Wholes<'a> {
    /// The column's total.
    pub column: Option<&'a TableCell>,
    /// The row's total.
    pub row: Option<&'a TableCell>,
}

/// The figures chosen for the cells, in [`Figure::ALL`] order, and whether the markers
/// show.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    /// Shown figures.
    pub shown: Vec<Figure>,
    /// Stability markers (with their reasons).
    pub stability: bool,
    /// Column-test arrows.
    pub significance: bool,
    /// The pairwise test's column letters.
    #[serde(default = "on")]
    pub letters: bool,
}

/// Saved before letters were: shown.
fn on() -> bool {
    true
}

impl Default for Figures {
    fn default() -> Self {
        Figures {
            shown: vec![Figure::Weighted, Figure::Vertical, Figure::Index],
            stability: true,
            significance: true,
            letters: true,
        }
    }
}

impl Figures {
    /// Every figure and both markers.
    pub fn all() -> Figures {
        Figures {
            shown: Figure::ALL.to_vec(),
            stability: true,
            significance: true,
            letters: true,
        }
    }

    /// Shows or hides `figure`, keeping the cells' order.
    pub fn toggle(&mut self, figure: Figure, on: bool) {
        self.shown.retain(|f| *f != figure);
        if on {
            self.shown.push(figure);
            self.shown
                .sort_by_key(|f| Figure::ALL.iter().position(|g| g == f));
        }
    }
}

/// The mark of a reason a cell is unstable.
pub fn reason_mark(reason: UnstableReason) -> &'static str {
    match reason {
        UnstableReason::LowRespondents => "*",
        UnstableReason::HighRse => "†",
    }
}

/// Why a cell is unstable, in words (`threshold`: the survey's `unstableMaxResps`).
pub fn reason_text(reason: UnstableReason, threshold: u64) -> String {
    match reason {
        UnstableReason::LowRespondents => format!("{threshold} respondents or fewer"),
        UnstableReason::HighRse => "relative standard error over 30%".to_owned(),
    }
}

/// The column test's arrow.
pub fn significance_mark(significance: Significance) -> &'static str {
    match significance {
        Significance::Higher => "▲",
        Significance::Lower => "▼",
    }
}

/// The column test's verdict in words, at `confidence`.
pub fn significance_text(significance: Significance, confidence: Confidence) -> String {
    let way = match significance {
        Significance::Higher => "higher",
        Significance::Lower => "lower",
    };
    format!(
        "significantly {way} than in the rest of the base ({}%)",
        confidence.percent()
    )
}

/// How a table's tests were run, as its legend and marks say.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Tests {
    /// Of the tests and intervals.
    pub confidence: Confidence,
    /// How the pairwise test was corrected for its comparisons.
    pub correction: Correction,
    /// The pairs of columns it compares (the correction's `m`).
    pub compared_pairs: u32,
}

impl Tests {
    /// `table`'s.
    pub fn of(table: &Table) -> Tests {
        Tests {
            confidence: table.confidence,
            correction: table.correction(),
            compared_pairs: table.compared_pairs,
        }
    }

    /// What a letter's verdict says of its test: `95%`, or `95%, Bonferroni`.
    fn letters_level(&self) -> String {
        let percent = self.confidence.percent();
        match self.correction.name() {
            Some(name) => format!("{percent}%, {name}"),
            None => format!("{percent}%"),
        }
    }
}

/// Column `index`'s letter for the pairwise test: `A` to `Z`, then `AA`, `AB`, … as a
/// spreadsheet's columns.
pub fn column_letter(index: usize) -> String {
    let mut letters = Vec::new();
    let mut rest = index + 1;
    while rest > 0 {
        rest -= 1;
        letters.push(char::from(b'A' + (rest % 26) as u8));
        rest /= 26;
    }
    letters.iter().rev().collect()
}

/// The letters of the columns `cell`'s share is significantly higher than (empty when
/// letters are off, or after a flip, which leaves `higher_than` empty).
pub fn letters(cell: &TableCell, figures: &Figures) -> Vec<String> {
    if !figures.letters {
        return Vec::new();
    }
    cell.higher_than
        .iter()
        .map(|index| column_letter(*index as usize))
        .collect()
}

/// Letters as a cell shows them: `BD`, or with commas once a letter has two characters
/// (`A,AB`: `AAB` could be read either way).
pub fn letters_mark(letters: &[String]) -> String {
    if letters.iter().all(|letter| letter.len() == 1) {
        letters.concat()
    } else {
        letters.join(",")
    }
}

/// The legend lines for what `figures` shows (`threshold`: `unstableMaxResps`; `flipped`:
/// the table is shown flipped, its arrows still those of the table as built; `compared`:
/// the pairwise test compares some of its columns, so letters may show; `tests`: how the
/// tests ran).
pub fn legend(
    figures: &Figures,
    threshold: u64,
    flipped: bool,
    compared: bool,
    tests: Tests,
) -> Vec<String> {
    let percent = tests.confidence.percent();
    let alpha = tests.confidence.alpha();
    let mut lines = Vec::new();
    if figures.stability {
        for reason in [UnstableReason::LowRespondents, UnstableReason::HighRse] {
            lines.push(format!(
                "{} Unstable: {}; use with caution.",
                reason_mark(reason),
                reason_text(reason, threshold)
            ));
        }
    }
    if figures.significance {
        for significance in [Significance::Higher, Significance::Lower] {
            lines.push(format!(
                "{} The row's share of this column is {}.",
                significance_mark(significance),
                significance_text(significance, tests.confidence)
            ));
        }
        lines.push(format!(
            "Two-sided z-test of two proportions (pooled; Kish effective sample sizes; no continuity correction), each column against the rest of the base; tested where each side has an effective sample size of {MIN_TESTED_EFFECTIVE_N} or more and the row holds {MIN_TESTED_EXPECTED} or more of both sides' respondents (effective), and leaves as many out."
        ));
        lines.push(format!(
            "Each arrow is one test at {percent}% with no correction for the table's many tests: where there is no real difference, about 1 test in {} shows an arrow by chance.",
            (1.0 / alpha).round()
        ));
        if flipped {
            lines.push(
                "Flipped: the arrows test the table as built, its rows within its columns."
                    .to_owned(),
            );
        }
    }
    if figures.letters && compared {
        let pairs = tests.compared_pairs;
        lines.push(format!(
            "Letters (such as B): the row's share of this column is significantly higher ({percent}%, the same z-test) than in the column of that letter. Only columns with no respondent in common are compared (the values of one variable, say); {}",
            if flipped {
                "flipped, the table shows none: they compare the columns as built.".to_owned()
            } else {
                let plural = if pairs == 1 { "" } else { "s" };
                let at_most = (alpha * 100.0).round();
                match tests.correction {
                    corrected @ (Correction::Bonferroni | Correction::Holm) if pairs == 0 => format!(
                        "{} corrected, but no two columns compared are large enough to test (an effective sample size of {MIN_TESTED_EFFECTIVE_N} or more each), so no letter shows.",
                        corrected.name().unwrap_or_default()
                    ),
                    Correction::Bonferroni => format!(
                        "Bonferroni corrected: each of the {pairs} pair{plural} of columns compared is tested at {alpha} ÷ {pairs}, so where there is no real difference the chance that a row shows any letter is at most {at_most}%."
                    ),
                    Correction::Holm if pairs == 1 => format!(
                        "Holm corrected: with 1 pair of columns compared there is nothing to correct, and it is tested at {alpha}."
                    ),
                    Correction::Holm if pairs == 2 => format!(
                        "Holm corrected: in each row the smaller p-value of the 2 pairs of columns compared is tested at {alpha} ÷ 2 and, if it is significant, the other at {alpha}, so where there is no real difference the chance that a row shows any letter is at most {at_most}%, with never fewer letters than Bonferroni's."
                    ),
                    Correction::Holm => format!(
                        "Holm corrected: in each row the {pairs} pairs of columns compared are taken from the smallest p-value up, the first tested at {alpha} ÷ {pairs}, the next at {alpha} ÷ {}, and so on, until one is not significant (nor then are the rest), so where there is no real difference the chance that a row shows any letter is at most {at_most}%, with never fewer letters than Bonferroni's.",
                        pairs - 1
                    ),
                    Correction::None => {
                        "each pair is one test, with no correction for the table's many tests."
                            .to_owned()
                    }
                }
            }
        ));
    }
    if figures.shown.contains(&Figure::Index) {
        lines.push("Index: the column's vertical % over the Total column's, × 100.".to_owned());
    }
    if figures.shown.iter().any(|f| {
        matches!(
            f,
            Figure::StandardError
                | Figure::Interval
                | Figure::VerticalInterval
                | Figure::HorizontalInterval
                | Figure::Rse
        )
    }) {
        lines.push(
            "Standard errors treat the survey (or group) as drawn with replacement, weights only, and the base as a part of it.".to_owned(),
        );
    }
    if figures.shown.contains(&Figure::VerticalInterval) {
        lines.push(format!(
            "Vertical % {percent}% interval: Wilson's score interval of the share, at the effective sample size its standard error implies (the error of a ratio, linearized as R's svyratio), at most the column's respondents (the base's in the Total column); a share of 0% or 100% at the column's effective sample size. Within 0–100%, and wider on the side away from the nearer end; none on the Total line, each column's share of itself."
        ));
    }
    if figures.shown.contains(&Figure::HorizontalInterval) {
        lines.push(format!(
            "Horizontal % {percent}% interval: the same for the share of the row, at most the row's respondents (the base's on the Total line); none in the Total column, each row's share of itself."
        ));
    }
    lines
}

/// The markers of `cell` as shown (`figures` says which kinds), e.g. `"*†▲"`.
pub fn marks(cell: &TableCell, figures: &Figures) -> String {
    let mut out = String::new();
    if figures.stability {
        for reason in &cell.unstable_reasons {
            out.push_str(reason_mark(*reason));
        }
    }
    if figures.significance {
        if let Some(significance) = cell.significance {
            out.push_str(significance_mark(significance));
        }
    }
    let letters = letters(cell, figures);
    if !letters.is_empty() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&letters_mark(&letters));
    }
    out
}

/// The markers of `cell` in words, for screen readers and tooltips (`column` names the
/// table's column of an index, for the letters; `tests`: how the tests ran).
pub fn marks_text(
    cell: &TableCell,
    figures: &Figures,
    threshold: u64,
    column: &dyn Fn(usize) -> Option<String>,
    tests: Tests,
) -> String {
    let mut parts = Vec::new();
    if figures.stability {
        for reason in &cell.unstable_reasons {
            parts.push(format!("Unstable: {}", reason_text(*reason, threshold)));
        }
    }
    if figures.significance {
        if let Some(significance) = cell.significance {
            parts.push(format!(
                "Share {}",
                significance_text(significance, tests.confidence)
            ));
        }
    }
    let letters = letters(cell, figures);
    if !letters.is_empty() {
        let named: Vec<String> = letters
            .iter()
            .zip(&cell.higher_than)
            .map(|(letter, index)| match column(*index as usize) {
                Some(label) => format!("column {letter} ({label})"),
                None => format!("column {letter}"),
            })
            .collect();
        parts.push(format!(
            "Share significantly higher than in {} ({})",
            named.join(", "),
            tests.letters_level()
        ));
    }
    parts.join("; ")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub mod tests {
    use super::*;
    use crosstab_contract::Stability;

    /// A cell with the given weight, respondents and shares.
    pub fn cell(weight: f64, resps: u64, vertical: Option<f64>) -> TableCell {
        TableCell {
            weight,
            weight_squared: weight * 2.0,
            resps,
            wgt_aud: weight / 1000.0,
            vertical_pct: vertical,
            horizontal_pct: vertical.map(|v| v / 2.0),
            vertical_pct_se: vertical.map(|_| 1.5),
            horizontal_pct_se: vertical.map(|_| 0.75),
            index: vertical.map(|v| v * 2.0),
            effective_n: Some(weight / 2.0),
            standard_error: Some(12.5),
            ci_low: Some(weight - 24.5),
            ci_high: Some(weight + 24.5),
            relative_standard_error: (weight > 0.0).then(|| 12.5 / weight),
            stability: Stability::Stable,
            unstable_reasons: Vec::new(),
            significance: None,
            higher_than: Vec::new(),
        }
    }

    #[test]
    fn figures_read_as_researchers_write_them() {
        let c = cell(1_234_567.0, 80, Some(12.345));
        // Its column: 1,000 respondents, more than the vertical share's effective size
        // (481); its row 5,000, more than the horizontal share's (1,030).
        let column = cell(10_000_000.0, 1000, Some(100.0));
        let row = cell(20_000_000.0, 5000, Some(100.0));
        let wholes = Wholes {
            column: Some(&column),
            row: Some(&row),
        };
        let shown: Vec<String> = Figure::ALL
            .iter()
            .map(|f| f.text(&c, wholes, 1000, Confidence::NinetyFive))
            .collect();
        assert_eq!(
            shown,
            [
                "1,234.6",
                "1,234,567",
                "80",
                "12.3%",
                "6.2%",
                "25",
                "617,284",
                // Halves round away from zero, as the XLSX export's cells show them.
                "13",
                "1,234,543 – 1,234,592",
                // Wilson's, not the normal 9.4% – 15.3%: wider above the share.
                "9.7% – 15.6%",
                // statsmodels' Wilson of 6.1725% at n* 1,029.6: 4.86% – 7.81%.
                "4.9% – 7.8%",
                "0.0%"
            ]
        );
        let empty = cell(0.0, 0, None);
        assert_eq!(
            Figure::Vertical.text(&empty, wholes, 1000, Confidence::NinetyFive),
            "–"
        );
        assert_eq!(
            Figure::Rse.value(&empty, wholes, Confidence::NinetyFive),
            None
        );
        // One respondent in the design: no error and no interval, rather than exact ones.
        let alone = TableCell {
            standard_error: None,
            ci_low: None,
            ci_high: None,
            relative_standard_error: None,
            ..cell(5.0, 1, Some(100.0))
        };
        assert_eq!(
            Figure::StandardError.text(&alone, wholes, 1, Confidence::NinetyFive),
            "–"
        );
        assert_eq!(
            Figure::Interval.text(&alone, wholes, 1, Confidence::NinetyFive),
            "–"
        );
        let unknown = TableCell {
            vertical_pct_se: None,
            ..cell(5.0, 1, Some(100.0))
        };
        assert_eq!(
            Figure::VerticalInterval.text(&unknown, wholes, 1, Confidence::NinetyFive),
            "–"
        );
        // An empty cell's share is 0 with no spread: its interval is at its column's
        // effective size (here 12.5), as statsmodels' Wilson of 0 in 12.5 has it.
        let empty = TableCell {
            vertical_pct_se: Some(0.0),
            ..cell(0.0, 0, Some(0.0))
        };
        let small = cell(25.0, 20, Some(100.0));
        assert_eq!(
            Figure::VerticalInterval.text(
                &empty,
                Wholes {
                    column: Some(&small),
                    row: Some(&small)
                },
                1,
                Confidence::NinetyFive
            ),
            "0.0% – 23.5%"
        );
        assert_eq!(
            Figure::Weighted.name(1000, Confidence::NinetyFive),
            "Weighted audience (×1,000)"
        );
        assert_eq!(
            Figure::Weighted.name(1, Confidence::NinetyFive),
            "Weighted audience"
        );
    }

    #[test]
    fn markers_say_why() {
        let mut c = cell(100.0, 12, Some(1.0));
        c.unstable_reasons = vec![UnstableReason::LowRespondents, UnstableReason::HighRse];
        c.significance = Some(Significance::Lower);
        let all = Figures::all();
        assert_eq!(marks(&c, &all), "*†▼");
        assert_eq!(
            marks_text(&c, &all, 60, &|_| None, Tests::default()),
            "Unstable: 60 respondents or fewer; Unstable: relative standard error over 30%; \
             Share significantly lower than in the rest of the base (95%)"
        );
        let quiet = Figures {
            stability: false,
            significance: false,
            letters: false,
            ..Figures::all()
        };
        assert_eq!(marks(&c, &quiet), "");
        assert!(legend(&quiet, 60, true, true, Tests::default())
            .iter()
            .all(|l| !l.contains('*')));
        let lines = legend(&all, 60, false, true, Tests::default());
        assert_eq!(lines.len(), 11);
        assert!(lines
            .iter()
            .any(|l| l.starts_with("Vertical % 95% interval: Wilson's score interval")));
        assert!(
            lines
                .iter()
                .any(|l| l
                    .starts_with("Horizontal % 95% interval: the same for the share of the row"))
        );
        // Flipped, the legend says the arrows are the table's as built (exports too).
        let flipped = legend(&all, 60, true, true, Tests::default());
        assert_eq!(flipped.len(), 12);
        assert!(flipped
            .iter()
            .any(|l| l
                .ends_with("flipped, the table shows none: they compare the columns as built.")));
        assert!(flipped
            .iter()
            .any(|l| l.starts_with("Flipped: the arrows test")));
        assert!(!legend(&quiet, 60, true, true, Tests::default())
            .iter()
            .any(|l| l.starts_with("Flipped")));
    }

    #[test]
    fn the_tables_confidence_and_correction_are_said_everywhere() {
        let tests = Tests {
            confidence: Confidence::NinetyNine,
            correction: Correction::Bonferroni,
            compared_pairs: 3,
        };
        assert_eq!(
            Figure::VerticalInterval.name(1, tests.confidence),
            "Vertical % 99% interval"
        );
        assert_eq!(Figure::Interval.name(1, Confidence::Ninety), "90% interval");
        let mut c = cell(100.0, 120, Some(10.0));
        c.vertical_pct_se = Some(2.0);
        c.horizontal_pct_se = Some(1.0);
        let whole = cell(1000.0, 300, Some(100.0));
        let row = cell(2000.0, 1000, Some(100.0));
        let wholes = Wholes {
            column: Some(&whole),
            row: Some(&row),
        };
        // A column's total on the Total line, a row's in the Total column: a share of
        // itself has no interval.
        let itself = Wholes {
            column: None,
            row: None,
        };
        for figure in [Figure::VerticalInterval, Figure::HorizontalInterval] {
            assert_eq!(figure.values(&whole, itself, tests.confidence), None);
            assert!(figure.values(&whole, wholes, tests.confidence).is_some());
        }
        let ends = |figure: Figure| {
            figure
                .values(&c, wholes, tests.confidence)
                .map(|(low, high)| (low, high.unwrap()))
                .unwrap()
        };
        // statsmodels' `proportion_confint(0.1 · 225, 225, alpha=0.01, method="wilson")`,
        // and of 5% at n* 475 for the row.
        let (low, high) = ends(Figure::VerticalInterval);
        assert!((low - 5.940739979224273).abs() < 1e-12, "{low}");
        assert!((high - 16.350761585826863).abs() < 1e-12, "{high}");
        let (low, high) = ends(Figure::HorizontalInterval);
        assert!((low - 2.987841679639766).abs() < 1e-12, "{low}");
        assert!((high - 8.251978562427475).abs() < 1e-12, "{high}");
        c.higher_than = vec![1];
        c.significance = Some(Significance::Lower);
        assert_eq!(
            marks_text(&c, &Figures::all(), 60, &|_| None, tests),
            "Share significantly lower than in the rest of the base (99%); \
             Share significantly higher than in column B (99%, Bonferroni)"
        );
        let lines = legend(&Figures::all(), 60, false, true, tests);
        let has = |start: &str| lines.iter().any(|l| l.contains(start));
        assert!(has("Each arrow is one test at 99% with no correction"));
        assert!(has("about 1 test in 100 shows an arrow"));
        assert!(has(
            "Bonferroni corrected: each of the 3 pairs of columns compared is tested at 0.01 ÷ 3, \
             so where there is no real difference the chance that a row shows any letter is at most 1%."
        ));
        assert!(has(
            "Vertical % 99% interval: Wilson's score interval of the share"
        ));
        // Holm's step-down, said in the marks and the legend.
        let holm = Tests {
            correction: Correction::Holm,
            ..tests
        };
        assert!(marks_text(&c, &Figures::all(), 60, &|_| None, holm)
            .ends_with("Share significantly higher than in column B (99%, Holm)"));
        let lines = legend(&Figures::all(), 60, false, true, holm);
        assert!(lines.iter().any(|l| l.contains(
            "Holm corrected: in each row the 3 pairs of columns compared are taken from the \
             smallest p-value up, the first tested at 0.01 ÷ 3, the next at 0.01 ÷ 2, and so on"
        )));
        assert!(!lines.iter().any(|l| l.contains("Bonferroni corrected")));
        // Few pairs: said as what happens, and none large enough to test said so.
        let said = |correction, compared_pairs| {
            legend(
                &Figures::all(),
                60,
                false,
                true,
                Tests {
                    correction,
                    compared_pairs,
                    ..tests
                },
            )
            .into_iter()
            .find(|l| l.starts_with("Letters"))
            .unwrap()
        };
        assert!(said(Correction::Holm, 2).ends_with(
            "Holm corrected: in each row the smaller p-value of the 2 pairs of columns compared is \
             tested at 0.01 ÷ 2 and, if it is significant, the other at 0.01, so where there is no \
             real difference the chance that a row shows any letter is at most 1%, with never \
             fewer letters than Bonferroni's."
        ));
        assert!(said(Correction::Holm, 1).ends_with(
            "Holm corrected: with 1 pair of columns compared there is nothing to correct, and it \
             is tested at 0.01."
        ));
        for (correction, name) in [
            (Correction::Holm, "Holm"),
            (Correction::Bonferroni, "Bonferroni"),
        ] {
            assert!(said(correction, 0).ends_with(&format!(
                "{name} corrected, but no two columns compared are large enough to test (an \
                 effective sample size of 30 or more each), so no letter shows."
            )));
        }
        let at_90 = legend(
            &Figures::all(),
            60,
            false,
            true,
            Tests {
                confidence: Confidence::Ninety,
                ..Tests::default()
            },
        );
        assert!(at_90.iter().any(|l| l.contains("about 1 test in 10 shows")));
        assert!(at_90
            .iter()
            .any(|l| l.contains("each pair is one test, with no correction")));
    }

    #[test]
    fn columns_are_lettered_as_a_spreadsheet_and_cells_say_theirs() {
        let letters: Vec<String> = [0, 1, 25, 26, 27, 51, 52, 701, 702]
            .into_iter()
            .map(column_letter)
            .collect();
        assert_eq!(
            letters,
            ["A", "B", "Z", "AA", "AB", "AZ", "BA", "ZZ", "AAA"]
        );
        let mut c = cell(100.0, 120, Some(10.0));
        c.higher_than = vec![1, 3];
        c.significance = Some(Significance::Higher);
        let all = Figures::all();
        assert_eq!(marks(&c, &all), "▲ BD");
        assert_eq!(
            marks_text(&c, &all, 60, &|_| None, Tests::default()),
            "Share significantly higher than in the rest of the base (95%); \
             Share significantly higher than in column B, column D (95%)"
        );
        let named = marks_text(
            &c,
            &all,
            60,
            &|i| Some(format!("Region {i}")),
            Tests::default(),
        );
        assert!(
            named.ends_with("than in column B (Region 1), column D (Region 3) (95%)"),
            "{named}"
        );
        c.higher_than = vec![0];
        assert!(
            marks_text(&c, &all, 60, &|_| None, Tests::default()).ends_with("in column A (95%)")
        );
        // Past Z, letters are told apart.
        c.higher_than = vec![0, 26, 27];
        assert_eq!(marks(&c, &all), "▲ A,AA,AB");
        let off = Figures {
            letters: false,
            ..Figures::all()
        };
        assert_eq!(marks(&c, &off), "▲");
        // A table whose columns all overlap has no letters to explain.
        assert_eq!(
            legend(&all, 60, false, false, Tests::default()).len(),
            legend(&off, 60, false, true, Tests::default()).len()
        );
        assert!(!legend(&off, 60, false, true, Tests::default())
            .iter()
            .any(|l| l.starts_with("Letters")));
        // Figures saved before letters were show them.
        let saved: Figures = serde_json::from_value(serde_json::json!({
            "shown": ["weighted"], "stability": true, "significance": false
        }))
        .unwrap();
        assert!(saved.letters);
    }

    #[test]
    fn toggling_keeps_the_cells_order() {
        let mut figures = Figures::default();
        figures.toggle(Figure::Respondents, true);
        figures.toggle(Figure::Vertical, false);
        assert_eq!(
            figures.shown,
            [Figure::Weighted, Figure::Respondents, Figure::Index]
        );
        figures.toggle(Figure::Respondents, true);
        assert_eq!(figures.shown.len(), 3);
    }
}
