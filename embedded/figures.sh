#!/usr/bin/env bash
# The figures of docs/benchmarks.md, "Embedded: the kernel on a Cortex-M4F under QEMU": for
# each capacity N x Q, the flash (.text + .rodata) and RAM (.data + .bss) of the two
# firmware images, the worst instructions and stack bytes of one step over the scenarios
# and the random runs under QEMU (-icount shift=6), and the static stack bound of one step
# (stack-bound.py on the scenario image's `meter::step_once`, the call the measurement
# wraps) and of the node image as a whole (from `Reset`, plus its one interrupt handler
# `PendSV` and its 108-byte exception frame with FPU state). Prints three markdown tables:
# those sizes and bounds, the worst step of each phase of each run, and the worst step of
# each kind of input at N = Q = 8. Not run by CI (about a minute once built).
#
#   embedded/figures.sh
set -euo pipefail
cd "$(dirname "$0")"

# llvm-size, llvm-objdump, llvm-nm: on the PATH, or rustup's llvm-tools.
tool() {
  if command -v "$1" >/dev/null 2>&1; then
    echo "$1"
    return
  fi
  rustup component add llvm-tools >/dev/null 2>&1 || true
  cand="$(rustc --print sysroot)/lib/rustlib/x86_64-unknown-linux-gnu/bin/$1"
  [ -x "$cand" ] && echo "$cand"
}
size_tool=$(tool llvm-size)
objdump=$(tool llvm-objdump)
nm=$(tool llvm-nm)
if [ -z "$size_tool" ] || [ -z "$objdump" ] || [ -z "$nm" ]; then
  echo "SKIP figures: no llvm-size/llvm-objdump/llvm-nm (install LLVM or: rustup component add llvm-tools)"
  exit 0
fi
command -v qemu-system-arm >/dev/null 2>&1 || { echo "SKIP figures: no qemu-system-arm"; exit 0; }
command -v python3 >/dev/null 2>&1 || { echo "SKIP figures: no python3 (stack-bound.py)"; exit 0; }
# The static bound of function $2 in image $1, or "none" (stack-bound.py says why).
bound() {
  local out
  out=$(python3 stack-bound.py "$1" "$2" --objdump "$objdump" --nm "$nm") || { echo none; return; }
  sed -n 's/^stack bound of .*: \([0-9]*\) bytes.*/\1/p' <<<"$out"
}

# CARGO_TARGET_DIR when set (as cargo reads it), else target/.
dir="${CARGO_TARGET_DIR:-target}/thumbv7em-none-eabihf/release"
sec() { "$size_tool" -A "$1" | awk -v s="$2" '$1 == s { print $2 }'; }
flash() { echo $(( $(sec "$1" .text) + $(sec "$1" .rodata) )); }
ram() { echo $(( $(sec "$1" .data) + $(sec "$1" .bss) )); }

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
echo "| N | Q | node image flash | node image RAM | scenario image flash | scenario image RAM | size_of Site (L = 2) | steps measured | worst instructions / step | worst stack / step (measured) | stack bound / step (static) | node image stack bound (static) |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
for nq in "n4 q8" "n4 q16" "n8 q8" "n8 q16" "n16 q8" "n16 q16"; do
  set -- $nq
  n=${1#n}
  q=${2#q}
  feats=""
  [ "$n" != 8 ] && feats="n$n"
  [ "$q" != 8 ] && feats="${feats:+$feats,}q$q"
  if ! cargo build --release --quiet ${feats:+--features "$feats"} 2>/tmp/hilock-figures-build.log; then
    why=$(grep -o "Q must be at least N[^\"]*" /tmp/hilock-figures-build.log | head -1 || true)
    echo "| $n | $q | does not build: ${why:-see cargo output} | | | | | | | | | |"
    continue
  fi
  log=$(timeout 300 qemu-system-arm -machine mps2-an386 -cpu cortex-m4 -nographic \
    -semihosting-config enable=on,target=native -icount shift=6 -kernel "$dir/hilock-embedded" 2>&1 || true)
  grep -q "RESULT: PASS" <<<"$log" || { echo "$log" >&2; echo "run failed for N=$n Q=$q" >&2; exit 1; }
  echo "$log" >"$logs/$n-$q"
  site=$(sed -n 's/.*sizes (bytes): Site \([0-9]*\),.*/\1/p' <<<"$log")
  read -r steps ins stack < <(sed -n 's/^WORST .*: \([0-9]*\) steps, \([0-9]*\) instructions, \([0-9]*\) bytes of stack/\1 \2 \3/p' <<<"$log")
  step_bound=$(bound "$dir/hilock-embedded" meter::step_once)
  # Main path + the one enabled interrupt + its exception frame: 8 words, 18 more with the
  # FPU state, 4 bytes of 8-byte alignment = 108.
  reset=$(bound "$dir/node" Reset)
  pendsv=$(bound "$dir/node" PendSV)
  node_bound=none
  [ "$reset" != none ] && [ "$pendsv" != none ] && node_bound=$((reset + pendsv + 108))
  echo "| $n | $q | $(flash "$dir/node") | $(ram "$dir/node") | $(flash "$dir/hilock-embedded") | $(ram "$dir/hilock-embedded") | $site | $steps | $ins | $stack | $step_bound | $node_bound |"
done

# The worst step of each phase of the scenario image's run, and of each kind of input at
# N = Q = 8 (the lines the firmware prints: PHASE ..., and the table after "worst step by
# kind").
runs=$(cd "$logs" && ls | sort -t- -k1,1n -k2,2n)
echo
printf "| phase: worst instructions / stack bytes per step |"
for r in $runs; do printf " N = %s, Q = %s |" "${r%-*}" "${r#*-}"; done
echo
printf "|---|"
for _ in $runs; do printf -- "---|"; done
echo
for phase in "scenarios" "random None" "random Pip" "stress IR" "stress W"; do
  printf "| %s (steps) |" "$phase"
  for r in $runs; do
    cell=$(sed -n "s/^PHASE $phase: \([0-9]*\) steps, worst \([0-9]*\) instructions, worst stack \([0-9]*\) bytes/\2 \/ \3 (\1)/p" "$logs/$r")
    # A phase with no steps did not run (the 5-node scenarios need N >= 5).
    [ "$cell" = "0 / 0 (0)" ] && cell=""
    printf " %s |" "${cell:-skipped}"
  done
  echo
done
if [ -f "$logs/8-8" ]; then
  echo
  echo "| kind of input, N = Q = 8 | steps | worst instructions | worst stack bytes |"
  echo "|---|---|---|---|"
  sed -n '/^worst step by kind/,/^WORST/p' "$logs/8-8" | sed -n \
    's/^  \(.*[a-z]\)  *steps  *\([0-9]*\)  *instructions  *\([0-9]*\)  *stack  *\([0-9]*\) bytes/| \1 | \2 | \3 | \4 |/p' |
    sed 's/^| \(.*\) | 0 | 0 | 0 |$/| \1 | 0 (the firmware issues none) | — | — |/'
fi
cargo build --release --quiet
