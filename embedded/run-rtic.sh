#!/usr/bin/env bash
# The RTIC 2 example (embedded/rtic: three sites in one image over a simulated link) on
# QEMU's mps2-an386 (Cortex-M4F). Fails unless
#
#  1. the release image prints "rtic: PASS" and exits 0;
#  2. a build with a wrong expected grant (--features wrong-expectation) exits with failure
#     and prints MISMATCH, and a build whose link drops a frame that finds a full inbox
#     (--features drop-when-full) exits with failure, so both checks are shown to be able
#     to fail;
#  3. the image with `--features defmt` (defmt frames over semihosting) exits 0 and its log,
#     decoded by `defmt-print` (on the PATH, named by DEFMT_PRINT, or installed here with
#     `cargo install`), says "rtic: PASS"; where defmt-print cannot be installed, one line
#     says the log was not decoded.
#
# Installs the target, QEMU and defmt-print where it can; skips with one line where it
# cannot.
#
#   embedded/run-rtic.sh        # the check (CI)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/rtic"

# shellcheck source=embedded/prerequisites.sh
. "$here/prerequisites.sh"
require_target_and_qemu "embedded RTIC example"

# CARGO_TARGET_DIR when set (absolute, or relative to this folder as cargo reads it), else
# target/.
elf="${CARGO_TARGET_DIR:-target}/thumbv7em-none-eabihf/release/hilock-embedded-rtic"
run() {
  timeout 60 qemu-system-arm -machine mps2-an386 -cpu cortex-m4 -nographic \
    -semihosting-config enable=on,target=native -icount shift=6 -kernel "$elf"
}
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# Flash (.text + .rodata, as embedded/figures.sh counts it) and RAM (.data + .bss + .uninit:
# RTIC keeps its resources, here the three sites, in .uninit) of the image, with llvm-size (on the PATH or rustup's llvm-tools); one line saying why not where
# there is none.
size_tool=""
if command -v llvm-size >/dev/null 2>&1; then
  size_tool=llvm-size
else
  rustup component add llvm-tools >/dev/null 2>&1 || true
  cand="$(rustc --print sysroot)/lib/rustlib/x86_64-unknown-linux-gnu/bin/llvm-size"
  [ -x "$cand" ] && size_tool="$cand"
fi
sizes() {
  if [ -z "$size_tool" ]; then
    echo "sizes of the $1 image: not measured (no llvm-size)"
    return
  fi
  local t
  t=$("$size_tool" -A "$elf")
  sec() { awk -v s="$1" '$1 == s { n = $2 } END { print n + 0 }' <<<"$t"; }
  echo "sizes of the $1 image: flash $(($(sec .text) + $(sec .rodata))) B (.text + .rodata), RAM $(($(sec .data) + $(sec .bss) + $(sec .uninit))) B (.data + .bss + .uninit)"
}

cargo build --release --quiet
status=0
run >"$log" 2>&1 || status=$?
cat "$log"
if [ "$status" -ne 0 ] || ! grep -qx "rtic: PASS" "$log"; then
  echo "embedded RTIC example: the QEMU run failed (exit $status)" >&2
  exit 1
fi
echo "embedded RTIC example: QEMU run passed"
sizes plain

cargo build --release --quiet --features wrong-expectation
status=0
run >"$log" 2>&1 || status=$?
grep -E "MISMATCH|rtic: (PASS|FAIL)" "$log" || true
if [ "$status" -eq 0 ] || ! grep -q "MISMATCH" "$log"; then
  echo "embedded RTIC example: the build with a wrong expected grant did NOT fail (exit $status)" >&2
  exit 1
fi
echo "embedded RTIC example: the build with a wrong expected grant fails, as it must (exit $status)"

cargo build --release --quiet --features drop-when-full
status=0
run >"$log" 2>&1 || status=$?
grep -E "not idle|dropped|rtic: (PASS|FAIL)" "$log" || true
if [ "$status" -eq 0 ] || ! grep -qx "rtic: FAIL" "$log"; then
  echo "embedded RTIC example: the build that drops a frame at a full inbox did NOT fail (exit $status)" >&2
  exit 1
fi
echo "embedded RTIC example: the build that drops a frame at a full inbox fails, as it must (exit $status)"

cargo build --release --quiet --features defmt
sizes defmt
status=0
run >"$log" 2>/dev/null || status=$?
if [ "$status" -ne 0 ]; then
  echo "embedded RTIC example: the defmt image failed under QEMU (exit $status)" >&2
  exit 1
fi
decoder="${DEFMT_PRINT:-$(command -v defmt-print || true)}"
if [ -z "$decoder" ]; then
  # Once per machine: about 100 s of CPU (the decoder's own build).
  cargo install defmt-print --locked --version "^1" >/dev/null 2>&1 || true
  decoder=$(command -v defmt-print || true)
  if [ -z "$decoder" ] && [ -x "${CARGO_HOME:-$HOME/.cargo}/bin/defmt-print" ]; then
    decoder="${CARGO_HOME:-$HOME/.cargo}/bin/defmt-print"
  fi
fi
if [ -n "$decoder" ]; then
  decoded=$("$decoder" -e "$elf" <"$log" 2>&1 || true)
  echo "$decoded"
  if ! grep -q "rtic: PASS" <<<"$decoded"; then
    echo "embedded RTIC example: the defmt log does not decode to rtic: PASS" >&2
    exit 1
  fi
  echo "embedded RTIC example: the defmt image passed; its log ($(wc -c <"$log") bytes of defmt frames) decoded with defmt-print"
else
  echo "embedded RTIC example: the defmt image exits 0 ($(wc -c <"$log") bytes of defmt frames); its log is not decoded: defmt-print could not be installed"
fi

# Leave the plain image behind (the one the sizes in docs/embedding.md are of).
cargo build --release --quiet
