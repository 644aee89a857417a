// Launch parameters shared by the built-in CUDA variants (contiguous BHSD tensors). Plain data, no
// project headers: .cu files build as C++17 and include only what the kernels need.
#pragma once
#ifdef FLASHCHECK_PERTURB
#include "gpu/common/perturb.h"
#endif

namespace flashcheck::kernels {

struct FwdParams {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;  // may be null
  int batch, heads_q, heads_kv, seq_q, seq_kv, head_dim_qk, head_dim_v;
  int causal;   // 0 none, 1 top_left, 2 bottom_right
  float scale;  // softmax scale
#ifdef FLASHCHECK_PERTURB
  perturb::Config perturb;  // the instrumented build alone (gpu/common/perturb.h)
#endif
};

// One launch entry point per CUDA variant (defined in its .cu file). Throw std::runtime_error on
// any CUDA error.
void launch_rowwise_f32(const FwdParams& p, void* stream);
void launch_warp_f32x4(const FwdParams& p, void* stream);
void launch_mma_f16(const FwdParams& p, bool bf16, void* stream);

}  // namespace flashcheck::kernels
