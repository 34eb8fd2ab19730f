#!/usr/bin/env bash
# The whole test run: install dependencies, format and lint checks, then
# every unit and integration test (real sockets, real processes; run as root).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cargo fmt --check
cargo clippy --all-targets --locked -- -D warnings
# appexec is a program of its own (built by build.rs, outside the crate)
rustfmt --edition 2024 --check appexec/main.rs
appexec_lint=$(mktemp -d)
clippy-driver --edition 2024 -D warnings -C panic=abort --crate-name appexec --out-dir "$appexec_lint" appexec/main.rs
rm -rf "$appexec_lint"
# a check that cannot run on this machine prints one `SKIPPED: test: reason`
# line (tests/common's `skipped`): they are counted and listed at the end
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --all-targets --locked 2>&1 | tee "$log"
skipped=$(grep -c '^SKIPPED: ' "$log" || true)
echo "tests done; $skipped checks SKIPPED on this machine"
grep '^SKIPPED: ' "$log" || true
