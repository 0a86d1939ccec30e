// The app sends one Idempotency-Key per query, the same on that query's retries, so a
// retried query whose answer was lost is answered again and billed once. A server table
// too; and when every attempt of a query or a table was lost, the same one run again by
// hand, even after a reload, goes with the same key.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, launch, signIn, cli } from './harness.mjs';

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

const KEY = /^[0-9a-f]{32}$/;

/** A new browser context with the app open and signed in. */
async function signedIn() {
  const context = await browser.newContext();
  const page = await context.newPage();
  await page.goto(server.origin);
  await signIn(page, server);
  return { context, page };
}

/** The keys of the POSTs to `path` the page sends from now on. */
function keysSentTo(page, path) {
  const sent = [];
  page.on('request', (r) => {
    if (r.method() === 'POST' && r.url().endsWith(path)) sent.push(r.headers()['idempotency-key']);
  });
  return sent;
}

/** A route handler that lets each request reach the server (and be billed there), notes
 * its key in `keys`, and loses the answer. */
function losingAnswers(keys) {
  return async (route) => {
    keys.push(route.request().headers()['idempotency-key']);
    await route.fetch();
    await route.abort('failed');
  };
}

/** Types `target` as the query's first target and runs it. */
async function ask(page, target) {
  await page.locator('#target-0').fill(target);
  await page.locator('#target-0').press('Tab');
  await page.locator('#run').click();
}

async function run(page, target) {
  await ask(page, target);
  await page.locator('#results-table').waitFor();
}

test('two queries carry two different keys', async () => {
  const { context, page } = await signedIn();
  const keys = keysSentTo(page, '/app/api/crosstab');
  await run(page, 'F2554');
  await run(page, 'P_COFFEE_01 = 1');
  assert.equal(keys.length, 2, JSON.stringify(keys));
  for (const key of keys) assert.match(key ?? '', KEY);
  assert.notEqual(keys[0], keys[1]);
  await context.close();
});

test('a retry after a 503 and after a 429 sends the same key, and then shows the answer', async () => {
  const { context, page } = await signedIn();
  const keys = [];
  const failures = [
    { status: 503, headers: {}, code: 'deadline_exceeded' },
    { status: 429, headers: { 'retry-after': '1' }, code: 'rate_limited' },
  ];
  await page.route('**/app/api/crosstab', async (route) => {
    keys.push(route.request().headers()['idempotency-key']);
    const failure = failures.shift();
    if (!failure) return route.continue();
    const body = { ResultCode: failure.status, ResultDescription: 'x', error: { code: failure.code, message: 'x' } };
    return route.fulfill({
      status: failure.status,
      headers: { 'content-type': 'application/json', ...failure.headers },
      body: JSON.stringify(body),
    });
  });
  await run(page, 'F2554');
  assert.equal(keys.length, 3, JSON.stringify(keys));
  assert.match(keys[0] ?? '', KEY);
  assert.ok(keys.every((k) => k === keys[0]), JSON.stringify(keys));
  await context.close();
});

/** Every call billed so far, as `crosstab usage` counts them. */
function billedCalls() {
  const report = JSON.parse(cli(server.dataDir, ['usage', '--format', 'json']));
  return report.reduce((sum, row) => sum + row.calls, 0);
}

test('a table whose answers were all lost, run again unchanged, is given its answer and billed once', async () => {
  const { context, page } = await signedIn();
  await page.getByRole('link', { name: 'Tables' }).click();
  await page.locator('#table-base').waitFor();
  for (const [axis, expression] of [['rows', 'GENDER = 1'], ['rows', 'GENDER = 2'], ['columns', 'AGE >= 35']]) {
    await page.locator(`#${axis}-expression`).fill(expression);
    await page.locator(`#${axis}-add-expression`).click();
  }
  const calls = 3; // 2 cells + 2 row totals + 1 column total, two targets a call
  const before = billedCalls();

  // Every attempt reaches the server (the first is billed there), and every answer is lost.
  const keys = [];
  const lose = losingAnswers(keys);
  await page.route('**/app/api/table', lose);
  await page.locator('#table-run').click();
  await page.locator('#table-error').waitFor({ timeout: 30_000 });
  assert.match(await page.locator('#table-error').textContent(), /could not be reached/);
  assert.ok(keys.length > 1, `retried: ${JSON.stringify(keys)}`);
  assert.match(keys[0] ?? '', KEY);
  assert.ok(keys.every((k) => k === keys[0]), JSON.stringify(keys));
  assert.equal(billedCalls() - before, calls, 'billed once, whatever the attempts');

  // Run again by hand, unchanged, after a reload (the key is kept in the browser's
  // storage, not the page): the same key, so the lost answer is given, unbilled.
  await page.unroute('**/app/api/table', lose);
  await page.reload();
  await page.locator('#table-base').waitFor();
  const sent = keysSentTo(page, '/app/api/table');
  await page.locator('#table-run').click();
  await page.locator('#workbench-table[data-run="1"]').waitFor();
  assert.deepEqual(sent, [keys[0]]);
  assert.match(await page.locator('#table-cost').textContent(), /not billed again/);
  assert.equal(billedCalls() - before, calls);

  // Once answered, a run is a new one: a new key, billed.
  await page.locator('#table-run').click();
  await page.locator('#workbench-table[data-run="2"]').waitFor();
  assert.equal(sent.length, 2);
  assert.notEqual(sent[1], keys[0]);
  assert.match(await page.locator('#table-cost').textContent(), /Computed on the server: 3 billed calls/);
  assert.equal(billedCalls() - before, 2 * calls);
  await context.close();
});

test('a query whose answers were all lost, run again after a reload, is given its answer and billed once', async () => {
  const { context, page } = await signedIn();
  const target = 'AGE BETWEEN 23 AND 61';
  const before = billedCalls();

  const keys = [];
  const lose = losingAnswers(keys);
  await page.route('**/app/api/crosstab', lose);
  await ask(page, target);
  await page.locator('.results .error').waitFor({ timeout: 30_000 });
  assert.ok(keys.length > 1, `retried: ${JSON.stringify(keys)}`);
  assert.match(keys[0] ?? '', KEY);
  assert.ok(keys.every((k) => k === keys[0]), JSON.stringify(keys));
  assert.equal(billedCalls() - before, 1, 'billed once, whatever the attempts');

  await page.unroute('**/app/api/crosstab', lose);
  await page.reload();
  const sent = keysSentTo(page, '/app/api/crosstab');
  await run(page, target);
  assert.deepEqual(sent, [keys[0]]);
  await page.locator('#result-replayed').waitFor();
  assert.equal(billedCalls() - before, 1);

  // Answered: the next run is a new query, with a new key, billed.
  await page.locator('#run').click();
  await page.waitForFunction(() => !document.querySelector('#result-replayed'));
  await page.locator('#results-table').waitFor();
  assert.equal(sent.length, 2);
  assert.notEqual(sent[1], keys[0]);
  assert.equal(billedCalls() - before, 2);
  await context.close();
});

test('a query whose page is reloaded while it runs goes again with its key, billed once', async () => {
  const { context, page } = await signedIn();
  const target = 'AGE BETWEEN 31 AND 47';
  const before = billedCalls();

  // The request reaches the server and is billed; its answer is held until the page has
  // gone (the route stays: removing it would let the held request through).
  const keys = [];
  let billed;
  const reached = new Promise((resolve) => { billed = resolve; });
  let release;
  const released = new Promise((resolve) => { release = resolve; });
  let holding = true;
  await page.route('**/app/api/crosstab', async (route) => {
    if (!holding) return route.continue();
    keys.push(route.request().headers()['idempotency-key']);
    await route.fetch();
    billed();
    await released;
    await route.abort('failed').catch(() => {});
  });
  await ask(page, target);
  await reached;
  assert.equal(billedCalls() - before, 1);
  holding = false;
  await page.reload();
  release();

  const sent = keysSentTo(page, '/app/api/crosstab');
  await run(page, target);
  assert.match(keys[0] ?? '', KEY);
  assert.deepEqual(sent, [keys[0]]);
  await page.locator('#result-replayed').waitFor();
  assert.equal(billedCalls() - before, 1);
  await context.close();
});
