#!/usr/bin/env bash
# Packs, on a machine with nvcc, what tools/device/decode_device.sh runs on the GPU machine: one xz
# archive (the carry limit is 64 MiB) with flashcheck, decode_paged_f16's tests
# (decode_paged_test, decode_split_plan_test), its benchmark (decode_bench), the launched-tile and
# capability-snapshot tests, the build's gpu/capabilities.json, tools/device/decode_sdpa.py and the
# BLAS runtime.
#
#   tools/device/decode_prepare.sh [CUDA_BUILD] [OUT_DIR] [JOBS]   (defaults build-cuda build-decode 2)
#
# CUDA_BUILD is configured with -DFLASHCHECK_CUDA=ON (sm_90 by default); OUT_DIR is what the device
# call carries (an ignored build-* folder): OUT_DIR/bin.tar.xz.
set -euo pipefail
build=${1:-build-cuda}
out=${2:-build-decode}
jobs=${3:-2}
targets=(flashcheck decode_paged_test decode_split_plan_test decode_bench launched_tile_test capabilities_snapshot_test)
cmake --build "$build" -j"$jobs" --target "${targets[@]}"
stage=$(mktemp -d)
mkdir -p "$stage/lib" "$out"
cp "$build/flashcheck" "$build/gpu/decode_paged_test" "$build/gpu/decode_split_plan_test" "$build/bench/decode_bench" \
  "$build/runner/launched_tile_test" "$build/runner/capabilities_snapshot_test" "$stage/"
cp gpu/capabilities.json tools/device/decode_sdpa.py tools/device/cuda_timing.py "$stage/"
ldd "$build/flashcheck" | awk '/openblas|gfortran|quadmath|gomp/ {print $3}' | sort -u | xargs -r cp -L -t "$stage/lib"
tar -C "$stage" -cf - . | xz -T1 --lzma2=preset=9,dict=192MiB >"$out/bin.tar.xz"
rm -rf "$stage"
du -sh "$out/bin.tar.xz"
