#!/usr/bin/env bash
# A pod running a container, on a fresh machine (as root): installs what
# rktlet needs, builds it, starts the local test registry (so no internet is
# needed; DEMO_IMAGE=docker.io/library/busybox:latest uses the real one),
# starts the daemon on a private socket and data dir, runs `rktlet demo` (the
# crictl walk-through of docs/crictl.md: pull, pod, container, exec, logs,
# stats, stop, remove) and stops everything again.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
work=${DEMO_WORK:-/var/tmp/rktlet-demo}
port=${DEMO_REGISTRY_PORT:-5000}
image=${DEMO_IMAGE:-}

./scripts/install-deps.sh
cargo build --release --locked
bin="$root/target/release/rktlet"
mkdir -p "$work"

pid=""
cleanup() {
  [ -n "$pid" ] && { kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
  [ -z "${DEMO_IMAGE:-}" ] && WORK="$work/registry" ./tests/fixtures/seed-registry.sh stop >/dev/null 2>&1 || true
}
trap cleanup EXIT

if [ -z "$image" ]; then
  WORK="$work/registry" ./tests/fixtures/seed-registry.sh "$port" >"$work/registry.log" 2>&1 \
    || { cat "$work/registry.log" >&2; exit 1; }
  image="127.0.0.1:$port/busybox:latest"
fi
rm -f "$work/rktlet.sock"
"$bin" serve --socket "$work/rktlet.sock" --data-dir "$work/data" --log-level warn 2>"$work/daemon.log" &
pid=$!
for _ in $(seq 200); do [ -S "$work/rktlet.sock" ] && break; sleep 0.05; done
"$bin" demo --socket "$work/rktlet.sock" --image "$image" --log-dir "$work/logs"
