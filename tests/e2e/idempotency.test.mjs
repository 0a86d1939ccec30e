// The app sends one Idempotency-Key per query, the same on that query's retries, so a
// retried query whose answer was lost is answered again and billed once.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, launch, signIn } from './harness.mjs';

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

async function run(page, target) {
  await page.locator('#target-0').fill(target);
  await page.locator('#target-0').press('Tab');
  await page.locator('#run').click();
  await page.locator('#results-table').waitFor();
}

test('two queries carry two different keys', async () => {
  const context = await browser.newContext();
  const page = await context.newPage();
  const keys = [];
  page.on('request', (r) => {
    if (r.method() === 'POST' && r.url().endsWith('/app/api/crosstab')) keys.push(r.headers()['idempotency-key']);
  });
  await page.goto(server.origin);
  await signIn(page, server);
  await run(page, 'F2554');
  await run(page, 'P_COFFEE_01 = 1');
  assert.equal(keys.length, 2, JSON.stringify(keys));
  for (const key of keys) assert.match(key ?? '', KEY);
  assert.notEqual(keys[0], keys[1]);
  await context.close();
});

test('a retry after a 503 and after a 429 sends the same key, and then shows the answer', async () => {
  const context = await browser.newContext();
  const page = await context.newPage();
  await page.goto(server.origin);
  await signIn(page, server);
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
