#!/usr/bin/env bash
# Runs a focused suite on a node like the ones users run.
#
#   scripts/node-lane.sh container  the node container (../shared/tools/node-container): systemd as
#                             PID 1, cgroups as on this host; runs the integration tests that
#                             exercise pods, containers, limits and the pool, then the CRI
#                             conformance suite (scripts/conformance.sh), inside it
#   scripts/node-lane.sh vm   the Debian 12 node VM (../shared/tools/node-vm): systemd as
#                             PID 1, pure cgroup v2 with every controller, AppArmor enforced;
#                             runs tests/cgroup_v2.rs (limits enforced, OOM kills reported, live
#                             updates, stats, no cgroup left, under both cgroup drivers),
#                             tests/apparmor.rs, tests/checkpoint.rs and tests/devices.rs inside
#                             it (VM_NODE_TESTS overrides the list)
#
# container: builds rktlet and the test binaries on the host, then boots the node (after the
# build: the node sees the host's root read-only, through an overlay that keeps what it has
# looked up, so binaries built later may not show) with the host's network and every
# capability and writable /proc/sys (CNI plugins set sysctls), runs each test binary in it
# (the tests start their own seeded registry on the shared loopback), then conformance.sh
# with a bridge, subnet and registry port of its own. Prints passed/failed/SKIPPED counts,
# the conformance line and the time; fails when a test or a conformance spec fails.
# NODE_TESTS overrides the list of test targets.
#
# vm: installs QEMU and mmdebstrap (node-vm/setup-host.sh) and builds the VM image
# (node-vm/build-rootfs.sh, about 40 s) when missing, builds rktlet and the test binaries,
# downloads the .debs the guest installs (it has no network): apparmor (the guest's kernel
# enforces AppArmor: rktlet loads its default profile with apparmor_parser), sudo (critest
# loads its AppArmor profiles with it), jq and xz-utils (conformance.sh and the kit), criu
# (Debian 12's, for tests/checkpoint.rs), unpacks the official crictl into target/, starts
# the seeded registry on the host's loopback (the guest reaches it at 10.0.2.2).
# The guest sees this worktree at /host, linked to the same absolute path so the test
# binary finds the rktlet binary it was built against. Emulated (TCG): correctness only.
# Fails when a test fails or prints a SKIPPED line (inside the VM nothing may skip).
# Then, unless VM_CONFORMANCE=0, the CRI conformance suite in a second boot of the VM: the
# test images are built and served on the host (the kit's images, registry and push stages),
# and conformance.sh runs in the guest against rktlet with REGISTRY=10.0.2.2:PORT; its results are kept in
# target/node-lane-vm-results. Fails when a spec fails. VM_TESTS=0 runs the conformance part alone.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
lane=${1:-}
t0=$(date +%s)

container_lane() {
  local node_sh=${NODE_CONTAINER_TOOLS:-$repo/../shared/tools/node-container}/node.sh
  [ -f "$node_sh" ] || { echo "node-container tools not found at $node_sh (set NODE_CONTAINER_TOOLS)" >&2; exit 1; }
  local tests=${NODE_TESTS:-pod_sandbox containers pool stats walkthrough exec userns checkpoint devices}
  ./scripts/install-deps.sh >/dev/null
  cargo build --locked --bin rktlet
  local args=() t
  for t in $tests; do args+=(--test "$t"); done
  local bins
  bins=$(cargo test --locked --no-run "${args[@]}" 2>&1 | tee -a /dev/stderr |
    sed -n 's/.*Executable tests\/\(.*\)\.rs (\(.*\))/\1 \2/p')
  for t in $tests; do
    grep -q "^$t " <<<"$bins" || { echo "node-lane container: no test binary for $t" >&2; exit 1; }
  done

  # the tests' image fixture (its OCI layout and registry storage under target/tmp/registry)
  # is built here on the host, as the README's test run builds it: inside the node, whose root
  # is an overlay of the host's, umoci cannot unpack the images (the tests there start their
  # registries over what is built); its servers go with the subshell that started them
  free() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
  (WORK=$repo/target/tmp/registry AUTH_PORT=$(free) TOKEN_PORT=$(free) WATCH_PID=$BASHPID \
    bash tests/fixtures/seed-registry.sh "$(free)" >/dev/null) ||
    { echo "node-lane container: seeding the test registry failed" >&2; exit 1; }

  local name=node-lane-$$
  node() { bash "$node_sh" "$@"; }
  # (expanded now: the function's locals are gone when the trap runs)
  # (set -e holds in the trap too: nothing in it may fail)
  trap "bash '$node_sh' stop '$name' >/dev/null 2>&1 || true
    [ -e /var/tmp/node-container/$name/root ] || rm -rf /var/tmp/node-container/$name" EXIT
  # as a node: writable /proc/sys (CNI plugins set sysctls), no seccomp filter of nspawn's
  # over everything (an unconfined container must be unconfined)
  SYSTEMD_NSPAWN_API_VFS_WRITABLE=1 SYSTEMD_SECCOMP=0 NET=host EXTRA_NSPAWN_ARGS=--capability=all \
    node start "$name"
  node exec "$name" grep -q '^Seccomp:[[:space:]]*0' /proc/self/status ||
    echo "node-lane container: the node runs under a seccomp filter: unconfined containers will not be" >&2
  node exec "$name" sh -c 'echo "node: PID 1 $(cat /proc/1/comm), $(systemctl is-system-running)"'
  # data dirs go on a filesystem of their own, as /var/lib is on a node: the node's /tmp is
  # systemd's tmp.mount, mounted nodev (a container's device nodes cannot be opened there),
  # and its root is an overlay (no overlay upper dir may be on one)
  local tmp=/var/tmp/node-lane
  node exec "$name" sh -c "mkdir -p $tmp && mount -t tmpfs -o size=${NODE_TMPFS:-8g},mode=0755 node-lane $tmp"
  local t1 out passed=0 failed=0 skipped=0 broken=() rc
  t1=$(date +%s)
  echo "node-lane container: host side and node ready in $((t1 - t0)) s"
  out=$(mktemp)
  for t in $tests; do
    local bin
    bin=$(sed -n "s/^$t //p" <<<"$bins")
    echo "=== node-lane container: tests/$t.rs"
    set +e
    node exec "$name" env -C "$repo" TMPDIR="$tmp" RUST_BACKTRACE=0 RKTLET_TEST_LOG=rktlet=info \
      "$repo/$bin" --test-threads=2 \
      >"$out" 2>&1
    rc=$?
    set -e
    cat "$out"
    local line
    line=$(grep '^test result:' "$out" | tail -1 || true)
    if [ -z "$line" ]; then
      broken+=("$t (exit $rc, no result)")
      failed=$((failed + 1))
    else
      passed=$((passed + $(sed -n 's/.* \([0-9]*\) passed.*/\1/p' <<<"$line")))
      failed=$((failed + $(sed -n 's/.* \([0-9]*\) failed.*/\1/p' <<<"$line")))
      [ "$rc" = 0 ] || broken+=("$t")
    fi
    skipped=$((skipped + $(grep -c '^SKIPPED:' "$out" || true)))
    grep '^SKIPPED:' "$out" >>"$out.skipped" || true
  done
  local t2
  t2=$(date +%s)
  echo "=== node-lane container: conformance"
  set +e
  node exec "$name" env -C "$repo" SKIP_DEPS=1 REG_PORT="${NODE_REG_PORT:-5079}" CNI_BRIDGE=rktnode0 \
    CNI_SUBNET=10.213.79.0/24 PEER_DIR=$tmp/conformance ./scripts/conformance.sh >"$out" 2>&1
  local crc=$?
  set -e
  cat "$out"
  local conf
  conf=$(tail -1 "$out")
  # the node's filesystem goes with it: keep conformance's results (critest.log, rktlet.log)
  local results=$repo/target/node-lane-results
  rm -rf "$results" && mkdir -p "$results"
  node exec "$name" tar -C "$tmp/conformance/results" -c . 2>/dev/null | tar -x -C "$results" ||
    echo "node-lane container: no conformance results to keep" >&2
  echo "node-lane container: conformance results in $results"
  local t3
  t3=$(date +%s)
  echo "node-lane container: SKIPPED checks:"
  cat "$out.skipped" 2>/dev/null || true
  rm -f "$out" "$out.skipped"
  echo "node-lane container: tests $passed passed, $failed failed; $skipped checks SKIPPED (their tests count as passed) (${broken[*]:-all binaries ok}) in $((t2 - t1)) s"
  echo "node-lane container: conformance (exit $crc): $conf in $((t3 - t2)) s"
  echo "node-lane container: total $((t3 - t0)) s"
  [ "$failed" = 0 ] && [ ${#broken[@]} = 0 ] && [ "$crc" = 0 ]
}

case $lane in
  container) container_lane; exit ;;
  vm) ;;
  *) echo "usage: $0 container|vm" >&2; exit 2 ;;
esac
tools=${NODE_VM_TOOLS:-$repo/../shared/tools/node-vm}
export VMDIR=${VMDIR:-/var/tmp/node-vm/out}
[ -d "$tools" ] || { echo "node-vm tools not found at $tools (set NODE_VM_TOOLS)" >&2; exit 1; }

command -v qemu-system-x86_64 >/dev/null && command -v mmdebstrap >/dev/null || bash "$tools/setup-host.sh"
[ -f "$VMDIR/rootfs.ext4" ] || OUT=$VMDIR bash "$tools/build-rootfs.sh"

cargo build --locked --bin rktlet
vm_tests=${VM_NODE_TESTS:-cgroup_v2 apparmor checkpoint devices}
vm_args=()
for t in $vm_tests; do vm_args+=(--test "$t"); done
built=$(cargo test --locked --no-run "${vm_args[@]}" 2>&1 | tee -a /dev/stderr)
testbins=()
for t in $vm_tests; do
  b=$(sed -n "s/.*Executable tests\/$t.rs (\(.*\))/\1/p" <<<"$built" | tail -1)
  [ -n "$b" ] && [ -x "$repo/$b" ] || { echo "no $t test binary found" >&2; exit 1; }
  testbins+=("$b")
done
# what the guest installs from .debs (it has no network): jq and xz-utils for conformance.sh
# and the kit, apparmor (apparmor_parser: the guest's kernel enforces AppArmor, so rktlet loads
# its default profile) and sudo (critest loads its AppArmor profiles with sudo apparmor_parser)
debs=$repo/target/node-lane-debs
rm -rf "$debs" && mkdir -p "$debs"
(cd "$debs" && apt-get download -q -o APT::Sandbox::User=root jq libjq1 libonig5 xz-utils apparmor sudo \
  libnet1 sgml-base libnl-3-200 libprotobuf-c1 >&2)
# the official crictl for the tests that drive rktlet with it (the guest sees only this worktree)
crictl_xz=$repo/../shared/tools/cri-tools/crictl.xz
[ -f "$crictl_xz" ] || { echo "crictl not found at $crictl_xz" >&2; exit 1; }
xz -dc "$crictl_xz" >"$repo/target/node-lane-crictl" && chmod 0755 "$repo/target/node-lane-crictl"
# and Debian 12's CRIU for the checkpoint tests, without python3-protobuf (only its crit tool uses it)
mkdir -p "$debs/criu"
(cd "$debs/criu" && apt-get download -q -o APT::Sandbox::User=root criu >&2)
guest_debs="dpkg -i $debs/*.deb >/dev/null 2>&1 || { echo 'guest: installing $(cd "$debs" && echo *.deb) failed' >&2; exit 1; }
dpkg -i --force-depends $debs/criu/*.deb >/dev/null 2>&1 || { echo 'guest: installing criu failed' >&2; exit 1; }"

# the seeded registry on the host's loopback, stopped when this script exits
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
work=$repo/target/node-lane-registry
WORK=$work WATCH_PID=$$ bash tests/fixtures/seed-registry.sh "$port" >/dev/null
trap 'WORK=$work bash tests/fixtures/seed-registry.sh stop >/dev/null 2>&1 || true' EXIT
t1=$(date +%s)
echo "node-lane vm: host side ready in $((t1 - t0)) s"

# In the guest, rktlet runs from a copy on the guest's disk, bound over its path in /host: the
# 9p share has no page cache, and every daemon a test starts would fault the 300 MB debug
# binary in over it (under emulation, more than the 20 s a test waits for the socket).
# What both guest runs do first: the worktree at its host path, that binary, the .debs, modules.
guest_setup="mkdir -p $(dirname "$repo")
[ -e $repo ] || ln -s /host $repo
cp $repo/target/debug/rktlet /var/tmp/rktlet && mount --bind /var/tmp/rktlet $repo/target/debug/rktlet
$guest_debs
modprobe overlay 2>/dev/null || true
modprobe br_netfilter 2>/dev/null || true"
out=$(mktemp)
glog=$repo/target/node-lane-vm-tests.log
# a test binary's cap in the guest: checkpoint.rs's longest test alone took
# about 450 s of the emulated VM (2 s on the host): a cap bounds a hang
guest_test_timeout=${VM_TEST_TIMEOUT:-900}
rc=0 skipped=0 t2=$t1
# vm_run TIMEOUT SCRIPT: runs the guest script in a fresh VM, its output in $out, its exit code in
# $vrc. A guest whose kernel wedges (seen once in CI: RCU stalls with "Possible timer handling
# issue on cpu=0" and kworkers blocked for minutes, none of the tests' processes among them, under
# emulation) is booted once more: that is the emulator, not a test. Its console is printed first.
vm_run() {
  local attempt
  for attempt in 1 2; do
    rm -f "$glog"
    set +e
    bash "$tools/vm-run.sh" -d "$repo" -t "$1" - <"$2" >"$out" 2>&1
    vrc=$?
    set -e
    if [ "$vrc" = 124 ] && [ -f "$glog" ]; then
      echo "node-lane vm: the VM timed out; what the guest printed before it (tail of $glog):" >>"$out"
      tail -n 60 "$glog" >>"$out"
    fi
    [ "$vrc" = 124 ] && [ "$attempt" = 1 ] || break
    grep -qE 'rcu_preempt kthread starved|blocked for more than [0-9]+ seconds|soft lockup' "$out" || break
    cat "$out"
    echo "node-lane vm: the guest's kernel wedged (console above): booting the VM again, once"
  done
}
script=$(mktemp)
if [ "${VM_TESTS:-1}" != 0 ]; then
cat >"$script" <<GUEST
set -e
$guest_setup
mkdir -p /etc/rktlet
printf 'insecure = ["10.0.2.2:$port"]\n' > /etc/rktlet/registries.toml
echo "guest: \$(uname -r), PID 1 \$(cat /proc/1/comm), controllers: \$(cat /sys/fs/cgroup/cgroup.controllers)"
cd "$repo"
rc=0
for b in ${testbins[*]}; do
  echo "=== guest: \$b" | tee -a $glog
  # the output also goes to the host as it comes (9p has no cache): when the guest wedges, the
  # host shows which tests finished; a test binary that hangs is stopped before the VM's timeout
  { RKTLET_TEST_IMAGE=10.0.2.2:$port/busybox:latest RKTLET_TEST_LOG=rktlet=info CRICTL=$repo/target/node-lane-crictl \
    timeout -k 10 $guest_test_timeout "$repo/\$b" --test-threads=2 ${VM_TEST_ARGS:-} && echo 0 >/tmp/brc || echo \$? >/tmp/brc; } 2>&1 | tee -a $glog
  brc=\$(cat /tmp/brc)
  [ \$brc = 0 ] || { echo "guest: \$b exited \$brc"; rc=1; }
done
echo "guest: kernel stalls, lockups and warnings during the tests:"
w=\$(dmesg | grep -E 'rcu: INFO|rcu_preempt kthread starved|detected stall|blocked for more than|soft lockup|BUG:|WARNING:|Oops' | tail -n 20)
echo "\${w:-none}"
exit \$rc
GUEST
# (the tests take 700 to 900 s of the emulated VM on this machine kind: the cap bounds a hang, with room)
vm_run "${VM_TIMEOUT:-1800}" "$script"
rc=$vrc
cat "$out"
skipped=$(grep -c '^SKIPPED:' "$out" || true)
t2=$(date +%s)
echo "node-lane vm: exit $rc, $skipped skipped, VM part $((t2 - t1)) s, total $((t2 - t0)) s"
fi
vm_failed=()
[ "$rc" = 0 ] || vm_failed+=("tests (exit $rc)")
[ "$skipped" = 0 ] || vm_failed+=("a test skipped inside the VM")

if [ "${VM_CONFORMANCE:-1}" != 0 ]; then
  # the newest official suite (its specs include v1.29.0's, and AppArmor's, which this guest enforces)
  export CRI_TOOLS_TAG=${VM_CRI_TOOLS_TAG:-v1.36.0}
  kit=${CRI_TOOLS_KIT:-$repo/../shared/tools/cri-conformance.sh}
  [ -f "$kit" ] || { echo "the offline CRI test kit is not at $kit (set CRI_TOOLS_KIT)" >&2; exit 1; }
  # the test images on the host's loopback; the kit unpacks crictl and critest into $peer/bin
  peer=$repo/target/node-lane-vm-peer
  cport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  # the kit (and its cri-tools beside it) for the guest, which sees only this worktree
  rm -rf "$peer/kit" && mkdir -p "$peer/kit"
  cp -r "$kit" "$(dirname "$kit")/cri-tools" "$peer/kit/"
  kitname=$(basename "$kit")
  PEER_DIR=$peer REG_PORT=$cport bash "$kit" images registry push >&2
  trap 'WORK=$work bash tests/fixtures/seed-registry.sh stop >/dev/null 2>&1 || true
    PEER_DIR=$peer bash "$kit" stop >/dev/null 2>&1 || true' EXIT
  results=$repo/target/node-lane-vm-results
  rm -rf "$results"
  t3=$(date +%s)
  echo "node-lane vm: conformance, critest $CRI_TOOLS_TAG (test images on 127.0.0.1:$cport, host side $((t3 - t2)) s)"
  cat >"$script" <<GUEST
set -e
$guest_setup
P=/var/tmp/conformance
mkdir -p \$P/bin
cp "$peer/bin/crictl" "$peer/bin/critest" \$P/bin/
cd "$repo"
set +e
{ SKIP_DEPS=1 PEER_DIR=\$P REG_PORT=$cport REGISTRY=10.0.2.2:$cport CRI_TOOLS_KIT="$peer/kit/$kitname" CRI_TOOLS_TAG=$CRI_TOOLS_TAG \
  START_TIMEOUT=300 ./scripts/conformance.sh && echo 0 >/tmp/crc || echo \$? >/tmp/crc; } 2>&1 | tee -a $glog
crc=\$(cat /tmp/crc)
mkdir -p "$results" && cp -r \$P/results/. "$results"/ || true
exit \$crc
GUEST
  vm_run "${VM_CONFORMANCE_TIMEOUT:-1500}" "$script"
  crc=$vrc
  cat "$out"
  conf=$(tail -1 "$out")
  t4=$(date +%s)
  echo "node-lane vm: conformance, critest $CRI_TOOLS_TAG (exit $crc): $conf in $((t4 - t3)) s; results in $results"
  [ "$crc" = 0 ] || vm_failed+=("conformance (exit $crc)")
fi
rm -f "$out" "$script"
echo "node-lane vm: total $(($(date +%s) - t0)) s"
[ ${#vm_failed[@]} = 0 ] || { echo "node-lane vm: failed: ${vm_failed[*]}" >&2; exit 1; }
