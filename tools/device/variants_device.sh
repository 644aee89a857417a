#!/usr/bin/env bash
# One GPU call (about 8 minutes on an H100 with 16 cores), building nothing, for a kernel's
# (KERNEL: mma_f16, the default, or wgmma_f16) problem-model-2 variants (issue 22 item 1: windows with skipped tiles, softcap, symmetric ALiBi,
# sinks, packed batches with seqused_kv, BSHD/THD strides):
#   1. tests: kernel_variants_test (each variant against the CPU oracle, window edges on tile
#      boundaries, Sq > Skv, empty rows, skipped tiles never read), gpu_variants_test's short tests,
#      the launched-tile test and the capability snapshot;
#   2. campaigns `run --kernel KERNEL --variants all` with the CPU oracle and with `--oracle gpu`
#      over several seeds, one with the window and one with packed batches required, a plain-only
#      one (the plain instantiation unchanged), a load campaign, and the perturbed build's (when packed);
#   3. edge shapes (zero-length sequences, window bounds on tile boundaries, Sq > Skv) through `run --problem`;
#   4. compute-sanitizer memcheck on variant problems (racecheck on two), and a determinism check;
#   5. alone on the GPU at the end: the benchmark (dense causal vs window (1024, 0) vs softcap 30 vs
#      ALiBi at bf16 (1,16,4096,128), a 16K window, the strided path with nothing to modify, packed
#      vs equal-length batches), and spill counts of the variant kernels (cuobjdump).
# Logs under $OUT (a few files: summary.txt, tests.log, campaigns.log, checks.log, bench.log,
# sass.txt, device.txt); the summary table is printed last.
#
#   [KERNEL=wgmma_f16] tools/device/variants_device.sh [CARRY_DIR]   (default build-mmavar: bin.tar.xz from variants_prepare.sh)
# Run from the source root. Knobs: CASES (300), SEEDS ("11 12 13"), GPU_SEEDS ("21 22"), JOBS (10),
# CAMPAIGN_TIMEOUT (300 s each), LOAD_CASES (10), NO_BENCH=1.
set -u
carry=${1:-build-mmavar}
kernel=${KERNEL:-mma_f16}
out=${OUT:-mmavar-out}
mkdir -p "$out"
dir=/tmp/variants_bin
work=/tmp/variants_work_$kernel  # per-step logs and JSON; what matters is copied into $OUT's few files
rm -rf "$dir" "$work" && mkdir -p "$dir" "$work" &&
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$carry/bin.tar.xz" "$dir" ||
  { echo "cannot unpack $carry/bin.tar.xz"; exit 125; }
export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fc=$dir/flashcheck
t0=$SECONDS
nvidia-smi -L | tee "$out/device.txt"
rows=()
failed=0
row() { rows+=("$(printf '%-50s %s' "$1" "$2")"); }
: >"$out/tests.log"
: >"$out/checks.log"
: >"$out/campaigns.log"

# ---- 2 (started first, in the background: the CPU oracle is the work) -----------------------------
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
jobs_max=${JOBS:-10}
wait_slot() { while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do sleep 1; done; }
cases=${CASES:-300}
tmo=${CAMPAIGN_TIMEOUT:-300}
campaign() {  # campaign NAME ARGS...: run in the background, JSON and log under $work
  local name=$1
  shift
  wait_slot
  (timeout "$tmo" "$fc" run --kernel "$kernel" "$@" --json "$work/$name.json" >"$work/$name.log" 2>&1
   echo $? >"$work/$name.rc") &
}
for s in ${SEEDS:-11 12 13}; do
  campaign "cpu_oracle_s$s" --variants all --cases "$cases" --seed "$s" --max-seq 1100 --max-work 1e8
done
for s in ${GPU_SEEDS:-21 22}; do
  campaign "gpu_oracle_s$s" --variants all --oracle gpu --cases "$cases" --seed "$s" --max-seq 2048 --max-work 3e8
done
campaign "require_window_s31" --require window --cases 200 --seed 31 --max-seq 1100 --max-work 1e8
campaign "require_varlen_s32" --require varlen --cases 200 --seed 32 --max-seq 1100 --max-work 1e8
campaign "plain_only_s33" --variants none --cases 200 --seed 33 --max-seq 1100 --max-work 1e8
campaign "load_s34" --variants all --load --cases "${LOAD_CASES:-10}" --seed 34
if [ -f "$dir/flashcheck_perturbed.so" ]; then
  wait_slot
  (FLASHCHECK_PERTURB_SEED=35 timeout "$tmo" "$fc" run --plugin "$dir/flashcheck_perturbed.so" --kernel "$kernel".perturbed \
     --variants all --cases 200 --seed 35 --max-seq 1100 --json "$work/perturbed_s35.json" >"$work/perturbed_s35.log" 2>&1
   echo $? >"$work/perturbed_s35.rc") &
fi

# ---- 1. tests (in the foreground, beside the campaigns) ------------------------------------------
test_step() {  # test_step NAME CMD...
  local name=$1 s=$SECONDS
  shift
  "$@" >"$work/$name.log" 2>&1
  local rc=$?
  [ "$rc" -eq 0 ] || failed=$((failed + 1))
  row "$name rc=$rc $((SECONDS - s))s" "$(grep -E '^\[  (PASSED|FAILED|SKIPPED) *\] [0-9]+ tests?' "$work/$name.log" | tr -s ' ' | tr '\n' ' ')"
  { echo "==== $name rc=$rc"; grep -E "^\[  FAILED  \]|Failure|Expected|Which is|error|window-edge cases|vs replica|compared" "$work/$name.log" | head -60; } >>"$out/tests.log"
}
test_step kernel_variants_test "$dir/kernel_variants_test"
test_step gpu_variants_test "$dir/gpu_variants_test" --gtest_filter='*SharedMemory*:*AgreeWithTheReplica*:*AreDeterministic*'
test_step launched_tile_test "$dir/launched_tile_test"
test_step capabilities_snapshot_test env FLASHCHECK_CAPABILITIES_FILE="$dir/capabilities.json" "$dir/capabilities_snapshot_test"

# ---- 3. edge shapes, one problem each (exit 0 expected) ------------------------------------------
edge_ok=0
edge_n=0
while IFS= read -r prob; do
  [ -n "$prob" ] || continue
  edge_n=$((edge_n + 1))
  for dt in bf16 f16; do
    "$fc" run --kernel "$kernel" --problem "$prob dtype=$dt" --dist normal --input-seed 7 >"$work/edge.log" 2>&1
    rc=$?
    if [ "$rc" -eq 0 ]; then edge_ok=$((edge_ok + 1)); else
      failed=$((failed + 1))
      { echo "==== edge rc=$rc: $prob dtype=$dt"; tail -n 25 "$work/edge.log"; } >>"$out/checks.log"
    fi
  done
done <<'EOF'
b=4 hq=4 hkv=2 sq=0,129,0,128 skv=0,0,300,128 d=128 causal=bottom_right layout=thd window=64,0
b=3 hq=2 hkv=1 sq=0,1,0 skv=5,0,0 d=64 causal=none layout=thd softcap=5 sinks=1
b=5 hq=2 hkv=2 sq=128,0,257,64,1 skv=128,64,0,640,1 d=256 causal=none layout=thd used=64,0,0,639,1 alibi=symmetric
b=1 h=4 sq=512 skv=512 d=128 causal=none window=64,63
b=1 h=4 sq=512 skv=512 d=128 causal=bottom_right window=128,0
b=1 h=4 sq=512 skv=512 d=128 causal=bottom_right window=127,0
b=1 h=4 sq=512 skv=512 d=128 causal=bottom_right window=129,0
b=1 h=4 sq=384 skv=1024 d=64 causal=none window=128,127
b=1 h=4 sq=384 skv=1024 d=64 causal=top_left window=255,0 softcap=20
b=1 h=4 sq=300 skv=1000 d=256 causal=none window=64,64 alibi=symmetric slopes=batch
b=2 hq=8 hkv=2 sq=1000 skv=64 d=128 causal=bottom_right window=32,0 sinks=1
b=2 hq=4 hkv=1 sq=640 skv=200 d=64 causal=top_left window=0,0 layout=bshd
EOF
row "edge shapes ($edge_n problems x 2 dtypes)" "$edge_ok passed of $((2 * edge_n))"

# ---- 4. sanitizers and determinism ---------------------------------------------------------------
san_ok=0
san_n=0
sanitize() {  # sanitize TOOL PROBLEM
  san_n=$((san_n + 1))
  compute-sanitizer --tool "$1" --error-exitcode 3 "$fc" run --kernel "$kernel" --problem "$2" --dist normal \
    --input-seed 5 --no-isolation >"$work/san.log" 2>&1
  local rc=$?
  if [ "$rc" -eq 0 ]; then san_ok=$((san_ok + 1)); else
    failed=$((failed + 1))
    { echo "==== $1 rc=$rc: $2"; grep -E "=========|Invalid|Race|error|FAIL" "$work/san.log" | head -20; } >>"$out/checks.log"
  fi
}
if command -v compute-sanitizer >/dev/null; then
  # >= 3 KV tiles per visited range (a pipeline race needs a ring that wraps), tails in both dimensions.
  sanitize memcheck "b=1 hq=2 hkv=1 sq=200 skv=700 d=128 causal=bottom_right window=300,0 softcap=10 dtype=bf16"
  sanitize memcheck "b=3 hq=2 hkv=1 sq=70,0,300 skv=500,20,333 d=64 causal=none layout=thd window=150,40 alibi=symmetric sinks=1 dtype=f16"
  sanitize memcheck "b=2 hq=2 hkv=2 sq=150 skv=500 d=256 causal=top_left layout=bshd used=300,500 dtype=bf16"
  sanitize memcheck "b=2 hq=4 hkv=2 sq=333 skv=600 d=64 causal=none softcap=30 alibi=symmetric slopes=batch dtype=bf16"
  sanitize memcheck "b=1 hq=2 hkv=1 sq=600 skv=90 d=128 causal=bottom_right window=20,0 sinks=1 layout=thd dtype=f16"
  sanitize memcheck "b=1 hq=2 hkv=1 sq=256 skv=256 d=128 causal=none window=64,63 dtype=bf16"
  sanitize racecheck "b=1 hq=2 hkv=1 sq=200 skv=700 d=128 causal=bottom_right window=300,0 dtype=bf16"
  sanitize racecheck "b=3 hq=2 hkv=1 sq=70,0,300 skv=500,20,333 d=64 causal=none layout=thd sinks=1 dtype=f16"
  row "compute-sanitizer (memcheck x6, racecheck x2)" "$san_ok clean of $san_n"
else
  row "compute-sanitizer" "not found"
fi
"$fc" determinism --kernel "$kernel" --runs 30 \
  --problem "b=4 hq=8 hkv=2 sq=700,0,1000,129 skv=900,50,1000,700 d=128 causal=bottom_right layout=thd window=256,0 softcap=30 alibi=symmetric sinks=1 dtype=bf16" \
  >"$work/determinism.log" 2>&1
rc=$?
[ "$rc" -eq 0 ] || failed=$((failed + 1))
row "determinism (30 runs, every variant at once) rc=$rc" "$(tail -n 1 "$work/determinism.log")"
tail -n 5 "$work/determinism.log" >>"$out/checks.log"

# ---- 2. the campaigns' verdicts ------------------------------------------------------------------
wait
summarise() {  # a campaign's JSON: cases, failures by criterion
  python3 "$(dirname "$0")/campaign_summary.py" "$1"
}
for f in "$work"/*.rc; do
  [ -f "$f" ] || continue
  b=$(basename "$f" .rc)
  rc=$(cat "$f")
  [ "$rc" -eq 0 ] || failed=$((failed + 1))
  row "campaign $b rc=$rc" "$(summarise "$work/$b.json")"
  { echo "==== $b rc=$rc"; grep -E "^reproduce:|^flaky|failed|worst|skipped" "$work/$b.log" | head -12; } >>"$out/campaigns.log"
done

# ---- 5. alone on the GPU: benchmark and spills ---------------------------------------------------
if [ -z "${NO_BENCH:-}" ]; then
  # Packed batch: 16 sequences of 128-4096 queries (fixed draw), and the equal-length batch of the same total.
  read -r lens total <<<"$(python3 -c '
import random
r = random.Random(22)
l = [r.randint(128, 4096) for _ in range(16)]
print(",".join(map(str, l)), sum(l))')"
  eq=$(( (total + 8) / 16 ))
  base="d=128 dtype=bf16"
  shapes=("b=1 h=16 s=4096 $base causal=bottom_right"
          "b=1 h=16 s=4096 $base causal=bottom_right layout=bshd"
          "b=1 h=16 s=4096 $base causal=bottom_right window=1024,0"
          "b=1 h=16 s=4096 $base causal=bottom_right softcap=30"
          "b=1 h=16 s=4096 $base causal=bottom_right alibi=symmetric"
          "b=1 h=16 s=4096 $base causal=none"
          "b=1 h=16 s=16384 $base causal=bottom_right"
          "b=1 h=16 s=16384 $base causal=bottom_right window=1024,0"
          "b=16 h=16 sq=$lens skv=$lens $base causal=bottom_right layout=thd"
          "b=16 h=16 s=$eq $base causal=bottom_right")
  args=()
  for s in "${shapes[@]}"; do args+=(--shape "$s"); done
  "$fc" bench --kernel "$kernel" --warmup 10 --iters 50 "${args[@]}" >"$out/bench.log" 2>&1
  rc=$?
  [ "$rc" -eq 0 ] || failed=$((failed + 1))
  cat "$out/bench.log"
  python3 - "$out/bench.log" "$kernel" >>"$out/bench.log" <<'PY'
import re, sys
rows = []
for line in open(sys.argv[1]):
    m = re.match("^" + re.escape(sys.argv[2]) + r"\s+(.*?)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s*$", line)
    if m: rows.append((m.group(1), float(m.group(2)), float(m.group(4))))
names = ["causal", "causal bshd", "window 1024", "softcap 30", "alibi", "dense", "causal 16K", "window 16K", "varlen", "equal batch"]
if len(rows) != len(names):
    print("bench: %d rows parsed, expected %d" % (len(rows), len(names))); sys.exit()
t = {n: (ms, tf) for n, (_, ms, tf) in zip(names, rows)}
def ratio(a, b, i): return t[a][i] / t[b][i]
print("== ratios (median ms; TFLOPS on visible work)")
print("window/causal TFLOPS 4K %.3f (goal >= 0.9), 16K %.3f" % (ratio("window 1024", "causal", 1), ratio("window 16K", "causal 16K", 1)))
print("softcap 30 time / causal %.3f (goal <= 1.15)" % ratio("softcap 30", "causal", 0))
print("alibi time / causal %.3f (goal <= 1.10)" % ratio("alibi", "causal", 0))
print("strided path (bshd, no modifier) time / plain %.3f" % ratio("causal bshd", "causal", 0))
print("varlen / equal-length TFLOPS %.3f (goal >= 0.9)" % ratio("varlen", "equal batch", 1))
PY
  row "bench rc=$rc" "$(grep -E '^(window|softcap|alibi|strided|varlen)' "$out/bench.log" | tr '\n' ';' | cut -c1-300)"
fi
if command -v cuobjdump >/dev/null; then
  bash tools/device/sass_stats.sh "$fc" sm_90a "${kernel}_kernel" >"$out/sass.txt" 2>&1 ||
    bash tools/device/sass_stats.sh "$fc" sm_90 "${kernel}_kernel" >"$out/sass.txt" 2>&1
  row "sass: $kernel kernels with local loads/stores in the main loop" \
    "$(awk 'NR > 1 && $NF > 0 {n++} END {print n + 0}' "$out/sass.txt") of $(($(wc -l <"$out/sass.txt") - 1))"
fi

echo
echo "== variants_device.sh ($kernel): $((SECONDS - t0)) s"
printf '%s\n' "${rows[@]}" | tee "$out/summary.txt"
if [ "$failed" -gt 0 ]; then
  echo "$failed step(s) failed (details: $out/tests.log, campaigns.log, checks.log)"
  exit 1
fi
