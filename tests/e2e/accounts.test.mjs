// Two accounts in one server, each with its own app user and grants: each user's queries
// in the browser are billed to that user's own account, as `crosstab usage` and each
// user's Usage page show (with what is left of a daily quota), and never to the other
// account.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, launch, signIn, cli } from './harness.mjs';

let server;
let browser;
const NORA = { username: 'nora', password: 'north password 1' };

before(async () => {
  server = await startServer();
  // Account `north`: region 1 of the demo survey only, with its own app user.
  cli(server.dataDir, ['key', 'create', '--account', 'north', '--grant', 'DEMO:1']);
  cli(server.dataDir, ['user', 'create', '--username', NORA.username, '--account', 'north'], `${NORA.password}\n`);
  cli(server.dataDir, ['account', 'limits', '--account', 'north', '--daily-quota', '50']);
  browser = await launch();
});
after(async () => {
  await browser?.close();
  await server?.stop();
});

/** Signs `user` in, runs one query in the app with `group`, returns the page on Usage. */
async function queryAs(user, group, target) {
  const context = await browser.newContext();
  const page = await context.newPage();
  await page.goto(server.origin);
  await signIn(page, server, user);
  await page.locator('#group').selectOption(group);
  await page.locator('#target-0').fill(target);
  await page.locator('#target-0').press('Tab');
  await page.locator('#run').click();
  await page.locator('#results-table').waitFor();
  await page.getByRole('link', { name: 'Usage' }).click();
  await page.locator('#usage-table').waitFor();
  return { page, context };
}

/** The Usage page's rows as {survey, user, calls}. */
async function usageRows(page) {
  const rows = await page.locator('#usage-table tbody tr').evaluateAll((trs) =>
    trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent.trim())));
  return rows.map((cells) => ({ survey: cells[1], user: cells[2], calls: Number(cells.at(-1)) }));
}

test("each user's app queries are billed to their own account, none to the other", async () => {
  const demo = { username: server.username, password: server.password };
  const asDemo = await queryAs(demo, '_ALL_', 'F2554');
  const asNora = await queryAs(NORA, '1', 'GENDER = 2');

  const report = JSON.parse(cli(server.dataDir, ['usage', '--format', 'json']));
  const calls = (account, user) => report
    .filter((row) => row.account === account && row.user === user)
    .reduce((sum, row) => sum + row.calls, 0);
  assert.equal(calls('demo', 'demo'), 1, JSON.stringify(report));
  assert.equal(calls('north', 'nora'), 1, JSON.stringify(report));
  assert.equal(report.reduce((sum, row) => sum + row.calls, 0), 2, JSON.stringify(report));
  for (const row of report) assert.equal(row.key_id, null, `an app query is billed to its user: ${JSON.stringify(row)}`);

  const demoRows = await usageRows(asDemo.page);
  const noraRows = await usageRows(asNora.page);
  assert.deepEqual(demoRows, [{ survey: 'DEMO', user: 'demo', calls: 1 }]);
  assert.deepEqual(noraRows, [{ survey: 'DEMO', user: 'nora', calls: 1 }]);
  // North has a daily quota, and its page says what is left of it today; demo has none.
  assert.equal(await asNora.page.locator('#usage-quota').getAttribute('data-left'), '49');
  assert.match(await asNora.page.locator('#usage-quota').textContent(), /used 1 of its 50 billed calls a day: 49 left/);
  assert.equal(await asDemo.page.locator('#usage-quota').count(), 0);
  await asDemo.context.close();
  await asNora.context.close();
});

test("on a shared browser each user sees only their own history, and a sign-out the server confirms", async () => {
  const demo = { username: server.username, password: server.password };
  const context = await browser.newContext();
  const page = await context.newPage();
  await page.goto(server.origin);
  // Lists kept before lists had owners are nobody's: the app drops them unread.
  await page.evaluate(() => localStorage.setItem('crosstab.tables', JSON.stringify([{ name: 'a stranger' }])));
  await page.reload();
  await page.getByRole('heading', { name: 'Sign in' }).waitFor();
  assert.equal(await page.evaluate(() => localStorage.getItem('crosstab.tables')), null);
  await signIn(page, server, demo);
  await page.locator('#target-0').fill('F2554');
  await page.locator('#target-0').press('Tab');
  await page.locator('#run').click();
  await page.locator('#results-table').waitFor();
  // The history's entries, leaving the page on the query screen (where signing in lands).
  const history = async () => {
    await page.getByRole('link', { name: 'History' }).click();
    await page.getByRole('heading', { name: 'Query history' }).waitFor();
    const items = await page.locator('.history-item').allTextContents();
    // When each ran reads as the browser writes dates, over the ISO time it keeps.
    const times = await page.locator('.history-item time').evaluateAll((found) =>
      found.map((t) => [t.dateTime, t.textContent,
        new Date(t.dateTime).toLocaleString(navigator.language, { dateStyle: 'medium', timeStyle: 'short' })]));
    assert.equal(times.length, items.length, 'a time for each entry');
    for (const [iso, shown, expected] of times) {
      assert.match(iso, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d/);
      assert.equal(shown, expected);
      assert.doesNotMatch(shown, /T\d\d:/);
    }
    await page.getByRole('link', { name: 'Query' }).click();
    return items;
  };
  assert.equal((await history()).length, 1);

  const signOut = page.waitForResponse((r) => r.url().endsWith('/app/logout'));
  await page.getByRole('button', { name: 'Sign out' }).click();
  assert.equal((await signOut).status(), 204);
  await page.locator('#signed-out').waitFor();
  assert.match(await page.locator('#signed-out').textContent(), /You have signed out/);
  await signIn(page, server, NORA);
  assert.deepEqual(await history(), [], "nora sees none of demo's queries");
  await page.getByRole('button', { name: 'Sign out' }).click();
  await signIn(page, server, demo);
  assert.equal((await history()).length, 1, "demo's history is still demo's");

  // A sign-out the server does not confirm leaves the user signed in, and says so.
  await page.route('**/app/logout', (route) => route.fulfill({ status: 503, contentType: 'application/json',
    body: JSON.stringify({ ResultCode: 503, ResultDescription: 'Busy.', error: { code: 'unavailable', message: 'Busy.' } }) }));
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.locator('#sign-out-error').waitFor();
  assert.match(await page.locator('#sign-out-error').textContent(), /Not signed out/);
  assert.equal(await page.getByRole('button', { name: 'Sign out' }).count(), 1, 'still signed in');
  await context.close();
});
