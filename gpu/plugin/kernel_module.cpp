// A built-in kernel folder as a plugin: link this file, gpu/kernel.cpp, reference/problem.cpp and a
// kernel's own translation units (its .cu files and register.cpp) into one shared library, and
// every kernel those units register is exported through the C plugin ABI under its own name plus
// FC_MODULE_SUFFIX (a plugin may not shadow a built-in name).
//
// What it is for: mutation testing (tools/mutate --plugin builds each mutant of a kernel
// this way, a few hundred kB instead of a whole flashcheck), and checking a kernel folder against a
// flashcheck built without it. Both entries are exported: ABI 2 (flashcheck_get_kernel2), whose
// declared space is the kernel's whole Capabilities (variants, layouts, page sizes, conventions),
// and ABI 1 (flashcheck_get_kernel, plain problems, the 1.1 space). A campaign on the module draws
// the same problems and aims at the same tiles as one on the built-in kernel; supports() applies
// Capabilities::refusal, the rule behind the runner's Variant::unsupported.
//
// Built with FC_MODULE_BACKWARD, the module is its kernels' backward pass as well: a kernel with a
// KernelDef::backward exports it as ABI 2's backward entry (determinism as FC_KERNEL_DETERMINISTIC_
// BACKWARD), and both entries declare the backward's space, backward_space(caps, backward_caps)
// (gpu/kernel.h), instead of the forward's. Why a build flag: fc_kernel2 has one declared space and
// one supports() for both passes, and flashcheck gives a plugin's backward its forward's space; a
// module declaring the forward's whole space (windows, Dqk = 256, ...) would have `run --backward`
// hand its backward problems it refuses, failed rather than skipped. So a `run --backward` campaign
// on such a module draws exactly the problems it draws on the built-in kernel's backward. Without
// the flag the module is the forward's alone, as before (the backward is not exported); a kernel
// without a backward is exported the same either way.
//
// Link with a version script exporting the two entries alone: the module's copy of
// registered_kernels() must bind inside the module, never to a flashcheck symbol of the same name.
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdint>
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "gpu/kernel.h"
#include "gpu/plugin/flashcheck_plugin.h"
#ifdef FC_MODULE_CUDA
#include <cuda_runtime_api.h>
#endif

#ifndef FC_MODULE_SUFFIX
#define FC_MODULE_SUFFIX ".module"
#endif
#ifdef FC_MODULE_BACKWARD
constexpr bool kBackwardModule = true;
#else
constexpr bool kBackwardModule = false;
#endif

namespace flashcheck {
namespace {

struct Exported {
  std::string name;
  const KernelDef* def = nullptr;
  bool backward = false;  // the backward is exported (FC_MODULE_BACKWARD and the kernel has one)
  Capabilities caps;      // the declared space: the forward's, or the backward's when exported
  std::vector<int64_t> head_dims, pairs, page_sizes;
  std::vector<fc_tile> tiles;
  fc_space space{};
  fc_kernel kernel{};
  fc_space2 space2{};
  fc_kernel2 kernel2{};
};

thread_local std::string g_error;

constexpr DType kDTypes[] = {DType::f32, DType::f16, DType::bf16, DType::e4m3, DType::e5m2};  // fc_dtype's order
constexpr Causal kCausals[] = {Causal::none, Causal::top_left, Causal::bottom_right};          // fc_causal's order

fc_dtype to_fc(DType d) { return static_cast<fc_dtype>(std::find(std::begin(kDTypes), std::end(kDTypes), d) - kDTypes); }
fc_causal to_fc(Causal c) { return static_cast<fc_causal>(std::find(std::begin(kCausals), std::end(kCausals), c) - kCausals); }
DType from_fc(fc_dtype d) { return kDTypes[std::clamp(static_cast<int>(d), 0, 4)]; }
Causal from_fc(fc_causal c) { return kCausals[std::clamp(static_cast<int>(c), 0, 2)]; }

Problem from_fc(const fc_problem& f) {
  Problem p;
  p.batch = f.batch;
  p.heads_q = f.heads_q;
  p.heads_kv = f.heads_kv;
  p.seq_q = f.seq_q;
  p.seq_kv = f.seq_kv;
  p.head_dim_qk = f.head_dim_qk;
  p.head_dim_v = f.head_dim_v;
  p.causal = from_fc(f.causal);
  p.dtype = f.dtype == FC_DTYPE_F32 ? DType::f32 : f.dtype == FC_DTYPE_F16 ? DType::f16 : DType::bf16;
  p.scale = f.scale;  // already resolved by flashcheck: the kernel gets exactly the judged scale
  return p;
}

// One per-sequence list from int32 side data, checked: a caller's list that contradicts the
// problem is refused naming the field, never read past.
std::vector<int64_t> lengths(const int32_t* x, int64_t n, const char* field) {
  if (!x) throw InvalidProblem(std::string(field) + " is NULL, and the problem needs it");
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = x[i];
  return out;
}
std::vector<int64_t> from_cu(const int32_t* cu, int64_t batch, int64_t total, const char* field) {
  const std::vector<int64_t> c = lengths(cu, batch + 1, field);
  if (c[0] != 0) throw InvalidProblem(std::string(field) + "[0] = " + std::to_string(c[0]) + ", not 0");
  std::vector<int64_t> out(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    out[static_cast<size_t>(b)] = c[static_cast<size_t>(b) + 1] - c[static_cast<size_t>(b)];
    if (out[static_cast<size_t>(b)] < 0)
      throw InvalidProblem(std::string(field) + " decreases at " + std::to_string(b + 1) + " (" +
                           std::to_string(c[static_cast<size_t>(b)]) + " then " + std::to_string(c[static_cast<size_t>(b) + 1]) + ")");
  }
  if (c.back() != total)
    throw InvalidProblem(std::string(field) + "[" + std::to_string(batch) + "] = " + std::to_string(c.back()) + ", but total is " +
                         std::to_string(total));
  return out;
}

// The problem an ABI 2 call describes. In supports() (a == null) the per-sequence lengths are not
// known yet: every sequence stands at the longest. The window stays in the kernel's convention:
// its launch2 takes it so (gpu/kernel.h).
Problem from_fc2(const fc_problem2& f, const fc_forward_args* a) {
  Problem p;
  p.batch = f.batch;
  p.heads_q = f.heads_q;
  p.heads_kv = f.heads_kv;
  p.head_dim_qk = f.head_dim_qk;
  p.head_dim_v = f.head_dim_v;
  p.seq_q = f.max_seqlen_q;
  p.seq_kv = f.max_seqlen_kv;
  p.causal = from_fc(f.causal);
  p.dtype = from_fc(f.dtype);
  if (is_fp8(p.dtype)) p.out_dtype = from_fc(f.out_dtype);
  p.scale = f.scale;
  p.window = {f.window_left, f.window_right};
  p.softcap = f.softcap;
  p.alibi = f.alibi == FC_ALIBI_SYMMETRIC ? Alibi::symmetric : f.alibi == FC_ALIBI_SIGNED ? Alibi::signed_ : Alibi::none;
  p.alibi_per_batch = f.alibi_per_batch != 0;
  p.sinks = f.has_sinks != 0;
  p.layout = f.layout == FC_LAYOUT_BSHD ? Layout::bshd : f.layout == FC_LAYOUT_THD ? Layout::thd : Layout::bhsd;
  p.page_size = f.page_size;
  p.descale = f.descale == FC_DESCALE_TENSOR ? Descale::tensor : f.descale == FC_DESCALE_HEAD ? Descale::head : Descale::none;
  const size_t B = static_cast<size_t>(std::max<int64_t>(f.batch, 0));
  if (!a) {
    if (f.varlen) p.seqlens_q.assign(B, f.max_seqlen_q);
    if (f.varlen || f.page_size > 0) p.seqlens_kv.assign(B, f.max_seqlen_kv);
    if (f.has_seqused_kv) p.seqused_kv.assign(B, f.max_seqlen_kv);
    return p;
  }
  if (f.varlen) p.seqlens_q = from_cu(a->cu_seqlens_q, f.batch, f.total_q, "cu_seqlens_q");
  if (f.page_size > 0) p.seqlens_kv = lengths(a->cache_seqlens, f.batch, "cache_seqlens");
  else if (f.varlen) p.seqlens_kv = from_cu(a->cu_seqlens_kv, f.batch, f.total_kv, "cu_seqlens_kv");
  if (f.has_seqused_kv) p.seqused_kv = lengths(a->seqused_kv, f.batch, "seqused_kv");
  normalize(p);
  if (p.seq_q > f.max_seqlen_q || p.seq_kv > f.max_seqlen_kv)
    throw InvalidProblem("a sequence is longer than max_seqlen_q / max_seqlen_kv");
  validate(p);
  if (p.paged()) {
    if (!a->block_table || f.max_pages_per_seq < 1) throw InvalidProblem("block_table is NULL, and the problem is paged");
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t j = 0; j * p.page_size < p.skv(b); ++j) {
        if (j >= f.max_pages_per_seq) throw InvalidProblem("cache_seqlens[" + std::to_string(b) + "] reaches past the block table");
        const int32_t page = a->block_table[b * f.max_pages_per_seq + j];
        if (page < 0 || page >= f.num_pages)
          throw InvalidProblem("block_table[" + std::to_string(b) + "][" + std::to_string(j) + "] = " + std::to_string(page) +
                               " is outside [0, num_pages = " + std::to_string(f.num_pages) + ")");
      }
  }
  return p;
}

TensorRef from_fc(const fc_tensor& t) { return {t.data, t.stride_outer, t.stride_seq, t.stride_head, t.numel}; }

KernelArgs args_of(const fc_problem2& f, const fc_forward_args& a) {
  KernelArgs k;
  k.q = from_fc(a.q), k.k = from_fc(a.k), k.v = from_fc(a.v), k.o = from_fc(a.o), k.lse = from_fc(a.lse);
  k.cu_seqlens_q = a.cu_seqlens_q, k.cu_seqlens_kv = a.cu_seqlens_kv, k.seqused_kv = a.seqused_kv;
  k.block_table = a.block_table, k.cache_seqlens = a.cache_seqlens;
  k.alibi_slopes = a.alibi_slopes, k.sinks = a.sinks;
  k.descale_q = a.descale_q, k.descale_k = a.descale_k, k.descale_v = a.descale_v;
  k.num_pages = f.num_pages, k.max_pages_per_seq = f.max_pages_per_seq;
  k.stream = a.stream;
  return k;
}

// Contiguous BHSD arguments of a plain problem: a launch2-only kernel reached through ABI 1.
KernelArgs bhsd_args(const Problem& p, const void* q, const void* k, const void* v, void* o, float* lse, void* stream) {
  auto t = [](const void* d, int64_t h, int64_t s, int64_t w, int64_t b) {
    return TensorRef{const_cast<void*>(d), h * s * w, w, s * w, b * h * s * w};
  };
  KernelArgs a;
  a.q = t(q, p.heads_q, p.seq_q, p.head_dim_qk, p.batch);
  a.k = t(k, p.heads_kv, p.seq_kv, p.head_dim_qk, p.batch);
  a.v = t(v, p.heads_kv, p.seq_kv, p.head_dim_v, p.batch);
  a.o = t(o, p.heads_q, p.seq_q, p.head_dim_v, p.batch);
  a.lse = {lse, p.heads_q * p.seq_q, 1, p.seq_q, p.batch * p.heads_q * p.seq_q};
  a.stream = stream;
  return a;
}

std::vector<Exported>& exported();

// A problem the kernel computes: inside its declared space, and plain unless it has a launch2.
bool computes(const Exported& e, const Problem& p) { return !e.caps.refusal(p) && (e.def->launch2 || p.plain()); }

template <class F>
int guarded(F&& f) {
  try {
    f();
    return 0;
  } catch (const std::exception& ex) {
    g_error = ex.what();
  } catch (...) {
    g_error = "unknown exception";
  }
  return 1;
}

template <size_t I>
int supports_at(const fc_problem* f) {
  const auto& e = exported();
  return I < e.size() && computes(e[I], from_fc(*f)) ? 1 : 0;
}

template <size_t I>
int forward_at(const fc_problem* f, const void* q, const void* k, const void* v, void* o, float* lse, void* stream) {
  return guarded([&] {
    const KernelDef& d = *exported().at(I).def;
    const Problem p = from_fc(*f);
    if (d.launch) d.launch(p, q, k, v, o, lse, stream);
    else d.launch2(p, bhsd_args(p, q, k, v, o, lse, stream));
  });
}

template <size_t I>
int supports2_at(const fc_problem2* f) {
  const auto& e = exported();
  return I < e.size() && computes(e[I], from_fc2(*f, nullptr)) ? 1 : 0;
}

// A device kernel's side tensors live in device memory (the ABI hands every tensor in the kernel's
// memory), but the Problem is built on the host from the lengths in them: the int32 ones are read
// through host copies. A module built without CUDA (FC_MODULE_CUDA unset) cannot read them, and
// says so rather than dereferencing a device pointer.
struct HostSideTensors {
  std::vector<int32_t> cu_q, cu_kv, used, cache, table;
  fc_forward_args args{};
};

void copy_to_host([[maybe_unused]] std::vector<int32_t>& dst, const int32_t*& p, int64_t n) {
  if (!p || n <= 0) return;
#ifdef FC_MODULE_CUDA
  dst.resize(static_cast<size_t>(n));
  const cudaError_t e = cudaMemcpy(dst.data(), p, dst.size() * sizeof(int32_t), cudaMemcpyDeviceToHost);
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("kernel_module: reading a side tensor from the device: ") + cudaGetErrorString(e));
  p = dst.data();
#else
  throw std::invalid_argument("kernel_module: this module was built without CUDA and cannot read a device kernel's "
                              "cu_seqlens, seqused_kv or cache tensors (build it with FC_MODULE_CUDA)");
#endif
}

const fc_forward_args* host_readable(const fc_problem2& f, const fc_forward_args& a, HostSideTensors& h) {
  h.args = a;
  const int64_t B = f.batch;
  if (f.varlen) copy_to_host(h.cu_q, h.args.cu_seqlens_q, B + 1);
  if (f.varlen && f.page_size <= 0) copy_to_host(h.cu_kv, h.args.cu_seqlens_kv, B + 1);
  if (f.has_seqused_kv) copy_to_host(h.used, h.args.seqused_kv, B);
  if (f.page_size > 0) {
    copy_to_host(h.cache, h.args.cache_seqlens, B);
    copy_to_host(h.table, h.args.block_table, B * f.max_pages_per_seq);
  }
  return &h.args;
}

// The problem of an ABI 2 call (forward or backward), refused unless inside the declared space.
Problem called_problem(const Exported& e, const fc_problem2& f, const fc_forward_args& a) {
  HostSideTensors host;
  const Problem p = from_fc2(f, e.def->caps.memory == Memory::device ? host_readable(f, a, host) : &a);
  if (auto why = e.caps.refusal(p)) throw std::invalid_argument("a problem outside the kernel's declared space: " + *why);
  return p;
}

template <size_t I>
int forward2_at(const fc_problem2* f, const fc_forward_args* a) {
  return guarded([&] {
    const KernelDef& d = *exported().at(I).def;
    const Problem p = called_problem(exported().at(I), *f, *a);
    if (d.launch2) {
      d.launch2(p, args_of(*f, *a));
    } else {
      if (!p.plain()) throw std::invalid_argument("the kernel has no launch2: plain problems only");
      d.launch(p, a->q.data, a->k.data, a->v.data, a->o.data, static_cast<float*>(a->lse.data), a->stream);
    }
  });
}

// fc_backward_args as BackwardArgs, field for field (the runner's Plugin2Variant::backward writes
// them the other way). A caller whose struct is older than this module's is refused, not read past.
BackwardArgs backward_args_of(const fc_backward_args& g) {
  if (g.struct_size < sizeof(fc_backward_args))
    throw std::invalid_argument("fc_backward_args.struct_size " + std::to_string(g.struct_size) + " < " +
                                std::to_string(sizeof(fc_backward_args)) + " (an older flashcheck)");
  BackwardArgs b;
  b.dout = from_fc(g.dout), b.dq = from_fc(g.dq), b.dk = from_fc(g.dk), b.dv = from_fc(g.dv);
  b.dsinks = g.dsinks;
  b.deterministic = g.deterministic != 0;
  return b;
}

// The backward as its KernelDef takes it: the window stays in the kernel's convention (from_fc2),
// as the runner's built-in path hands it (KernelVariant::backward, window_in).
template <size_t I>
int backward2_at(const fc_problem2* f, const fc_forward_args* a, const fc_backward_args* g) {
  return guarded([&] {
    const Exported& e = exported().at(I);
    e.def->backward(called_problem(e, *f, *a), args_of(*f, *a), backward_args_of(*g));
  });
}

const char* last_error() { return g_error.c_str(); }

// The C ABI passes plain function pointers without a context argument, so each slot gets its own
// instantiation; a module holds one kernel folder, which registers one or two kernels.
constexpr size_t kSlots = 8;
using SupportsFn = int (*)(const fc_problem*);
using ForwardFn = int (*)(const fc_problem*, const void*, const void*, const void*, void*, float*, void*);
using Supports2Fn = int (*)(const fc_problem2*);
using Forward2Fn = int (*)(const fc_problem2*, const fc_forward_args*);
using Backward2Fn = int (*)(const fc_problem2*, const fc_forward_args*, const fc_backward_args*);
template <size_t... I>
constexpr auto supports_table(std::index_sequence<I...>) { return std::array<SupportsFn, kSlots>{&supports_at<I>...}; }
template <size_t... I>
constexpr auto forward_table(std::index_sequence<I...>) { return std::array<ForwardFn, kSlots>{&forward_at<I>...}; }
template <size_t... I>
constexpr auto supports2_table(std::index_sequence<I...>) { return std::array<Supports2Fn, kSlots>{&supports2_at<I>...}; }
template <size_t... I>
constexpr auto forward2_table(std::index_sequence<I...>) { return std::array<Forward2Fn, kSlots>{&forward2_at<I>...}; }
template <size_t... I>
constexpr auto backward2_table(std::index_sequence<I...>) { return std::array<Backward2Fn, kSlots>{&backward2_at<I>...}; }

// The Capabilities as ABI 2's declared space, field for field (the runner's loader maps it back).
void declare2(Exported& e, const Capabilities& c) {
  fc_space2& s = e.space2;
  s.struct_size = sizeof(fc_space2);
  for (DType t : c.dtypes) s.dtype_mask |= 1u << to_fc(t);
  for (Causal m : c.causals) s.causal_mask |= 1u << to_fc(m);
  s.no_gqa = c.gqa ? 0 : 1;
  s.dv_eq_dqk = c.dv_ne_dqk ? 0 : 1;
  s.max_seq = c.max_seq;
  s.head_dims = e.head_dims.data();
  s.n_head_dims = static_cast<uint32_t>(e.head_dims.size());
  s.head_dim_pairs = e.pairs.data();
  s.n_head_dim_pairs = static_cast<uint32_t>(e.pairs.size() / 2);
  s.tiles = e.tiles.data();
  s.n_tiles = static_cast<uint32_t>(e.tiles.size());
  for (Layout l : c.layouts) s.layout_mask |= 1u << static_cast<int>(l);  // fc_layout's order is Layout's
  s.variant_mask = (c.windows ? FC_VARIANT_WINDOW : 0u) | (c.softcap ? FC_VARIANT_SOFTCAP : 0u) |
                   (c.alibi_per_batch ? FC_VARIANT_ALIBI_PER_BATCH : 0u) | (c.sinks ? FC_VARIANT_SINKS : 0u) |
                   (c.seqused ? FC_VARIANT_SEQUSED : 0u) | (c.paged ? FC_VARIANT_PAGED : 0u);
  for (Alibi a : c.alibi) s.alibi_mask |= 1u << (a == Alibi::symmetric ? FC_ALIBI_SYMMETRIC : FC_ALIBI_SIGNED);
  for (DType t : c.out_dtypes) s.out_dtype_mask |= 1u << to_fc(t);
  s.descale_mask = 1u << FC_DESCALE_NONE;
  for (Descale d : c.descales) s.descale_mask |= 1u << (d == Descale::tensor ? FC_DESCALE_TENSOR : FC_DESCALE_HEAD);
  if (c.paged) {
    s.page_sizes = e.page_sizes.empty() ? nullptr : e.page_sizes.data();
    s.n_page_sizes = static_cast<uint32_t>(e.page_sizes.size());
  }
  s.window_convention = c.window_convention == WindowConvention::left_exclusive ? FC_WINDOW_LEFT_EXCLUSIVE : FC_WINDOW_INCLUSIVE;
  s.alibi_lse = c.alibi_lse == AlibiLse::key_offset ? FC_ALIBI_LSE_KEY_OFFSET : FC_ALIBI_LSE_EXACT;
  s.limit_mask = (c.equal_lengths ? FC_LIMIT_EQUAL_LENGTHS : 0u) | (c.propagates_nonfinite ? 0u : FC_LIMIT_FINITE_INPUTS);
  s.seq_multiple = c.seq_multiple;
}

std::vector<Exported>& exported() {
  static std::vector<Exported> out = [] {
    std::vector<Exported> v;
    v.reserve(kSlots);  // the fc_kernel and fc_space structs are handed out by address: no reallocation
    const auto sup = supports_table(std::make_index_sequence<kSlots>{});
    const auto fwd = forward_table(std::make_index_sequence<kSlots>{});
    const auto sup2 = supports2_table(std::make_index_sequence<kSlots>{});
    const auto fwd2 = forward2_table(std::make_index_sequence<kSlots>{});
    const auto bwd2 = backward2_table(std::make_index_sequence<kSlots>{});
    for (const KernelDef& d : registered_kernels()) {
      if (v.size() == kSlots) {
        std::fprintf(stderr, "kernel_module: more than %zu kernels registered; the rest are not exported\n", kSlots);
        break;
      }
      Exported& e = v.emplace_back();
      e.def = &d;
      e.backward = kBackwardModule && d.backward;
      e.caps = e.backward ? backward_space(d.caps, d.backward_caps) : d.caps;
      const Capabilities& c = e.caps;
      e.name = d.name + FC_MODULE_SUFFIX;
      e.head_dims = c.head_dims;
      e.page_sizes = c.page_sizes;
      for (auto [a, b] : c.head_dim_pairs) e.pairs.insert(e.pairs.end(), {a, b});
      for (const TileShape& t : c.tiles)
        e.tiles.push_back({t.head_dim, t.causal, static_cast<int32_t>(t.block_q), static_cast<int32_t>(t.block_kv)});
      // ABI 1.1: the plain part of the declaration (f32, f16, bf16 only).
      for (DType t : c.dtypes)
        if (!is_fp8(t)) e.space.dtype_mask |= 1u << to_fc(t);
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
      declare2(e, c);
      const size_t i = v.size() - 1;
      const fc_memory mem = c.memory == Memory::device ? FC_MEMORY_DEVICE : FC_MEMORY_HOST;
      const fc_lse_base lse = c.lse_base == LseBase::two ? FC_LSE_BASE_2 : c.lse_base == LseBase::none ? FC_LSE_NONE : FC_LSE_BASE_E;
      const fc_empty_lse empty = c.empty_lse == EmptyRowLse::pos_inf ? FC_EMPTY_LSE_POS_INF : FC_EMPTY_LSE_NEG_INF;
      e.kernel = fc_kernel{FLASHCHECK_PLUGIN_ABI_VERSION, sizeof(fc_kernel), e.name.c_str(), mem, lse, empty,
                           sup[i], fwd[i], &last_error, &e.space};
      const uint32_t flags = e.backward && d.backward_caps.deterministic ? FC_KERNEL_DETERMINISTIC_BACKWARD : 0u;
      e.kernel2 = fc_kernel2{FLASHCHECK_PLUGIN_ABI2_VERSION, sizeof(fc_kernel2), e.name.c_str(), mem, lse, empty,
                             sup2[i], fwd2[i], &last_error, &e.space2, e.backward ? bwd2[i] : nullptr, flags};
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

extern "C" __attribute__((visibility("default"))) const fc_kernel2* flashcheck_get_kernel2(uint32_t index) {
  const auto& e = flashcheck::exported();
  return index < e.size() ? &e[index].kernel2 : nullptr;
}
