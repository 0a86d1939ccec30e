//! A table as shown: flipped or not, its rows sorted by a column or as built, empty rows
//! hidden or not, with the Total column and the Total row first. The screen, the CSV,
//! the XLSX and the chart all read this one arrangement.

use crosstab_contract::app::{Table, TableCell, TableHeader};

use crate::figures::{Figures, Tests, Wholes};
use crate::labels::SEPARATOR;
use serde::{Deserialize, Serialize};

/// A row or column of the arrangement: the Total, or entry `n` of the table's axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Key {
    /// The Total row or column.
    Total,
    /// The axis entry at this index (of the table as arranged: after a flip, the
    /// original columns).
    At(usize),
}

impl Key {
    /// `total` or the index, for the DOM's `data-row`/`data-col`.
    pub fn id(self) -> String {
        match self {
            Key::Total => "total".to_owned(),
            Key::At(index) => index.to_string(),
        }
    }
}

/// How to arrange a table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Arrangement {
    /// Rows become columns.
    pub flipped: bool,
    /// Rows in the descending order of their weight in this column (the order of their
    /// vertical % there); `None`: as built.
    pub sort_by: Option<Key>,
    /// Rows with no respondents in the Total column are left out.
    pub hide_empty: bool,
}

/// What a heading naming what the survey lacks (its cells all zero) ends with.
pub const UNKNOWN_MARK: &str = " (not in this survey)";

/// A row or column heading.
#[derive(Debug, Clone, PartialEq)]
pub struct Head {
    /// Which one.
    pub key: Key,
    /// What it is called: `Label · EXPRESSION`, the expression alone, or `Total`.
    pub label: String,
    /// The target expression (empty for the Total).
    pub expression: String,
    /// The survey does not define a name it uses (its cells are zero).
    pub unknown: bool,
    /// A column the pairwise test compares with another (it has a letter).
    pub compared: bool,
}

impl Head {
    fn total() -> Head {
        Head {
            key: Key::Total,
            label: "Total".to_owned(),
            expression: String::new(),
            unknown: false,
            compared: false,
        }
    }

    fn of(index: usize, header: &TableHeader) -> Head {
        let mut label = if header.label.is_empty() || header.label == header.expression {
            header.expression.clone()
        } else {
            format!("{}{SEPARATOR}{}", header.label, header.expression)
        };
        // In words, so the screen, a screen reader and every export say it.
        if header.unknown {
            label.push_str(UNKNOWN_MARK);
        }
        Head {
            key: Key::At(index),
            label,
            expression: header.expression.clone(),
            unknown: header.unknown,
            compared: header.compared,
        }
    }
}

/// One row of the arrangement: its heading and its cells, column by column.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    /// The row's heading.
    pub head: Head,
    /// Its cells, in the order of [`Grid::columns`].
    pub cells: Vec<TableCell>,
}

/// A table as arranged.
#[derive(Debug, Clone, PartialEq)]
pub struct Grid {
    /// The columns: Total first.
    pub columns: Vec<Head>,
    /// The rows: Total first.
    pub lines: Vec<Line>,
    /// The survey's report units.
    pub units: u32,
    /// The survey's `unstableMaxResps`.
    pub threshold: u64,
    /// Whether it was flipped.
    pub flipped: bool,
    /// Whether the pairwise test compares any of the columns as built.
    pub compared: bool,
    /// How the table's tests ran.
    pub tests: Tests,
}

/// `table` with rows and columns swapped: each cell's shares of its row and of its
/// column swap with it; the index, symmetric, stays; the pairwise test's columns, which
/// are now rows, are dropped.
pub fn flip(table: &Table) -> Table {
    let swap = |cell: &TableCell| TableCell {
        vertical_pct: cell.horizontal_pct,
        horizontal_pct: cell.vertical_pct,
        vertical_pct_se: cell.horizontal_pct_se,
        horizontal_pct_se: cell.vertical_pct_se,
        higher_than: Vec::new(),
        ..cell.clone()
    };
    Table {
        rows: table.columns.clone(),
        columns: table.rows.clone(),
        cells: (0..table.columns.len())
            .map(|c| table.cells.iter().map(|row| swap(&row[c])).collect())
            .collect(),
        row_totals: table.column_totals.iter().map(swap).collect(),
        column_totals: table.row_totals.iter().map(swap).collect(),
        total: swap(&table.total),
        ..table.clone()
    }
}

impl Grid {
    /// The totals the shares of `line`'s cell `at` are of: its column's (the Total line's
    /// cell; on the Total column, the base's) and its row's (the line's Total column
    /// cell; on the Total line, the base's). None on the Total line for the column, nor in
    /// the Total column for the row: the cell is then that total itself.
    pub fn wholes<'a>(&'a self, line: &'a Line, at: usize) -> Wholes<'a> {
        let totals = self.lines.first().map_or(&[][..], |line| &line.cells);
        Wholes {
            column: (line.head.key != Key::Total)
                .then(|| totals.get(at))
                .flatten(),
            row: (self.columns.get(at).map(|c| c.key) != Some(Key::Total))
                .then(|| line.cells.first())
                .flatten(),
        }
    }

    /// `column`'s pairwise-test letter, when `figures` shows letters and the test compares
    /// it with another column (never after a flip, nor for the Total).
    pub fn letter(&self, column: &Head, figures: &Figures) -> Option<String> {
        match column.key {
            Key::At(index) if figures.letters && column.compared && !self.flipped => {
                Some(crate::figures::column_letter(index))
            }
            _ => None,
        }
    }

    /// Arranges `table`.
    pub fn of(table: &Table, arrangement: Arrangement) -> Grid {
        let compared = table.columns.iter().any(|c| c.compared);
        let flipped;
        let table = if arrangement.flipped {
            flipped = flip(table);
            &flipped
        } else {
            table
        };
        let mut columns = vec![Head::total()];
        columns.extend(
            table
                .columns
                .iter()
                .enumerate()
                .map(|(i, h)| Head::of(i, h)),
        );
        let total_line = Line {
            head: Head::total(),
            cells: std::iter::once(table.total.clone())
                .chain(table.column_totals.iter().cloned())
                .collect(),
        };
        let mut lines: Vec<Line> = table
            .rows
            .iter()
            .enumerate()
            .map(|(r, header)| Line {
                head: Head::of(r, header),
                cells: std::iter::once(table.row_totals[r].clone())
                    .chain(table.cells[r].iter().cloned())
                    .collect(),
            })
            .filter(|line| !arrangement.hide_empty || line.cells[0].resps > 0)
            .collect();
        // A key no column has any more (the table was built again with fewer) sorts
        // nothing, as the sort menu then shows ("As built").
        let sort_at = arrangement
            .sort_by
            .and_then(|key| columns.iter().position(|c| c.key == key));
        if let Some(at) = sort_at {
            // Stable: equal rows keep their built order.
            lines.sort_by(|a, b| b.cells[at].weight.total_cmp(&a.cells[at].weight));
        }
        lines.insert(0, total_line);
        Grid {
            columns,
            lines,
            units: table.audience_report_units,
            threshold: table.unstable_max_resps,
            flipped: arrangement.flipped,
            compared,
            tests: Tests::of(table),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub mod tests {
    use super::*;
    use crate::figures::tests::cell;

    fn header(expression: &str, label: &str) -> TableHeader {
        TableHeader {
            expression: expression.into(),
            label: label.into(),
            unknown: false,
            compared: true,
        }
    }

    /// Two rows (the second empty) by two columns; weights make every cell distinct.
    pub fn table() -> Table {
        let c = |w: f64, v: f64| cell(w, w as u64, Some(v));
        Table {
            survey: "DEMO".into(),
            population_base: "ADULTS".into(),
            group: None,
            filter: None,
            rows: vec![
                header("F2554", "Women 25-54"),
                header("GENDER = 3", "GENDER = 3"),
            ],
            columns: vec![
                header("REGION = 1", "Region: North"),
                header("REGION = 2", ""),
            ],
            cells: vec![
                vec![c(10.0, 1.0), c(30.0, 3.0)],
                vec![c(0.0, 0.0), c(0.0, 0.0)],
            ],
            row_totals: vec![c(40.0, 4.0), c(0.0, 0.0)],
            column_totals: vec![c(100.0, 10.0), c(300.0, 30.0)],
            total: c(400.0, 100.0),
            audience_report_units: 1000,
            unstable_max_resps: 60,
            billed_calls: 4,
            confidence: Default::default(),
            bonferroni: false,
            holm: false,
            compared_pairs: 1,
        }
    }

    fn labels(grid: &Grid) -> Vec<String> {
        grid.lines.iter().map(|l| l.head.label.clone()).collect()
    }

    #[test]
    fn totals_come_first_and_labels_name_their_code() {
        let grid = Grid::of(&table(), Arrangement::default());
        let columns: Vec<&str> = grid.columns.iter().map(|c| c.label.as_str()).collect();
        assert_eq!(
            columns,
            ["Total", "Region: North · REGION = 1", "REGION = 2"]
        );
        assert_eq!(
            labels(&grid),
            ["Total", "Women 25-54 · F2554", "GENDER = 3"]
        );
        let weights: Vec<f64> = grid.lines[1].cells.iter().map(|c| c.weight).collect();
        assert_eq!(weights, [40.0, 10.0, 30.0]);
        let totals: Vec<f64> = grid.lines[0].cells.iter().map(|c| c.weight).collect();
        assert_eq!(totals, [400.0, 100.0, 300.0]);
    }

    #[test]
    fn a_heading_naming_what_the_survey_lacks_says_so_in_words() {
        let mut unknown = table();
        unknown.rows[1].unknown = true;
        let grid = Grid::of(&unknown, Arrangement::default());
        assert_eq!(labels(&grid)[2], "GENDER = 3 (not in this survey)");
        assert!(grid.lines[2].head.unknown && !grid.lines[1].head.unknown);
    }

    #[test]
    fn flipping_swaps_rows_columns_and_the_shares() {
        let original = table();
        let flipped = flip(&original);
        assert_eq!(flipped.rows, original.columns);
        assert_eq!(flipped.cells[1][0].weight, 30.0);
        assert_eq!(flipped.cells[1][0].vertical_pct, Some(1.5));
        assert_eq!(flipped.cells[1][0].horizontal_pct, Some(3.0));
        // The shares' errors go with the shares.
        assert_eq!(flipped.cells[1][0].vertical_pct_se, Some(0.75));
        assert_eq!(flipped.cells[1][0].horizontal_pct_se, Some(1.5));
        assert_eq!(flipped.cells[1][0].index, original.cells[0][1].index);
        assert_eq!(flip(&flipped), original);
        let grid = Grid::of(
            &original,
            Arrangement {
                flipped: true,
                ..Arrangement::default()
            },
        );
        assert_eq!(labels(&grid)[1], "Region: North · REGION = 1");
        assert_eq!(grid.lines[0].cells[1].weight, 40.0);
    }

    #[test]
    fn sorting_and_hiding_empty_rows() {
        let sorted = |key| {
            let arrangement = Arrangement {
                sort_by: Some(key),
                ..Arrangement::default()
            };
            labels(&Grid::of(&flip(&table()), arrangement))
        };
        // Flipped, the rows are the regions: North 10+0, the other 30+0.
        assert_eq!(
            sorted(Key::Total)[1..],
            ["REGION = 2", "Region: North · REGION = 1"]
        );
        assert_eq!(
            sorted(Key::At(1))[1..],
            ["Region: North · REGION = 1", "REGION = 2"]
        );
        // A column that is gone sorts nothing: the rows stay as built.
        assert_eq!(
            sorted(Key::At(7))[1..],
            ["Region: North · REGION = 1", "REGION = 2"]
        );
        let hidden = Arrangement {
            hide_empty: true,
            ..Arrangement::default()
        };
        assert_eq!(
            labels(&Grid::of(&table(), hidden)),
            ["Total", "Women 25-54 · F2554"]
        );
    }
}
