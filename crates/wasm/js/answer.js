// `Survey.crosstab`'s answer as a plain object, built here from its figures: one call from
// WebAssembly, cheaper than JSON text for `JSON.parse`. The members are the contract's
// `CrosstabResponse` (crates/contract/src/wire.rs), in its order; tests/npm compares
// every answer, members and their order, with the native engine's JSON.
export function crosstabAnswer(code, description, units, w0, r0, s0, w1, r1, s1) {
  const results = [{ WgtAud: w0, Resps: r0, Stbl: s0 }];
  if (w1 !== undefined) results.push({ WgtAud: w1, Resps: r1, Stbl: s1 });
  return { ResultCode: code, ResultDescription: description ?? "", Results: results, AudienceReportUnits: units };
}
