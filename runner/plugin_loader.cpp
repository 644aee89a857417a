// Loads a plugin library: finds its entry (ABI 2's flashcheck_get_kernel2, else ABI 1's
// flashcheck_get_kernel), checks every field of every kernel it exports, and wraps each as a
// Variant (runner/plugin_variants.h). A wrong field is a refusal naming it, never a guess.
#include <dlfcn.h>

#include <cctype>
#include <cstddef>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <stdexcept>

#include "gpu/plugin/flashcheck_plugin.h"
#include "runner/plugin_variants.h"
#include "runner/registry.h"

namespace flashcheck {

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
// in range, so a wrong declaration is a clear error instead of a campaign of skipped cases. The
// fields fc_space (ABI 1.1) and fc_space2 share; `dtypes` is the highest fc_dtype the ABI takes.
template <class Space>
void check_common_space(const std::function<void(const std::string&)>& fail, const Space& s, uint32_t dtype_bits,
                        const char* last_dtype) {
  if (s.dtype_mask & ~dtype_bits) fail("dtype_mask has bits beyond " + std::string(last_dtype));
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

void check_space(const std::string& at, const fc_space& s) {
  auto fail = [&](const std::string& why) { throw std::runtime_error(at + ": " + why); };
  if (s.struct_size < offsetof(fc_space, n_tiles) + sizeof(s.n_tiles))
    fail("struct_size " + std::to_string(s.struct_size) + " is smaller than fc_space");
  check_common_space(fail, s, 7u, "FC_DTYPE_BF16");
}

// ABI 2's space: the shared fields, then every mask without unknown bits and every enum in range.
void check_space2(const std::string& at, const fc_space2& s) {
  auto fail = [&](const std::string& why) { throw std::runtime_error(at + ": " + why); };
  if (s.struct_size < FC_SPACE2_SIZE_2_0)
    fail("struct_size " + std::to_string(s.struct_size) + " is smaller than ABI 2.0's fc_space2 (" +
         std::to_string(FC_SPACE2_SIZE_2_0) + ")");
  check_common_space(fail, s, 0x1fu, "FC_DTYPE_E5M2");
  auto mask = [&](const char* field, uint32_t value, uint32_t known, const char* names) {
    if (value & ~known) {
      char bits[16];
      std::snprintf(bits, sizeof bits, "0x%x", value & ~known);
      fail(std::string(field) + " has unknown bits " + bits + " (known: " + names + ")");
    }
  };
  mask("layout_mask", s.layout_mask, 7u, "1 << FC_LAYOUT_BHSD, _BSHD, _THD");
  mask("variant_mask", s.variant_mask, 0x3fu, "FC_VARIANT_WINDOW ... FC_VARIANT_PAGED");
  mask("alibi_mask", s.alibi_mask, 7u, "1 << FC_ALIBI_NONE, _SYMMETRIC, _SIGNED");
  mask("out_dtype_mask", s.out_dtype_mask, (1u << FC_DTYPE_F16) | (1u << FC_DTYPE_BF16),
       "1 << FC_DTYPE_F16, 1 << FC_DTYPE_BF16: an fp8 problem's output");
  mask("descale_mask", s.descale_mask, 7u, "1 << FC_DESCALE_NONE, _TENSOR, _HEAD");
  if ((s.variant_mask & FC_VARIANT_ALIBI_PER_BATCH) && !(s.alibi_mask & 6u))
    fail("variant_mask has FC_VARIANT_ALIBI_PER_BATCH but alibi_mask declares no ALiBi form");
  if (s.n_page_sizes > 1024) fail("page_sizes: more than 1024 entries");
  if (s.n_page_sizes && !s.page_sizes) fail("page_sizes is NULL with a nonzero count");
  if (s.n_page_sizes && !(s.variant_mask & FC_VARIANT_PAGED)) fail("page_sizes are given but variant_mask lacks FC_VARIANT_PAGED");
  for (uint32_t i = 0; i < s.n_page_sizes; ++i) {
    if (s.page_sizes[i] < 1 || s.page_sizes[i] > (int64_t{1} << 30))
      fail("page_sizes[" + std::to_string(i) + "] = " + std::to_string(s.page_sizes[i]) + " is not a page size (1 to 2^30)");
    if (i && s.page_sizes[i] <= s.page_sizes[i - 1]) fail("page_sizes are not ascending");
  }
  if (static_cast<int>(s.window_convention) < 0 || static_cast<int>(s.window_convention) > 1)
    fail("window_convention = " + std::to_string(static_cast<int>(s.window_convention)) +
         " is out of range (FC_WINDOW_INCLUSIVE 0, FC_WINDOW_LEFT_EXCLUSIVE 1)");
  if (static_cast<int>(s.alibi_lse) < 0 || static_cast<int>(s.alibi_lse) > 1)
    fail("alibi_lse = " + std::to_string(static_cast<int>(s.alibi_lse)) +
         " is out of range (FC_ALIBI_LSE_EXACT 0, FC_ALIBI_LSE_KEY_OFFSET 1)");
  if (s.struct_size >= offsetof(fc_space2, seq_multiple) + sizeof(s.seq_multiple)) {  // ABI 2.1's limits
    mask("limit_mask", s.limit_mask, FC_LIMIT_EQUAL_LENGTHS | FC_LIMIT_FINITE_INPUTS, "FC_LIMIT_EQUAL_LENGTHS, FC_LIMIT_FINITE_INPUTS");
    if (s.seq_multiple < 0 || s.seq_multiple > (int64_t{1} << 30))
      fail("seq_multiple = " + std::to_string(s.seq_multiple) + " is out of range (0 or 1: any; up to 2^30)");
  }
}

// The fields both ABIs' kernels have, checked before a kernel of the plugin is used: a name is
// typed on command lines and printed in reproduce lines, and an enum read out of range would be
// guessed. Returns the kernel's name.
template <class Kernel>
std::string check_kernel(const std::string& at, const Kernel* k, const std::vector<std::shared_ptr<Variant>>& so_far) {
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
  return name;
}

// The major version is the entry's: each entry serves its own, and anything else is refused with
// the reason (a kernel built against a future ABI may lay out its structs differently).
void check_version(const std::string& at, uint32_t got, uint32_t want, const char* entry) {
  if (got != want)
    throw std::runtime_error(at + " has ABI version " + std::to_string(got) + "; " + entry + " serves ABI " + std::to_string(want) +
                             " (this flashcheck speaks ABI 1 through " FLASHCHECK_PLUGIN_ENTRY " and ABI 2 through "
                             FLASHCHECK_PLUGIN_ENTRY2 ")");
}

void check_fields(const std::string& lib, uint32_t i, const fc_kernel* k, const std::vector<std::shared_ptr<Variant>>& so_far) {
  const std::string at = "plugin '" + lib + "' kernel " + std::to_string(i);
  check_version(at, k->abi_version, FLASHCHECK_PLUGIN_ABI_VERSION, FLASHCHECK_PLUGIN_ENTRY);
  if (k->struct_size < FC_KERNEL_SIZE_1_0) throw std::runtime_error(at + " was built with a smaller fc_kernel");
  const std::string name = check_kernel(at, k, so_far);
  // 1.1's space, read only when the struct is large enough to hold the pointer.
  if (k->struct_size >= offsetof(fc_kernel, space) + sizeof(k->space) && k->space)
    check_space(at + " (\"" + name + "\") space", *k->space);
}

void check_fields2(const std::string& lib, uint32_t i, const fc_kernel2* k, const std::vector<std::shared_ptr<Variant>>& so_far) {
  const std::string at = "plugin '" + lib + "' kernel " + std::to_string(i);
  check_version(at, k->abi_version, FLASHCHECK_PLUGIN_ABI2_VERSION, FLASHCHECK_PLUGIN_ENTRY2);
  if (k->struct_size < FC_KERNEL2_SIZE_2_0)
    throw std::runtime_error(at + ": struct_size " + std::to_string(k->struct_size) + " is smaller than ABI 2.0's fc_kernel2 (" +
                             std::to_string(FC_KERNEL2_SIZE_2_0) + ")");
  const std::string name = check_kernel(at, k, so_far);
  if (k->flags & ~FC_KERNEL_DETERMINISTIC_BACKWARD)
    throw std::runtime_error(at + " (\"" + name + "\"): flags has unknown bits (known: FC_KERNEL_DETERMINISTIC_BACKWARD)");
  if (k->space) check_space2(at + " (\"" + name + "\") space", *k->space);
}

void* open_library(const std::string& path) {
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
  return h;
}

// Every kernel one entry returns, checked and wrapped.
template <class Kernel, class Get, class Check, class Make>
std::vector<std::shared_ptr<Variant>> load_entry(const std::string& path, const std::shared_ptr<void>& lib, Get get,
                                                 const char* entry, Check check, Make make) {
  std::vector<std::shared_ptr<Variant>> out;
  for (uint32_t i = 0;; ++i) {
    if (i > 1024) throw std::runtime_error("plugin '" + path + "' never returns NULL from " + entry);
    const Kernel* k = get(i);
    if (!k) break;
    check(path, i, k, out);
    out.push_back(make(lib, k));
  }
  if (out.empty()) throw std::runtime_error("plugin '" + path + "' exports no kernel");
  return out;
}

std::vector<std::shared_ptr<Variant>> load(const std::string& path, bool abi2_allowed) {
  void* h = open_library(path);
  std::shared_ptr<void> lib(h, [](void* p) { dlclose(p); });
  if (abi2_allowed)
    if (auto get2 = reinterpret_cast<fc_get_kernel2_fn>(dlsym(h, FLASHCHECK_PLUGIN_ENTRY2)))
      return load_entry<fc_kernel2>(path, lib, get2, FLASHCHECK_PLUGIN_ENTRY2, check_fields2, make_plugin2_variant);
  auto get = reinterpret_cast<fc_get_kernel_fn>(dlsym(h, FLASHCHECK_PLUGIN_ENTRY));
  if (!get)
    throw std::runtime_error("plugin '" + path + "' does not export " FLASHCHECK_PLUGIN_ENTRY +
                             std::string(abi2_allowed ? " or " FLASHCHECK_PLUGIN_ENTRY2 : ""));
  return load_entry<fc_kernel>(path, lib, get, FLASHCHECK_PLUGIN_ENTRY, check_fields, make_plugin_variant);
}

}  // namespace

std::vector<std::shared_ptr<Variant>> load_plugin(const std::string& path) { return load(path, true); }
std::vector<std::shared_ptr<Variant>> load_plugin_abi1(const std::string& path) { return load(path, false); }

}  // namespace flashcheck
