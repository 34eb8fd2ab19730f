#!/usr/bin/env bash
# containerd-baseline.sh — run Debian's containerd (1.6.x) + runc as a self-contained CRI
# endpoint next to rktlet, as a baseline for benchmarks. Everything it creates lives under DIR
# (config, root/state dirs, sockets, CNI config + IPAM state, log), except what the kernel or
# containerd force elsewhere: the bridge ctrd0, pod cgroups (/sys/fs/cgroup/*/k8s.io/<id>) and
# shim sockets (/run/containerd/s/<hash of our socket path>). `stop` removes all of those.
#
# usage: containerd-baseline.sh start DIR [PORT]   install if needed, configure, start;
#                                                   prints the grpc socket path (DIR/containerd.sock)
#        containerd-baseline.sh stop DIR            stop containerd, kill its shims/containers,
#                                                   unmount, delete bridge/netns/cgroups/state
#        containerd-baseline.sh status DIR          exit 0 if running (prints the pid)
# PORT: the local registry (127.0.0.1:PORT, plain http; default 5000). If nothing answers there,
#       tests/fixtures/seed-registry.sh PORT is run to start and seed it (and `stop` stops that
#       registry again; one that was already running is left alone). 127.0.0.1:PORT/pause:3.9
#       is built (busybox-static + umoci) and pushed when the registry lacks it.
# env:  BRIDGE=ctrd0 SUBNET=10.88.0.0/16   pod network (CNI bridge + host-local + portmap)
#                                          (instances running at once need distinct ones)
#       LOG_LEVEL=info                     containerd log level (log: DIR/containerd.log)
#       PREPULL_PAUSE=1                    pull the pause image at start, so the first
#                                          RunPodSandbox does not pay for that pull
#       START_TIMEOUT=30                   seconds to wait for the socket to answer
#       SYSTEMD_CGROUP=auto                runc's systemd cgroup driver (pods in slices, as
#                                          kubelet's systemd driver asks) where PID 1 is
#                                          systemd, else cgroupfs; 1 or 0 forces one
# Idempotent: `start` on a running instance only prints the socket; `stop` on a stopped one
# still sweeps leftovers. Needs root. Works without systemd as PID 1 (cgroupfs driver) and with it (systemd driver).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
BRIDGE=${BRIDGE:-ctrd0}
SUBNET=${SUBNET:-10.88.0.0/16}
LOG_LEVEL=${LOG_LEVEL:-info}
PREPULL_PAUSE=${PREPULL_PAUSE:-1}
START_TIMEOUT=${START_TIMEOUT:-30}
SYSTEMD_CGROUP=${SYSTEMD_CGROUP:-auto}
if [ "$SYSTEMD_CGROUP" = auto ]; then
  if [ -d /run/systemd/system ]; then SYSTEMD_CGROUP=1; else SYSTEMD_CGROUP=0; fi
fi
if [ "$SYSTEMD_CGROUP" = 1 ]; then systemd_cgroup=true; else systemd_cgroup=false; fi
PAUSE_TAG=pause:3.9

log() { echo "[containerd-baseline] $*" >&2; }
die() { log "error: $*"; exit 1; }
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit 2; }

[ "$(id -u)" = 0 ] || die "must run as root"
cmd=${1:-}; [ -n "$cmd" ] || usage
case "$cmd" in start|stop|status) ;; *) usage ;; esac
[ -n "${2:-}" ] || usage
# Absolute DIR: it is written into the config and compared against /proc/*/cmdline and mounts.
mkdir -p "$2"
DIR="$(cd "$2" && pwd -P)"
SOCK=$DIR/containerd.sock
PIDFILE=$DIR/containerd.pid
# unix socket paths are limited to 107 bytes; the ttrpc socket has the longest name
[ ${#SOCK} -le 100 ] || die "DIR too long for a unix socket path: $SOCK"

# pid of our containerd, if it is alive (guards against a recycled pid)
our_pid() {
  local pid
  [ -f "$PIDFILE" ] || return 1
  pid=$(cat "$PIDFILE")
  [ -n "$pid" ] && [ -r /proc/"$pid"/cmdline ] || return 1
  tr '\0' ' ' </proc/"$pid"/cmdline | grep -q -- "containerd --config $DIR/config.toml" || return 1
  echo "$pid"
}

# shims started by our containerd: their command line carries "-address DIR/containerd.sock"
our_shims() {
  local p
  for p in /proc/[0-9]*; do
    [ -r "$p/cmdline" ] || continue
    case "$(cat "$p/comm" 2>/dev/null)" in containerd-shim*) ;; *) continue ;; esac
    tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -q -- "-address $SOCK " && echo "${p#/proc/}"
  done
  return 0
}

# all descendants of a pid (children first listed after parents)
descendants() {
  local kids c
  kids=$(cat /proc/"$1"/task/*/children 2>/dev/null || true)
  for c in $kids; do echo "$c"; descendants "$c"; done
}

# answers a grpc call on our socket (ctr talks to the containerd API, not CRI)
socket_answers() { [ -S "$SOCK" ] && timeout 5 ctr -a "$SOCK" version >/dev/null 2>&1; }

install_pkgs() {
  local need=() p
  for p in containerd runc; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
  done
  # CNI plugins (bridge, host-local, portmap, loopback) in /usr/lib/cni
  [ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
  command -v ip >/dev/null || need+=(iproute2)
  command -v iptables >/dev/null || need+=(iptables)   # portmap needs it
  [ ${#need[@]} -eq 0 ] && return 0
  log "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >&2
  # The package's systemd unit is harmless here: without systemd as PID 1 nothing starts a
  # system containerd (and with one, ours still clashes with it in no path or socket).
  apt-get install -y -q --no-install-recommends "${need[@]}" >&2
}

ensure_registry() {
  local port=$1
  if curl -fsS -m 5 "http://127.0.0.1:$port/v2/" >/dev/null 2>&1; then return 0; fi
  log "no registry on 127.0.0.1:$port; starting one with tests/fixtures/seed-registry.sh"
  local need=() p
  for p in docker-registry skopeo umoci busybox-static jq curl openssl; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
  done
  if [ ${#need[@]} -gt 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >&2
  fi
  bash "$repo/tests/fixtures/seed-registry.sh" "$port" >&2
  # started here, so `stop` stops it (a registry that was already up is left alone)
  local work=${WORK:-${TMPDIR:-/tmp}/rktlet-registry}
  # "PID SEED_PIDFILE": stop also removes seed-registry.sh's pidfile for it
  [ -f "$work/registry-$port.pid" ] && echo "$(cat "$work/registry-$port.pid") $work/registry-$port.pid" >"$DIR/registry.pid"
  return 0
}

# 127.0.0.1:PORT/pause:3.9 — built from busybox-static when the registry does not have it.
# The entrypoint is a shell that sleeps forever and exits 0 on SIGTERM/SIGINT: as PID 1 of its
# pid namespace it gets no default signal handling, so it must trap them itself, or StopPodSandbox
# would always wait for its SIGKILL timeout.
ensure_pause() {
  local port=$1 ref=127.0.0.1:$1/$PAUSE_TAG
  if skopeo inspect --tls-verify=false --raw "docker://$ref" >/dev/null 2>&1; then return 0; fi
  log "building $ref"
  local need=() p
  for p in skopeo umoci busybox-static; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
  done
  if [ ${#need[@]} -gt 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >&2
  fi
  local b=$DIR/pause-build
  rm -rf "$b"; mkdir -p "$b"
  umoci init --layout "$b/oci"
  umoci new --image "$b/oci:pause"
  umoci unpack --image "$b/oci:pause" "$b/bundle" >/dev/null
  mkdir -p "$b/bundle/rootfs/bin"
  cp /bin/busybox "$b/bundle/rootfs/bin/busybox"   # busybox-static's: no shared libraries needed
  ln -s busybox "$b/bundle/rootfs/bin/sh"
  umoci repack --image "$b/oci:pause" "$b/bundle" >/dev/null
  umoci config --image "$b/oci:pause" --architecture "$(dpkg --print-architecture)" --os linux \
    --config.entrypoint /bin/busybox --config.entrypoint sh --config.entrypoint -c \
    --config.entrypoint 'trap "kill \$! 2>/dev/null; exit 0" TERM INT; while :; do /bin/busybox sleep 2147483647 & wait $!; done' \
    --clear=config.cmd
  umoci gc --layout "$b/oci"
  skopeo copy -q --dest-tls-verify=false "oci:$b/oci:pause" "docker://$ref" >&2
  rm -rf "$b"
}

write_config() {
  local port=$1
  mkdir -p "$DIR"/{root,state,net.d,certs.d/"127.0.0.1:$port",opt,cni-ipam}
  # registry hosts config (config_path): containerd's CRI resolver reads
  # certs.d/<host:port>/hosts.toml. The registry speaks plain http, so the server is http://.
  # (Newer style than registry.mirrors, which is deprecated in 1.6 and can't be mixed with it.)
  cat >"$DIR/certs.d/127.0.0.1:$port/hosts.toml" <<EOF
server = "http://127.0.0.1:$port"

[host."http://127.0.0.1:$port"]
  capabilities = ["pull", "resolve", "push"]
  skip_verify = true
EOF

  # Our own CNI network. The bridge is named ctrd0 so it clashes neither with rktlet's rktlet0
  # nor with a system containerd's cni0; IPAM state in DIR (not /var/lib/cni/networks).
  # ipMasq off: pods only talk to the host / each other (no outside network here), and it
  # keeps this out of the nat table. portmap for hostPort, like a standard kubelet setup.
  cat >"$DIR/net.d/10-containerd-baseline.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "containerd-baseline",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$DIR/cni-ipam",
        "ranges": [[{ "subnet": "$SUBNET" }]],
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    },
    { "type": "portmap", "capabilities": { "portMappings": true } }
  ]
}
EOF

  cat >"$DIR/config.toml" <<EOF
# generated by scripts/containerd-baseline.sh — edits are overwritten on start
version = 2
root = "$DIR/root"
state = "$DIR/state"
# 0 = leave containerd's own oom_score_adj alone: this machine lacks CAP_SYS_RESOURCE, so
# lowering it (negative values) fails.
oom_score = 0
# Snapshotters we don't use: skip them (btrfs/zfs/devmapper/aufs only log errors here).
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
]

[grpc]
  # our own socket: never /run/containerd/containerd.sock, which a system containerd uses
  address = "$SOCK"

[ttrpc]
  address = "$SOCK.ttrpc"

[debug]
  # no debug socket (the default would be none too; explicit so it can't clash)
  address = ""
  level = "$LOG_LEVEL"

[metrics]
  address = ""

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    # default /opt/containerd is shared with a system containerd
    path = "$DIR/opt"

  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "127.0.0.1:$port/$PAUSE_TAG"
    # Kubelet asks for oom_score_adj -998 for the sandbox (and negative ones for guaranteed
    # pods); without CAP_SYS_RESOURCE runc can't set values below containerd's own, so clamp
    # them to containerd's score instead of failing the container start.
    restrict_oom_score_adj = true
    # The kernel here has no AppArmor (and no SELinux): don't try to apply profiles.
    disable_apparmor = true
    enable_selinux = false
    # Netns bind mounts under DIR/state/netns, not /var/run/netns: they are ours to sweep on stop
    # and can't be confused with other runtimes' namespaces.
    netns_mounts_under_state_dir = true
    # streaming server (exec/attach/port-forward URLs): loopback and an ephemeral port, so it
    # never clashes with rktlet's or another containerd's fixed port
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    # The image pull is part of what is measured: 3 parallel layer downloads (the default).
    max_concurrent_downloads = 3

    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      # keep the compressed layer blobs after unpacking (the default; no GC of content mid-run)
      discard_unpacked_layers = false

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"

        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          BinaryName = "$(command -v runc || echo /usr/sbin/runc)"
          # cgroupfs where PID 1 is not systemd; the systemd driver on a systemd node (SYSTEMD_CGROUP)
          SystemdCgroup = $systemd_cgroup

    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "$DIR/net.d"
      max_conf_num = 1

    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = "$DIR/certs.d"
EOF
}

do_start() {
  local port=${1:-5000} pid
  if pid=$(our_pid); then
    socket_answers || die "containerd (pid $pid) is running but $SOCK does not answer; run stop first"
    log "already running (pid $pid)"; echo "$SOCK"; return 0
  fi
  install_pkgs
  ensure_registry "$port"
  ensure_pause "$port"
  # leftovers of an unclean earlier run (shims, mounts, bridge) would confuse the new instance
  sweep
  write_config "$port"
  rm -f "$SOCK" "$SOCK.ttrpc"
  # one log per run (the readiness checks below grep it); the previous one is kept as .prev
  [ -f "$DIR/containerd.log" ] && mv -f "$DIR/containerd.log" "$DIR/containerd.log.prev"
  log "starting containerd ($(containerd --version | awk '{print $3}'), runc $(runc --version | awk 'NR==1{print $3}'))"
  # setsid + nohup: detached from our session/terminal, survives this script; stdin from /dev/null
  setsid nohup containerd --config "$DIR/config.toml" </dev/null >>"$DIR/containerd.log" 2>&1 &
  local pid=$!
  echo "$pid" >"$PIDFILE"
  local t0=$SECONDS
  until socket_answers; do
    # alive (not gone, not a zombie of ours), by pid: until setsid and nohup
    # have exec'd, its command line is still this script's (our_pid's check,
    # for a pid file of an earlier run, failed a cold first start here)
    local state
    state=$(sed 's/.*) //' /proc/"$pid"/stat 2>/dev/null | cut -d' ' -f1)
    [ -n "$state" ] && [ "$state" != Z ] || { tail -n 30 "$DIR/containerd.log" >&2; die "containerd exited (log: $DIR/containerd.log)"; }
    [ $((SECONDS - t0)) -lt "$START_TIMEOUT" ] || { tail -n 30 "$DIR/containerd.log" >&2; die "socket did not answer in ${START_TIMEOUT}s"; }
    sleep 0.2
  done
  # the CRI plugin finishes starting after the socket listens; it logs this last
  until grep -q 'Start streaming server' "$DIR/containerd.log"; do
    [ $((SECONDS - t0)) -lt "$START_TIMEOUT" ] || break
    sleep 0.2
  done
  if grep -q 'failed to load plugin io.containerd.grpc.v1.cri' "$DIR/containerd.log"; then
    tail -n 30 "$DIR/containerd.log" >&2; die "the CRI plugin did not load"
  fi
  if [ "$PREPULL_PAUSE" = 1 ]; then
    # k8s.io is the CRI plugin's namespace: it sees images pulled there
    timeout 120 ctr -a "$SOCK" -n k8s.io images pull --hosts-dir "$DIR/certs.d" \
      "127.0.0.1:$port/$PAUSE_TAG" >/dev/null || die "could not pull the pause image"
    # CRI pins its sandbox image (and only sees ctr-pulled images after its event sync)
    timeout 10 ctr -a "$SOCK" -n k8s.io images label "127.0.0.1:$port/$PAUSE_TAG" \
      io.cri-containerd.pinned=pinned >/dev/null 2>&1 || true
  fi
  log "ready (pid $(cat "$PIDFILE"), log $DIR/containerd.log)"
  echo "$SOCK"
}

# Remove everything an instance using DIR may have left, running or not.
sweep() {
  local s p pids m
  # 1. containers: every process under our shims (the shim is the subreaper of its container),
  #    then the shims themselves. SIGKILL: containerd is gone or going, nobody reaps gracefully.
  local killed=""
  for s in $(our_shims); do
    pids=$(descendants "$s")
    [ -n "$pids" ] && kill -KILL $pids 2>/dev/null || true
    kill -KILL "$s" 2>/dev/null || true
    killed="$killed $s $pids"
  done
  # wait until they are gone (or zombies: PID 1 reaps the shims, which are its children)
  for _ in $(seq 50); do
    local alive=0
    for p in $killed; do
      [ -r /proc/"$p"/cmdline ] && [ -n "$(tr -d '\0' </proc/"$p"/cmdline 2>/dev/null)" ] && alive=1
    done
    [ $alive = 0 ] && break; sleep 0.1
  done
  # shim sockets: /run/containerd/s/<sha256 of "DIR/containerd.sock/<ns>/<id>">, recorded in
  # each task bundle's `address` file. A SIGKILLed shim can't remove its own.
  for a in "$DIR"/state/io.containerd.runtime.v2.task/*/*/address; do
    [ -f "$a" ] || continue
    s=$(sed 's|^unix://||' "$a")
    case "$s" in /run/containerd/s/*) rm -f "$s" ;; esac
  done
  # 2. mounts under DIR (rootfs overlays, /dev/shm tmpfs, netns bind mounts), deepest first
  for _ in 1 2 3; do
    m=$(awk -v d="$DIR/" 'index($2, d) == 1 {print $2}' /proc/self/mounts | sort -r)
    [ -z "$m" ] && break
    for p in $m; do umount "$p" 2>/dev/null || umount -l "$p" 2>/dev/null || true; done
  done
  # 3. the bridge (veths died with their netns; the bridge and its gateway address stay).
  #    Its name comes from DIR's own conflist, so `stop` needs no BRIDGE=. Two instances
  #    running at once need different BRIDGE= names, or one's stop removes the other's bridge.
  local br=$BRIDGE
  if [ -f "$DIR/net.d/10-containerd-baseline.conflist" ]; then
    br=$(sed -n 's/.*"bridge": *"\([^"]*\)".*/\1/p' "$DIR/net.d/10-containerd-baseline.conflist" | head -n1)
    br=${br:-$BRIDGE}
  fi
  ip link show "$br" >/dev/null 2>&1 && ip link del "$br" 2>/dev/null || true
  # portmap adds nat chains only for pods with hostPorts, and deletes them on CNI DEL (i.e. a
  # StopPodSandbox); pods killed here get no DEL, so say so rather than guess which are ours
  if command -v iptables >/dev/null && iptables -t nat -S 2>/dev/null | grep -q 'CNI-DN-'; then
    log "note: CNI portmap chains (CNI-DN-*) remain in the nat table"
  fi
  # 4. pod cgroups (cgroupfs driver: /sys/fs/cgroup/<ctrl>/k8s.io/<id> or under a CRI
  #    cgroup_parent): only the ids of our containers, taken from our state dir
  if [ -d "$DIR/state/io.containerd.runtime.v2.task/k8s.io" ]; then
    for id in $(ls "$DIR/state/io.containerd.runtime.v2.task/k8s.io" 2>/dev/null); do
      find /sys/fs/cgroup -depth -type d -name "$id" -exec rmdir {} \; 2>/dev/null || true
    done
  fi
  # the default parent (/k8s.io, used when CRI gives no cgroup_parent): rmdir only succeeds
  # when it is empty. Parents a client passed as cgroup_parent (e.g. /kubepods/...) are the
  # client's, as with kubelet, and are left alone.
  rmdir /sys/fs/cgroup/*/k8s.io 2>/dev/null || true
  # 5. runtime state, metadata and the image/snapshot store: every start begins empty (images
  #    are pulled again through CRI, like on a fresh node); config and log stay for inspection
  rm -rf "$DIR/state" "$DIR/root" "$DIR/cni-ipam" "$DIR/opt" "$DIR/pause-build"
  rm -f "$SOCK" "$SOCK.ttrpc"
}

do_stop() {
  local pid
  if pid=$(our_pid); then
    log "stopping containerd pid $pid"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 100); do [ -d /proc/"$pid" ] || break; sleep 0.1; done
    [ -d /proc/"$pid" ] && { log "containerd did not exit on SIGTERM; SIGKILL"; kill -KILL "$pid" 2>/dev/null || true; }
    for _ in $(seq 20); do [ -d /proc/"$pid" ] || break; sleep 0.1; done
  fi
  rm -f "$PIDFILE"
  sweep
  if [ -f "$DIR/registry.pid" ]; then
    local seedpid
    read -r pid seedpid <"$DIR/registry.pid" || true
    if [ "$(cat /proc/"$pid"/comm 2>/dev/null)" = docker-registry ]; then
      kill "$pid" 2>/dev/null && log "stopped the registry (pid $pid) that start had started"
      # only if it still names that registry (seed-registry.sh may have restarted it since)
      [ -n "$seedpid" ] && [ "$(cat "$seedpid" 2>/dev/null)" = "$pid" ] && rm -f "$seedpid"
    fi
    rm -f "$DIR/registry.pid"
  fi
  log "stopped; removed its shims, mounts, bridge, cgroups and state under $DIR"
}

case "$cmd" in
  start) do_start "${3:-5000}" ;;
  stop) do_stop ;;
  status) if pid=$(our_pid); then echo "$pid"; else exit 1; fi ;;
  *) usage ;;
esac
