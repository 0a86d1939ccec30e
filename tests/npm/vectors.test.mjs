// Every shared vector (tests/vectors) through the installed package: validateRequest of
// both entries gives exactly the expected envelope for validation errors and ok:true for
// the rest; the rest through Survey.fromCsv(vector survey).crosstab give the expected
// status and body, as the server does.

import assert from "node:assert/strict";
import test from "node:test";

import {
  answer,
  importPackage,
  isValidationError,
  jsonMatches,
  loadVectors,
  requirePackage,
  vectorSurveySource,
} from "./helpers.mjs";

const vectors = loadVectors();

test("there are vectors of both kinds", () => {
  assert.ok(vectors.length >= 40, `only ${vectors.length} vectors`);
  assert.ok(vectors.some((v) => typeof v.body === "string"), "no raw-text vector");
  assert.ok(vectors.some(isValidationError));
  assert.ok(vectors.some((v) => !isValidationError(v)));
});

for (const entry of ["crosstab-wasm", "crosstab-wasm/validator"]) {
  test(`validateRequest (${entry}) on every vector`, async () => {
    const pkg = await importPackage(entry);
    const failures = [];
    for (const vector of vectors) {
      let outcome;
      if (typeof vector.body === "string") {
        // A raw body no JS value can hold (a member named twice): only the text path.
        outcome = pkg.validateJson(vector.body);
      } else {
        outcome = pkg.validateRequest(vector.request);
        // The raw-text path must agree with the value path.
        const fromText = pkg.validateJson(JSON.stringify(vector.request));
        if (!jsonMatches(outcome, fromText)) failures.push(`${vector.name}: validateJson differs`);
      }
      if (isValidationError(vector)) {
        if (outcome.ok !== false || outcome.status !== vector.expect.status || !jsonMatches(vector.expect.body, outcome.body)) {
          failures.push(`${vector.name}: got ${JSON.stringify(outcome)}`);
        }
      } else if (outcome.ok !== true || typeof outcome.request !== "object") {
        failures.push(`${vector.name}: rejected ${JSON.stringify(outcome)}`);
      } else if (JSON.stringify(outcome.request).includes("null")) {
        failures.push(`${vector.name}: null in ${JSON.stringify(outcome.request)}`);
      }
    }
    assert.deepEqual(failures, []);
  });
}

test("Survey.fromCsv(vector survey).crosstab on every non-validation vector", () => {
  const { Survey } = requirePackage();
  const { toml, csv } = vectorSurveySource();
  const survey = Survey.fromCsv(toml, csv);
  assert.equal(survey.code, "VEC");
  const failures = [];
  let answered = 0;
  // Raw-text vectors are the validator's: a JS value can't repeat a member.
  for (const vector of vectors.filter((v) => v.body === undefined)) {
    const got = answer(survey, vector.request);
    if (isValidationError(vector)) {
      // The survey refuses invalid requests with the same envelope.
      if (got.status !== vector.expect.status || !jsonMatches(vector.expect.body, got.body)) {
        failures.push(`${vector.name} (validation): ${JSON.stringify(got)}`);
      }
      continue;
    }
    answered++;
    if (got.status !== vector.expect.status || !jsonMatches(vector.expect.body, got.body)) {
      failures.push(`${vector.name}:\n  expected ${vector.expect.status} ${JSON.stringify(vector.expect.body)}\n  actual   ${got.status} ${JSON.stringify(got.body)}`);
    }
  }
  assert.ok(answered >= 15, `only ${answered} engine vectors`);
  assert.deepEqual(failures, []);
  survey.free();
});

test("errors thrown by crosstab are CrosstabErrors with the contract code", () => {
  const { Survey } = requirePackage();
  const { toml, csv } = vectorSurveySource();
  const survey = Survey.fromCsv(toml, csv);
  const cases = [
    [{ SurveyCode: "OTHER", PopulationBaseCode: "ALL", TargetCodes: ["F2554"] }, "forbidden_survey", 403],
    [{ SurveyCode: "VEC", PopulationBaseCode: "NOPE", TargetCodes: ["F2554"] }, "invalid_population_base", 400],
    [{ SurveyCode: "VEC", PopulationBaseCode: "ALL", TargetCodes: [] }, "invalid_target_codes", 400],
    [{ SurveyCode: "VEC" }, "invalid_request", 400],
  ];
  for (const [request, code, status] of cases) {
    assert.throws(
      () => survey.crosstab(request),
      (error) => {
        assert.ok(error instanceof Error);
        assert.equal(error.name, "CrosstabError");
        assert.equal(error.code, code);
        assert.equal(error.status, status);
        assert.equal(error.body.ResultCode, status);
        assert.equal(error.body.error.code, code);
        assert.equal(error.message, error.body.ResultDescription);
        return true;
      },
    );
  }
});
