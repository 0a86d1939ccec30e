#!/usr/bin/env bash
# Builds the npm package `crosstab-wasm` from crates/wasm, offline:
#   1. cargo build --target wasm32-unknown-unknown --release, twice: with the engine
#      (default features) and validator-only (--no-default-features);
#   2. wasm-bindgen (the CLI at exactly the library's version) for --target nodejs
#      (CommonJS) and --target web (ESM, for browsers and bundlers);
#   3. wasm-opt from the npm package binaryen@132 when it is available (never Debian's
#      binaryen); CROSSTAB_WASM_OPT=off skips it;
#   4. package.json with conditional exports, README, `npm pack`.
# Also builds the native parity/bench helper (crates/wasm/examples/native_crosstab.rs).
#
# Output (gitignored, under target/ because Trunk owns dist/): target/npm/crosstab-wasm-VERSION.tgz,
# the staged package in target/npm/package/, the native helper target/npm/native_crosstab,
# sizes in target/npm/sizes.json.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/crosstab-target}"
OUT="${CROSSTAB_NPM_OUT:-$ROOT/target/npm}"
PKG="$OUT/package"
WASM_DIR="$CARGO_TARGET_DIR/wasm32-unknown-unknown/release"
BINDGEN_VERSION="0.2.130"

say() { printf '\n== %s\n' "$*" >&2; }

command -v wasm-bindgen >/dev/null || {
  echo "wasm-bindgen CLI missing: cargo install wasm-bindgen-cli --version $BINDGEN_VERSION --locked" >&2
  exit 1
}
if ! wasm-bindgen --version | grep -q " $BINDGEN_VERSION\$"; then
  echo "wasm-bindgen CLI is $(wasm-bindgen --version), the library is pinned to $BINDGEN_VERSION" >&2
  exit 1
fi

VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/Cargo.toml" | head -n1)"
rm -rf "$PKG" "$OUT/build"
mkdir -p "$OUT/build" "$PKG"

# -- 1. the two wasm builds (each copied out before the next overwrites it) ---------
# The engine build uses WebAssembly SIMD (128-bit): the engine's bit counts and compares
# vectorize (every current browser, Node >= 16.4). The validator-only build has no hot
# loops and stays without it, for the widest reach. Every sum is integer arithmetic
# rounded once, so the figures are the native engine's bit for bit (the parity tests
# check it).
say "cargo build (engine, simd128)"
CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="-C target-feature=+simd128" \
  cargo build --manifest-path "$ROOT/Cargo.toml" --release --target wasm32-unknown-unknown -p crosstab-wasm
cp "$WASM_DIR/crosstab_wasm.wasm" "$OUT/build/full.wasm"
say "cargo build (validator only)"
cargo build --manifest-path "$ROOT/Cargo.toml" --release --target wasm32-unknown-unknown -p crosstab-wasm --no-default-features
cp "$WASM_DIR/crosstab_wasm.wasm" "$OUT/build/validator.wasm"
if cmp -s "$OUT/build/full.wasm" "$OUT/build/validator.wasm"; then
  echo "the engine and validator-only builds are identical: the feature switch did not apply" >&2
  exit 1
fi
say "cargo build (native parity helper)"
cargo build --manifest-path "$ROOT/Cargo.toml" --release -p crosstab-wasm --example native_crosstab
cp "$CARGO_TARGET_DIR/release/examples/native_crosstab" "$OUT/native_crosstab"

# -- 2. wasm-bindgen --------------------------------------------------------------
say "wasm-bindgen"
bindgen() { # input.wasm out-dir target
  wasm-bindgen "$1" --out-dir "$2" --out-name crosstab_wasm --target "$3"
}
bindgen "$OUT/build/full.wasm" "$PKG/node" nodejs
bindgen "$OUT/build/full.wasm" "$PKG/web" web
bindgen "$OUT/build/validator.wasm" "$PKG/validator/node" nodejs
bindgen "$OUT/build/validator.wasm" "$PKG/validator/web" web
# wasm-bindgen copies the package's JS modules (crates/wasm/js) as ES modules, which the
# nodejs target require()s: the Node build gets them as CommonJS. Those modules export
# top-level functions and classes only (`export function name(`, `export class Name `),
# and import nothing.
while IFS= read -r -d '' snippet; do
  names="$(sed -n -E 's/^export (function|class) ([A-Za-z0-9_$]+)[( ].*/\2/p' "$snippet")"
  sed -i -E 's/^export (function|class) /\1 /' "$snippet"
  if grep -Eq '^[[:space:]]*(import|export)\b' "$snippet"; then
    echo "$snippet: an import or export the CommonJS conversion does not handle" >&2
    exit 1
  fi
  for name in $names; do echo "exports.$name = $name;" >>"$snippet"; done
done < <(find "$PKG/node" "$PKG/validator/node" -path '*/snippets/*' -name '*.js' -print0)
# Each entry exports the class of its errors, `CrosstabError` (crates/wasm/js/error.js),
# from the copy of that module its glue imports `crosstabError` from.
for dir in node web validator/node validator/web; do
  glue="$PKG/$dir/crosstab_wasm.js"
  module="$(sed -n -E 's|^.*\{ crosstabError \}.*(\./snippets/[^`'"'"']+/js/error\.js).*$|\1|p' "$glue")"
  if [ -z "$module" ] || [ ! -f "$PKG/$dir/$module" ]; then
    echo "$glue: no import of crosstabError from js/error.js" >&2
    exit 1
  fi
  case "$dir" in
  */node | node) echo "exports.CrosstabError = require(String.raw\`$module\`).CrosstabError;" >>"$glue" ;;
  *) echo "export { CrosstabError } from '$module';" >>"$glue" ;;
  esac
done
# The engine's glue: a freed Survey is said as such (crates/wasm/js/freed.js), checked
# against this wasm-bindgen's glue, which keeps the handle in `__wbg_ptr` (0 once freed).
for dir in node web; do
  glue="$PKG/$dir/crosstab_wasm.js"
  if ! grep -Eq '^(export )?class Survey \{$' "$glue" || ! grep -q 'this.__wbg_ptr = 0;' "$glue"; then
    echo "$glue: not the Survey glue crates/wasm/js/freed.js was written for" >&2
    exit 1
  fi
  cat "$ROOT/crates/wasm/js/freed.js" >>"$glue"
done
# wasm-bindgen declares `[Symbol.dispose]()` on classes, which only type-checks with
# `lib: esnext.disposable`; drop the declaration (the method still exists at runtime) so
# the types check under any ES2020+ lib, without `skipLibCheck`.
for dir in node web validator/node validator/web; do
  sed -i '/^\s*\[Symbol\.dispose\]()/d' "$PKG/$dir/crosstab_wasm.d.ts"
done
# Node reads each directory's module format from the nearest package.json.
for dir in node validator/node; do echo '{"type": "commonjs"}' >"$PKG/$dir/package.json"; done
# The Node build's ESM face: every export of the CommonJS module, plus `init` and
# `initSync` as the web build has them (no-ops: in Node the module is ready once loaded),
# so the same `import init, { ... } from "crosstab-wasm"` runs in browsers, SSR and tests.
for dir in node validator/node; do
  cat >"$PKG/$dir/crosstab_wasm.mjs" <<'ESM'
import * as wasm from "./crosstab_wasm.js";
export * from "./crosstab_wasm.js";
/** Ready once imported in Node; kept so browser code runs unchanged. */
export default async function init() { return wasm; }
/** Ready once imported in Node; kept so browser code runs unchanged. */
export function initSync() { return wasm; }
ESM
  cat >"$PKG/$dir/crosstab_wasm.d.mts" <<'DTS'
export * from "./crosstab_wasm.js";
/** Ready once imported in Node; kept so browser code runs unchanged. */
export default function init(module_or_path?: unknown): Promise<unknown>;
/** Ready once imported in Node; kept so browser code runs unchanged. */
export function initSync(module?: unknown): unknown;
DTS
done
for dir in web validator/web; do echo '{"type": "module"}' >"$PKG/$dir/package.json"; done

# -- 3. wasm-opt (npm binaryen@132 only) -------------------------------------------
WASM_OPT=""
if [ "${CROSSTAB_WASM_OPT:-on}" != "off" ]; then
  TOOLS="$ROOT/target/npm-tools/binaryen"
  if [ ! -x "$TOOLS/node_modules/.bin/wasm-opt" ]; then
    mkdir -p "$TOOLS"
    (cd "$TOOLS" && [ -f package.json ] || echo '{"private": true}' >package.json)
    (cd "$TOOLS" && npm install --silent --no-audit --no-fund --prefer-offline binaryen@132 >/dev/null 2>&1) ||
      echo "binaryen@132 from npm is not available: skipping wasm-opt" >&2
  fi
  if [ -x "$TOOLS/node_modules/.bin/wasm-opt" ]; then WASM_OPT="$TOOLS/node_modules/.bin/wasm-opt"; fi
fi
if [ -n "$WASM_OPT" ]; then
  say "wasm-opt ($("$WASM_OPT" --version))"
  FEATURES=(--enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext
    --enable-mutable-globals --enable-reference-types --enable-multivalue)
  SIMD=(--enable-simd)
  for dir in node web validator/node validator/web; do
    wasm="$PKG/$dir/crosstab_wasm_bg.wasm"
    # -O3 for both: validateRequest speed matters in the validator entry too, and -Oz
    # saves under 1 KB gzipped there.
    extra=()
    case "$dir" in validator/*) ;; *) extra=("${SIMD[@]}") ;; esac
    "$WASM_OPT" "${FEATURES[@]}" "${extra[@]}" -O3 --strip-debug --strip-producers "$wasm" -o "$wasm.opt"
    mv "$wasm.opt" "$wasm"
  done
fi

# -- 4. package.json, README, npm pack ---------------------------------------------
say "package.json and README"
cp "$ROOT/crates/wasm/npm/README.md" "$PKG/README.md"
VERSION="$VERSION" node - "$PKG/package.json" <<'EOF'
const fs = require("fs");
const path = require("path");
const entry = (dir) => ({
  node: {
    import: { types: `./${dir}node/crosstab_wasm.d.mts`, default: `./${dir}node/crosstab_wasm.mjs` },
    require: { types: `./${dir}node/crosstab_wasm.d.ts`, default: `./${dir}node/crosstab_wasm.js` },
  },
  browser: { types: `./${dir}web/crosstab_wasm.d.ts`, default: `./${dir}web/crosstab_wasm.js` },
  default: { types: `./${dir}web/crosstab_wasm.d.ts`, default: `./${dir}web/crosstab_wasm.js` },
});
const files = [];
for (const dir of ["node", "web", "validator/node", "validator/web"]) {
  for (const f of ["crosstab_wasm.js", "crosstab_wasm.d.ts", "crosstab_wasm_bg.wasm", "crosstab_wasm_bg.wasm.d.ts", "package.json"]) {
    files.push(`${dir}/${f}`);
  }
  if (dir.endsWith("node")) files.push(`${dir}/crosstab_wasm.mjs`, `${dir}/crosstab_wasm.d.mts`);
  if (fs.existsSync(path.join(path.dirname(process.argv[2]), dir, "snippets"))) files.push(`${dir}/snippets/`);
}
const pkg = {
  name: "crosstab-wasm",
  version: process.env.VERSION,
  description: "The crosstab service's request validator, response checks and survey engine, compiled from Rust to WebAssembly: exactly the server's rules in browsers and Node.",
  license: "Apache-2.0",
  main: "./node/crosstab_wasm.js",
  types: "./node/crosstab_wasm.d.ts",
  exports: {
    ".": entry(""),
    "./validator": entry("validator/"),
    "./package.json": "./package.json",
  },
  typesVersions: { "*": { validator: ["./validator/node/crosstab_wasm.d.ts"] } },
  files: [...files, "README.md"],
  sideEffects: ["./web/crosstab_wasm.js", "./validator/web/crosstab_wasm.js"],
  engines: { node: ">=20" },
  keywords: ["crosstab", "survey", "audience", "wasm", "validation"],
};
fs.writeFileSync(process.argv[2], JSON.stringify(pkg, null, 2) + "\n");
EOF

say "npm pack"
rm -f "$OUT"/crosstab-wasm-*.tgz
(cd "$PKG" && npm pack --silent --pack-destination "$OUT" >/dev/null)
TARBALL="$OUT/crosstab-wasm-$VERSION.tgz"
[ -f "$TARBALL" ] || { echo "npm pack did not write $TARBALL" >&2; exit 1; }

# -- sizes ---------------------------------------------------------------------------
gz() { gzip -9c "$1" | wc -c | tr -d ' '; }
raw() { wc -c <"$1" | tr -d ' '; }
FULL="$PKG/web/crosstab_wasm_bg.wasm"
VALIDATOR="$PKG/validator/web/crosstab_wasm_bg.wasm"
cat >"$OUT/sizes.json" <<EOF
{"engine": {"raw": $(raw "$FULL"), "gzip9": $(gz "$FULL")}, "validator": {"raw": $(raw "$VALIDATOR"), "gzip9": $(gz "$VALIDATOR")}, "tarball": $(raw "$TARBALL"), "wasmOpt": $([ -n "$WASM_OPT" ] && echo true || echo false)}
EOF
printf '\ncrosstab-wasm %s -> %s\n' "$VERSION" "$TARBALL"
printf '  engine build    (.)          %8d bytes, %7d gzip -9\n' "$(raw "$FULL")" "$(gz "$FULL")"
printf '  validator build (./validator) %8d bytes, %7d gzip -9 (limit 153600)\n' "$(raw "$VALIDATOR")" "$(gz "$VALIDATOR")"
if [ "$(gz "$VALIDATOR")" -ge 153600 ]; then
  echo "the validator-only build is over 150 KB gzipped" >&2
  exit 1
fi
