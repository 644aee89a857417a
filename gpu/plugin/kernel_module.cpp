// A built-in kernel folder as a plugin: link this file, gpu/kernel.cpp, reference/problem.cpp and a
// kernel's own translation units (its .cu files and register.cpp) into one shared library, and
// every kernel those units register is exported through the C plugin ABI under its own name plus
// FC_MODULE_SUFFIX (a plugin may not shadow a built-in name).
//
// What it is for: mutation testing (gpu/scripts/mutate.py --plugin builds each mutant of a kernel
// this way, a few hundred kB instead of a whole flashcheck), and checking a kernel folder against a
// flashcheck built without it. The kernel's Capabilities travel as the ABI 1.1 declared space, so a
// campaign on the module draws the same problems and aims at the same tiles as one on the built-in
// kernel; supports() applies Capabilities::refusal, the rule behind the runner's Variant::unsupported.
//
// Link with a version script exporting flashcheck_get_kernel alone: the module's copy of
// registered_kernels() must bind inside the module, never to a flashcheck symbol of the same name.
#include <algorithm>
#include <array>
#include <cstdio>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "gpu/kernel.h"
#include "gpu/plugin/flashcheck_plugin.h"

#ifndef FC_MODULE_SUFFIX
#define FC_MODULE_SUFFIX ".module"
#endif

namespace flashcheck {
namespace {

struct Exported {
  std::string name;
  const KernelDef* def = nullptr;
  std::vector<int64_t> head_dims, pairs;
  std::vector<fc_tile> tiles;
  fc_space space{};
  fc_kernel kernel{};
};

thread_local std::string g_error;

fc_dtype to_fc(DType d) { return d == DType::f32 ? FC_DTYPE_F32 : d == DType::f16 ? FC_DTYPE_F16 : FC_DTYPE_BF16; }
fc_causal to_fc(Causal c) {
  return c == Causal::none ? FC_CAUSAL_NONE : c == Causal::top_left ? FC_CAUSAL_TOP_LEFT : FC_CAUSAL_BOTTOM_RIGHT;
}

Problem from_fc(const fc_problem& f) {
  Problem p;
  p.batch = f.batch;
  p.heads_q = f.heads_q;
  p.heads_kv = f.heads_kv;
  p.seq_q = f.seq_q;
  p.seq_kv = f.seq_kv;
  p.head_dim_qk = f.head_dim_qk;
  p.head_dim_v = f.head_dim_v;
  p.causal = f.causal == FC_CAUSAL_NONE ? Causal::none : f.causal == FC_CAUSAL_TOP_LEFT ? Causal::top_left : Causal::bottom_right;
  p.dtype = f.dtype == FC_DTYPE_F32 ? DType::f32 : f.dtype == FC_DTYPE_F16 ? DType::f16 : DType::bf16;
  p.scale = f.scale;  // already resolved by flashcheck: the kernel gets exactly the judged scale
  return p;
}

std::vector<Exported>& exported();

template <size_t I>
int supports_at(const fc_problem* f) {
  const auto& e = exported();
  return I < e.size() && !e[I].def->caps.refusal(from_fc(*f)) ? 1 : 0;
}

template <size_t I>
int forward_at(const fc_problem* f, const void* q, const void* k, const void* v, void* o, float* lse, void* stream) {
  try {
    exported().at(I).def->launch(from_fc(*f), q, k, v, o, lse, stream);
    return 0;
  } catch (const std::exception& ex) {
    g_error = ex.what();
  } catch (...) {
    g_error = "unknown exception";
  }
  return 1;
}

const char* last_error() { return g_error.c_str(); }

// The C ABI passes plain function pointers without a context argument, so each slot gets its own
// instantiation; a module holds one kernel folder, which registers one or two kernels.
constexpr size_t kSlots = 8;
using SupportsFn = int (*)(const fc_problem*);
using ForwardFn = int (*)(const fc_problem*, const void*, const void*, const void*, void*, float*, void*);
template <size_t... I>
constexpr auto supports_table(std::index_sequence<I...>) { return std::array<SupportsFn, kSlots>{&supports_at<I>...}; }
template <size_t... I>
constexpr auto forward_table(std::index_sequence<I...>) { return std::array<ForwardFn, kSlots>{&forward_at<I>...}; }

std::vector<Exported>& exported() {
  static std::vector<Exported> out = [] {
    std::vector<Exported> v;
    v.reserve(kSlots);  // the fc_kernel and fc_space structs are handed out by address: no reallocation
    const auto sup = supports_table(std::make_index_sequence<kSlots>{});
    const auto fwd = forward_table(std::make_index_sequence<kSlots>{});
    for (const KernelDef& d : registered_kernels()) {
      if (v.size() == kSlots) {
        std::fprintf(stderr, "kernel_module: more than %zu kernels registered; the rest are not exported\n", kSlots);
        break;
      }
      Exported& e = v.emplace_back();
      const Capabilities& c = d.caps;
      e.def = &d;
      e.name = d.name + FC_MODULE_SUFFIX;
      e.head_dims = c.head_dims;
      for (auto [a, b] : c.head_dim_pairs) e.pairs.insert(e.pairs.end(), {a, b});
      for (const TileShape& t : c.tiles)
        e.tiles.push_back({t.head_dim, t.causal, static_cast<int32_t>(t.block_q), static_cast<int32_t>(t.block_kv)});
      for (DType t : c.dtypes) e.space.dtype_mask |= 1u << to_fc(t);
      for (Causal m : c.causals) e.space.causal_mask |= 1u << to_fc(m);
      e.space.struct_size = sizeof(fc_space);
      e.space.no_gqa = c.gqa ? 0 : 1;
      e.space.dv_eq_dqk = c.dv_ne_dqk ? 0 : 1;
      e.space.max_seq = c.max_seq;
      e.space.head_dims = e.head_dims.data();
      e.space.n_head_dims = static_cast<uint32_t>(e.head_dims.size());
      e.space.head_dim_pairs = e.pairs.data();
      e.space.n_head_dim_pairs = static_cast<uint32_t>(e.pairs.size() / 2);
      e.space.tiles = e.tiles.data();
      e.space.n_tiles = static_cast<uint32_t>(e.tiles.size());
      const size_t i = v.size() - 1;
      e.kernel = fc_kernel{FLASHCHECK_PLUGIN_ABI_VERSION,
                           sizeof(fc_kernel),
                           e.name.c_str(),
                           c.memory == Memory::device ? FC_MEMORY_DEVICE : FC_MEMORY_HOST,
                           c.lse_base == LseBase::two ? FC_LSE_BASE_2 : c.lse_base == LseBase::none ? FC_LSE_NONE : FC_LSE_BASE_E,
                           c.empty_lse == EmptyRowLse::pos_inf ? FC_EMPTY_LSE_POS_INF : FC_EMPTY_LSE_NEG_INF,
                           sup[i],
                           fwd[i],
                           &last_error,
                           &e.space};
    }
    return v;
  }();
  return out;
}

}  // namespace
}  // namespace flashcheck

extern "C" __attribute__((visibility("default"))) const fc_kernel* flashcheck_get_kernel(uint32_t index) {
  const auto& e = flashcheck::exported();
  return index < e.size() ? &e[index].kernel : nullptr;
}
