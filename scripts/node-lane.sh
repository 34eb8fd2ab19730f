#!/usr/bin/env bash
# Runs a focused suite on a node like the ones users run.
#
#   scripts/node-lane.sh vm   the Debian 12 node VM (../shared/tools/node-vm): systemd as
#                             PID 1, pure cgroup v2 with every controller; runs tests/cgroup_v2.rs
#                             inside it (limits enforced, OOM kills reported, live updates,
#                             stats, no cgroup left), under both cgroup drivers
#
# Host side: installs QEMU and mmdebstrap (node-vm/setup-host.sh) and builds the VM image
# (node-vm/build-rootfs.sh, about 40 s) when missing, builds rktlet and the test binary,
# starts the seeded registry on the host's loopback (the guest reaches it at 10.0.2.2).
# The guest sees this worktree at /host, linked to the same absolute path so the test
# binary finds the rktlet binary it was built against. Emulated (TCG): correctness only.
# Fails when a test fails or prints a SKIPPED line (inside the VM nothing may skip).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
lane=${1:-}
[ "$lane" = vm ] || { echo "usage: $0 vm" >&2; exit 2; }
t0=$(date +%s)
tools=${NODE_VM_TOOLS:-$repo/../shared/tools/node-vm}
export VMDIR=${VMDIR:-/var/tmp/node-vm/out}
[ -d "$tools" ] || { echo "node-vm tools not found at $tools (set NODE_VM_TOOLS)" >&2; exit 1; }

command -v qemu-system-x86_64 >/dev/null && command -v mmdebstrap >/dev/null || bash "$tools/setup-host.sh"
[ -f "$VMDIR/rootfs.ext4" ] || OUT=$VMDIR bash "$tools/build-rootfs.sh"

cargo build --locked --bin rktlet
testbin=$(cargo test --locked --no-run --test cgroup_v2 2>&1 | tee /dev/stderr |
  sed -n 's/.*Executable tests\/cgroup_v2.rs (\(.*\))/\1/p' | tail -1)
[ -x "$repo/$testbin" ] || { echo "no cgroup_v2 test binary found" >&2; exit 1; }

# the seeded registry on the host's loopback, stopped when this script exits
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
work=$repo/target/node-lane-registry
WORK=$work WATCH_PID=$$ bash tests/fixtures/seed-registry.sh "$port" >/dev/null
trap 'WORK=$work bash tests/fixtures/seed-registry.sh stop >/dev/null 2>&1 || true' EXIT
t1=$(date +%s)
echo "node-lane vm: host side ready in $((t1 - t0)) s"

out=$(mktemp)
set +e
bash "$tools/vm-run.sh" -d "$repo" -t "${VM_TIMEOUT:-1000}" - >"$out" 2>&1 <<GUEST
set -e
mkdir -p "$(dirname "$repo")"
[ -e "$repo" ] || ln -s /host "$repo"
mkdir -p /etc/rktlet
printf 'insecure = ["10.0.2.2:$port"]\n' > /etc/rktlet/registries.toml
modprobe overlay 2>/dev/null || true
echo "guest: \$(uname -r), PID 1 \$(cat /proc/1/comm), controllers: \$(cat /sys/fs/cgroup/cgroup.controllers)"
cd "$repo"
RKTLET_TEST_IMAGE=10.0.2.2:$port/busybox:latest RKTLET_TEST_LOG=rktlet=info \
  "$repo/$testbin" --test-threads=2
GUEST
rc=$?
set -e
cat "$out"
skipped=$(grep -c '^SKIPPED:' "$out" || true)
t2=$(date +%s)
echo "node-lane vm: exit $rc, $skipped skipped, VM part $((t2 - t1)) s, total $((t2 - t0)) s"
rm -f "$out"
[ "$rc" = 0 ] || exit "$rc"
[ "$skipped" = 0 ] || { echo "node-lane vm: a test skipped inside the VM" >&2; exit 1; }
