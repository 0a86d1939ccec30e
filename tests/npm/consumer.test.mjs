// The packed tarball used as a user would: installed into a fresh project, loaded from
// ESM and from CommonJS (both entries), the web build initialized by hand, and a
// TypeScript consumer type-checked with `tsc --noEmit`.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import test from "node:test";

import { ROOT, project, vectorSurveySource } from "./helpers.mjs";

const REQUEST = { SurveyCode: "VEC", PopulationBaseCode: "ALL", TargetCodes: ["F2554"] };

function run(dir, file, source) {
  fs.writeFileSync(path.join(dir, file), source);
  return execFileSync(process.execPath, [file], { cwd: dir, encoding: "utf8" }).trim();
}

test("the package installs with the files, exports and types it declares", () => {
  const dir = project();
  const pkgDir = path.join(dir, "node_modules/crosstab-wasm");
  const pkg = JSON.parse(fs.readFileSync(path.join(pkgDir, "package.json"), "utf8"));
  assert.equal(pkg.name, "crosstab-wasm");
  assert.ok(pkg.exports["."].node && pkg.exports["."].browser && pkg.exports["./validator"]);
  assert.ok(fs.existsSync(path.join(pkgDir, pkg.types)));
  for (const file of pkg.files) assert.ok(fs.existsSync(path.join(pkgDir, file)), file);
  assert.ok(fs.readFileSync(path.join(pkgDir, "README.md"), "utf8").includes("validateRequest"));
});

test("ESM import of both entries", () => {
  const dir = project();
  const out = run(
    dir,
    "esm-consumer.mjs",
    `import { validateRequest, contractVersion, Survey, CrosstabError } from "crosstab-wasm";
import * as validator from "crosstab-wasm/validator";
const ok = validateRequest(${JSON.stringify(REQUEST)});
const bad = validator.validateRequest({ SurveyCode: "VEC" });
let thrown;
try { validator.validateJson({}); } catch (error) { thrown = error; }
console.log(JSON.stringify({ ok: ok.ok, bad: bad.status, version: contractVersion(),
  survey: typeof Survey, validatorSurvey: typeof validator.Survey, same: validator.contractVersion() === contractVersion(),
  instance: thrown instanceof CrosstabError && thrown instanceof validator.CrosstabError }));`,
  );
  assert.deepEqual(JSON.parse(out), {
    ok: true,
    bad: 400,
    version: "1.0.0",
    survey: "function",
    validatorSurvey: "undefined",
    same: true,
    instance: true,
  });
});

test("the README's browser code runs in Node as it is: default init and initSync", () => {
  const dir = project();
  const out = run(
    dir,
    "init-consumer.mjs",
    `import init, { initSync, validateRequest } from "crosstab-wasm";
import initValidator, { initSync as syncValidator, validateRequest as check } from "crosstab-wasm/validator";
await init();
initSync();
await initValidator();
syncValidator();
console.log(JSON.stringify({ full: validateRequest(${JSON.stringify(REQUEST)}).ok, validator: check({}).status }));`,
  );
  assert.deepEqual(JSON.parse(out), { full: true, validator: 400 });
});

test("CommonJS require of both entries, with a survey", () => {
  const dir = project();
  const source = path.join(ROOT, "tests/vectors/survey");
  const out = run(
    dir,
    "cjs-consumer.cjs",
    `const fs = require("fs");
const { Survey, parseResponse, CrosstabError } = require("crosstab-wasm");
const { validateRequest, validateJson } = require("crosstab-wasm/validator");
let thrown;
try { validateJson({}); } catch (error) { thrown = error; }
const survey = Survey.fromCsv(fs.readFileSync(${JSON.stringify(source + "/survey.toml")}, "utf8"),
  fs.readFileSync(${JSON.stringify(source + "/respondents.csv")}, "utf8"));
const request = validateRequest(${JSON.stringify(REQUEST)}).request;
const response = survey.crosstab(request);
console.log(JSON.stringify({ kind: parseResponse(200, response, request).kind, results: response.Results,
  instance: thrown instanceof CrosstabError }));`,
  );
  const parsed = JSON.parse(out);
  assert.equal(parsed.kind, "success");
  assert.equal(parsed.instance, true);
  assert.deepEqual(parsed.results, [{ WgtAud: 10.5, Resps: 4, Stbl: 0 }]);
});

test("the web build initializes from bytes (initSync) and answers the same", async () => {
  const dir = project();
  for (const sub of ["web", "validator/web"]) {
    const base = path.join(dir, "node_modules/crosstab-wasm", sub);
    const web = await import(path.join(base, "crosstab_wasm.js"));
    web.initSync({ module: fs.readFileSync(path.join(base, "crosstab_wasm_bg.wasm")) });
    const outcome = web.validateRequest({ ...REQUEST, TargetCodes: [] });
    assert.equal(outcome.ok, false);
    assert.equal(outcome.body.error.code, "invalid_target_codes");
    assert.equal(typeof web.default, "function", "web build exports its async init");
    assert.throws(() => web.validateJson({}), (error) => error instanceof web.CrosstabError && error.code === "invalid_argument");
    if (sub === "web") {
      // The engine's web glue says a freed survey as the Node one does.
      const { toml, csv } = vectorSurveySource();
      const survey = web.Survey.fromCsv(toml, csv);
      survey.free();
      survey.free();
      assert.throws(() => survey.crosstab(REQUEST), { name: "CrosstabError", code: "survey_freed" });
      assert.throws(() => survey.crosstab(REQUEST), web.CrosstabError);
    }
  }
});

test("a TypeScript consumer type-checks with tsc --noEmit", () => {
  const dir = project();
  fs.copyFileSync(path.join(ROOT, "tests/npm/consumer.ts"), path.join(dir, "consumer.ts"));
  fs.copyFileSync(path.join(ROOT, "tests/npm/consumer-init.mts"), path.join(dir, "consumer-init.mts"));
  // The README's own usage example, as a reader would paste it (its key declared).
  const readme = fs.readFileSync(path.join(dir, "node_modules/crosstab-wasm/README.md"), "utf8");
  const example = readme.split("## Usage")[1].match(/```js\n([\s\S]*?)```/)[1];
  fs.writeFileSync(path.join(dir, "readme-example.mts"), `declare const apiKey: string;\n${example}`);
  fs.writeFileSync(
    path.join(dir, "tsconfig.json"),
    JSON.stringify({
      compilerOptions: {
        target: "es2022",
        module: "nodenext",
        moduleResolution: "nodenext",
        strict: true,
        noEmit: true,
        skipLibCheck: false,
        types: [],
      },
      files: ["consumer.ts", "consumer-init.mts", "readme-example.mts"],
    }),
  );
  try {
    execFileSync(path.join(dir, "node_modules/.bin/tsc"), ["--noEmit", "-p", "."], {
      cwd: dir,
      encoding: "utf8",
    });
  } catch (error) {
    assert.fail(`tsc failed:\n${error.stdout}${error.stderr}`);
  }
  // A browser/bundler consumer resolves the web entry (async init) under `bundler`.
  fs.copyFileSync(path.join(ROOT, "tests/npm/consumer-web.ts"), path.join(dir, "consumer-web.ts"));
  fs.writeFileSync(
    path.join(dir, "tsconfig.web.json"),
    JSON.stringify({
      compilerOptions: { target: "es2022", module: "esnext", moduleResolution: "bundler", lib: ["es2022", "dom"], strict: true, noEmit: true, types: [] },
      files: ["consumer-web.ts"],
    }),
  );
  try {
    execFileSync(path.join(dir, "node_modules/.bin/tsc"), ["--noEmit", "-p", "tsconfig.web.json"], { cwd: dir, encoding: "utf8" });
  } catch (error) {
    assert.fail(`tsc (bundler resolution, web entry) failed:\n${error.stdout}${error.stderr}`);
  }
  // The check has teeth: a wrong use fails.
  fs.writeFileSync(
    path.join(dir, "wrong.ts"),
    `import { validateRequest } from "crosstab-wasm";
const v = validateRequest({});
if (v.ok) { const n: number = v.request.SurveyCode; console.log(n); }
`,
  );
  assert.throws(
    () =>
      execFileSync(path.join(dir, "node_modules/.bin/tsc"), ["--noEmit", "--strict", "--module", "nodenext", "--moduleResolution", "nodenext", "--target", "es2022", "wrong.ts"], {
        cwd: dir,
        encoding: "utf8",
        stdio: "pipe",
      }),
    (error) => {
      const output = `${error.stdout}${error.stderr}`;
      assert.match(output, /wrong\.ts.*TS2322/);
      assert.doesNotMatch(output, /node_modules/);
      return true;
    },
  );
});
