#include "gpu/kernel.h"

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
  if (def.name.empty() || !def.launch) throw std::logic_error("a kernel registered without a name or a launch");
  for (const auto& k : list())
    if (k.name == def.name) throw std::logic_error("kernel '" + def.name + "' registered twice");
  list().push_back(std::move(def));
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

}  // namespace flashcheck
