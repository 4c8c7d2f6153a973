#!/usr/bin/env bash
# The hilock runtime vs etcd's lock API on loopback; results in docs/benchmarks.md,
# "Against etcd on loopback".
#
#   benches/etcd-compare.sh [etcd_compare options, e.g. --seconds 5 --clients 1,4,16]
#
# Installs etcd-server (and protobuf-compiler, which etcd-client's build needs) from
# Debian's packages if they are missing, starts a one-member etcd on 127.0.0.1 (client and
# peer ports free ones, data in a temporary directory on disk), waits for it to be
# healthy, runs `etcd_compare` (release build, feature `etcd`) against it and stops etcd
# and removes its data on exit. Where etcd cannot be had it prints "SKIP: ..." and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."

skip() {
  echo "SKIP: $* — the hilock vs etcd comparison did not run" >&2
  exit 0
}

as_root() {
  if [ "$(id -u)" = 0 ]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo "$@"
  else
    return 1
  fi
}

# apt_install COMMAND PACKAGE: make COMMAND available from Debian's PACKAGE.
apt_install() {
  local cmd=$1 pkg=$2
  command -v "$cmd" >/dev/null 2>&1 && return 0
  command -v apt-get >/dev/null 2>&1 || return 1
  echo "== installing $pkg (for $cmd)" >&2
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get install -y -q "$pkg" >&2 ||
    { as_root apt-get update -q >&2 && as_root apt-get install -y -q "$pkg" >&2; } ||
    return 1
  command -v "$cmd" >/dev/null 2>&1
}

apt_install etcd etcd-server || skip "etcd is not installed and 'apt-get install etcd-server' is not possible here"
apt_install protoc protobuf-compiler || skip "protoc (protobuf-compiler), needed to build the etcd client, cannot be installed here"
apt_install curl curl || skip "curl, needed to wait for etcd's health, cannot be installed here"

echo "== building etcd_compare (release, feature etcd)" >&2
cargo build --release -q -p hilock-benches --features etcd --bin etcd_compare

# A free TCP port on 127.0.0.1 (nothing answers a connect to it).
free_port() {
  local p
  for _ in $(seq 1 200); do
    p=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"
      return 0
    fi
  done
  return 1
}

dir=$(mktemp -d "${TMPDIR:-/tmp}/hilock-etcd.XXXXXX")
etcd_pid=
cleanup() {
  if [ -n "$etcd_pid" ] && kill -0 "$etcd_pid" 2>/dev/null; then
    kill "$etcd_pid" 2>/dev/null || true
    wait "$etcd_pid" 2>/dev/null || true
  fi
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cport=$(free_port)
pport=$(free_port)
while [ "$pport" = "$cport" ]; do pport=$(free_port); done
version=$(etcd --version 2>/dev/null | sed -n 1p)
echo "== starting $version on 127.0.0.1:$cport (peer port $pport, data in $dir)" >&2
etcd --name hilock-bench \
  --data-dir "$dir/data" \
  --listen-client-urls "http://127.0.0.1:$cport" \
  --advertise-client-urls "http://127.0.0.1:$cport" \
  --listen-peer-urls "http://127.0.0.1:$pport" \
  --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
  --initial-cluster "hilock-bench=http://127.0.0.1:$pport" \
  --initial-cluster-state new \
  >"$dir/etcd.log" 2>&1 &
etcd_pid=$!

healthy=
for _ in $(seq 1 150); do
  if ! kill -0 "$etcd_pid" 2>/dev/null; then
    echo "etcd exited at start; its log:" >&2
    tail -n 30 "$dir/etcd.log" >&2
    exit 1
  fi
  if curl -fsS --max-time 1 "http://127.0.0.1:$cport/health" 2>/dev/null | grep -q '"health":"true"'; then
    healthy=1
    break
  fi
  sleep 0.2
done
if [ -z "$healthy" ]; then
  echo "etcd did not become healthy within 30 s; its log:" >&2
  tail -n 30 "$dir/etcd.log" >&2
  exit 1
fi
echo "== etcd is healthy; running the comparison" >&2

cargo run --release -q -p hilock-benches --features etcd --bin etcd_compare -- \
  --endpoint "127.0.0.1:$cport" "$@"
