// wgmma_f16's launch for problem model 2 (gpu/kernel.h LaunchFn2): a plain problem in contiguous
// BHSD goes to the plain instantiation, the one wgmma_f16 always launched; anything else becomes
// VarParams (gpu/common/var_params_host.h, which checks the buffers) plus the views its tensor
// maps take, and the variant instantiation its policy names (policy.h).
#include "gpu/wgmma_f16/launch2.h"

#include <stdexcept>
#include <string>

#include "gpu/common/make_params.h"
#include "gpu/common/var_params_host.h"
#include "gpu/wgmma_f16/launch.h"
#include "gpu/wgmma_f16/tile_size.h"
#include "gpu/wgmma_f16/variant_launch.h"

namespace flashcheck {
namespace {

using kernels::TmaRows;
using kernels::VarParams;

template <int Dqk, int Dv>
void launch_at(const VarParams& v, const Problem& p, kernels::VariantKind k, void* stream) {
  // The q-tile height is the same for the causal and the non-causal tiles of a pair.
  constexpr int kBlockM = kernels::WgmmaF16Config<Dqk, Dv, true>::Traits::kBlockM;
  static_assert(kBlockM == kernels::WgmmaF16Config<Dqk, Dv, false>::Traits::kBlockM, "one q-tile height per pair");
  TmaRows q{p.batch, p.seq_q}, kv{p.batch, p.seq_kv};
  if (p.layout == Layout::thd) {
    // One sequence after another: the maps span every token, the kernel starts at cu_seqlens.
    int64_t kv_tokens = 0;
    for (int64_t b = 0; b < p.batch; ++b) kv_tokens += p.skv_stored(b);
    q = {1, p.total_q()};
    kv = {1, kv_tokens};
  }
  kernels::launch_wgmma_f16_variant<Dqk, Dv>(v, q, kv, p.dtype == DType::bf16, k,
                                             kernels::grid_tiles(p, kBlockM, "wgmma_f16"), stream);
}

}  // namespace

void launch_wgmma_f16_problem(const Problem& p, const KernelArgs& a) {
  if (p.dtype != DType::bf16 && p.dtype != DType::f16) throw std::invalid_argument("wgmma_f16: bf16 or f16 only");
  if (p.paged() || is_fp8(p.dtype)) throw std::invalid_argument("wgmma_f16: no paged caches, no fp8");
  if (p.plain() && kernels::contiguous_bhsd(p, a)) {
    kernels::launch_wgmma_f16(kernels::make_params(p, a.q.data, a.k.data, a.v.data, a.o.data, static_cast<float*>(a.lse.data)),
                              p.dtype == DType::bf16, a.stream);
    return;
  }
  const VarParams v = kernels::variant_params(p, a, "wgmma_f16");
  if (v.base.heads_kv <= 0 || v.base.heads_q % v.base.heads_kv != 0)
    throw std::invalid_argument("wgmma_f16: heads_q must be a multiple of heads_kv");
  const kernels::VariantKind k{!p.window.none(), p.softcap > 0, p.alibi != Alibi::none};
  switch (p.head_dim_qk * 1000 + p.head_dim_v) {
    case 64064: return launch_at<64, 64>(v, p, k, a.stream);
    case 128128: return launch_at<128, 128>(v, p, k, a.stream);
    case 192128: return launch_at<192, 128>(v, p, k, a.stream);
    case 256256: return launch_at<256, 256>(v, p, k, a.stream);
    default:
      throw std::invalid_argument("wgmma_f16: head dims (" + std::to_string(p.head_dim_qk) + ", " +
                                  std::to_string(p.head_dim_v) + ") not compiled");
  }
}

}  // namespace flashcheck
