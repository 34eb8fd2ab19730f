#!/usr/bin/env bash
# The tests that must pass as an ordinary user, run as one (nobody, with
# no capabilities): the rkt crate's (rkt's formats need no root) and the CRI
# handlers' over a runtime on a temporary node (`src/cri/handler_tests.rs`).
# Run by scripts/test.sh after the whole run as root; builds nothing new.
set -euo pipefail
cd "$(dirname "$0")/.."
# the paths of the test executables cargo built for these arguments (built
# already by the run before: nothing is compiled again)
executables() {
  cargo test --locked --no-run --message-format=json "$@" 2>/dev/null |
    python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["executable"])'
}
as_nobody() {
  # a directory of its own for temporary files, and no HOME of root's
  local tmp
  tmp=$(mktemp -d)
  chmod 0777 "$tmp"
  local rc=0
  setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all --bounding-set=-all \
    env -i PATH=/usr/bin:/bin HOME="$tmp" TMPDIR="$tmp" RUST_BACKTRACE=1 "$@" || rc=$?
  rm -rf "$tmp"
  return $rc
}
rkt_tests=$(executables -p rkt --lib)
lib_tests=$(executables -p rktlet --lib)
[ -n "$rkt_tests" ] && [ -n "$lib_tests" ] || { echo "unprivileged-tests: no test executables found" >&2; exit 1; }
echo "unprivileged-tests: as uid 65534 (no capabilities): the rkt crate's tests"
as_nobody $rkt_tests
echo "unprivileged-tests: as uid 65534 (no capabilities): the CRI handlers (cri::handler_tests)"
as_nobody $lib_tests cri::handler_tests
