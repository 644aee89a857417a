// Wraps each fc_kernel a plugin exports as a Variant.
#include <dlfcn.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include "gpu/plugin/flashcheck_plugin.h"
#include "runner/registry.h"

namespace flashcheck {

namespace {

class PluginVariant final : public Variant {
 public:
  // The fields are read once, here, after check_fields: a plugin cannot change them later.
  PluginVariant(std::shared_ptr<void> lib, const fc_kernel* k) : lib_(std::move(lib)), k_(k), name_(k->name) {
    caps_.memory = k->memory == FC_MEMORY_DEVICE ? Memory::device : Memory::host;
    caps_.lse_base = k->lse_base == FC_LSE_BASE_2 ? LseBase::two : k->lse_base == FC_LSE_NONE ? LseBase::none : LseBase::e;
    caps_.empty_lse = k->empty_lse == FC_EMPTY_LSE_POS_INF ? EmptyRowLse::pos_inf : EmptyRowLse::neg_inf;
    // The plugin's own predicate decides; the campaign draws from the full space.
    caps_.head_dims.clear();
    for (int64_t d = 8; d <= 256; d += 8) caps_.head_dims.push_back(d);
  }
  std::string name() const override { return name_; }
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
  std::string name_;
  Capabilities caps_;
};

}  // namespace

namespace {

// A name as it can be shown in a message: non-printable bytes escaped, long ones cut.
std::string shown(const char* s) {
  std::string out;
  for (size_t i = 0; s[i] && i < 80; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
    if (i == 79 && s[i + 1]) out += "...";
  }
  return "\"" + out + "\"";
}

bool valid_name(const char* s) {
  size_t n = 0;
  for (; s[n]; ++n) {
    const char c = s[n];
    if (n >= 64 || !(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '+' || c == '-')) return false;
  }
  return n > 0;
}

// Every field flashcheck reads, checked before a kernel of the plugin is used: a name is typed on
// command lines and printed in reproduce lines, and an enum read out of range would be guessed.
void check_fields(const std::string& lib, uint32_t i, const fc_kernel* k, const std::vector<std::shared_ptr<Variant>>& so_far) {
  const std::string at = "plugin '" + lib + "' kernel " + std::to_string(i);
  if (k->abi_version != FLASHCHECK_PLUGIN_ABI_VERSION)
    throw std::runtime_error(at + " has ABI version " + std::to_string(k->abi_version) + ", this flashcheck speaks " +
                             std::to_string(FLASHCHECK_PLUGIN_ABI_VERSION));
  if (k->struct_size < sizeof(fc_kernel)) throw std::runtime_error(at + " was built with a smaller fc_kernel");
  if (!k->name) throw std::runtime_error(at + " has no name");
  if (!valid_name(k->name))
    throw std::runtime_error(at + ": name " + shown(k->name) +
                             " is not a kernel name: 1 to 64 characters of A-Z a-z 0-9 _ . + - (it is typed on command lines)");
  const std::string name = k->name;
  if (name == "all") throw std::runtime_error(at + ": name \"all\" is reserved (--kernel all)");
  if (Registry::builtin().find(name))
    throw std::runtime_error(at + ": name \"" + name + "\" is a built-in kernel's; a plugin kernel may not shadow it");
  for (const auto& v : so_far)
    if (v->name() == name) throw std::runtime_error(at + ": name \"" + name + "\" is used twice in this library");
  auto range = [&](const char* field, int value, int max, const char* accepted) {
    if (value < 0 || value > max)
      throw std::runtime_error(at + " (\"" + name + "\"): " + field + " = " + std::to_string(value) + " is out of range (" +
                               accepted + ")");
  };
  range("memory", static_cast<int>(k->memory), 1, "FC_MEMORY_HOST 0, FC_MEMORY_DEVICE 1");
  range("lse_base", static_cast<int>(k->lse_base), 2, "FC_LSE_BASE_E 0, FC_LSE_BASE_2 1, FC_LSE_NONE 2");
  range("empty_lse", static_cast<int>(k->empty_lse), 1, "FC_EMPTY_LSE_NEG_INF 0, FC_EMPTY_LSE_POS_INF 1");
  if (!k->supports) throw std::runtime_error(at + " (\"" + name + "\") has no supports()");
  if (!k->forward) throw std::runtime_error(at + " (\"" + name + "\") has no forward()");
}

}  // namespace

std::vector<std::shared_ptr<Variant>> load_plugin(const std::string& path) {
  // The path as given, relative to the working directory: without a slash dlopen would search the
  // library path instead and report "No such file" for a file that is right here.
  const std::string open_as = path.find('/') == std::string::npos ? "./" + path : path;
  void* h = dlopen(open_as.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    std::error_code ec;
    const auto cwd = std::filesystem::current_path(ec);
    throw std::runtime_error("cannot load plugin '" + path + "'" +
                             (open_as != path || path[0] != '/' ? " (relative to " + cwd.string() + ")" : std::string()) +
                             ": " + dlerror());
  }
  std::shared_ptr<void> lib(h, [](void* p) { dlclose(p); });
  auto get = reinterpret_cast<fc_get_kernel_fn>(dlsym(h, FLASHCHECK_PLUGIN_ENTRY));
  if (!get) throw std::runtime_error("plugin '" + path + "' does not export " FLASHCHECK_PLUGIN_ENTRY);
  std::vector<std::shared_ptr<Variant>> out;
  for (uint32_t i = 0;; ++i) {
    if (i > 1024) throw std::runtime_error("plugin '" + path + "' never returns NULL from " FLASHCHECK_PLUGIN_ENTRY);
    const fc_kernel* k = get(i);
    if (!k) break;
    check_fields(path, i, k, out);
    out.push_back(std::make_shared<PluginVariant>(lib, k));
  }
  if (out.empty()) throw std::runtime_error("plugin '" + path + "' exports no kernel");
  return out;
}

}  // namespace flashcheck
