// The host half of a variant launch (var_params_host.h), for mma_f16 and wgmma_f16 alike.
#include "gpu/common/var_params_host.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "gpu/common/make_params.h"
#include "reference/conventions.h"

namespace flashcheck::kernels {
namespace {

// A window bound as the kernel takes it: −1 unbounded, else at most 2^30 (sequences are at most
// 2^30 long, max_seq), so that position + bound sums stay inside the kernel's 64-bit clamp.
int clamp_bound(int64_t x) { return x < 0 ? -1 : static_cast<int>(std::min<int64_t>(x, int64_t{1} << 30)); }

}  // namespace

// Both kernels copy and store whole 16-byte chunks (cp.async, TMA, uint4): every row of q, k, v and o
// must start 16-byte aligned, i.e. the pointer and every stride it combines in multiples of 8
// elements; a row stride must also fit the int the main loop steps with.
RowStrides3 row_strides(const TensorRef& t, const char* name, bool chunked, bool packed, const std::string& k) {
  const std::string n(name);
  if (!t.data) throw std::invalid_argument(k + ": " + n + " is NULL");
  if (t.stride_seq < 0 || t.stride_head < 0 || t.stride_outer < 0)
    throw std::invalid_argument(k + ": negative strides of " + n + " are not addressed");
  if (t.stride_seq > INT_MAX) throw std::invalid_argument(k + ": the row stride of " + n + " passes 2^31 elements");
  if (chunked) {
    const bool aligned = reinterpret_cast<uintptr_t>(t.data) % 16 == 0 && t.stride_seq % 8 == 0 && t.stride_head % 8 == 0 &&
                         (packed || t.stride_outer % 8 == 0);
    if (!aligned)
      throw std::invalid_argument(k + ": rows of " + n + " must start 16-byte aligned (pointer and strides in "
                                  "multiples of 8 elements)");
  }
  return {packed ? 0 : t.stride_outer, t.stride_seq, t.stride_head};
}

// Contiguous BHSD, as a plain launch (FwdParams) indexes it.
bool contiguous_bhsd(const Problem& p, const KernelArgs& a) {
  auto is = [](const TensorRef& t, int64_t h, int64_t s, int64_t w) {
    return t.stride_outer == h * s * w && t.stride_seq == w && t.stride_head == s * w;
  };
  const bool lse_ok = !a.lse.data || (a.lse.stride_outer == p.heads_q * p.seq_q && a.lse.stride_seq == 1 &&
                                      a.lse.stride_head == p.seq_q);
  return is(a.q, p.heads_q, p.seq_q, p.head_dim_qk) && is(a.k, p.heads_kv, p.seq_kv, p.head_dim_qk) &&
         is(a.v, p.heads_kv, p.seq_kv, p.head_dim_v) && is(a.o, p.heads_q, p.seq_q, p.head_dim_v) && lse_ok;
}

VarParams variant_params(const Problem& p, const KernelArgs& a, const char* kernel) {
  const std::string k(kernel);
  const bool packed = p.layout == Layout::thd;
  VarParams v{};
  v.base = kernels::make_params(p, a.q.data, a.k.data, a.v.data, a.o.data, static_cast<float*>(a.lse.data));
  if (p.seq_q > INT_MAX || p.seq_kv > INT_MAX || p.batch > INT_MAX) throw std::invalid_argument(k + ": lengths past int32");
  v.q = row_strides(a.q, "q", true, packed, k);
  v.k = row_strides(a.k, "k", true, packed, k);
  v.v = row_strides(a.v, "v", true, packed, k);
  v.o = row_strides(a.o, "o", true, packed, k);
  if (a.lse.data) v.lse = row_strides(a.lse, "lse", false, packed, k);
  if (packed) {
    if (!a.cu_seqlens_q || !a.cu_seqlens_kv) throw std::invalid_argument(k + ": a packed batch without cu_seqlens");
    v.cu_seqlens_q = a.cu_seqlens_q;
    v.cu_seqlens_kv = a.cu_seqlens_kv;
  }
  if (!p.seqused_kv.empty()) {
    if (!a.seqused_kv) throw std::invalid_argument(k + ": seqused_kv is NULL");
    v.seqused_kv = a.seqused_kv;
  }
  // The window in flashcheck's inclusive convention (the kernels declare it). Under a causal mode the
  // right bound is min(right, 0) with −1 counting as +∞: always 0.
  v.window_left = clamp_bound(p.window.left);
  v.window_right = p.causal != Causal::none ? 0 : clamp_bound(p.window.right);
  // The replica's numerics (reference/replica.cpp, FlashAttention 2's): raw scores until the
  // exponent; with a softcap the raw unit is the tanh, c·log2 e turns it into log2 units.
  const double scale = p.softmax_scale();
  if (p.softcap > 0) {
    v.sl2 = static_cast<float>(p.softcap * kLog2e);
    v.softcap_x = static_cast<float>(static_cast<float>(scale) / static_cast<float>(p.softcap));  // the replica's cap_mul
    v.softcap_exp = static_cast<float>(2.0 * kLog2e * scale / p.softcap);
    v.alibi_unit = static_cast<float>(p.softcap);
  } else {
    v.sl2 = static_cast<float>(scale) * 1.4426950408889634f;  // the plain kernel's own product
    v.alibi_unit = static_cast<float>(scale);
  }
  if (p.alibi != Alibi::none) {
    if (p.alibi != Alibi::symmetric) throw std::invalid_argument(k + ": ALiBi symmetric only");
    if (!a.alibi_slopes) throw std::invalid_argument(k + ": alibi_slopes is NULL");
    v.alibi_slopes = a.alibi_slopes;
    v.alibi_per_batch = p.alibi_per_batch ? 1 : 0;
  }
  if (p.sinks) {
    if (!a.sinks) throw std::invalid_argument(k + ": sinks is NULL");
    v.sinks = a.sinks;
  }
  return v;
}

// q-tiles of the grid's x dimension: per sequence (dense), or of every sequence together (packed:
// the kernel maps its index to a sequence through cu_seqlens_q, tiles of empty sequences none).
int grid_tiles(const Problem& p, int block_m, const char* kernel) {
  const std::string k(kernel);
  int64_t n = 0;
  if (p.layout == Layout::thd)
    for (int64_t b = 0; b < p.batch; ++b) n += (p.sq(b) + block_m - 1) / block_m;
  else
    n = (p.seq_q + block_m - 1) / block_m;
  if (n > INT_MAX) throw std::invalid_argument(k + ": more q-tiles than a grid holds");
  return static_cast<int>(n);
}

void declare_variant_capabilities(Capabilities& c) {
  c.windows = true;
  c.window_convention = WindowConvention::inclusive;
  c.softcap = true;
  c.alibi = {Alibi::symmetric};
  c.alibi_per_batch = true;
  c.alibi_lse = AlibiLse::exact;
  c.sinks = true;
  c.layouts = {Layout::bhsd, Layout::bshd, Layout::thd};
  c.seqused = true;
}

}  // namespace flashcheck::kernels
