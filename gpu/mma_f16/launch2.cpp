// mma_f16's launch for problem model 2 (gpu/kernel.h LaunchFn2): a plain problem in contiguous
// BHSD goes to the plain instantiation, the one mma_f16 always launched; anything else becomes
// VarParams (gpu/common/var_params_host.h, which checks the buffers) and the variant
// instantiation its policy names (policy.h).
#include "gpu/mma_f16/launch2.h"

#include <stdexcept>
#include <string>

#include "gpu/common/make_params.h"
#include "gpu/mma_f16/tile_size.h"
#include "gpu/common/var_params_host.h"
#include "gpu/mma_f16/variant_launch.h"

namespace flashcheck {
namespace {

using kernels::VarParams;

template <int D>
void launch_at(const VarParams& v, const Problem& p, kernels::VariantKind k, void* stream) {
  kernels::launch_mma_f16_variant<D>(v, p.dtype == DType::bf16, k, kernels::grid_tiles(p, kernels::MmaF16Traits<D>::kBlockM, "mma_f16"), stream);
}

}  // namespace

void launch_mma_f16_problem(const Problem& p, const KernelArgs& a) {
  if (p.dtype != DType::bf16 && p.dtype != DType::f16) throw std::invalid_argument("mma_f16: bf16 or f16 only");
  if (p.paged() || is_fp8(p.dtype)) throw std::invalid_argument("mma_f16: no paged caches, no fp8");
  if (p.head_dim_v != p.head_dim_qk) throw std::invalid_argument("mma_f16: Dv = Dqk only");
  if (p.plain() && kernels::contiguous_bhsd(p, a)) {
    kernels::launch_mma_f16(kernels::make_params(p, a.q.data, a.k.data, a.v.data, a.o.data, static_cast<float*>(a.lse.data)),
                            p.dtype == DType::bf16, a.stream);
    return;
  }
  const VarParams v = kernels::variant_params(p, a, "mma_f16");
  const kernels::VariantKind k{!p.window.none(), p.softcap > 0, p.alibi != Alibi::none};
  switch (p.head_dim_qk) {
    case 64: return launch_at<64>(v, p, k, a.stream);
    case 128: return launch_at<128>(v, p, k, a.stream);
    case 256: return launch_at<256>(v, p, k, a.stream);
    default: throw std::invalid_argument("mma_f16: head dim " + std::to_string(p.head_dim_qk) + " not compiled");
  }
}

}  // namespace flashcheck
