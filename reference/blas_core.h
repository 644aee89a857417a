// Which OpenBLAS kernels the fp64 oracle runs on, and a correction when OpenBLAS guesses wrong.
//
// Debian's OpenBLAS is a DYNAMIC_ARCH build: at load time it picks its kernels from the CPU's
// family and model numbers. A CPU it does not know (seen on the GPU machine: a VM reporting
// "Intel(R) Xeon(R) Processor" with the model hidden) falls back to Prescott, SSE3 kernels on an
// AVX-512 machine: the oracle ran at 104 GFLOPS instead of 251 (PERF.md, session 3). OpenBLAS reads
// OPENBLAS_CORETYPE only while it loads, before main(), so the fix is to set it and start the
// program again.
#pragma once

#include <string>

namespace flashcheck {

// The OpenBLAS core in use, e.g. "SkylakeX", "Haswell", "Zen", "Prescott".
std::string blas_core();

// The core to force instead, or nullptr to keep the current one. Only when the user has not set
// OPENBLAS_CORETYPE and the current core ignores vector units the CPU and OS have (AVX2+FMA, or
// the AVX-512 F/DQ/BW/VL set that OpenBLAS's SkylakeX kernels use): a core OpenBLAS chose on
// purpose among vector cores is left alone.
const char* better_blas_core();

// For a program's main(): if better_blas_core() names a core, set OPENBLAS_CORETYPE and exec this
// program again with the same arguments (once: a marker in the environment stops a loop). Returns
// when nothing needs changing or exec failed (then the program goes on with the current core).
// FLASHCHECK_BLAS_CORE=keep turns the correction off.
void restart_with_better_blas_core(char** argv);

}  // namespace flashcheck
