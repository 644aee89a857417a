#!/usr/bin/env bash
# One GPU call (at most about 8 minutes on an H100/H200 with 16 cores), building nothing: the mutation
# score of a built-in kernel's backward pass (issue 23 item 6; KERNEL=mma_f16 by default, or
# wgmma_f16, as packed). The mutants, plugin modules exporting the
# backward (tools/device/mutate_backward_prepare.sh), are loaded one by one by an unmutated flashcheck
# and run through the backward check (tools/mutate/mutate_device.py --checks backward): a `run
# --backward` campaign (plain problems of the backward's space: bf16 and f16, its head dims, causal
# modes, GQA; the backward being declared deterministic, half the cases run its deterministic mode,
# called 3 times and compared bitwise, half its default atomic-dQ mode), the fixed backward problems
# (Sq = 1, Skv = 1, Sq > Skv and Sq < Skv bottom-right, GQA groups of 2 and 4, lengths off the
# tiles; each (dtype, mode) pair twice), a second campaign under the next seed; each mutant
# stops at its first kill. The unmutated module runs every check first and must pass (a fixed problem
# outside the backward's space is dropped).
#
#   tools/device/mutate_backward_device.sh [CARRY_DIR]   (default build-mutbwd/carry: bin.tar.xz, mutbwd_pack.tar.xz)
#
# Run from the source root (it reads tools/mutate/ and equivalent_KERNEL_backward.txt if present).
# Knobs: JOBS (8 mutants at once), CASES (30 per campaign), MAX_SEQ (384), MAX_WORK (3e7), ORACLE
# (cpu, gpu or auto; default flashcheck's), DEADLINE (380 s: no mutant starts later), HARD_DEADLINE
# (450 s: running checks are cut, their mutants not run), CHECK_TIMEOUT (60 s a check), RESUME=1 (a second call on the warm
# machine keeps the first call's results and checks the rest), ONLY_IDS=FILE (only these mutants: the
# rest of a sample on a fresh machine, scored apart).
# Output: the checks (checks.txt), the baseline lines, the score table and survivors last;
# $OUT/run.log (every line), mutation_KERNEL_backward.txt (survivors with diffs) and .json,
# mutation_summary.json, survivors.txt.
set -u
carry=${1:-build-mutbwd/carry}
kernel=${KERNEL:-mma_f16}
out=${OUT:-mutbwd-out}
mkdir -p "$out"
for f in bin.tar.xz mutbwd_pack.tar.xz; do
  [ -f "$carry/$f" ] || { echo "no $carry/$f (tools/device/mutate_backward_prepare.sh)"; exit 125; }
done
nvidia-smi -L | tee "$out/device.txt"
opts=(--pack "$carry/mutbwd_pack.tar.xz" --bin "$carry/bin.tar.xz" --dest /tmp/mutbwd_mutants --out "$out"
      --checks backward -j "${JOBS:-8}" --cases "${CASES:-30}" --backward-max-seq "${MAX_SEQ:-384}"
      --backward-max-work "${MAX_WORK:-3e7}" --deadline "${DEADLINE:-380}" --hard-deadline "${HARD_DEADLINE:-450}" --timeout "${CHECK_TIMEOUT:-60}")
[ -n "${ORACLE:-}" ] && opts+=(--oracle "$ORACLE")
[ "${RESUME:-0}" = 1 ] && opts+=(--resume)
[ -n "${ONLY_IDS:-}" ] && opts+=(--only-ids "$ONLY_IDS")
md="$(dirname "$0")/../mutate/mutate_device.py"
python3 "$md" run --dry-run "${opts[@]}" >"$out/checks.txt"
python3 "$md" run "${opts[@]}" >"$out/run.log" 2>&1
rc=$?
# Compact: the setup and baseline lines, then the table, the survivors with their lines, what killed.
grep -E "^unpacked|^  base|BASE FAILS|^ABORT|not scored|^checked" "$out/run.log"
sed -n '/^MUTATION SCORE/,$p' "$out/run.log" | grep -v "survivors:"
if [ -f "$out/survivors.txt" ]; then
  echo "survivors ($(wc -l <"$out/survivors.txt"); diffs in \$OUT/mutation_${kernel}_backward.txt):"
  cut -c1-160 "$out/survivors.txt"
fi
echo "mutate_device.py rc=$rc"
exit $rc
