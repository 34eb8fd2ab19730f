#!/usr/bin/env bash
# Installs what rktlet needs on a fresh Debian machine: the system packages
# (apt), CRIU where checkpoints need it, and the Rust components.
# Idempotent: safe to run again.
#
#   ./scripts/install-deps.sh [GROUP...]
#
# Groups (default: all):
#   run   build and run the daemon: compiler, libseccomp, systemd-nspawn,
#         iproute2, iptables, the CNI plugins
#   demo  run, plus what scripts/demo.sh's local registry is seeded with
#         (docker-registry, skopeo, umoci, a static busybox, jq, curl, openssl)
#   criu  checkpoint and restore: CRIU, built from source where Debian's
#         cannot run on the node's kernel (only nodes that checkpoint need it)
#   all   everything above and what the test suite, conformance and the node
#         lanes use (Go and spdystream, GnuPG, the test images' tools)
set -euo pipefail

run_packages=(
  # build (protoc comes vendored with the build dependencies; the pod bus links libsystemd's sd-bus)
  build-essential pkg-config libsystemd-dev
  # exec where the daemon itself runs under a seccomp filter: libseccomp
  # compiles the container's profile (stage1/filters.rs)
  libseccomp-dev
  # running pods: systemd-nspawn, systemd as the pod's PID 1 (systemctl, journalctl), ip(8)
  systemd systemd-container util-linux iproute2 iptables
  # pod networking
  containernetworking-plugins ca-certificates
)
demo_packages=(
  # images: a real registry, image tools, a static busybox (tests/fixtures/seed-registry.sh)
  docker-registry skopeo umoci busybox-static apache2-utils jq curl openssl
)
criu_packages=(
  # checkpoint and restore: CRIU (Debian's), and what building a newer one takes
  # where Debian's cannot run on the node's kernel (below)
  criu curl xz-utils libbsd-dev libcap-dev libgnutls28-dev libnet1-dev libnftables-dev libnl-3-dev
  libprotobuf-c-dev libprotobuf-dev protobuf-c-compiler protobuf-compiler uuid-dev
)
test_packages=(
  # streaming tests: a SPDY client built on spdystream, Kubernetes' own SPDY library
  golang-go golang-github-docker-spdystream-dev
  # trust tests: GnuPG makes the keys and signatures rktlet checks, OpenSSL the
  # cosign-style ECDSA/Ed25519 ones; bzip2 and xz pack test ACIs
  gnupg openssl bzip2 xz-utils
  # conformance (scripts/conformance.sh): critest's test images are built offline,
  # tiny static C programs among them (with umoci, skopeo, docker-registry, jq, xz above)
  gcc libc6-dev
  # the node lane (scripts/node-lane.sh container and the CI kit's node.sh):
  # nsenter/unshare (util-linux above), pgrep, bc
  procps bc
)

groups=("$@")
[ ${#groups[@]} -gt 0 ] || groups=(all)
packages=("${run_packages[@]}")
with_criu=""
for g in "${groups[@]}"; do
  case "$g" in
    run) ;;
    demo) packages+=("${demo_packages[@]}") ;;
    criu) packages+=("${criu_packages[@]}"); with_criu=1 ;;
    all) packages+=("${demo_packages[@]}" "${criu_packages[@]}" "${test_packages[@]}"); with_criu=1 ;;
    *) echo "unknown group $g: run, demo, criu or all" >&2; exit 2 ;;
  esac
done
# each once (groups share some)
mapfile -t packages < <(printf '%s\n' "${packages[@]}" | awk '!seen[$0]++')

root="$(cd "$(dirname "$0")/.." && pwd)"
sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  echo "installing: ${missing[*]}"
  if printf '%s\n' "${missing[@]}" | grep -qx 'systemd-container'; then
    echo "note: systemd-container pulls in the matching systemd; apt may upgrade this host's systemd"
  fi
  # another apt or dpkg (unattended-upgrades on a fresh machine) may hold the lock: wait for it
  lock_wait=(-o DPkg::Lock::Timeout=600)
  $sudo apt-get "${lock_wait[@]}" update -q
  $sudo apt-get "${lock_wait[@]}" install -y -q --no-install-recommends "${missing[@]}"
fi

# CRIU: Debian 12's 3.17 checks the kernel's vDSO layout and refuses kernels
# newer than it knows ("Unexpected rt vDSO area bounds" on 6.18). There, build
# CRIU 4.1.1 from Debian's own source tarball (checked against its SHA-256)
# into /usr/local/sbin, which comes first in PATH (about 40 s on 2 cores).
criu_version=4.1.1
criu_sha256=f80a66cb3726bb2116266d4759ce3bcbfab7abdb6b6d430bf20dd41911717afe
if [ -n "$with_criu" ] && ! criu check >/dev/null 2>&1; then
  build=$(mktemp -d)
  echo "criu check fails with $(criu --version 2>/dev/null | head -1): building CRIU $criu_version in $build"
  curl -fsSL --retry 3 -o "$build/criu.tar.xz" \
    "http://deb.debian.org/debian/pool/main/c/criu/criu_${criu_version}.orig.tar.xz"
  echo "$criu_sha256  $build/criu.tar.xz" | sha256sum -c --quiet
  mkdir "$build/src" && tar -xJf "$build/criu.tar.xz" -C "$build/src" --strip-components=1
  make -s -C "$build/src" -j"$(nproc)" criu >"$build/make.log" 2>&1 \
    || { tail -n 30 "$build/make.log" >&2; exit 1; }
  $sudo install -D -m 0755 "$build/src/criu/criu" /usr/local/sbin/criu
  rm -rf "$build"
  hash -r
  criu check || { echo "criu $criu_version built, but criu check still fails on $(uname -r)" >&2; exit 1; }
fi

# The default pod network (bridge rktlet0, 10.66.0.0/16, portmap), only on a
# node that has no CNI config yet: an existing network is the operator's choice.
# (`lo` is not in it: rktlet brings it up itself, in-process or with CNI loopback.)
cni_conf_dir="${RKTLET_CNI_CONF_DIR:-/etc/cni/net.d}"
if ! compgen -G "$cni_conf_dir/*.conf" >/dev/null && ! compgen -G "$cni_conf_dir/*.conflist" >/dev/null \
    && ! compgen -G "$cni_conf_dir/*.json" >/dev/null; then
  $sudo install -D -m 0644 "$root/contrib/cni/10-rktlet.conflist" "$cni_conf_dir/10-rktlet.conflist"
  echo "installed the default CNI network in $cni_conf_dir/10-rktlet.conflist"
fi

if command -v rustup >/dev/null 2>&1; then
  rustup component add rustfmt clippy >/dev/null
fi
command -v cargo >/dev/null || { echo "cargo not found: install Rust (rustup) first" >&2; exit 1; }
echo "rktlet dependencies installed (${groups[*]})"
