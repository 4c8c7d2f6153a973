#!/usr/bin/env bash
# No import cycles between the modules of any crate: `cargo modules dependencies` (crate
# cargo-modules) draws each library and binary, `.ci/module-cycles.py` finds the cycles.
# Skipped with one line where cargo-modules is not installed
# (`cargo install --locked cargo-modules --version 0.27.0`).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! cargo modules --version >/dev/null 2>&1; then
  echo "SKIP module cycles: cargo-modules is not installed (cargo install --locked cargo-modules --version 0.27.0)"
  exit 0
fi
status=0
for target in "hilock-kernel --lib --all-features" "hilock-harness --lib" "hilock-spec --lib" \
  "hilock-models --lib" "hilock-runtime --lib --all-features" "hilock --bin hilock --all-features" \
  "hilock-benches --lib" "verify --lib"; do
  set -- $target
  pkg=$1
  shift
  dot=$(cargo modules dependencies --package "$pkg" "$@" --no-externs --no-sysroot 2>/tmp/module-cycles.err) || {
    echo "module cycles: cargo modules failed on $pkg:" >&2
    tail -5 /tmp/module-cycles.err >&2
    exit 1
  }
  if ! printf '%s\n' "$dot" | python3 .ci/module-cycles.py | sed "s/^/$pkg: /"; then
    status=1
  fi
done
[ "$status" = 0 ] && echo "no module cycles in any crate"
exit "$status"
