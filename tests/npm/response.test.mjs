// parseResponse, retryDelayMs, the display helpers, contractVersion and openapi.

import assert from "node:assert/strict";
import test from "node:test";

import { loadVectors, requirePackage } from "./helpers.mjs";

const pkg = requirePackage();
const REQUEST = { SurveyCode: "VEC", PopulationBaseCode: "ALL", TargetCodes: ["F2554", "SMOKER = 1"] };

test("every vector's expected answer classifies as the spec says, with no problems", () => {
  const kinds = { 400: "badRequest", 401: "unauthorized", 403: "forbidden", 413: "badRequest" };
  for (const vector of loadVectors()) {
    const { status, body } = vector.expect;
    const request = vector.request?.TargetCodes && Array.isArray(vector.request.TargetCodes) && status === 200 ? vector.request : undefined;
    const parsed = pkg.parseResponse(status, body, request);
    assert.deepEqual(parsed.problems, [], `${vector.name}: ${JSON.stringify(parsed)}`);
    if (status === 200) {
      assert.equal(parsed.kind, body.ResultCode === 0 ? "success" : "partial", vector.name);
      assert.deepEqual(parsed.response, body);
      if (parsed.kind === "partial") assert.equal(parsed.description, body.ResultDescription);
    } else {
      assert.equal(parsed.kind, kinds[status], vector.name);
      assert.equal(parsed.code, body.error.code);
      assert.deepEqual(parsed.envelope, body);
    }
    assert.equal(parsed.retry, "never");
    // Raw text is read the same as the parsed body.
    assert.deepEqual(pkg.parseResponse(status, JSON.stringify(body), request), parsed);
  }
});

test("retry advice: 401 fetch a fresh key, 429 after Retry-After, 5xx back off, other 4xx never", () => {
  const envelope = (status, code) => ({ ResultCode: status, ResultDescription: "x", error: { code, message: "x" } });
  assert.equal(pkg.parseResponse(401, envelope(401, "unauthorized")).retry, "afterFreshKey");
  assert.equal(pkg.parseResponse(401, envelope(401, "unauthorized")).kind, "unauthorized");
  for (const status of [400, 403, 404, 413, 415, 422]) {
    assert.equal(pkg.parseResponse(status, envelope(status, "x")).retry, "never", String(status));
  }
  for (const status of [500, 502, 503, 504]) {
    const parsed = pkg.parseResponse(status, envelope(500, "internal_error"));
    assert.equal(parsed.kind, "serverError");
    assert.equal(parsed.retry, "backoff");
  }
  const gateway = pkg.parseResponse(502, "Bad Gateway");
  assert.equal(gateway.kind, "serverError");
  assert.equal(gateway.envelope, undefined);
  assert.equal(gateway.problems.length, 1);
  assert.equal(pkg.parseResponse(302, "").kind, "invalid");
  assert.equal(pkg.parseResponse(204, "").retry, "never");
});

test("shape checks: Results count against TargetCodes, Stbl in {0,1}, envelope members", () => {
  const ok = { ResultCode: 0, ResultDescription: "", Results: [{ WgtAud: 10.5, Resps: 4, Stbl: 0 }, { WgtAud: 5.5, Resps: 3, Stbl: 1 }], AudienceReportUnits: 1000 };
  assert.equal(pkg.parseResponse(200, ok, REQUEST).kind, "success");
  const one = { ...ok, Results: ok.Results.slice(0, 1) };
  assert.equal(pkg.parseResponse(200, one).kind, "success");
  const mismatch = pkg.parseResponse(200, one, REQUEST);
  assert.equal(mismatch.kind, "invalid");
  assert.match(mismatch.problems.join(), /TargetCodes/);
  const cases = [
    { ...ok, Results: [{ WgtAud: 1, Resps: 1, Stbl: 2 }, ok.Results[1]] },
    { ...ok, Results: [{ WgtAud: 1, Resps: 1, Stbl: "0" }, ok.Results[1]] },
    { ...ok, Results: [{ WgtAud: 1, Resps: 1.5, Stbl: 0 }, ok.Results[1]] },
    { ...ok, Results: [{ WgtAud: -1, Resps: 1, Stbl: 0 }, ok.Results[1]] },
    { ...ok, Results: [] },
    { ...ok, Results: [...ok.Results, ok.Results[0]] },
    { ...ok, AudienceReportUnits: 0 },
    { ...ok, ResultCode: -1 },
    { ...ok, ResultDescription: null },
    { Results: ok.Results },
    [ok],
  ];
  for (const body of cases) {
    const parsed = pkg.parseResponse(200, body);
    assert.equal(parsed.kind, "invalid", JSON.stringify(body));
    assert.ok(parsed.problems.length > 0);
  }
  const noisy = pkg.parseResponse(200, { ...ok, ResultDescription: "hm" }, REQUEST);
  assert.equal(noisy.kind, "success");
  assert.equal(noisy.problems.length, 1);
  const partial = pkg.parseResponse(200, { ...ok, ResultCode: 1, ResultDescription: "Partial result: 'X'" }, REQUEST);
  assert.equal(partial.kind, "partial");
  assert.equal(partial.description, "Partial result: 'X'");
  const envelopeProblems = [
    { ResultCode: 403, ResultDescription: "x", error: { code: "forbidden_survey", message: "y" } },
    { ResultCode: 400, ResultDescription: "x" },
    { ResultCode: 403, ResultDescription: "x", error: null },
    { ResultCode: 403, ResultDescription: "x", error: { code: "forbidden_survey", message: "x", field: null } },
    { ResultDescription: "x" },
  ];
  for (const body of envelopeProblems) {
    const parsed = pkg.parseResponse(403, body);
    assert.equal(parsed.kind, "forbidden");
    assert.equal(parsed.retry, "never");
    assert.ok(parsed.problems.length > 0, JSON.stringify(body));
  }
});

test("retryDelayMs: exponential with jitter, capped", () => {
  for (let attempt = 1; attempt <= 40; attempt++) {
    const step = Math.min(30000, 250 * 2 ** (attempt - 1));
    for (let i = 0; i < 50; i++) {
      const delay = pkg.retryDelayMs(attempt);
      assert.ok(delay >= Math.floor(step / 2) && delay <= step, `${attempt}: ${delay}`);
    }
  }
  const samples = new Set(Array.from({ length: 50 }, () => pkg.retryDelayMs(6)));
  assert.ok(samples.size > 10, "jitter varies the delay");
});

test("absoluteAudience and the formatter", () => {
  const stable = { WgtAud: 28411.372, Resps: 5321, Stbl: 0 };
  const unstable = { WgtAud: 1.2, Resps: 14, Stbl: 1 };
  assert.equal(pkg.absoluteAudience(stable, 1000), 28411372);
  assert.equal(pkg.absoluteAudience(unstable, 1), 1.2);
  assert.deepEqual(pkg.formatResult(stable, 1000), {
    weighted: "28,411.4",
    absolute: "28,411,372",
    respondents: "5,321",
    unstable: false,
    marker: "",
    display: "28,411,372",
  });
  const shown = pkg.formatResult(unstable, 1000);
  assert.equal(shown.display, "1,200*");
  assert.equal(shown.note, pkg.unstableNote());
  assert.equal(pkg.formatNumber(1234567.891, 2), "1,234,567.89");
  assert.equal(pkg.formatNumber(-1234), "-1,234");
  // Halves away from zero, of the value to 15 significant digits, as a spreadsheet shows it.
  assert.equal(pkg.formatNumber(2.5), "3");
  assert.equal(pkg.formatNumber(0.125, 2), "0.13");
  assert.equal(pkg.formatNumber(1.005, 2), "1.01");
});

test("contractVersion and openapi: the /v1/docs document", () => {
  const doc = pkg.openapi();
  assert.equal(pkg.contractVersion(), "1.0.0");
  assert.equal(doc.info.version, pkg.contractVersion());
  assert.match(doc.servers[0].url, /\/v1$/);
  assert.equal(doc.paths["/docs"].get.operationId, "docs");
  assert.equal(doc.paths["/crosstab"].post.operationId, "crosstab");
  assert.equal(doc.paths["/crosstab"].options.operationId, "crosstabOptions");
  const validator = requirePackage("crosstab-wasm/validator");
  assert.deepEqual(validator.openapi(), doc);
});

test("429: retry after the Retry-After header's seconds, as a string or a number", () => {
  const limited = {
    ResultCode: 429,
    ResultDescription: "Too many requests: retry in 3 seconds.",
    error: { code: "rate_limited", message: "Too many requests: retry in 3 seconds.", hint: "Wait." },
  };
  for (const header of ["3", 3]) {
    const parsed = pkg.parseResponse(429, limited, REQUEST, header);
    assert.equal(parsed.kind, "rateLimited");
    assert.equal(parsed.retry, "afterDelay");
    assert.equal(parsed.retryAfterMs, 3000);
    assert.equal(parsed.code, "rate_limited");
    assert.deepEqual(parsed.problems, []);
  }
  // No usable header: back off as for a 5xx, and say the answer broke the contract.
  for (const header of [undefined, null, "later", "Wed, 21 Oct 2015 07:28:00 GMT"]) {
    const parsed = pkg.parseResponse(429, limited, REQUEST, header);
    assert.equal(parsed.kind, "rateLimited", String(header));
    assert.equal(parsed.retry, "backoff", String(header));
    assert.equal(parsed.retryAfterMs, undefined);
    assert.equal(parsed.problems.length, 1);
  }
  assert.throws(() => pkg.parseResponse(429, limited, REQUEST, {}), (e) => e.code === "invalid_argument");
  // The header means nothing on other statuses.
  assert.equal(pkg.parseResponse(503, limited, REQUEST, "3").retryAfterMs, undefined);
});

test("new error codes classify by status: 422 never, 408 and 503 back off", () => {
  const envelope = (status, code) => ({ ResultCode: status, ResultDescription: code, error: { code, message: code } });
  const late = pkg.parseResponse(408, envelope(408, "request_timeout"));
  assert.equal(late.kind, "badRequest");
  // Its body never arrived whole, so was never read: sent again, it may be answered.
  assert.equal(late.retry, "backoff");
  const reused = pkg.parseResponse(422, envelope(422, "idempotency_key_reused"));
  assert.equal(reused.kind, "badRequest");
  assert.equal(reused.code, "idempotency_key_reused");
  assert.equal(reused.retry, "never");
  const deadline = pkg.parseResponse(503, envelope(503, "deadline_exceeded"));
  assert.equal(deadline.kind, "serverError");
  assert.equal(deadline.retry, "backoff");
});
