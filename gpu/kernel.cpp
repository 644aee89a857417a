#include "gpu/kernel.h"

#include <algorithm>
#include <stdexcept>

namespace flashcheck {

namespace {
// A function-local static: registrars in other translation units run during static initialisation
// in unspecified order, and this list must exist before the first of them.
std::vector<KernelDef>& list() {
  static std::vector<KernelDef> kernels;
  return kernels;
}
}  // namespace

const std::vector<KernelDef>& registered_kernels() { return list(); }

KernelRegistrar::KernelRegistrar(KernelDef def) {
  if (def.name.empty() || (!def.launch && !def.launch2)) throw std::logic_error("a kernel registered without a name or a launch");
  for (const auto& k : list())
    if (k.name == def.name) throw std::logic_error("kernel '" + def.name + "' registered twice");
  list().push_back(std::move(def));
}

std::optional<std::string> Capabilities::refusal(const Problem& p) const {
  auto has = [](const auto& v, auto x) { return std::find(v.begin(), v.end(), x) != v.end(); };
  if (!has(dtypes, p.dtype)) return "dtype " + std::string(to_string(p.dtype));
  if (!head_dims.empty() && !has(head_dims, p.head_dim_qk)) return "head_dim_qk " + std::to_string(p.head_dim_qk);
  if (!head_dims.empty() && !has(head_dims, p.head_dim_v)) return "head_dim_v " + std::to_string(p.head_dim_v);
  if (p.head_dim_v != p.head_dim_qk && !dv_ne_dqk) return "head_dim_v != head_dim_qk";
  if (p.head_dim_v > p.head_dim_qk) return "head_dim_v > head_dim_qk";
  if (!head_dim_pairs.empty() && !has(head_dim_pairs, std::pair{p.head_dim_qk, p.head_dim_v}))
    return "head dims (" + std::to_string(p.head_dim_qk) + ", " + std::to_string(p.head_dim_v) + ") not compiled";
  if (!has(causals, p.causal)) return "causal " + std::string(to_string(p.causal));
  if (p.heads_q != p.heads_kv && !gqa) return "GQA";
  if (p.seq_q > max_seq || p.seq_kv > max_seq) return "sequence longer than " + std::to_string(max_seq);
  for (int64_t b = 0; (equal_lengths || seq_multiple > 1) && b < p.batch; ++b) {
    if (equal_lengths && p.sq(b) != p.skv(b))
      return "Sq " + std::to_string(p.sq(b)) + " != Skv " + std::to_string(p.skv(b)) + " (equal lengths declared)";
    if (seq_multiple > 1)
      for (int64_t n : {p.sq(b), p.skv_stored(b), p.skv(b)})
        if (n % seq_multiple != 0)
          return "sequence length " + std::to_string(n) + " is not a multiple of " + std::to_string(seq_multiple);
  }
  // Problem model 2: each variant only where declared.
  if (!p.window.none() && !windows) return "sliding window";
  if (p.softcap != 0 && !softcap) return "softcap";
  if (p.alibi != Alibi::none && !has(alibi, p.alibi)) return "ALiBi " + std::string(to_string(p.alibi));
  if (p.alibi_per_batch && !alibi_per_batch) return "ALiBi slopes per batch";
  if (p.sinks && !sinks) return "attention sinks";
  if (!has(layouts, p.layout)) return "layout " + std::string(to_string(p.layout));
  if (!p.seqused_kv.empty() && !seqused) return "seqused_kv";
  if (p.paged() && !paged) return "paged KV cache";
  if (p.paged() && !page_sizes.empty() && !has(page_sizes, p.page_size)) return "page size " + std::to_string(p.page_size);
  if (is_fp8(p.dtype) && !has(out_dtypes, p.o_dtype())) return "output dtype " + std::string(to_string(p.o_dtype()));
  if (p.descale != Descale::none && !has(descales, p.descale)) return "descale " + std::string(to_string(p.descale));
  // Lengths reach kernels as int32 (cu_seqlens, seqused_kv, cache_seqlens, as FlashAttention's):
  // a batch past that cannot be handed to any kernel.
  int64_t stored_kv = 0;
  for (int64_t b = 0; b < p.batch && b < static_cast<int64_t>(p.seqlens_kv.size()); ++b) stored_kv += p.skv_stored(b);
  if (p.layout == Layout::thd && (p.total_q() > INT32_MAX || stored_kv > INT32_MAX))
    return "sequence lengths past the int32 entries of cu_seqlens (at most 2147483647 tokens)";
  if ((p.paged() || !p.seqused_kv.empty()) && p.seq_kv > INT32_MAX) return "keys per sequence past int32 (cache_seqlens, seqused_kv)";
  // Device kernels launch (q-tiles, heads, batch) grids, and declare how far their indexing goes.
  if (memory == Memory::device && (p.heads_q > 65535 || p.batch > 65535)) return "heads or batch beyond the grid's 65535";
  const int64_t largest = std::max({p.q_elems(), p.k_elems(), p.v_elems(), p.o_elems()});
  if (memory == Memory::device && largest > max_tensor_elements)
    return "a tensor of " + std::to_string(largest) + " elements, past the kernel's declared " +
           std::to_string(max_tensor_elements);
  return std::nullopt;
}

TileShape Capabilities::tile_for(int64_t head_dim, bool causal) const {
  if (tiles.empty()) return {};
  const TileShape* last = nullptr;
  for (const TileShape& t : tiles) {
    if (t.causal != -1 && t.causal != static_cast<int>(causal)) continue;
    if (t.head_dim >= head_dim) return t;
    last = &t;
  }
  return last ? *last : tiles.back();
}

Capabilities backward_space(const Capabilities& forward, const BackwardCaps& b) {
  Capabilities c = forward;
  auto has = [](const auto& v, auto x) { return std::find(v.begin(), v.end(), x) != v.end(); };
  if (!b.dtypes.empty()) std::erase_if(c.dtypes, [&](DType d) { return !has(b.dtypes, d); });
  if (!b.head_dims.empty()) {
    // A forward that takes any head dim leaves the backward's list; one that lists its own keeps
    // those both list (and the compiled pairs made of them).
    if (c.head_dims.empty()) c.head_dims = b.head_dims;
    else std::erase_if(c.head_dims, [&](int64_t d) { return !has(b.head_dims, d); });
    std::erase_if(c.head_dim_pairs, [&](const auto& pr) { return !has(c.head_dims, pr.first) || !has(c.head_dims, pr.second); });
  }
  if (!b.variants) {  // plain attention: no window, score modifier, sinks, listed batches or fp8
    c.windows = c.softcap = c.alibi_per_batch = c.sinks = c.seqused = c.paged = false;
    c.alibi.clear();
    c.page_sizes.clear();
    c.descales.clear();
    c.layouts = {Layout::bhsd};
    std::erase_if(c.dtypes, is_fp8);
  }
  return c;
}

}  // namespace flashcheck
