#!/usr/bin/env bash
# One GPU call, building nothing, for "no false alarm on real kernels" (issue #21 item 1) and the GPU
# oracle on every problem-model-2 variant (issue #20):
#   1. the GPU oracle's tests (every variant against the CPU oracle within the derived bound) and the
#      GPU kernels' own tests;
#   2. zero false alarms: campaigns of every device kernel over many seeds (every input distribution
#      the generators draw: constant rows, Sq = 1, GQA duplicates among them), seeds 15 and 16 of
#      wgmma_f16 included (they failed rounding_bias before the criteria counted distinct pairs);
#   3. the replica over every variant judged against the GPU oracle (`--oracle gpu`): a campaign
#      where the truth of every variant comes from the GPU;
#   4. torch SDPA's flash, cuDNN and efficient backends through flashcheck.fuzz, several seeds.
# Runs in parallel where the work is on the CPU (the oracle). Logs under $OUT; a table last.
#
#   tools/device/trust_device.sh CARRY_DIR    (bin.tar.xz from tools/device/trust_prepare.sh)
set -u
carry=${1:-build-trust}
out=${OUT:-trust-out}
mkdir -p "$out"
dir=/tmp/trust_bin
rm -rf "$dir" && mkdir -p "$dir" &&
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$carry/bin.tar.xz" "$dir" ||
  { echo "cannot unpack $carry/bin.tar.xz"; exit 125; }
export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fc=$dir/flashcheck
t0=$SECONDS
nvidia-smi -L | tee "$out/device.txt"
rows=()
row() { rows+=("$(printf '%-58s %s' "$1" "$2")"); }

# ---- 1. tests (GPU oracle first: the campaigns below lean on it)
for t in gpu_oracle_test gpu_variants_test launched_tile_test device_copy_test; do
  [ -x "$dir/$t" ] || continue
  s=$SECONDS
  OMP_NUM_THREADS=8 "$dir/$t" >"$out/$t.log" 2>&1
  rc=$?
  row "$t" "rc=$rc $(grep -E '^\[  (PASSED|FAILED) ' "$out/$t.log" | tr '\n' ' ') $((SECONDS - s))s"
  grep -E "^\[  FAILED  \]|Failure" "$out/$t.log" | head -8
done

# ---- the CPU oracle's cost follows the visible work (issue #20): a (1024, 0) window against dense
# causal at (1,16,32768,128), alone on the host's cores before anything else runs there
if [ -x "$dir/oracle_bench" ]; then
  s=$SECONDS
  OMP_NUM_THREADS=$(nproc) "$dir/oracle_bench" --shapes="1,16,32768,128,causal;1,16,32768,128,w1024:0" \
    --benchmark_min_time=0.1 >"$out/oracle_bench.log" 2>&1
  row "oracle_bench window vs causal rc=$? $((SECONDS - s))s" "$(grep -E 'oracle|GFLOPS' "$out/oracle_bench.log" | tr -s ' ' | tr '\n' ';' | cut -c1-400)"
  grep -E "oracle" "$out/oracle_bench.log"
fi

# ---- 2-4. campaigns and SDPA fuzz, a few at a time (16 cores; the CPU oracle is the work)
export OMP_NUM_THREADS=2
jobs_max=${TRUST_JOBS:-7}
wait_slot() { while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do sleep 1; done; }
kernels=$("$fc" list --json - 2>/dev/null | python3 -c '
import json, sys
for k in json.load(sys.stdin):
    if k["memory"] == "device" and k["available"]:
        print(k["name"])
')
cases=${TRUST_CASES:-300}
for k in $kernels; do
  # Seeds 15 and 16 of wgmma_f16 failed rounding_bias before (issue #21); the others get fewer.
  case $k in
    wgmma_f16) seeds=${TRUST_SEEDS:-"11 12 13 14 15 16"} ;;
    mma_f16) seeds=${TRUST_SEEDS:-"11 12 13"} ;;
    *) seeds=${TRUST_SEEDS:-"11"} ;;
  esac
  for s in $seeds; do
    wait_slot
    (timeout 420 "$fc" run --kernel "$k" --cases "$cases" --seed "$s" --json "$out/camp_${k}_$s.json" \
      >"$out/camp_${k}_$s.log" 2>&1; echo $? >"$out/camp_${k}_$s.rc") &
  done
done
for s in 1 2; do
  wait_slot
  (timeout 420 "$fc" run --kernel replica --oracle gpu --variants all --cases 200 --seed "$s" \
     --json "$out/replica_gpu_$s.json" >"$out/replica_gpu_$s.log" 2>&1; echo $? >"$out/replica_gpu_$s.rc") &
done
if [ -f "$dir/libflashcheck.so" ] && [ -d "$dir/python" ]; then
  for s in 7 8; do
    wait_slot
    sdpa=$dir/fuzz_sdpa.py  # the script packed with the library it drives, else the tree's
    [ -f "$sdpa" ] || sdpa=tools/device/fuzz_sdpa.py
    (PYTHONPATH=$dir/python FLASHCHECK_LIB=$dir/libflashcheck.so timeout 400 python3 "$sdpa" \
       --budget 200 --seed "$s" --out "$out/sdpa_$s" >"$out/sdpa_$s.log" 2>&1; echo $? >"$out/sdpa_$s.rc") &
  done
fi
wait

summarise() {  # a campaign's JSON: cases, failures by criterion
  python3 "$(dirname "$0")/campaign_summary.py" "$1" --names
}
for f in "$out"/camp_*.json "$out"/replica_gpu_*.json; do
  [ -f "$f" ] || continue
  b=$(basename "$f" .json)
  row "$b rc=$(cat "$out/$b.rc" 2>/dev/null)" "$(summarise "$f")"
  grep -m2 "^reproduce:\|^flaky" "$out/$b.log"
done
for s in 7 8; do
  [ -f "$out/sdpa_$s.rc" ] || continue
  row "fuzz_sdpa seed $s rc=$(cat "$out/sdpa_$s.rc")" "$(grep -cE ' FAIL|failed' "$out/sdpa_$s.log") failing lines"
  tail -n 14 "$out/sdpa_$s.log"
done
echo "== trust_device.sh: $((SECONDS - t0)) s"
printf '%s\n' "${rows[@]}" | tee "$out/summary.txt"
