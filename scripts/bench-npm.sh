#!/usr/bin/env bash
# Speed of the npm package crosstab-wasm: validateRequest in Node, and Survey.crosstab in
# Node against the native engine measured in the same run: warm (tests/npm/bench.mjs) and
# cold, on never-seen targets (scripts/bench-npm-cold.mjs, which builds the native side
# with cargo). Builds the package first unless CROSSTAB_BENCH_NO_BUILD=1 (then target/npm
# must already hold a build).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "${CROSSTAB_BENCH_NO_BUILD:-0}" != "1" ]; then
  bash "$ROOT/scripts/build-npm.sh"
fi
node "$ROOT/tests/npm/bench.mjs" "$@"
node "$ROOT/scripts/bench-npm-cold.mjs" "$@"
