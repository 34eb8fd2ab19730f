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
cargo test --all-targets --locked
