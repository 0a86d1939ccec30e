// Tables: Survey.table in Node (WASM) gives exactly the native engine's tables (every
// figure compared with ===, through the same JSON), and its refusals are the server's.

import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import test from "node:test";

import { native, requirePackage, thirdsOf } from "./helpers.mjs";

/** A JS `survey.table` call as `{status, body}`, the way the server would answer. */
function table(survey, request) {
  try {
    return { status: 200, body: survey.table(request) };
  } catch (error) {
    if (typeof error?.status !== "number") throw error;
    return { status: error.status, body: error.body };
  }
}

const axis = (expression, label) => (label === undefined ? { expression } : { expression, label });

test("demo survey (20,000 respondents): tables in Node equal the native engine's, figure for figure", (t) => {
  const { Survey } = requirePackage();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "crosstab-table-"));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  native(["demo", dir, "20000"]);
  const tomlPath = path.join(dir, "survey.toml");
  const csvPath = path.join(dir, "respondents.csv");
  const survey = Survey.fromCsv(fs.readFileSync(tomlPath, "utf8"), fs.readFileSync(csvPath, "utf8"));
  const codebook = survey.codebook();
  const region = codebook.variables.find((v) => v.name === "REGION");
  const banner = [
    ...region.values.map((v) => axis(`REGION = ${v.value}`, `${v.label} · REGION = ${v.value}`)),
    axis("GENDER = 2", "Female"),
    axis("AGE >= 55"),
  ];
  const codes = codebook.codes.map((c) => axis(c.code, `${c.label} · ${c.code}`));
  const flags = codebook.variables.filter((v) => v.name.startsWith("P_")).slice(0, 8).map((v) => axis(`${v.name} = 1`));
  // Flags whose regions differ moderately: Holm's step-down gives them letters
  // Bonferroni's takes back.
  const moderate = [axis("P_FAST_FOOD_02 = 1"), axis("P_BEER_08 = 1")];
  const requests = [
    { survey: codebook.code, populationBase: "ADULTS", rows: codes, columns: banner },
    { populationBase: "WOMEN", group: "1", rows: [...flags, axis("NOSUCH = 1")], columns: banner },
    { survey: codebook.code, populationBase: "A18_34", group: "_ALL_", rows: flags, columns: [axis("SMOKER = 1"), axis("*")] },
    { populationBase: "ADULTS", rows: [], columns: banner },
    { populationBase: "ADULTS", rows: [axis("GENDER = ")], columns: banner },
    { populationBase: "NOSUCHBASE", rows: codes, columns: banner },
    { populationBase: "ADULTS", group: "NOSUCHGROUP", rows: codes, columns: banner },
    { populationBase: "ADULTS", rows: "not a list", columns: banner },
    { populationBase: "ADULTS", filter: "AGE >= 35 AND SMOKER = 0", rows: codes, columns: banner },
    { populationBase: "ADULTS", filter: "AGEE >= 35", rows: codes, columns: banner },
    { populationBase: "ADULTS", confidence: 99, bonferroni: true, rows: [...codes, ...flags], columns: banner },
    { populationBase: "ADULTS", confidence: 90, rows: [...codes, ...flags], columns: banner },
    { populationBase: "ADULTS", confidence: 80, rows: codes, columns: banner },
    { populationBase: "ADULTS", holm: true, rows: [...codes, ...flags, ...moderate], columns: banner },
    { populationBase: "ADULTS", bonferroni: true, rows: [...codes, ...flags, ...moderate], columns: banner },
    { populationBase: "ADULTS", bonferroni: true, holm: true, rows: codes, columns: banner },
    { populationBase: "ADULTS", rows: [...codes, ...flags, ...moderate], columns: banner },
    // Another survey named is refused, as crosstab refuses it; so is a misspelt option.
    { survey: "ANOTHER", populationBase: "ADULTS", rows: codes, columns: banner },
    { populationBase: "ADULTS", confidance: 99, rows: codes, columns: banner },
  ];
  fs.writeFileSync(path.join(dir, "requests.json"), JSON.stringify(requests));
  const nat = native(["table", tomlPath, csvPath, path.join(dir, "requests.json")]);
  const js = requests.map((request) => table(survey, request));
  assert.deepEqual(js, nat);
  assert.deepEqual(
    js.map((answer) => answer.status),
    [200, 200, 200, 400, 400, 400, 403, 400, 200, 400, 200, 200, 400, 200, 200, 400, 200, 403, 400],
  );
  assert.equal(js[17].body.error.code, "forbidden_survey");
  assert.match(js[18].body.error.message, /unknown field `confidance`/);
  // The level and the correction are the table's, and change what it finds.
  const [strict, loose] = [js[10].body, js[11].body];
  assert.deepEqual([strict.confidence, strict.bonferroni, loose.confidence, loose.bonferroni], [99, true, 90, false]);
  assert.ok(strict.comparedPairs > 0);
  const found = (t) => t.cells.flat().reduce((n, c) => n + (c.significance ? 1 : 0) + (c.higherThan ?? []).length, 0);
  assert.ok(found(strict) < found(loose), `${found(strict)} against ${found(loose)}`);
  assert.match(js[12].body.error.message, /confidence is 90, 95 or 99 \(percent\), not 80/);
  // Holm's letters are more than Bonferroni's here, and fewer than the uncorrected ones;
  // the two corrections are not asked together.
  const letters = (t) => t.cells.flat().reduce((n, c) => n + (c.higherThan ?? []).length, 0);
  const [holm, bonferroni, uncorrected] = [js[13].body, js[14].body, js[16].body];
  assert.deepEqual([holm.holm, holm.bonferroni, bonferroni.holm, bonferroni.bonferroni], [true, false, false, true]);
  assert.ok(
    letters(bonferroni) < letters(holm) && letters(holm) < letters(uncorrected),
    `${letters(bonferroni)}, ${letters(holm)}, ${letters(uncorrected)}`,
  );
  assert.equal(js[15].body.error.field, "holm");
  assert.match(js[15].body.error.message, /two corrections of the column letters: ask for one/);
  // A filter: every figure within it too; one naming what the survey lacks is refused.
  const filtered = js[8].body;
  assert.equal(filtered.filter, "AGE >= 35 AND SMOKER = 0");
  const within = survey.crosstab({
    SurveyCode: codebook.code,
    PopulationBaseCode: "ADULTS",
    TargetCodes: ["AGE >= 35 AND SMOKER = 0", `(AGE >= 35 AND SMOKER = 0) AND ((${codes[2].expression}) AND (${banner[1].expression}))`],
  }).Results;
  assert.equal(filtered.total.wgtAud, within[0].WgtAud);
  assert.equal(filtered.cells[2][1].wgtAud, within[1].WgtAud);
  assert.equal(js[9].body.error.field, "filter");
  assert.match(js[9].body.error.message, /does not define 'AGEE'/);
  assert.equal(js[3].body.error.field, "rows");
  assert.equal(js[4].body.error.field, "rows");
  assert.equal(js[5].body.error.code, "invalid_population_base");
  assert.equal(js[7].body.error.message, 'The table request is not valid: invalid type: string "not a list", expected a sequence.');

  const [first, second] = [js[0].body, js[1].body];
  assert.equal(first.survey, codebook.code);
  assert.equal(first.billedCalls, 0, "computed in the page, nothing billed");
  assert.equal(first.cells.length, codes.length);
  assert.equal(first.cells[0].length, banner.length);
  assert.equal(first.rows[0].label, codes[0].label);
  assert.equal(second.rows.at(-1).unknown, true);
  assert.ok(second.cells.at(-1).every((cell) => cell.weight === 0 && cell.resps === 0));
  // A cell is what /v1 answers for (row) AND (column).
  const v1 = survey.crosstab({
    SurveyCode: codebook.code,
    PopulationBaseCode: "ADULTS",
    TargetCodes: [`(${codes[2].expression}) AND (${banner[1].expression})`],
  }).Results[0];
  assert.equal(first.cells[2][1].wgtAud, v1.WgtAud);
  assert.equal(first.cells[2][1].resps, v1.Resps);
  // The figures the comparison covered include both verdicts and both reasons.
  const cells = [first, second].flatMap((t) => t.cells.flat());
  const verdicts = new Set(cells.map((cell) => cell.significance));
  assert.ok(verdicts.has("higher") && verdicts.has("lower") && verdicts.has(null), [...verdicts].join());
  const reasons = new Set(cells.flatMap((cell) => cell.unstableReasons));
  assert.deepEqual([...reasons].sort(), ["highRse", "lowRespondents"]);
  survey.free();
});

/** The true sum of the exact squares of `weights`, rounded once: each weight is `m × 2^e`
 *  exactly, so the squares are summed as one BigInt over the lowest exponent, which
 *  `Number` rounds to nearest, ties to even; the power of two then scales it exactly. */
function exactSumOfSquares(weights) {
  const view = new DataView(new ArrayBuffer(8));
  const parts = weights.map((w) => {
    view.setFloat64(0, w);
    const bits = view.getBigUint64(0);
    const field = Number((bits >> 52n) & 0x7ffn);
    const fraction = bits & ((1n << 52n) - 1n);
    return field === 0 ? [fraction, -1074] : [fraction | (1n << 52n), field - 1075];
  });
  const low = Math.min(...parts.filter(([m]) => m !== 0n).map(([, e]) => e));
  let total = 0n;
  for (const [m, e] of parts) total += (m * m) << BigInt(2 * (e - low));
  return Number(total) * 2 ** (2 * low);
}

test("full-precision weights: tables in Node are the native engine's bit for bit, and Σw² is the exact sum", (t) => {
  const { Survey } = requirePackage();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "crosstab-table-"));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  native(["demo", dir, "20000"]);
  const tomlPath = path.join(dir, "survey.toml");
  // Each weight a third of the demo's: full-precision binary fractions, as raking writes them.
  const { csv, weights } = thirdsOf(fs.readFileSync(path.join(dir, "respondents.csv"), "utf8"));
  const csvPath = path.join(dir, "thirds.csv");
  fs.writeFileSync(csvPath, csv);
  const survey = Survey.fromCsv(fs.readFileSync(tomlPath, "utf8"), csv);
  const flags = survey.codebook().variables.filter((v) => v.name.startsWith("P_")).slice(0, 6).map((v) => axis(`${v.name} = 1`));
  const banner = [axis("GENDER = 1"), axis("GENDER = 2"), axis("AGE >= 55"), axis("REGION = 3")];
  const requests = [
    { populationBase: "ADULTS", rows: flags, columns: banner },
    { populationBase: "WOMEN", group: "2", rows: flags, columns: banner },
  ];
  fs.writeFileSync(path.join(dir, "requests.json"), JSON.stringify(requests));
  const nat = native(["table", tomlPath, csvPath, path.join(dir, "requests.json")]);
  const js = requests.map((request) => table(survey, request));
  assert.deepEqual(js.map((answer) => answer.status), [200, 200]);
  // deepEqual compares every number with Object.is: bit for bit.
  assert.deepEqual(js, nat);
  // ADULTS is everyone: the corner's Σw² is the sum over every respondent.
  const corner = js[0].body.total;
  assert.equal(corner.resps, weights.length);
  assert.equal(corner.weightSquared, exactSumOfSquares(weights));
  // What summing the rounded squares in order gives is not it, so the check can tell.
  assert.notEqual(weights.reduce((sum, w) => sum + w * w, 0), corner.weightSquared);
  survey.free();
});
