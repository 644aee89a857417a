#include "runner/registry.h"

#include <algorithm>
#include <stdexcept>

#include "runner/device.h"
#include "runner/launch_variant.h"

namespace flashcheck {

std::optional<std::string> Variant::unsupported(const Problem& p) const { return caps().refusal(p); }

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
  return Declared{c.lse_base, c.empty_lse, t.block_q, t.block_kv, c.alibi_lse};
}

void Variant::backward(const Problem&, const KernelArgs&, const BackwardArgs&) const {
  throw std::logic_error("kernel '" + name() + "' has no backward pass");
}

std::optional<std::string> Variant::backward_refusal(const Problem& p) const {
  const BackwardCaps* b = backward_caps();
  if (!b) return "kernel " + name() + " has no backward pass";
  if (auto why = backward_space(caps(), *b).refusal(p)) return "its backward does not take it: " + *why;
  return std::nullopt;
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
