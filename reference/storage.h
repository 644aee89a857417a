// Where a kernel's buffers hold each row: the storage layouts of problem model 2 (BHSD, BSHD, THD
// packed sequences with trailing padding, K/V in a paged cache, and any strided view whose last
// dimension is contiguous), and the conversions between them and the logical layout every oracle
// reads (reference/sequences.h). The harness stages buffers through this, `check` and the C API
// read files and foreign tensors through it: one description of every layout, no second copy.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "reference/inputs.h"
#include "reference/problem.h"
#include "reference/sequences.h"

namespace flashcheck {

enum class Tensor { q, k, v, o, lse };
std::string_view to_string(Tensor t);

// Element strides of one tensor's rows (its last dimension is contiguous). The three indices are
// (outer, seq, head): outer is the batch (bhsd, bshd), unused for thd (rows are addressed by
// token = cu_seqlens[b] + i), the page for a paged cache; seq is the position (token, slot).
// LSE has width 1: [B, Hq, Sq] is (outer = Hq·Sq, seq = 1, head = Sq); [Hq, T] is (seq = 1, head = T).
struct RowStrides {
  int64_t outer = 0, seq = 0, head = 0;
  bool operator==(const RowStrides&) const = default;
};

class Storage {
 public:
  // The contiguous storage of the problem's layout. `pad_tokens` trailing rows follow the last
  // sequence of every THD tensor (padding a kernel must neither read into its outputs nor write).
  // A paged problem takes its block table and page count from `in`.
  Storage(const Problem& p, const Inputs& in, int64_t pad_tokens = 0);
  // The same with strides given per tensor (a strided view); throws InvalidProblem naming the
  // tensor when two rows would overlap, a stride is negative, or a row does not fit its span.
  Storage(const Problem& p, const Inputs& in, int64_t pad_tokens, const RowStrides (&strides)[5]);

  // Elements each buffer spans (the largest offset + 1, padding and unused pages included).
  int64_t elems(Tensor t) const { return span_[static_cast<int>(t)]; }
  int64_t width(Tensor t) const;  // Dqk, Dv or 1
  const RowStrides& strides(Tensor t) const { return strides_[static_cast<int>(t)]; }
  // The shape a file or a framework would give the contiguous tensor, outermost first.
  std::vector<int64_t> shape(Tensor t) const;
  // Offset of the first element of row (b, h, i): query/output rows of query head h, key/value
  // rows of KV head h.
  int64_t row(Tensor t, int64_t b, int64_t h, int64_t i) const;
  int64_t pad_tokens() const { return pad_; }
  // cu_seqlens of the stored sequences (THD), B + 1 entries from 0.
  const std::vector<int64_t>& cu_q() const { return cu_q_; }
  const std::vector<int64_t>& cu_kv() const { return cu_kv_; }

  // Logical → storage: rows of the logical tensor (Inputs' layout) copied into `storage`
  // (elems(t) values); elements no logical row covers are left as they are (the caller fills
  // them with NaN or poison first).
  void scatter(Tensor t, const float* logical, float* storage) const;
  // Storage → logical: the logical rows gathered from `storage`.
  void gather(Tensor t, const float* storage, float* logical) const;
  // Storage → logical from a kernel's own buffer: every row of t read from `data` (values of dtype
  // d laid out as this storage says) and widened to fp32, exact for every dtype, into a vector of
  // the logical tensor's size. What the harness reads of a kernel's outputs and gradients, and the
  // C API of a caller's views.
  std::vector<float> decode(Tensor t, const void* data, DType d) const;
  // Elements of the logical tensor t (Inputs' layout): p.q_elems(), ..., p.lse_elems().
  int64_t logical_elems(Tensor t) const;
  // Marks, in `covered` (elems(t) entries), every storage element a logical row maps to.
  void mark_covered(Tensor t, std::vector<char>& covered) const;
  // Calls f(logical offset, storage offset, width) for every row of t: the one walk that scatter,
  // gather, the staging and the C API's views share.
  template <typename F>
  void for_each_row(Tensor t, F&& f) const {
    const Sequences seqs(p_);
    const int64_t w = width(t);
    const bool kv = t == Tensor::k || t == Tensor::v;
    const int64_t heads = kv ? p_.heads_kv : p_.heads_q;
    for (int64_t b = 0; b < p_.batch; ++b) {
      const int64_t n = kv ? seqs.skv(b) : seqs.sq(b);
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < n; ++i) {
          int64_t logical = 0;
          switch (t) {
            case Tensor::q: logical = seqs.q_row(b, h, i); break;
            case Tensor::k: logical = seqs.k_row(b, h, i); break;
            case Tensor::v: logical = seqs.v_row(b, h, i); break;
            case Tensor::o: logical = seqs.o_row(b, h, i); break;
            case Tensor::lse: logical = seqs.lse_at(b, h, i); break;
          }
          f(logical, row(t, b, h, i), w);
        }
    }
  }

 private:
  void init(const Problem& p, const Inputs& in, int64_t pad_tokens);
  void check_layout(int t);

  Problem p_;
  int64_t pad_ = 0, page_size_ = 0, max_pages_ = 0, num_pages_ = 0;
  std::vector<int32_t> table_;
  std::vector<int64_t> cu_q_, cu_kv_;
  RowStrides strides_[5];
  int64_t span_[5] = {};
};

}  // namespace flashcheck
