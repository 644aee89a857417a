// Wraps each fc_kernel a plugin exports as a Variant.
#include <dlfcn.h>

#include <cmath>
#include <stdexcept>

#include "gpu/plugin/flashcheck_plugin.h"
#include "runner/registry.h"

namespace flashcheck {

namespace {

class PluginVariant final : public Variant {
 public:
  PluginVariant(std::shared_ptr<void> lib, const fc_kernel* k) : lib_(std::move(lib)), k_(k) {
    caps_.memory = k->memory == FC_MEMORY_DEVICE ? Memory::device : Memory::host;
    caps_.lse_base = k->lse_base == FC_LSE_BASE_2 ? LseBase::two : k->lse_base == FC_LSE_NONE ? LseBase::none : LseBase::e;
    caps_.empty_lse = k->empty_lse == FC_EMPTY_LSE_POS_INF ? EmptyRowLse::pos_inf : EmptyRowLse::neg_inf;
    // The plugin's own predicate decides; the campaign draws from the full space.
    caps_.head_dims.clear();
    for (int64_t d = 8; d <= 256; d += 8) caps_.head_dims.push_back(d);
  }
  std::string name() const override { return k_->name ? k_->name : "(unnamed plugin kernel)"; }
  const Capabilities& caps() const override { return caps_; }
  std::optional<std::string> unsupported(const Problem& p) const override {
    fc_problem fp = to_fc(p);
    if (!k_->supports || !k_->supports(&fp)) return "the plugin's supports() said no";
    return std::nullopt;
  }
  void forward(const Problem& p, const void* q, const void* k, const void* v, void* o, float* lse,
               void* stream) const override {
    fc_problem fp = to_fc(p);
    int rc = k_->forward(&fp, q, k, v, o, lse, stream);
    if (rc != 0) {
      std::string why = k_->last_error ? k_->last_error() : "";
      throw std::runtime_error("plugin kernel '" + name() + "' returned " + std::to_string(rc) + (why.empty() ? "" : ": " + why));
    }
  }

 private:
  static fc_problem to_fc(const Problem& p) {
    fc_problem f{};
    f.batch = p.batch;
    f.heads_q = p.heads_q;
    f.heads_kv = p.heads_kv;
    f.seq_q = p.seq_q;
    f.seq_kv = p.seq_kv;
    f.head_dim_qk = p.head_dim_qk;
    f.head_dim_v = p.head_dim_v;
    f.causal = p.causal == Causal::none ? FC_CAUSAL_NONE : p.causal == Causal::top_left ? FC_CAUSAL_TOP_LEFT : FC_CAUSAL_BOTTOM_RIGHT;
    f.scale = p.softmax_scale();
    f.dtype = p.dtype == DType::f32 ? FC_DTYPE_F32 : p.dtype == DType::f16 ? FC_DTYPE_F16 : FC_DTYPE_BF16;
    return f;
  }
  std::shared_ptr<void> lib_;  // keeps the library loaded while any of its kernels lives
  const fc_kernel* k_;
  Capabilities caps_;
};

}  // namespace

std::vector<std::shared_ptr<Variant>> load_plugin(const std::string& path) {
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) throw std::runtime_error("cannot load plugin '" + path + "': " + dlerror());
  std::shared_ptr<void> lib(h, [](void* p) { dlclose(p); });
  auto get = reinterpret_cast<fc_get_kernel_fn>(dlsym(h, FLASHCHECK_PLUGIN_ENTRY));
  if (!get) throw std::runtime_error("plugin '" + path + "' does not export " FLASHCHECK_PLUGIN_ENTRY);
  std::vector<std::shared_ptr<Variant>> out;
  for (uint32_t i = 0;; ++i) {
    const fc_kernel* k = get(i);
    if (!k) break;
    if (k->abi_version != FLASHCHECK_PLUGIN_ABI_VERSION)
      throw std::runtime_error("plugin '" + path + "' kernel " + std::to_string(i) + " has ABI version " +
                               std::to_string(k->abi_version) + ", this flashcheck speaks " +
                               std::to_string(FLASHCHECK_PLUGIN_ABI_VERSION));
    if (k->struct_size < sizeof(fc_kernel))
      throw std::runtime_error("plugin '" + path + "' kernel " + std::to_string(i) + " was built with a smaller fc_kernel");
    if (!k->forward) throw std::runtime_error("plugin '" + path + "' kernel " + std::to_string(i) + " has no forward()");
    out.push_back(std::make_shared<PluginVariant>(lib, k));
    if (i > 1024) throw std::runtime_error("plugin '" + path + "' never returns NULL from " FLASHCHECK_PLUGIN_ENTRY);
  }
  if (out.empty()) throw std::runtime_error("plugin '" + path + "' exports no kernel");
  return out;
}

}  // namespace flashcheck
