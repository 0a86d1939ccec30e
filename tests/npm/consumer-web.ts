// A browser/bundler TypeScript user: resolved with `moduleResolution: bundler`, which
// picks the package's `default` (web) entry with its async `init`.

import init, { validateRequest, Survey, type Validation } from "crosstab-wasm";
import initValidator, { validateRequest as validateOnly } from "crosstab-wasm/validator";

export async function start(): Promise<boolean> {
  await init();
  await initValidator({ module_or_path: new URL("https://example.invalid/crosstab_wasm_bg.wasm") });
  const outcome: Validation = validateRequest({ SurveyCode: "DEMO" });
  const survey: Survey = Survey.fromCompiled(new ArrayBuffer(0));
  survey.free();
  return outcome.ok && validateOnly(undefined).ok;
}
