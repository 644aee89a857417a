#!/usr/bin/env bash
# The fp64 oracle against torch's CPU fp64 SDPA on the same shapes and cores, in one go (issue 11).
#
#   bash bench/device_oracle_bench.sh [DIR]
#
# DIR (default .devcarry/blas) holds what was built on a Debian machine: oracle_bench, flashcheck,
# optionally flashcheck_before (the previous build, for a before/after of `check`) and
# reference_test, lib/ with libopenblas.so.0 and its runtime (libgfortran, libquadmath, libgomp,
# libbenchmark), and copies of bench/*.py. The target need not be Debian: LD_LIBRARY_PATH points our
# binaries (only them, never python) at DIR/lib. Logs go to $OUT (default: a temp folder); a table
# is printed last. SHAPES, CHECK_SHAPE and THREADS override the defaults; FLASHCHECK_ORACLE_ROW_BLOCK
# and FLASHCHECK_ORACLE_ISA (sse2|avx2) are the oracle's own tuning/testing caps.
set -euo pipefail
D=${1:-.devcarry/blas}
OUT=${OUT:-$(mktemp -d)}
THREADS=${THREADS:-$(nproc)}
SHAPES=${SHAPES:-"1,4,4096,128;1,4,4096,128,causal"}
CHECK_SHAPE=${CHECK_SHAPE:-"1,32,8192,128"}
PY=${PY:-python3}
run() { env LD_LIBRARY_PATH="$D/lib" OMP_NUM_THREADS="$THREADS" "$@"; }

echo "== machine" | tee "$OUT/summary.txt"
{
  date -u +%Y-%m-%dT%H:%MZ
  lscpu | grep -E "^(Model name|CPU\(s\)|Thread|Core|Socket|L3)" || true
  grep -o -w -E "avx512f|avx2|fma" /proc/cpuinfo | sort | uniq -c | awk '{print "cpu flag", $2, "on", $1, "cpus"}'
  echo "threads used: $THREADS"
} | tee -a "$OUT/summary.txt"

# The oracle's row kernels and OpenBLAS's kernels are chosen at run time: check the one this CPU gets.
if [ -x "$D/reference_test" ]; then
  echo "== reference_test on this CPU"
  run "$D/reference_test" --gtest_brief=1 >"$OUT/reference_test.log" 2>&1 && echo "reference_test: passed" || { echo "reference_test: FAILED"; tail -30 "$OUT/reference_test.log"; }
fi
if [ -d "$D/data" ]; then
  run "$D/flashcheck" golden verify --dir "$D/data" >"$OUT/golden.log" 2>&1 && tail -1 "$OUT/golden.log" || { echo "golden verify FAILED"; cat "$OUT/golden.log"; }
fi

echo "== oracle_bench ($SHAPES)"
run "$D/oracle_bench" --shapes="$SHAPES" --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
  --benchmark_out="$OUT/oracle_bench.json" --benchmark_out_format=json >"$OUT/oracle_bench.txt" 2>&1
grep -E "openblas_core|omp_threads|cpu_avx|_median" "$OUT/oracle_bench.txt" || cat "$OUT/oracle_bench.txt"

# The oracle's tallest row block was tuned on a 2-core AVX2 machine: sweep it on this one.
first=${SHAPES%%;*}
if [[ $first != *causal ]]; then
  for rb in 128 256 512; do
    printf "row block %4s: " "$rb"
    FLASHCHECK_ORACLE_ROW_BLOCK=$rb run "$D/oracle_bench" --shapes="$first" --benchmark_filter="^oracle/" \
      --benchmark_repetitions=3 --benchmark_report_aggregates_only=true 2>&1 | grep "_median" | awk '{print $2, $3, $NF}'
  done | tee "$OUT/row_block_sweep.txt"
fi

echo "== torch CPU fp64 SDPA"
$PY "$D/torch_cpu_sdpa.py" --shapes "$SHAPES" --threads "$THREADS" --json "$OUT/torch.json" | tee "$OUT/torch.txt"

declare -A CHECK_S
if [ -n "$CHECK_SHAPE" ]; then
  echo "== flashcheck check end to end, ($CHECK_SHAPE) bf16"
  $PY "$D/make_check_file.py" "$OUT/big.safetensors" --shape "$CHECK_SHAPE" --dtype bf16 >/dev/null
  for bin in flashcheck_before flashcheck; do
    [ -x "$D/$bin" ] || continue
    t0=$EPOCHREALTIME
    run "$D/$bin" check "$OUT/big.safetensors" >"$OUT/check_$bin.log" 2>&1 || true
    CHECK_S[$bin]=$(awk "BEGIN { printf \"%.2f\", $EPOCHREALTIME - $t0 }")
    echo "$bin check: ${CHECK_S[$bin]} s, verdict $(head -c 4 "$OUT/check_$bin.log"), $(grep -c '^  ok' "$OUT/check_$bin.log") criteria ok"
  done
  rm -f "$OUT/big.safetensors"
fi

echo "== table (GFLOPS = 4·B·H·(visible pairs)·D / median time; $THREADS threads)" | tee -a "$OUT/summary.txt"
$PY - "$OUT/oracle_bench.json" "$OUT/torch.json" <<'EOF' | tee -a "$OUT/summary.txt"
import json, sys
bench = json.load(open(sys.argv[1]))["benchmarks"]
torch = {r["shape"]: r for r in json.load(open(sys.argv[2]))}
med = {b["run_name"]: b for b in bench if b.get("aggregate_name") == "median"}
def g(kind, shape):
    b = med.get(f"{kind}/{shape}/process_time/real_time")
    return (b["GFLOPS"] / 1e9, b["real_time"]) if b else (float("nan"), float("nan"))
print(f"| shape (B,H,S,D) | oracle ms | oracle GFLOPS | raw BLAS GEMM GFLOPS | oracle/GEMM | torch SDPA GFLOPS | oracle/torch | bf16 baseline GFLOPS |")
print("|---|---|---|---|---|---|---|---|")
for shape, t in torch.items():
    f = shape.split(",")
    key = "x".join(f[:4]) + ("_causal" if len(f) > 4 else "")
    og, oms = g("oracle", key)
    gg, _ = g("blas_gemm", key)
    bg, _ = g("baseline_bf16", key)
    ratio_gemm = og / gg if len(f) == 4 else float("nan")  # the raw GEMM does non-causal work
    print(f"| {shape} | {oms:.1f} | {og:.1f} | {gg:.1f} | {ratio_gemm:.2f} | {t['gflops']:.1f} | {og / t['gflops']:.2f} | {bg:.1f} |")
EOF
for bin in "${!CHECK_S[@]}"; do echo "check ($CHECK_SHAPE bf16, default sampling): $bin ${CHECK_S[$bin]} s"; done | tee -a "$OUT/summary.txt"
