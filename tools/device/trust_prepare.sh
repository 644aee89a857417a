#!/usr/bin/env bash
# Packs, on a machine with nvcc, what tools/device/trust_device.sh runs on the GPU machine: one xz
# archive (the binaries share most of their bytes; the carry limit is 64 MiB) with flashcheck,
# libflashcheck.so, the GPU tests, the Python package and the BLAS runtime.
#
#   tools/device/trust_prepare.sh [CUDA_BUILD] [OUT_DIR] [JOBS]   (defaults build-cuda build-trust 2)
set -euo pipefail
build=${1:-build-cuda}
out=${2:-build-trust}
jobs=${3:-2}
cmake --build "$build" -j"$jobs" --target flashcheck flashcheck_capi gpu_oracle_test gpu_variants_test launched_tile_test device_copy_test oracle_bench
stage=$(mktemp -d)
mkdir -p "$stage/lib" "$out"
cp "$build/flashcheck" "$build/libflashcheck.so" "$build/reference/gpu_oracle_test" "$build/runner/gpu_variants_test" \
  "$build/runner/launched_tile_test" "$build/runner/device_copy_test" "$build/bench/oracle_bench" "$stage/"
cp -r python "$stage/python"
cp tools/device/fuzz_sdpa.py "$stage/"
find "$stage/python" -name __pycache__ -prune -exec rm -rf {} +
ldd "$build/flashcheck" "$build/bench/oracle_bench" | awk '/openblas|gfortran|quadmath|gomp|benchmark/ {print $3}' | sort -u |
  xargs -r cp -L -t "$stage/lib"
tar -C "$stage" -cf - . | xz -T1 --lzma2=preset=9,dict=192MiB >"$out/bin.tar.xz"
rm -rf "$stage"
du -sh "$out/bin.tar.xz"
