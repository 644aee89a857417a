#!/usr/bin/env bash
# One GPU call (at most about 8 minutes on an H100/H200 with 16 cores), building nothing: the mutation
# score of wgmma_f16's and mma_f16's problem-model-2 (variant) code paths (issue 22 item 3; DETECTION.md
# "Variant paths"). The mutants, plugin modules exporting ABI 2, come from
# tools/device/mutate_variants_prepare.sh; an unmutated flashcheck loads each with --plugin and runs
# the variant check (tools/mutate/mutate_device.py --checks variants): campaigns `--variants all`,
# `--require window`, `--require varlen` (CPU oracle by default), the fixed variant problems (window
# edges on tile boundaries, packed batches with seqused_kv and empty sequences, > 32 sequences, sinks,
# softcap, ALiBi, BSHD, Dqk = 192), then a plain campaign, each mutant stopping at its first kill.
# The unmutated modules run every check first and must pass (a fixed problem outside a kernel's space
# is dropped for it).
#
#   tools/device/mutate_variants_device.sh [CARRY_DIR]   (default build-mutvar/carry: bin.tar.xz, mutvar_pack.tar.xz)
#
# Run from the source root (it reads tools/mutate/ and its equivalent_<kernel>.txt). Knobs: JOBS (8
# mutants at once), CASES (100: the --variants all campaign; the required and plain ones take half),
# ORACLE (cpu or gpu; default flashcheck's), MAX_SEQ (600), MAX_WORK (6e7), DEADLINE (380 s: no mutant
# starts later), HARD_DEADLINE (450 s: running checks are cut, their mutants not run), RESUME=1 (a
# second call on the warm machine keeps the first call's results and checks the rest).
# Output: the score table and survivors last (compact); $OUT/run.log (every line), mutation_<kernel>.txt
# (survivors with diffs) and .json, mutation_summary.json, survivors.txt.
set -u
carry=${1:-build-mutvar/carry}
out=${OUT:-mutvar-out}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
mutate_dir=$(cd "$here/../mutate" && pwd)
dir=/tmp/mutvar_bin
rm -rf "$dir" && mkdir -p "$dir" &&
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$carry/bin.tar.xz" "$dir" ||
  { echo "cannot unpack $carry/bin.tar.xz"; exit 125; }
[ -f "$carry/mutvar_pack.tar.xz" ] || { echo "no $carry/mutvar_pack.tar.xz (tools/device/mutate_variants_prepare.sh)"; exit 125; }
export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi -L | tee "$out/device.txt"
opts=(--checks variants -j "${JOBS:-8}" --cases "${CASES:-100}" --max-seq "${MAX_SEQ:-600}" --max-work "${MAX_WORK:-6e7}"
      --deadline "${DEADLINE:-380}" --hard-deadline "${HARD_DEADLINE:-450}" --timeout 60)
[ -n "${ORACLE:-}" ] && opts+=(--oracle "$ORACLE")
[ "${RESUME:-0}" = 1 ] && opts+=(--resume)
python3 "$mutate_dir/mutate_device.py" run --pack "$carry/mutvar_pack.tar.xz" --flashcheck "$dir/flashcheck" \
  --dest /tmp/mutvar_mutants --out "$out" "${opts[@]}" >"$out/run.log" 2>&1
rc=$?
# Compact: the setup and baseline lines, then the table and survivor lines mutate_device.py prints last.
grep -E "^unpacked|^  base|BASE FAILS|^ABORT|^checked" "$out/run.log"
sed -n '/^MUTATION SCORE/,$p' "$out/run.log" | grep -v "survivors:"
python3 - "$out" <<'EOF'
import json, os, sys
out = sys.argv[1]
lines = []
for name in ("wgmma_f16", "mma_f16"):
    p = os.path.join(out, "mutation_%s.json" % name)
    if not os.path.exists(p):
        continue
    rep = json.load(open(p))
    for sv in rep["survivors"]:
        lines.append("%-9s %-38s %s:%s  %s" % (name, sv["id"], sv.get("file", "?"), sv.get("line", "?"), sv.get("description", "")))
open(os.path.join(out, "survivors.txt"), "w").write("\n".join(lines) + "\n")
print("survivors (%d; diffs in $OUT/mutation_<kernel>.txt):" % len(lines))
print("\n".join(l[:160] for l in lines))
EOF
echo "mutate_device.py rc=$rc"
exit $rc
