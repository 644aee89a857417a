#!/usr/bin/env bash
# Builds, on a machine with nvcc, what tools/device/mutate_variants_device.sh runs on the GPU machine:
# mutants of the problem-model-2 (variant) code paths of wgmma_f16 and mma_f16 as plugin modules
# (tools/mutate/MUTATION.md "Plugin mutants"), each module exporting ABI 2 so that a campaign's
# --variants draws variant problems from it, packed with an unmutated flashcheck.
#
#   tools/device/mutate_variants_prepare.sh [CUDA_BASE] [OUT_DIR] [JOBS] [FLASHCHECK]
#
# CUDA_BASE (default build-cuda) is configured with CUDA and -DCMAKE_EXPORT_COMPILE_COMMANDS=ON
# (nothing in it need be built: the modules are compiled from its compile commands); OUT_DIR (default
# build-mutvar) gets one work folder per kernel (resumable: built mutants are kept) and
# OUT_DIR/carry: mutvar_pack.tar.xz (the modules) and bin.tar.xz (FLASHCHECK, default
# CUDA_BASE/flashcheck, built if missing, with the BLAS runtime). Builds run under `nice`.
#
# The catalogue (DETECTION.md "Variant paths"): per file a sample by id hash (stable under edits
# elsewhere), the variant files of each kernel and the shared gpu/common variant code, lines of
# mainloop.cuh narrowed to the variant ones, var_params_host.cpp less its argument checks (throw
# lines: flashcheck hands a kernel only valid buffers, so weakening one is equivalent).
set -euo pipefail
base=${1:-build-cuda}
out=${2:-build-mutvar}
jobs=${3:-2}
fc=${4:-$base/flashcheck}
here=$(cd "$(dirname "$0")" && pwd)
mutate_dir=$(cd "$here/../mutate" && pwd)
py=${PYTHON:-python3}
also=(--also gpu/common/variant_mask.cuh --also gpu/common/score_mod.cuh --also gpu/common/packed_tiles.cuh
      --also gpu/common/row_end.cuh --also gpu/common/var_params_host.cpp)
mkdir -p "$out"

pick() {  # pick KERNEL N FILE [REGEX]: N mutants of FILE (of its lines matching REGEX), by id hash
  local k=$1 n=$2 f=$3 m=${4:-}
  local extra=()
  [ -n "$m" ] && extra=(--match "$m")
  "$py" "$mutate_dir" list --kernel-dir "gpu/$k" "${also[@]}" --only "$f" "${extra[@]}" --sample "$n" --sample-seed 22 |
    awk '/^[A-Z]+-/ {print $1}'
}
no_throw='^(?!.*throw)'
{
  pick wgmma_f16 12 gpu/wgmma_f16/place.cuh
  pick wgmma_f16 10 gpu/wgmma_f16/scores.cuh
  pick wgmma_f16 6 gpu/wgmma_f16/epilogue.cuh
  pick wgmma_f16 5 gpu/wgmma_f16/kernel.cuh
  pick wgmma_f16 10 gpu/wgmma_f16/mainloop.cuh 'kv_begin|kv_last|tail|zero_from|first|kChunksPerRow|n_tiles - 1|v_full\(stage\)\)'
  pick wgmma_f16 5 gpu/wgmma_f16/launch_variant.cuh
  pick wgmma_f16 6 gpu/wgmma_f16/launch2.cpp
  pick wgmma_f16 8 gpu/common/var_params_host.cpp "$no_throw"
  pick wgmma_f16 2 gpu/common/variant_mask.cuh
  pick wgmma_f16 1 gpu/common/row_end.cuh
  pick wgmma_f16 1 gpu/common/score_mod.cuh
} >"$out/ids_wgmma_f16.txt"
{
  pick mma_f16 8 gpu/mma_f16/block_rows.cuh
  pick mma_f16 8 gpu/mma_f16/mainloop.cuh 'late->|kVariant|Bias|Softcap|sink|parked|rv|at\.row|cta'
  pick mma_f16 4 gpu/mma_f16/launch_variant.cuh
  pick mma_f16 5 gpu/mma_f16/launch2.cpp
  pick mma_f16 10 gpu/common/variant_mask.cuh
  pick mma_f16 4 gpu/common/score_mod.cuh
  pick mma_f16 5 gpu/common/packed_tiles.cuh
  pick mma_f16 5 gpu/common/row_end.cuh
} >"$out/ids_mma_f16.txt"
# var_params_host.cpp for mma_f16 too: the same host code feeds both kernels; another sample.
"$py" "$mutate_dir" list --kernel-dir gpu/mma_f16 "${also[@]}" --only gpu/common/var_params_host.cpp --match "$no_throw" \
  --sample 6 --sample-seed 23 | awk '/^[A-Z]+-/ {print $1}' >>"$out/ids_mma_f16.txt"
wc -l "$out"/ids_*.txt

for k in mma_f16 wgmma_f16; do
  nice -n 10 "$py" "$mutate_dir" build --plugin --cudart static --kernel-dir "gpu/$k" "${also[@]}" \
    --ids "$out/ids_$k.txt" --base "$base" --work "$out/$k" -j "$jobs"
done

mkdir -p "$out/carry"
"$py" "$mutate_dir/mutate_device.py" pack --out "$out/carry/mutvar_pack.tar.xz" \
  --work "wgmma_f16=$out/wgmma_f16" --work "mma_f16=$out/mma_f16"
# flashcheck and the BLAS runtime (the machine's own C/C++ runtimes and libcrypto are used there).
[ -x "$fc" ] || nice -n 10 cmake --build "$base" -j"$jobs" --target flashcheck
stage=$(mktemp -d)
mkdir -p "$stage/lib"
cp "$fc" "$stage/flashcheck"
ldd "$fc" | awk '/openblas|gfortran|quadmath|gomp/ {print $3}' | sort -u | xargs -r cp -L -t "$stage/lib"
tar -C "$stage" -cf - . | xz -T1 --lzma2=preset=9,dict=192MiB >"$out/carry/bin.tar.xz"
rm -rf "$stage"
du -sh "$out/carry" "$out"/carry/*
echo "carry: $out/carry  (then, on the GPU machine from the source root: tools/device/mutate_variants_device.sh $out/carry)"
