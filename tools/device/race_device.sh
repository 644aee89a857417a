#!/usr/bin/env bash
# One GPU call (about 7-8 minutes on an H100 with 16 cores), building nothing, for issue #21 items 8
# and 9 (tools/mutate/MUTATION.md "Perturbed build", DETECTION.md "Async-proxy races"):
#   1. declarations: the capability snapshot and the launched-tile test on this GPU, and a short
#      campaign of the normal build's kernels (whatever the perturbed build does, these are unchanged);
#   2. zero false alarms: the perturbed kernels (flashcheck_perturbed.so) through a campaign and a
#      load campaign for each of three seeds;
#   3. the async-race mutants (race_pack.tar.xz from race_prepare.sh) through the standard device
#      check three ways at once: plain modules; perturbed modules, every mechanism; perturbed modules
#      without the tracker (poison, stretch, delay: what timing alone exposes);
#   4. a table per mutant: killed without / with / timing only, and the verdict of step 2.
#
#   tools/device/race_device.sh [CARRY_DIR]     (default build-race/carry, made by race_prepare.sh:
#                                              bin.tar.xz and race_pack.tar.xz; logs and JSON under $OUT)
# Run from the source root (it reads gpu/capabilities.json and tools/mutate/).
set -u
carry=${1:-build-race/carry}
out=${OUT:-race-out}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
mutate_dir=$(cd "$here/../mutate" && pwd)  # the mutation tool (tools/mutate/)
dir=/tmp/race_bin  # bin.tar.xz unpacked: binaries and lib/
rm -rf "$dir" && mkdir -p "$dir" &&
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$carry/bin.tar.xz" "$dir" ||
  { echo "cannot unpack $carry/bin.tar.xz"; exit 125; }
fc=$dir/flashcheck
mod=$dir/flashcheck_perturbed.so
pack=$(realpath "$carry/race_pack.tar.xz")
deadline=${RACE_DEADLINE:-320}  # no mutant starts after this (s, from the mutant passes' start)
hard=${RACE_HARD_DEADLINE:-390}  # running checks are cut here (their mutants: not run)
t0=$SECONDS
log() { echo "[$((SECONDS - t0))s] $*" | tee -a "$out/race.log"; }
nvidia-smi -L | tee "$out/device.txt"
rm -rf /tmp/race_plain /tmp/race_perturbed /tmp/race_timing  # results of an earlier call on a warm machine
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}  # ~16 processes share 16 cores
# The BLAS runtime built with flashcheck (race_prepare.sh); the machine's own C/C++ runtimes.
export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# ---- 1. declarations and the normal build --------------------------------------------------------
# The declarations of the build that was packed (the carry's copy), else the tree's.
caps_file=gpu/capabilities.json
[ -f "$carry/capabilities.json" ] && caps_file=$carry/capabilities.json
FLASHCHECK_CAPABILITIES_FILE=$caps_file "$dir/capabilities_snapshot_test" >"$out/capabilities.log" 2>&1
rc_caps=$?
"$dir/launched_tile_test" >"$out/launched_tile.log" 2>&1
rc_tile=$?
log "capability snapshot rc=$rc_caps; launched tiles rc=$rc_tile"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |compared|declares|launched" "$out/capabilities.log" "$out/launched_tile.log" | head -20
("$fc" run --kernel all --cases 150 --seed 5 >"$out/normal_campaign.log" 2>&1; echo $? >"$out/normal_campaign.rc") &

# ---- 2. zero false alarms: the perturbed kernels, three seeds ------------------------------------
for k in wgmma_f16 mma_f16; do
  for s in 1 2 3; do
    (
      FLASHCHECK_PERTURB_SEED=$s "$fc" run --plugin "$mod" --kernel "$k.perturbed" --cases 300 --seed "$s" \
        >"$out/fa_${k}_s$s.log" 2>&1
      echo $? >"$out/fa_${k}_s$s.rc"
      FLASHCHECK_PERTURB_SEED=$s "$fc" run --plugin "$mod" --kernel "$k.perturbed" --load --cases 6 --seed "$s" \
        >"$out/fa_load_${k}_s$s.log" 2>&1
      echo $? >"$out/fa_load_${k}_s$s.rc"
    ) &
  done
done

# ---- 3. the race mutants, three ways ---------------------------------------------------------------
md() {  # md NAME JOBS KERNELS ENV...
  local name=$1 jobs=$2 kernels=$3
  shift 3
  local ks=() e=()
  for k in $kernels; do ks+=(--kernel "$k"); done
  for v in "$@"; do e+=(--env "$v"); done
  python3 "$mutate_dir/mutate_device.py" run --pack "$pack" --flashcheck "$fc" "${ks[@]}" "${e[@]}" -j "$jobs" \
    --dest "/tmp/race_$name" --out "$out/$name" --deadline "$deadline" --hard-deadline "$hard" \
    >"$out/mutants_$name.log" 2>&1
  echo $? >"$out/mutants_$name.rc"
}
md plain 4 "wgmma_f16 mma_f16" &
md perturbed 3 "wgmma_f16+perturb mma_f16+perturb" FLASHCHECK_PERTURB_SEED=7 &
md timing 3 "wgmma_f16+perturb mma_f16+perturb" FLASHCHECK_PERTURB_SEED=7 FLASHCHECK_PERTURB=poison,stretch,delay &
log "started: normal campaign, 12 false-alarm runs, 3 mutant passes"
wait
log "all done"

# ---- 4. the table ------------------------------------------------------------------------------
python3 - "$out" <<'EOF'
import glob, json, os, sys
out = sys.argv[1]

def rc(path):
    try:
        return int(open(path).read().strip())
    except (OSError, ValueError):
        return None

lines = []
def say(s=""):
    print(s)
    lines.append(s)

def last(path, n=3):
    try:
        return [l.rstrip() for l in open(path, errors="replace").read().splitlines() if l.strip()][-n:]
    except OSError:
        return ["(no log)"]

say("== zero false alarms: perturbed kernels, seeds 1-3 (campaign 300 cases; load 6 cases) ==")
fa_ok = True
for f in sorted(glob.glob(os.path.join(out, "fa_*.rc"))):
    r = rc(f)
    fa_ok &= r == 0
    say("  %-34s rc=%s %s" % (os.path.basename(f)[:-3], r, "ok" if r == 0 else "FAILED: " + " | ".join(last(f[:-3] + ".log"))))
n = len(glob.glob(os.path.join(out, "fa_*.rc")))
say("  verdict: %s" % ("zero false alarms in %d runs" % n if fa_ok and n == 12 else
                      "NOT VALIDATED (%d runs, see fa_*.log): the perturbed build's kills below do not count; the normal "
                      "build is unaffected (its PTX is identical without the option)" % n))
say("  normal build campaign (all kernels, 150 cases): rc=%s" % rc(os.path.join(out, "normal_campaign.rc")))

def results(name, pack_name):
    d = "/tmp/race_%s/%s" % (name, pack_name)
    cat = json.load(open(os.path.join(d, "mutants.json"))) if os.path.exists(os.path.join(d, "mutants.json")) else {"mutants": []}
    res = {}
    for m in cat["mutants"]:
        p = os.path.join(d, m["id"], "result.json")
        r = json.load(open(p)) if os.path.exists(p) else None
        res[m["id"]] = (m, r)
    return res

def cell(r):
    if r is None:
        return "not run"
    if r["status"] != "killed":
        return r["status"]
    tail = r["checks"][-1].get("tail", "") if r.get("checks") else ""
    how = "tracker" if "perturbed build)" in tail else ("crash" if "crash" in r.get("killed_by", "") else "mismatch")
    return "KILLED %s/%s" % (r["killed_by"].split(":")[0], how)

say()
say("== async-race mutants through the standard device check (campaign 150, 11 edge shapes, load 6) ==")
say("%-10s %-27s %-44s %-9s %-26s %s" % ("kernel", "mutant", "change", "plain", "perturbed (all)", "perturbed, no tracker"))
table = []
totals = {}
for k in ("wgmma_f16", "mma_f16"):
    plain, pert, timing = results("plain", k), results("perturbed", k + "+perturb"), results("timing", k + "+perturb")
    for mid, (m, r) in sorted(plain.items(), key=lambda kv: (kv[1][0]["op"], kv[0])):
        rp = pert.get(mid, (None, None))[1]
        rt = timing.get(mid, (None, None))[1]
        change = m["description"].replace("`", "")
        if len(change) > 44:
            change = change[:41] + "..."
        c0, c1, c2 = cell(r), cell(rp), cell(rt)
        say("%-10s %-27s %-44s %-9s %-26s %s" % (k, mid, change, "killed" if c0.startswith("KILLED") else c0, c1, c2))
        table.append({"kernel": k, "id": mid, "file": m["file"], "line": m["line"], "description": m["description"],
                      "plain": r, "perturbed": rp, "timing": rt})
        t = totals.setdefault(k, [0, 0, 0, 0])
        t[0] += 1
        t[1] += c0.startswith("KILLED")
        t[2] += c1.startswith("KILLED")
        t[3] += c2.startswith("KILLED")
say()
for k, (n, a, b, c) in totals.items():
    say("%-10s %d race-class mutants: killed without the perturbed build %d/%d, with it %d/%d, with it but no tracker %d/%d"
        % (k, n, a, n, b, n, c, n))
json.dump({"false_alarm_runs_ok": fa_ok, "mutants": table}, open(os.path.join(out, "race_table.json"), "w"), indent=1)
open(os.path.join(out, "race_table.txt"), "w").write("\n".join(lines) + "\n")
EOF
for p in plain perturbed timing; do
  echo "mutant pass $p rc=$(cat "$out/mutants_$p.rc" 2>/dev/null): $(grep -E "ABORT|BASE FAILS|checked [0-9]+ of" "$out/mutants_$p.log" | tr '\n' ' ')"
done
log "capability snapshot rc=$rc_caps; launched tiles rc=$rc_tile (logs: capabilities.log, launched_tile.log)"
