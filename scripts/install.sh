#!/usr/bin/env bash
# Installs rktlet on a node: the binary, the systemd unit, the tmpfiles
# snippet, a commented default /etc/rktlet/config.toml (kept if present) and
# the default CNI network (only where the node has none). Builds the release
# binary first unless RKTLET_BIN names one (with what `scripts/install-deps.sh
# run` installs; RKTLET_DEPS='run criu' adds CRIU, which CheckpointContainer
# needs). DESTDIR stages the files for a
# package instead (then nothing is started or reloaded).
#   ./scripts/install.sh                 # build, install, enable on a systemd host
#   DESTDIR=/tmp/pkg PREFIX=/usr ./scripts/install.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
prefix=${PREFIX:-/usr/local}
dest=${DESTDIR:-}
bin=${RKTLET_BIN:-}
if [ -z "$bin" ]; then
  # RKTLET_DEPS='run criu': also CRIU, for nodes that checkpoint containers
  # shellcheck disable=SC2086
  (cd "$root" && ./scripts/install-deps.sh ${RKTLET_DEPS:-run} && cargo build --release --locked)
  bin="$root/target/release/rktlet"
fi

install -D -m 0755 "$bin" "$dest$prefix/bin/rktlet"
mkdir -p "$dest/etc/systemd/system"
sed "s|@BINDIR@|$prefix/bin|" "$root/contrib/rktlet.service" >"$dest/etc/systemd/system/rktlet.service"
chmod 0644 "$dest/etc/systemd/system/rktlet.service"
install -D -m 0644 "$root/contrib/rktlet.tmpfiles" "$dest/usr/lib/tmpfiles.d/rktlet.conf"
if [ ! -e "$dest/etc/rktlet/config.toml" ]; then
  mkdir -p "$dest/etc/rktlet"
  "$bin" config default >"$dest/etc/rktlet/config.toml"
fi
if ! compgen -G "$dest/etc/cni/net.d/*.conf*" >/dev/null; then
  install -D -m 0644 "$root/contrib/cni/10-rktlet.conflist" "$dest/etc/cni/net.d/10-rktlet.conflist"
fi
echo "installed rktlet into ${dest:-/}: $prefix/bin/rktlet, rktlet.service, tmpfiles, /etc/rktlet/config.toml"

if [ -z "$dest" ]; then
  command -v systemd-tmpfiles >/dev/null && systemd-tmpfiles --create rktlet.conf || true
  if [ -d /run/systemd/system ]; then
    systemctl daemon-reload
    echo "start it with: systemctl enable --now rktlet"
  else
    echo "PID 1 is not systemd here: run it with: $prefix/bin/rktlet serve --config /etc/rktlet/config.toml"
  fi
  "$prefix/bin/rktlet" doctor --config /etc/rktlet/config.toml || true
fi
