#!/usr/bin/env bash
# `run --gpus` on a host with two or more GPUs (issue 26), building nothing: the same campaign on one
# GPU and on two, same seed, timed; the verdicts and the kept (shrunk) failures must be equal. Then a
# production-load campaign (`run --load`) likewise, and, when torch is importable, the production-size
# `check` of two (4,64,8192,128) bf16 files: one after the other on GPU 0, then one per GPU at once.
# Logs and JSON go to $OUT (default multi-gpu-out); a compact summary ends the output. About 5 minutes
# on 2 H100s with the defaults.
#
#   tools/device/multi_gpu_device.sh FLASHCHECK_BINARY [SEED]
#   env: KERNEL (wgmma_f16)  CASES (2000)  MAX_SEQ, MAX_WORK (run's defaults)  LOAD_CASES (8, 0 skips)
#        FAIL_PLUGIN (hostile_plugins.so: also a failing campaign, FAIL_CASES of it, 300)
#        PROD (1; 0 skips the production-size check)  PROD_SHAPE (4,64,8192,128)  STEP_TIMEOUT (240 s)
set -u
fc=$(realpath "${1:?usage: multi_gpu_device.sh FLASHCHECK_BINARY [SEED]}")
seed=${2:-$RANDOM}
kernel=${KERNEL:-wgmma_f16}
out=${OUT:-multi-gpu-out}
limit=${STEP_TIMEOUT:-240}
mkdir -p "$out"
bin_dir=$(dirname "$fc")
[ -d "$bin_dir/lib" ] && export LD_LIBRARY_PATH="$bin_dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi -L | tee "$out/devices.txt"
ngpu=$(grep -c '^GPU' "$out/devices.txt")
[ "$ngpu" -ge 2 ] || { echo "multi_gpu_device.sh: needs 2 GPUs, found $ngpu"; exit 125; }
t_start=$SECONDS
summary=()
bad=0
row() { summary+=("$1"); echo "== $1"; }

# The two reports of one campaign, compared as the shard-merge test compares them (timings and the
# per-GPU section aside): prints "same" or the first difference, and the counts.
compare() {
  python3 - "$1" "$2" <<'EOF'
import json, sys
def comparable(d):
    if isinstance(d, dict):
        return {k: comparable(v) for k, v in d.items() if k not in ("timings_s", "shards", "gpus", "html_page")}
    if isinstance(d, list):
        return [comparable(v) for v in d]
    return d
def diff(a, b, path="$"):
    if type(a) is not type(b): return f"{path}: {a!r:.60} vs {b!r:.60}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b: return f"{path}.{k} only in one"
            d = diff(a[k], b[k], f"{path}.{k}")
            if d: return d
    elif isinstance(a, list):
        if len(a) != len(b): return f"{path}: {len(a)} vs {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b)):
            d = diff(x, y, f"{path}[{i}]")
            if d: return d
    elif a != b: return f"{path}: {a!r:.60} vs {b!r:.60}"
    return None
try:
    a, b = (json.load(open(p)) for p in sys.argv[1:3])
except Exception as e:
    print(f"DIFFERENT (unreadable: {e})"); sys.exit(1)
d = diff(comparable(a), comparable(b))
counts = "; ".join(f"{v['name']}: {v.get('passed')} passed, {v.get('failed')} failed, {v.get('skipped')} skipped, "
                   f"{len(v.get('failures', []))} kept" for v in b.get("variants", []))
print(("same verdicts and kept failures" if d is None else f"DIFFERENT at {d}") + f" ({counts})")
sys.exit(0 if d is None else 1)
EOF
}

# campaign NAME ARGS...: the same `run` on GPU 0 alone and on GPUs 0 and 1.
campaign() {
  local name=$1; shift
  local secs=()
  for g in 1 2; do
    local t0=$SECONDS
    timeout "$limit" "$fc" run "$@" --seed "$seed" --gpus "$g" --json "$out/${name}_${g}gpu.json" >"$out/${name}_${g}gpu.log" 2>&1
    local rc=$? s=$((SECONDS - t0))
    secs+=("$s")
    [ "$rc" -le 1 ] || bad=$((bad + 1))
    row "$(printf '%-34s gpus=%s  %4s s  rc=%s' "$name" "$g" "$s" "$rc")"
    tail -n 8 "$out/${name}_${g}gpu.log"
  done
  local same
  same=$(compare "$out/${name}_1gpu.json" "$out/${name}_2gpu.json") || bad=$((bad + 1))
  row "$(printf '%-34s 1 vs 2 GPUs: %s x faster; %s' "$name" "$(python3 -c "print(f'{${secs[0]}/max(${secs[1]},1):.2f}')")" "$same")"
}

echo "kernel $kernel, seed $seed"
extra=()
[ -n "${MAX_SEQ:-}" ] && extra+=(--max-seq "$MAX_SEQ")
[ -n "${MAX_WORK:-}" ] && extra+=(--max-work "$MAX_WORK")
campaign "campaign ${CASES:-2000} cases" --kernel "$kernel" --cases "${CASES:-2000}" "${extra[@]}"
# A campaign that fails, so that "the same shrunk failures" is shown on real failures: a plugin
# kernel wrong on some problems (hostile_wrong_some of hostile_plugins.so: a zero output whenever
# Skv is even), judged against the GPU oracle on each worker's GPU.
if [ -n "${FAIL_PLUGIN:-}" ]; then
  campaign "failing campaign ${FAIL_CASES:-300} cases" --plugin "$(realpath "$FAIL_PLUGIN")" --kernel hostile_wrong_some \
    --oracle gpu --cases "${FAIL_CASES:-300}"
fi
if [ "${LOAD_CASES:-8}" -gt 0 ]; then
  campaign "load campaign ${LOAD_CASES:-8} cases" --kernel "$kernel" --load --cases "${LOAD_CASES:-8}"
fi

# Production size: one problem is one `check`, so two files are the unit of throughput: one after
# the other on GPU 0, then one per GPU at once (sharing the cores).
if [ "${PROD:-1}" != 0 ] && python3 -c 'import torch, safetensors' 2>/dev/null; then
  shape=${PROD_SHAPE:-4,64,8192,128}
  python3 - "$out" "$shape" <<'EOF' >"$out/prod_write.log" 2>&1
import sys, torch, torch.nn.functional as F
from safetensors.torch import save_file
out, shape = sys.argv[1], [int(x) for x in sys.argv[2].split(",")]
for name, causal in (("full", False), ("causal", True)):
    torch.manual_seed(1)
    q, k, v = (torch.randn(*shape, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    save_file({"q": q.cpu(), "k": k.cpu(), "v": v.cpu(), "o": o.contiguous().cpu()}, f"{out}/prod_{name}.safetensors",
              metadata={"causal": "bottom_right" if causal else "none"})
EOF
  rows=$(echo "$shape" | cut -d, -f3)
  check() {  # check GPU FILE JSON
    CUDA_VISIBLE_DEVICES="$1" timeout "$limit" "$fc" check "$2" --max-rows "$rows" --oracle gpu --timings \
      --json "$3" >"$3.log" 2>&1
  }
  t0=$EPOCHREALTIME  # fractional seconds: two checks of a few seconds each
  check 0 "$out/prod_full.safetensors" "$out/prod_full_seq.json"; r1=$?
  check 0 "$out/prod_causal.safetensors" "$out/prod_causal_seq.json"; r2=$?
  seq_s=$(python3 -c "print(f'{$EPOCHREALTIME - $t0:.2f}')")
  t0=$EPOCHREALTIME
  check 0 "$out/prod_full.safetensors" "$out/prod_full_par.json" & p1=$!
  check 1 "$out/prod_causal.safetensors" "$out/prod_causal_par.json" & p2=$!
  wait $p1; r3=$?; wait $p2; r4=$?
  par_s=$(python3 -c "print(f'{$EPOCHREALTIME - $t0:.2f}')")
  # The same two at once, each on half the cores with sleeping (passive) OpenMP waits, as `run
  # --gpus` starts its workers: two processes of one OpenMP thread per core each oversubscribe the
  # host, and a spinning waiter then takes cycles the other check's threads need.
  half=$(( $(nproc) / 2 ))
  t0=$EPOCHREALTIME
  OMP_NUM_THREADS=$half OMP_WAIT_POLICY=passive check 0 "$out/prod_full.safetensors" "$out/prod_full_split.json" & p1=$!
  OMP_NUM_THREADS=$half OMP_WAIT_POLICY=passive check 1 "$out/prod_causal.safetensors" "$out/prod_causal_split.json" & p2=$!
  wait $p1; r5=$?; wait $p2; r6=$?
  split_s=$(python3 -c "print(f'{$EPOCHREALTIME - $t0:.2f}')")
  same_full=$(compare "$out/prod_full_seq.json" "$out/prod_full_par.json") || bad=$((bad + 1))
  same_causal=$(compare "$out/prod_causal_seq.json" "$out/prod_causal_par.json") || bad=$((bad + 1))
  same_full_split=$(compare "$out/prod_full_seq.json" "$out/prod_full_split.json") || bad=$((bad + 1))
  same_causal_split=$(compare "$out/prod_causal_seq.json" "$out/prod_causal_split.json") || bad=$((bad + 1))
  for r in $r1 $r2 $r3 $r4 $r5 $r6; do [ "$r" -le 1 ] || bad=$((bad + 1)); done
  row "$(printf 'production check 2 x (%s) bf16: on GPU 0 one after the other %s s (rc %s %s), one per GPU at once %s s (rc %s %s): %s x' \
    "$shape" "$seq_s" "$r1" "$r2" "$par_s" "$r3" "$r4" "$(python3 -c "print(f'{$seq_s/max($par_s,0.01):.2f}')")")"
  row "$(printf '  one per GPU at once, %s threads each, passive waits: %s s (rc %s %s): %s x' \
    "$half" "$split_s" "$r5" "$r6" "$(python3 -c "print(f'{$seq_s/max($split_s,0.01):.2f}')")")"
  row "  full: ${same_full%% (*}, split ${same_full_split%% (*}; causal: ${same_causal%% (*}, split ${same_causal_split%% (*}"
  for j in "$out"/prod_*_seq.json; do  # where a check's time goes (--timings): the host's share
    row "  $(basename "$j" .json): $(python3 -c "import json,sys; t=json.load(open(sys.argv[1])).get('timings_s',{}); print(' '.join(f'{k} {v:.2f}' for k,v in t.items()))" "$j" 2>/dev/null)"
  done
  rm -f "$out"/prod_*.safetensors
else
  row "production check: skipped (PROD=0, or no torch/safetensors to write the files)"
fi

echo
echo "==== summary (kernel $kernel, seed $seed, $((SECONDS - t_start)) s; logs and JSON in $out)"
printf '%s\n' "${summary[@]}"
[ "$bad" -eq 0 ] || { echo "$bad step(s) failed or differed"; exit 1; }
