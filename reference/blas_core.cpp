#include "reference/blas_core.h"

#include <cblas.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace flashcheck {
namespace {

constexpr const char* kMarker = "FLASHCHECK_BLAS_RESTARTED";

bool has_avx2_fma() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }

bool has_avx512_skx() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
}

bool is_one_of(const std::string& s, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (strcasecmp(s.c_str(), n) == 0) return true;
  return false;
}

}  // namespace

std::string blas_core() {
  const char* c = openblas_get_corename();
  return c ? c : "unknown";
}

const char* better_blas_core() {
  if (std::getenv("OPENBLAS_CORETYPE")) return nullptr;  // the user's choice stands
  const char* knob = std::getenv("FLASHCHECK_BLAS_CORE");
  if (knob && std::strcmp(knob, "keep") == 0) return nullptr;
  __builtin_cpu_init();  // __builtin_cpu_supports also checks that the OS saves the vector state
  const std::string core = blas_core();
  // OpenBLAS's x86-64 cores with FMA kernels (AVX2 or better): a choice OpenBLAS made on purpose.
  // Any other core on a CPU with AVX2+FMA is a fallback (Prescott, or Sandybridge's AVX-only kernels).
  if (is_one_of(core, {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids", "Excavator", "Steamroller",
                       "Piledriver", "Bulldozer"}))
    return nullptr;
  if (has_avx512_skx()) return "SkylakeX";
  if (has_avx2_fma()) return __builtin_cpu_is("amd") ? "Zen" : "Haswell";
  return nullptr;
}

void restart_with_better_blas_core(char** argv) {
  if (std::getenv(kMarker)) return;
  const char* core = better_blas_core();
  if (!core) return;
  std::fprintf(stderr, "flashcheck: OpenBLAS chose its %s kernels on a CPU with %s; restarting with OPENBLAS_CORETYPE=%s "
               "(FLASHCHECK_BLAS_CORE=keep to stop this)\n",
               blas_core().c_str(), has_avx512_skx() ? "AVX-512" : "AVX2+FMA", core);
  if (setenv("OPENBLAS_CORETYPE", core, 1) != 0 || setenv(kMarker, "1", 1) != 0) return;
  execv("/proc/self/exe", argv);
  // exec failed (no /proc, say): carry on with the kernels OpenBLAS chose.
  unsetenv("OPENBLAS_CORETYPE");
}

}  // namespace flashcheck
