#!/usr/bin/env bash
# GPU validation in one call, building nothing: the GPU test suite and the declaration checks, a
# campaign per device variant, compute-sanitizer memcheck and racecheck on small problems, load and
# big-tensor campaigns, the 100-run determinism check, the perturbed build's campaigns (when built
# with -DFLASHCHECK_PERTURB=ON) and the benchmark. Logs go to $OUT (or ./device-out); the last lines are a summary table.
#
#   tools/device/device_check.sh BUILD_DIR [CASES] [SEED]
set -u
build=${1:-.devbuild}
cases=${2:-1000}
seed=${3:-$RANDOM}
out=${OUT:-device-out}
mkdir -p "$out"
[ -d "$build/lib" ] && export LD_LIBRARY_PATH="$PWD/$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fc="$build/flashcheck"
summary=()
failed_steps=0
note() { summary+=("$1"); echo "== $1"; }
step() {  # step NAME LOGFILE CMD...
  local name=$1 log=$2; shift 2
  local t0=$SECONDS
  "$@" >"$out/$log" 2>&1
  local rc=$?
  [ "$rc" -eq 0 ] || failed_steps=$((failed_steps + 1))
  note "$(printf '%-44s rc=%-3s %4ss  (%s)' "$name" "$rc" "$((SECONDS - t0))" "$log")"
  tail -n 15 "$out/$log"
}

nvidia-smi -L | tee "$out/device.txt"
# Campaigns spread their cases over every GPU present (`run --gpus all`, issue 26: the same seed
# gives the same cases and verdicts as one GPU); sanitizers, determinism and the benchmark stay on
# GPU 0. GPUS=1 keeps everything on one GPU.
ngpu=$(grep -c '^GPU' "$out/device.txt")
gpus=()
[ "${GPUS:-all}" != 1 ] && [ "$ngpu" -ge 2 ] && gpus=(--gpus "${GPUS:-all}")
# Every device kernel the build registered and this GPU can run, from the registry itself: a new
# kernel joins every step below without editing this script.
variants=${VARIANTS:-$("$fc" list --json - | python3 -c '
import json, sys
for k in json.load(sys.stdin):
    if k["memory"] == "device" and k["available"]:
        print(k["name"])
')}
[ -n "$variants" ] || { echo "no available device kernel in $fc list"; exit 125; }
# The dtypes a kernel declares (the sanitizer problems use each; SAN_DTYPES=first keeps one).
kernel_dtypes() {
  "$fc" list --json - | python3 -c '
import json, sys
for k in json.load(sys.stdin):
    if k["name"] == sys.argv[1]:
        print(" ".join(k["dtypes"][:1] if sys.argv[2] == "first" else k["dtypes"]))
' "$1" "${SAN_DTYPES:-first}"
}
echo "device variants: $variants; campaign seed $seed; ${#gpus[@]} campaign GPU flags: ${gpus[*]:-(one GPU)}"

step "gpu test suite" gpu_tests.log "$build/runner/gpu_variants_test"
# Declarations (issue #21 item 9): every kernel's Capabilities against gpu/capabilities.json, and the
# tile each GPU kernel launches against the one it declares.
for t in capabilities_snapshot_test launched_tile_test; do
  [ -x "$build/runner/$t" ] && step "$t" "$t.log" env FLASHCHECK_CAPABILITIES_FILE=gpu/capabilities.json "$build/runner/$t"
done
for v in $variants; do
  n_var="CASES_$v"; n=${!n_var:-$cases}  # e.g. CASES_mma_f16=4000: ~2000 per dtype it declares
  step "campaign $v ($n cases)" "campaign_$v.log" "$fc" run --kernel "$v" --cases "$n" --seed "$seed" \
    --max-seq 1100 --max-work "${MAX_WORK:-1e8}" "${gpus[@]}"
  # Sanitizers on fixed problems with >= 3 KV tiles per block (a pipeline race needs a ring that
  # wraps), tails in both dimensions, GQA, every causal mode; a kernel skips what it cannot run.
  for tool in memcheck racecheck synccheck; do
    for prob in "b=1 hq=2 hkv=1 sq=200 skv=700 dqk=128 dv=128 causal=bottom_right" \
                "b=1 hq=2 hkv=2 sq=333 skv=600 dqk=64 dv=64 causal=top_left" \
                "b=1 hq=1 hkv=1 sq=150 skv=500 dqk=256 dv=256 causal=none"; do
      for dt in $(kernel_dtypes "$v"); do
        step "$tool $v ($prob dtype=$dt)" "${tool}_$v.log" compute-sanitizer --tool "$tool" --error-exitcode 3 \
          "$fc" run --kernel "$v" --problem "$prob dtype=$dt" --dist normal --input-seed "$seed" ${SAN_FLAGS:---no-isolation}
      done
    done
  done
  # Production load: hundreds of CTAs, L2 overflowing, where missing barriers and shallow waits bite
  # (issue #14); rows sampled with every q-tile's edges, the GPU oracle when one is usable.
  step "load campaign $v (${LOAD_CASES:-20} cases)" "load_$v.log" "$fc" run --kernel "$v" --load \
    --cases "${LOAD_CASES:-20}" --seed "$seed" "${gpus[@]}"
  # Tensors past 2^31 elements, where 32-bit index arithmetic wraps (issue #11): BIG_CASES=0 skips
  # it (each case stages tens of GB; about a minute per case on an H100 host).
  if [ "${BIG_CASES:-2}" -gt 0 ]; then
    step "big-tensor campaign $v (${BIG_CASES:-2} cases)" "big_$v.log" "$fc" run --kernel "$v" --big \
      --cases "${BIG_CASES:-2}" --seed "$seed" --no-shrink "${gpus[@]}"
  fi
  step "determinism $v (100 runs)" "determinism_$v.log" "$fc" determinism --kernel "$v" --runs 100 \
    --problem "${DET_PROBLEM:-b=2 h=8 sq=1000 skv=1100 d=128 causal=bottom_right}"
done
# The perturbed build (configured with -DFLASHCHECK_PERTURB=ON: build/flashcheck_perturbed.so, race
# instrumentation, gpu/common/perturb.h): the same kernels must pass a campaign and a load campaign
# under several seeds (zero false alarms), where an async-proxy race (a slot released before its
# wgmma completed, a dropped wgmma wait) fails (tools/mutate/DETECTION.md).
perturbed="$build/flashcheck_perturbed.so"
if [ -f "$perturbed" ]; then
  pvariants=$("$fc" list --plugin "$perturbed" --json - | python3 -c '
import json, sys
for k in json.load(sys.stdin):
    if k["available"]:
        print(k["name"])
')
  for v in $pvariants; do
    for s in ${PERTURB_SEEDS:-1 2 3}; do
      step "perturbed campaign $v (seed $s)" "perturbed_$v.log" env FLASHCHECK_PERTURB_SEED="$s" "$fc" run \
        --plugin "$perturbed" --kernel "$v" --cases "${PERTURB_CASES:-300}" --seed "$s" --max-seq 1100 "${gpus[@]}"
      step "perturbed load campaign $v (seed $s)" "perturbed_load_$v.log" env FLASHCHECK_PERTURB_SEED="$s" "$fc" run \
        --plugin "$perturbed" --kernel "$v" --load --cases "${PERTURB_LOAD_CASES:-6}" --seed "$s" "${gpus[@]}"
    done
  done
else
  note "perturbed build: not built ($perturbed; configure with -DFLASHCHECK_PERTURB=ON)"
fi
if [ -n "${BENCH_SHAPES:-}" ]; then
  args=()
  while IFS= read -r s; do [ -n "$s" ] && args+=(--shape "$s"); done <<<"$BENCH_SHAPES"
  step "bench" bench.log "$fc" bench "${args[@]}"
  cat "$out/bench.log"
fi
if [ -n "${SDPA_SHAPES:-}" ] && python3 -c 'import torch' 2>/dev/null; then
  # shellcheck disable=SC2086
  step "PyTorch SDPA comparison (mma_f16, bf16)" sdpa.log python3 tools/device/compare_sdpa.py "$fc" mma_f16 bf16 $SDPA_SHAPES
  cat "$out/sdpa.log"
fi
echo
echo "================ summary (seed $seed) ================"
printf '%s\n' "${summary[@]}"
# The script fails when any step failed: a summary of failures must never exit 0.
if [ "$failed_steps" -gt 0 ]; then
  echo "$failed_steps step(s) failed"
  exit 1
fi
