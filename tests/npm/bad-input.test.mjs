// Bad input from JS gets a clean answer — an envelope or a CrosstabError with a code —
// never a panic ("unreachable" RuntimeError) or a poisoned module.

import assert from "node:assert/strict";
import test from "node:test";

import { requirePackage, vectorSurveySource } from "./helpers.mjs";

const pkg = requirePackage();
const { Survey } = pkg;
const { toml, csv } = vectorSurveySource();
const survey = Survey.fromCsv(toml, csv);
const GOOD = { SurveyCode: "VEC", PopulationBaseCode: "ALL", TargetCodes: ["F2554"] };

function invalid(outcome, field, status = 400) {
  assert.equal(outcome.ok, false, JSON.stringify(outcome).slice(0, 500));
  assert.equal(outcome.status, status);
  assert.equal(outcome.body.ResultCode, status);
  assert.equal(outcome.body.error.message, outcome.body.ResultDescription);
  if (field === null) assert.equal(outcome.body.error.field, undefined);
  else if (field) assert.equal(outcome.body.error.field, field);
  return outcome.body.error.code;
}

function throwsCode(fn, code) {
  assert.throws(fn, (error) => {
    assert.ok(error instanceof Error, String(error));
    assert.ok(pkg.isCrosstabError(error), String(error));
    assert.ok(error instanceof pkg.CrosstabError, String(error));
    assert.equal(error.name, "CrosstabError");
    assert.equal(error.code, code, error.message);
    assert.ok(!/unreachable|panicked/i.test(error.message), error.message);
    return true;
  });
}

test("isCrosstabError: only this package's errors, never a look-alike", () => {
  const lookAlike = new Error("x");
  lookAlike.name = "CrosstabError";
  const noCode = new Error("x");
  noCode.name = "CrosstabError";
  lookAlike.code = "invalid_request";
  for (const value of [undefined, null, "CrosstabError", 7, new Error("x"), noCode, { name: "CrosstabError", code: "invalid_request" }]) {
    assert.equal(pkg.isCrosstabError(value), false, String(value));
  }
  // The shape is what is promised: an Error named CrosstabError with a string code.
  assert.equal(pkg.isCrosstabError(lookAlike), true);
  assert.throws(() => pkg.validateJson({}), (error) => pkg.isCrosstabError(error) && error.code === "invalid_argument");
});

test("CrosstabError: the class of every error thrown, from either entry, never a look-alike's", () => {
  const validator = requirePackage("crosstab-wasm/validator");
  assert.equal(typeof pkg.CrosstabError, "function");
  assert.notEqual(pkg.CrosstabError, validator.CrosstabError, "each entry has its own copy");
  const thrown = [];
  for (const entry of [pkg, validator]) {
    try {
      entry.validateJson({});
    } catch (error) {
      thrown.push(error);
    }
  }
  const freed = Survey.fromCsv(toml, csv);
  freed.free();
  try {
    freed.crosstab(GOOD);
  } catch (error) {
    thrown.push(error);
  }
  assert.equal(thrown.length, 3);
  for (const error of thrown) {
    for (const entry of [pkg, validator]) {
      assert.ok(error instanceof entry.CrosstabError, `${error.code} instanceof either entry's class`);
    }
    assert.ok(error instanceof Error);
    assert.equal(Object.getPrototypeOf(Object.getPrototypeOf(error)), Error.prototype, "a direct subclass of Error");
    assert.ok(error.stack.includes("CrosstabError"), error.stack);
  }
  assert.deepEqual(thrown.map((e) => e.code), ["invalid_argument", "invalid_argument", "survey_freed"]);
  // Look-alikes are not instances: the shape without the class.
  const lookAlike = new Error("x");
  lookAlike.name = "CrosstabError";
  lookAlike.code = "invalid_request";
  // A Proxy answering every member, or throwing at every read, is told by its chain
  // alone, as the ordinary instanceof tells it.
  const claims = new Proxy(new Error("x"), { get: () => true, has: () => true, getOwnPropertyDescriptor: () => undefined });
  const throws = new Proxy(new Error("x"), { get() { throw new Error("read"); } });
  const notInstances = { lookAlike, shaped: { name: "CrosstabError", code: "x" }, null: null, undefined, text: "CrosstabError", number: 7, claims, throws };
  for (const [what, value] of Object.entries(notInstances)) {
    assert.equal(value instanceof pkg.CrosstabError, false, what);
  }
  assert.equal(new Proxy(thrown[0], {}) instanceof pkg.CrosstabError, true, "its chain is the error's");
  // Made by hand, as a test double would be: an instance with its code and message.
  const made = new pkg.CrosstabError("network_error", "no answer");
  assert.ok(made instanceof validator.CrosstabError && pkg.isCrosstabError(made));
  assert.deepEqual([made.name, made.code, made.message], ["CrosstabError", "network_error", "no answer"]);
  // A subclass's instanceof is the ordinary one: the package's errors are not its instances.
  class Mine extends pkg.CrosstabError {}
  assert.ok(new Mine("x", "y") instanceof Mine);
  assert.ok(new Mine("x", "y") instanceof pkg.CrosstabError);
  assert.equal(thrown[0] instanceof Mine, false);
});

test("undefined, functions and symbols are an absent body: the server's answer to no body", () => {
  const server = pkg.validateJson("");
  for (const value of [undefined, () => 1, Symbol("x")]) {
    const outcome = pkg.validateRequest(value);
    assert.equal(invalid(outcome, null), "invalid_request");
    assert.deepEqual(outcome, server);
  }
  // Arguments missing altogether.
  assert.deepEqual(pkg.validateRequest(), server);
});

test("null, numbers, strings, arrays are not request objects", () => {
  for (const value of [null, 0, NaN, Infinity, true, "text", "", [], [GOOD], new Date(0)]) {
    assert.equal(invalid(pkg.validateRequest(value), null), "invalid_request");
  }
});

test("cyclic objects and BigInts can't be sent: invalid_request, no throw", () => {
  const cyclic = { ...GOOD };
  cyclic.self = cyclic;
  const outcome = pkg.validateRequest(cyclic);
  assert.equal(invalid(outcome, null), "invalid_request");
  assert.match(outcome.body.ResultDescription, /can't be serialized as JSON/);
  assert.match(outcome.body.ResultDescription, /circular/i);
  assert.equal(invalid(pkg.validateRequest({ ...GOOD, SurveyCode: 10n }), null), "invalid_request");
  const throwing = { toJSON() { throw new Error("boom"); } };
  assert.match(pkg.validateRequest(throwing).body.ResultDescription, /boom/);
  throwsCode(() => survey.crosstab(cyclic), "invalid_request");
});

test("strings instead of arrays, wrong member types", () => {
  assert.equal(invalid(pkg.validateRequest({ ...GOOD, TargetCodes: "F2554" }), "TargetCodes"), "invalid_request");
  assert.equal(invalid(pkg.validateRequest({ ...GOOD, TargetCodes: [["F2554"]] }), "TargetCodes"), "invalid_request");
  assert.equal(invalid(pkg.validateRequest({ ...GOOD, SurveyCode: ["VEC"] }), "SurveyCode"), "invalid_request");
  assert.equal(invalid(pkg.validateRequest({ ...GOOD, PopulationBaseCode: { a: 1 } }), "PopulationBaseCode"), "invalid_request");
  // NaN becomes null in JSON: a missing group is no group.
  assert.equal(pkg.validateRequest({ ...GOOD, AuthorizationGroup: NaN }).ok, true);
  throwsCode(() => survey.crosstab({ ...GOOD, TargetCodes: "F2554" }), "invalid_request");
});

test("10 MB strings are refused cleanly and quickly: 413, as the server answers that body", () => {
  const huge = "S".repeat(10 * 1024 * 1024);
  for (const request of [
    { ...GOOD, SurveyCode: huge },
    { ...GOOD, TargetCodes: [huge] },
    { ...GOOD, TargetCodes: ["F2554", "(".repeat(1000) + huge] },
    { ...GOOD, Junk: huge },
    huge,
  ]) {
    const start = performance.now();
    const outcome = pkg.validateRequest(request);
    assert.ok(performance.now() - start < 2000, "took over 2 s");
    assert.equal(invalid(outcome, null, 413), "payload_too_large");
  }
  assert.equal(invalid(pkg.validateJson(huge), null, 413), "payload_too_large");
  throwsCode(() => survey.crosstab({ ...GOOD, TargetCodes: [huge] }), "payload_too_large");
  // Just under the limit, each member gets its own answer.
  const long = "S".repeat(60000);
  for (const [request, field, code] of [
    [{ ...GOOD, SurveyCode: long }, "SurveyCode", "invalid_request"],
    [{ ...GOOD, TargetCodes: [long] }, "TargetCodes", "invalid_target_codes"],
    [{ ...GOOD, TargetCodes: ["F2554", "(".repeat(1000) + long] }, "TargetCodes", "invalid_target_codes"],
    [{ ...GOOD, Junk: long }, undefined, undefined],
    [long, null, "invalid_request"],
  ]) {
    const outcome = pkg.validateRequest(request);
    if (code === undefined) assert.equal(outcome.ok, true);
    else assert.equal(invalid(outcome, field), code);
  }
  // Lone surrogates are escaped by JSON.stringify and refused as the server would.
  assert.equal(pkg.validateRequest({ ...GOOD, SurveyCode: "\ud800" }).ok, false);
});

test("validateJson takes text only: a parsed body or a Buffer throws, never traps", () => {
  for (const value of [GOOD, Buffer.from(JSON.stringify(GOOD)), new Uint8Array(8), [1, 2], undefined, null, 42]) {
    throwsCode(() => pkg.validateJson(value), "invalid_argument");
  }
  assert.equal(pkg.validateJson(JSON.stringify(GOOD)).ok, true);
});

test("non-survey bytes for fromCompiled", () => {
  const random = new Uint8Array(4096);
  for (let i = 0; i < random.length; i++) random[i] = (i * 7919 + 13) & 0xff;
  const notUtf8 = new Uint8Array([0xff, 0xfe, 0xfd, 0x80, 0xc3, 0x28]);
  for (const bytes of [new Uint8Array(0), new Uint8Array(3), notUtf8, random, new TextEncoder().encode(csv), random.buffer]) {
    throwsCode(() => Survey.fromCompiled(bytes), "invalid_survey");
  }
  // A truncated real survey is refused, not read past its end.
  const dir = new TextEncoder().encode("CTSV");
  throwsCode(() => Survey.fromCompiled(dir), "invalid_survey");
  for (const value of [undefined, null, "bytes", 42, [1, 2, 3], {}]) {
    throwsCode(() => Survey.fromCompiled(value), "invalid_argument");
  }
  // Bytes that cannot fit in WebAssembly's 4 GiB are refused (never touched: JS
  // zero-fills them lazily), and the module lives on (the last test uses it).
  for (const length of [2 ** 32, 2 ** 32 - 8]) {
    throwsCode(() => Survey.fromCompiled(new Uint8Array(length)), "out_of_memory");
  }
  // An object that only claims to be bytes is not; a buffer transferred away is said so.
  throwsCode(() => Survey.fromCompiled({ [Symbol.toStringTag]: "Uint8Array", length: 8 }), "invalid_argument");
  const wide = new Int16Array(8);
  Object.defineProperty(wide, Symbol.toStringTag, { value: "Uint8Array" });
  throwsCode(() => Survey.fromCompiled(wide), "invalid_argument");
  const moved = new ArrayBuffer(8);
  structuredClone(moved, { transfer: [moved] });
  throwsCode(() => Survey.fromCompiled(moved), "invalid_argument");
});

test("bytes from another realm (a vm context, an iframe) are bytes all the same", async () => {
  const vm = await import("node:vm");
  const foreign = vm.runInNewContext("new Uint8Array([67, 84, 83, 86])");
  assert.equal(foreign instanceof Uint8Array, false);
  // Read (and refused for what they hold), not refused as "not a Uint8Array".
  throwsCode(() => Survey.fromCompiled(foreign), "invalid_survey");
  throwsCode(() => Survey.fromCompiled(vm.runInNewContext("new ArrayBuffer(4)")), "invalid_survey");
});

test("a freed survey: free() again does nothing, any other use is survey_freed", () => {
  const freed = Survey.fromCsv(toml, csv);
  assert.equal(freed.crosstab(GOOD).Results.length, 1);
  freed.free();
  freed.free();
  freed[Symbol.dispose]();
  for (const use of [
    () => freed.crosstab(GOOD),
    () => freed.table({ populationBase: "ALL", rows: [{ expression: "*" }], columns: [{ expression: "*" }] }),
    () => freed.codebook(),
    () => freed.code,
    () => freed.respondents,
  ]) {
    throwsCode(use, "survey_freed");
  }
  // Disposal first, then free(): the same.
  const disposed = Survey.fromCsv(toml, csv);
  disposed[Symbol.dispose]();
  disposed.free();
  throwsCode(() => disposed.crosstab(GOOD), "survey_freed");
  // Other surveys are untouched.
  assert.equal(survey.crosstab(GOOD).Results[0].Resps > 0, true);
});

test("bad survey sources for fromCsv", () => {
  throwsCode(() => Survey.fromCsv("not = [toml", csv), "invalid_survey_source");
  throwsCode(() => Survey.fromCsv(toml, "ID,W\n"), "invalid_survey_source");
  throwsCode(() => Survey.fromCsv(toml, csv.replace("1000", "-5")), "invalid_survey_source");
  throwsCode(() => Survey.fromCsv(toml, "\u0000\uffff".repeat(1000)), "invalid_survey_source");
  for (const [a, b] of [[undefined, csv], [toml, undefined], [toml, 5], [new Uint8Array(2), csv]]) {
    throwsCode(() => Survey.fromCsv(a, b), "invalid_argument");
  }
});

test("bad arguments to the other helpers", () => {
  throwsCode(() => pkg.absoluteAudience(undefined, 1000), "invalid_argument");
  throwsCode(() => pkg.absoluteAudience({ WgtAud: "x", Resps: 1, Stbl: 0 }, 1000), "invalid_argument");
  throwsCode(() => pkg.absoluteAudience({ WgtAud: 1, Resps: 1, Stbl: 0 }, 0), "invalid_argument");
  throwsCode(() => pkg.formatResult({ WgtAud: 1, Resps: -1, Stbl: 0 }, 1000), "invalid_argument");
  throwsCode(() => pkg.formatResult({ WgtAud: -1, Resps: 1, Stbl: 0 }, 1000), "invalid_argument");
  throwsCode(() => pkg.formatResult({ WgtAud: 1, Resps: 1, Stbl: 7 }, 1000), "invalid_argument");
  // Said as what was passed (JSON.stringify would have made it null), with no place in
  // JSON text the caller never wrote.
  for (const wgt of [NaN, Infinity]) {
    assert.throws(() => pkg.formatResult({ WgtAud: wgt, Resps: 1, Stbl: 0 }, 1000), /not NaN or Infinity/);
  }
  assert.throws(
    () => pkg.formatResult({ WgtAud: 1, Resps: "1", Stbl: 0 }, 1000),
    (e) => e.code === "invalid_argument" && !/line \d+ column/.test(e.message),
  );
  for (const decimals of [-1, 7, 256, 1.5, NaN]) {
    throwsCode(() => pkg.formatNumber(1234.5, decimals), "invalid_argument");
  }
  assert.equal(pkg.formatNumber(1234.5, 1), "1,234.5");
  assert.equal(pkg.formatNumber(1234.6), "1,235");
  assert.equal(pkg.formatNumber(1234.6, null), "1,235");
  // A number parameter takes numbers only: not coerced from a string or a boolean, and a
  // BigInt is a CrosstabError, not a bare TypeError.
  for (const call of [
    () => pkg.formatNumber(10n),
    () => pkg.formatNumber("1234"),
    () => pkg.formatNumber(1, true),
    () => pkg.absoluteAudience({ WgtAud: 1, Resps: 1, Stbl: 0 }, 1000n),
    () => pkg.formatResult({ WgtAud: 1, Resps: 1, Stbl: 0 }, "1000"),
    () => pkg.parseResponse(200n, {}),
    () => pkg.parseResponse("200", {}),
    () => pkg.retryDelayMs(Symbol("1")),
    () => pkg.retryDelayMs("1"),
  ]) {
    throwsCode(call, "invalid_argument");
  }
  assert.ok(pkg.retryDelayMs(1) > 0);
  throwsCode(() => pkg.parseResponse(NaN, {}), "invalid_argument");
  throwsCode(() => pkg.parseResponse(200.5, {}), "invalid_argument");
  throwsCode(() => pkg.parseResponse(200, {}, { TargetCodes: "F2554" }), "invalid_argument");
  // TargetCodes is counted by its length, never copied: a throwing iterator or 2^32-1
  // holes cost nothing.
  const throwing = ["F2554"];
  throwing[Symbol.iterator] = () => { throw new Error("iterated"); };
  const ok = { Results: [{ WgtAud: 1, Resps: 1, Stbl: 0 }], AudienceReportUnits: 1000, ResultCode: 0, ResultDescription: "Success" };
  assert.equal(pkg.parseResponse(200, ok, { TargetCodes: throwing }).kind, "success");
  const start = performance.now();
  assert.equal(pkg.parseResponse(200, ok, { TargetCodes: new Array(2 ** 32 - 1) }).kind, "invalid");
  assert.ok(performance.now() - start < 1000, "walked the holes");
  const cyclic = {};
  cyclic.self = cyclic;
  // A body no server could send is the caller's mistake; no body at all is checked as null.
  throwsCode(() => pkg.parseResponse(200, cyclic), "invalid_argument");
  throwsCode(() => pkg.parseResponse(500, { n: 1n }), "invalid_argument");
  const none = pkg.parseResponse(200, undefined);
  assert.equal(none.kind, "invalid");
  assert.deepEqual(none.problems, ["A 200 body must be a CrosstabResponse object, not null."]);
  assert.equal(pkg.parseResponse(502, undefined).kind, "serverError");
  assert.equal(pkg.parseResponse(500, "<html>oops</html>").kind, "serverError");
  assert.ok(Number.isFinite(pkg.retryDelayMs(NaN)));
  assert.ok(Number.isFinite(pkg.retryDelayMs(-5)));
  assert.ok(Number.isFinite(pkg.retryDelayMs(Infinity)));
});

test("the module still works after all of the above", () => {
  assert.equal(pkg.validateRequest(GOOD).ok, true);
  assert.deepEqual(survey.crosstab(GOOD).Results, [{ WgtAud: 10.5, Resps: 4, Stbl: 0 }]);
});
