#!/usr/bin/env bash
# conformance.sh - the official Kubernetes CRI conformance suite, critest v1.29.0 (unmodified;
# CRI_TOOLS_TAG=v1.36.0 for the newest release), against rktlet, fully offline. Run as root,
# after a build (target/debug or target/release).
#
#   1. the test images critest pulls are built locally and served by a loopback registry, by the
#      offline kit cri-conformance.sh (its stages images, registry, push; $CRI_TOOLS_KIT);
#   2. rktlet serves CRI on $PEER_DIR/rktlet/rktlet.sock with a config of its own: every registry
#      critest names (registry.k8s.io, gcr.io, k8s.gcr.io, docker.io, public.ecr.aws) mirrored to
#      that registry, and a bridge network of its own ($CNI_BRIDGE, $CNI_SUBNET);
#   3. the kit's critest stage runs critest against that socket (and its bench stage with BENCH=1;
#      CRITEST_RUN=0 BENCH=1 runs the benchmark alone, without the conformance run);
#   4. all pods are removed, the daemon and the registry stopped, the bridge deleted;
#   5. the failed specs are listed and the last line is `N passed, N failed, N skipped`
#      (benchmark alone: its failed specs, then `benchmark written to DIR`).
# Exit status: non-zero when a spec failed or critest left no report (benchmark alone: when a
# benchmark spec failed or it wrote no *_benchmark_data.json).
#
# Environment:
#   PEER_DIR (/tmp/rktlet-conformance)  everything: kit tools (bin/), images, registry, rktlet's
#                                       config/data (rktlet/), results (results/: critest.log,
#                                       critest.json, critest-specs.tsv, rktlet.log, bench/)
#   REG_PORT (5070)         the loopback registry's port
#   REGISTRY                host:port of a registry that already serves the test images (built
#                           and pushed elsewhere, e.g. on a VM's host, reached at 10.0.2.2:PORT):
#                           step 1 is skipped and every critest image name, 127.0.0.1:$REG_PORT/...
#                           included, is mirrored to it
#   CRITEST                 a critest binary (the official cri-tools v1.29.0 release's); default:
#                           the kit's copy, unpacked into $PEER_DIR/bin/critest
#   RKTLET                  the rktlet binary (default target/debug/rktlet, else target/release/rktlet)
#   CRITEST_EXTRA           extra critest arguments, e.g. "--ginkgo.focus sysctls"
#   POD_IP_TESTS=1          also run the 3 specs that send HTTP to a pod IP (skipped by default)
#   DIGEST_TEST=1           also run the spec pinned to an upstream digest (fails offline)
#   BENCH=1                 also run critest --benchmark: BENCH_N (50) samples, BENCH_PAR (1) at
#                           a time, into results/bench (results/bench-pN with BENCH_PAR=N):
#                           *_benchmark_data.json, ginkgo-report.json, bench.log
#   CRITEST_RUN=0           with BENCH=1: the benchmark only, no conformance run (default 1)
#   CNI_BRIDGE (rktcni0), CNI_SUBNET (10.213.78.0/24)   the pod network
#   RKTLET_ARGS             extra `rktlet serve` flags, e.g. "--pod-pool-size 0 --log-level debug"
#   START_TIMEOUT (60)      seconds to wait for the daemon's socket
#   CRI_TOOLS_KIT           the kit (default ../shared/tools/cri-conformance.sh beside the project)
#   SKIP_DEPS=1             do not run ./scripts/install-deps.sh first
set -euo pipefail
caller=$PWD
cd "$(dirname "$0")/.."
root=$(pwd)
# paths given in the environment are relative to where the script was started
abs() { case $1 in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$caller/$1" ;; esac; }

log() { printf '\n=== conformance: %s\n' "$*" >&2; }
# the error comes last, after the cleanup (once the EXIT trap is set)
die() {
  [ -z "${armed:-}" ] || cleanup
  printf 'conformance: ERROR: %s\n' "$*" >&2
  exit 1
}
[ "$(id -u)" = 0 ] || die "run as root"
CRITEST_RUN=${CRITEST_RUN:-1}
case $CRITEST_RUN in 0 | 1) ;; *) die "CRITEST_RUN=$CRITEST_RUN: 0 or 1" ;; esac
[ "$CRITEST_RUN" = 1 ] || [ -n "${BENCH:-}" ] || die "CRITEST_RUN=0 runs the benchmark alone: set BENCH=1"

KIT=$(abs "${CRI_TOOLS_KIT:-$root/../shared/tools/cri-conformance.sh}")
[ -f "$KIT" ] || die "the offline CRI test kit is not at $KIT (set CRI_TOOLS_KIT)"
export PEER_DIR=$(abs "${PEER_DIR:-/tmp/rktlet-conformance}")
export REG_PORT=${REG_PORT:-5070}
export CNI_BRIDGE=${CNI_BRIDGE:-rktcni0}
export CNI_SUBNET=${CNI_SUBNET:-10.213.78.0/24}
export CRI_TOOLS_TAG=${CRI_TOOLS_TAG:-v1.29.0}
mkdir -p "$PEER_DIR"
P=$(cd "$PEER_DIR" && pwd -P)
export PEER_DIR=$P
REG=127.0.0.1:$REG_PORT            # the name critest's image files give the test images
UPSTREAM=${REGISTRY:-$REG}        # where rktlet fetches them
RT=$P/rktlet                      # rktlet's config, data, socket, CNI config and IPAM state
RES=$P/results
SOCK=$RT/rktlet.sock
export CRI_ENDPOINT=unix://$SOCK  # every kit stage talks to rktlet, never to a containerd
DAEMON_LOG=$RES/rktlet.log
BENCH_DIR=$RES/bench              # where the kit's bench stage writes (bench-pN with BENCH_PAR=N)
[ "${BENCH_PAR:-1}" = 1 ] || BENCH_DIR=$RES/bench-p$BENCH_PAR
PIDFILE=$RT/rktlet.pid
START_TIMEOUT=${START_TIMEOUT:-60}
[ ${#SOCK} -le 100 ] || die "PEER_DIR too long for a unix socket path: $SOCK"
# each pod's log socket, $RT/data/pods/run/<uuid>/logger.sock, too (sun_path: 107 bytes and a NUL)
pod_sock=$RT/data/pods/run/00000000-0000-0000-0000-000000000000/logger.sock
[ ${#pod_sock} -le 107 ] || die "PEER_DIR too long: a pod's log socket would be $pod_sock (${#pod_sock} bytes, at most 107)"

if [ -n "${RKTLET:-}" ]; then
  bin=$(abs "$RKTLET")
elif [ -x target/debug/rktlet ]; then
  bin=target/debug/rktlet
else
  bin=target/release/rktlet
fi
[ -x "$bin" ] || die "no rktlet binary at $bin: build it first (cargo build), or set RKTLET=path"
bin=$(cd "$(dirname "$bin")" && pwd -P)/$(basename "$bin")

[ -n "${SKIP_DEPS:-}" ] || ./scripts/install-deps.sh

# the official critest: the kit's copy, or $CRITEST put in its place for the kit's stage
if [ -n "${CRITEST:-}" ]; then
  CRITEST=$(abs "$CRITEST")
  [ -x "$CRITEST" ] || die "CRITEST=$CRITEST is not an executable"
  v=$("$CRITEST" --version 2>/dev/null | head -1 || true)
  case $v in critest*"${CRI_TOOLS_TAG#v}"*) ;; *) die "CRITEST=$CRITEST reports '$v', not critest ${CRI_TOOLS_TAG#v}" ;; esac
  mkdir -p "$P/bin"
  if ! cmp -s "$CRITEST" "$P/bin/critest"; then
    install -m 0755 "$CRITEST" "$P/bin/critest.tmp" && mv "$P/bin/critest.tmp" "$P/bin/critest"
  fi
  echo "critest: $CRITEST ($v)" >&2
fi

kit() { bash "$KIT" "$@"; }
crictl_() { "$P/bin/crictl" --runtime-endpoint "$CRI_ENDPOINT" --image-endpoint "$CRI_ENDPOINT" "$@"; }

# pid of our daemon when it is alive (its command line names our socket: never a recycled pid)
daemon_pid() {
  local pid
  [ -s "$PIDFILE" ] || return 1
  pid=$(cat "$PIDFILE")
  { tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null | grep -qF -- "--socket $SOCK " || return 1
  echo "$pid"
}

stop_daemon() {
  local pid
  pid=$(daemon_pid) || { rm -f "$PIDFILE"; return 0; }
  log "removing all pods, stopping rktlet (pid $pid)"
  timeout 300 "$P/bin/crictl" --runtime-endpoint "$CRI_ENDPOINT" --timeout 120s rmp -f -a >&2 ||
    echo "crictl rmp -f -a failed" >&2
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "rktlet (pid $pid) still running 60 s after SIGTERM: SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$PIDFILE"
  echo "rktlet stopped" >&2
}

# Unmounts whatever is still mounted under rktlet's directory (pods a killed daemon left).
unmount_leftovers() {
  local m
  for m in $(awk -v p="$RT/" 'index($2, p) == 1 { print $2 }' /proc/self/mounts | sort -r); do
    umount -l "$m" 2>/dev/null && echo "unmounted leftover $m" >&2
  done
  return 0
}

cleaned=
cleanup() {
  [ -z "$cleaned" ] || return 0
  cleaned=1
  set +e
  stop_daemon
  unmount_leftovers
  # the kit's stop: stops the registry it started and deletes the bridge $CNI_BRIDGE
  kit stop >&2
  if awk -v p="$RT/" 'index($2, p) == 1 { f = 1 } END { exit !f }' /proc/self/mounts; then
    echo "mounts left under $RT: keeping its data" >&2
  else
    rm -rf --one-file-system "$RT/data" "$RT/cni-ipam" "$SOCK" "$SOCK.lock"
  fi
  set -e
}
trap cleanup EXIT
armed=1
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------- test images and registry
if [ -n "${REGISTRY:-}" ]; then
  log "test images: served by $REGISTRY"
else
  log "test images (kit stages images registry push, registry on $REG)"
  kit images registry push >&2
fi

# ---------------------------------------------------------------- rktlet's configuration
write_config() {
  mkdir -p "$RT/cni" "$RT/cni-ipam" "$RES"
  local h mirrors=""
  local hosts=(registry.k8s.io k8s.gcr.io gcr.io docker.io registry-1.docker.io public.ecr.aws)
  [ "$UPSTREAM" = "$REG" ] || hosts+=("$REG")
  for h in "${hosts[@]}"; do
    mirrors+="
[hosts.\"$h\"]
skip_upstream = true
mirrors = [{ endpoint = \"http://$UPSTREAM\", insecure = true }]
"
  done
  # Image names keep their path on a mirror: gcr.io/k8s-staging-cri-tools/test-image-1
  # -> $REG/k8s-staging-cri-tools/test-image-1, public.ecr.aws/docker/library/busybox
  # -> $REG/docker/library/busybox, docker.io/library/busybox -> $REG/library/busybox.
  cat >"$RT/registries.toml" <<EOF
# Every image critest pulls comes from the loopback registry; nothing goes upstream.
insecure = ["$REG", "$UPSTREAM"]
signature_policy = "policy.json"
$mirrors
EOF
  cat >"$RT/policy.json" <<'EOF'
{ "default": [{ "type": "insecureAcceptAnything" }], "transports": { "docker": {} } }
EOF
  # like contrib/cni/10-rktlet.conflist, on a bridge and subnet of our own; no masquerade
  # and no default route: pods reach nothing beyond the bridge (rktlet brings up lo itself)
  rm -f "$RT"/cni/*
  cat >"$RT/cni/10-rktlet-conformance.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "rktlet-conformance",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$CNI_BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{ "subnet": "$CNI_SUBNET" }]],
        "dataDir": "$RT/cni-ipam"
      }
    },
    { "type": "portmap", "capabilities": { "portMappings": true }, "snat": true }
  ]
}
EOF
  cat >"$RT/config.toml" <<EOF
# rktlet serve --config for the conformance run (socket, data and CNI dirs are flags)
registry_config = "$RT/registries.toml"
log_level = "info"
log_format = "text"
streaming_address = "127.0.0.1:0"
EOF
}

# ---------------------------------------------------------------- the daemon
start_daemon() {
  local pid
  if pid=$(daemon_pid); then
    log "a previous run's rktlet (pid $pid) is still running: stopping it"
    stop_daemon
  fi
  unmount_leftovers
  if awk -v p="$RT/" 'index($2, p) == 1 { f = 1 } END { exit !f }' /proc/self/mounts; then
    die "mounts remain under $RT after unmounting: clean them up first"
  fi
  rm -rf --one-file-system "$RT/data" "$RT/cni-ipam"
  rm -f "$SOCK"
  write_config
  # shellcheck disable=SC2086
  set -- serve --socket "$SOCK" --data-dir "$RT/data" --cni-conf-dir "$RT/cni" \
    --cni-bin-dir /usr/lib/cni --config "$RT/config.toml" ${RKTLET_ARGS:-}
  log "starting rktlet: $bin $* (log: $DAEMON_LOG)"
  : >"$DAEMON_LOG"
  setsid "$bin" "$@" >>"$DAEMON_LOG" 2>&1 </dev/null &
  echo $! >"$PIDFILE"
  # Up when crictl (the CRI client critest uses) gets an answer, or, should only rktlet's own
  # client get one, up as well: critest then shows what the official client cannot do.
  local i
  for i in $(seq $((START_TIMEOUT * 5))); do
    daemon_pid >/dev/null || { tail -30 "$DAEMON_LOG" >&2; die "rktlet exited at start (log: $DAEMON_LOG)"; }
    if [ -S "$SOCK" ]; then
      if crictl_ --timeout 5s version >&2 2>"$RES/crictl-version.err"; then
        rm -f "$RES/crictl-version.err"
        return 0
      fi
      if [ "$i" -ge 10 ] && "$bin" info --socket "$SOCK" >/dev/null 2>&1; then
        echo "WARNING: rktlet answers its own client but not crictl $CRI_TOOLS_TAG:" >&2
        sed 's/^/  /' "$RES/crictl-version.err" >&2
        echo "  running critest anyway" >&2
        return 0
      fi
    fi
    sleep 0.2
  done
  tail -30 "$DAEMON_LOG" >&2
  die "rktlet did not answer on $SOCK within $START_TIMEOUT s"
}

start_daemon
grep -iE 'error|invalid|unknown' "$DAEMON_LOG" >&2 && echo "(the lines above are from the daemon log at start)" >&2 || true

# ---------------------------------------------------------------- critest
if [ "$CRITEST_RUN" = 1 ]; then
  rm -f "$RES/critest.json" "$RES/critest.log" "$RES/critest-specs.tsv"
  log "critest $CRI_TOOLS_TAG against $CRI_ENDPOINT"
  t0=$(date +%s)
  kit critest >&2
  echo "critest took $(($(date +%s) - t0)) s" >&2
fi
if [ -n "${BENCH:-}" ]; then
  t0=$(date +%s)
  kit bench >&2       # clears the *.json of $BENCH_DIR first
  echo "critest --benchmark took $(($(date +%s) - t0)) s" >&2
  kit summary 2>&1 | awk '/^--- /{p=1} p' >&2 || true   # its benchmark medians
fi

cleanup
trap - EXIT INT TERM
armed=

# ---------------------------------------------------------------- result
# failures_of REPORT: a line per failed spec, and per failure outside the specs (e.g. in
# BeforeSuite, which fails the run even with no failed spec)
failures_of() {
  jq -r '.[0].SpecReports[]? | select(.LeafNodeType == "It")
    | select(.State | IN("failed", "panicked", "timedout", "interrupted", "aborted"))
    | "FAIL: \(.ContainerHierarchyTexts | join(" ")) \(.LeafNodeText)"
      + (if .State == "failed" then "" else " [\(.State)]" end)' "$1"
  jq -r '.[0].SpecReports[]? | select(.LeafNodeType != "It")
    | select(.State | IN("failed", "panicked", "timedout", "interrupted", "aborted"))
    | "FAIL (\(.LeafNodeType)): \(.Failure.Message // "" | split("\n")[0])"' "$1"
}

if [ "$CRITEST_RUN" = 0 ]; then
  report=$BENCH_DIR/ginkgo-report.json
  if ! jq -e 'type == "array" and length > 0' "$report" >/dev/null 2>&1; then
    tail -20 "$BENCH_DIR/bench.log" 2>/dev/null || true
    die "critest --benchmark produced no report ($report); see $BENCH_DIR/bench.log and $DAEMON_LOG"
  fi
  failures_of "$report"
  data=$(cd "$BENCH_DIR" && ls -- *_benchmark_data.json 2>/dev/null | tr '\n' ' ' || true)
  [ -n "$data" ] || die "critest --benchmark wrote no *_benchmark_data.json to $BENCH_DIR"
  succeeded=$(jq -r '.[0].SuiteSucceeded' "$report")
  echo "results: $BENCH_DIR (${data}ginkgo-report.json, bench.log), $DAEMON_LOG"
  echo "benchmark written to $BENCH_DIR"
  [ "$succeeded" = true ] || exit 1
  exit 0
fi

report=$RES/critest.json
if ! jq -e 'type == "array" and length > 0' "$report" >/dev/null 2>&1; then
  tail -20 "$RES/critest.log" 2>/dev/null || true
  die "critest produced no report ($report); see $RES/critest.log and $DAEMON_LOG"
fi
failures_of "$report"
# every skipped spec with its reason: critest's own (a feature the node lacks), or the kit's
# selection (POD_IP_TESTS, DIGEST_TEST unset; benchmarks run by scripts/critest-bench.sh)
jq -r '.[0].SpecReports[]? | select(.LeafNodeType == "It") | select(.State | IN("skipped", "pending"))
  | "SKIPPED: \(.ContainerHierarchyTexts | join(" ")) \(.LeafNodeText): "
    + (if (.Failure.Message // "") != "" then (.Failure.Message | split("\n")[0])
       elif (.LeafNodeText | test("benchmark")) or ((.ContainerHierarchyTexts | join(" ")) | test("benchmark"))
       then "a benchmark (scripts/critest-bench.sh runs them)"
       else "not selected here (POD_IP_TESTS, DIGEST_TEST: see this script'"'"'s header)" end)' "$report"
succeeded=$(jq -r '.[0].SuiteSucceeded' "$report")
read -r passed failed skipped < <(jq -r '
  [.[0].SpecReports[]? | select(.LeafNodeType == "It")] as $s
  | [ ($s | map(select(.State == "passed")) | length),
      ($s | map(select(.State | IN("failed", "panicked", "timedout", "interrupted", "aborted"))) | length),
      ($s | map(select(.State | IN("skipped", "pending"))) | length) ] | @tsv' "$report")
echo "results: $RES (critest.log, critest.json, critest-specs.tsv, rktlet.log)"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ] && [ "$succeeded" = true ]
