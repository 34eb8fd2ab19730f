#!/usr/bin/env bash
# A pod running a container, on a fresh machine (as root): installs what
# rktlet needs, builds it, starts a local registry holding a busybox image (so
# no internet is needed), starts the daemon on a private socket and data dir,
# runs `rktlet demo` (the crictl walk-through of docs/crictl.md: pull, pod,
# container, exec, logs, stats, stop, remove) and stops everything again.
#
# Environment:
#   DEMO_REGISTRY_PORT (5000)  the local registry's port (127.0.0.1 only); set it when 5000 is taken
#   DEMO_IMAGE                 use this image instead of the local registry's, e.g.
#                              docker.io/library/busybox:latest (then no registry is started)
#   DEMO_WORK (/var/tmp/rktlet-demo)  the registry, the daemon's socket, data dir, logs
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
work=${DEMO_WORK:-/var/tmp/rktlet-demo}
port=${DEMO_REGISTRY_PORT:-5000}
image=${DEMO_IMAGE:-}

say() { echo "demo: $*" >&2; }
if [ -z "$image" ] && ss -Hltn "sport = :$port" 2>/dev/null | grep -q .; then
  say "port $port is taken: set DEMO_REGISTRY_PORT to a free port (or DEMO_IMAGE to a registry image);"
  say "a registry left by an earlier demo stops with: WORK=$work/registry tests/fixtures/seed-registry.sh stop"
  exit 1
fi
say "installing what rktlet and the demo's registry need (scripts/install-deps.sh demo)"
./scripts/install-deps.sh demo
say "building rktlet (cargo build --release; the first build takes about 7 minutes on 2 cores)"
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
  say "starting a local registry on 127.0.0.1:$port with a busybox image"
  ONLY_BUSYBOX=1 WORK="$work/registry" ./tests/fixtures/seed-registry.sh "$port" >"$work/registry.log" 2>&1 \
    || { cat "$work/registry.log" >&2; exit 1; }
  image="127.0.0.1:$port/busybox:latest"
fi
say "starting rktlet serve on $work/rktlet.sock (log: $work/daemon.log)"
rm -f "$work/rktlet.sock"
"$bin" serve --socket "$work/rktlet.sock" --data-dir "$work/data" --log-level warn 2>"$work/daemon.log" &
pid=$!
for _ in $(seq 200); do [ -S "$work/rktlet.sock" ] && break; sleep 0.05; done
"$bin" demo --socket "$work/rktlet.sock" --image "$image" --log-dir "$work/logs"
