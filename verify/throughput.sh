#!/usr/bin/env bash
# Model-checking throughput in one run on one CPU: hilock's token model (the five "mix"
# configurations of verify/tests/token.rs, in the test profile `cargo test -p verify`
# uses, one checker thread) against Stateright's own Paxos example with 3 clients
# (`paxos check 3`, release profile as Stateright's bench.sh builds it). Both are pinned
# to CPU 0 with taskset, so Stateright's example, which starts one checker thread per
# CPU it may use, runs one thread too. Prints each rate in unique states per second and
# their ratio, and the ceiling of Stateright's own loop: a model whose states cost nothing
# (verify/tests/checker_ceiling.rs) checked with one property and with as many as the
# token model has. docs/benchmarks.md, "Model checking throughput", has the figures.
#
#   bash verify/throughput.sh
set -euo pipefail
cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-$PWD/target}
command -v taskset > /dev/null || { echo "throughput: taskset not found (util-linux), not measured"; exit 0; }

# Stateright's sources as this workspace resolves them (its examples are not part of the
# library, so they are built from a copy of the crate).
manifest=$(cargo metadata --format-version 1 |
  python3 -c 'import json,sys; print(next(p["manifest_path"] for p in json.load(sys.stdin)["packages"] if p["name"] == "stateright"))')
copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT
cp -r "$(dirname "$manifest")" "$copy/stateright"
echo "building Stateright's Paxos example ($(basename "$(dirname "$manifest")"))" >&2
(cd "$copy/stateright" && CARGO_TARGET_DIR="$target/stateright-examples" cargo build -q --release --example paxos 2> "$copy/build.log") ||
  { cat "$copy/build.log" >&2; exit 1; }
echo "building the token model's checks (test profile)" >&2
test_bin() {
  cargo test -q -p verify --test "$1" --no-run --message-format json 2> /dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == sys.argv[1]:
        print(m["executable"])' "$1"
}
bin=$(test_bin token)
ceiling_bin=$(test_bin checker_ceiling)

now() { date +%s.%N; }
t0=$(now)
paxos=$(taskset -c 0 "$target/stateright-examples/release/examples/paxos" check 3 | grep '^Done')
t1=$(now)
paxos_unique=$(sed -E 's/.*unique=([0-9]+).*/\1/' <<< "$paxos")
paxos_rate=$(python3 -c "print(round($paxos_unique / ($t1 - $t0)))")
echo "Stateright paxos check 3: $paxos_unique unique states in $(python3 -c "print(round($t1 - $t0, 2))") s: $paxos_rate states/s"

token=$(cd verify && taskset -c 0 "$bin" mixed_workloads_chain_and_star --exact --nocapture --test-threads 1 2>&1)
read -r token_unique token_secs < <(grep -oE '[0-9]+ unique states +[0-9.]+(ms|s)' <<< "$token" |
  python3 -c 'import sys
u = t = 0.0
for l in sys.stdin:
    n, _, _, d = l.split()
    u += int(n)
    t += float(d[:-2]) / 1000 if d.endswith("ms") else float(d[:-1])
print(int(u), t)')
token_rate=$(python3 -c "print(round($token_unique / $token_secs))")
echo "hilock token model, mix configurations: $token_unique unique states in $token_secs s: $token_rate states/s"
echo "ratio token / paxos: $(python3 -c "print(round($token_rate / $paxos_rate, 2))")"

ceiling=$(cd verify && taskset -c 0 "$ceiling_bin" --ignored --nocapture --test-threads 1 2>&1 | grep -o 'ceiling: .*')
echo "$ceiling" | sed 's/^ceiling:/Stateright on a model that costs nothing,/'
ceiling_rate=$(tail -1 <<< "$ceiling" | sed -E 's/.*: ([0-9]+) states\/s$/\1/')
echo "ratio token / that ceiling: $(python3 -c "print(round($token_rate / $ceiling_rate, 2))")"
python3 -c "
left = 1e9 / 500000 - 1e9 / $ceiling_rate
print(f'at 500,000 states/s a model would have {left:.0f} ns per state for its own work'
      + (' (none: out of reach whatever the model)' if left <= 0 else ''))"
