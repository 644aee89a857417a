// mma_f16's declaration: what it can do, the tiles it uses, and how it is launched.
#include "gpu/common/make_params.h"
#include "gpu/common/var_params_host.h"
#include "gpu/kernel.h"
#include "gpu/mma_f16/backward_launch.h"
#include "gpu/mma_f16/launch2.h"
#include "gpu/mma_f16/tile_size.h"

namespace flashcheck {
namespace {

template <int D>
TileShape tiles_at() {
  return {D, kernels::MmaF16Traits<D>::kBlockM, kernels::MmaF16Traits<D>::kBlockN};
}

KernelDef mma_f16() {
  Capabilities c;
  c.dtypes = {DType::bf16, DType::f16};
  c.head_dims = {64, 128, 256};
  c.dv_ne_dqk = false;
  c.memory = Memory::device;
  c.max_tensor_elements = kNoElementLimit;  // offsets in size_t; `run --big` passes (PERF.md, session 4)
  c.min_sm = 80;
  c.tiles = {tiles_at<64>(), tiles_at<128>(), tiles_at<256>()};
  c.numerics = {.use_exp2 = true, .round_p = true};
  c.max_seq = int64_t{1} << 30;
  // Problem model 2 through VarParams (launch2.cpp, policy.h): windows with whole KV tiles outside
  // them never loaded, softcap, ALiBi, sinks, BSHD and THD with seqused_kv.
  kernels::declare_variant_capabilities(c);
  KernelDef d{"mma_f16", c, [](const Problem& p, const void* q, const void* k, const void* v, void* o, float* lse, void* stream) {
                kernels::launch_mma_f16(kernels::make_params(p, q, k, v, o, lse), p.dtype == DType::bf16, stream);
              }};
  d.launch2 = launch_mma_f16_problem;
  // FlashAttention-2's backward (bwd_tile_size.h): atomic dQ, or a deterministic mode; plain problems.
  d.backward = launch_mma_f16_backward_problem;
  d.backward_caps = mma_f16_backward_caps();
  return d;
}

}  // namespace
FLASHCHECK_REGISTER_KERNEL(mma_f16, mma_f16());
}  // namespace flashcheck
