#!/usr/bin/env bash
# wgmma_f16 on the device in one call, building nothing: SASS facts, a smoke test per schedule
# (every command under `timeout`, since a pipeline bug shows up as a hang), campaigns, the GPU test
# suite, compute-sanitizer, determinism and the SDPA comparison. Steps after the smoke tests are
# chosen by STEPS. Logs go to $OUT; the last lines are a summary.
#
#   gpu/wgmma_f16/device_run.sh DIR   (DIR holds flashcheck, example_cpu_plugin.so, gpu_variants_test)
#   STEPS="sass smoke campaign tests sanitize determinism sdpa"  CASES=400  SEED=...
set -u
dir=${1:-.devcarry/wgmma}
out=${OUT:-device-out}
mkdir -p "$out"
fc="$dir/flashcheck"
steps=${STEPS:-"sass smoke campaign tests sanitize determinism sdpa"}
cases=${CASES:-400}
seed=${SEED:-$RANDOM}
scheds=${SCHEDULES:-"serial overlap pingpong"}
summary=()
failed=0
note() { summary+=("$1"); echo "== $1"; }
step() {  # step NAME LOGFILE TIMEOUT CMD...
  local name=$1 log=$2 to=$3; shift 3
  local t0=$SECONDS
  timeout "$to" "$@" >>"$out/$log" 2>&1
  local rc=$?
  [ "$rc" != 0 ] && failed=$((failed + 1))
  note "$(printf '%-50s rc=%-3s %4ss' "$name" "$rc" "$((SECONDS - t0))")"
  tail -n 6 "$out/$log"
}
has() { [[ " $steps " == *" $1 "* ]]; }
# Wrappers that run flashcheck with one schedule, for compare_sdpa's LABEL=PATH builds.
for s in $scheds; do
  printf '#!/bin/sh\nFLASHCHECK_WGMMA_SCHEDULE=%s exec %s "$@"\n' "$s" "$PWD/$fc" >"/tmp/fc_$s"
  chmod +x "/tmp/fc_$s"
done

nvidia-smi -L | tee "$out/device.txt"
echo "seed $seed"
if has sass; then
  cuobjdump -sass "$fc" >/tmp/all.sass 2>&1
  awk '/Function :/ { name = $3; keep = (name ~ /wgmma_f16_kernel/); next }
       keep && /^ +\/\*[0-9a-f]+\*\// { line = $0; sub(/^ +\/\*[0-9a-f]+\*\/ +/, "", line); sub(/ ;.*/, "", line);
         sub(/^@!?U?P[0-9T] +/, "", line); split(line, w, " "); op = w[1]; n[name]++;
         if (op ~ /^HGMMA/) hg[name]++; if (op ~ /^LDL/ || op ~ /^STL/) loc[name]++; if (op ~ /^MUFU/) mu[name]++;
         if (op ~ /^WARPGROUP/) wg[name]++; if (op ~ /^BAR/) bar[name]++ }
       END { printf "%-90s %6s %6s %6s %6s %6s\n", "kernel", "instr", "HGMMA", "MUFU", "LDL/STL", "WGsync";
             for (k in n) printf "%-90s %6d %6d %6d %6d %6d\n", k, n[k], hg[k], mu[k], loc[k], wg[k] }' /tmp/all.sass \
    | sort | tee "$out/sass.txt"
fi
if has smoke; then
  for s in $scheds; do
    for prob in "b=1 hq=2 hkv=1 sq=300 skv=300 dqk=128 dv=128 causal=none dtype=bf16" \
                "b=1 hq=2 hkv=2 sq=257 skv=129 dqk=64 dv=64 causal=top_left dtype=f16" \
                "b=2 hq=4 hkv=2 sq=97 skv=1000 dqk=256 dv=256 causal=bottom_right dtype=bf16" \
                "b=1 hq=2 hkv=1 sq=1000 skv=31 dqk=192 dv=128 causal=bottom_right dtype=f16"; do
      step "smoke $s: $prob" "smoke_$s.log" 15 env FLASHCHECK_WGMMA_SCHEDULE=$s "$fc" run --kernel wgmma_f16 \
        --problem "$prob" --dist normal --input-seed 7
    done
  done
fi
if has campaign; then
  for s in $scheds; do
    n=$cases; [ "$s" != pingpong ] && n=$((cases / 4))
    step "campaign $s ($n cases)" "campaign_$s.log" "${CAMPAIGN_TIMEOUT:-100}" env FLASHCHECK_WGMMA_SCHEDULE=$s \
      "$fc" run --kernel wgmma_f16 --cases "$n" --seed "$seed" --max-seq 1100 --max-work 1e8
  done
fi
# Sanitizers and timings only for a kernel that computed the right thing.
if [ "$failed" != 0 ] && [ -z "${FORCE:-}" ]; then
  note "correctness failures: skipping sanitizers, determinism and timings"
  steps=${steps//sanitize/}; steps=${steps//determinism/}; steps=${steps//sdpa/}
fi
if has tests; then
  step "gpu_variants_test (wgmma_f16 among all)" gpu_tests.log 120 "$dir/gpu_variants_test"
fi
if has determinism; then
  step "determinism (100 runs)" determinism.log 60 "$fc" determinism --kernel wgmma_f16 --runs 100 \
    --problem "b=2 h=8 sq=1000 skv=1100 d=128 causal=bottom_right"
fi
if has sdpa; then
  sdpa_script=gpu/scripts/compare_sdpa.py
  [ -f "$dir/compare_sdpa.py" ] && sdpa_script="$dir/compare_sdpa.py"
  builds=""
  for s in $scheds; do builds="$builds${builds:+,}$s=/tmp/fc_$s"; done
  # shellcheck disable=SC2086
  step "SDPA comparison (bf16)" sdpa.log 150 python3 "$sdpa_script" "$builds" wgmma_f16 bf16 \
    ${SDPA_SHAPES:-1,16,4096,128,causal 1,16,4096,128,none 4,64,8192,128,none 4,64,8192,128,causal 2,16,16384,128,causal 4,32,4096,64,none 4,16,4096,256,none}
  cat "$out/sdpa.log"
fi
if has sanitize; then
  for tool in memcheck racecheck synccheck; do
    for prob in "b=1 hq=2 hkv=1 sq=200 skv=450 dqk=128 dv=128 causal=bottom_right dtype=bf16" \
                "b=1 hq=1 hkv=1 sq=130 skv=300 dqk=256 dv=256 causal=top_left dtype=f16"; do
      step "$tool: $prob" "$tool.log" 60 compute-sanitizer --tool $tool --error-exitcode 3 \
        "$fc" run --kernel wgmma_f16 --problem "$prob" --dist normal --input-seed 3
    done
  done
fi
echo
echo "================ summary (seed $seed) ================"
printf '%s\n' "${summary[@]}"
