#!/usr/bin/env bash
# Builds, on a machine with nvcc, everything tools/device/race_device.sh needs on the GPU machine,
# into one folder to carry (tools/mutate/MUTATION.md, "Perturbed build"):
#   bin.tar.xz: flashcheck, flashcheck_perturbed.so, the launched-tile and capability-snapshot test
#   binaries and the BLAS runtime; race_pack.tar.xz: the async-race mutants of wgmma_f16 (REL, WAIT) and mma_f16 (SYNC, WAIT,
#   COMMIT) as plugin modules, each built plain and perturbed (-DFLASHCHECK_PERTURB=1).
#
#   tools/device/race_prepare.sh [BASE_BUILD] [OUT_DIR] [JOBS]
# BASE_BUILD (default build-cuda) is configured with CUDA, -DCMAKE_EXPORT_COMPILE_COMMANDS=ON and
# -DFLASHCHECK_PERTURB=ON; its targets are built here if missing. Resumable: built mutants are kept.
set -euo pipefail
base=${1:-build-cuda}
out=${2:-build-race}
jobs=${3:-2}
here=$(cd "$(dirname "$0")" && pwd)
mutate_dir=$(cd "$here/../mutate" && pwd)  # the mutation tool and its catalogues (tools/mutate/)
py=${PYTHON:-python3}

cmake --build "$base" -j"$jobs" --target flashcheck flashcheck_perturbed launched_tile_test capabilities_snapshot_test

# The race class, less the mutants declared equivalent (the never-instantiated serial schedule's):
# each would survive every check and only cost device time.
ids_for() {  # ids_for KERNEL_DIR OPS EQUIVALENT_FILE
  "$py" "$mutate_dir" list --kernel-dir "$1" --ops "$2" | awk '/^[A-Z]+-/ {print $1}' |
    grep -v -x -F -f <(grep -v '^#' "$3" | awk 'NF {print $1}') || true
}
mkdir -p "$out"
ids_for gpu/wgmma_f16 REL,WAIT "$mutate_dir/equivalent_wgmma_f16.txt" >"$out/ids_wgmma_f16.txt"
ids_for gpu/mma_f16 SYNC,WAIT,COMMIT "$mutate_dir/equivalent_mma_f16.txt" >"$out/ids_mma_f16.txt"
wc -l "$out"/ids_*.txt

for k in wgmma_f16 mma_f16; do
  for kind in plain perturbed; do
    flag=()
    [ "$kind" = perturbed ] && flag=(--perturb)
    "$py" "$mutate_dir" build --plugin "${flag[@]}" --cudart static --kernel-dir "gpu/$k" \
      --ids "$out/ids_$k.txt" --base "$base" --work "$out/$kind/$k" -j "$jobs"
  done
done

mkdir -p "$out/carry"
"$py" "$mutate_dir/mutate_device.py" pack --out "$out/carry/race_pack.tar.xz" \
  --work "wgmma_f16=$out/plain/wgmma_f16" --work "mma_f16=$out/plain/mma_f16" \
  --work "wgmma_f16+perturb=$out/perturbed/wgmma_f16,wgmma_f16" --work "mma_f16+perturb=$out/perturbed/mma_f16,mma_f16"
# Binaries and the BLAS runtime in one xz archive with a window wider than a binary (the three
# flashcheck-sized binaries share most of their bytes): the carry limit is 64 MiB. The GPU machine
# need not be Debian: lib/ goes on LD_LIBRARY_PATH there; the C and C++ runtimes and libcrypto are
# the machine's own (newer is compatible).
stage=$(mktemp -d)
mkdir -p "$stage/lib"
cp "$base/flashcheck" "$base/flashcheck_perturbed.so" "$base/runner/launched_tile_test" \
  "$base/runner/capabilities_snapshot_test" "$stage/"
ldd "$base/flashcheck" | awk '/openblas|gfortran|quadmath|gomp/ {print $3}' | xargs -r cp -L -t "$stage/lib"
tar -C "$stage" -cf - . | xz -T1 --lzma2=preset=9,dict=192MiB >"$out/carry/bin.tar.xz"
rm -rf "$stage"
du -sh "$out/carry" "$out"/carry/*
echo "carry: $out/carry  (then, on the GPU machine from the source root: tools/device/race_device.sh $out/carry)"
