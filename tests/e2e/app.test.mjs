// The researcher app end to end in a real browser against the real server.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { startServer, startStatic, launch, apiCrosstab, signIn, artifacts } from './harness.mjs';

let server;
let browser;
const KEY_PATTERN = /ctx_(live|test)_[A-Za-z0-9]+_[A-Za-z0-9_-]{16,}/;

before(async () => {
  server = await startServer();
  browser = await launch();
});
after(async () => {
  await browser?.close();
  await server?.stop();
});

/** Types one target into the first input and runs the query. */
async function runTarget(page, target) {
  await page.locator('#target-0').fill(target);
  await page.locator('#target-0').press('Tab');
  await page.locator('#run').click();
  await page.locator('#results-table').waitFor();
}

async function addTarget(page, search, pickText) {
  await page.getByLabel('Search codes and variables by label or code').fill(search);
  await page.locator('.pick', { hasText: pickText }).first().click();
}

test('sign in, build a query from the codebook, run it: the numbers /v1/crosstab returns', async () => {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  const started = Date.now();
  await page.goto(server.origin);
  await page.getByRole('heading', { name: 'Sign in' }).waitFor();
  await page.screenshot({ path: join(artifacts, 'sign-in.png') });
  // Tab's first stop skips to the screen's heading, leaving the address as it was.
  await page.keyboard.press('Tab');
  assert.equal(await page.evaluate(() => document.activeElement?.textContent), 'Skip to the content');
  const address = page.url();
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => document.activeElement?.matches('main h1'));
  assert.equal(page.url(), address);
  await signIn(page, server);
  await page.locator('#base').waitFor();
  console.log(`query screen rendered ${Date.now() - started} ms after navigation (incl. sign-in)`);
  // An empty form is not yet a mistake: nothing is said until a run is asked for.
  assert.equal(await page.locator('#error-TargetCodes').count(), 0);
  // (Run is aria-disabled meanwhile, which Playwright's click would wait out.)
  await page.locator('#run').dispatchEvent('click');
  assert.equal(await page.locator('#error-TargetCodes').textContent(), 'TargetCodes[0] is empty.');

  await addTarget(page, 'women 25', 'F2554');
  await addTarget(page, 'coffee', 'P_COFFEE_01 = 1');
  await page.locator('#base').selectOption('ADULTS');
  await page.locator('#run').click();
  const table = page.locator('#results-table');
  await table.waitFor();
  await page.screenshot({ path: join(artifacts, 'results-rows.png'), fullPage: true });

  const request = {
    SurveyCode: 'DEMO', PopulationBaseCode: 'ADULTS', AuthorizationGroup: '_ALL_',
    TargetCodes: ['F2554', 'P_COFFEE_01 = 1'],
  };
  const direct = await apiCrosstab(server, request);
  assert.equal(direct.status, 200);
  const absolutes = await page.locator('#results-table td[data-absolute]').evaluateAll(
    (cells) => cells.map((c) => Number(c.dataset.absolute)));
  assert.deepEqual(absolutes, direct.body.Results.map((r) => r.WgtAud * direct.body.AudienceReportUnits));
  const respondents = await page.locator('#results-table tbody tr td:nth-child(4)').allTextContents();
  assert.deepEqual(respondents.map((t) => Number(t.replace(/,/g, ''))), direct.body.Results.map((r) => r.Resps));

  // Flip orientation: targets become columns, with their labels as in rows.
  const labels = await page.locator('#results-table tbody th .target-label').allTextContents();
  assert.equal(labels.length, 2);
  assert.equal(labels[0], 'Women 25-54');
  await page.locator('#flip').click();
  await page.locator('#results-table[data-orientation="columns"]').waitFor();
  const headers = await page.locator('#results-table thead th code').allTextContents();
  assert.deepEqual(headers, ['F2554', 'P_COFFEE_01 = 1']);
  assert.deepEqual(await page.locator('#results-table thead th .target-label').allTextContents(), labels);
  await page.screenshot({ path: join(artifacts, 'results-columns.png'), fullPage: true });

  // Export CSV.
  const [download] = await Promise.all([page.waitForEvent('download'), page.locator('#export-csv').click()]);
  const text = readFileSync(await download.path(), 'utf8');
  // A byte-order mark first, so Excel reads the file as UTF-8.
  assert.equal(text[0], '\uFEFF');
  const csv = text.slice(1).trim().split('\n');
  assert.match(csv[0], /^Target,Label,WgtAud/);
  assert.equal(csv.length, 3);
  assert.ok(csv[1].startsWith('F2554,'), csv[1]);
  assert.equal(Number(csv[1].split(',')[4]), direct.body.Results[0].Resps);

  // The curl command copies (said once the browser has it), and the next answer's
  // button starts over.
  await context.grantPermissions(['clipboard-read', 'clipboard-write']);
  await page.locator('details.curl summary').click();
  await page.locator('#copy-curl').click();
  await page.locator('#copy-curl', { hasText: /^Copied$/ }).waitFor();
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), await page.locator('#curl').textContent());
  await page.locator('#base').selectOption('ADULTS');
  await page.locator('#run').click();
  await page.locator('#results-table').waitFor();
  await page.locator('details.curl summary').click();
  assert.equal(await page.locator('#copy-curl').textContent(), 'Copy curl command');
  await context.close();
});

test('a small cell is marked unstable, and a third target is refused live', async () => {
  const context = await browser.newContext({ viewport: { width: 390, height: 844 } });
  const page = await context.newPage();
  await page.goto(server.origin);
  await signIn(page, server);
  await page.locator('#base').waitFor();
  const small = 'AGE = 88 AND GENDER = 1 AND REGION = 1';
  await page.locator('#target-0').fill(small);
  await page.locator('#target-0').press('Tab');
  await page.locator('#run').click();
  await page.locator('#results-table').waitFor();
  await page.locator('.unstable-badge').first().waitFor();
  assert.match(await page.locator('#unstable-note').textContent(), /Unstable/);
  const direct = await apiCrosstab(server, {
    SurveyCode: 'DEMO', PopulationBaseCode: 'ADULTS', AuthorizationGroup: '_ALL_', TargetCodes: [small] });
  assert.equal(direct.body.Results[0].Stbl, 1);
  await page.screenshot({ path: join(artifacts, 'unstable-phone.png'), fullPage: true });

  // Three targets: the validator says so next to the targets before anything is sent.
  for (const i of [1, 2]) {
    await page.locator('#add-target').click();
    await page.locator(`#target-${i}`).fill(`GENDER = ${i}`);
    await page.locator(`#target-${i}`).press('Tab');
  }
  const error = page.locator('[data-field="TargetCodes"]');
  await error.waitFor();
  assert.match(await error.textContent(), /1 or 2 entries, not 3/);
  assert.equal(await page.locator('#run').isDisabled(), true);
  await page.screenshot({ path: join(artifacts, 'third-target-error.png'), fullPage: true });

  // Every keystroke is checked, without leaving the field: an unfinished expression is
  // refused as it is typed, and the input keeps the focus and the text.
  await page.getByRole('button', { name: 'Remove target 3' }).click();
  await error.waitFor({ state: 'detached' });
  const second = page.locator('#target-1');
  await second.fill('');
  await second.pressSequentially('GENDER =');
  await error.waitFor();
  assert.equal(await page.evaluate(() => document.activeElement?.id), 'target-1');
  assert.equal(await second.inputValue(), 'GENDER =');
  assert.equal(await page.locator('#run').isDisabled(), true);
  await second.pressSequentially(' 2');
  await error.waitFor({ state: 'detached' });
  assert.equal(await page.locator('#run').isDisabled(), false);
  await context.close();
});

test('history re-runs a query; the portal shows the API reference, keys and usage', async () => {
  const context = await browser.newContext();
  const page = await context.newPage();
  await page.goto(server.origin);
  await signIn(page, server);
  // Billed calls before this test's two queries (the account is shared with the others).
  const billed = async () => {
    await page.getByRole('link', { name: 'Usage' }).click();
    await page.locator('#usage-table').or(page.getByText(/^No billed calls from/)).waitFor();
    const cell = page.locator('#usage-table tfoot td');
    return (await cell.count()) ? Number(await cell.textContent()) : 0;
  };
  const before = await billed();
  await page.getByRole('link', { name: 'Query' }).click();
  const sent = [];
  page.on('request', (r) => {
    if (r.method() === 'POST' && r.url().endsWith('/app/api/crosstab')) sent.push(r.postDataJSON());
  });
  await page.locator('#group').selectOption('_ALL_');
  await runTarget(page, 'F2554');
  // First render of the query screen for a signed-in user: navigation to a usable form.
  const renders = [];
  for (let i = 0; i < 3; i += 1) {
    const t0 = Date.now();
    await page.goto(server.origin);
    await page.locator('#base').waitFor();
    renders.push(Date.now() - t0);
  }
  console.log(`first render of the query screen (signed in, loopback): ${renders.join(', ')} ms`);
  await page.getByRole('link', { name: 'History' }).click();
  await page.locator('.history-item').first().click();
  await page.locator('#results-table').waitFor();
  // The re-run sent exactly the request of the first run: survey, group, base, targets.
  assert.equal(sent.length, 2, JSON.stringify(sent));
  assert.deepEqual(sent[1], sent[0]);
  assert.equal(sent[0].AuthorizationGroup, '_ALL_');
  await page.getByRole('link', { name: 'API reference' }).click();
  await page.locator('#api-reference').getByText('operationId: crosstabOptions').waitFor();
  await page.screenshot({ path: join(artifacts, 'api-reference.png'), fullPage: true });
  assert.equal(await billed(), before + 2, 'each app query billed once, and counted in Usage');
  // The period: today's UTC day last, filled in by the backend; a past one has no calls.
  const today = new Date().toISOString().slice(0, 10);
  assert.equal(await page.locator('#usage-to').inputValue(), today);
  assert.match(await page.locator('#usage-table caption').innerText(), new RegExp(`to ${today}$`));
  await page.locator('#usage-from').fill('2020-01-01');
  await page.locator('#usage-to').fill('2020-01-31');
  await page.getByRole('button', { name: 'Show' }).click();
  await page.getByText('No billed calls from 2020-01-01 to 2020-01-31.').waitFor();
  // A period the backend refuses is said, and the next good one is shown again.
  await page.locator('#usage-to').fill('2021-06-30');
  await page.getByRole('button', { name: 'Show' }).click();
  await page.getByRole('alert').getByText('A report covers at most 366 days').waitFor();
  await page.locator('#usage-from').fill(today);
  await page.locator('#usage-to').fill(today);
  await page.getByRole('button', { name: 'Show' }).click();
  await page.locator('#usage-table').waitFor();
  await page.getByRole('link', { name: 'API keys' }).click();
  await page.getByRole('button', { name: 'Create key' }).waitFor();
  // A new key takes the keyboard's focus to its Copy button, and back once stored.
  await page.getByRole('button', { name: 'Create key' }).click();
  await page.locator('#key-copy').waitFor();
  await page.waitForFunction(() => document.activeElement?.id === 'key-copy');
  await page.getByRole('button', { name: 'I have stored it' }).click();
  assert.equal(await page.evaluate(() => document.activeElement?.id), 'key-create');
  // Both ways to call the API, with this server's address in the examples.
  const calling = page.locator('#calling-the-api');
  await calling.getByText(`${server.origin}/v1/oauth/token`).first().waitFor();
  assert.match(await calling.innerText(), /Service-Engine-Authorizer: Bearer \$JWT/);
  assert.match(await calling.innerText(), /grant-type:saml2-bearer/);
  await page.screenshot({ path: join(artifacts, 'keys.png'), fullPage: true });
  // On a phone, wide tables scroll in their own box: the page never pans sideways.
  await page.setViewportSize({ width: 390, height: 844 });
  const pageWidth = () => page.evaluate(() => document.documentElement.scrollWidth);
  assert.equal(await pageWidth(), 390, 'the keys');
  await page.getByRole('link', { name: 'API reference' }).click();
  await page.locator('#api-reference').getByText('operationId: crosstabOptions').waitFor();
  assert.equal(await pageWidth(), 390, 'the API reference');
  await context.close();
});

test('no API key ever reaches the browser', async () => {
  const context = await browser.newContext();
  const page = await context.newPage();
  const bodies = [];
  page.on('response', async (response) => {
    try { bodies.push({ url: response.url(), text: (await response.body()).toString('latin1') }); } catch { /* redirects */ }
  });
  await page.goto(server.origin);
  await signIn(page, server);
  await runTarget(page, 'F2554');
  await page.getByRole('link', { name: 'API reference' }).click();
  await page.locator('#api-reference').waitFor();
  await page.getByRole('link', { name: 'Usage' }).click();
  await page.locator('#usage-table').waitFor();
  await page.waitForLoadState('networkidle');
  const storage = await page.evaluate(() => JSON.stringify({ ...localStorage }));
  const html = await page.content();
  assert.ok(bodies.length >= 5, `saw ${bodies.length} responses`);
  assert.match(server.key ?? '', KEY_PATTERN, 'the demo key is known, to be looked for');
  for (const { url, text } of [...bodies, { url: 'localStorage', text: storage }, { url: 'DOM', text: html }]) {
    assert.doesNotMatch(text, KEY_PATTERN, `a key in ${url}`);
    assert.ok(!text.includes(server.key), `the demo key in ${url}`);
  }
  assert.ok(bodies.some((b) => b.url.endsWith('.wasm')), 'the wasm was checked');
  await context.close();
});

test('cross-origin: an allowed origin passes the real preflight, another is blocked', async () => {
  const allowed = await startStatic();
  const blocked = await startStatic();
  const backend = await startServer({ allowedOrigins: [allowed.origin] });
  try {
    const context = await browser.newContext();
    const page = await context.newPage();
    const client = await context.newCDPSession(page);
    const preflights = [];
    await client.send('Network.enable');
    client.on('Network.requestWillBeSent', (e) => {
      if (e.request.method === 'OPTIONS' || e.type === 'Preflight') preflights.push({ url: e.request.url, id: e.requestId });
    });
    page.on('request', (r) => { if (r.method() === 'OPTIONS') preflights.push({ url: r.url() }); });
    allowed.backend = backend.origin;
    blocked.backend = backend.origin;
    // A backend named in the URL is ignored (it would receive the password): the page's
    // own meta tag decides.
    await page.goto(`${allowed.origin}/?backend=${encodeURIComponent(blocked.origin)}`);
    await signIn(page, backend);
    await page.locator('#target-0').fill('F2554');
    await page.locator('#target-0').press('Tab');
    await page.locator('#run').click();
    await page.locator('#results-table').waitFor();
    assert.ok(preflights.some((p) => p.url === `${backend.origin}/app/api/crosstab`),
      `preflights seen: ${JSON.stringify(preflights)}`);
    await page.screenshot({ path: join(artifacts, 'cross-origin-allowed.png') });

    const other = await context.newPage();
    const failed = [];
    other.on('requestfailed', (r) => failed.push(r.url()));
    await other.goto(blocked.origin);
    await other.getByLabel('Username').fill(backend.username);
    await other.getByLabel('Password').fill(backend.password);
    await other.getByRole('button', { name: 'Sign in' }).click();
    await other.locator('.signin .error').waitFor();
    assert.match(await other.locator('.signin .error').textContent(), /could not be reached/);
    assert.ok(failed.some((u) => u.startsWith(`${backend.origin}/app/`)), `failed: ${failed}`);
    const preflight = await fetch(`${backend.origin}/app/login`, {
      method: 'OPTIONS',
      headers: { origin: blocked.origin, 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type' },
    });
    assert.equal(preflight.headers.get('access-control-allow-origin'), null);
    await context.close();
  } finally {
    await backend.stop();
    await allowed.stop();
    await blocked.stop();
  }
});
