#!/usr/bin/env bash
# critest-bench.sh - the official CRI benchmark suite, `critest --benchmark` of cri-tools v1.29.0
# (unmodified), against rktlet and containerd in one run, one runtime after the other on the same
# machine, and its table in docs/bench.md. Run as root, after a build (target/release preferred).
#
#   1. containerd (Debian's 1.6.20 + runc): the offline kit cri-conformance.sh, on a PEER_DIR of its
#      own ($WORK/containerd, reset first), runs its stages deps images registry push containerd
#      bench, then stop;
#   2. rktlet: `CRITEST_RUN=0 BENCH=1 ./scripts/conformance.sh` (the same kit, images and critest
#      parameters; a fresh data dir, a registry and a bridge of its own) on $WORK/rt, with a copy
#      of the binary taken at the start ($WORK/bin/rktlet: a rebuild during the run cannot touch it);
#   3. each runtime's results are copied to $WORK/results/{containerd,rktlet}/ and its
#      *_benchmark_data.json to $OUT/critest-bench/{containerd,rktlet}/;
#   4. jq renders, per operation of each data file, p50 / p90 / p99 (nearest rank, ms) and the
#      sample count of both runtimes and the ratio of the p50s, plus the machine, the versions,
#      BENCH_N, BENCH_PAR and the date, into $OUT/bench.md between the lines
#      `<!-- critest-benchmark:begin -->` and `<!-- critest-benchmark:end -->` (appended at the
#      end when they are absent). The rest of bench.md is `rktlet bench`'s (scripts/bench.sh),
#      which keeps this section when it rewrites the file.
# Exit status: non-zero when a runtime wrote no benchmark data (bench.md is then left alone) or
# a benchmark spec failed (the section is written, and names the failed specs).
#
# Environment:
#   WORK (/var/tmp/rktlet-critest-bench)  the runtimes' PEER_DIRs (containerd/, rt/), logs
#                                         (containerd.log, rktlet.log), results (results/)
#   BENCH_N (50)            samples per benchmark (critest's podsNumber, containersNumber, imagesNumber)
#   BENCH_PAR (1)           samples at a time (pods and containers; images always 1)
#   OUT (docs)              where bench.md and critest-bench/ are written
#   RKTLET                  the rktlet binary (default target/release/rktlet, else target/debug/rktlet)
#   RKTLET_ARGS             extra `rktlet serve` flags (e.g. "--pod-pool-size 0"), named in the section
#   RKTLET_REG_PORT (5090), RKTLET_BRIDGE (rktbch0), RKTLET_SUBNET (10.213.90.0/24)
#   CONTAINERD_REG_PORT (5091), CONTAINERD_BRIDGE (ctrbch0), CONTAINERD_SUBNET (10.213.91.0/24)
#                           each runtime's loopback registry and pod network
#   CRI_TOOLS_KIT           the kit (default ../shared/tools/cri-conformance.sh beside the project)
#   SKIP_DEPS=1             conformance.sh does not run ./scripts/install-deps.sh first
set -euo pipefail
caller=$PWD
cd "$(dirname "$0")/.."
root=$(pwd)
# paths given in the environment are relative to where the script was started
abs() { case $1 in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$caller/$1" ;; esac; }

log() { printf '\n=== critest-bench: %s\n' "$*" >&2; }
die() { printf 'critest-bench: ERROR: %s\n' "$*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root"
command -v jq >/dev/null || die "jq missing (./scripts/install-deps.sh)"

WORK=$(abs "${WORK:-/var/tmp/rktlet-critest-bench}")
OUT=$(abs "${OUT:-$root/docs}")
export BENCH_N=${BENCH_N:-50}
export BENCH_PAR=${BENCH_PAR:-1}
KIT=$(abs "${CRI_TOOLS_KIT:-$root/../shared/tools/cri-conformance.sh}")
[ -f "$KIT" ] || die "the offline CRI test kit is not at $KIT (set CRI_TOOLS_KIT)"
export CRI_TOOLS_KIT=$KIT
RKTLET_REG_PORT=${RKTLET_REG_PORT:-5090}
RKTLET_BRIDGE=${RKTLET_BRIDGE:-rktbch0}
RKTLET_SUBNET=${RKTLET_SUBNET:-10.213.90.0/24}
CONTAINERD_REG_PORT=${CONTAINERD_REG_PORT:-5091}
CONTAINERD_BRIDGE=${CONTAINERD_BRIDGE:-ctrbch0}
CONTAINERD_SUBNET=${CONTAINERD_SUBNET:-10.213.91.0/24}
[ "$RKTLET_REG_PORT" != "$CONTAINERD_REG_PORT" ] || die "RKTLET_REG_PORT and CONTAINERD_REG_PORT are both $RKTLET_REG_PORT"
[ "$RKTLET_BRIDGE" != "$CONTAINERD_BRIDGE" ] || die "RKTLET_BRIDGE and CONTAINERD_BRIDGE are both $RKTLET_BRIDGE"

if [ -n "${RKTLET:-}" ]; then
  bin=$(abs "$RKTLET")
elif [ -x target/release/rktlet ]; then
  bin=$root/target/release/rktlet
else
  bin=$root/target/debug/rktlet
fi
[ -x "$bin" ] || die "no rktlet binary at $bin: build it first (cargo build --release), or set RKTLET=path"
bin=$(cd "$(dirname "$bin")" && pwd -P)/$(basename "$bin")

BEGIN='<!-- critest-benchmark:begin -->'
END='<!-- critest-benchmark:end -->'
if [ -f "$OUT/bench.md" ]; then
  nb=$(grep -cxF "$BEGIN" "$OUT/bench.md" || true)
  ne=$(grep -cxF "$END" "$OUT/bench.md" || true)
  [ "$nb$ne" = 00 ] || [ "$nb$ne" = 11 ] || die "$OUT/bench.md: $nb '$BEGIN' and $ne '$END' lines (want one of each, or none)"
fi

CD_P=$WORK/containerd        # the containerd run's PEER_DIR
RT_P=$WORK/rt                # the rktlet run's PEER_DIR (short: pods' sockets live under it)
RESULTS=$WORK/results
# conformance.sh's limit: a pod's log socket under $RT_P must fit a unix socket path
pod_sock=$RT_P/rktlet/data/pods/run/00000000-0000-0000-0000-000000000000/logger.sock
[ ${#pod_sock} -le 107 ] || die "WORK too long: a pod's log socket would be $pod_sock (${#pod_sock} bytes, at most 107)"
mkdir -p "$WORK" "$RESULTS"
sub=bench; [ "$BENCH_PAR" = 1 ] || sub=bench-p$BENCH_PAR   # the kit's results/ subdirectory
# a previous run's results must not pass for this run's
rm -rf "${CD_P:?}/results/$sub" "${RT_P:?}/results/$sub"

# the run uses a copy of the binary: a rebuild during the run (cargo replaces the file) would
# leave the daemon unable to start pods ("cannot start the sandbox process ... (deleted)")
mkdir -p "$WORK/bin"
install -m 0755 "$bin" "$WORK/bin/rktlet.tmp" && mv "$WORK/bin/rktlet.tmp" "$WORK/bin/rktlet"
src_bin=$bin
bin=$WORK/bin/rktlet
rktlet_version="$("$bin" --version 2>/dev/null | head -1)"
case $src_bin in
  */target/debug/*)
    rktlet_version+=" (debug build)"
    echo "critest-bench: note: $src_bin is a debug build; figures to publish want cargo build --release" >&2 ;;
  */target/release/*) rktlet_version+=" (release build)" ;;
esac
if commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null); then
  git -C "$root" diff --quiet HEAD -- src Cargo.toml Cargo.lock 2>/dev/null || commit+=" with local changes"
  rktlet_version+=", source tree $commit"
fi

kit_containerd() {
  env -u CRI_ENDPOINT PEER_DIR="$CD_P" REG_PORT="$CONTAINERD_REG_PORT" \
    CNI_BRIDGE="$CONTAINERD_BRIDGE" CNI_SUBNET="$CONTAINERD_SUBNET" bash "$KIT" "$@"
}
containerd_up=
cleanup() {
  [ -z "$containerd_up" ] || kit_containerd stop >>"$WORK/containerd.log" 2>&1 || true
  containerd_up=
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# copy_results NAME DIR: keep a runtime's benchmark results (they are overwritten on the next
# run); none at all ends the run, bench.md untouched
copy_results() {
  rm -rf "${RESULTS:?}/$1"
  mkdir -p "$RESULTS/$1"
  [ ! -d "$2" ] || cp -a "$2"/. "$RESULTS/$1"/
  if ! compgen -G "$RESULTS/$1/*_benchmark_data.json" >/dev/null; then
    tail -20 "$WORK/$1.log" >&2
    die "$1 wrote no *_benchmark_data.json (see $WORK/$1.log); $OUT/bench.md left alone"
  fi
}

# ---------------------------------------------------------------- containerd
log "containerd: the kit's stages reset deps images registry push containerd bench stop (log: $WORK/containerd.log)"
: >"$WORK/containerd.log"
t0=$(date +%s)
containerd_up=1
cd_rc=0
kit_containerd reset deps images registry push containerd bench >>"$WORK/containerd.log" 2>&1 || cd_rc=$?
cleanup
containerd_secs=$(($(date +%s) - t0))
grep -E 'critest --benchmark exit code|SUCCESS!|FAIL!' "$WORK/containerd.log" >&2 || true
echo "containerd: $containerd_secs s (kit exit status $cd_rc)" >&2
copy_results containerd "$CD_P/results/$sub"

# ---------------------------------------------------------------- rktlet
log "rktlet: CRITEST_RUN=0 BENCH=1 ./scripts/conformance.sh with $bin, a copy of $src_bin (log: $WORK/rktlet.log)"
t0=$(date +%s)
rt_rc=0
env -u CRI_ENDPOINT CRITEST_RUN=0 BENCH=1 PEER_DIR="$RT_P" REG_PORT="$RKTLET_REG_PORT" \
  CNI_BRIDGE="$RKTLET_BRIDGE" CNI_SUBNET="$RKTLET_SUBNET" RKTLET="$bin" \
  ./scripts/conformance.sh >"$WORK/rktlet.log" 2>&1 || rt_rc=$?
rktlet_secs=$(($(date +%s) - t0))
tail -3 "$WORK/rktlet.log" >&2
copy_results rktlet "$RT_P/results/$sub"
cp "$RT_P/results/rktlet.log" "$RESULTS/rktlet/rktlet-daemon.log" 2>/dev/null || true
echo "rktlet: $rktlet_secs s (conformance.sh exit status $rt_rc)" >&2

# ---------------------------------------------------------------- raw data
for rt in containerd rktlet; do
  mkdir -p "$OUT/critest-bench/$rt"
  rm -f "$OUT/critest-bench/$rt"/*_benchmark_data.json
  cp "$RESULTS/$rt"/*_benchmark_data.json "$OUT/critest-bench/$rt/"
done

# ---------------------------------------------------------------- the section
R=$WORK/render
rm -rf "$R"; mkdir -p "$R"
# all of a runtime's data files as one object: {"pod": {ops, par, d: [[ns per op] per sample]}, ...}
for rt in containerd rktlet; do
  for f in "$OUT/critest-bench/$rt"/*_benchmark_data.json; do
    n=$(basename "$f" _benchmark_data.json)
    jq -c --arg n "$n" '{($n): {ops: .operationsNames, par: .numParallel,
                               d: [.datapoints[]? | .operationsDurationsNs]}}' "$f"
  done | jq -s 'add // {}' >"$R/$rt.json"
done

jq -n -r --slurpfile r "$R/rktlet.json" --slurpfile c "$R/containerd.json" '
  # nearest-rank percentile of a sorted array (as `rktlet bench` computes them)
  def rank(p): length as $n | .[([([((p * $n) | ceil), 1] | max), $n] | min) - 1];
  def fixed(d): (. * pow(10; d) | round | tostring) as $s
    | if d == 0 then $s
      else (if ($s | length) <= d then ("0" * (d + 1 - ($s | length))) + $s else $s end) as $p
        | $p[:(($p | length) - d)] + "." + $p[(($p | length) - d):] end;
  # the precision of `rktlet bench`s tables
  def ms: if . >= 100 then fixed(0) elif . >= 10 then fixed(1) elif . >= 1 then fixed(2) else fixed(3) end;
  def stats: map(select(. != null) / 1e6) | sort
    | if length == 0 then null else {p50: rank(0.5), p90: rank(0.9), p99: rank(0.99), n: length} end;
  def cell: if . == null then "n/a" else "**\(.p50 | ms)** / \(.p90 | ms) / \(.p99 | ms)" end;
  def n: if . == null then "0" else (.n | tostring) end;
  def title: {"pod": "PodSandbox lifecycle", "container": "container lifecycle",
               "image_lifecycle": "image lifecycle", "image_listing": "image listing"}[.] // .;
  def order: . as $f | (["pod", "container", "image_lifecycle", "image_listing"] | index([$f])) // 99;
  # critest names some operations after the object, not the CRI call
  def call: {"CreatePod": "RunPodSandbox", "StatusPod": "PodSandboxStatus", "StopPod": "StopPodSandbox",
             "RemovePod": "RemovePodSandbox", "StatusContainer": "ContainerStatus",
             "StatusImage": "ImageStatus"}[.] as $c | if $c then "\(.) (\($c))" else . end;
  # stats of operation $op in benchmark $f of runtime data $x
  def of($x; $f; $op): $x[$f] as $b
    | if $b == null then null
      else ($b.ops | index([$op])) as $i
        | if $i == null then null else [$b.d[] | .[$i]] | stats end end;
  $r[0] as $r | $c[0] as $c
  | "| benchmark | operation | rktlet p50 / p90 / p99 (ms) | n | containerd p50 / p90 / p99 (ms) | n | rktlet / containerd (p50) |",
    "|---|---|---|---|---|---|---|",
    ( ([$r, $c] | map(keys[]) | unique | map({f: ., o: order}) | sort_by(.o, .f) | .[].f) as $f
      | ([$r[$f].ops // [], $c[$f].ops // []] | add | reduce .[] as $o ([]; if index([$o]) then . else . + [$o] end))
      | to_entries[]
      | .key as $k | .value as $op
      | of($r; $f; $op) as $rs | of($c; $f; $op) as $cs
      | "| \(if $k == 0 then $f | title else "" end) | \($op | call) | \($rs | cell) | \($rs | n) | \($cs | cell) | \($cs | n) | "
        + (if $rs != null and $cs != null and $cs.p50 > 0
           then ($rs.p50 / $cs.p50) as $x | (if $x >= 1 then $x | fixed(1) else $x | fixed(2) end) + "x"
           else "" end) + " |" )
' >"$R/table.md"

# facts from a runtime's results: specs passed, failed specs, suite time, pod+container start
spec_summary() {
  jq -r '.[0] as $s | [$s.SpecReports[]? | select(.LeafNodeType == "It" and .State != "skipped")] as $run
    | "\($run | map(select(.State == "passed")) | length)/\($run | length) passed"
      + ([$run[] | select(.State != "passed") | "\(.LeafNodeText) [\(.State)]"] | if length > 0 then ", failed: " + join("; ") else "" end)
      + ", suite \((($s.RunTime // 0) / 1e9 * 10 | round) / 10) s"' "$RESULTS/$1/ginkgo-report.json" 2>/dev/null ||
    echo "no ginkgo-report.json"
}
start_sample() { # critest's "start a container from scratch": one sample per run, ms
  jq -r '[.[0].SpecReports[]? | .ReportEntries[]? | select(.Name == "start-container-benchmark")
           | .Value.AsJSON | fromjson | .Measurements[]? | .Durations[]?] | first // empty | . / 1e6
         | if . >= 100 then round else (. * 10 | round) / 10 end' "$RESULTS/$1/ginkgo-report.json" 2>/dev/null || true
}
load_before() { sed -n 's/.*load average: //p' "$RESULTS/$1/loadavg-before.txt" 2>/dev/null || true; }
critest_version=$(sed -n 's/^critest version: //p' "$RESULTS/rktlet/bench.log" 2>/dev/null | head -1)
pool_default=$("$bin" config default 2>/dev/null | sed -n 's/^pod_pool_size = //p')
if [ -n "${RKTLET_ARGS:-}" ]; then
  serve_flags="\`rktlet serve $RKTLET_ARGS\`, defaults otherwise (default pod pool: ${pool_default:-?})"
else
  serve_flags="\`rktlet serve\` with its defaults (pod pool of ${pool_default:-?})"
fi
rs=$(start_sample rktlet); cs=$(start_sample containerd)

{
  echo "$BEGIN"
  echo
  echo "## critest --benchmark: rktlet and containerd"
  echo
  echo "The official CRI benchmark suite, \`critest --benchmark\` of cri-tools ${critest_version:-unknown} (unmodified),"
  echo "against rktlet and containerd, one after the other on the same machine, each with a fresh"
  echo "state, the offline kit's test images from a loopback registry and a CNI bridge of its own."
  echo "p50 / p90 / p99 (nearest rank) in ms over n samples; the ratio is rktlet's p50 over containerd's."
  echo "Generated by \`./scripts/critest-bench.sh\`; critest's raw data is in \`critest-bench/\`."
  echo
  cat "$R/table.md"
  echo
  echo "- machine: $(nproc) CPUs, Linux $(uname -r)"
  echo "- rktlet: $rktlet_version; $serve_flags"
  echo "- containerd: $(containerd --version 2>/dev/null | head -1), $(runc --version 2>/dev/null | head -1)"
  echo "- critest: ${critest_version:-unknown}"
  echo "- samples: BENCH_N=$BENCH_N (critest's podsNumber, containersNumber, imagesNumber), BENCH_PAR=$BENCH_PAR (pods and containers at a time; images 1)"
  echo "- specs run: rktlet $(spec_summary rktlet); containerd $(spec_summary containerd)"
  [ -z "$rs$cs" ] || echo "- critest's \"start a container from scratch\" (RunPodSandbox, CreateContainer, StartContainer, StopPodSandbox, RemovePodSandbox; 1 sample): rktlet ${rs:-n/a} ms, containerd ${cs:-n/a} ms"
  echo "- load average at the start: rktlet $(load_before rktlet); containerd $(load_before containerd)"
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "$END"
} >"$R/section.md"

# into bench.md: replace the lines from BEGIN to END, or append them
md=$OUT/bench.md
mkdir -p "$OUT"
if [ -f "$md" ] && grep -qxF "$BEGIN" "$md"; then
  awk -v b="$BEGIN" -v e="$END" -v s="$R/section.md" '
    $0 == b { while ((getline l < s) > 0) print l; skip = 1; next }
    $0 == e { skip = 0; next }
    !skip' "$md" >"$md.tmp"
elif [ -s "$md" ]; then
  { cat "$md"; echo; cat "$R/section.md"; } >"$md.tmp"
else
  cp "$R/section.md" "$md.tmp"
fi
mv "$md.tmp" "$md"

cat "$R/table.md"
echo "containerd: $containerd_secs s, rktlet: $rktlet_secs s (images, registry, daemon and benchmark each)"
echo "critest benchmark written to $md (raw data: $OUT/critest-bench/, all results: $RESULTS)"
# the kit's bench stage does not fail when critest does: its report says
ok=1
for rt in containerd rktlet; do
  [ "$(jq -r '.[0].SuiteSucceeded' "$RESULTS/$rt/ginkgo-report.json" 2>/dev/null)" = true ] ||
    { echo "$rt: critest --benchmark did not succeed (see $RESULTS/$rt/bench.log)" >&2; ok=; }
done
[ -n "$ok" ] && [ "$cd_rc" = 0 ] && [ "$rt_rc" = 0 ] || exit 1
