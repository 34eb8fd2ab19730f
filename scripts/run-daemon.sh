#!/usr/bin/env bash
# Sets up a fresh machine and runs the rktlet daemon on /run/rktlet/rktlet.sock,
# then asks it for its Version over that socket.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh run
cargo build --release --locked
socket=${RKTLET_SOCKET:-/run/rktlet/rktlet.sock}
./target/release/rktlet serve --socket "$socket" "$@" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid' EXIT INT TERM
for _ in $(seq 200); do [ -S "$socket" ] && break; sleep 0.05; done
./target/release/rktlet info --socket "$socket"
wait $pid
