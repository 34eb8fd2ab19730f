#!/usr/bin/env bash
# Runs every fuzz target in fuzz/ for a bounded time (FUZZ_SECONDS each,
# default 60) with cargo-fuzz on the nightly toolchain; not part of the
# test run. Installs what it needs. A crash stops the script and leaves its
# input in fuzz/artifacts/<target>/.
#   ./scripts/fuzz.sh                 # all targets
#   FUZZ_SECONDS=600 ./scripts/fuzz.sh tar_extract spdy_frames
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-60}
./scripts/install-deps.sh >/dev/null
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(reference image_manifest pod_manifest tar_extract cri_log spdy_frames spdy_headers http_head
  registry_auth aci_discovery image_identity)
for t in "${targets[@]}"; do
  echo "== $t ($seconds s)"
  cargo +nightly fuzz run "$t" -- -max_total_time="$seconds" -rss_limit_mb=2048 2>&1 | tail -3
done
