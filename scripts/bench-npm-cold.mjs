// Cold queries in the npm engine against the native one, same survey, same requests:
//   Survey.crosstab in Node on never-seen targets (each request answered once, so no
//   set the survey caches helps), and the native engine on the same list in a fresh
//   process (`cargo bench -p crosstab-engine --bench peers -- --cold-requests ...`).
// "Cold" is the survey's caches, not V8's: the rounds begin once V8 has compiled the hot
// WebAssembly with its optimizing tier (the first passes' figures are printed too).
// Run by scripts/bench-npm.sh after scripts/build-npm.sh. Target: Node within 2x native.
// Usage: [ROUNDS=5] [PAIRS=41] node scripts/bench-npm-cold.mjs [--json]

import { execFileSync, spawn } from "node:child_process";
import fs from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import readline from "node:readline";

import { OUT, jsonMatches, native } from "../tests/npm/helpers.mjs";

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), "..");
const require = createRequire(import.meta.url);
const pkg = require(path.join(OUT, "package/node/crosstab_wasm.js"));

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "crosstab-bench-cold-"));
native(["demo", dir, "50000"]);
const compiled = path.join(dir, "survey.ctsv");
const toml = fs.readFileSync(path.join(dir, "survey.toml"), "utf8");
const flags = [...toml.matchAll(/name = "(P_[A-Z0-9_]+)"/g)].map((m) => m[1]);

// Every leaf appears once in the whole list: an AGE range no other target uses and a
// flag no other target uses, so each request is cold in a fresh survey.
const request = (targets) => ({ SurveyCode: "DEMO", PopulationBaseCode: "ADULTS", TargetCodes: targets });
const ages = [];
for (let low = 18; low < 90; low++) for (let high = low + 5; high < 90; high += 7) ages.push([low, high]);
const target = (i) => {
  const [low, high] = ages[(i * 7919) % ages.length];
  return `AGE BETWEEN ${low} AND ${high} AND ${flags[i]} = ${i % 2}`;
};
const count = Math.min(flags.length - 1, 240);
const requests = [];
for (let i = 0; i + 1 < count; i += 2) requests.push(request([target(i), target(i + 1)]));
const warmup = [request(["GENDER = 2", "EDUCATION >= 3"]), request(["INCOME BETWEEN 2 AND 5"])];
const file = path.join(dir, "requests.json");
fs.writeFileSync(file, JSON.stringify({ warmup, requests }));

const bytes = fs.readFileSync(compiled);
const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];

// The list once on a fresh survey, whose caches have seen none of it (after the warm-up
// requests, untimed): the median µs per request, and the answers.
function pass() {
  const survey = pkg.Survey.fromCompiled(bytes);
  for (const r of warmup) survey.crosstab(r);
  const times = [];
  const responses = [];
  for (const r of requests) {
    const start = process.hrtime.bigint();
    const response = survey.crosstab(r);
    times.push(Number(process.hrtime.bigint() - start) / 1000);
    responses.push(response);
  }
  survey.free();
  return { us: median(times), responses };
}

// V8 runs new WebAssembly on its baseline compiler and moves each function to its
// optimizing tier only once it has run hot for a while (here, after three or four
// hundred requests), compiling it on a background thread meanwhile. The figure is the
// engine's once V8 has settled (as in a page that has answered a few hundred requests;
// the native engine is compiled ahead of time), so eight passes over the list (about 800
// requests) run first, each followed by a quarter of a second for those compilations.
const pause = (ms) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
const jitPasses = Array.from({ length: 8 }, () => {
  const { us } = pass();
  pause(250);
  return us;
});

// One round of each side: Node (a pass), then native in a fresh process (with `passes`,
// that many more passes on fresh surveys in the same process after its timed one).
function nativeRound(passes = 0) {
  const cargo = execFileSync(
    "cargo",
    ["bench", "--quiet", "-p", "crosstab-engine", "--bench", "peers", "--", "--cold-requests", file, "--compiled", compiled, "--passes", String(passes)],
    { cwd: ROOT, encoding: "utf8", maxBuffer: 64 * 1024 * 1024, stdio: ["ignore", "pipe", "inherit"] },
  );
  return JSON.parse(cargo.trim().split("\n").pop());
}

// The host's speed drifts by tens of percent within a minute: the sides take turns, and
// each figure is the median over the rounds, so a slow spell skews neither alone.
const rounds = Number(process.env.ROUNDS ?? 5);
const perRound = [];
let same = true;
for (let round = 0; round < rounds; round++) {
  const node = pass();
  const nat = nativeRound();
  same &&= node.responses.every((r, i) => jsonMatches(nat.responses[i], r));
  perRound.push({ node: node.us, native: nat.validateAndEngineUs, engine: nat.engineUs });
}
// Native once its process has settled too (Node's passes come after eight others): the
// median of 15 passes on fresh surveys in one process, printed beside the ratio.
const settled = median(nativeRound(15).passesUs);

// Pass by pass: a native process kept running answers the list on a fresh survey each
// time it is asked, in turn with Node's passes (each side first in every other pair), so
// the two figures of a pair are taken milliseconds apart, at the same speed of the host,
// whose slow and fast spells last seconds and differ by up to 2x. Both sides have settled:
// the native process answers a few untimed passes first, as Node did.
async function pairedPasses(count) {
  const child = spawn(
    "cargo",
    ["bench", "--quiet", "-p", "crosstab-engine", "--bench", "peers", "--", "--cold-requests", file, "--compiled", compiled, "--serve"],
    { cwd: ROOT, stdio: ["pipe", "pipe", "inherit"] },
  );
  const waiting = [];
  let gone = null;
  const stop = (reason) => {
    gone ??= reason;
    waiting.splice(0).forEach(({ reject }) => reject(new Error(`the native side stopped: ${gone}`)));
  };
  readline.createInterface({ input: child.stdout }).on("line", (line) => {
    const next = waiting.shift();
    if (!next) return stop(`it printed a line nobody asked for: ${line}`);
    try {
      next.resolve(JSON.parse(line).us);
    } catch {
      next.reject(new Error(`the native side printed ${line}`));
    }
  });
  child.stdin.on("error", (error) => stop(error.message));
  const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve(code ?? signal)));
  exited.then((code) => stop(`exit ${code}`));
  const nativePass = () => {
    if (gone) return Promise.reject(new Error(`the native side stopped: ${gone}`));
    const answer = new Promise((resolve, reject) => waiting.push({ resolve, reject }));
    child.stdin.write("pass\n");
    return answer;
  };
  const pairs = [];
  try {
    for (let i = 0; i < 3; i++) await nativePass();
    for (let i = 0; i < count; i++) {
      if (i % 2) {
        const node = pass().us;
        pairs.push({ node, native: await nativePass() });
      } else {
        const native = await nativePass();
        pairs.push({ node: pass().us, native });
      }
    }
  } finally {
    child.stdin.end();
  }
  const code = await exited;
  if (code !== 0) throw new Error(`the native side ended with ${code}`);
  return pairs;
}
const pairCount = Number(process.env.PAIRS ?? 41);
if (!Number.isInteger(pairCount) || pairCount < 1) throw new Error(`PAIRS must be a whole number above 0, not ${process.env.PAIRS}`);
const pairs = await pairedPasses(pairCount);
const pairRatios = pairs.map((p) => p.node / p.native).sort((a, b) => a - b);
const quartile = (q) => pairRatios[Math.floor(q * (pairRatios.length - 1))];
fs.rmSync(dir, { recursive: true, force: true });
const nodeUs = median(perRound.map((r) => r.node));
const nativeUs = median(perRound.map((r) => r.native));

const result = {
  node: process.version,
  requests: requests.length,
  rounds,
  nodeUs,
  nativeValidateAndEngineUs: nativeUs,
  nativeEngineUs: median(perRound.map((r) => r.engine)),
  ratio: nodeUs / nativeUs,
  nativeSettledUs: settled,
  pairedRatio: median(pairRatios),
  pairedQuartiles: [quartile(0.25), quartile(0.75)],
  pairs,
  perRound,
  jitPasses,
  same,
};
if (process.argv.includes("--json")) {
  console.log(JSON.stringify(result, null, 2));
} else {
  const f = (x) => x.toFixed(2).padStart(8);
  console.log(
    `Survey.crosstab, cold (2 never-seen targets of 2 clauses each, 50,000-respondent demo, median of ${requests.length} requests, median of ${rounds} rounds taken in turn):`,
  );
  console.log(
    `  V8 settling first: ${jitPasses.length} passes over the list, medians ${jitPasses.map((x) => x.toFixed(1)).join(" ")} µs (the first is the baseline tier's figure)`,
  );
  console.log(
    `  Node ${f(nodeUs)} µs | native validate+crosstab ${f(nativeUs)} µs (crosstab alone ${f(result.nativeEngineUs)} µs) | ratio ${result.ratio.toFixed(2)}x (target <= 2; rounds: ${perRound.map((r) => (r.node / r.native).toFixed(2)).join(" ")}) | same figures: ${same}`,
  );
  console.log(
    `  native validate+crosstab once its process has settled (median of 15 passes on fresh surveys): ${f(settled)} µs; Node ÷ that ${(nodeUs / settled).toFixed(2)}x`,
  );
  console.log(
    `  pass by pass, both settled (${pairs.length} pairs, a Node pass beside a native pass on a fresh survey, milliseconds apart): Node ${f(median(pairs.map((p) => p.node)))} µs, native ${f(median(pairs.map((p) => p.native)))} µs, Node ÷ native ${result.pairedRatio.toFixed(2)}x (median of the pairs' ratios; quartiles ${result.pairedQuartiles.map((x) => x.toFixed(2)).join("-")}; target <= 2)`,
  );
}
if (!same) process.exit(1);
