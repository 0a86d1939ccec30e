// sendCrosstab against the real server (`crosstab serve --demo`, the binary `cargo test`
// built, or CROSSTAB_BIN), through a loopback proxy that loses answers or fails on
// purpose: every retry carries the query's one Idempotency-Key, a lost answer is given
// again from the server's store (Idempotent-Replayed) and each query is billed once.

import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { getEventListeners } from "node:events";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";

import { importPackage } from "./helpers.mjs";

const pkg = await importPackage();
const BIN =
  process.env.CROSSTAB_BIN ??
  path.join(process.env.CARGO_TARGET_DIR ?? path.join(os.homedir(), ".cache/crosstab-target"), "debug/crosstab");
const REQUEST = {
  SurveyCode: "DEMO",
  PopulationBaseCode: "ADULTS",
  AuthorizationGroup: "_ALL_",
  TargetCodes: ["F2554", "GENDER = 2 AND AGE BETWEEN 25 AND 54"],
};

let server;
let proxy;

/** `crosstab serve --demo` on a free loopback port, with its data dir and demo key. */
async function startServer() {
  if (!fs.existsSync(BIN)) throw new Error(`no crosstab binary at ${BIN}: run cargo test (or set CROSSTAB_BIN)`);
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "crosstab-npm-send-"));
  const child = spawn(BIN, ["serve", "--demo", "--data-dir", dataDir, "--listen", "127.0.0.1:0", "--app-dir", dataDir], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  let log = "";
  child.stdout.on("data", (d) => (out += d));
  child.stderr.on("data", (d) => (log += d));
  const deadline = Date.now() + 120_000;
  while (!/crosstab listening on/.test(out)) {
    if (child.exitCode !== null) throw new Error(`crosstab exited ${child.exitCode}: ${log}`);
    if (Date.now() > deadline) throw new Error(`crosstab did not start: ${out}\n${log}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    origin: out.match(/crosstab listening on (http:\/\/\S+)/)[1],
    key: out.match(/demo key: (\S+)/)[1],
    dataDir,
    /** Calls billed to the demo account so far, as `crosstab usage` reports them. */
    billed() {
      const run = spawnSync(BIN, ["usage", "--account", "demo", "--format", "json", "--data-dir", dataDir], {
        encoding: "utf8",
      });
      if (run.status !== 0) throw new Error(`crosstab usage failed: ${run.stderr}`);
      return JSON.parse(run.stdout).reduce((sum, row) => sum + row.calls, 0);
    },
    async stop() {
      child.kill("SIGTERM");
      await new Promise((r) => (child.exitCode !== null ? r() : child.once("exit", r)));
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/**
 * A loopback proxy to `origin` that does to each POST what `plan` says next: "pass",
 * "lose" (the server answers and bills, then the client's connection is cut before the
 * answer), "hold" (the server answers and bills, and the answer is held back: the
 * connection stays open), "stall" (the server is never asked and nothing is answered),
 * or "fail" (a 503 in the contract's envelope, the server never asked). Every POST's
 * Idempotency-Key is kept in `keys`.
 */
async function startProxy(origin) {
  const state = { plan: [], keys: [] };
  const upstream = new URL(origin);
  const proxyServer = http.createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const step = req.method === "POST" ? (state.plan.shift() ?? "pass") : "pass";
      if (req.method === "POST") state.keys.push(req.headers["idempotency-key"]);
      if (step === "stall") return;
      if (step === "fail") {
        const body = JSON.stringify({
          ResultCode: 503,
          ResultDescription: "The service is busy; try again.",
          error: { code: "deadline_exceeded" },
        });
        res.writeHead(503, { "content-type": "application/json" }).end(body);
        return;
      }
      const forward = http.request(
        { host: upstream.hostname, port: upstream.port, path: req.url, method: req.method, headers: req.headers },
        (answer) => {
          const parts = [];
          answer.on("data", (c) => parts.push(c));
          answer.on("end", () => {
            if (step === "lose") {
              req.socket.destroy();
              return;
            }
            if (step === "hold") return;
            res.writeHead(answer.statusCode, answer.headers).end(Buffer.concat(parts));
          });
        },
      );
      forward.on("error", () => req.socket.destroy());
      forward.end(Buffer.concat(chunks));
    });
  });
  await new Promise((r) => proxyServer.listen(0, "127.0.0.1", r));
  state.baseUrl = `http://127.0.0.1:${proxyServer.address().port}/v1`;
  state.stop = () => new Promise((r) => proxyServer.close(r));
  return state;
}

before(async () => {
  server = await startServer();
  proxy = await startProxy(server.origin);
});
after(async () => {
  await proxy?.stop();
  await server?.stop();
});

/** What `promise` rejects with (it must not resolve). */
function rejection(promise) {
  return promise.then(
    (value) => assert.fail(`resolved: ${JSON.stringify(value)}`),
    (error) => error,
  );
}

function options(extra = {}) {
  return { baseUrl: proxy.baseUrl, authorizer: server.key, ...extra };
}

/** The same query sent straight to the server, without a key: its figures. */
async function direct(request) {
  const res = await fetch(`${server.origin}/v1/crosstab`, {
    method: "POST",
    headers: { "content-type": "application/json", "service-engine-authorizer": server.key },
    body: JSON.stringify(request),
  });
  return { status: res.status, body: await res.json() };
}

test("a lost answer is asked for again with the same key, given from the store and billed once", async () => {
  const billed = server.billed();
  proxy.keys.length = 0;
  proxy.plan = ["lose"];
  const sent = await pkg.sendCrosstab(REQUEST, options());
  assert.equal(sent.kind, "success", JSON.stringify(sent));
  assert.equal(sent.attempts, 2);
  assert.equal(sent.replayed, true);
  assert.deepEqual(sent.problems, []);
  assert.equal(proxy.keys.length, 2);
  assert.match(sent.idempotencyKey, /^[0-9a-f]{32}$/);
  assert.deepEqual(proxy.keys, [sent.idempotencyKey, sent.idempotencyKey]);
  assert.equal(server.billed(), billed + 1);
  // The figures are the server's own for this query.
  const straight = await direct(REQUEST);
  assert.deepEqual(sent.response, straight.body);
});

test("a 503 is retried with the same key; each query gets a key of its own", async () => {
  const billed = server.billed();
  proxy.keys.length = 0;
  proxy.plan = ["fail"];
  const first = await pkg.sendCrosstab(REQUEST, options());
  const second = await pkg.sendCrosstab(REQUEST, options());
  assert.equal(first.kind, "success");
  assert.equal(first.attempts, 2);
  assert.equal(first.replayed, false);
  assert.equal(second.attempts, 1);
  assert.notEqual(first.idempotencyKey, second.idempotencyKey);
  assert.deepEqual(proxy.keys, [first.idempotencyKey, first.idempotencyKey, second.idempotencyKey]);
  assert.equal(server.billed(), billed + 2);
});

test("no answer at all: network_error with the key, and sending the query again with it bills nothing more", async () => {
  const billed = server.billed();
  proxy.plan = ["lose", "lose"];
  const lost = await rejection(pkg.sendCrosstab(REQUEST, options({ attempts: 2 })));
  assert.equal(lost.code, "network_error", String(lost));
  assert.match(lost.idempotencyKey, /^[0-9a-f]{32}$/);
  // The server answered (and billed) the first attempt; the answer was lost twice.
  assert.equal(server.billed(), billed + 1);
  const resumed = await pkg.sendCrosstab(REQUEST, options({ idempotencyKey: lost.idempotencyKey }));
  assert.equal(resumed.kind, "success");
  assert.equal(resumed.replayed, true);
  assert.equal(resumed.idempotencyKey, lost.idempotencyKey);
  assert.equal(server.billed(), billed + 1);
});

test("an invalid request is answered as the server answers it, and never sent", async () => {
  const invalid = { ...REQUEST, TargetCodes: ["AGE >"] };
  proxy.keys.length = 0;
  const sent = await pkg.sendCrosstab(invalid, options());
  assert.equal(sent.kind, "badRequest");
  assert.equal(sent.attempts, 0);
  assert.equal(proxy.keys.length, 0);
  const straight = await direct(invalid);
  assert.equal(sent.status, straight.status);
  assert.deepEqual(sent.envelope, straight.body);
});

test("an answer that is not retried ends the query at once: a revoked or wrong key", async () => {
  proxy.keys.length = 0;
  const sent = await pkg.sendCrosstab(REQUEST, options({ authorizer: "ck_live_not_a_key" }));
  assert.equal(sent.kind, "unauthorized");
  assert.equal(sent.attempts, 1);
  assert.equal(proxy.keys.length, 1);
});

test("options are checked before anything is sent", async () => {
  const refused = async (extra) =>
    (await rejection(pkg.sendCrosstab(REQUEST, { ...options(), ...extra }))).code;
  proxy.keys.length = 0;
  assert.equal(await refused({ authorizer: "" }), "invalid_argument");
  // No header carries these: each try would fail as a network error, never sent.
  for (const pasted of ["ck\u200blive", "ck_live\nX-Other: 1", "Bearer tok\u00e9n", " ck_live"]) {
    assert.equal(await refused({ authorizer: pasted }), "invalid_argument", JSON.stringify(pasted));
  }
  assert.equal(await refused({ baseUrl: undefined }), "invalid_argument");
  assert.equal(await refused({ idempotencyKey: " padded" }), "invalid_argument");
  assert.equal(await refused({ idempotencyKey: "x".repeat(256) }), "invalid_argument");
  assert.equal(await refused({ attempts: 0 }), "invalid_argument");
  assert.equal(await refused({ fetch: 42 }), "invalid_argument");
  // A base URL that is no URL would be sent nowhere, each attempt a "lost answer".
  assert.equal(await refused({ baseUrl: "crosstab.example.com/v1" }), "invalid_argument");
  assert.equal(await refused({ baseUrl: "ftp://crosstab.example.com/v1" }), "invalid_argument");
  // A signal that is no AbortSignal would fail only when first needed, after a bill.
  assert.equal(await refused({ signal: { aborted: false } }), "invalid_argument");
  assert.equal(await refused({ timeoutMs: 0 }), "invalid_argument");
  assert.equal(await refused({ timeoutMs: "100" }), "invalid_argument");
  // A getter that throws is a bad option too, a CrosstabError naming it.
  const throwing = Object.defineProperty({ ...options() }, "attempts", {
    get() {
      throw new Error("no attempts today");
    },
  });
  const thrown = await rejection(pkg.sendCrosstab(REQUEST, throwing));
  assert.equal(thrown.name, "CrosstabError");
  assert.equal(thrown.code, "invalid_argument");
  assert.match(thrown.message, /options\.attempts could not be read \(no attempts today\)/);
  assert.equal(proxy.keys.length, 0);
});

test("a fetch that resolves to no Response ends the query at once, not retried as a lost answer", async () => {
  for (const [response, why] of [
    [{}, /status is not an HTTP status code/],
    [{ status: 200.5, headers: new Headers(), text: async () => "{}" }, /status is not an HTTP status code/],
    [{ status: 200, text: async () => "{}" }, /headers\.get\(name\) failed/],
    [{ status: 200, headers: new Headers() }, /text\(\) is not a method/],
    [{ status: 200, headers: new Headers(), text: async () => 42 }, /text\(\) gave no string/],
  ]) {
    let calls = 0;
    const fetch = async () => {
      calls += 1;
      return response;
    };
    const thrown = await rejection(pkg.sendCrosstab(REQUEST, options({ fetch, idempotencyKey: "k-1" })));
    assert.equal(thrown.name, "CrosstabError");
    assert.equal(thrown.code, "invalid_argument", thrown.message);
    assert.match(thrown.message, why);
    assert.equal(thrown.idempotencyKey, "k-1", "the query may have been sent");
    assert.equal(calls, 1, "not tried again");
  }
  // A body that breaks off is a lost answer, tried again.
  let calls = 0;
  const breaking = async () => {
    calls += 1;
    return { status: 200, headers: new Headers(), text: async () => { throw new TypeError("terminated"); } };
  };
  const lost = await rejection(pkg.sendCrosstab(REQUEST, options({ fetch: breaking, attempts: 2, longestWaitMs: 10_000 })));
  assert.equal(lost.code, "network_error");
  assert.equal(calls, 2);
});

test("a fetch that throws instead of returning a promise ends the query at once, with its key", async () => {
  let calls = 0;
  const throwing = () => {
    calls += 1;
    throw new TypeError("a wrapper's own bug");
  };
  const thrown = await rejection(pkg.sendCrosstab(REQUEST, options({ fetch: throwing, idempotencyKey: "k-2" })));
  assert.equal(thrown.code, "invalid_argument");
  assert.match(thrown.message, /options\.fetch threw \(a wrapper's own bug\)/);
  assert.equal(thrown.idempotencyKey, "k-2");
  assert.equal(calls, 1, "not tried again");
});

test("an attempt without its answer within timeoutMs is abandoned and tried again, with the same key", async () => {
  const billed = server.billed();
  proxy.keys.length = 0;
  proxy.plan = ["stall"];
  const started = Date.now();
  const answer = await pkg.sendCrosstab(REQUEST, options({ timeoutMs: 300 }));
  assert.equal(answer.kind, "success");
  assert.equal(answer.attempts, 2);
  assert.ok(Date.now() - started >= 300, "the first attempt was given its 300 ms");
  assert.deepEqual(proxy.keys, [answer.idempotencyKey, answer.idempotencyKey]);
  assert.equal(server.billed(), billed + 1, "the stalled attempt never reached the server");
  // Stalled every time: a network_error that says so, with the key.
  proxy.plan = ["stall", "stall"];
  const lost = await rejection(pkg.sendCrosstab(REQUEST, options({ timeoutMs: 100, attempts: 2 })));
  assert.equal(lost.code, "network_error");
  assert.match(lost.message, /no whole answer within 100 ms/);
  assert.match(lost.idempotencyKey, /^[0-9a-f]{32}$/);
});

test("a fetch that ignores the signal still ends on time, by timeoutMs or by an abort", async () => {
  // Never settles, whatever its init.signal does (an old wrapper, a stub).
  const deaf = () => new Promise(() => {});
  const lost = await rejection(pkg.sendCrosstab(REQUEST, options({ fetch: deaf, timeoutMs: 100, attempts: 2 })));
  assert.equal(lost.code, "network_error");
  assert.match(lost.message, /no whole answer within 100 ms/);
  const controller = new AbortController();
  const sending = pkg.sendCrosstab(REQUEST, options({ fetch: deaf, signal: controller.signal }));
  setTimeout(() => controller.abort(new Error("enough")), 50);
  const aborted = await rejection(sending);
  assert.equal(aborted.code, "aborted");
  assert.match(aborted.message, /may have reached the service/);
  // A body that never ends is cut off the same way.
  const endless = async () => ({ status: 200, headers: new Headers(), text: () => new Promise(() => {}) });
  const cut = await rejection(pkg.sendCrosstab(REQUEST, options({ fetch: endless, timeoutMs: 100, attempts: 1 })));
  assert.equal(cut.code, "network_error");
});

test("a path for a base URL is taken with the caller's own fetch (server-side rendering), refused without", async () => {
  const urls = [];
  const framework = async (url) => {
    urls.push(url);
    return new Response(JSON.stringify({ ResultCode: 503, ResultDescription: "Busy.", error: { code: "unavailable" } }), {
      status: 503,
      headers: { "content-type": "application/json" },
    });
  };
  const answer = await pkg.sendCrosstab(REQUEST, options({ baseUrl: "/api/v1", fetch: framework, attempts: 1 }));
  assert.equal(answer.kind, "serverError");
  assert.deepEqual(urls, ["/api/v1/crosstab"]);
  const refused = await rejection(pkg.sendCrosstab(REQUEST, options({ baseUrl: "/api/v1" })));
  assert.equal(refused.code, "invalid_argument");
});

test("an abort while the answer is on its way is an aborted error with the key, which resumes it unbilled", async () => {
  const billed = server.billed();
  proxy.plan = ["hold"];
  proxy.keys.length = 0;
  const controller = new AbortController();
  const sending = pkg.sendCrosstab(REQUEST, options({ signal: controller.signal }));
  // The server has answered and billed; its answer is held back by the proxy.
  while (server.billed() === billed) await new Promise((r) => setTimeout(r, 20));
  const reason = new Error("the researcher closed the tab");
  controller.abort(reason);
  const aborted = await rejection(sending);
  assert.equal(aborted.name, "CrosstabError");
  assert.equal(aborted.code, "aborted");
  assert.equal(aborted.cause, reason);
  assert.equal(aborted.idempotencyKey, proxy.keys[0]);
  const resumed = await pkg.sendCrosstab(REQUEST, options({ idempotencyKey: aborted.idempotencyKey }));
  assert.equal(resumed.replayed, true);
  assert.equal(server.billed(), billed + 1, "billed once");
});

test("an abort ends the query: before it is sent, and while it waits to retry", async () => {
  const before = new AbortController();
  const reason = new Error("the researcher gave up");
  before.abort(reason);
  proxy.keys.length = 0;
  const early = await rejection(pkg.sendCrosstab(REQUEST, options({ signal: before.signal })));
  assert.equal(early.code, "aborted");
  assert.match(early.message, /before it was sent/);
  assert.equal(early.cause, reason);
  assert.equal(proxy.keys.length, 0);
  // A 503 (answered at once), then the backoff's wait of 125 to 250 ms: an abort 40 ms
  // after the attempt lands in the wait, which must end then, not 85 ms or more later.
  proxy.plan = ["fail"];
  const during = new AbortController();
  const waiting = pkg.sendCrosstab(REQUEST, options({ signal: during.signal }));
  while (proxy.keys.length === 0) await new Promise((r) => setTimeout(r, 1));
  await new Promise((r) => setTimeout(r, 40));
  const started = Date.now();
  during.abort(reason);
  const late = await rejection(waiting);
  assert.equal(late.code, "aborted");
  assert.equal(late.cause, reason);
  assert.ok(Date.now() - started < 60, `the wait went on ${Date.now() - started} ms after the abort`);
  assert.equal(proxy.keys.length, 1, "no attempt after the abort");
  // A reason given as text is said as given.
  const said = await rejection(pkg.sendCrosstab(REQUEST, options({ signal: AbortSignal.abort("user left") })));
  assert.match(said.message, /user left/);
  assert.equal(said.cause, "user left");
});

test("a signal kept for many queries gathers no listeners, whichever ends each wait", async () => {
  // Each attempt's fetch gets a signal of its own (its deadline), listening to the
  // caller's only while the attempt lasts; each wait listens only while it waits.
  const kept = new AbortController();
  for (let query = 0; query < 3; query++) {
    proxy.plan = ["fail", "fail"];
    const answer = await pkg.sendCrosstab(REQUEST, options({ signal: kept.signal }));
    assert.equal(answer.attempts, 3);
  }
  assert.equal(getEventListeners(kept.signal, "abort").length, 0);
});

test("a last attempt without an answer is a network_error even after earlier answers; its key resumes it", async () => {
  const billed = server.billed();
  proxy.plan = ["fail", "lose"];
  const lost = await rejection(pkg.sendCrosstab(REQUEST, options({ attempts: 2 })));
  assert.equal(lost.code, "network_error");
  // The second attempt was answered and billed, its answer lost on the way back.
  assert.equal(server.billed(), billed + 1);
  const resumed = await pkg.sendCrosstab(REQUEST, options({ idempotencyKey: lost.idempotencyKey }));
  assert.equal(resumed.replayed, true);
  assert.equal(server.billed(), billed + 1);
});
