#!/usr/bin/env bash
# wgmma_f16 on the device in one call, building nothing: SASS facts, a smoke test per schedule
# (every command under `timeout`, since a pipeline bug shows up as a hang), campaigns, the GPU test
# suite, compute-sanitizer, determinism and the SDPA comparison. Steps after the smoke tests are
# chosen by STEPS. Logs go to $OUT; the last lines are a summary.
#
#   gpu/wgmma_f16/device_run.sh DIR   (DIR holds flashcheck, example_cpu_plugin.so, gpu_variants_test)
#   STEPS="sass smoke campaign altcampaign tests determinism sdpa dv sanitize"  CASES=400  SEED=...
#   BUILDS="new=DIR/flashcheck old=DIR2/flashcheck"  SDPA_PLAN=$'1,16,4096,128,causal new,old\n...'
# Schedules: SCHEDULES lists FLASHCHECK_WGMMA_SCHEDULE values for builds that read it (the first
# measurement build did; the final one takes its schedule from tile_size.h and ignores it).
set -u
dir=${1:-.devcarry/wgmma}
out=${OUT:-device-out}
mkdir -p "$out"
fc="$dir/flashcheck"
steps=${STEPS:-"sass smoke campaign tests sanitize determinism sdpa"}
cases=${CASES:-400}
seed=${SEED:-$RANDOM}
scheds=${SCHEDULES:-"default"}
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
# Builds to time side by side (compare_sdpa's LABEL=PATH): BUILDS="label=path/to/flashcheck ...".
builds_spec=${BUILDS:-"wgmma=$fc"}
labels=()
for b in $builds_spec; do
  label=${b%%=*}; path=${b#*=}
  case $path in /*) ;; *) path=$PWD/$path ;; esac
  ln -sf "$path" "/tmp/fc_$label"
  labels+=("$label")
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
if has campaign; then  # the first schedule gets CASES, the others a quarter
  n=$cases
  for s in $scheds; do
    step "campaign $s ($n cases)" "campaign_$s.log" "${CAMPAIGN_TIMEOUT:-100}" env FLASHCHECK_WGMMA_SCHEDULE=$s \
      "$fc" run --kernel wgmma_f16 --cases "$n" --seed "$seed" --max-seq 1100 --max-work 1e8
    n=$((cases / 4))
  done
fi
if has altcampaign; then  # bf16 campaigns of the other builds
  for l in "${labels[@]}"; do
    [ "$(readlink -f "/tmp/fc_$l")" = "$(readlink -f "$fc")" ] && continue
    step "campaign $l (bf16, ${ALT_CASES:-120} cases)" "campaign_alt.log" 60 "/tmp/fc_$l" run --kernel wgmma_f16 \
      --dtype bf16 --cases "${ALT_CASES:-120}" --seed "$seed" --max-seq 1100 --max-work 1e8
  done
fi
# Sanitizers and timings only for a kernel that computed the right thing.
if [ "$failed" != 0 ] && [ -z "${FORCE:-}" ]; then
  note "correctness failures: skipping sanitizers, determinism and timings"
  steps=${steps//sanitize/}; steps=${steps//determinism/}; steps=${steps//sdpa/}
fi
if has determinism; then
  step "determinism (100 runs)" determinism.log 60 "$fc" determinism --kernel wgmma_f16 --runs 100 \
    --problem "b=2 h=8 sq=1000 skv=1100 d=128 causal=bottom_right"
fi
if has sdpa; then
  # SDPA_PLAN: one "B,H,S,D,causal label,label,..." per line; one compare_sdpa.py call per shape,
  # so that a call cut short by its timeout still leaves the shapes before it.
  sdpa_script=gpu/scripts/compare_sdpa.py
  [ -f "$dir/compare_sdpa.py" ] && sdpa_script="$dir/compare_sdpa.py"
  while read -r shape blabels; do
    [ -z "$shape" ] && continue
    builds=""
    for l in ${blabels//,/ }; do builds="$builds${builds:+,}$l=/tmp/fc_$l"; done
    step "SDPA $shape ($blabels)" sdpa.log "${SDPA_TIMEOUT:-60}" python3 "$sdpa_script" "$builds" wgmma_f16 bf16 "$shape"
  done <<<"${SDPA_PLAN:-}"
  grep -B1 "^(" "$out/sdpa.log" | grep -v "^--"
fi
if has dv; then  # Dqk != Dv shapes, which compare_sdpa.py cannot express
  builds=""
  for l in "${labels[@]}"; do builds="$builds${builds:+,}$l=/tmp/fc_$l"; done
  step "Dqk=192/Dv=128 vs cuDNN" sdpa_dv.log 90 python3 "$dir/sdpa_dv.py" "$builds" 4 16 4096 192 128
  cat "$out/sdpa_dv.log"
fi
if has sanitize; then
  for tool in memcheck racecheck synccheck; do
    for prob in "b=1 hq=2 hkv=1 sq=200 skv=450 dqk=128 dv=128 causal=bottom_right dtype=bf16" \
                "b=1 hq=2 hkv=2 sq=250 skv=400 dqk=128 dv=128 causal=none dtype=f16" \
                "b=1 hq=3 hkv=1 sq=300 skv=420 dqk=64 dv=64 causal=top_left dtype=bf16" \
                "b=1 hq=1 hkv=1 sq=130 skv=300 dqk=256 dv=256 causal=top_left dtype=f16" \
                "b=1 hq=1 hkv=1 sq=70 skv=390 dqk=192 dv=128 causal=none dtype=bf16"; do
      step "$tool: $prob" "$tool.log" 60 compute-sanitizer --tool $tool --error-exitcode 3 \
        "$fc" run --kernel wgmma_f16 --problem "$prob" --dist normal --input-seed 3
    done
  done
fi
if has tests; then
  step "gpu_variants_test (wgmma_f16 among all)" gpu_tests.log "${TESTS_TIMEOUT:-120}" "$dir/gpu_variants_test"
fi
echo
echo "================ summary (seed $seed) ================"
printf '%s\n' "${summary[@]}"
