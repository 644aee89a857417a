#include "runner/registry.h"

#include <algorithm>
#include <stdexcept>

#include "runner/device.h"
#include "runner/launch_variant.h"

namespace flashcheck {

std::optional<std::string> Variant::unsupported(const Problem& p) const {
  const Capabilities& c = caps();
  auto has = [](const auto& v, auto x) { return std::find(v.begin(), v.end(), x) != v.end(); };
  if (!has(c.dtypes, p.dtype)) return "dtype " + std::string(to_string(p.dtype));
  if (!has(c.head_dims, p.head_dim_qk)) return "head_dim_qk " + std::to_string(p.head_dim_qk);
  if (!has(c.head_dims, p.head_dim_v)) return "head_dim_v " + std::to_string(p.head_dim_v);
  if (p.head_dim_v != p.head_dim_qk && !c.dv_ne_dqk) return "head_dim_v != head_dim_qk";
  if (p.head_dim_v > p.head_dim_qk) return "head_dim_v > head_dim_qk";
  if (!c.head_dim_pairs.empty() && !has(c.head_dim_pairs, std::pair{p.head_dim_qk, p.head_dim_v}))
    return "head dims (" + std::to_string(p.head_dim_qk) + ", " + std::to_string(p.head_dim_v) + ") not compiled";
  if (!has(c.causals, p.causal)) return "causal " + std::string(to_string(p.causal));
  if (p.heads_q != p.heads_kv && !c.gqa) return "GQA";
  if (p.seq_q > c.max_seq || p.seq_kv > c.max_seq) return "sequence longer than " + std::to_string(c.max_seq);
  // Device kernels launch (q-tiles, heads, batch) grids, and declare how far their indexing goes.
  if (c.memory == Memory::device && (p.heads_q > 65535 || p.batch > 65535)) return "heads or batch beyond the grid's 65535";
  const int64_t largest = std::max({p.q_elems(), p.k_elems(), p.v_elems(), p.o_elems()});
  if (c.memory == Memory::device && largest > c.max_tensor_elements)
    return "a tensor of " + std::to_string(largest) + " elements, past the kernel's declared " +
           std::to_string(c.max_tensor_elements);
  return std::nullopt;
}

std::optional<std::string> Variant::unavailable() const {
  if (caps().memory != Memory::device) return std::nullopt;
  if (auto why = device::unavailable()) return why;
  const int sm = device::compute_capability();
  if (caps().exact_sm ? sm != caps().min_sm : sm < caps().min_sm)
    return "needs sm_" + std::to_string(caps().min_sm) + (caps().exact_sm ? "a (compute capability exactly " : " (at least ") +
           std::to_string(caps().min_sm / 10) + "." + std::to_string(caps().min_sm % 10) + "), this GPU is sm_" +
           std::to_string(sm);
  return std::nullopt;
}

Declared Variant::declared(const Problem& p) const {
  const Capabilities& c = caps();
  const TileShape t = c.tile_for(p.head_dim_qk, p.causal != Causal::none);
  return Declared{c.lse_base, c.empty_lse, t.block_q, t.block_kv};
}

Registry& Registry::builtin() {
  static Registry r = [] {
    Registry reg;
    reg.add(make_replica_variant());
    for (const KernelDef& k : registered_kernels()) reg.add(std::make_shared<KernelVariant>(k));
    return reg;
  }();
  return r;
}

void Registry::add(std::shared_ptr<Variant> v) {
  if (find(v->name())) throw std::invalid_argument("variant '" + v->name() + "' registered twice");
  variants_.push_back(std::move(v));
}

std::shared_ptr<Variant> Registry::find(const std::string& name) const {
  for (auto& v : variants_)
    if (v->name() == name) return v;
  return nullptr;
}

}  // namespace flashcheck
