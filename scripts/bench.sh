#!/usr/bin/env bash
# The side-by-side benchmark on a fresh machine (as root): installs what it
# needs, starts the local test registry, builds rktlet (release), starts three
# daemons on data dirs of their own (in-process with cold pod starts; `pool`,
# the same with a pod pool of 2, measured on pod starts only; and
# --exec-mode: the original rktlet's exec design) and a private containerd (Debian's containerd + runc,
# scripts/containerd-baseline.sh; CONTAINERD=0 leaves it out) as a third
# endpoint; then runs `rktlet bench` against them, one endpoint at a
# time, and writes docs/bench.{md,json,svg}. Extra arguments go to
# `rktlet bench` (e.g. --list-pods 10; rounds come from ROUNDS=200 and IMAGE_ROUNDS=20;
# PROFILE_B=release-lto adds rktlet built with that cargo profile as one more
# endpoint), and renders README.md's
# performance section (between `<!-- bench:begin -->` and `<!-- bench:end -->`)
# from the new bench.json (`rktlet bench --render-only`, which measures
# nothing: run it alone after editing the renderer). bench.md is rewritten
# whole, except for the critest --benchmark section of
# scripts/critest-bench.sh (the lines from `<!-- critest-benchmark:begin -->`
# to `<!-- critest-benchmark:end -->`), which is kept at its end.
#
# NODE=container: the same run on a node whose PID 1 is systemd (the node
# container of ../shared/tools/node-container, booted as scripts/node-lane.sh
# boots it): rktlet under the systemd cgroup driver (its pods in systemd-run
# units; no pod pool there) and containerd + runc with `SystemdCgroup = true`
# (pods in slices), both in the node, on a tmpfs of the node's (its root is an
# overlay, which no overlay's upper dir may be on). Endpoints: in-process and
# containerd (MODES=... changes rktlet's). Writes docs/bench-node.{md,json,svg}
# and README.md's systemd-node section (`<!-- bench-node:begin -->`).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

if [ "${NODE:-}" = container ]; then
  node_sh=${NODE_CONTAINER_TOOLS:-$root/../shared/tools/node-container}/node.sh
  [ -f "$node_sh" ] || { echo "node-container tools not found at $node_sh (set NODE_CONTAINER_TOOLS)" >&2; exit 1; }
  ./scripts/install-deps.sh
  # built before the node boots: the node sees the host's root as it was then
  [ -n "${RKTLET:-}" ] || cargo build --release --locked
  node_bin=${RKTLET:-$root/target/release/rktlet}
  name=node-bench-$$
  node_out=$(mktemp -d)
  trap "bash '$node_sh' stop '$name' >/dev/null 2>&1 || true; rm -rf '$node_out'" EXIT
  SYSTEMD_NSPAWN_API_VFS_WRITABLE=1 SYSTEMD_SECCOMP=0 NET=host EXTRA_NSPAWN_ARGS=--capability=all \
    bash "$node_sh" start "$name"
  node_tmp=/var/tmp/node-bench
  bash "$node_sh" exec "$name" sh -c "mkdir -p $node_tmp && mount -t tmpfs -o size=8g,mode=0755 node-bench $node_tmp"
  bash "$node_sh" exec "$name" env -C "$root" NODE= BENCH_IN_NODE=1 RKTLET="$node_bin" \
    BENCH_WORK=$node_tmp/work BENCH_OUT=$node_tmp/out BENCH_REGISTRY_PORT="${NODE_REGISTRY_PORT:-5081}" \
    MODES="${MODES:-in-process}" BRIDGE=ctrdnode0 SUBNET=10.89.0.0/16 ROUNDS="${ROUNDS:-200}" \
    IMAGE_ROUNDS="${IMAGE_ROUNDS:-20}" DENSITY="${DENSITY:-20,110}" CONCURRENCY="${CONCURRENCY:-4}" \
    CONTAINERD="${CONTAINERD:-1}" ./scripts/bench.sh --context "node=systemd as PID 1 (node container), systemd cgroup driver; data dirs on tmpfs" "$@"
  bash "$node_sh" exec "$name" tar -C "$node_tmp/out" -c . | tar -x -C "$node_out"
  out=${BENCH_OUT:-$root/docs}
  for f in md json svg; do cp "$node_out/bench.$f" "$out/bench-node.$f"; done
  echo "wrote $out/bench-node.md, $out/bench-node.json, $out/bench-node.svg"
  if [ "$out" = "$root/docs" ]; then
    "$node_bin" bench --render-only "$out/bench-node.json" --readme "$root/README.md"
    echo "rendered README.md's systemd-node section from $out/bench-node.json"
  fi
  exit 0
fi
work=${BENCH_WORK:-/var/tmp/rktlet-bench}
port=${BENCH_REGISTRY_PORT:-5000}
out=${BENCH_OUT:-$root/docs}
containerd=${CONTAINERD:-1}

# in the node (NODE=container) the host installed them; the node's root is the host's
[ -n "${BENCH_IN_NODE:-}" ] || ./scripts/install-deps.sh
# RKTLET=path measures that binary instead of building one (a release build
# takes about 7 minutes on 2 cores)
if [ -n "${RKTLET:-}" ]; then
  bin=$RKTLET
else
  cargo build --release --locked
  bin="$root/target/release/rktlet"
fi
# PROFILE_B=NAME (a cargo profile of Cargo.toml, e.g. release-lto) measures
# rktlet built with that profile too, as one more in-process endpoint named
# after it: two build profiles side by side in one run
# MODES: rktlet's endpoints (in-process, pool, exec-mode)
read -r -a modes <<<"${MODES:-in-process pool exec-mode}"
if [ -n "${PROFILE_B:-}" ]; then
  cargo build --profile "$PROFILE_B" --locked
  modes+=("$PROFILE_B")
fi

mkdir -p "$work"
WORK="$work/registry" ./tests/fixtures/seed-registry.sh "$port" >"$work/seed.log" 2>&1 \
  || { cat "$work/seed.log" >&2; exit 1; }

# pods a failed or killed run left behind: the CLI removes them without a
# daemon (before this run too: the endpoints list every pod of their data dir,
# and a leftover pod carries the same bench label as this run's)
remove_leftover_pods() {
  for mode in "${modes[@]}"; do
    for state in run prepared prepare embryo exited-garbage garbage; do
      for pod in "$work/$mode/data/pods/$state"/*; do
        [ -e "$pod" ] && "$bin" --dir "$work/$mode/data" rm "$(basename "$pod")" >/dev/null 2>&1 || true
      done
    done
  done
}
remove_leftover_pods

pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  remove_leftover_pods
  [ "$containerd" = 1 ] && ./scripts/containerd-baseline.sh stop "$work/containerd" >/dev/null 2>&1 || true
  WORK="$work/registry" ./tests/fixtures/seed-registry.sh stop >/dev/null 2>&1 || true
}
trap cleanup EXIT

# rktlet's endpoints get the same CNI work as the containerd baseline
# (scripts/containerd-baseline.sh): bridge + host-local + portmap, no
# masquerade, on a bridge and subnet of their own. The default network
# (contrib/cni, ipMasq on) adds iptables calls to every pod start and stop
# that the baseline's pods do not make.
mkdir -p "$work/net.d"
sed -e 's/"ipMasq": true/"ipMasq": false/' -e 's/"bridge": "rktlet0"/"bridge": "rkbench0"/' \
  -e 's|10.66.0.0/16|10.67.0.0/16|' contrib/cni/10-rktlet.conflist >"$work/net.d/10-bench.conflist"
grep -q '"ipMasq": false' "$work/net.d/10-bench.conflist" \
  || { echo "bench: could not turn masquerade off in $work/net.d/10-bench.conflist" >&2; exit 1; }

endpoints=()
for mode in "${modes[@]}"; do
  flag=(--pod-pool-size 0 --cni-conf-dir "$work/net.d")
  [ "$mode" = pool ] && flag=(--pod-pool-size "${POOL_SIZE:-2}" --cni-conf-dir "$work/net.d")
  [ "$mode" = exec-mode ] && flag=(--exec-mode --cni-conf-dir "$work/net.d")
  mode_bin=$bin
  [ "$mode" = "${PROFILE_B:-}" ] && mode_bin="$root/target/$PROFILE_B/rktlet"
  rm -f "$work/$mode.sock" "$work/$mode.log"
  # JSON lines, warnings and each pod stop's record (its CNI DEL: the bench
  # reports StopPodSandbox beyond it); the exec-mode daemon stops pods
  # through the CLI, whose log is not this one
  RUST_LOG=warn,rktlet::stage1::teardown=debug "$mode_bin" serve --socket "$work/$mode.sock" \
    --data-dir "$work/$mode/data" "${flag[@]}" --log-format json 2>"$work/$mode.log" &
  pids+=($!)
  endpoints+=(--endpoint "$mode=$work/$mode.sock")
  [ "$mode" = exec-mode ] || endpoints+=(--daemon-log "$mode=$work/$mode.log")
done
if [ "$containerd" = 1 ]; then
  sock=$(./scripts/containerd-baseline.sh start "$work/containerd" "$port" | tail -1)
  endpoints+=(--endpoint "containerd=$sock")
fi
for mode in "${modes[@]}"; do
  for _ in $(seq 200); do [ -S "$work/$mode.sock" ] && break; sleep 0.05; done
done

# scripts/critest-bench.sh's section of bench.md: saved before `rktlet bench`
# rewrites the file, appended again after
crit_begin='<!-- critest-benchmark:begin -->'
crit_end='<!-- critest-benchmark:end -->'
critest_section=
if [ -f "$out/bench.md" ] && grep -qxF "$crit_end" "$out/bench.md"; then
  critest_section=$(awk -v b="$crit_begin" -v e="$crit_end" \
    '$0 == b { p = 1 } p { print } $0 == e { p = 0 }' "$out/bench.md")
fi

# 200 rounds, so that p99 is not just the slowest of 20 samples; the image
# lifecycle (a 50 MiB pull each round) keeps 20, and so does the exec-mode
# endpoint in every lifecycle (its calls take several times longer: an exec each);
# then density runs of DENSITY=20,110 pods started CONCURRENCY=4 at a time
# (in-process and containerd: the node's memory per pod, what was left behind)
"$bin" bench "${endpoints[@]}" --rounds "${ROUNDS:-200}" --image-rounds "${IMAGE_ROUNDS:-20}" \
  --few-rounds exec-mode --pods-only pool --image "127.0.0.1:$port/busybox:latest" \
  --density "${DENSITY:-20,110}" --concurrency "${CONCURRENCY:-4}" \
  --pull-image "127.0.0.1:$port/big:latest" --log-dir "$work/logs" --out "$out" "$@"
if [ -n "$critest_section" ] && ! grep -qxF "$crit_begin" "$out/bench.md"; then
  printf '\n%s\n' "$critest_section" >>"$out/bench.md"
  echo "kept the critest --benchmark section of $out/bench.md"
fi
echo "wrote $out/bench.md, $out/bench.json, $out/bench.svg"
# the README's figures come from docs/bench.json only (its test compares them)
if [ "$out" = "$root/docs" ] && [ -z "${BENCH_IN_NODE:-}" ]; then
  "$bin" bench --render-only "$out/bench.json" --readme "$root/README.md"
  echo "rendered README.md's performance section from $out/bench.json"
fi
