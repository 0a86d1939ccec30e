// A TypeScript user of the package: type-checked with `tsc --noEmit` (strict) by
// consumer.test.mjs against the installed tarball's declarations.

import {
  absoluteAudience,
  contractVersion,
  CrosstabError,
  formatResult,
  isCrosstabError,
  openapi,
  parseResponse,
  retryDelayMs,
  Survey,
  validateRequest,
  type Codebook,
  type CrosstabRequest,
  type CrosstabResponse,
  type CrosstabResult,
  type ErrorEnvelope,
  type ParsedResponse,
  type Significance,
  type Table,
  type TableCell,
  type TableRequest,
  type Totals,
  type UnstableReason,
  type Validation,
} from "crosstab-wasm";
import { validateRequest as validateOnly, type Validation as ValidatorValidation } from "crosstab-wasm/validator";

const request: CrosstabRequest = {
  SurveyCode: "DEMO",
  PopulationBaseCode: "ADULTS",
  TargetCodes: ["F2554"],
};

const checked: Validation = validateRequest(request);
if (checked.ok) {
  const sent: CrosstabRequest = checked.request;
  const group: string | undefined = sent.AuthorizationGroup;
  void group;
} else {
  const status: number = checked.status;
  const body: ErrorEnvelope = checked.body;
  const field: string | undefined = body.error?.field;
  void status;
  void field;
}
const other: ValidatorValidation = validateOnly(undefined);
void other;

function describe(answer: ParsedResponse): string {
  switch (answer.kind) {
    case "success":
      return answer.response.Results.map((r: CrosstabResult) => formatResult(r, answer.response.AudienceReportUnits).display).join(", ");
    case "partial":
      return answer.description;
    case "unauthorized":
      return answer.retry === "afterFreshKey" ? "fetch a fresh key" : "?";
    case "badRequest":
    case "forbidden":
      return answer.code ?? String(answer.status);
    case "rateLimited":
      return `retry in ${answer.retryAfterMs ?? retryDelayMs(1)} ms`;
    case "serverError":
      return `retry in ${retryDelayMs(1)} ms`;
    case "invalid":
      return answer.problems.join("; ");
  }
}
console.log(describe(parseResponse(200, "{}", request)));
// The request is optional, as documented.
console.log(describe(parseResponse(401, "{}")));
// The Retry-After header as fetch gives it (a string or null).
const retryAfter: string | null = "2";
console.log(describe(parseResponse(429, "{}", request, retryAfter)));

const survey: Survey = Survey.fromCsv("code = 'X'", "ID\n");
const codebook: Codebook = survey.codebook();
const bases: string[] = codebook.bases.map((b) => b.code);
// The codebook's declarations are the contract's own types (derived with tsify).
const weighted: number = codebook.bases[0].weighted;
const perGroup: Record<string, Totals> | undefined = codebook.bases[0].groupTotals;
const labels: (string | undefined)[] = codebook.variables.flatMap((v) => v.values.map((x) => x.label));
void [weighted, perGroup, labels];
const response: CrosstabResponse = survey.crosstab(request);
const stbl: 0 | 1 = response.Results[0].Stbl;
const absolute: number = absoluteAudience(response.Results[0], response.AudienceReportUnits);
const version: string = contractVersion();
const docs: Record<string, any> = openapi();
const fromBytes: Survey = Survey.fromCompiled(new Uint8Array(8));
void [bases, stbl, absolute, version, docs, fromBytes];

// Tables: the contract's own types; `survey` may be left out in the page.
const tableRequest: TableRequest = {
  populationBase: "ADULTS",
  group: "1",
  rows: [{ expression: "F2554", label: "Women 25-54 · F2554" }],
  columns: [{ expression: "REGION = 1" }],
};
const table: Table = survey.table(tableRequest);
const cell: TableCell = table.cells[0][0];
const vertical: number | null = cell.verticalPct;
const verticalSe: number | null = cell.verticalPctSe;
const higherThan: number[] | undefined = cell.higherThan;
const compared: boolean | undefined = table.columns[0].compared;
const reasons: UnstableReason[] = cell.unstableReasons;
const verdict: Significance | null = cell.significance;
const cellStability: 0 | 1 = cell.stability;
const billed: number = table.billedCalls;
const unknownRow: boolean = table.rows[0].unknown;
// A table's group (`null`: every group) goes back into a request as it is, and its
// confidence and correction too.
const again: TableRequest = {
  ...tableRequest, group: table.group, confidence: table.confidence, bonferroni: table.bonferroni, holm: table.holm,
};
const strict: TableRequest = { ...tableRequest, confidence: 99, bonferroni: true };
const stepDown: TableRequest = { ...tableRequest, holm: true };
const pairsCompared: number | undefined = table.comparedPairs;
// @ts-expect-error: a confidence the contract does not offer.
const unoffered: TableRequest = { ...tableRequest, confidence: 80 };
// @ts-expect-error: Holm's switch is a boolean.
const holmAsText: TableRequest = { ...tableRequest, holm: "yes" };
void [again, strict, stepDown, pairsCompared, unoffered, holmAsText];
void [vertical, verticalSe, higherThan, compared, reasons, verdict, cellStability, billed, unknownRow, table.total.ciLow, table.rowTotals, table.columnTotals];

// A request is typed: what is no request, or misspells a member, does not compile (and
// plain JS gets the server's error at run time, as below).
// @ts-expect-error: a misspelt member.
const misspelt: CrosstabRequest = { ...request, TargetCode: ["F2554"] };
void misspelt;
// Input of unknown shape (a form's, a file's) goes through the validator, whose answer
// is typed.
const typed: Validation = validateRequest(JSON.parse('{"SurveyCode":"X"}') as unknown);
if (typed.ok) {
  void survey.crosstab(typed.request);
}
try {
  // @ts-expect-error: not a request.
  survey.crosstab({ nonsense: true });
} catch (error) {
  const e = error as CrosstabError;
  const code: string = e.code;
  const status: number | undefined = e.status;
  void [code, status];
  // The type guard narrows a catch clause's `unknown` without a cast.
  if (isCrosstabError(error)) {
    const guarded: string = error.code;
    void guarded;
  }
  // So does the class, which is a value as well as a type.
  if (error instanceof CrosstabError) {
    const code: string = error.code;
    const body: ErrorEnvelope | undefined = error.body;
    void [code, body];
  }
  // @ts-expect-error: without it, `error` is `unknown`.
  void error.code;
}
survey.free();
