//! A table as files: CSV and XLSX with its labels, the chosen figures, the markers and
//! the legend; its chart as SVG (and PNG, drawn from the SVG on a canvas). One line per
//! row and figure, one column per banner column, as survey tools lay tables out.

use crosstab_contract::app::{Table, TableHeader};
use crosstab_contract::CrosstabRequest;
use crosstab_web_worker::{Call, Cell, Reply, Sheet, SheetLine};
use wasm_bindgen::{JsCast, JsValue};

use crate::figures::{self, Figure, Figures};
use crate::grid::{Grid, Key};

/// What a table is of: the lines above it in a file.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Caption {
    /// `DEMO — Demo consumer survey`.
    pub survey: String,
    /// The base, with its label.
    pub base: String,
    /// The group, or all groups.
    pub group: String,
    /// The filter every figure is within, if any.
    pub filter: Option<String>,
    /// Where it was computed (the server, billed; or this page).
    pub source: String,
}

impl Caption {
    fn lines(&self) -> Vec<(&'static str, &str)> {
        let mut lines = vec![
            ("Survey", self.survey.as_str()),
            ("Base", &self.base),
            ("Group", &self.group),
        ];
        if let Some(filter) = &self.filter {
            lines.push(("Filter", filter));
        }
        lines.push(("Computed", &self.source));
        lines
    }

    /// The line above the table on the screen.
    pub fn heading(&self) -> String {
        let mut heading = format!("{} — {} — {}", self.survey, self.base, self.group);
        if let Some(filter) = &self.filter {
            heading.push_str(&format!(" — filtered to {filter}"));
        }
        heading
    }
}

/// The body: a line per row and figure, a value per column; `decimals` are the screen's.
fn body(grid: &Grid, figures: &Figures) -> Vec<SheetLine> {
    let mut out = Vec::new();
    for line in &grid.lines {
        let mut first = true;
        let mut push = |what: String, decimals: u8, percent: bool, values: Vec<Cell>| {
            out.push(SheetLine {
                row: if first {
                    line.head.label.clone()
                } else {
                    String::new()
                },
                what,
                decimals,
                percent,
                values,
            });
            first = false;
        };
        for figure in &figures.shown {
            let name = figure.name(grid.units, grid.tests.confidence);
            let decimals = figure.decimals(grid.units);
            let percent = figure.is_percentage();
            let values = line
                .cells
                .iter()
                .enumerate()
                .map(|(at, c)| figure.values(c, grid.wholes(line, at), grid.tests.confidence));
            let number = |v: Option<f64>| v.map_or(Cell::Empty, Cell::Number);
            if figure.is_interval() {
                let low = values.clone().map(|v| number(v.map(|(low, _)| low)));
                let high = values.map(|v| number(v.and_then(|(_, high)| high)));
                push(format!("{name}, low"), decimals, percent, low.collect());
                push(format!("{name}, high"), decimals, percent, high.collect());
            } else {
                let values = values.map(|v| number(v.map(|(value, _)| value)));
                push(name, decimals, percent, values.collect());
            }
        }
        if figures.stability || figures.significance || figures.letters {
            let marks: Vec<Cell> = line
                .cells
                .iter()
                .map(|c| match figures::marks(c, figures) {
                    m if m.is_empty() => Cell::Empty,
                    m => Cell::Text(m),
                })
                .collect();
            push("Markers".to_owned(), 0, false, marks);
        }
    }
    out
}

/// The head: each column's label, with its pairwise-test letter when letters show.
fn head_row(grid: &Grid, figures: &Figures) -> Vec<String> {
    let mut out = vec!["Row".to_owned(), "Figure".to_owned()];
    out.extend(grid.columns.iter().map(|c| match grid.letter(c, figures) {
        Some(letter) => format!("{} ({letter})", c.label),
        None => c.label.clone(),
    }));
    out
}

/// One CSV cell. Text a spreadsheet would run as a formula (`=`, `+`, `-`, `@`, or a tab
/// or CR before one of them) gets a leading `'`, so an exported label from a survey file
/// can never execute on the researcher's machine.
pub fn csv_field(text: &str) -> String {
    let text = if text.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{text}")
    } else {
        text.to_owned()
    };
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text
    }
}

fn csv_line(fields: impl IntoIterator<Item = String>) -> String {
    csv_fields(fields.into_iter().map(|f| csv_field(&f)))
}

/// Fields already made CSV cells, as one line.
fn csv_fields(cells: impl IntoIterator<Item = String>) -> String {
    let mut line = cells.into_iter().collect::<Vec<_>>().join(",");
    line.push('\n');
    line
}

/// The table as CSV: the caption, the head, a line per row and figure (numbers with
/// every digit), the markers, and the legend.
pub fn to_csv(grid: &Grid, figures: &Figures, caption: &Caption) -> String {
    let mut out = String::new();
    for (name, value) in caption.lines() {
        out.push_str(&csv_line([name.to_owned(), value.to_owned()]));
    }
    out.push('\n');
    out.push_str(&csv_line(head_row(grid, figures)));
    for line in body(grid, figures) {
        // A number is written as a number: a negative one (an interval's lower end may
        // be below 0) is no formula, and defusing it would make it text.
        let values = line.values.into_iter().map(|v| match v {
            Cell::Number(n) => n.to_string(),
            Cell::Text(t) => csv_field(&t),
            Cell::Empty => String::new(),
        });
        let labels = [csv_field(&line.row), csv_field(&line.what)];
        out.push_str(&csv_fields(labels.into_iter().chain(values)));
    }
    out.push('\n');
    for legend in figures::legend(
        figures,
        grid.threshold,
        grid.flipped,
        grid.compared,
        grid.tests,
    ) {
        out.push_str(&csv_line([legend]));
    }
    out
}

/// The start of a name for a table's files that tells one table's from another's: the
/// survey, the base, the rows' and the columns' variables (`DEMO-ADULTS-GENDER-by-REGION`;
/// the download adds when), in characters every file system takes.
pub fn file_stem(table: &Table) -> String {
    let of = |headers: &[TableHeader]| {
        variables(headers.iter().filter_map(|h| first_variable(&h.expression)))
    };
    file_safe(&format!(
        "{}-{}-{}-by-{}",
        table.survey,
        table.population_base,
        of(&table.rows),
        of(&table.columns)
    ))
}

/// The start of a name for a query's file: its survey, base and targets' variables
/// (`DEMO-ADULTS-F2554+GENDER`; the download adds when).
pub fn query_file_name(request: &CrosstabRequest) -> String {
    let targets: Vec<&str> = request
        .target_codes
        .iter()
        .filter_map(|t| first_variable(t))
        .collect();
    file_safe(&format!(
        "{}-{}-{}",
        request.survey_code,
        request.population_base_code,
        variables(targets)
    ))
}

/// Variables as a part of a file name: each once, the first two of more.
fn variables<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    let mut unique: Vec<&str> = Vec::new();
    for name in names {
        if !unique.contains(&name) {
            unique.push(name);
        }
    }
    match unique.len() {
        0 => "table".to_owned(),
        1..=2 => unique.join("+"),
        _ => format!("{}+{}+more", unique[0], unique[1]),
    }
}

/// `text` in characters every file system takes, at most 150 of them.
fn file_safe(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '+') {
                c
            } else {
                '_'
            }
        })
        .take(150)
        .collect()
}

/// The first variable (or code) an expression names, past its `NOT`s and parentheses.
fn first_variable(expression: &str) -> Option<&str> {
    expression
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .find(|word| {
            word.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                && !word.eq_ignore_ascii_case("NOT")
        })
}

/// A sheet as an XLSX workbook, written by the app's worker (it holds the XLSX writer).
pub async fn to_xlsx(sheet: Sheet) -> Result<Vec<u8>, String> {
    match crate::worker::call(&Call::Xlsx(sheet), &JsValue::UNDEFINED).await? {
        (Reply::Xlsx, data) if data.is_instance_of::<js_sys::Uint8Array>() => {
            Ok(js_sys::Uint8Array::from(data).to_vec())
        }
        (other, _) => Err(format!(
            "The in-page engine answered {other:?} to a workbook."
        )),
    }
}

/// The table as the lines of a spreadsheet (the worker writes them as XLSX): the same
/// lines as the CSV, numbers as numbers.
pub fn sheet(grid: &Grid, figures: &Figures, caption: &Caption) -> Sheet {
    Sheet {
        caption: caption
            .lines()
            .iter()
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
            .collect(),
        head: head_row(grid, figures),
        lines: body(grid, figures),
        legend: figures::legend(
            figures,
            grid.threshold,
            grid.flipped,
            grid.compared,
            grid.tests,
        ),
    }
}

/// The figure a chart shows: the first shown of those that compare across rows, else
/// the weighted audience.
pub fn chart_figure(figures: &Figures) -> Figure {
    figures
        .shown
        .iter()
        .copied()
        .find(|f| {
            matches!(
                f,
                Figure::Vertical
                    | Figure::Weighted
                    | Figure::Absolute
                    | Figure::Index
                    | Figure::Respondents
                    | Figure::Horizontal
            )
        })
        .unwrap_or(Figure::Weighted)
}

fn xml_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

/// A horizontal bar chart, as SVG, of `figure` for every row (not the Total) in column
/// `key` (the Total when it is not shown). Unstable cells' bars are hatched.
pub fn chart_svg(grid: &Grid, figure: Figure, key: Key) -> String {
    const WIDTH: f64 = 720.0;
    const LABEL: f64 = 290.0;
    const BAR: f64 = 18.0;
    const GAP: f64 = 8.0;
    let at = grid.columns.iter().position(|c| c.key == key).unwrap_or(0);
    let rows: Vec<(&str, Option<f64>, bool)> = grid
        .lines
        .iter()
        .skip(1)
        .map(|line| {
            let cell = &line.cells[at];
            (
                line.head.label.as_str(),
                figure.value(cell, grid.wholes(line, at), grid.tests.confidence),
                !cell.unstable_reasons.is_empty(),
            )
        })
        .collect();
    let max = rows
        .iter()
        .filter_map(|(_, v, _)| *v)
        .fold(0.0f64, f64::max);
    // The labels without their codes (`Women 25-54`, not `Women 25-54 · F2554`), the codes
    // on hover, unless two rows would then read alike.
    let bare: Vec<&str> = grid
        .lines
        .iter()
        .skip(1)
        .map(|line| {
            line.head
                .label
                .strip_suffix(line.head.expression.as_str())
                .and_then(|label| label.strip_suffix(crate::labels::SEPARATOR))
                .unwrap_or(&line.head.label)
        })
        .collect();
    let alike = bare
        .iter()
        .enumerate()
        .any(|(at, label)| bare[..at].contains(label));
    let labels: Vec<&str> = if alike {
        rows.iter().map(|(label, _, _)| *label).collect()
    } else {
        bare
    };
    let (shared, labels) = chart_labels(&labels);
    let top = if shared.is_some() { 54.0 } else { 36.0 };
    let height = top + rows.len() as f64 * (BAR + GAP) + GAP;
    let title = xml_escape(&format!(
        "{} — {}",
        figure.name(grid.units, grid.tests.confidence),
        grid.columns[at].label
    ));
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" \
         viewBox=\"0 0 {WIDTH} {height}\" role=\"img\" aria-label=\"{title}\" \
         font-family=\"system-ui, sans-serif\" font-size=\"12\">\
         <defs><pattern id=\"hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" \
         patternTransform=\"rotate(45)\"><rect width=\"3\" height=\"6\" fill=\"#e0a800\"/></pattern></defs>\
         <rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\
         <text x=\"8\" y=\"20\" font-size=\"14\" font-weight=\"600\">{title}</text>"
    );
    if let Some(shared) = &shared {
        svg.push_str(&format!(
            "<text x=\"8\" y=\"40\" fill=\"#5b6475\">{}</text>",
            xml_escape(shared)
        ));
    }
    let room = WIDTH - LABEL - 90.0;
    for (index, ((full, value, unstable), label)) in rows.iter().zip(&labels).enumerate() {
        let y = top + index as f64 * (BAR + GAP);
        let width = match value {
            Some(v) if max > 0.0 => (v / max).max(0.0) * room,
            _ => 0.0,
        };
        let shown = value.map_or_else(
            || "–".to_owned(),
            |v| crosstab_wasm::display::format_number(v, figure.decimals(grid.units)),
        );
        let fill = if *unstable { "url(#hatch)" } else { "#2450a6" };
        svg.push_str(&format!(
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\"><title>{}</title>{}</text>\
             <rect x=\"{LABEL}\" y=\"{y}\" width=\"{width:.1}\" height=\"{BAR}\" fill=\"{fill}\"/>\
             <text x=\"{:.1}\" y=\"{}\">{}</text>",
            LABEL - 6.0,
            y + BAR - 5.0,
            xml_escape(full),
            xml_escape(label),
            LABEL + width + 4.0,
            y + BAR - 5.0,
            xml_escape(&shown)
        ));
    }
    svg.push_str("</svg>");
    svg
}

/// Characters of a label the chart's margin holds.
const CHART_LABEL_CHARS: usize = 40;

/// The rows' labels as the chart's margin can hold them: words every label starts with
/// (a question's wording) taken out to stand once above the bars, and a label still too
/// long cut in its middle, so the ends that tell rows apart stay (`Bought in the last…
/// Brand A · Q12_1`).
fn chart_labels(labels: &[&str]) -> (Option<String>, Vec<String>) {
    let shared = match labels {
        [first, _, ..] => {
            let common = labels[1..].iter().fold(first.len(), |common, label| {
                first
                    .char_indices()
                    .zip(label.chars())
                    .find(|((_, a), b)| a != b)
                    .map_or(common.min(label.len()), |((at, _), _)| common.min(at))
            });
            // Back to a separator (`Question: `, `Question - `), else to the end of a word;
            // and only when every label keeps words of its own.
            let part = &first[..common];
            let cut = [": ", " - ", " – ", " — ", " | "]
                .iter()
                .filter_map(|separator| {
                    part.rfind(separator)
                        .map(|at| at + separator.trim_end().len())
                })
                .max()
                .or_else(|| part.rfind(' '))
                .filter(|_| labels.iter().all(|l| l.len() > common))
                .unwrap_or(0);
            let prefix = first[..cut].trim_end();
            (prefix.chars().count() >= 12).then(|| prefix.to_owned())
        }
        _ => None,
    };
    let skip = shared.as_ref().map_or(0, |prefix| prefix.len());
    let labels = labels
        .iter()
        .map(|label| {
            let own = label[skip..].trim_start();
            let chars = own.chars().count();
            if chars <= CHART_LABEL_CHARS {
                own.to_owned()
            } else {
                let head: String = own.chars().take(CHART_LABEL_CHARS / 2 - 1).collect();
                let tail: String = own.chars().skip(chars - CHART_LABEL_CHARS / 2).collect();
                format!("{}…{}", head.trim_end(), tail.trim_start())
            }
        })
        .collect();
    (shared, labels)
}

/// Offers CSV `text` as the file `name`, in UTF-8 with a byte-order mark: without it,
/// Excel reads the file in the machine's legacy code page (`×` as `Ã—`).
pub fn download_csv(name: &str, text: &str) -> Result<(), String> {
    download(
        name,
        "text/csv;charset=utf-8",
        format!("\u{FEFF}{text}").as_bytes(),
    )
}

/// Offers `bytes` as a download named `name`.
pub fn download(name: &str, mime: &str, bytes: &[u8]) -> Result<(), String> {
    let fail = |what: &str, e: JsValue| format!("{what}: {e:?}");
    let array = js_sys::Uint8Array::from(bytes);
    let parts = js_sys::Array::of1(&array);
    let options = web_sys::BlobPropertyBag::new();
    options.set_type(mime);
    let blob = web_sys::Blob::new_with_u8_array_sequence_and_options(&parts, &options)
        .map_err(|e| fail("no blob", e))?;
    let url = web_sys::Url::create_object_url_with_blob(&blob).map_err(|e| fail("no URL", e))?;
    let document = web_sys::window()
        .and_then(|w| w.document())
        .ok_or("no document")?;
    let anchor = document
        .create_element("a")
        .map_err(|e| fail("no link", e))?
        .dyn_into::<web_sys::HtmlAnchorElement>()
        .map_err(|_| "not a link".to_owned())?;
    anchor.set_href(&url);
    anchor.set_download(name);
    anchor.click();
    // The click has started the download; the URL is not needed past this turn.
    let revoke = wasm_bindgen::closure::Closure::once_into_js(move || {
        let _ = web_sys::Url::revoke_object_url(&url);
    });
    if let Some(window) = web_sys::window() {
        let _ = window
            .set_timeout_with_callback_and_timeout_and_arguments_0(revoke.unchecked_ref(), 10_000);
    }
    Ok(())
}

/// Draws `svg` on a canvas and offers it as a PNG download; `failed` hears why when that
/// fails after this returns (the image loads, and is drawn, later).
pub fn download_png(
    name: &str,
    svg: &str,
    failed: impl FnOnce(String) + 'static,
) -> Result<(), String> {
    let document = web_sys::window()
        .and_then(|w| w.document())
        .ok_or("no document")?;
    let image = web_sys::HtmlImageElement::new().map_err(|e| format!("{e:?}"))?;
    let source = format!(
        "data:image/svg+xml;charset=utf-8,{}",
        String::from(js_sys::encode_uri_component(svg))
    );
    let canvas = document
        .create_element("canvas")
        .map_err(|e| format!("{e:?}"))?
        .dyn_into::<web_sys::HtmlCanvasElement>()
        .map_err(|_| "not a canvas".to_owned())?;
    let name = name.to_owned();
    image.set_src(&source);
    // `decode()` settles once, either way: no handler is left behind unused.
    let decoded = wasm_bindgen_futures::JsFuture::from(image.decode());
    leptos::task::spawn_local(async move {
        if decoded.await.is_err() {
            failed("the chart could not be read as an image".to_owned());
            return;
        }
        let drawn = (|| {
            canvas.set_width(image.natural_width());
            canvas.set_height(image.natural_height());
            let context = canvas
                .get_context("2d")
                .ok()
                .flatten()
                .and_then(|c| c.dyn_into::<web_sys::CanvasRenderingContext2d>().ok())
                .ok_or("no 2D canvas here")?;
            context
                .draw_image_with_html_image_element(&image, 0.0, 0.0)
                .map_err(|_| "the chart could not be drawn")?;
            let url = canvas
                .to_data_url_with_type("image/png")
                .map_err(|_| "the canvas gave no PNG")?;
            let anchor = document
                .create_element("a")
                .map_err(|_| "no link")?
                .unchecked_into::<web_sys::HtmlAnchorElement>();
            anchor.set_href(&url);
            anchor.set_download(&name);
            anchor.click();
            Ok::<(), &str>(())
        })();
        if let Err(why) = drawn {
            failed(why.to_owned());
        }
    });
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::grid::tests::table;
    use crate::grid::Arrangement;
    use crosstab_contract::app::UnstableReason;

    fn caption() -> Caption {
        Caption {
            survey: "DEMO — Demo".into(),
            base: "ADULTS — Adults".into(),
            group: "All groups".into(),
            filter: None,
            source: "=server".into(),
        }
    }

    #[test]
    fn csv_has_labels_figures_markers_and_legend() {
        let mut t = table();
        t.cells[0][0].unstable_reasons = vec![UnstableReason::LowRespondents];
        let grid = Grid::of(&t, Arrangement::default());
        let figures = Figures {
            shown: vec![Figure::Weighted, Figure::Vertical],
            stability: true,
            significance: false,
            letters: false,
        };
        let csv = to_csv(&grid, &figures, &caption());
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines[0], "Survey,DEMO — Demo");
        // A caption that looks like a formula is defused.
        assert_eq!(lines[3], "Computed,'=server");
        assert_eq!(
            lines[5],
            "Row,Figure,Total,Region: North · REGION = 1,REGION = 2"
        );
        assert_eq!(lines[6], "Total,\"Weighted audience (×1,000)\",0.4,0.1,0.3");
        assert_eq!(lines[8], ",Markers,,,");
        assert_eq!(
            lines[9],
            "Women 25-54 · F2554,\"Weighted audience (×1,000)\",0.04,0.01,0.03"
        );
        assert_eq!(lines[10], ",Vertical %,4,1,3");
        assert_eq!(lines[11], ",Markers,,*,");
        assert!(lines.contains(&"* Unstable: 60 respondents or fewer; use with caution."));
        // The empty row's figures are zeros.
        assert_eq!(lines[13], ",Vertical %,0,0,0");
        // A filtered table says its filter above it.
        let filtered = Caption {
            filter: Some("AGE >= 35".into()),
            ..caption()
        };
        let csv = to_csv(&grid, &figures, &filtered);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines[3], "Filter,AGE >= 35");
        assert_eq!(lines[4], "Computed,'=server");
    }

    #[test]
    fn the_sheet_has_the_csv_lines_and_the_worker_makes_it_a_zip_workbook() {
        let grid = Grid::of(&table(), Arrangement::default());
        let sheet = sheet(&grid, &Figures::all(), &caption());
        let csv = to_csv(&grid, &Figures::all(), &caption());
        assert_eq!(sheet.caption.len(), 4);
        assert_eq!(sheet.head, head_row(&grid, &Figures::all()));
        assert_eq!(sheet.head[3], "Region: North · REGION = 1 (A)");
        // The CSV has the caption, a blank line, the head, then a line per sheet line.
        assert_eq!(
            csv.lines().count(),
            4 + 1 + 1 + sheet.lines.len() + 1 + sheet.legend.len()
        );
        let weighted = sheet
            .lines
            .iter()
            .find(|l| l.what == Figure::Weighted.name(grid.units, grid.tests.confidence))
            .unwrap();
        assert_eq!(weighted.decimals, Figure::Weighted.decimals(grid.units));
        assert!(!weighted.percent);
        // A share's interval is two lines a table line, low then high, each with the
        // share's decimals.
        let ends = |figure: Figure| {
            let name = figure.name(grid.units, grid.tests.confidence);
            let ends: Vec<_> = sheet
                .lines
                .iter()
                .filter(|l| l.what.starts_with(&name))
                .collect();
            assert_eq!(ends.len(), 2 * grid.lines.len());
            assert_eq!(ends[0].what, format!("{name}, low"));
            assert_eq!(ends[1].what, format!("{name}, high"));
            assert!(ends.iter().all(|l| l.decimals == 1 && l.percent));
            ends
        };
        // The Total line has none (each column's share of itself); a row's Total column
        // cell has its share of the base's.
        let vertical = ends(Figure::VerticalInterval);
        assert_eq!(vertical[0].values[0], Cell::Empty);
        let cell = &grid.lines[1].cells[0];
        let (low, high) = cell
            .vertical_interval(&grid.lines[0].cells[0], grid.tests.confidence)
            .unwrap();
        assert_eq!(vertical[2].values[0], Cell::Number(low));
        assert_eq!(vertical[3].values[0], Cell::Number(high));
        // A row's share: none in the Total column (each row's share of itself); a cell's of
        // its row's total.
        let horizontal = ends(Figure::HorizontalInterval);
        assert!(horizontal.iter().all(|l| l.values[0] == Cell::Empty));
        let line = &grid.lines[1];
        let (low, high) = line.cells[1]
            .horizontal_interval(&line.cells[0], grid.tests.confidence)
            .unwrap();
        assert_eq!(horizontal[2].values[1], Cell::Number(low));
        assert_eq!(horizontal[3].values[1], Cell::Number(high));
        let (reply, payload) = crosstab_web_worker::answer(
            crosstab_web_worker::Call::Xlsx(sheet),
            crosstab_web_worker::Payload::None,
        );
        assert_eq!(reply, Ok(crosstab_web_worker::Reply::Xlsx));
        let crosstab_web_worker::Payload::Bytes(bytes) = payload else {
            panic!("no workbook");
        };
        assert_eq!(&bytes[..2], b"PK");
        assert!(bytes.len() > 1000);
    }

    #[test]
    fn file_names_tell_tables_apart() {
        let mut t = table();
        assert_eq!(file_stem(&t), "DEMO-ADULTS-F2554+GENDER-by-REGION");
        // An expression's first variable, past NOT and parentheses; each once.
        t.rows[0].expression = "NOT (AGE >= 35)".into();
        t.rows[1].expression = "AGE < 35 AND GENDER = 1".into();
        assert_eq!(file_stem(&t), "DEMO-ADULTS-AGE-by-REGION");
        // Many variables are cut short; what a file system refuses becomes `_`.
        let mut third = t.rows[0].clone();
        third.expression = "X3 = 1".into();
        t.rows = ["X1 = 1", "X2 IN (1, 2)"]
            .map(|e| TableHeader {
                expression: e.into(),
                ..third.clone()
            })
            .into_iter()
            .chain([third])
            .collect();
        t.survey = "DE/MO é".into();
        assert_eq!(file_stem(&t), "DE_MO__-ADULTS-X1+X2+more-by-REGION");
        let request = CrosstabRequest {
            survey_code: "DEMO".into(),
            authorization_group: None,
            population_base_code: "ADULTS".into(),
            target_codes: vec!["F2554".into(), "(GENDER = 1)".into()],
        };
        assert_eq!(query_file_name(&request), "DEMO-ADULTS-F2554+GENDER");
    }

    #[test]
    fn letters_alone_still_make_a_markers_line() {
        let mut t = table();
        t.cells[0][1].higher_than = vec![0];
        let grid = Grid::of(&t, Arrangement::default());
        let figures = Figures {
            shown: vec![Figure::Weighted],
            stability: false,
            significance: false,
            letters: true,
        };
        let csv = to_csv(&grid, &figures, &caption());
        assert!(csv.contains(",Markers,,,A\n"), "{csv}");
        assert!(csv.contains("Region: North · REGION = 1 (A)"), "{csv}");
    }

    #[test]
    fn negative_numbers_stay_numbers_in_the_csv() {
        let grid = Grid::of(&table(), Arrangement::default());
        let figures = Figures {
            shown: vec![Figure::Interval],
            stability: false,
            significance: false,
            letters: false,
        };
        let csv = to_csv(&grid, &figures, &caption());
        // An interval's lower end is not clipped at 0: the row of 10 has one of -14.5.
        assert!(
            csv.lines()
                .any(|l| l.ends_with(",\"95% interval, low\",15.5,-14.5,5.5")),
            "{csv}"
        );
        assert!(!csv.contains("'-"), "{csv}");
        // An interval that is undefined (one respondent in the design) is an empty field.
        let mut alone = table();
        alone.cells[0][1].ci_low = None;
        alone.cells[0][1].ci_high = None;
        let csv = to_csv(
            &Grid::of(&alone, Arrangement::default()),
            &figures,
            &caption(),
        );
        assert!(
            csv.lines()
                .any(|l| l.ends_with(",\"95% interval, high\",64.5,34.5,")),
            "{csv}"
        );
        // Text that looks like a formula is still defused.
        assert_eq!(csv_field("-1+2"), "'-1+2");
    }

    #[test]
    fn exports_name_the_tables_confidence_and_correction() {
        let mut t = table();
        t.confidence = crosstab_contract::app::Confidence::NinetyNine;
        t.bonferroni = true;
        t.cells[0][1].higher_than = vec![0];
        let grid = Grid::of(&t, Arrangement::default());
        let figures = Figures {
            shown: vec![Figure::Interval, Figure::VerticalInterval],
            ..Figures::all()
        };
        let csv = to_csv(&grid, &figures, &caption());
        assert!(csv.contains(",\"99% interval, low\","), "{csv}");
        assert!(csv.contains(",\"Vertical % 99% interval, high\","), "{csv}");
        assert!(!csv.contains("95%"), "{csv}");
        assert!(
            csv.contains("Bonferroni corrected: each of the 1 pair of columns"),
            "{csv}"
        );
        assert!(
            csv.contains("Vertical % 99% interval: Wilson's score interval"),
            "{csv}"
        );
        let sheet = sheet(&grid, &figures, &caption());
        assert!(sheet.legend.iter().any(|l| l.contains("one test at 99%")));
    }

    #[test]
    fn chart_escapes_labels_and_scales_bars() {
        let mut t = table();
        t.rows[0].label = "<Women & girls>".into();
        // The title names the column: its label is escaped there too (the aria-label).
        t.columns[1].label = "Age < 30 & \"55\" TV".into();
        let grid = Grid::of(&t, Arrangement::default());
        let svg = chart_svg(&grid, Figure::Absolute, Key::At(1));
        assert!(
            svg.contains("aria-label=\"Audience — Age &lt; 30 &amp; &quot;55&quot; TV"),
            "{svg}"
        );
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.contains("&lt;Women &amp; girls&gt; · F2554"));
        assert!(!svg.contains("<Women"));
        // The largest value fills the room; the other row (0) has no width.
        assert!(svg.contains("width=\"340.0\""), "{svg}");
        assert!(svg.contains("width=\"0.0\""));
        // An expression without a label is its own label.
        assert!(
            svg.contains("<title>GENDER = 3</title>GENDER = 3<"),
            "{svg}"
        );
    }

    #[test]
    fn chart_labels_keep_what_tells_rows_apart() {
        let question = "Which of these brands have you bought in the last 12 months";
        let brands = [
            format!("{question}: Brand A · Q12_1"),
            format!("{question}: Brand B · Q12_2"),
        ];
        let labels: Vec<&str> = brands.iter().map(String::as_str).collect();
        let (shared, shown) = chart_labels(&labels);
        assert_eq!(shared.as_deref(), Some(&format!("{question}:")[..]));
        assert_eq!(shown, ["Brand A · Q12_1", "Brand B · Q12_2"]);
        // A prefix that is no whole word, or a label that is all prefix, stays in place.
        let (shared, shown) = chart_labels(&["Smokers · S1", "Smokeless · S2"]);
        assert_eq!((shared, shown[0].as_str()), (None, "Smokers · S1"));
        let (shared, _) = chart_labels(&["Bought in the last year", "Bought in the last year: A"]);
        assert_eq!(shared, None);
        // A long label alone is cut in its middle: both its ends stay.
        let long = "Household income before taxes, all sources, 2025 · INCOME = 7";
        let (shared, shown) = chart_labels(&[long]);
        assert_eq!(shared, None);
        assert_eq!(shown[0], "Household income be…s, 2025 · INCOME = 7");
        assert!(shown[0].chars().count() <= CHART_LABEL_CHARS);
        // The chart shows the shared words once, and each row's full label on hover.
        let mut t = table();
        t.rows[0].label = format!("{question}: Brand A");
        t.rows[1].label = format!("{question}: Brand B");
        let svg = chart_svg(
            &Grid::of(&t, Arrangement::default()),
            Figure::Absolute,
            Key::At(1),
        );
        assert_eq!(svg.matches(question).count(), 3, "{svg}");
        assert!(
            svg.contains(&format!(
                "<title>{question}: Brand A · F2554</title>Brand A<"
            )),
            "{svg}"
        );
        // Rows whose labels are alike but for their codes keep the codes.
        t.rows[0].label = "Yes".into();
        t.rows[1].label = "Yes".into();
        let svg = chart_svg(
            &Grid::of(&t, Arrangement::default()),
            Figure::Absolute,
            Key::At(1),
        );
        assert!(
            svg.contains("</title>Yes · F2554<") && svg.contains("</title>Yes · GENDER = 3<"),
            "{svg}"
        );
    }
}
