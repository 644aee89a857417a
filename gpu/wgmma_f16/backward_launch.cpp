// wgmma_f16's backward launch (backward_launch.h).
#include "gpu/wgmma_f16/backward_launch.h"

#include <stdexcept>

#include "gpu/common/bwd_params_host.h"

namespace flashcheck {

BackwardCaps wgmma_f16_backward_caps() {
  BackwardCaps c;
  c.dtypes = {DType::bf16, DType::f16};
  c.head_dims = {64, 128};
  c.deterministic = false;
  c.variants = false;
  return c;
}

void launch_wgmma_f16_backward_problem(const Problem& p, const KernelArgs& a, const BackwardArgs& g) {
  const std::string k = "wgmma_f16 backward";
  if (g.deterministic) throw std::invalid_argument(k + ": no deterministic mode (dQ is summed with atomics)");
  const kernels::BwdParams b = kernels::bwd_params_of(p, a, g, k);
  const bool bf16 = p.dtype == DType::bf16;
  if (p.head_dim_qk == 64) kernels::launch_wgmma_f16_backward<64>(b, bf16, a.stream);
  else kernels::launch_wgmma_f16_backward<128>(b, bf16, a.stream);
}

}  // namespace flashcheck
