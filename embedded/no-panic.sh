#!/usr/bin/env bash
# No panic path in the node image (src/bin/node.rs: one site per device, the root README's
# "Embedding" example; the kernel as a device links it). Three release builds:
#
#  1. --features panic-never: the `panic-never` crate's panic handler names an undefined
#     symbol, so the image links only if the optimiser removed every path to a panic. It
#     must link.
#  2. --features panic-never,deliberate-panic (one array index the compiler cannot prove in
#     bounds): it must NOT link, so the check is shown to be able to fail.
#  3. the ordinary image (its own panic handler): the call sites into panic functions are
#     counted in its disassembly and listed (llvm-objdump); the count must be 0. Skipped
#     with one line where no llvm-objdump is found.
#
#   embedded/no-panic.sh            # the check (CI)
#   embedded/no-panic.sh --count    # only step 3, the count and the list (fails if > 0)
set -euo pipefail
cd "$(dirname "$0")"

only_count=0
[ "${1:-}" = "--count" ] && only_count=1

# CARGO_TARGET_DIR when set (as cargo reads it), else target/.
elf="${CARGO_TARGET_DIR:-target}/thumbv7em-none-eabihf/release/node"
log=$(mktemp)
trap 'rm -f "$log"' EXIT

if [ "$only_count" = 0 ]; then
  if ! cargo build --release --quiet --bin node --features panic-never 2>"$log"; then
    cat "$log" >&2
    echo "no-panic: the node image has a panic path (it does not link with panic-never; see above)" >&2
    exit 1
  fi
  echo "no-panic: the node image links with panic-never: no panic path"

  status=0
  cargo build --release --quiet --bin node --features panic-never,deliberate-panic 2>"$log" || status=$?
  if [ "$status" -eq 0 ] || ! grep -q "error(panic-never)" "$log"; then
    cat "$log" >&2
    echo "no-panic: the build with a deliberate panic path linked: the check cannot fail" >&2
    exit 1
  fi
  echo "no-panic: the build with a deliberate panic path does not link, as it must"
fi

cargo build --release --quiet --bin node
objdump=""
if command -v llvm-objdump >/dev/null 2>&1; then
  objdump=llvm-objdump
else
  rustup component add llvm-tools >/dev/null 2>&1 || true
  cand="$(rustc --print sysroot)/lib/rustlib/x86_64-unknown-linux-gnu/bin/llvm-objdump"
  [ -x "$cand" ] && objdump="$cand"
fi
if [ -z "$objdump" ]; then
  echo "SKIP the panic call-site count: no llvm-objdump (install LLVM or: rustup component add llvm-tools)"
  exit 0
fi
# A call site: a branch (bl, b, b.w, blx) to a symbol whose name contains "panic", from a
# function whose name does not (the panic functions' calls among themselves are one path).
"$objdump" -d --no-show-raw-insn -C "$elf" |
  awk '/^[0-9a-f]+ </ { fn = $0 }
       /\t(bl|b|b\.w|blx)\t.*<[^>]*panic[^>]*>/ {
         if (fn !~ /panic/) {
           # The callee as <name> (llvm-objdump 14 and later put "@ imm = #..." after it).
           match($0, /<[^>]*panic[^>]*>/)
           print "  " $1 " in " fn " -> " substr($0, RSTART, RLENGTH)
         }
       }' >"$log"
sites=$(wc -l <"$log")
cat "$log"
echo "no-panic: call sites into panic functions in the node image: $sites"
if [ "$sites" -ne 0 ]; then
  echo "no-panic: the node image calls a panic function (listed above)" >&2
  exit 1
fi
