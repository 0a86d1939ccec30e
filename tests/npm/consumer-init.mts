// A Node ESM consumer type-checked with `tsc --noEmit` (nodenext): the browser's init
// code compiles unchanged against the Node entry.
import init, { initSync, validateRequest } from "crosstab-wasm";
import initValidator from "crosstab-wasm/validator";

await init();
initSync();
await initValidator();
const outcome = validateRequest({ SurveyCode: "VEC", PopulationBaseCode: "ALL", TargetCodes: ["F2554"] });
console.log(outcome.ok);
