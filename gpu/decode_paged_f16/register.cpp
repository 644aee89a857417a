// decode_paged_f16's declaration: what it computes, the tiles it uses, and its launch.
#include "gpu/decode_paged_f16/launch.h"
#include "gpu/decode_paged_f16/tile_size.h"
#include "gpu/kernel.h"

namespace flashcheck {
namespace {

template <int D>
TileShape tiles_at() {
  return {D, kernels::DecodeTraits<D>::kRows, kernels::DecodeTraits<D>::kBlockN};
}

KernelDef decode_paged_f16() {
  Capabilities c;
  c.dtypes = {DType::bf16, DType::f16};
  c.head_dims = {64, 128, 256};
  c.dv_ne_dqk = false;
  // Causal masks as FlashAttention's decode (bottom-right: the last query sees the whole cache,
  // speculative tokens before it one key less each), top-left and none; per query row, so any Sq
  // is computed (Sq·group rows per KV head in chunks of 64; Sq ≤ 64/group reads each K/V byte once).
  c.causals = {Causal::none, Causal::top_left, Causal::bottom_right};
  c.gqa = true;
  c.memory = Memory::device;
  c.min_sm = 80;
  c.max_seq = int64_t{1} << 30;
  c.tiles = {tiles_at<64>(), tiles_at<128>(), tiles_at<256>()};
  c.numerics = {.use_exp2 = true, .round_p = true};
  // LSE in natural log, −inf for a row that sees no key (empty cache, Sq > Skv bottom-right), and
  // NaN/Inf inputs reach exactly the rows that see them (the combine keeps a NaN partial NaN).
  c.lse_base = LseBase::e;
  c.empty_lse = EmptyRowLse::neg_inf;
  c.propagates_nonfinite = true;
  // K/V in a paged cache [pages, page_size, Hkv, D] through block_table and cache_seqlens, any page
  // size (pages in any order, shared, the last one partial), or a dense cache (BHSD/BSHD strides, or
  // packed with cu_seqlens_kv, with seqused_kv); q/o in BHSD, BSHD or packed (THD).
  c.paged = true;
  c.page_sizes = {};
  c.layouts = {Layout::bhsd, Layout::bshd, Layout::thd};
  c.seqused = true;
  KernelDef d{"decode_paged_f16", c, nullptr};
  d.launch2 = [](const Problem& p, const KernelArgs& a) { launch_decode_paged_f16(p, a); };
  return d;
}

}  // namespace
FLASHCHECK_REGISTER_KERNEL(decode_paged_f16, decode_paged_f16());
}  // namespace flashcheck
