// wgmma_f16's declaration: the (Dqk, Dv) pairs it compiles, its tiles per head dim and causal mode
// (from tile_size.h), the variants it computes, and that its sm_90a code runs on compute
// capability 9.0 alone.
#include "gpu/common/make_params.h"
#include "gpu/common/var_params_host.h"
#include "gpu/kernel.h"
#include "gpu/wgmma_f16/backward_launch.h"
#include "gpu/wgmma_f16/launch.h"
#include "gpu/wgmma_f16/launch2.h"
#include "gpu/wgmma_f16/tile_size.h"

namespace flashcheck {
namespace {

template <int Dqk, int Dv, bool kCausal>
TileShape tiles_at() {
  using T = typename kernels::WgmmaF16Config<Dqk, Dv, kCausal>::Traits;
  return {Dqk, T::kBlockM, T::kBlockN, kCausal ? 1 : 0};
}

KernelDef wgmma_f16() {
  Capabilities c;
  c.dtypes = {DType::bf16, DType::f16};
  c.head_dims = {64, 128, 192, 256};
  c.head_dim_pairs = {{64, 64}, {128, 128}, {192, 128}, {256, 256}};
  c.memory = Memory::device;
  c.max_tensor_elements = kNoElementLimit;  // offsets in size_t; `run --big` passes (PERF.md, session 4)
  c.min_sm = 90;
  c.exact_sm = true;
  c.tiles = {tiles_at<64, 64, false>(),   tiles_at<64, 64, true>(),   tiles_at<128, 128, false>(),
             tiles_at<128, 128, true>(),  tiles_at<192, 128, false>(), tiles_at<192, 128, true>(),
             tiles_at<256, 256, false>(), tiles_at<256, 256, true>()};
  c.numerics = {.use_exp2 = true, .round_p = true};
  c.max_seq = int64_t{1} << 30;
  // Problem model 2 through VarParams (launch2.cpp, policy.h): windows with whole KV tiles outside
  // them never loaded, softcap, ALiBi, sinks, BSHD and THD with seqused_kv.
  kernels::declare_variant_capabilities(c);
  KernelDef d{"wgmma_f16", c, [](const Problem& p, const void* q, const void* k, const void* v, void* o, float* lse, void* stream) {
                kernels::launch_wgmma_f16(kernels::make_params(p, q, k, v, o, lse), p.dtype == DType::bf16, stream);
              }};
  d.launch2 = launch_wgmma_f16_problem;
  // FlashAttention-2's backward on warpgroup MMA (bwd_tile_size.h): atomic dQ; plain problems.
  d.backward = launch_wgmma_f16_backward_problem;
  d.backward_caps = wgmma_f16_backward_caps();
  return d;
}

}  // namespace
FLASHCHECK_REGISTER_KERNEL(wgmma_f16, wgmma_f16());
}  // namespace flashcheck
