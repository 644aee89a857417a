#!/usr/bin/env bash
# Builds, on a machine with nvcc, what tools/device/mutate_backward_device.sh runs on the GPU machine:
# mutants of a built-in kernel's backward pass (issue 23 item 6: mutation score of the backward
# kernel; KERNEL=mma_f16 by default, or wgmma_f16) as
# plugin modules built with --plugin-backward (gpu/plugin/kernel_module.cpp with FC_MODULE_BACKWARD:
# the module exports the backward through ABI 2 and declares the backward's space, so `run --backward
# --plugin` draws the problems it draws on the built-in kernel), packed with an unmutated flashcheck.
#
#   tools/device/mutate_backward_prepare.sh [CUDA_BASE] [OUT_DIR] [JOBS] [FLASHCHECK]
#
# CUDA_BASE (default build-cuda) is configured with CUDA (sm_90: the modules are compiled for
# --plugin-arch 90a) and -DCMAKE_EXPORT_COMPILE_COMMANDS=ON; nothing in it need be built but
# FLASHCHECK (default CUDA_BASE/flashcheck, built if missing). OUT_DIR (default build-mutbwd, an
# ignored folder) gets the work folder OUT_DIR/KERNEL (resumable: built mutants are kept) and
# OUT_DIR/carry: mutbwd_pack.tar.xz (the modules) and bin.tar.xz (flashcheck and its BLAS runtime).
# Builds run under `nice`.
#
# The catalogue: the mutants of the backward's files as they are at build time, selected by name
# (every gpu/KERNEL/bwd_* and backward* file; BWD_FILES="a b ..." to name others), less argument
# checks (throw lines: flashcheck hands a kernel only valid buffers), SAMPLE of them by id hash
# (default 120, stable under edits elsewhere; SAMPLE=all for every one; SAMPLE_SEED, default 31).
# Each mutant recompiles only the units that include its file (backward.cu for a bwd_*.cuh one).
set -euo pipefail
base=${1:-build-cuda} out=${2:-build-mutbwd} jobs=${3:-2}
fc=${4:-$base/flashcheck}
kernel=${KERNEL:-mma_f16}
[ -d "gpu/$kernel" ] || { echo "no kernel folder gpu/$kernel (KERNEL names a built-in kernel with a backward)"; exit 125; }
mutate=("${PYTHON:-python3}" "$(dirname "$0")/../mutate")  # the mutation tool (tools/mutate/)
mkdir -p "$out/carry"

# Built mutants are kept by id, and an id survives edits to other lines of its file: after any
# source change the kept modules would be stale, so the work folder starts again.
sources=$(find gpu reference -type f \( -name '*.cu' -o -name '*.cuh' -o -name '*.h' -o -name '*.cpp' \) -print0 |
  sort -z | xargs -0 sha1sum | sha1sum | cut -c1-16)
if [ -d "$out/$kernel" ] && [ "$(cat "$out/sources_$kernel.sha" 2>/dev/null)" != "$sources" ]; then
  echo "sources changed since $out/$kernel was built: building it again"
  rm -rf "${out:?}/$kernel"
fi
echo "$sources" >"$out/sources_$kernel.sha"
only=()
for f in ${BWD_FILES:-gpu/$kernel/bwd_* gpu/$kernel/backward*}; do
  [ -f "$f" ] || { echo "no file $f (run from the source root)"; exit 125; }
  only+=(--only "$f")
done
sample=()
[ "${SAMPLE:-120}" = all ] || sample=(--sample "${SAMPLE:-120}" --sample-seed "${SAMPLE_SEED:-31}")
"${mutate[@]}" list --kernel-dir "gpu/$kernel" "${only[@]}" --match '^(?!.*throw)' "${sample[@]}" |
  tee "$out/catalogue_$kernel.txt" | awk '/^[A-Z]+-/ {print $1}' >"$out/ids_$kernel.txt"
tail -1 "$out/catalogue_$kernel.txt"

nice -n 10 "${mutate[@]}" build --plugin --plugin-backward --cudart static --kernel-dir "gpu/$kernel" \
  --ids "$out/ids_$kernel.txt" --base "$base" --work "$out/$kernel" -j "$jobs"

[ -x "$fc" ] || nice -n 10 cmake --build "$base" -j"$jobs" --target flashcheck
# A flashcheck built without CUDA loads the modules but runs none: the device call would score nothing.
if "$fc" list --plugin "$out/$kernel/_module/$kernel.so" | grep -q "built without CUDA" && [ "${ALLOW_CPU_FLASHCHECK:-0}" != 1 ]; then
  echo "$fc was built without CUDA: give a CUDA build's flashcheck (ALLOW_CPU_FLASHCHECK=1 packs it anyway, to test the scripts)"
  exit 125
fi
"${mutate[0]}" "${mutate[1]}/mutate_device.py" pack --out "$out/carry/mutbwd_pack.tar.xz" --work "${kernel}_backward=$out/$kernel,$kernel" \
  --flashcheck "$fc"
du -sh "$out/carry" "$out"/carry/*
# The device call carries at most 64 MiB: a smaller SAMPLE (or a second pack of the rest) otherwise.
size=$(du -sm "$out/carry" | cut -f1)
[ "$size" -lt 62 ] || { echo "carry is $size MiB: over the 64 MiB carry limit; use a smaller SAMPLE"; exit 1; }
echo "carry: $out/carry  (then, on the GPU machine from the source root: KERNEL=$kernel tools/device/mutate_backward_device.sh $out/carry)"
