// The device side of the element pass (element_pass_device.cpp drives it): launchers over raw
// device pointers, so this header and element_pass_kernels.cu stay C++17 for nvcc. One thread per
// chunk of kElementChunkRows rows walks its elements in order through element_pass.h's functions,
// which is what makes a chunk's totals the host's bits.
#pragma once
#include <cstdint>

#include "verify/element_pass.h"

namespace flashcheck::element_pass_gpu {

// A significant element's (value, oracle) pair, for DistinctPairs on the host.
struct Candidate {
  double oracle;
  float value;
  uint32_t unused;
};

// The three sets of pairs the rounding criteria keep: the kernel's, the eager baseline's, the
// FlashAttention baseline's (verify/criteria.cpp).
inline constexpr int kSets = 3;

struct PassArgs {
  const float* kernel_o = nullptr;   // device, [all_rows][dv]
  const double* oracle_o = nullptr;  // device
  const float* baseline = nullptr;   // device
  const float* flash = nullptr;      // device, or null: no FlashAttention baseline
  const uint8_t* empty_row = nullptr;  // device, [rows_per_head]: 1 where the row sees no key
  int64_t rows_per_head = 0;  // flat row g is row g % rows_per_head of its (sequence, head)
  int64_t all_rows = 0, dv = 0;
  DType od = DType::bf16;
  double max_ref = 0;
  uint64_t ulp_n = 0;
  // Mode count / write: a significant pair of set s is a candidate when its hash ≤ threshold[s].
  uint64_t threshold[kSets] = {0, 0, 0};
  int64_t* counts = nullptr;          // device [kSets][chunks], mode count
  const int64_t* offsets = nullptr;   // device [kSets][chunks], mode write: where a chunk's candidates go
  Candidate* out[kSets] = {nullptr, nullptr, nullptr};  // device, mode write
};

enum class Mode {
  totals,  // each chunk's ElementTotals into parts[chunk]
  count,   // each chunk's candidates per set into counts
  write,   // the candidates themselves, at offsets
};

inline constexpr int kMaxRefThreads = 256 * 128;
// Each thread's max |o| over finite elements (0 if none) into partial[kMaxRefThreads]. Synchronous.
void launch_max_ref(const double* o, int64_t n, double* partial);
// One pass over every chunk in the given mode; parts[chunks] in mode totals. Synchronous.
void launch_chunks(const PassArgs& a, Mode mode, ElementTotals* parts);

}  // namespace flashcheck::element_pass_gpu
