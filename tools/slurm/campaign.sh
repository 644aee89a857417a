#!/usr/bin/env bash
# A flashcheck campaign on a Slurm cluster: one shard per array task (shard.sbatch, one GPU each) and
# the merge as a job that depends on the whole array (merge.sbatch), whose report is the one the
# unsharded run gives for the same seed and cases (README, "Shards and GPUs").
#
#   tools/slurm/campaign.sh [--shards N] [--out DIR] [--flashcheck PATH] [--gres SPEC|none] [--html]
#                           [--sbatch ARG]... [--wait] -- RUN_ARGS...
#
#   --shards N        array tasks, shard i/N each (default 4)
#   --out DIR         where the shards' JSON and logs and the merged report go; on a file system every
#                     node sees (default ./flashcheck-slurm)
#   --flashcheck P    the binary, on that shared file system (default: build/flashcheck of this checkout)
#   --gres SPEC|none  each shard's generic resources instead of shard.sbatch's gpu:1 (none: a CPU-only
#                     cluster, for the CPU replica and host plugins)
#   --html            the shards write the pages of their kept failures; the merge copies them to DIR/html
#   --sbatch ARG      passed to both sbatch calls (--partition=..., --time=..., --account=...); repeatable
#   --wait            wait for the merge and exit with its code (0 pass, 1 a kernel failed, 125 cannot
#                     test); without it, print the two job ids and return
#   RUN_ARGS          `flashcheck run` options: --cases, --seed, --kernel, --plugin (a path every node
#                     sees), ... but not --shard, --json, --html, --junit or --gpus, which are set here
#
# The merged report is bit for bit the unsharded run's only at the same OpenMP thread count (the fp64
# oracle's row blocks follow it): export OMP_NUM_THREADS before submitting (sbatch passes the
# environment on), as for the unsharded run it is compared with.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
shards=4 out=./flashcheck-slurm fc="$here/../../build/flashcheck" gres="" html=0 wait=0
sbatch_args=()
usage() {
  echo "campaign.sh: $1" >&2
  echo "usage: campaign.sh [--shards N] [--out DIR] [--flashcheck PATH] [--gres SPEC|none] [--html] [--sbatch ARG]... [--wait] -- RUN_ARGS..." >&2
  exit 125  # flashcheck's "cannot test": nothing was submitted
}
while [ $# -gt 0 ]; do
  case "$1" in
    --shards) [ $# -ge 2 ] || usage "--shards needs a value"; shards=$2; shift 2 ;;
    --out) [ $# -ge 2 ] || usage "--out needs a value"; out=$2; shift 2 ;;
    --flashcheck) [ $# -ge 2 ] || usage "--flashcheck needs a value"; fc=$2; shift 2 ;;
    --gres) [ $# -ge 2 ] || usage "--gres needs a value"; gres=$2; shift 2 ;;
    --sbatch) [ $# -ge 2 ] || usage "--sbatch needs a value"; sbatch_args+=("$2"); shift 2 ;;
    --html) html=1; shift ;;
    --wait) wait=1; shift ;;
    --) shift; break ;;
    *) usage "unknown option '$1' (flashcheck run's options go after --)" ;;
  esac
done
[[ "$shards" =~ ^[1-9][0-9]{0,3}$ ]] || usage "--shards expects a whole number from 1 to 9999, got '$shards'"
for a in "$@"; do
  case "$a" in
    --shard|--shard=*|--json|--json=*|--html|--html=*|--junit|--junit=*|--gpus|--gpus=*)
      usage "'$a' among the run options: the shards' --shard, --json and --html and the merge's reports are set here" ;;
  esac
done
[ -x "$fc" ] || usage "no flashcheck binary at '$fc' (give --flashcheck PATH)"
command -v sbatch >/dev/null || usage "sbatch not found: is this a Slurm login node?"
fc=$(cd "$(dirname "$fc")" && pwd)/$(basename "$fc")  # the jobs may start elsewhere: absolute paths
mkdir -p "$out"
out=$(cd "$out" && pwd)
# Shards of an earlier campaign left here would be merged with this one's (or refused as another
# campaign only after the whole array ran).
if compgen -G "$out/shard_*.json" >/dev/null || [ -e "$out/merged.json" ]; then
  usage "$out holds an earlier campaign's reports: give another --out or remove them"
fi

gres_arg=()
if [ "$gres" = none ]; then
  gres_arg=(--gres=none)
elif [ -n "$gres" ]; then
  gres_arg=(--gres="$gres")
fi
# --parsable prints "JOBID" or "JOBID;CLUSTER".
array=$(sbatch --parsable --array=0-$((shards - 1)) --output="$out/shard_%a.log" "${gres_arg[@]}" "${sbatch_args[@]}" \
  "$here/shard.sbatch" "$fc" "$out" "$shards" "$html" "$@")
array=${array%%;*}
echo "submitted shards: job $array, array 0-$((shards - 1)), logs $out/shard_<i>.log"
# afterany: a shard whose kernels failed exits 1, which is a result to merge, not a reason to skip the
# merge; a shard that died without its report is named by the merge itself.
merge_opts=(--parsable --dependency=afterany:"$array" --kill-on-invalid-dep=yes --output="$out/merge.log")
if [ "$wait" = 1 ]; then
  set +e
  sbatch "${merge_opts[@]}" --wait "${sbatch_args[@]}" "$here/merge.sbatch" "$fc" "$out" "$shards" "$html" >/dev/null
  rc=$?
  set -e
  cat "$out/merge.log" 2>/dev/null || true
  echo "merged report: $out/merged.json, $out/merged.xml (JUnit); exit $rc"
  exit "$rc"
fi
merge=$(sbatch "${merge_opts[@]}" "${sbatch_args[@]}" "$here/merge.sbatch" "$fc" "$out" "$shards" "$html")
echo "submitted merge: job ${merge%%;*}, after every shard; report $out/merged.json, $out/merged.xml (JUnit), log $out/merge.log"
