#!/usr/bin/env bash
# The whole test run: install dependencies, format and lint checks, then
# every unit and integration test (real sockets, real processes; run as root).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cargo fmt --check
cargo clippy --all-targets --locked -- -D warnings
cargo test --all-targets --locked
