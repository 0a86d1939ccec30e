//! A computed table on screen: the figures chosen, flip, sort and hide, the cells with
//! their markers (and the reasons, for screen readers too), the legend, a chart, and the
//! exports.

use crosstab_contract::app::{Significance, Table, TableRequest};
use leptos::prelude::*;

use crate::export::{self, Caption};
use crate::figures::{self, Figure, Figures};
use crate::grid::{Arrangement, Grid, Key};

/// A table computed, with what it was asked of.
#[derive(Debug, Clone, PartialEq)]
pub struct Computed {
    /// The answer.
    pub table: Table,
    /// The lines above it in files.
    pub caption: Caption,
    /// Where it was computed, and what it cost.
    pub origin: Origin,
    /// Milliseconds from the click to the answer.
    pub ms: f64,
    /// Counts runs, so a test (or a reader) can tell a new answer from the last.
    pub run: u32,
    /// The request it answers.
    pub asked: TableRequest,
}

/// Where a table was computed, and so what it cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// In this page, from the researcher's file: nothing billed.
    Page,
    /// On the server, billed now.
    Server,
    /// On the server for an earlier run of the same table whose answer was lost on the
    /// way: that answer, given again and not billed again.
    ServerAgain,
    /// On the server at an earlier run (`at`, ISO 8601), kept in this browser: shown
    /// again, not billed again.
    Kept {
        /// When it was computed.
        at: String,
    },
}

#[component]
pub fn TableView(
    computed: Computed,
    figures: RwSignal<Figures>,
    arrangement: RwSignal<Arrangement>,
    /// The builder's request now: when it is no longer the one answered, the table says
    /// it is out of date.
    current: Memo<TableRequest>,
) -> impl IntoView {
    let Computed {
        table,
        caption,
        origin,
        ms,
        run,
        asked,
    } = computed;
    let stale = move || current.with(|now| *now != asked);
    let export_error = RwSignal::new(None::<String>);
    // An XLSX on its way: the first one also waits for the worker that writes it to load.
    // Meanwhile the button is aria-disabled, not disabled, so it keeps the keyboard's focus.
    let preparing_xlsx = RwSignal::new(false);
    let grid = {
        let table = table.clone();
        Memo::new(move |_| Grid::of(&table, arrangement.get()))
    };
    let units = table.audience_report_units;
    let threshold = table.unstable_max_resps;
    let tests = figures::Tests::of(&table);
    let calls = format!(
        "{} billed call{}",
        table.billed_calls,
        if table.billed_calls == 1 { "" } else { "s" }
    );
    let kept = matches!(origin, Origin::Kept { .. });
    let cost = match &origin {
        Origin::Page => {
            "Computed in this page from your file: nothing uploaded, nothing billed.".to_owned()
        }
        Origin::Server => format!("Computed on the server: {calls}."),
        Origin::ServerAgain => format!(
            "Computed on the server for your earlier run of this table, whose answer was lost on the way ({calls} then): given again, not billed again."
        ),
        Origin::Kept { at } => format!(
            "Computed on the server at your run of {} ({calls} then) and kept in this browser: shown again, not billed again. Run the table to compute it anew.",
            crate::dom::local_time(at)
        ),
    };
    let sort_options = move || {
        let grid = grid.get();
        grid.columns
            .iter()
            .map(|c| (c.key, c.label.clone()))
            .collect::<Vec<_>>()
    };
    let chart_key = move || arrangement.get().sort_by.unwrap_or(Key::Total);
    let chart = move || {
        let figure = export::chart_figure(&figures.get());
        export::chart_svg(&grid.get(), figure, chart_key())
    };
    let stem = export::file_stem(&table);
    let heading = caption.heading();
    let files = StoredValue::new((stem, caption));
    let download = move |extension: &'static str| {
        let grid = grid.get_untracked();
        let chosen = figures.get_untracked();
        let result = files.with_value(|(stem, caption)| {
            let name = format!("{stem}-{}.{extension}", crate::dom::file_stamp());
            match extension {
                "csv" => export::download_csv(&name, &export::to_csv(&grid, &chosen, caption)),
                "xlsx" => {
                    if preparing_xlsx.get_untracked() {
                        return Ok(());
                    }
                    preparing_xlsx.set(true);
                    let sheet = export::sheet(&grid, &chosen, caption);
                    leptos::task::spawn_local(async move {
                        let result = export::to_xlsx(sheet).await.and_then(|bytes| {
                            export::download(
                                &name,
                                "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
                                &bytes,
                            )
                        });
                        preparing_xlsx.set(false);
                        export_error.set(result.err());
                    });
                    Ok(())
                }
                "svg" => export::download(&name, "image/svg+xml", chart().as_bytes()),
                _ => export::download_png(&name, &chart(), move |why| {
                    export_error.set(Some(why));
                }),
            }
        });
        export_error.set(result.err());
    };
    view! {
        <section class="card results" aria-labelledby="table-title">
            <div class="row spread">
                <h2 id="table-title">"Table"</h2>
                <p class="muted" id="table-cost" data-billed=table.billed_calls.to_string() data-kept=kept.to_string()>
                    {cost}{(!kept).then(|| format!(" {} ms.", crosstab_wasm::display::format_number(ms, 0)))}
                </p>
            </div>
            <p id="table-of">{heading.clone()}</p>
            {move || stale().then(|| view! {
                <p class="warning" id="table-stale">"The builder has changed since this table was run: run it again to see the change."</p>
            })}
            <fieldset class="figures">
                <legend>"Figures in each cell"</legend>
                {Figure::ALL.into_iter().map(|figure| {
                    let id = format!("figure-{}", figure.id());
                    let label_for = id.clone();
                    view! {
                        <label class="check" for=label_for>
                            <input type="checkbox" id=id
                                prop:checked=move || figures.with(|f| f.shown.contains(&figure))
                                on:change=move |ev| figures.update(|f| f.toggle(figure, event_target_checked(&ev))) />
                            {figure.name(units, tests.confidence)}
                        </label>
                    }
                }).collect_view()}
                <button type="button" class="secondary" id="figures-all" on:click=move |_| figures.set(Figures::all())>"All figures"</button>
                <button type="button" class="secondary" id="figures-default" on:click=move |_| figures.set(Figures::default())>"Fewer"</button>
                <label class="check" for="figure-stability">
                    <input type="checkbox" id="figure-stability" prop:checked=move || figures.with(|f| f.stability)
                        on:change=move |ev| figures.update(|f| f.stability = event_target_checked(&ev)) />
                    "Stability markers"
                </label>
                <label class="check" for="figure-significance">
                    <input type="checkbox" id="figure-significance" prop:checked=move || figures.with(|f| f.significance)
                        on:change=move |ev| figures.update(|f| f.significance = event_target_checked(&ev)) />
                    "Column test"
                </label>
                <label class="check" for="figure-letters">
                    <input type="checkbox" id="figure-letters" prop:checked=move || figures.with(|f| f.letters)
                        on:change=move |ev| figures.update(|f| f.letters = event_target_checked(&ev)) />
                    "Column letters"
                </label>
            </fieldset>
            <div class="row">
                <button class="secondary" id="table-flip" aria-pressed=move || arrangement.with(|a| a.flipped).to_string()
                    on:click=move |_| arrangement.update(|a| { a.flipped = !a.flipped; a.sort_by = None; })>
                    "Flip rows and columns"
                </button>
                <label for="table-sort">"Sort rows by"</label>
                <select id="table-sort" on:change=move |ev| {
                    let value = event_target_value(&ev);
                    arrangement.update(|a| a.sort_by = match value.as_str() {
                        "" => None,
                        "total" => Some(Key::Total),
                        index => index.parse().ok().map(Key::At),
                    });
                }>
                    <option value="" selected=move || arrangement.with(|a| a.sort_by.is_none())>"As built"</option>
                    {move || sort_options().into_iter().map(|(key, label)| view! {
                        <option value=key.id() selected=move || arrangement.with(|a| a.sort_by == Some(key))>{label}</option>
                    }).collect_view()}
                </select>
                <label class="check" for="table-hide-empty">
                    <input type="checkbox" id="table-hide-empty" prop:checked=move || arrangement.with(|a| a.hide_empty)
                        on:change=move |ev| arrangement.update(|a| a.hide_empty = event_target_checked(&ev)) />
                    "Hide empty rows"
                </label>
            </div>
            <p class="muted" id="figure-key">{move || {
                let names: Vec<String> = figures.with(|f| f.shown.iter().map(|figure| figure.name(units, tests.confidence)).collect());
                if names.is_empty() { "No figure chosen: tick one above.".to_owned() } else { format!("Each cell, top to bottom: {}.", names.join(" · ")) }
            }}</p>
            // Written as one piece of HTML: a 20 × 10 table with every figure is thousands
            // of nodes, which the page builds from markup several times faster.
            <div class="table-wrap" tabindex="0" role="region" aria-labelledby="table-title"
                inner_html=move || table_html(&grid.get(), &figures.get(), &heading, run)></div>
            <ul class="legend" id="table-legend">
                {move || figures::legend(&figures.get(), threshold, arrangement.with(|a| a.flipped), grid.with(|g| g.compared), tests).into_iter().map(|line| view! { <li>{line}</li> }).collect_view()}
            </ul>
            <figure class="table-chart" aria-label="Chart of the table">
                <div inner_html=chart></div>
                <figcaption class="muted">"The first chosen figure, by row, in the column the rows are sorted by (else the Total). Hatched bars are unstable."</figcaption>
            </figure>
            <div class="row">
                <button class="secondary" id="export-table-csv" on:click=move |_| download("csv")>"Export CSV"</button>
                <button class="secondary" id="export-table-xlsx" on:click=move |_| download("xlsx")
                    aria-disabled=move || preparing_xlsx.get().to_string()>
                    {move || if preparing_xlsx.get() { "Preparing XLSX…" } else { "Export XLSX" }}
                </button>
                <button class="secondary" id="export-chart-svg" on:click=move |_| download("svg")>"Chart as SVG"</button>
                <button class="secondary" id="export-chart-png" on:click=move |_| download("png")>"Chart as PNG"</button>
            </div>
            {move || export_error.get().map(|message| view! { <p class="error" role="alert">{message}</p> })}
        </section>
    }
}

/// Text made safe inside HTML elements and quoted attributes.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The table's markup: column and row headings with their scopes, each cell's chosen
/// figures (`data-figure`, with every digit in `data-value`) and its markers, with the
/// reasons in words for screen readers.
fn table_html(grid: &Grid, chosen: &Figures, caption: &str, run: u32) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(256 * grid.lines.len() * grid.columns.len());
    let _ = write!(
        out,
        "<table id=\"workbench-table\" class=\"crosstab\" data-run=\"{run}\" data-flipped=\"{}\">\
         <caption class=\"sr-only\">{}</caption><thead><tr><th scope=\"col\">Rows</th>",
        grid.flipped,
        escape(caption)
    );
    let unknown = |yes: bool| if yes { " class=\"unknown\"" } else { "" };
    // The letters' words name the columns too: a listener need not recall each heading.
    let column_label = |index: usize| {
        grid.columns
            .iter()
            .find(|c| c.key == Key::At(index))
            .map(|c| c.label.clone())
    };
    for column in &grid.columns {
        let letter = grid.letter(column, chosen).map_or(String::new(), |letter| {
            format!(" <span class=\"column-letter\">({letter})</span>")
        });
        let _ = write!(
            out,
            "<th scope=\"col\" data-col=\"{}\"{}>{}{letter}</th>",
            column.key.id(),
            unknown(column.unknown),
            escape(&column.label)
        );
    }
    out.push_str("</tr></thead><tbody>");
    for line in &grid.lines {
        let row = line.head.key.id();
        let total = if line.head.key == Key::Total {
            " class=\"total\""
        } else {
            ""
        };
        let _ = write!(
            out,
            "<tr{total}><th scope=\"row\" data-row=\"{row}\"{}>{}</th>",
            unknown(line.head.unknown),
            escape(&line.head.label)
        );
        for (at, (cell, column)) in line.cells.iter().zip(&grid.columns).enumerate() {
            let unstable = if cell.unstable_reasons.is_empty() {
                ""
            } else {
                " unstable"
            };
            let _ = write!(
                out,
                "<td class=\"num{unstable}\" data-row=\"{row}\" data-col=\"{}\">",
                column.key.id()
            );
            let wholes = grid.wholes(line, at);
            for figure in &chosen.shown {
                let raw = figure
                    .values(cell, wholes, grid.tests.confidence)
                    .map_or_else(String::new, |(v, high)| match high {
                        Some(high) => format!("{v} {high}"),
                        None => v.to_string(),
                    });
                // The name in words too: a title is not read by every screen reader.
                let name = escape(&figure.name(grid.units, grid.tests.confidence));
                let _ = write!(
                    out,
                    "<span class=\"fig\" data-figure=\"{}\" data-value=\"{raw}\" title=\"{name}\">\
                     <span class=\"sr-only\">{name}: </span>{}</span>",
                    figure.id(),
                    escape(&figure.text(cell, wholes, grid.units, grid.tests.confidence))
                );
            }
            if !figures::marks(cell, chosen).is_empty() {
                // Each kind of mark in a span of its own: the arrows are not the
                // unstable marks' colour.
                let unstable: String = cell
                    .unstable_reasons
                    .iter()
                    .filter(|_| chosen.stability)
                    .map(|r| figures::reason_mark(*r))
                    .collect();
                let arrow =
                    cell.significance
                        .filter(|_| chosen.significance)
                        .map_or(String::new(), |s| {
                            let class = match s {
                                Significance::Higher => "higher",
                                Significance::Lower => "lower",
                            };
                            format!(
                                "<span class=\"arrow {class}\">{}</span>",
                                figures::significance_mark(s)
                            )
                        });
                let letters = figures::letters(cell, chosen);
                let lettered = if letters.is_empty() {
                    String::new()
                } else {
                    let mark = figures::letters_mark(&letters);
                    format!(" <span class=\"letters\">{mark}</span>")
                };
                let marks = format!("{unstable}{arrow}{lettered}");
                let reasons: Vec<String> = cell
                    .unstable_reasons
                    .iter()
                    .map(|r| format!("{r:?}"))
                    .collect();
                let significance = cell
                    .significance
                    .map(|s| format!("{s:?}"))
                    .unwrap_or_default();
                let said = escape(&figures::marks_text(
                    cell,
                    chosen,
                    grid.threshold,
                    &column_label,
                    grid.tests,
                ));
                let _ = write!(
                    out,
                    "<span class=\"marks\" data-reasons=\"{}\" data-significance=\"{significance}\" \
                     data-higher-than=\"{}\" title=\"{said}\" aria-hidden=\"true\">{marks}</span>\
                     <span class=\"sr-only said\">{said}</span>",
                    reasons.join(" "),
                    letters.join(" ")
                );
            }
            out.push_str("</td>");
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grid::tests::table;
    use crate::grid::Arrangement;
    use crosstab_contract::app::{Significance, UnstableReason};

    #[test]
    fn cells_carry_figures_markers_and_their_reasons() {
        let mut t = table();
        t.rows[0].label = "<b>Women</b> & \"girls\"".into();
        t.cells[0][1].unstable_reasons = vec![UnstableReason::LowRespondents];
        t.cells[0][1].significance = Some(Significance::Higher);
        let grid = Grid::of(&t, Arrangement::default());
        let html = table_html(&grid, &Figures::default(), "DEMO — ADULTS", 3);
        assert!(html.starts_with("<table id=\"workbench-table\" class=\"crosstab\" data-run=\"3\""));
        assert!(html.contains(
            "<th scope=\"col\" data-col=\"0\">Region: North · REGION = 1 <span class=\"column-letter\">(A)</span></th>"
        ));
        assert!(html.contains(
            "<th scope=\"row\" data-row=\"0\">&lt;b&gt;Women&lt;/b&gt; &amp; &quot;girls&quot; · F2554</th>"
        ));
        assert!(html.contains(
            "<td class=\"num unstable\" data-row=\"0\" data-col=\"1\">\
            <span class=\"fig\" data-figure=\"weighted\" data-value=\"0.03\" \
            title=\"Weighted audience (×1,000)\">\
            <span class=\"sr-only\">Weighted audience (×1,000): </span>0.0</span>"
        ));
        assert!(html.contains("data-reasons=\"LowRespondents\" data-significance=\"Higher\""));
        // The unstable mark, then the arrow in a span of its own colour.
        assert!(
            html.contains("aria-hidden=\"true\">*<span class=\"arrow higher\">▲</span></span>"),
            "{html}"
        );
        assert!(html.contains(
            "<span class=\"sr-only said\">Unstable: 60 respondents or fewer; \
            Share significantly higher than in the rest of the base (95%)</span>"
        ));
        assert_eq!(html.matches("<tr").count(), 4, "head, Total and two rows");

        // The pairwise test: a cell's letters beside its arrow (the Total has no letter).
        t.cells[0][1].higher_than = vec![0];
        let grid = Grid::of(&t, Arrangement::default());
        let html = table_html(&grid, &Figures::default(), "DEMO", 1);
        assert!(html.contains("<th scope=\"col\" data-col=\"total\">Total</th>"));
        assert!(
            html.contains(
                "<span class=\"arrow higher\">▲</span> <span class=\"letters\">A</span></span>"
            ),
            "{html}"
        );
        assert!(html.contains("data-higher-than=\"A\""));
        assert!(html.contains(
            "Share significantly higher than in column A (Region: North · REGION = 1) (95%)"
        ));
        // Flipped, no letters anywhere.
        let flipped = Grid::of(
            &t,
            Arrangement {
                flipped: true,
                ..Arrangement::default()
            },
        );
        let html = table_html(&flipped, &Figures::default(), "DEMO", 1);
        assert!(!html.contains("column-letter") && !html.contains("class=\"letters\""));

        // A column the test compares with none has no letter.
        let mut alone = t.clone();
        alone.columns[1].compared = false;
        let html = table_html(
            &Grid::of(&alone, Arrangement::default()),
            &Figures::default(),
            "DEMO",
            1,
        );
        assert!(html.contains("REGION = 1 <span class=\"column-letter\">(A)</span>"));
        assert!(!html.contains("(B)</span>"));
    }
}
