#!/usr/bin/env bash
# One GPU call (about 5 minutes on an H100 with 16 cores; about 9 if every timeout is hit), building
# nothing, for decode_paged_f16 (issue 22 item 2: paged split-KV decode). Four lanes run at once,
# then the timings alone:
#   A. tests: decode_split_plan_test, decode_paged_test (random decode problems and edge shapes
#      against the CPU oracle, 20-run bitwise determinism), the launched-tile and capability tests;
#   B. campaigns `run --kernel decode_paged_f16` (every variant it declares: paged caches of any page
#      size and order, packed and BSHD queries, seqused) with the CPU oracle, with `--oracle gpu`,
#      and with every case paged;
#   C. the issue's decode shapes through the harness and the judge (`run --problem`: B=16 cache
#      8192 page 64, B=1 cache 128K page 64, Sq=16 with group 8, ...) and `determinism --runs 100`;
#   D. compute-sanitizer memcheck, racecheck and synccheck on small paged/packed/dense problems;
#   then, alone on the GPU: decode_bench (ms and TB/s of KV read) and torch SDPA flash and cuDNN on
#   the same shapes with dense KV (torch has no paged cache; decode_sdpa.py says more).
# Every step runs under `timeout`; a failure is counted and the script goes on. Files under $OUT:
# summary.txt, tests.log, campaigns.log, checks.log, bench.log, device.txt; the summary is printed last.
#
#   tools/device/decode_device.sh [CARRY_DIR]   (default build-decode: bin.tar.xz from decode_prepare.sh)
# Run from the source root. Knobs: CASES (300), CAMPAIGN_TIMEOUT (200 s), TEST_TIMEOUT (240 s),
# NO_BENCH=1, NO_TORCH=1.
set -u
carry=${1:-build-decode}
out=${OUT:-decode-out}
mkdir -p "$out"
dir=/tmp/decode_bin
work=/tmp/decode_work  # per-step logs and JSON; what matters is copied into $OUT's few files
rm -rf "$dir" "$work" && mkdir -p "$dir" "$work" &&
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$carry/bin.tar.xz" "$dir" ||
  { echo "cannot unpack $carry/bin.tar.xz"; exit 125; }
export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fc=$dir/flashcheck
K=decode_paged_f16
nvidia-smi -L | tee "$out/device.txt"
: >"$work/rows.txt"
record() {  # record ORDER NAME RC DETAIL: one summary row (lanes append from their own processes)
  printf '%s|%-50s|%s|%s\n' "$1" "$2 rc=$3" "$3" "$4" >>"$work/rows.txt"
}

# ---- B. campaigns (background; the CPU oracle is the work) ---------------------------------------
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-3}
cases=${CASES:-300}
tmo=${CAMPAIGN_TIMEOUT:-200}
campaign() {  # campaign NAME ARGS...
  local name=$1
  shift
  (timeout "$tmo" "$fc" run --kernel "$K" "$@" --json "$work/$name.json" >"$work/$name.log" 2>&1
   echo $? >"$work/$name.rc") &
}
campaign cpu_oracle_s41 --cases "$cases" --seed 41 --max-seq 2048 --max-work 1e8
campaign gpu_oracle_s42 --oracle gpu --cases "$cases" --seed 42 --max-seq 4096 --max-work 3e8
campaign require_paged_s43 --require paged --cases 200 --seed 43 --max-seq 2048 --max-work 1e8

# ---- C. the issue's shapes through the harness and the judge; determinism (background) -----------
(
  skv16=$(printf '8192,%.0s' $(seq 16))
  shapes=("b=16 hq=32 hkv=8 sq=1 skv=${skv16%,} d=128 page=64 pages=shuffled causal=bottom_right dtype=bf16"
          "b=1 hq=32 hkv=8 sq=1 skv=131072 d=128 page=64 pages=shuffled causal=bottom_right dtype=bf16"
          "b=4 hq=32 hkv=4 sq=16 skv=5000,0,64,1 d=128 page=16 pages=shared causal=bottom_right dtype=f16"
          "b=2 hq=16 hkv=2 sq=3 skv=40000,257 d=256 page=256 pages=shuffled causal=bottom_right dtype=bf16"
          "b=3 hq=8 hkv=8 sq=1 skv=9000,1,2 d=64 page=1 pages=shuffled causal=bottom_right dtype=f16")
  ok=0
  : >"$work/shapes.txt"
  for prob in "${shapes[@]}"; do
    timeout 120 "$fc" run --kernel "$K" --problem "$prob" --dist normal --input-seed 7 >"$work/shape.log" 2>&1
    rc=$?
    if [ "$rc" -eq 0 ]; then ok=$((ok + 1)); else
      { echo "==== shape rc=$rc: $prob"; tail -n 25 "$work/shape.log"; } >>"$work/shapes.txt"
    fi
  done
  record 20 "issue shapes via run --problem (${#shapes[@]})" $((${#shapes[@]} - ok)) "$ok passed"
  timeout 180 "$fc" determinism --kernel "$K" --runs 100 \
    --problem "b=2 hq=32 hkv=8 sq=2 skv=20000,7000 d=128 page=16 pages=shuffled causal=bottom_right dtype=bf16" \
    >"$work/determinism.log" 2>&1
  rc=$?
  record 21 "determinism (100 runs, 2 seqs, many splits)" "$rc" "$(tail -n 1 "$work/determinism.log" | cut -c1-80)"
) &

# ---- D. sanitizers (background) ------------------------------------------------------------------
(
  if command -v compute-sanitizer >/dev/null; then
    ok=0
    n=0
    : >"$work/san.txt"
    sanitize() {  # sanitize TOOL PROBLEM
      n=$((n + 1))
      timeout 150 compute-sanitizer --tool "$1" --error-exitcode 3 "$fc" run --kernel "$K" --problem "$2" --dist normal \
        --input-seed 5 --no-isolation >"$work/san.log" 2>&1
      local rc=$?
      if [ "$rc" -eq 0 ]; then ok=$((ok + 1)); else
        { echo "==== $1 rc=$rc: $2"; grep -E "=========|Invalid|Race|Hazard|error|FAIL" "$work/san.log" | head -20; } >>"$work/san.txt"
      fi
    }
    sanitize memcheck "b=3 hq=8 hkv=2 sq=4 skv=300,0,65 d=128 page=16 pages=shuffled causal=bottom_right dtype=bf16"
    sanitize memcheck "b=2 hq=4 hkv=1 sq=16 skv=700,129 d=256 page=64 pages=shared causal=bottom_right dtype=f16"
    sanitize memcheck "b=3 hq=4 hkv=2 sq=2,0,16 skv=100,50,0 d=64 page=7 pages=shuffled causal=bottom_right layout=thd dtype=bf16"
    sanitize memcheck "b=2 hq=6 hkv=2 sq=9 skv=400 d=128 causal=bottom_right used=399,0 layout=bshd dtype=bf16"
    sanitize racecheck "b=3 hq=8 hkv=2 sq=4 skv=300,0,65 d=128 page=16 pages=shuffled causal=bottom_right dtype=bf16"
    sanitize racecheck "b=2 hq=4 hkv=1 sq=16 skv=700,129 d=256 page=64 pages=shared causal=bottom_right dtype=f16"
    sanitize synccheck "b=3 hq=4 hkv=2 sq=2,0,16 skv=100,50,0 d=64 page=7 pages=shuffled causal=bottom_right layout=thd dtype=bf16"
    record 30 "compute-sanitizer (memcheck x4, racecheck x2, synccheck)" $((n - ok)) "$ok clean of $n"
  else
    record 30 "compute-sanitizer" 0 "not found"
  fi
) &

# ---- A. tests (foreground) -----------------------------------------------------------------------
: >"$out/tests.log"
test_step() {  # test_step ORDER NAME TIMEOUT CMD...
  local order=$1 name=$2 t=$3 s=$SECONDS
  shift 3
  timeout "$t" "$@" >"$work/$name.log" 2>&1
  local rc=$?
  record "$order" "$name $((SECONDS - s))s" "$rc" "$(grep -E '^\[  (PASSED|FAILED|SKIPPED) *\] [0-9]+ tests?' "$work/$name.log" | tr -s ' ' | tr '\n' ' ')"
  { echo "==== $name rc=$rc"; grep -E "^\[  FAILED  \]|Failure|Expected|Which is|error|seed|random decode|edge cases|differ|pages 16" "$work/$name.log" | head -40; } >>"$out/tests.log"
}
test_step 10 decode_split_plan_test 60 "$dir/decode_split_plan_test"
test_step 11 decode_paged_test "${TEST_TIMEOUT:-240}" "$dir/decode_paged_test"
test_step 12 launched_tile_test 90 "$dir/launched_tile_test"
test_step 13 capabilities_snapshot_test 60 env FLASHCHECK_CAPABILITIES_FILE="$dir/capabilities.json" "$dir/capabilities_snapshot_test"

wait  # every lane
summarise() {  # a campaign's JSON: cases, failures by criterion
  python3 "$(dirname "$0")/campaign_summary.py" "$1"
}
: >"$out/campaigns.log"
for f in "$work"/*.rc; do
  [ -f "$f" ] || continue
  b=$(basename "$f" .rc)
  rc=$(cat "$f")
  record 40 "campaign $b" "$rc" "$(summarise "$work/$b.json")"
  { echo "==== $b rc=$rc"; grep -E "^reproduce:|^flaky|failed|worst|skipped|error" "$work/$b.log" | head -12; } >>"$out/campaigns.log"
done
cat "$work/shapes.txt" "$work/san.txt" 2>/dev/null >"$out/checks.log"
{ echo "==== determinism"; tail -n 5 "$work/determinism.log"; } >>"$out/checks.log" 2>/dev/null

# ---- alone on the GPU: our benchmark, then torch SDPA on the same shapes (dense KV) --------------
if [ -z "${NO_BENCH:-}" ]; then
  timeout 200 "$dir/decode_bench" --warmup 10 --iters 30 >"$out/bench.log" 2>&1
  rc=$?
  record 50 "decode_bench" "$rc" "$(grep -cE ' decode ' "$out/bench.log") decode rows"
  if [ -z "${NO_TORCH:-}" ] && python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    echo "---- torch SDPA (dense KV: torch has no paged cache)" >>"$out/bench.log"
    timeout 90 python3 "$dir/decode_sdpa.py" --iters 30 >>"$out/bench.log" 2>&1
    record 51 "torch SDPA" "$?" "flash, cudnn on the same shapes"
  else
    record 51 "torch SDPA" 0 "skipped (no torch with CUDA, or NO_TORCH)"
  fi
fi

failed=$(awk -F'|' '$3 != 0' "$work/rows.txt" | wc -l)
{
  echo "decode_paged_f16 device check: ${SECONDS}s, $failed failing steps"
  sort -t'|' -k1,1n "$work/rows.txt" | awk -F'|' '{printf "%s %s\n", $2, $4}'
  [ -f "$out/bench.log" ] && { echo "---- bench"; grep -vE '^$' "$out/bench.log" | head -30; }
} | tee "$out/summary.txt"
[ "$failed" -eq 0 ]
