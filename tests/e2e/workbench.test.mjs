// The researcher's workbench end to end: tables built from the codebook by labels, every
// cell checked against /v1/crosstab, the cost prompt, a private file computed in the page
// (no request carries it) against the native engine, the exports, and the timings.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import XLSX from 'xlsx';
import { startServer, launch, apiCrosstab, signIn, cli, artifacts, repo } from './harness.mjs';

let server;
let browser;

before(async () => {
  server = await startServer();
  browser = await launch();
});
after(async () => {
  await browser?.close();
  await server?.stop();
});

/** A new browser context signed in as the demo user, on the Tables screen with a survey's codebook in. */
async function signedInTables(options = {}) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, ...options });
  const page = await context.newPage();
  await page.goto(server.origin);
  await signIn(page, server);
  await page.getByRole('link', { name: 'Tables' }).click();
  await page.locator('#table-base').waitFor();
  return { context, page };
}

/** The workbench's actions on one page (its runs counted to tell answers apart). */
function bench(page) {
  let runs = 0;
  return {
    /** Counts a run the test made by hand. */
    counted() {
      runs += 1;
    },
    async variable(axis, name) {
      await page.locator(`#${axis}-variable`).selectOption(name);
      await page.locator(`#${axis}-add-variable`).click();
    },
    async pick(axis, search, text) {
      await page.locator('#table-search').fill(search);
      const item = page.locator('.table-pick', { hasText: text }).first();
      await item.locator(axis === 'rows' ? '.add-row' : '.add-column').click();
    },
    async typed(axis, expression) {
      await page.locator(`#${axis}-expression`).fill(expression);
      await page.locator(`#${axis}-add-expression`).click();
    },
    async expressions(axis) {
      return page.locator(`#${axis}-list .axis-entry`).evaluateAll((es) => es.map((e) => e.dataset.expression));
    },
    /** Clicks Run (and, when asked for, confirms the cost); resolves with the ms to the rendered table. */
    async run({ confirm = false } = {}) {
      runs += 1;
      let started = Date.now();
      await page.locator('#table-run').click();
      if (confirm) {
        await page.locator('#cost-prompt').waitFor();
        started = Date.now();
        await page.locator('#cost-confirm').click();
      }
      await page.locator(`#workbench-table[data-run="${runs}"]`).waitFor({ timeout: 60_000 });
      return Date.now() - started;
    },
    /** Every cell: its row and column keys, figures (raw values), marker reasons and their words. */
    async cells() {
      return page.locator('#workbench-table td').evaluateAll((tds) => tds.map((td) => ({
        row: td.dataset.row,
        col: td.dataset.col,
        figures: Object.fromEntries([...td.querySelectorAll('.fig')].map((s) => [s.dataset.figure, s.dataset.value])),
        reasons: td.querySelector('.marks')?.dataset.reasons ?? '',
        said: td.querySelector('.said')?.textContent ?? '',
        higherThan: td.querySelector('.marks')?.dataset.higherThan ?? '',
      })));
    },
  };
}

const close = (got, want, what) =>
  assert.ok(Math.abs(got - want) <= 1e-9 * Math.max(Math.abs(want), 1), `${what}: ${got} vs ${want}`);

/** /v1's one result for `target`, from Node with the demo key. */
async function v1(target, { survey = 'DEMO', base = 'ADULTS' } = {}) {
  const { status, body } = await apiCrosstab(server, {
    SurveyCode: survey, PopulationBaseCode: base, AuthorizationGroup: '_ALL_', TargetCodes: [target],
  });
  assert.equal(status, 200, `${target}: ${JSON.stringify(body)}`);
  return body.Results[0];
}

test('a filtered table: every figure within the filter too, its total billed, said above the table', async () => {
  const { context, page } = await signedInTables();
  const wb = bench(page);
  await wb.typed('rows', 'GENDER = 2');
  await wb.typed('columns', 'SMOKER = 1');
  // 1 × 1: 1 cell and 2 totals, 2 calls; the filter's total makes 4 targets, still 2.
  await page.locator('#table-filter').fill('AGEE >= 35');
  await page.locator('#table-filter').press('Tab');
  assert.match(await page.locator('#table-problem').textContent(), /^Not in survey DEMO: filter \(AGEE >= 35\): the survey does not define 'AGEE'/);
  await page.locator('#table-filter').fill('AGE >= 35');
  await page.locator('#table-filter').press('Tab');
  assert.equal(await page.locator('#table-problem').count(), 0);
  assert.match(await page.locator('#table-price').textContent(), /takes 2 billed calls \(one per two of its 4 cells and totals\)/);
  await wb.run();
  assert.match(await page.locator('#table-of').textContent(), / — filtered to AGE >= 35$/);
  assert.equal(await page.locator('#table-cost').getAttribute('data-billed'), '2');
  const cells = await wb.cells();
  const at = (row, col) => cells.find((c) => c.row === String(row) && c.col === String(col));
  const total = await v1('AGE >= 35');
  const cell = await v1('(AGE >= 35) AND ((GENDER = 2) AND (SMOKER = 1))');
  assert.equal(Number(at('total', 'total').figures.weighted), total.WgtAud);
  assert.equal(Number(at(0, 0).figures.weighted), cell.WgtAud);
  // Clear empties the filter with the rows and columns.
  await page.locator('#table-clear').click();
  assert.equal(await page.locator('#table-filter').inputValue(), '');
  await context.close();
});

test('a table from the codebook by labels: every cell is /v1 for (row) AND (column), billed as /v1 would bill it', async () => {
  const { context, page } = await signedInTables({ acceptDownloads: true });
  await page.getByRole('heading', { name: 'Build a table' }).waitFor();
  const wb = bench(page);

  // Picked by label; shown as Label · CODE.
  await wb.pick('rows', 'women 25', 'Women 25-54 · F2554');
  await wb.variable('columns', 'REGION');
  assert.deepEqual(await wb.expressions('columns'), ['REGION = 1', 'REGION = 2', 'REGION = 3', 'REGION = 4']);
  const listed = await page.locator('#rows-list .axis-entry').allTextContents();
  assert.deepEqual(listed, ['Women 25-54 · F2554']);
  // 1 × 4: 4 cells and 5 totals, 5 calls: under the threshold, no prompt.
  assert.match(await page.locator('#table-price').textContent(), /takes 5 billed calls/);
  await wb.run();
  assert.equal(await page.locator('#cost-prompt').count(), 0);
  assert.equal(await page.locator('#table-cost').getAttribute('data-billed'), '5');

  await wb.pick('rows', 'smokers', 'Smokers · SMOKERS');
  await wb.variable('rows', 'EDUCATION');
  // Rich 18-year-olds: a cell (of a few respondents) every survey marks unstable.
  await wb.typed('rows', 'AGE = 18 AND INCOME = 7');
  const rows = await wb.expressions('rows');
  const columns = await wb.expressions('columns');
  assert.equal(rows.length, 8);
  // Moving an entry by keyboard keeps the focus on its button, wherever it moves.
  await page.locator('#rows-down-0').focus();
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => document.activeElement?.id === 'rows-down-1');
  assert.deepEqual((await wb.expressions('rows')).slice(0, 2), [rows[1], rows[0]]);
  await page.keyboard.press('Shift+Tab');
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => document.activeElement?.id === 'rows-up-0');
  assert.deepEqual(await wb.expressions('rows'), rows);
  // 8 × 4: 32 cells and 12 totals, 22 calls: above 20, the app asks first.
  assert.match(await page.locator('#table-price').textContent(), /takes 22 billed calls/);
  // The account's daily quota (ample here), said in the prompt with what the table leaves.
  cli(server.dataDir, ['account', 'limits', '--account', 'demo', '--daily-quota', '100000']);
  await page.locator('#table-run').click();
  await page.locator('#cost-prompt').waitFor();
  assert.match(await page.locator('#cost-prompt').textContent(), /22 billed calls/);
  await page.locator('#cost-quota').waitFor();
  assert.match(await page.locator('#cost-quota').textContent(), /^Your account has \d+ of its 100000 daily calls left; \d+ after this table\.$/);
  await page.screenshot({ path: join(artifacts, 'workbench-cost-prompt.png'), fullPage: true });
  await page.locator('#cost-cancel').click();
  assert.equal(await page.locator('#cost-prompt').count(), 0);
  assert.equal(await page.evaluate(() => document.activeElement?.id), 'table-run', 'focus back on Run');
  // The cancelled run ran nothing: the table shown is still the first one, said to be out
  // of date now that the builder has more rows.
  assert.equal(await page.locator('#workbench-table[data-run="1"]').count(), 1);
  assert.equal(await page.locator('#table-stale').count(), 1);
  // The prompt is modal: the builder behind it takes no click and no focus until it is
  // answered (Escape cancels it).
  await page.locator('#table-run').click();
  await page.locator('#cost-prompt').waitFor();
  assert.equal(await page.locator('#cost-prompt').evaluate((d) => d.matches(':modal')), true);
  assert.equal(await page.evaluate(() => document.activeElement?.id), 'cost-confirm');
  await assert.rejects(page.locator('#rows-expression').click({ timeout: 1000 }));
  await page.keyboard.press('Escape');
  assert.equal(await page.locator('#cost-prompt').count(), 0);
  assert.equal(await page.evaluate(() => document.activeElement?.id), 'table-run', 'focus back on Run');
  await page.locator('#table-run').click();
  await page.locator('#cost-prompt').waitFor();
  await page.locator('#cost-confirm').click();
  wb.counted();
  await page.locator('#workbench-table[data-run="2"]').waitFor({ timeout: 60_000 });
  assert.equal(await page.locator('#table-cost').getAttribute('data-billed'), '22');
  assert.equal(await page.locator('#workbench-table tbody tr').count(), 9, 'Total and the 8 priced rows');
  await wb.typed('rows', 'AGE = 19');
  assert.equal(await page.locator('#table-stale').count(), 1, 'the builder has a row the table lacks');
  await page.getByRole('button', { name: /^Remove (.* · )?AGE = 19$/ }).click();
  // The focus goes to the entry now last, not to the page.
  await page.waitForFunction(() => document.activeElement?.id === 'rows-remove-7');
  assert.equal(await page.locator('#table-stale').count(), 0);
  // A row naming what the survey lacks is said before anything runs (its cells would be
  // zeros, and billed), and Run does nothing until it is corrected or removed.
  await wb.typed('rows', 'GENDR = 1');
  assert.match(
    await page.locator('#table-problem').textContent(),
    /^Not in survey DEMO: row 9 \(GENDR = 1\): the survey does not define 'GENDR'\. Correct or remove them to run the table\.$/,
  );
  assert.equal(await page.locator('#table-run').getAttribute('aria-disabled'), 'true');
  await page.locator('#table-run').focus();
  await page.keyboard.press('Enter');
  assert.equal(await page.locator('#cost-prompt').count(), 0);
  assert.equal(await page.locator('#workbench-table[data-run="2"]').count(), 1, 'nothing ran');
  await page.getByRole('button', { name: 'Remove GENDR = 1' }).click();
  assert.equal(await page.locator('#table-problem').count(), 0);
  assert.match(await page.locator('#table-announce').textContent(), /Table ready: 8 rows by 4 columns/);
  await wb.run({ confirm: true });
  await page.locator('#figures-all').click();
  assert.equal(await page.locator('#table-cost').getAttribute('data-billed'), '22');
  await page.screenshot({ path: join(artifacts, 'workbench-table.png'), fullPage: true });

  const headers = await page.locator('#workbench-table thead th').allTextContents();
  // Columns are lettered for the pairwise test.
  assert.deepEqual(headers.slice(0, 4), ['Rows', 'Total', 'Census region: Northeast · REGION = 1 (A)', 'Census region: Midwest · REGION = 2 (B)']);
  assert.equal(await page.locator('#workbench-table th[scope="row"][data-row="0"]').textContent(), 'Women 25-54 · F2554');
  assert.equal(await page.locator('#workbench-table th[scope="row"][data-row="7"]').textContent(), 'AGE = 18 AND INCOME = 7');

  const base = await v1('*');
  const rowTotals = await Promise.all(rows.map((r) => v1(r)));
  const columnTotals = await Promise.all(columns.map((c) => v1(c)));
  const cells = await wb.cells();
  const at = (row, col) => cells.find((c) => c.row === String(row) && c.col === String(col));
  let small = 0;
  for (const [r, row] of rows.entries()) {
    for (const [c, column] of columns.entries()) {
      const target = `(${row}) AND (${column})`;
      const direct = await v1(target);
      const cell = at(r, c);
      assert.equal(Number(cell.figures.weighted), direct.WgtAud, target);
      assert.equal(Number(cell.figures.respondents), direct.Resps, target);
      const vertical = (100 * direct.WgtAud) / columnTotals[c].WgtAud;
      const horizontal = (100 * direct.WgtAud) / rowTotals[r].WgtAud;
      if (columnTotals[c].WgtAud > 0) close(Number(cell.figures.vertical), vertical, `vertical % ${target}`);
      if (columnTotals[c].WgtAud > 0 && direct.Resps > 0) {
        // The vertical %'s interval (Wilson's, from the SE that scripts/check-table-stats.py
        // checks against samplics) holds it and stays within 0–100%; the normal interval
        // of a rare row would pass below 0.
        const [low, high] = cell.figures['vertical-ci'].split(' ').map(Number);
        const share = Number(cell.figures.vertical);
        assert.ok(
          low >= 0 && low <= share && share <= high && high <= 100,
          `vertical % interval ${target}: ${low} – ${high} about ${vertical}`,
        );
      }
      if (rowTotals[r].WgtAud > 0) {
        close(Number(cell.figures.horizontal), horizontal, `horizontal % ${target}`);
        // The horizontal %'s interval, as the vertical's, of the row.
        const [low, high] = cell.figures['horizontal-ci'].split(' ').map(Number);
        const share = Number(cell.figures.horizontal);
        assert.ok(
          low >= 0 && low <= share && share <= high && high <= 100,
          `horizontal % interval ${target}: ${low} – ${high} about ${horizontal}`,
        );
        const index = (vertical / ((100 * rowTotals[r].WgtAud) / base.WgtAud)) * 100;
        close(Number(cell.figures.index), index, `index ${target}`);
      }
      if (direct.Resps <= 60) {
        small += 1;
        assert.match(cell.reasons, /LowRespondents/, target);
        assert.match(cell.said, /Unstable: 60 respondents or fewer/, target);
      } else {
        assert.doesNotMatch(cell.reasons, /LowRespondents/, target);
      }
    }
    assert.equal(Number(at(r, 'total').figures.weighted), rowTotals[r].WgtAud, `total of ${row}`);
  }
  assert.ok(small > 0, 'the small row has unstable cells');
  // The regions share no respondent, so the pairwise test compares them: some cell is
  // higher than another region's, never than its own, and says so in words.
  const lettered = cells.filter((c) => c.higherThan !== '' && c.row !== 'total' && c.col !== 'total');
  assert.ok(lettered.length > 0, 'some region differs from another');
  for (const cell of lettered) {
    const own = 'ABCD'[Number(cell.col)];
    for (const letter of cell.higherThan.split(' ')) {
      assert.match(letter, /^[A-D]$/);
      assert.notEqual(letter, own);
    }
    assert.match(cell.said, /Share significantly higher than in columns? [A-D]/);
  }
  for (const [c] of columns.entries()) {
    assert.equal(Number(at('total', c).figures.weighted), columnTotals[c].WgtAud);
  }
  assert.equal(Number(at('total', 'total').figures.weighted), base.WgtAud);
  const legend = await page.locator('#table-legend').textContent();
  assert.match(legend, /\* Unstable: 60 respondents or fewer/);
  assert.match(legend, /▲ The row's share of this column is significantly higher/);
  assert.match(legend, /Letters \(such as B\): the row's share of this column is significantly higher/);

  // Exports: CSV and an XLSX that opens, with the labels and the same figures.
  const [csvDownload] = await Promise.all([page.waitForEvent('download'), page.locator('#export-table-csv').click()]);
  const csv = readFileSync(await csvDownload.path(), 'utf8');
  assert.ok(csv.startsWith('\uFEFFSurvey,'), csv.slice(0, 40));
  // Named for its survey, base, variables and time, so two tables' files differ.
  assert.match(csvDownload.suggestedFilename(), /^DEMO-[A-Z0-9_]+-F2554\+SMOKERS\+more-by-REGION-\d{8}-\d{4}\.csv$/);
  assert.match(csv, /Row,Figure,Total,Census region: Northeast · REGION = 1/);
  // The XLSX writer lives in the worker, loaded on this first export: the button says so
  // (and takes no second click) until the file is ready.
  let releaseLoader;
  const loaderHeld = new Promise((resolve) => { releaseLoader = resolve; });
  const holdLoader = async (route) => { await loaderHeld; await route.continue(); };
  await context.route('**/crosstab-web-worker_loader.js', holdLoader);
  const xlsxButton = page.locator('#export-table-xlsx');
  const xlsxDownloaded = page.waitForEvent('download');
  const downloads = [];
  const countDownload = (download) => downloads.push(download.suggestedFilename());
  page.on('download', countDownload);
  let xlsxDownload;
  try {
    await xlsxButton.click();
    await page.locator('#export-table-xlsx', { hasText: 'Preparing XLSX…' }).waitFor();
    assert.equal(await xlsxButton.getAttribute('aria-disabled'), 'true');
    // A second click meanwhile starts no second export (Playwright's click would wait
    // for an aria-disabled button to be enabled: the event is sent as it is).
    await xlsxButton.dispatchEvent('click');
  } finally {
    releaseLoader();
    xlsxDownload = await xlsxDownloaded;
    await context.unroute('**/crosstab-web-worker_loader.js', holdLoader);
  }
  await page.locator('#export-table-xlsx', { hasText: 'Export XLSX' }).waitFor();
  assert.equal(await xlsxButton.getAttribute('aria-disabled'), 'false');
  await page.waitForTimeout(500);
  page.off('download', countDownload);
  assert.deepEqual(downloads, [xlsxDownload.suggestedFilename()], 'one export for two clicks');
  assert.match(xlsxDownload.suggestedFilename(), /\.xlsx$/);
  const book = XLSX.read(readFileSync(await xlsxDownload.path()));
  const sheet = XLSX.utils.sheet_to_json(book.Sheets[book.SheetNames[0]], { header: 1, defval: null });
  const head = sheet.findIndex((line) => line[0] === 'Row');
  assert.deepEqual(sheet[head].slice(2, 4), ['Total', 'Census region: Northeast · REGION = 1 (A)']);
  const women = sheet.findIndex((line) => line[0] === 'Women 25-54 · F2554');
  assert.equal(sheet[women][1], 'Weighted audience (×1,000)');
  assert.equal(sheet[women][3], (await v1('(F2554) AND (REGION = 1)')).WgtAud);
  assert.ok(sheet.some((line) => String(line[0] ?? '').startsWith('* Unstable')), 'legend in the workbook');
  // A share is stored as the number on screen (12.5, not 0.125) and shown with its % sign.
  const formatted = XLSX.read(readFileSync(await xlsxDownload.path()), { cellNF: true });
  const styled = formatted.Sheets[formatted.SheetNames[0]];
  const share = sheet.findIndex((line, at) => at > women && line[1] === 'Vertical %');
  const shareCell = styled[XLSX.utils.encode_cell({ r: share, c: 3 })];
  assert.equal(shareCell.z, '#,##0.0"%"');
  assert.ok(shareCell.v > 1, `a share in percent: ${shareCell.v}`);
  assert.equal(styled[XLSX.utils.encode_cell({ r: women, c: 3 })].z, '#,##0.0');
  const [svgDownload] = await Promise.all([page.waitForEvent('download'), page.locator('#export-chart-svg').click()]);
  assert.match(readFileSync(await svgDownload.path(), 'utf8'), /^<svg xmlns="http:\/\/www.w3.org\/2000\/svg"/);
  const [pngDownload] = await Promise.all([page.waitForEvent('download'), page.locator('#export-chart-png').click()]);
  assert.deepEqual([...readFileSync(await pngDownload.path()).subarray(0, 4)], [0x89, 0x50, 0x4e, 0x47], 'a PNG');

  // Saved in this browser, and reloaded from there.
  await page.locator('#saved-tables summary').click();
  await page.locator('#save-name').fill('regions');
  await page.locator('#save-table').click();
  // Kept as this user's (account/username): another user of the browser has lists of their own.
  const saved = await page.evaluate(() => JSON.parse(localStorage.getItem('crosstab.tables@demo/demo')));
  assert.equal(saved[0].name, 'regions');
  assert.equal(saved[0].request.rows.length, 8);

  // Flip: the regions become rows.
  await page.locator('#table-flip').click();
  await page.locator('#workbench-table[data-flipped="true"]').waitFor();
  assert.equal(await page.locator('#workbench-table th[scope="row"][data-row="0"]').textContent(), 'Census region: Northeast · REGION = 1');
  await page.setViewportSize({ width: 390, height: 844 });
  await page.screenshot({ path: join(artifacts, 'workbench-phone.png'), fullPage: true });
  // The table scrolls in its own box (its screen-reader text with it): the page does not.
  assert.equal(await page.evaluate(() => document.documentElement.scrollWidth), 390);
  await context.close();
});

/** Rows and columns of a 20 × 10 table on the demo survey, by variable. */
async function twentyByTen(wb) {
  for (const name of ['INCOME', 'EDUCATION', 'GENDER', 'SMOKER', 'REGION']) await wb.variable('rows', name);
  for (const name of ['EDUCATION', 'GENDER', 'SMOKER']) await wb.variable('columns', name);
  await wb.typed('columns', 'F2554');
  assert.equal((await wb.expressions('rows')).length, 20);
  assert.equal((await wb.expressions('columns')).length, 10);
}

test('a run refused says why once asked; each run joins Recently run at once; deleting a saved table asks first', async () => {
  const { context, page } = await signedInTables();
  const wb = bench(page);
  // Rows and no column yet: nothing said while building, and why once Run is pressed.
  await wb.typed('rows', 'GENDER = 1');
  assert.equal(await page.locator('#table-problem').count(), 0);
  await page.locator('#table-run').focus();
  await page.keyboard.press('Enter');
  assert.equal(await page.locator('#table-problem').textContent(), 'A table needs at least one entry in columns.');
  await wb.typed('columns', 'SMOKER = 1');
  await page.locator('#saved-tables summary').click();
  const recent = '#saved-tables ul.history:not(.saved-list) .history-item';
  const before = await page.locator(recent).count();
  await wb.run();
  await page.waitForFunction(([selector, n]) => document.querySelectorAll(selector).length === n + 1, [recent, before]);
  await page.locator('#save-name').fill('to-delete');
  await page.locator('#save-table').click();
  const entry = page.locator('.saved-list li', { hasText: 'to-delete' });
  await entry.waitFor();
  // Reopened, the table shows its kept answer at once: nothing asked of the server, so
  // nothing billed again.
  const asks = [];
  const countAsks = (request) => { if (request.url().endsWith('/app/api/table')) asks.push(request.url()); };
  page.on('request', countAsks);
  await wb.typed('rows', 'GENDER = 2');
  await page.locator('#table-stale').waitFor();
  await entry.locator('.history-item').click();
  await page.locator('#table-cost[data-kept="true"]').waitFor();
  assert.match(await page.locator('#table-cost').textContent(), /kept in this browser: shown again, not billed again/);
  assert.deepEqual(await wb.expressions('rows'), ['GENDER = 1']);
  assert.equal(await page.locator('#table-stale').count(), 0, 'the kept answer is the builder\'s table');
  await page.waitForTimeout(300);
  page.off('request', countAsks);
  assert.deepEqual(asks, []);
  // Saving again under the name asks before replacing it.
  let replacing = '';
  page.once('dialog', (dialog) => {
    replacing = dialog.message();
    dialog.dismiss();
  });
  await page.locator('#save-table').click();
  await page.getByText('to-delete kept as it was.').waitFor();
  assert.equal(replacing, 'Replace the saved table to-delete with this one?');
  const remove = page.getByRole('button', { name: 'Delete to-delete' });
  page.once('dialog', (dialog) => dialog.dismiss());
  await remove.click();
  assert.equal(await entry.count(), 1, 'kept when not confirmed');
  let asked = '';
  page.once('dialog', (dialog) => {
    asked = dialog.message();
    dialog.accept();
  });
  await remove.click();
  await entry.waitFor({ state: 'detached' });
  assert.match(asked, /Delete the saved table to-delete\? This can't be undone\./);
  // Answers are kept while signed in, and forgotten at sign-out.
  const answers = () => page.evaluate(() => localStorage.getItem('crosstab.table-answers@demo/demo'));
  assert.equal(JSON.parse(await answers()).length, 1, 'the answer stays with the history');
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.locator('#signed-out').waitFor();
  assert.equal(await answers(), null);
  await context.close();
});

test('a stricter confidence and Bonferroni, then Holm: sent with the table, said in its legend, figures and letters, fewer letters and arrows, kept in the draft', async () => {
  const { context, page } = await signedInTables();
  const wb = bench(page);
  // Rare rows the demo's regions differ on at 95%, none of them at 99% corrected.
  for (const code of ['F2554', 'SMOKERS', 'AGE = 18 AND INCOME = 7', 'AGE = 20 AND INCOME = 1', 'AGE = 23 AND INCOME = 1']) {
    await wb.typed('rows', code);
  }
  await wb.variable('columns', 'REGION');
  const sent = [];
  page.on('request', (request) => {
    if (request.url().endsWith('/app/api/table')) sent.push(request.postDataJSON());
  });
  // Marks as the cells hold them: arrows and letters.
  const marks = async () => {
    const cells = await wb.cells();
    const arrows = await page.locator('#workbench-table .marks').evaluateAll((ms) => ms.filter((m) => m.dataset.significance !== '').length);
    const letters = cells.reduce((n, c) => n + (c.higherThan === '' ? 0 : c.higherThan.split(' ').length), 0);
    return { arrows, letters };
  };
  // 5 × 4: 20 cells and 9 totals, 15 calls: no prompt.
  await wb.run();
  const at95 = await marks();
  // Holm's switch is left out when off, as requests were before it.
  assert.deepEqual([sent[0].confidence, sent[0].bonferroni, "holm" in sent[0]], [95, false, false]);
  const lettered = (await wb.cells()).filter((c) => c.higherThan !== '');
  assert.ok(lettered.length > 0 && lettered.every((c) => / \(95%\)$/.test(c.said)), lettered.map((c) => c.said).join('\n'));
  assert.match(await page.locator('#table-legend').textContent(), /Each arrow is one test at 95%/);

  await page.locator('#table-confidence').selectOption('99');
  await page.locator('#table-correction').selectOption('bonferroni');
  await wb.run();
  assert.deepEqual([sent[1].confidence, sent[1].bonferroni, "holm" in sent[1]], [99, true, false]);
  const strict = await marks();
  assert.ok(at95.letters > 0 && at95.arrows > 0, JSON.stringify(at95));
  assert.ok(strict.letters < at95.letters, `letters ${strict.letters} against ${at95.letters}`);
  assert.ok(strict.arrows < at95.arrows, `arrows ${strict.arrows} against ${at95.arrows}`);
  const legend = await page.locator('#table-legend').textContent();
  assert.match(legend, /Each arrow is one test at 99% with no correction for the table's many tests: where there is no real difference, about 1 test in 100/);
  // Four regions, none sharing a respondent: six pairs.
  assert.match(legend, /Bonferroni corrected: each of the 6 pairs of columns compared is tested at 0\.01 ÷ 6/);
  await page.locator('#figures-all').click();
  assert.match(await page.locator('#figure-key').textContent(), /Vertical % 99% interval/);

  // The draft keeps them: a reload has them back, and the answer kept shows again
  // without asking the server.
  const asked = sent.length;
  await page.reload();
  await page.locator('#table-base').waitFor();
  assert.equal(await page.locator('#table-confidence').inputValue(), '99');
  assert.equal(await page.locator('#table-correction').inputValue(), 'bonferroni');
  await page.locator('#workbench-table[data-run="1"]').waitFor();
  assert.equal(await page.locator('#table-cost').getAttribute('data-kept'), 'true');
  assert.match(await page.locator('#table-legend').textContent(), /Bonferroni corrected/);
  assert.equal(sent.length, asked);

  // Holm's step-down at 95% instead, with a row whose regions differ enough to keep
  // letters under it: sent, said, and kept in the draft too.
  await page.locator('#table-confidence').selectOption('95');
  await page.locator('#table-correction').selectOption('holm');
  const reloaded = bench(page);
  await reloaded.typed('rows', 'P_SOFT_DRINKS_02 = 1');
  // The reloaded page counts its runs afresh, the kept answer's among them.
  reloaded.counted();
  await reloaded.run();
  assert.deepEqual([sent.at(-1).confidence, sent.at(-1).bonferroni, sent.at(-1).holm], [95, false, true]);
  const stepped = await marks();
  assert.ok(stepped.letters > 0, `letters ${stepped.letters}`);
  const steppedCells = (await wb.cells()).filter((c) => c.higherThan !== '');
  assert.ok(steppedCells.every((c) => / \(95%, Holm\)$/.test(c.said)), steppedCells.map((c) => c.said).join('\n'));
  const holmLegend = await page.locator('#table-legend').textContent();
  assert.match(holmLegend, /Holm corrected: in each row the 6 pairs of columns compared are taken from the smallest p-value up, the first tested at 0\.05 ÷ 6, the next at 0\.05 ÷ 5/);
  assert.doesNotMatch(holmLegend, /Bonferroni corrected/);
  await page.reload();
  await page.locator('#table-base').waitFor();
  assert.equal(await page.locator('#table-correction').inputValue(), 'holm');
  await page.locator('#table-cost[data-kept="true"]').waitFor();
  // A kept answer of a survey whose data has changed since (re-imported, say, with the
  // same respondents and weights) is not shown once its codebook's data version says so.
  await page.evaluate(() => {
    const key = 'crosstab.table-answers@demo/demo';
    const kept = JSON.parse(localStorage.getItem(key));
    for (const answer of kept) {
      if (!/^[0-9a-f]{32}$/.test(answer.data.version)) throw new Error(`kept without a version: ${JSON.stringify(answer.data)}`);
      answer.data.version = answer.data.version.replace(/^./, (c) => (c === '0' ? '1' : '0'));
    }
    localStorage.setItem(key, JSON.stringify(kept));
  });
  await page.reload();
  await page.locator('#table-base').waitFor();
  const changed = page.getByText("The survey's data changed since this table's answer was kept");
  await changed.waitFor();
  assert.equal(await page.locator('#table-cost').count(), 0);
  // Run again, the table is today's: the notice about the old answer goes.
  // The kept answer counted as the page's first run while the codebook was on its way.
  const rerun = bench(page);
  rerun.counted();
  await rerun.run();
  assert.equal(await page.locator('#table-cost').getAttribute('data-kept'), 'false');
  assert.equal(await changed.count(), 0, 'the notice goes with the answer it was about');
  // So does choosing another survey: the notice was about this one's kept answer.
  cli(server.dataDir, ['survey', 'import', join(repo, 'tests/vectors/survey/survey.toml')]);
  cli(server.dataDir, ['account', 'grant', '--account', 'demo', '--grant', 'VEC']);
  await page.evaluate(() => {
    const key = 'crosstab.table-answers@demo/demo';
    const kept = JSON.parse(localStorage.getItem(key));
    for (const answer of kept) {
      if (!/^[0-9a-f]{32}$/.test(answer.data.version)) throw new Error(`kept without a version: ${JSON.stringify(answer.data)}`);
      answer.data.version = 'f'.repeat(32);
    }
    localStorage.setItem(key, JSON.stringify(kept));
  });
  // The server loads a survey installed beside it within a second: the list is asked
  // again until it has it.
  const listed = page.locator('#table-survey option[value="VEC"]');
  for (let tries = 0; ; tries++) {
    await page.reload();
    await page.locator('#table-survey option[value="DEMO"]').waitFor({ state: 'attached' });
    if ((await listed.count()) === 1) break;
    assert.ok(tries < 20, 'VEC never listed');
    await page.waitForTimeout(250);
  }
  await changed.waitFor();
  await page.locator('#table-survey').selectOption('VEC');
  await page.locator('#table-base option[value="ALL"]').waitFor({ state: 'attached' });
  assert.equal(await changed.count(), 0, 'the notice goes with the survey it was about');
  await page.locator('#table-survey').selectOption('DEMO');
  await page.locator('#table-base option[value="ADULTS"]').waitFor({ state: 'attached' });
  await page.locator('#table-clear').click();
  await context.close();
  // Later tests see the demo account as it was.
  cli(server.dataDir, ['account', 'revoke', '--account', 'demo', '--grant', 'VEC']);
});

test('a session that ends keeps the table being built: signed in again, the builder has it back', async () => {
  // A first visit, signed out, is not told that a session ended.
  const fresh = await browser.newContext();
  const first = await fresh.newPage();
  await first.goto(server.origin);
  await first.getByLabel('Username').waitFor();
  assert.equal(await first.locator('#session-ended').count(), 0);
  await fresh.close();
  const { context, page } = await signedInTables();
  // The title names the screen, and focus is on its heading.
  assert.equal(await page.title(), 'Tables — crosstab');
  await page.waitForFunction(() => document.activeElement?.id === 'workbench-title');
  // Back and Forward move between the screens, the title and focus with them.
  await page.goBack();
  await page.getByRole('heading', { name: 'Build a query' }).waitFor();
  assert.equal(await page.title(), 'Query — crosstab');
  await page.waitForFunction(() => document.activeElement?.id === 'builder-title');
  await page.goForward();
  await page.locator('#table-base').waitFor();
  assert.equal(await page.title(), 'Tables — crosstab');
  const wb = bench(page);
  await wb.variable('rows', 'GENDER');
  await wb.typed('columns', 'AGE >= 40');
  const rows = await wb.expressions('rows');
  assert.equal(rows.length, 2);
  // The session ends elsewhere (signed out in another tab): the next call finds it gone.
  const out = await context.request.post(`${server.origin}/app/logout`, { headers: { origin: server.origin } });
  assert.equal(out.status(), 204);
  await page.locator('#table-run').click();
  await page.locator('#session-ended').waitFor();
  assert.match(await page.locator('#session-ended').textContent(), /The table you were building is kept/);
  await page.getByLabel('Username').fill(server.username);
  await page.getByLabel('Password').fill(server.password);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.locator('#table-base').waitFor();
  assert.deepEqual(await wb.expressions('rows'), rows);
  assert.deepEqual(await wb.expressions('columns'), ['AGE >= 40']);
  assert.equal(await page.locator('#session-ended').count(), 0);
  // A reload brings it back too; Clear empties it for good.
  await page.reload();
  await page.locator('#table-base').waitFor();
  assert.deepEqual(await wb.expressions('rows'), rows);
  await page.locator('#table-clear').click();
  await page.reload();
  await page.locator('#table-base').waitFor();
  assert.deepEqual(await wb.expressions('rows'), []);
  await context.close();
});

test('timing: a 20 × 10 table on the demo survey with every figure, from click to rendered', async () => {
  const { context, page } = await signedInTables();
  const wb = bench(page);
  await twentyByTen(wb);
  assert.match(await page.locator('#table-price').textContent(), /takes 115 billed calls/);
  const first = await wb.run({ confirm: true });
  await page.locator('#figures-all').click();
  const serverMs = [];
  const answerMs = [];
  // The app's own figure: from the click to the answer in hand, before rendering.
  const answered = async () => Number((await page.locator('#table-cost').textContent()).match(/ ([\d,]+) ms\./)[1].replace(/,/g, ''));
  for (let i = 0; i < 3; i += 1) {
    serverMs.push(await wb.run({ confirm: true }));
    answerMs.push(await answered());
  }
  console.log(`workbench 20x10, all figures, server: ${serverMs.join(', ')} ms click to rendered `
    + `(answer in hand after ${answerMs.join(', ')} ms; first run ${first} ms; target < 1000)`);
  // The table scrolls in its own box, its headings staying in view: scrolled down and
  // right, the column headings are still at the box's top and the row headings at its left.
  const edges = await page.locator('.table-wrap:has(> table.crosstab)').evaluate((wrap) => {
    wrap.scrollTop = 400;
    wrap.scrollLeft = 300;
    const box = wrap.getBoundingClientRect();
    const head = wrap.querySelector('thead th:nth-child(2)').getBoundingClientRect();
    const row = wrap.querySelector('tbody tr:nth-child(8) th').getBoundingClientRect();
    return { scrolled: wrap.scrollTop, top: head.top - box.top, left: row.left - box.left };
  });
  assert.ok(edges.scrolled > 0, 'the table scrolls within its box');
  assert.ok(Math.abs(edges.top) <= 2 && Math.abs(edges.left) <= 2, JSON.stringify(edges));

  // The same table in the page, from the demo survey's compiled file.
  const surveys = join(server.dataDir, 'surveys');
  const compiled = readdirSync(surveys).find((f) => f.startsWith('DEMO.'));
  await page.locator('#source-local').check();
  await page.locator('#local-data').setInputFiles(join(surveys, compiled));
  await page.locator('#local-opened').waitFor();
  const localMs = [];
  const computedMs = [];
  for (let i = 0; i < 3; i += 1) {
    localMs.push(await wb.run());
    computedMs.push(await answered());
  }
  assert.equal(await page.locator('#table-cost').getAttribute('data-billed'), '0');
  console.log(`workbench 20x10, all figures, local: ${localMs.join(', ')} ms click to rendered `
    + `(computed after ${computedMs.join(', ')} ms; target < 300)`);
  await context.close();
});

test("a local file's labels stay in the page: switched to the server, entries are named by the server's codebook", async () => {
  const dir = mkdtempSync(join(tmpdir(), 'crosstab-labels-'));
  const csvPath = join(dir, 'panel.csv');
  writeFileSync(csvPath, 'RESPID,WEIGHT,ZQ_LOCAL\nr1,1,1\nr2,2,2\nr3,1.5,1\n');
  const { context, page } = await signedInTables();
  await page.locator('#source-local').check();
  await page.locator('#local-data').setInputFiles(csvPath);
  await page.locator('#local-id').selectOption('RESPID');
  await page.locator('#local-weight').selectOption('WEIGHT');
  await page.locator('#local-open').click();
  await page.locator('#local-opened').waitFor();
  const wb = bench(page);
  await wb.variable('rows', 'ZQ_LOCAL');
  const named = () => page.locator('#rows-list .axis-entry').allTextContents();
  assert.deepEqual(await named(), ['ZQ_LOCAL: 1 · ZQ_LOCAL = 1', 'ZQ_LOCAL: 2 · ZQ_LOCAL = 2']);
  await page.locator('#source-server').check();
  await page.locator('#table-base').waitFor();
  // The server's codebook has no such variable: the entries keep their codes, unlabelled.
  assert.deepEqual(await named(), ['ZQ_LOCAL = 1', 'ZQ_LOCAL = 2']);
  await context.close();
  rmSync(dir, { recursive: true, force: true });
});

const ENGINE_READY = 'The in-page engine is ready: from here on, opening and computing need no network.';

test('the in-page engine: when its module cannot be fetched the panel says so, and it loads on a retry or with the next compiled file', async () => {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const dir = mkdtempSync(join(tmpdir(), 'crosstab-engine-'));
  const csvPath = join(dir, 'tiny.csv');
  writeFileSync(csvPath, 'RESPID,WEIGHT,REGION\nr1,1.5,1\nr2,2.5,2\n');
  const surveys = join(server.dataDir, 'surveys');
  const compiled = join(surveys, readdirSync(surveys).find((f) => f.startsWith('DEMO.')));
  const refuse = (route) => route.abort();
  // A panel whose engine could not be loaded; its loader is refused until `unroute`.
  const failedPanel = async () => {
    const page = await context.newPage();
    await context.route('**/crosstab-web-worker_loader.js', refuse);
    await page.goto(server.origin);
    await page.getByRole('heading', { name: 'Sign in' }).waitFor();
    await page.locator('#open-local').click();
    await page.locator('#local-engine', { hasText: 'could not be loaded' }).waitFor();
    return page;
  };
  const unroute = () => context.unroute('**/crosstab-web-worker_loader.js', refuse);

  // A CSV is read without the engine, but its Open waits for it.
  const retried = await failedPanel();
  await retried.locator('#local-data').setInputFiles(csvPath);
  await retried.locator('#local-open').waitFor();
  assert.equal(await retried.locator('#local-open').isDisabled(), true, 'no Open without the engine');
  // A compiled file chosen while the engine can't load is refused, saying why.
  await retried.locator('#local-data').setInputFiles(compiled);
  await retried.locator('#local-error', { hasText: 'could not be loaded' }).waitFor();
  assert.equal(await retried.locator('#local-opened').count(), 0);
  await unroute();
  // The retry loads it, and the old error goes.
  await retried.locator('#local-engine-retry').click();
  await retried.locator('#local-engine', { hasText: ENGINE_READY }).waitFor();
  assert.equal(await retried.locator('#local-error').count(), 0);

  // A compiled survey chosen after the failure loads the engine again, then opens.
  const chosen = await failedPanel();
  await unroute();
  await chosen.locator('#local-data').setInputFiles(compiled);
  await chosen.locator('#local-opened').waitFor();
  await chosen.locator('#local-engine', { hasText: ENGINE_READY }).waitFor();
  assert.equal(await chosen.locator('#local-error').count(), 0);
  await context.close();
  rmSync(dir, { recursive: true, force: true });
});

test('a private file: opened with the guided form, computed in the page, never sent, equal to the native engine', async () => {
  // A small panel with values no request could carry by chance.
  const dir = mkdtempSync(join(tmpdir(), 'crosstab-private-'));
  const lines = ['RESPID,WEIGHT,REGION,GENDER,ZQ_SECRET_SCORE'];
  for (let i = 1; i <= 240; i += 1) {
    const weight = (1 + ((i * 37) % 101) / 97.3).toFixed(7);
    lines.push(`zq-secret-${String(i).padStart(4, '0')},${weight},${1 + (i % 3)},${1 + ((i * 7) % 2)},${1 + ((i * 5) % 4)}`);
  }
  const csvText = `${lines.join('\n')}\n`;
  const csvPath = join(dir, 'private-panel.csv');
  writeFileSync(csvPath, csvText);
  // What the guided form describes, for the native engine.
  const definition = ['code = "PRIV"', 'name = "Private panel"', 'respondents = "private-panel.csv"',
    'id_column = "RESPID"', 'weight_column = "WEIGHT"', 'group_column = "REGION"',
    '', '[[population_bases]]', 'code = "ALL"', 'label = "All respondents"', 'expr = "*"', ''].join('\n');
  writeFileSync(join(dir, 'survey.toml'), definition);
  const native = mkdtempSync(join(tmpdir(), 'crosstab-native-'));
  cli(native, ['survey', 'import', join(dir, 'survey.toml')]);
  const query = (target) => JSON.parse(cli(native, ['query', '--survey', 'PRIV', '--base', 'ALL', '--target', target])).Results[0];

  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  await page.goto(server.origin);
  await page.getByRole('heading', { name: 'Sign in' }).waitFor();
  const sent = [];
  // The context's requests, the worker's among them (the file goes to the worker).
  context.on('request', (request) => sent.push({ url: request.url(), body: request.postData() ?? '' }));
  // Signed out, and offline once the engine is in: nothing needs the server.
  await page.locator('#open-local').click();
  await page.getByRole('heading', { name: 'Build a table' }).waitFor();
  await page.locator('#local-engine', { hasText: ENGINE_READY }).waitFor();
  // The listener sees the worker's own module being fetched: it would see the worker's
  // requests.
  assert.ok(sent.some(({ url }) => url.endsWith('/crosstab-web-worker_bg.wasm')), 'the worker module was fetched after the page load');
  await context.setOffline(true);
  assert.match(await page.locator('#local-private').textContent(), /never uploaded, and nothing is billed/);
  // A file with no column named as a weight: none is taken for one (a category's codes
  // would weight every figure), and Open asks for it.
  const unweighted = join(dir, 'no-weight.csv');
  writeFileSync(unweighted, 'RESPID,GENDER,AGE\n1,1,30\n2,2,40\n');
  await page.locator('#local-data').setInputFiles(unweighted);
  await page.locator('.guided .muted', { hasText: 'no-weight.csv: 3 columns' }).waitFor();
  assert.equal(await page.locator('#local-weight').inputValue(), '');
  await page.locator('#local-open').click();
  assert.match(await page.locator('#local-error').textContent(), /^Choose the weight column.*No weight column/);
  assert.equal(await page.locator('#local-opened').count(), 0);
  // Said outright, it opens unweighted: every respondent counts 1.
  await page.locator('#local-unweighted').check();
  assert.ok(await page.locator('#local-weight').isDisabled());
  await page.locator('#local-open').click();
  await page.locator('#local-opened').waitFor();
  assert.match(await page.locator('#local-opened').textContent(), /\(2 respondents\)/);
  await page.locator('#local-opened button', { hasText: 'Close the file' }).click();
  await page.locator('#local-opened').waitFor({ state: 'detached' });
  await page.locator('#local-data').setInputFiles(csvPath);
  await page.locator('.guided .muted', { hasText: 'private-panel.csv: 5 columns' }).waitFor();
  assert.equal(await page.locator('#local-weight').inputValue(), 'WEIGHT', 'a WEIGHT column is taken');
  await page.locator('#local-code').fill('PRIV');
  await page.locator('#local-id').selectOption('RESPID');
  await page.locator('#local-weight').selectOption('WEIGHT');
  await page.locator('#local-group').selectOption('REGION');
  // Audiences in the weights' own units unless asked; thousands, as survey.toml's default.
  assert.equal(await page.locator('#local-units').inputValue(), '1');
  await page.locator('#local-units').selectOption('1000');
  await page.locator('#local-open').click();
  await page.locator('#local-opened').waitFor();
  assert.match(await page.locator('#local-opened').textContent(), /PRIV .* \(240 respondents\)/);

  const wb = bench(page);
  await wb.variable('rows', 'GENDER');
  await wb.typed('rows', 'ZQ_SECRET_SCORE >= 3');
  await wb.variable('columns', 'ZQ_SECRET_SCORE');
  assert.match(await page.locator('#table-price').textContent(), /nothing is billed/);
  await wb.run();
  await page.locator('#figures-all').click();
  await page.screenshot({ path: join(artifacts, 'workbench-local.png'), fullPage: true });
  assert.equal(await page.locator('#table-cost').getAttribute('data-billed'), '0');
  const rows = await wb.expressions('rows');
  const columns = await wb.expressions('columns');
  assert.deepEqual(columns, ['ZQ_SECRET_SCORE = 1', 'ZQ_SECRET_SCORE = 2', 'ZQ_SECRET_SCORE = 3', 'ZQ_SECRET_SCORE = 4']);
  const cells = await wb.cells();
  const at = (row, col) => cells.find((c) => c.row === String(row) && c.col === String(col));
  for (const [r, row] of rows.entries()) {
    for (const [c, column] of columns.entries()) {
      const target = `(${row}) AND (${column})`;
      const expected = query(target);
      assert.equal(Number(at(r, c).figures.weighted), expected.WgtAud, target);
      assert.equal(Number(at(r, c).figures.respondents), expected.Resps, target);
      // 240 respondents: every cell is at most 60, and says so.
      assert.match(at(r, c).reasons, /LowRespondents/, target);
    }
    assert.equal(Number(at(r, 'total').figures.weighted), query(row).WgtAud, row);
  }
  assert.equal(Number(at('total', 'total').figures.weighted), query('*').WgtAud);

  // The same file with its definition instead of the form: the same table.
  await page.locator('#local-opened button').click();
  await page.locator('#local-data').setInputFiles(csvPath);
  await page.locator('#local-definition').setInputFiles(join(dir, 'survey.toml'));
  await page.getByText('Using survey.toml.').waitFor();
  await page.locator('#local-open').click();
  await page.locator('#local-opened').waitFor();
  assert.match(await page.locator('#local-opened').textContent(), /PRIV — Private panel \(240 respondents\), from private-panel\.csv \+ survey\.toml/);
  await wb.run();
  const again = await wb.cells();
  assert.deepEqual(again.map((c) => c.figures.weighted), cells.map((c) => c.figures.weighted));
  await context.setOffline(false);

  // No request after the page loaded carried any of the file.
  const secrets = ['zq-secret', 'ZQ_SECRET_SCORE', lines[1], lines[1].split(',')[1], 'private-panel'];
  for (const { url, body } of sent) {
    for (const secret of secrets) {
      assert.ok(!url.includes(secret) && !body.includes(secret), `${url} carries ${secret}`);
    }
  }
  console.log(`local file: ${sent.length} requests after page load, none carrying the file`);
  await context.close();
  rmSync(dir, { recursive: true, force: true });
  rmSync(native, { recursive: true, force: true });
});
