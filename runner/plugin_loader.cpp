// Wraps each fc_kernel a plugin exports as a Variant.
#include <dlfcn.h>

#include <cctype>
#include <cstddef>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include "gpu/plugin/flashcheck_plugin.h"
#include "runner/registry.h"

namespace flashcheck {

namespace {

// The kernel's declared space, or null: read only when the plugin's fc_kernel is large enough to
// hold the field (a 1.0 plugin's struct ends before it; reading past it would read its neighbour).
const fc_space* declared_space(const fc_kernel* k) {
  if (k->struct_size < offsetof(fc_kernel, space) + sizeof(k->space)) return nullptr;
  return k->space;
}

class PluginVariant final : public Variant {
 public:
  // The fields are read once, here, after check_fields: a plugin cannot change them later.
  PluginVariant(std::shared_ptr<void> lib, const fc_kernel* k) : lib_(std::move(lib)), k_(k), name_(k->name) {
    caps_.memory = k->memory == FC_MEMORY_DEVICE ? Memory::device : Memory::host;
    caps_.lse_base = k->lse_base == FC_LSE_BASE_2 ? LseBase::two : k->lse_base == FC_LSE_NONE ? LseBase::none : LseBase::e;
    caps_.empty_lse = k->empty_lse == FC_EMPTY_LSE_POS_INF ? EmptyRowLse::pos_inf : EmptyRowLse::neg_inf;
    // The plugin's own predicate decides; the campaign draws from the full space unless the
    // plugin declares its own (ABI 1.1), which check_fields has validated.
    caps_.head_dims.clear();
    for (int64_t d = 8; d <= 256; d += 8) caps_.head_dims.push_back(d);
    if (const fc_space* s = declared_space(k)) apply_space(*s);
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
  // The declared space as Capabilities, field for field, so space_for() and declared() treat the
  // plugin exactly like a built-in kernel with the same declaration.
  void apply_space(const fc_space& s) {
    if (s.dtype_mask) {
      caps_.dtypes.clear();
      for (DType d : {DType::f32, DType::f16, DType::bf16})
        if (s.dtype_mask & (1u << (d == DType::f32 ? FC_DTYPE_F32 : d == DType::f16 ? FC_DTYPE_F16 : FC_DTYPE_BF16)))
          caps_.dtypes.push_back(d);
    }
    if (s.causal_mask) {
      caps_.causals.clear();
      for (Causal c : {Causal::none, Causal::top_left, Causal::bottom_right})
        if (s.causal_mask &
            (1u << (c == Causal::none ? FC_CAUSAL_NONE : c == Causal::top_left ? FC_CAUSAL_TOP_LEFT : FC_CAUSAL_BOTTOM_RIGHT)))
          caps_.causals.push_back(c);
    }
    caps_.gqa = s.no_gqa == 0;
    caps_.dv_ne_dqk = s.dv_eq_dqk == 0;
    if (s.max_seq > 0) caps_.max_seq = s.max_seq;
    if (s.n_head_dims) caps_.head_dims.assign(s.head_dims, s.head_dims + s.n_head_dims);
    for (uint32_t i = 0; i < s.n_head_dim_pairs; ++i)
      caps_.head_dim_pairs.emplace_back(s.head_dim_pairs[2 * i], s.head_dim_pairs[2 * i + 1]);
    if (s.n_tiles) {
      caps_.tiles.clear();
      for (uint32_t i = 0; i < s.n_tiles; ++i)
        caps_.tiles.push_back({s.tiles[i].head_dim, s.tiles[i].block_q, s.tiles[i].block_kv, s.tiles[i].causal});
    }
  }
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

// A declared space that a campaign can draw from: every count bounded, every list ascending and
// in range, so a wrong declaration is a clear error instead of a campaign of skipped cases.
void check_space(const std::string& at, const fc_space& s) {
  auto fail = [&](const std::string& why) { throw std::runtime_error(at + ": " + why); };
  if (s.struct_size < offsetof(fc_space, n_tiles) + sizeof(s.n_tiles))
    fail("struct_size " + std::to_string(s.struct_size) + " is smaller than fc_space");
  if (s.dtype_mask & ~7u) fail("dtype_mask has bits beyond FC_DTYPE_BF16");
  if (s.causal_mask & ~7u) fail("causal_mask has bits beyond FC_CAUSAL_BOTTOM_RIGHT");
  if (s.max_seq < 0) fail("max_seq is negative");
  auto list = [&](const char* field, const void* ptr, uint32_t n) {
    if (n > 1024) fail(std::string(field) + ": more than 1024 entries");
    if (n && !ptr) fail(std::string(field) + " is NULL with a nonzero count");
  };
  list("head_dims", s.head_dims, s.n_head_dims);
  list("head_dim_pairs", s.head_dim_pairs, s.n_head_dim_pairs);
  list("tiles", s.tiles, s.n_tiles);
  auto dim = [&](const char* field, int64_t d) {
    if (d < 1 || d > 4096) fail(std::string(field) + " = " + std::to_string(d) + " is not a head dim (1 to 4096)");
  };
  for (uint32_t i = 0; i < s.n_head_dims; ++i) {
    dim("head_dims[]", s.head_dims[i]);
    if (i && s.head_dims[i] <= s.head_dims[i - 1]) fail("head_dims are not ascending");
  }
  for (uint32_t i = 0; i < 2 * s.n_head_dim_pairs; ++i) dim("head_dim_pairs[]", s.head_dim_pairs[i]);
  for (uint32_t i = 0; i < s.n_tiles; ++i) {
    const fc_tile& t = s.tiles[i];
    const std::string row = "tiles[" + std::to_string(i) + "]";
    dim((row + ".head_dim").c_str(), t.head_dim);
    if (t.causal < -1 || t.causal > 1) fail(row + ".causal = " + std::to_string(t.causal) + " (expected -1, 0 or 1)");
    if (t.block_q < 1 || t.block_kv < 1 || t.block_q > 4096 || t.block_kv > 4096)
      fail(row + ": blocks " + std::to_string(t.block_q) + "x" + std::to_string(t.block_kv) + " out of range (1 to 4096)");
    if (i && t.head_dim < s.tiles[i - 1].head_dim) fail("tiles are not ascending in head_dim");
  }
}

// Every field flashcheck reads, checked before a kernel of the plugin is used: a name is typed on
// command lines and printed in reproduce lines, and an enum read out of range would be guessed.
void check_fields(const std::string& lib, uint32_t i, const fc_kernel* k, const std::vector<std::shared_ptr<Variant>>& so_far) {
  const std::string at = "plugin '" + lib + "' kernel " + std::to_string(i);
  if (k->abi_version != FLASHCHECK_PLUGIN_ABI_VERSION)
    throw std::runtime_error(at + " has ABI version " + std::to_string(k->abi_version) + ", this flashcheck speaks " +
                             std::to_string(FLASHCHECK_PLUGIN_ABI_VERSION));
  if (k->struct_size < FC_KERNEL_SIZE_1_0) throw std::runtime_error(at + " was built with a smaller fc_kernel");
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
  if (const fc_space* s = declared_space(k)) check_space(at + " (\"" + name + "\") space", *s);
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
