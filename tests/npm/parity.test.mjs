// Parity: the same surveys and requests through Survey.crosstab in Node (WASM) and the
// native engine (crates/wasm/examples/native_crosstab.rs, built by the build script)
// give identical WgtAud, Resps and Stbl — compared with ===, not within a tolerance.

import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import test from "node:test";

import { answer, jsonMatches, loadVectors, native, requirePackage, vectorSurveySource } from "./helpers.mjs";

const pkg = requirePackage();

function compare(label, requests, jsAnswers, nativeAnswers) {
  assert.equal(jsAnswers.length, nativeAnswers.length);
  const failures = [];
  let figures = 0;
  requests.forEach((request, i) => {
    const js = jsAnswers[i];
    const nat = nativeAnswers[i];
    if (js.status !== nat.status) {
      failures.push(`${label} ${JSON.stringify(request)}: status ${js.status} vs native ${nat.status}`);
      return;
    }
    if (js.status !== 200) {
      if (!jsonMatches(nat.body, js.body)) failures.push(`${label} ${JSON.stringify(request)}: envelope differs`);
      return;
    }
    // The answer is built in JS from the figures, not parsed from the server's JSON: the
    // same members as native's (whose JSON helper sorts them), in the order of the
    // contract's type (as the package's parseResponse writes it back).
    const members = (o, order = (keys) => keys) =>
      JSON.stringify([order(Object.keys(o)), ...(o.Results ?? []).map((r) => order(Object.keys(r)))]);
    const sorted = (keys) => [...keys].sort();
    const typed = pkg.parseResponse(200, js.body).response;
    if (members(js.body, sorted) !== members(nat.body, sorted) || !typed || members(js.body) !== members(typed)) {
      failures.push(`${label} ${JSON.stringify(request)}: members ${members(js.body)} vs ${typed ? members(typed) : "unparsed"}`);
      return;
    }
    for (const key of ["ResultCode", "ResultDescription", "AudienceReportUnits"]) {
      if (js.body[key] !== nat.body[key]) failures.push(`${label} ${JSON.stringify(request)}: ${key}`);
    }
    js.body.Results.forEach((r, j) => {
      const n = nat.body.Results[j];
      figures++;
      if (!(r.WgtAud === n.WgtAud && r.Resps === n.Resps && r.Stbl === n.Stbl)) {
        failures.push(`${label} ${JSON.stringify(request)}[${j}]: ${JSON.stringify(r)} vs native ${JSON.stringify(n)}`);
      }
    });
  });
  assert.deepEqual(failures, []);
  return figures;
}

function tmp(name) {
  return fs.mkdtempSync(path.join(os.tmpdir(), `crosstab-parity-${name}-`));
}

test("vector survey: every vector request, Node vs native", () => {
  const { Survey } = requirePackage();
  const { toml, csv, tomlPath, csvPath } = vectorSurveySource();
  // Raw-text vectors (a member named twice) have no JS value to send.
  const requests = loadVectors()
    .filter((v) => v.body === undefined)
    .map((v) => v.request);
  const dir = tmp("vectors");
  fs.writeFileSync(path.join(dir, "requests.json"), JSON.stringify(requests));
  const nat = native(["crosstab", tomlPath, csvPath, path.join(dir, "requests.json")]);
  const survey = Survey.fromCsv(toml, csv);
  const figures = compare("vectors", requests, requests.map((r) => answer(survey, r)), nat);
  assert.ok(figures > 10);
  survey.free();
  fs.rmSync(dir, { recursive: true, force: true });
});

test("demo survey (20,000 respondents): codes x bases x groups and expressions, Node vs native, from CSV and from compiled bytes", () => {
  const { Survey } = requirePackage();
  const dir = tmp("demo");
  native(["demo", dir, "20000"]);
  const toml = fs.readFileSync(path.join(dir, "survey.toml"), "utf8");
  const csv = fs.readFileSync(path.join(dir, "respondents.csv"), "utf8");
  const fromCsv = Survey.fromCsv(toml, csv);
  const fromCompiled = Survey.fromCompiled(fs.readFileSync(path.join(dir, "survey.ctsv")));
  const codebook = fromCsv.codebook();
  assert.deepEqual(fromCompiled.codebook(), codebook);
  assert.equal(codebook.respondents, 20000);
  // The file's checksum, the same whether compiled here from the CSV or natively.
  assert.match(codebook.dataVersion, /^[0-9a-f]{32}$/);
  // Per-group totals depend on a caller's grant: only the app backend adds them.
  assert.ok(codebook.bases.every((b) => !("groupTotals" in b)));

  const groups = [undefined, "_ALL_", ...codebook.groups.map((g) => g.value), "NOSUCHGROUP"];
  const codes = codebook.codes.map((c) => c.code);
  const flags = codebook.variables.filter((v) => v.distinct <= 2).slice(0, 12).map((v) => `${v.name} = 1`);
  const numeric = codebook.variables.filter((v) => v.distinct > 2 && v.min !== undefined).slice(0, 4);
  // The numeric variable of the most values (AGE in the demo), for lists of separate codes.
  const wide = codebook.variables
    .filter((v) => v.min !== undefined)
    .reduce((a, b) => (b.max - b.min > a.max - a.min ? b : a));
  assert.ok(wide.max - wide.min >= 20, `${wide.name} spans too few values for the lists`);
  const expressions = [
    ...flags,
    ...numeric.map((v) => `${v.name} BETWEEN ${v.min} AND ${(v.min + v.max) / 2}`),
    ...numeric.map((v) => `NOT ${v.name} > ${v.min}`),
    `(${flags[0]} AND ${flags[1]}) OR NOT ${flags[2]}`,
    // Conjunctions of byte-coded comparisons, each leaf ANDing its mask words into the
    // block: two ranges, a code and two ranges (!=), three leaves, under NOT.
    `${numeric[0].name} BETWEEN ${numeric[0].min} AND ${(numeric[0].min + numeric[0].max) / 2} AND ${numeric[1].name} >= ${numeric[1].min + 1}`,
    `${flags[3]} AND ${numeric[2].name} != ${numeric[2].min + 1}`,
    `${flags[4]} AND ${flags[5]} AND ${numeric[3].name} <= ${(numeric[3].min + numeric[3].max) / 2}`,
    `NOT (${flags[6]} AND ${numeric[1].name} < ${numeric[1].max})`,
    // Byte codes against one code and against three, four and five separate runs (each
    // count of ranges has a SIMD kernel of its own; five take the per-code table).
    `${wide.name} = ${wide.min + 2}`,
    ...[3, 4, 5].map((n) => `${wide.name} IN (${Array.from({ length: n }, (_, i) => wide.min + 2 + 4 * i).join(", ")})`),
    "NOSUCHVARIABLE = 1",
  ];
  const requests = [];
  for (const base of [...codebook.bases.map((b) => b.code), "NOSUCHBASE"]) {
    for (const group of groups) {
      for (let i = 0; i < codes.length; i += 2) {
        const request = { SurveyCode: codebook.code, PopulationBaseCode: base, TargetCodes: codes.slice(i, i + 2) };
        if (group !== undefined) request.AuthorizationGroup = group;
        requests.push(request);
      }
      for (const expression of expressions) {
        const request = { SurveyCode: codebook.code, PopulationBaseCode: base, TargetCodes: [expression] };
        if (group !== undefined) request.AuthorizationGroup = group;
        requests.push(request);
      }
    }
  }
  fs.writeFileSync(path.join(dir, "requests.json"), JSON.stringify(requests));
  const nat = native(["crosstab", path.join(dir, "survey.toml"), path.join(dir, "respondents.csv"), path.join(dir, "requests.json")]);
  const a = compare("demo csv", requests, requests.map((r) => answer(fromCsv, r)), nat);
  const b = compare("demo compiled", requests, requests.map((r) => answer(fromCompiled, r)), nat);
  assert.equal(a, b);
  assert.ok(a > 500, `only ${a} figures compared`);
  // Both stable and unstable results were exercised.
  const stbls = new Set(nat.filter((x) => x.status === 200).flatMap((x) => x.body.Results.map((r) => r.Stbl)));
  assert.deepEqual([...stbls].sort(), [0, 1]);
  fromCsv.free();
  fromCompiled.free();
  fs.rmSync(dir, { recursive: true, force: true });
});

test("full-precision weights (summed in f64, not as decimals): Node vs native, bit for bit", () => {
  const { Survey } = requirePackage();
  const dir = tmp("f64");
  native(["demo", dir, "20000"]);
  const toml = fs.readFileSync(path.join(dir, "survey.toml"), "utf8");
  const weightColumn = toml.match(/^weight_column\s*=\s*"([^"]+)"/m)[1];
  const [header, ...rows] = fs.readFileSync(path.join(dir, "respondents.csv"), "utf8").trimEnd().split("\n");
  assert.ok(!header.includes('"') && rows.every((r) => !r.includes('"')), "the demo CSV has quoted fields");
  const w = header.split(",").indexOf(weightColumn);
  assert.ok(w >= 0, `no ${weightColumn} column`);
  // Weights of 16 to 17 significant digits (as a raking program writes them): too many
  // decimals for the decimal planes, so every path sums them from binary planes.
  let state = 0x2545f491n;
  const next = () => {
    state = (state * 6364136223846793005n + 1442695040888963407n) & 0xffffffffffffffffn;
    return Number(state >> 11n) / 2 ** 53;
  };
  const weights = rows.map(() => 0.25 + 3 * next());
  const csv = [header, ...rows.map((row, i) => {
    const fields = row.split(",");
    fields[w] = String(weights[i]);
    return fields.join(",");
  })].join("\n") + "\n";
  assert.ok(weights.filter((x) => String(x).replace(/^0\./, "").length >= 15).length > 19000);
  fs.writeFileSync(path.join(dir, "respondents.csv"), csv);
  const survey = Survey.fromCsv(toml, csv);
  const codebook = survey.codebook();
  const codes = codebook.codes.map((c) => c.code);
  const requests = [];
  for (const base of codebook.bases.map((b) => b.code)) {
    for (const group of [undefined, ...codebook.groups.map((g) => g.value)]) {
      for (let i = 0; i < codes.length; i += 2) {
        const request = { SurveyCode: codebook.code, PopulationBaseCode: base, TargetCodes: codes.slice(i, i + 2) };
        if (group !== undefined) request.AuthorizationGroup = group;
        requests.push(request);
      }
    }
  }
  fs.writeFileSync(path.join(dir, "requests.json"), JSON.stringify(requests));
  const nat = native(["crosstab", path.join(dir, "survey.toml"), path.join(dir, "respondents.csv"), path.join(dir, "requests.json")]);
  const figures = compare("full-precision weights", requests, requests.map((r) => answer(survey, r)), nat);
  assert.ok(figures > 100, `only ${figures} figures compared`);
  // The sums are not short decimals: the binary planes answered.
  const sums = nat.filter((x) => x.status === 200).flatMap((x) => x.body.Results.map((r) => r.WgtAud));
  assert.ok(sums.filter((s) => String(s).length > 12).length > sums.length / 2, JSON.stringify(sums.slice(0, 5)));
  survey.free();
  fs.rmSync(dir, { recursive: true, force: true });
});
