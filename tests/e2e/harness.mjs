// Starts the real `crosstab` server (and static servers for cross-origin tests) on free
// loopback ports, and launches Debian's Chromium through playwright-core.
import { spawn, spawnSync } from 'node:child_process';
import { createServer } from 'node:http';
import { mkdtempSync, readFileSync, existsSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, extname, resolve } from 'node:path';
import { chromium } from 'playwright-core';

export const repo = resolve(import.meta.dirname, '../..');
export const artifacts = join(repo, 'tests/e2e/artifacts');
mkdirSync(artifacts, { recursive: true });

const targetDir = process.env.CARGO_TARGET_DIR || join(process.env.HOME, '.cache/crosstab-target');
export const bin = process.env.CROSSTAB_BIN || join(targetDir, 'release/crosstab');
export const dist = process.env.CROSSTAB_DIST || join(repo, 'dist');

/** Runs `crosstab ARGS --data-dir DIR` (with `input` on stdin); returns stdout, or throws. */
export function cli(dataDir, args, input = '') {
  const run = spawnSync(bin, [...args, '--data-dir', dataDir], { input, encoding: 'utf8' });
  if (run.status !== 0) throw new Error(`crosstab ${args.join(' ')} failed: ${run.stderr}`);
  return run.stdout;
}

/**
 * Starts `crosstab serve --demo` on a port the system picks (port 0); resolves once it
 * prints the address it listens on, with the demo credentials.
 */
export async function startServer({ allowedOrigins = [] } = {}) {
  if (!existsSync(bin)) throw new Error(`no crosstab binary at ${bin}: build it first`);
  if (!existsSync(join(dist, 'index.html'))) throw new Error(`no app in ${dist}: run trunk build first`);
  const dataDir = mkdtempSync(join(tmpdir(), 'crosstab-e2e-'));
  const args = ['serve', '--demo', '--data-dir', dataDir, '--listen', '127.0.0.1:0', '--app-dir', dist];
  for (const origin of allowedOrigins) args.push('--allowed-origin', origin);
  const child = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, RUST_LOG: 'info' } });
  let out = '';
  let log = '';
  child.stdout.on('data', (d) => { out += d; });
  child.stderr.on('data', (d) => { log += d; });
  const deadline = Date.now() + 120_000;
  while (!/crosstab listening on/.test(out)) {
    if (child.exitCode !== null) throw new Error(`crosstab exited ${child.exitCode}: ${log}`);
    if (Date.now() > deadline) throw new Error(`crosstab did not start: ${out}\n${log}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  const grab = (label) => (out.match(new RegExp(`${label}: (\\S+)`)) || [])[1];
  const origin = out.match(/crosstab listening on (http:\/\/\S+)/)[1];
  return {
    origin,
    port: Number(new URL(origin).port),
    dataDir,
    key: grab('demo key'),
    username: grab('demo user'),
    password: grab('demo password'),
    stdout: () => out,
    log: () => log,
    async stop() {
      child.kill('SIGTERM');
      await new Promise((r) => (child.exitCode !== null ? r() : child.once('exit', r)));
      // Each run compiles the demo survey into its own data dir: don't leave it behind.
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

const types = { '.html': 'text/html', '.js': 'text/javascript', '.wasm': 'application/wasm', '.css': 'text/css' };

/** A plain static server for the built app, on its own origin. */
/**
 * Serves the built app from its own origin. Once `site.backend` is set, the page names
 * that backend as a deployment would: a `crosstab-backend` meta tag in index.html.
 */
export async function startStatic() {
  const site = { origin: null, backend: null };
  const server = createServer((req, res) => {
    const path = new URL(req.url, 'http://x').pathname;
    const file = join(dist, path === '/' ? 'index.html' : path);
    if (!file.startsWith(dist) || !existsSync(file)) { res.writeHead(404).end(); return; }
    res.writeHead(200, { 'content-type': types[extname(file)] || 'application/octet-stream' });
    let bytes = readFileSync(file);
    if (file.endsWith('index.html') && site.backend) {
      bytes = bytes.toString('utf8')
        .replace('</head>', `<meta name="crosstab-backend" content="${site.backend}" /></head>`);
    }
    res.end(bytes);
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  site.origin = `http://127.0.0.1:${server.address().port}`;
  site.stop = () => new Promise((r) => server.close(r));
  return site;
}

export async function launch() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-quic'],
  });
}

/** Calls /v1/crosstab directly (from Node, never from the browser) with the demo key. */
export async function apiCrosstab(server, request) {
  const response = await fetch(`${server.origin}/v1/crosstab`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'service-engine-authorizer': server.key },
    body: JSON.stringify(request),
  });
  return { status: response.status, body: await response.json() };
}

export async function signIn(page, server, { username = server.username, password = server.password } = {}) {
  await page.getByLabel('Username').fill(username);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Build a query' }).waitFor();
}
