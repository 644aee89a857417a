// The host side of wgmma_f16's variant launches at one head-dim pair: the run-time VariantKind and
// tile choice pick one compile-time policy (policy.h), whose tensor maps view the tensors through
// their strides. Included once per pair (variants_dD.cu), so the instantiations of a pair build in
// their own translation unit.
#pragma once
#include <cuda_runtime.h>

#include <stdexcept>

#include "gpu/common/var_params.h"
#include "gpu/wgmma_f16/launch_policy.cuh"
#include "gpu/wgmma_f16/policy.h"
#include "gpu/wgmma_f16/tile_size.h"
#include "gpu/wgmma_f16/tma.cuh"
#include "gpu/wgmma_f16/variant_launch.h"

namespace flashcheck::kernels {

template <int Dqk, int Dv, bool kCausal, bool kBf16, class Mask, class Softcap, class Bias>
void launch_variant_policy(const VarParams& p, TmaRows q, TmaRows kv, int grid_x, cudaStream_t s) {
  using C = WgmmaF16Config<Dqk, Dv, kCausal>;
  using T = typename C::Traits;
  const FwdParams& f = p.base;
  const CUtensorMap mq = tma::make_map_rows(f.q, kBf16, q.outer, f.heads_q, q.rows, Dqk, p.q.seq, p.q.head, p.q.outer, T::kBlockM);
  const CUtensorMap mk = tma::make_map_rows(f.k, kBf16, kv.outer, f.heads_kv, kv.rows, Dqk, p.k.seq, p.k.head, p.k.outer, T::kBlockN);
  const CUtensorMap mv = tma::make_map_rows(f.v, kBf16, kv.outer, f.heads_kv, kv.rows, Dv, p.v.seq, p.v.head, p.v.outer, T::kBlockN);
  const unsigned batch = p.cu_seqlens_q ? 1u : static_cast<unsigned>(f.batch);
  const dim3 grid(static_cast<unsigned>(grid_x), static_cast<unsigned>(f.heads_q), batch);
  launch_policy<T, kBf16, C::kSchedule, WgmmaVariantPolicy<T, Mask, Softcap, Bias>>(mq, mk, mv, p, grid, s);
}

template <int Dqk, int Dv, bool kCausal, bool kBf16, class Mask>
void launch_mods(const VarParams& p, TmaRows q, TmaRows kv, VariantKind k, int grid_x, cudaStream_t s) {
  if (k.softcap && k.alibi) return launch_variant_policy<Dqk, Dv, kCausal, kBf16, Mask, TanhSoftcap, AlibiSymmetric>(p, q, kv, grid_x, s);
  if (k.softcap) return launch_variant_policy<Dqk, Dv, kCausal, kBf16, Mask, TanhSoftcap, NoBias>(p, q, kv, grid_x, s);
  if (k.alibi) return launch_variant_policy<Dqk, Dv, kCausal, kBf16, Mask, NoSoftcap, AlibiSymmetric>(p, q, kv, grid_x, s);
  return launch_variant_policy<Dqk, Dv, kCausal, kBf16, Mask, NoSoftcap, NoBias>(p, q, kv, grid_x, s);
}

// The tiles follow the causal mode alone, as the declaration's (register.cpp, tile_for): a window
// without one runs on the non-causal tiles, so that the replica mirrors the blocking it ran.
template <int Dqk, int Dv, bool kBf16, bool kCausal>
void launch_kind(const VarParams& p, TmaRows q, TmaRows kv, VariantKind k, int grid_x, cudaStream_t s) {
  if (k.window) return launch_mods<Dqk, Dv, kCausal, kBf16, WindowMask>(p, q, kv, k, grid_x, s);
  return launch_mods<Dqk, Dv, kCausal, kBf16, PrefixMask>(p, q, kv, k, grid_x, s);
}

template <int Dqk, int Dv>
void launch_variants_at(const VarParams& p, TmaRows q, TmaRows kv, bool bf16, VariantKind k, int grid_x, void* stream) {
  if (p.base.heads_q > 65535 || (!p.cu_seqlens_q && p.base.batch > 65535))
    throw std::invalid_argument("wgmma_f16 (variant): heads or batch beyond the grid's 65535");
  if (grid_x <= 0) return;  // no query at all (every sequence empty): nothing to write
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const bool causal = p.base.causal != 0;
  if (bf16)
    causal ? launch_kind<Dqk, Dv, true, true>(p, q, kv, k, grid_x, s) : launch_kind<Dqk, Dv, true, false>(p, q, kv, k, grid_x, s);
  else
    causal ? launch_kind<Dqk, Dv, false, true>(p, q, kv, k, grid_x, s) : launch_kind<Dqk, Dv, false, false>(p, q, kv, k, grid_x, s);
}

}  // namespace flashcheck::kernels
