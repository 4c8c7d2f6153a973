#!/usr/bin/env bash
# Builds the firmware (release) and runs it on QEMU's mps2-an386 (Cortex-M4F) with a time
# limit; fails unless it prints RESULT: PASS and exits 0. Then builds it with one wrong
# expected end state (--features wrong-expectation) and fails unless that run FAILS, so the
# check is shown to be able to fail. Installs what it needs; skips with one line if it
# cannot.
#
#   embedded/run-qemu.sh                 # the check (CI)
#   embedded/run-qemu.sh --features n16,q16 --no-negative   # another capacity, no negative run
#
# Extra arguments are passed to `cargo build`; --no-negative skips the wrong-expectation run.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"

negative=1
args=()
for a in "$@"; do
  if [ "$a" = "--no-negative" ]; then negative=0; else args+=("$a"); fi
done

# shellcheck source=embedded/prerequisites.sh
. "$here/prerequisites.sh"
require_target_and_qemu "embedded"

# Where cargo puts the image: CARGO_TARGET_DIR when set (absolute or relative to this
# folder, as cargo reads it), else target/.
out="${CARGO_TARGET_DIR:-target}/thumbv7em-none-eabihf/release"
elf="$out/hilock-embedded"

# -icount shift=6: QEMU's virtual clock advances 64 ns per executed instruction; SysTick
# counts that clock, so the firmware's step figures are instruction counts (src/meter.rs).
run() {
  timeout 120 qemu-system-arm -machine mps2-an386 -cpu cortex-m4 -nographic \
    -semihosting-config enable=on,target=native -icount shift=6 -kernel "${1:-$elf}"
}

cargo build --release --quiet ${args[@]+"${args[@]}"}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
run >"$log" 2>&1 || status=$?
cat "$log"
if [ "$status" -ne 0 ] || ! grep -qx "RESULT: PASS" "$log"; then
  echo "embedded: the QEMU run failed (exit $status)" >&2
  exit 1
fi
echo "embedded: QEMU run passed"

# The loop of docs/embedding.md: one site per device, inputs from an interrupt.
status=0
run "$out/node" >"$log" 2>&1 || status=$?
cat "$log"
if [ "$status" -ne 0 ] || ! grep -qx "node: PASS" "$log"; then
  echo "embedded: the one-site example (src/bin/node.rs) failed (exit $status)" >&2
  exit 1
fi

if [ "$negative" = 1 ]; then
  cargo build --release --quiet --features wrong-expectation ${args[@]+"${args[@]}"}
  status=0
  run >"$log" 2>&1 || status=$?
  grep -E "MISMATCH|RESULT" "$log" || true
  # Rebuild the correct firmware so the ELF left behind is the checked one.
  cargo build --release --quiet ${args[@]+"${args[@]}"}
  if [ "$status" -eq 0 ] || ! grep -q "MISMATCH" "$log"; then
    echo "embedded: the build with a wrong expected state did NOT fail (exit $status)" >&2
    exit 1
  fi
  echo "embedded: the build with a wrong expected state fails, as it must (exit $status)"
fi
