#!/usr/bin/env bash
# Packs, on a machine with nvcc, what tools/device/variants_device.sh runs on the GPU machine:
# one xz archive (the binaries share most of their bytes; the carry limit is 64 MiB) with
# flashcheck, flashcheck_perturbed.so when the build has it (-DFLASHCHECK_PERTURB=ON), the GPU test
# binaries (kernel_variants_test, gpu_variants_test, launched_tile_test, capabilities_snapshot_test),
# the build's gpu/capabilities.json and the BLAS runtime.
#
#   tools/device/variants_prepare.sh [CUDA_BUILD] [OUT_DIR] [JOBS]   (defaults build-cuda build-mmavar 2)
#
# CUDA_BUILD is configured with CUDA (e.g. -DCMAKE_CUDA_ARCHITECTURES=90a for an H100); OUT_DIR is
# what the device call carries (an ignored build-* folder): OUT_DIR/bin.tar.xz.
set -euo pipefail
build=${1:-build-cuda}
out=${2:-build-mmavar}
jobs=${3:-2}
targets=(flashcheck kernel_variants_test gpu_variants_test launched_tile_test capabilities_snapshot_test)
grep -q '^FLASHCHECK_PERTURB:BOOL=ON' "$build/CMakeCache.txt" && targets+=(flashcheck_perturbed)
cmake --build "$build" -j"$jobs" --target "${targets[@]}"
stage=$(mktemp -d)
mkdir -p "$stage/lib" "$out"
cp "$build/flashcheck" "$build/runner/kernel_variants_test" "$build/runner/gpu_variants_test" "$build/runner/launched_tile_test" \
  "$build/runner/capabilities_snapshot_test" "$stage/"
[ -f "$build/flashcheck_perturbed.so" ] && cp "$build/flashcheck_perturbed.so" "$stage/"
cp gpu/capabilities.json "$stage/"
ldd "$build/flashcheck" | awk '/openblas|gfortran|quadmath|gomp/ {print $3}' | sort -u | xargs -r cp -L -t "$stage/lib"
tar -C "$stage" -cf - . | xz -T1 --lzma2=preset=9,dict=192MiB >"$out/bin.tar.xz"
rm -rf "$stage"
du -sh "$out/bin.tar.xz"
