// The kernels layer's one interface: what a kernel declares (Capabilities) and how it registers
// itself (FLASHCHECK_REGISTER_KERNEL in its folder's register.cpp). This layer depends on
// reference/problem.h alone; the runner wraps every registered kernel as a Variant.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "reference/problem.h"

namespace flashcheck {

// The numerics a kernel mirrors, so the blocked replica can reproduce it (tests compare a kernel
// with the replica at its own numerics, never by its name).
struct KernelNumerics {
  bool use_exp2 = true;  // exp2 with log2 e folded into the scale, or plain exp
  bool round_p = true;   // P rounded to the input dtype before P·V (16-bit MMA kernels); fp32 keeps P
};

// What a kernel declares it can do. The campaign draws problems from this space, so few cases are
// wasted; a problem outside it is skipped, never failed.
inline constexpr int64_t kNoElementLimit = INT64_MAX;

struct Capabilities {
  std::vector<DType> dtypes{DType::f32, DType::f16, DType::bf16};
  // Dqk (and Dv) values accepted; empty: any. A kernel that declares none is drawn the usual grid
  // (16, 32, ..., 256) and values off it (1, 3, 17, 129, ...: not multiples of 8) up to 256.
  std::vector<int64_t> head_dims;
  bool dv_ne_dqk = true;  // Dv may differ from Dqk (Dv ≤ Dqk)
  // When non-empty, the only (Dqk, Dv) pairs compiled (e.g. {192, 128} but not {192, 192}).
  std::vector<std::pair<int64_t, int64_t>> head_dim_pairs;
  std::vector<Causal> causals{Causal::none, Causal::top_left, Causal::bottom_right};
  bool gqa = true;
  int64_t max_seq = int64_t{1} << 31;
  // Declared limits on the lengths, for kernels that take only some (a Triton tutorial kernel:
  // Sq = Skv, multiples of its block): every sequence has as many keys (used) as queries, and every
  // length is a multiple of seq_multiple (an empty sequence, 0, is one). Campaigns draw within them.
  bool equal_lengths = false;
  int64_t seq_multiple = 1;
  // NaN and Inf in q, k or v reach exactly the outputs the oracle says (README, Conventions: a row
  // that sees one is NaN, a key a row does not see never reaches it). Campaigns draw some cases
  // with them (Dist::nonfinite). false: the kernel promises no such thing (it clamps, or squashes
  // NaN to a number) and is drawn finite inputs only; a kernel that hides bad data should say so.
  bool propagates_nonfinite = true;
  // Elements in the largest of q, k, v, o a device kernel accepts. Below 2^31 by default: a new
  // kernel may index with 32-bit ints, and only `run --big` shows it does not. A kernel that passed
  // `run --big` declares kNoElementLimit.
  int64_t max_tensor_elements = (int64_t{1} << 31) - 1;
  LseBase lse_base = LseBase::e;
  EmptyRowLse empty_lse = EmptyRowLse::neg_inf;
  Memory memory = Memory::host;
  // Compute capability ×10 the kernel needs (90 = sm_90); 0 for host kernels. Below it the kernel
  // is reported unavailable with the reason, never failed.
  int min_sm = 0;
  // Architecture-specific code (sm_90a: wgmma, setmaxnreg) runs on exactly min_sm, not above it.
  bool exact_sm = false;
  // Tiles per head dim, ascending; a head dim without a row uses the row of the next larger one (or
  // the last). Rows may be given per causal mode.
  std::vector<TileShape> tiles{{0, 128, 128}};
  KernelNumerics numerics;

  // Problem model 2 (reference/problem.h): the variants the kernel computes. Every default is
  // "none", so a kernel that declares nothing is given plain problems only. fp8 inputs are
  // declared in `dtypes` (e4m3, e5m2) with their output dtypes here.
  bool windows = false;
  bool softcap = false;
  std::vector<Alibi> alibi;                   // forms computed (symmetric, signed_); empty: no ALiBi
  bool alibi_per_batch = false;               // slopes [B, Hq] as well as [Hq]
  bool sinks = false;
  std::vector<Layout> layouts{Layout::bhsd};  // q/o (and k/v unless paged); thd: variable-length batches
  bool seqused = false;                       // keys used per sequence below those stored
  bool paged = false;                         // k/v in a paged cache through a block table
  std::vector<int64_t> page_sizes;            // with paged: the page sizes taken; empty: any >= 1
  std::vector<DType> out_dtypes{DType::bf16}; // fp8 inputs: the output dtypes written
  std::vector<Descale> descales;              // fp8 descale granularities taken (none is always taken)
  WindowConvention window_convention = WindowConvention::inclusive;
  AlibiLse alibi_lse = AlibiLse::exact;

  TileShape tile_for(int64_t head_dim, bool causal = false) const;
  // Why a problem lies outside this declared space (nullopt: inside). The one rule behind the
  // runner's Variant::unsupported and a kernel module's supports(), so both refuse the same problems.
  std::optional<std::string> refusal(const Problem& p) const;
};

// A kernel launch: buffers in the declared memory and the problem's dtype (lse f32, or null when
// the kernel declares none), asynchronous on `stream` for device kernels. Throws on any error.
using LaunchFn = void (*)(const Problem& p, const void* q, const void* k, const void* v, void* o, float* lse,
                          void* stream);

// Problem model 2's launch: every buffer with its row strides (the plugin ABI's fc_tensor and
// fc_forward_args, gpu/plugin/flashcheck_plugin.h, as C++). Rows are addressed (outer, seq, head)
// as that header says; pointers a problem does not use are null.
struct TensorRef {
  void* data = nullptr;
  int64_t stride_outer = 0, stride_seq = 0, stride_head = 0;
  int64_t numel = 0;
};
struct KernelArgs {
  TensorRef q, k, v, o, lse;
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_kv = nullptr;
  const int32_t* seqused_kv = nullptr;
  const int32_t* block_table = nullptr;
  const int32_t* cache_seqlens = nullptr;
  const float* alibi_slopes = nullptr;
  const float* sinks = nullptr;
  const float* descale_q = nullptr;
  const float* descale_k = nullptr;
  const float* descale_v = nullptr;
  int64_t num_pages = 0, max_pages_per_seq = 0;
  void* stream = nullptr;
};
// The Problem a LaunchFn2 is handed states its window in the kernel's declared convention
// (Capabilities::window_convention, converted by window_in below); everything else is as judged.
using LaunchFn2 = void (*)(const Problem& p, const KernelArgs& a);

// A window as a kernel of convention `c` takes it: the problem states flashcheck's inclusive
// bounds; a left-exclusive kernel (cuDNN's left_bound, xformers) is handed left + 1 for a bounded
// left side. The one conversion behind built-in launches, the plugin ABI and kernel modules.
inline Window window_in(const Window& w, WindowConvention c) {
  // INT64_MAX stays: it reaches past any sequence either way, and + 1 would overflow.
  if (c == WindowConvention::left_exclusive && w.left >= 0 && w.left < INT64_MAX) return {w.left + 1, w.right};
  return w;
}

// The backward pass (the plugin ABI's fc_backward_args as C++): gradients of the forward that
// `fwd` describes (q, k, v, o and lse as the forward read and wrote them, side tensors included)
// for the upstream gradient dout, written to dq, dk, dv in the layouts of q, k, v (dsinks [Hq] when
// the problem has sinks, else null). Every element of dq, dk, dv is written (dK/dV of a KV head sum
// over its query group). `deterministic`: bitwise equal gradients over repeats are asked for (a
// kernel that declares BackwardCaps::deterministic honours it).
struct BackwardArgs {
  TensorRef dout, dq, dk, dv;
  float* dsinks = nullptr;
  bool deterministic = false;
};
using BackwardFn = void (*)(const Problem& p, const KernelArgs& fwd, const BackwardArgs& g);

// What a kernel's backward computes: a subset of its forward's space (refusal() of the forward
// first, then these). Empty vectors: as the forward.
struct BackwardCaps {
  std::vector<DType> dtypes;      // empty: the forward's
  std::vector<int64_t> head_dims; // empty: the forward's
  bool deterministic = false;     // bitwise reproducible when BackwardArgs::deterministic is set
  bool variants = false;          // false: plain problems only (no window, softcap, ALiBi, sinks, varlen, paged)
};

// The problems a kernel's backward computes: its forward's space narrowed by what the backward
// declares (dtypes and head dims where listed; plain problems only unless it declares variants).
// Campaigns draw backward cases from this, so few are wasted; a kernel module declares it as its
// space when built for the backward (gpu/plugin/kernel_module.cpp, FC_MODULE_BACKWARD).
Capabilities backward_space(const Capabilities& forward, const BackwardCaps& b);

struct KernelDef {
  std::string name;
  Capabilities caps;
  LaunchFn launch = nullptr;    // plain problems in contiguous BHSD (problem model 1 kernels)
  LaunchFn2 launch2 = nullptr;  // any problem its capabilities declare; preferred when set
  BackwardFn backward = nullptr;  // null: the kernel has no backward pass
  BackwardCaps backward_caps;
};

// Every kernel registered by the build, in registration order.
const std::vector<KernelDef>& registered_kernels();

struct KernelRegistrar {
  explicit KernelRegistrar(KernelDef def);
};

}  // namespace flashcheck

// In a kernel folder's register.cpp: FLASHCHECK_REGISTER_KERNEL(mma_f16, [] { ... return KernelDef{...}; }());
#define FLASHCHECK_REGISTER_KERNEL(id, def) \
  static const ::flashcheck::KernelRegistrar fc_kernel_registrar_##id { def }
