// mma_f16's backward launch (backward_launch.h): Problem + the forward's KernelArgs + BackwardArgs
// -> BwdParams (gpu/common/bwd_params_host.h checks what the passes assume), then its passes.
#include "gpu/mma_f16/backward_launch.h"

#include "gpu/common/bwd_params_host.h"

namespace flashcheck {

BackwardCaps mma_f16_backward_caps() {
  BackwardCaps c;
  c.dtypes = {DType::bf16, DType::f16};
  c.head_dims = {64, 128};
  c.deterministic = true;
  c.variants = false;
  return c;
}

void launch_mma_f16_backward_problem(const Problem& p, const KernelArgs& a, const BackwardArgs& g) {
  const kernels::BwdParams b = kernels::bwd_params_of(p, a, g, "mma_f16 backward");
  const bool bf16 = p.dtype == DType::bf16;
  if (p.head_dim_qk == 64) kernels::launch_mma_f16_backward<64>(b, bf16, g.deterministic, a.stream);
  else kernels::launch_mma_f16_backward<128>(b, bf16, g.deterministic, a.stream);
}

}  // namespace flashcheck
