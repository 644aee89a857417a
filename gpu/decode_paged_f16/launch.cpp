// decode_paged_f16's launch for problem model 2: the Problem and KernelArgs become DecodeParams,
// and everything the kernels assume of the buffers is checked here, so a view they cannot address
// is an error naming the tensor, never a wrong read.
#include "gpu/decode_paged_f16/launch.h"

#include <bit>
#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "reference/conventions.h"

namespace flashcheck {
namespace {

using kernels::DecodeParams;
using kernels::DecodeStrides;

[[noreturn]] void refuse(const std::string& why) { throw std::invalid_argument("decode_paged_f16: " + why); }

// The kernels copy and store 16-byte chunks of q, k, v, o rows (cp.async; the combine's stores are
// 4–16 bytes at offsets that are multiples of their size): every row starts 16-byte aligned, i.e.
// the pointer and the strides it combines are multiples of 8 elements.
DecodeStrides strides_of(const TensorRef& t, const char* name, bool chunked) {
  if (!t.data) refuse(std::string(name) + " is NULL");
  if (t.stride_seq < 0 || t.stride_head < 0 || t.stride_outer < 0) refuse(std::string("negative strides of ") + name);
  if (chunked && (reinterpret_cast<uintptr_t>(t.data) % 16 != 0 || t.stride_seq % 8 != 0 || t.stride_head % 8 != 0 ||
                  t.stride_outer % 8 != 0))
    refuse(std::string("rows of ") + name + " must start 16-byte aligned (pointer and strides in multiples of 8 elements)");
  return {t.stride_outer, t.stride_seq, t.stride_head};
}

int as_int(int64_t x, const char* what) {
  if (x < 0 || x > INT_MAX) refuse(std::string(what) + " past int32");
  return static_cast<int>(x);
}

}  // namespace

void launch_decode_paged_f16(const Problem& p, const KernelArgs& a, const kernels::DecodePlanOverride& force) {
  if (p.dtype != DType::bf16 && p.dtype != DType::f16) refuse("bf16 or f16 only");
  if (p.head_dim_v != p.head_dim_qk) refuse("Dv = Dqk only");
  if (!p.window.none() || p.softcap != 0 || p.alibi != Alibi::none || p.sinks)
    refuse("no sliding window, softcap, ALiBi or sinks");
  const bool packed = p.layout == Layout::thd, paged = p.paged();
  DecodeParams d{};
  d.q = a.q.data;
  d.k = a.k.data;
  d.v = a.v.data;
  d.o = a.o.data;
  d.lse = static_cast<float*>(a.lse.data);
  d.sq = strides_of(a.q, "q", true);
  d.sk = strides_of(a.k, "k", true);
  d.sv = strides_of(a.v, "v", true);
  d.so = strides_of(a.o, "o", true);
  if (a.lse.data) d.slse = strides_of(a.lse, "lse", false);
  if (packed) {
    if (!a.cu_seqlens_q) refuse("a packed batch without cu_seqlens_q");
    d.cu_seqlens_q = a.cu_seqlens_q;
    if (!paged) {
      if (!a.cu_seqlens_kv) refuse("a packed batch without cu_seqlens_kv");
      d.cu_seqlens_kv = a.cu_seqlens_kv;
    }
  }
  if (!p.seqused_kv.empty()) {
    if (!a.seqused_kv) refuse("seqused_kv is NULL");
    d.seqused_kv = a.seqused_kv;
  }
  if (paged) {
    if (!a.block_table || !a.cache_seqlens) refuse("a paged cache without block_table or cache_seqlens");
    d.block_table = a.block_table;
    d.cache_seqlens = a.cache_seqlens;
    d.max_pages = a.max_pages_per_seq;
    d.page_size = as_int(p.page_size, "page size");
    if ((d.page_size & (d.page_size - 1)) == 0) d.page_shift = std::countr_zero(static_cast<unsigned>(d.page_size));
  }
  d.batch = as_int(p.batch, "batch");
  d.heads_q = as_int(p.heads_q, "heads_q");
  d.heads_kv = as_int(p.heads_kv, "heads_kv");
  d.group = as_int(p.group(), "group");
  d.seq_q = as_int(p.seq_q, "seq_q");
  d.seq_kv = as_int(p.seq_kv, "seq_kv");
  if (int64_t(d.seq_q) * d.group > INT_MAX / 2) refuse("queries × group past int32");
  d.causal = p.causal == Causal::none ? 0 : p.causal == Causal::top_left ? 1 : 2;
  d.sl2 = static_cast<float>(p.softmax_scale() * kLog2e);
  // Workspace rows (b, h, i) for every i < seq_q: their count is indexed in 64 bits.
  const bool bf16 = p.dtype == DType::bf16;
  switch (p.head_dim_qk) {
    case 64: return kernels::launch_decode_at<64>(d, bf16, paged, p.seq_kv, force, a.stream);
    case 128: return kernels::launch_decode_at<128>(d, bf16, paged, p.seq_kv, force, a.stream);
    case 256: return kernels::launch_decode_at<256>(d, bf16, paged, p.seq_kv, force, a.stream);
    default: refuse("head dim " + std::to_string(p.head_dim_qk) + " not compiled");
  }
}

void launch_decode_paged_f16(const Problem& p, const KernelArgs& a) { launch_decode_paged_f16(p, a, {}); }

}  // namespace flashcheck
