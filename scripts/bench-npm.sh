#!/usr/bin/env bash
# Speed of the npm package crosstab-wasm: validateRequest in Node, and Survey.crosstab in
# Node against the native engine measured in the same run: warm (tests/npm/bench.mjs) and
# cold, on never-seen targets (scripts/bench-npm-cold.mjs, which builds the native side
# with cargo). Builds the package first unless CROSSTAB_BENCH_NO_BUILD=1 (then target/npm
# must already hold a build).
# The cold figure depends on the V8 that runs the WebAssembly, so it is taken with the
# machine's Node and again with each Node line in NODE_LINES (default: 24, the newest
# long-term support line), fetched once by scripts/node-line; NODE_LINES= skips them.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "${CROSSTAB_BENCH_NO_BUILD:-0}" != "1" ]; then
  bash "$ROOT/scripts/build-npm.sh"
fi
node "$ROOT/tests/npm/bench.mjs" "$@"
node "$ROOT/scripts/bench-npm-cold.mjs" "$@"

for line in ${NODE_LINES-24}; do
  other="$("$ROOT/scripts/node-line" "$line")"
  echo
  echo "With Node $("$other" --version) (V8 $("$other" -p process.versions.v8)):"
  "$other" "$ROOT/scripts/bench-npm-cold.mjs" "$@"
done
