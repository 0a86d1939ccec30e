// Shared set-up for the npm package tests: the packed tarball installed into a fresh
// temporary project (once per tarball, shared by the test files), the shared vectors, the
// native parity helper. Run `bash scripts/build-npm.sh` first.

import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import fs from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
export const OUT = process.env.CROSSTAB_NPM_OUT ?? path.join(ROOT, "target/npm");
export const VECTORS = path.join(ROOT, "tests/vectors");
export const NATIVE = path.join(OUT, "native_crosstab");
// TypeScript for the consumer type check; 5.x is the JS compiler `tsc --noEmit` needs.
export const TYPESCRIPT = "typescript@5";

export function tarball() {
  const found = fs.existsSync(OUT)
    ? fs.readdirSync(OUT).filter((f) => /^crosstab-wasm-.*\.tgz$/.test(f))
    : [];
  if (found.length !== 1) {
    throw new Error(`expected one crosstab-wasm-*.tgz in ${OUT}; run bash scripts/build-npm.sh`);
  }
  return path.join(OUT, found[0]);
}

function npm(args, cwd) {
  execFileSync("npm", [...args, "--no-audit", "--no-fund", "--prefer-offline", "--loglevel=error"], {
    cwd,
    stdio: ["ignore", "ignore", "inherit"],
  });
}

/** A fresh project with the tarball (and TypeScript) installed, like a user's: one per
 * test run (the test files of a `node --test` run share the runner as parent process)
 * and tarball; concurrent test files race safely (atomic rename). */
export function project() {
  const tgz = tarball();
  const hash = createHash("sha256").update(fs.readFileSync(tgz)).digest("hex").slice(0, 16);
  const dir = path.join(os.tmpdir(), `crosstab-wasm-consumer-${hash}-${process.ppid}`);
  if (fs.existsSync(path.join(dir, ".ready"))) return dir;
  // Projects of earlier runs, left over for a while so a run in progress keeps its own.
  for (const old of fs.readdirSync(os.tmpdir())) {
    if (!old.startsWith("crosstab-wasm-consumer-")) continue;
    const stale = path.join(os.tmpdir(), old);
    try {
      if (Date.now() - fs.statSync(stale).mtimeMs > 3600_000) fs.rmSync(stale, { recursive: true, force: true });
    } catch {
      // Another run removed it first.
    }
  }
  const work = fs.mkdtempSync(path.join(os.tmpdir(), "crosstab-wasm-install-"));
  fs.writeFileSync(
    path.join(work, "package.json"),
    JSON.stringify({ name: "consumer", private: true, version: "1.0.0" }, null, 2),
  );
  npm(["install", tgz, TYPESCRIPT], work);
  fs.writeFileSync(path.join(work, ".ready"), "");
  try {
    fs.renameSync(work, dir);
  } catch (error) {
    // Another test file won the race: use its project.
    fs.rmSync(work, { recursive: true, force: true });
    if (!fs.existsSync(path.join(dir, ".ready"))) throw error;
  }
  return dir;
}

/** The installed package, loaded as a CommonJS user would (`require`). */
export function requirePackage(entry = "crosstab-wasm") {
  const require = createRequire(path.join(project(), "index.js"));
  return require(entry);
}

/** The installed package, loaded as an ESM user would (`import`). */
export async function importPackage(entry = "crosstab-wasm") {
  const require = createRequire(path.join(project(), "index.js"));
  // Resolve with the package's conditional exports, from the consumer project.
  return import(pathToFileURL(require.resolve(entry)).href);
}

export function loadVectors() {
  return fs
    .readdirSync(VECTORS)
    .filter((f) => f.endsWith(".json"))
    .sort()
    .map((f) => JSON.parse(fs.readFileSync(path.join(VECTORS, f), "utf8")));
}

export function isValidationError(vector) {
  const code = vector.expect?.body?.error?.code;
  return code === "invalid_request" || code === "invalid_target_codes" || code === "payload_too_large";
}

export function vectorSurveySource() {
  return {
    toml: fs.readFileSync(path.join(VECTORS, "survey/survey.toml"), "utf8"),
    csv: fs.readFileSync(path.join(VECTORS, "survey/respondents.csv"), "utf8"),
    tomlPath: path.join(VECTORS, "survey/survey.toml"),
    csvPath: path.join(VECTORS, "survey/respondents.csv"),
  };
}

/** JSON equality with numbers compared numerically (0 equals 0.0), like the Rust tests: within a
 *  relative `tolerance` (1e-12 unless given; 0 for bit for bit). */
export function jsonMatches(expected, actual, tolerance = 1e-12) {
  if (typeof expected === "number" && typeof actual === "number") {
    return expected === actual || Math.abs(expected - actual) <= tolerance * Math.max(Math.abs(expected), Math.abs(actual));
  }
  if (Array.isArray(expected)) {
    return Array.isArray(actual) && expected.length === actual.length && expected.every((e, i) => jsonMatches(e, actual[i], tolerance));
  }
  if (expected && typeof expected === "object") {
    if (!actual || typeof actual !== "object" || Array.isArray(actual)) return false;
    const keys = Object.keys(expected);
    return keys.length === Object.keys(actual).length && keys.every((k) => k in actual && jsonMatches(expected[k], actual[k], tolerance));
  }
  return expected === actual;
}

/** The demo's respondent CSV with each weight a third of its own: full-precision binary
 *  fractions, as raking writes them. Returns the CSV and the new weights in order. */
export function thirdsOf(csv) {
  const weights = [];
  const text = csv
    .split("\n")
    .map((line, at) => {
      if (at === 0 || line === "") return line;
      const [id, weight, ...rest] = line.split(",");
      weights.push(Number(weight) / 3);
      return [id, String(weights.at(-1)), ...rest].join(",");
    })
    .join("\n");
  return { csv: text, weights };
}

/** Runs the native helper (built by the build script) and parses its JSON output. */
export function native(args) {
  if (!fs.existsSync(NATIVE)) throw new Error(`${NATIVE} missing; run bash scripts/build-npm.sh`);
  const out = execFileSync(NATIVE, args, { encoding: "utf8", maxBuffer: 256 * 1024 * 1024 });
  return JSON.parse(out);
}

/** A JS `survey.crosstab` call as `{status, body}`, the way the server would answer. */
export function answer(survey, request) {
  try {
    return { status: 200, body: survey.crosstab(request) };
  } catch (error) {
    if (typeof error?.status !== "number") throw error;
    return { status: error.status, body: error.body };
  }
}
