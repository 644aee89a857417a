// A problem's kernel buffers as a kernel finds them: q, k, v, o and lse in the problem's storage
// layout (reference/storage.h: BHSD, BSHD, THD with pad tokens, a paged cache), and the side
// tensors its variants need (cu_seqlens, seqused, block table, cache lengths, ALiBi slopes, sinks,
// fp8 descales). Inputs are encoded in the problem's dtype with NaN wherever no row maps (padding
// tokens, keys past seqused, unused pages, the unused tail of a last page), so a kernel that reads
// there pulls NaN into its output; outputs are poisoned everywhere. The harness, the benchmark and
// the worker processes' shared memory (runner/isolation.h) all stage through Staging, so each
// sees the same bytes.
#pragma once
#include <array>
#include <cstdint>
#include <memory>

#include "reference/inputs.h"
#include "reference/sequences.h"
#include "reference/storage.h"
#include "runner/guarded_buffer.h"
#include "runner/harness.h"
#include "runner/registry.h"
#include "verify/backward_criteria.h"

namespace flashcheck {

// Every buffer of one launch, in the one order the guarded buffers and the wire keep.
enum StagedBuffer : int {
  kBufQ, kBufK, kBufV, kBufO, kBufLse,
  kBufCuSeqlensQ, kBufCuSeqlensKv, kBufSequsedKv, kBufBlockTable, kBufCacheSeqlens,
  kBufAlibiSlopes, kBufSinks, kBufDescaleQ, kBufDescaleK, kBufDescaleV,
  // The backward's (`run --backward`; empty otherwise): dO in o's layout and dtype, the gradients
  // in the layouts of q, k, v and the gradient dtype (reference/replica_backward.h), dsinks [Hq] fp32.
  kBufDout, kBufDq, kBufDk, kBufDv, kBufDsinks,
  kStagedBuffers
};
const char* staged_buffer_name(int buffer);
inline bool is_output_buffer(int buffer) { return buffer == kBufO || buffer == kBufLse; }
inline bool is_gradient_buffer(int buffer) { return buffer >= kBufDq && buffer <= kBufDsinks; }

// Trailing rows after the last sequence of every THD tensor: a few, so that a kernel reading or
// writing one row past cu_seqlens[-1] (or a whole tile's worth) lands in one.
inline constexpr int64_t kPadTokens = 3;

// Every row of tensor t: f(logical offset, storage offset, width) in elements, the logical
// offset in the layout Inputs and the judge use (reference/sequences.h), the storage offset from
// `st` (reference/storage.h). Row by row, so that no element outside a row is ever touched.
// Every row of t: f(logical offset, storage offset, width) (Storage::for_each_row; p is st's problem).
template <typename F>
void for_each_row(const Problem&, const Storage& st, Tensor t, F&& f) {
  st.for_each_row(t, std::forward<F>(f));
}

// What KernelArgs holds besides its pointers: each tensor's row strides (outer, seq, head) and
// span, and the paged cache's size. Plain data: it crosses to a worker process as it is.
struct LaunchShape {
  int64_t strides[5][3] = {};
  int64_t numel[5] = {};
  int64_t num_pages = 0, max_pages_per_seq = 0;
};

// KernelArgs over buffers at `ptr` (null where a buffer is not used); lse only `with_lse`.
KernelArgs kernel_args(const LaunchShape& s, const std::array<void*, kStagedBuffers>& ptr, bool with_lse, void* stream);
// BackwardArgs over the backward's buffers at `ptr` (dO strided as o, dq/dk/dv as q/k/v).
BackwardArgs backward_args(const LaunchShape& s, const std::array<void*, kStagedBuffers>& ptr, bool deterministic);

class Staging {
 public:
  // Throws InvalidProblem naming the field: a problem or side inputs that do not fit, or
  // sequence lengths past the int32 entries kernels take in cu_seqlens.
  Staging(const Problem& p, const Inputs& in);
  // A backward case's buffers as well: dO (`d_out`, the logical layout of o, values in o's dtype;
  // kept by reference like `in`) and the gradients, poisoned.
  Staging(const Problem& p, const Inputs& in, const std::vector<float>& d_out);

  const Problem& problem() const { return p_; }
  const Storage& storage() const { return st_; }
  const LaunchShape& shape() const { return shape_; }
  size_t bytes(int buffer) const { return bytes_[static_cast<size_t>(buffer)]; }  // 0: not used
  // Writes buffer's staged content (bytes(buffer) bytes) at dst.
  void fill(int buffer, uint8_t* dst) const;
  // The kernel's outputs, gathered from storage to the logical layout the judge reads, and the
  // output elements outside every row that lost their poison. lse is read only `with_lse`.
  HarnessResult collect(const uint8_t* o, const uint8_t* lse, bool with_lse) const;
  // The first byte of input `buffer` that differs from what was staged in it, or -1.
  int64_t changed_byte(int buffer, const uint8_t* now) const;
  bool backward() const { return d_out_ != nullptr; }
  // The gradients (buffers kBufDq, kBufDk, kBufDv, kBufDsinks; dsinks null when the problem has no
  // sinks) gathered to the logical layouts the backward criteria read, poison kept.
  KernelGradients collect_gradients(const uint8_t* dq, const uint8_t* dk, const uint8_t* dv, const uint8_t* dsinks) const;

 private:
  bool logical_layout(Tensor t) const;  // storage is exactly the logical layout (a fast path)
  template <typename F>
  void each_row(Tensor t, F&& f) const { for_each_row(p_, st_, t, f); }

  Problem p_;
  const Inputs& in_;
  const std::vector<float>* d_out_ = nullptr;
  Storage st_;
  LaunchShape shape_;
  std::array<size_t, kStagedBuffers> bytes_{};
  std::vector<int32_t> cu_q_, cu_kv_, used_, cache_;
};

using StagedBuffers = std::array<std::unique_ptr<GuardedBuffer>, kStagedBuffers>;  // null where unused

// The staged buffers of one launch in the variant's memory, each fenced by canaries.
struct StagedProblem {
  StagedProblem(Memory mem, const Problem& p, const Inputs& in);
  // With the backward's buffers (Staging's backward constructor).
  StagedProblem(Memory mem, const Problem& p, const Inputs& in, const std::vector<float>& d_out);

  // One forward call on the staged buffers (asynchronous on the device stream for device
  // variants); lse is passed only to variants that declare one.
  void launch(const Variant& v);
  GuardedBuffer& buffer(int b) { return *buf[static_cast<size_t>(b)]; }
  std::array<void*, kStagedBuffers> kernel_ptrs();  // null where unused

  Staging staging;
  StagedBuffers buf;
};

// After a forward launch (synchronized): every buffer downloaded, the canaries counted, the
// inputs compared with what was staged (std::runtime_error naming the first one written), the
// outputs collected (runner/harness.cpp).
HarnessResult finish_run(StagedProblem& st, const Capabilities& caps);

}  // namespace flashcheck
