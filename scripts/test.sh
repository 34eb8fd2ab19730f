#!/usr/bin/env bash
# The whole test run: install dependencies, format and lint checks, then
# every unit and integration test (real sockets, real processes; run as root).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
# the workspace: the daemon and appexec (a crate of its own, built static by build.rs)
cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# a check that cannot run on this machine prints one `SKIPPED: test: reason`
# line (tests/common's `skipped`): they are counted and listed at the end
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --workspace --all-targets --locked 2>&1 | tee "$log"
# what needs no root is shown to need none: run again as an ordinary user
./scripts/unprivileged-tests.sh
skipped=$(grep -c '^SKIPPED: ' "$log" || true)
echo "tests done; $skipped checks SKIPPED on this machine"
grep '^SKIPPED: ' "$log" || true
