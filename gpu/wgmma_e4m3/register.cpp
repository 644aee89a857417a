// wgmma_e4m3's declaration: e4m3 inputs with 16-bit output, head dims 64, 128 and 256, every causal
// alignment and GQA, descale per tensor or per (batch, KV head); plain BHSD problems otherwise.
// Its numerics are the replica's fp8 defaults (P·2^8 rounded to e4m3, reference/replica.h), and its
// sm_90a code runs on compute capability 9.0 alone.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include "gpu/common/make_params.h"
#include "gpu/common/var_params_host.h"
#include "gpu/kernel.h"
#include "gpu/wgmma_e4m3/launch.h"
#include "gpu/wgmma_e4m3/tile_size.h"

namespace flashcheck {
namespace {

template <int D, bool kCausal>
TileShape tiles_at() {
  using T = typename kernels::WgmmaE4m3Config<D, kCausal>::Traits;
  return {D, T::kBlockM, T::kBlockN, kCausal ? 1 : 0};
}

// Any problem the declaration below admits; the view is checked here, where the tensors have names.
void launch_problem(const Problem& p, const KernelArgs& a) {
  if (p.dtype != DType::e4m3) throw std::invalid_argument("wgmma_e4m3: e4m3 inputs only");
  if (p.o_dtype() != DType::bf16 && p.o_dtype() != DType::f16) throw std::invalid_argument("wgmma_e4m3: bf16 or f16 output");
  Problem dense = p;  // plain() refuses fp8 itself: ask the rest of it
  dense.dtype = DType::bf16;
  if (!dense.plain()) throw std::invalid_argument("wgmma_e4m3: no variants beyond causal masks, GQA and descale");
  if (!kernels::contiguous_bhsd(p, a)) throw std::invalid_argument("wgmma_e4m3: contiguous BHSD tensors only");
  // Q and K are read by TMA, V by 16-byte loads of the transpose, O stored in 16-byte chunks.
  for (const auto& [t, name] : {std::pair{a.q.data, "q"}, {a.k.data, "k"}, {a.v.data, "v"}, {a.o.data, "o"}})
    if (reinterpret_cast<uintptr_t>(t) % 16 != 0)
      throw std::invalid_argument(std::string("wgmma_e4m3: ") + name + " does not start 16-byte aligned");
  // The grid is (q-tiles, Hq, B) and the transpose's (key blocks, Hkv, B): y and z stop at 65535.
  if (p.heads_q > 65535 || p.batch > 65535)
    throw std::invalid_argument("wgmma_e4m3: at most 65535 query heads and 65535 sequences per launch");
  kernels::E4m3Params ep{};
  ep.base = kernels::make_params(p, a.q.data, a.k.data, a.v.data, a.o.data, static_cast<float*>(a.lse.data));
  if (p.descale != Descale::none) {
    if (!a.descale_q || !a.descale_k || !a.descale_v) throw std::invalid_argument("wgmma_e4m3: a descale factor is missing");
    ep.descale_q = a.descale_q, ep.descale_k = a.descale_k, ep.descale_v = a.descale_v;
    ep.descale_per_head = p.descale == Descale::head ? 1 : 0;
  }
  kernels::launch_wgmma_e4m3(ep, p.o_dtype() == DType::bf16, a.stream);
}

KernelDef wgmma_e4m3() {
  Capabilities c;
  c.dtypes = {DType::e4m3};
  c.out_dtypes = {DType::bf16, DType::f16};
  c.descales = {Descale::tensor, Descale::head};
  c.head_dims = {64, 128, 256};
  c.dv_ne_dqk = false;
  c.memory = Memory::device;
  c.min_sm = 90;
  c.exact_sm = true;
  c.tiles = {tiles_at<64, false>(),  tiles_at<64, true>(),  tiles_at<128, false>(),
             tiles_at<128, true>(), tiles_at<256, false>(), tiles_at<256, true>()};
  c.numerics = {.use_exp2 = true, .round_p = true};
  c.max_seq = int64_t{1} << 30;
  KernelDef d{"wgmma_e4m3", c, nullptr};
  d.launch2 = launch_problem;
  return d;
}

}  // namespace
FLASHCHECK_REGISTER_KERNEL(wgmma_e4m3, wgmma_e4m3());
}  // namespace flashcheck
