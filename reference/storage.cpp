#include "reference/storage.h"

#include <algorithm>
#include <array>
#include <string>

#include "reference/dtype.h"
#include "reference/sequences.h"

namespace flashcheck {

std::string_view to_string(Tensor t) {
  switch (t) {
    case Tensor::q: return "q";
    case Tensor::k: return "k";
    case Tensor::v: return "v";
    case Tensor::o: return "o";
    case Tensor::lse: return "lse";
  }
  return "?";
}

namespace {
constexpr Tensor kAll[] = {Tensor::q, Tensor::k, Tensor::v, Tensor::o, Tensor::lse};
bool is_kv(Tensor t) { return t == Tensor::k || t == Tensor::v; }
}  // namespace

int64_t Storage::width(Tensor t) const {
  switch (t) {
    case Tensor::q:
    case Tensor::k: return p_.head_dim_qk;
    case Tensor::v:
    case Tensor::o: return p_.head_dim_v;
    case Tensor::lse: return 1;
  }
  return 1;
}

void Storage::init(const Problem& p, const Inputs& in, int64_t pad_tokens) {
  validate(p);
  p_ = p;
  pad_ = p.layout == Layout::thd ? std::max<int64_t>(pad_tokens, 0) : 0;
  cu_q_.assign(static_cast<size_t>(p.batch) + 1, 0);
  cu_kv_.assign(static_cast<size_t>(p.batch) + 1, 0);
  for (int64_t b = 0; b < p.batch; ++b) {
    cu_q_[static_cast<size_t>(b) + 1] = cu_q_[static_cast<size_t>(b)] + p.sq(b);
    cu_kv_[static_cast<size_t>(b) + 1] = cu_kv_[static_cast<size_t>(b)] + p.skv_stored(b);
  }
  if (p.paged()) {
    validate_side_inputs(p, in);
    page_size_ = p.page_size;
    max_pages_ = in.max_pages(p.batch);
    num_pages_ = in.num_pages;
    table_ = in.block_table;
  }
}

Storage::Storage(const Problem& p, const Inputs& in, int64_t pad_tokens) {
  init(p, in, pad_tokens);
  const int64_t hq = p.heads_q, hkv = p.heads_kv, sq = p.seq_q, skv = p.seq_kv;
  const int64_t tq = cu_q_.back() + pad_, tkv = cu_kv_.back() + pad_;
  for (Tensor t : kAll) {
    const int64_t w = width(t);
    const int64_t h = is_kv(t) ? hkv : hq;
    RowStrides s;
    if (t == Tensor::lse) {
      // [B, Hq, Sq] or [Hq, total_q]: one value per row.
      s = p.layout == Layout::thd ? RowStrides{0, 1, tq} : RowStrides{hq * sq, 1, sq};
    } else if (is_kv(t) && p.paged()) {
      s = {p.page_size * hkv * w, hkv * w, w};  // [pages, page_size, Hkv, D]
    } else {
      const int64_t seq = is_kv(t) ? skv : sq;
      switch (p.layout) {
        case Layout::bhsd: s = {h * seq * w, w, seq * w}; break;
        case Layout::bshd: s = {seq * h * w, h * w, w}; break;
        case Layout::thd: s = {0, h * w, w}; break;
      }
    }
    strides_[static_cast<int>(t)] = s;
    int64_t span = 0;
    if (t == Tensor::lse) span = p.layout == Layout::thd ? hq * tq : p.batch * hq * sq;
    else if (is_kv(t) && p.paged()) span = in.num_pages * p.page_size * hkv * w;
    else if (p.layout == Layout::thd) span = (is_kv(t) ? tkv : tq) * h * w;
    else span = p.batch * h * (is_kv(t) ? skv : sq) * w;
    span_[static_cast<int>(t)] = span;
  }
}

Storage::Storage(const Problem& p, const Inputs& in, int64_t pad_tokens, const RowStrides (&strides)[5]) {
  init(p, in, pad_tokens);
  for (int t = 0; t < 5; ++t) {
    strides_[t] = strides[t];
    check_layout(t);
  }
}

// Extents of the three row indices, the largest offset and the overlap test of a strided tensor.
void Storage::check_layout(int ti) {
  const Tensor t = kAll[ti];
  const RowStrides& s = strides_[ti];
  const std::string name(to_string(t));
  if (s.outer < 0 || s.seq < 0 || s.head < 0)
    throw InvalidProblem("tensor " + name + ": negative strides are not supported");
  const bool thd = p_.layout == Layout::thd && !(is_kv(t) && p_.paged());
  const int64_t outer_n = thd ? 1 : (is_kv(t) && p_.paged()) ? num_pages_ : p_.batch;
  int64_t seq_n = 0;
  if (is_kv(t) && p_.paged()) seq_n = p_.page_size;
  else if (thd) seq_n = (is_kv(t) ? cu_kv_.back() : cu_q_.back()) + pad_;
  else seq_n = is_kv(t) ? p_.seq_kv : p_.seq_q;
  const int64_t head_n = is_kv(t) ? p_.heads_kv : p_.heads_q;
  const int64_t w = width(t);
  // Non-overlap: ordered by stride, each stride must step past everything the smaller ones reach.
  std::array<std::pair<int64_t, int64_t>, 3> dims{{{s.outer, outer_n}, {s.seq, seq_n}, {s.head, head_n}}};
  std::sort(dims.begin(), dims.end());
  int64_t reach = w;  // elements one index combination of the smaller dims covers
  for (auto [stride, n] : dims) {
    if (n <= 1) continue;
    if (stride < reach)
      throw InvalidProblem("tensor " + name + ": its strides overlap (a stride of " + std::to_string(stride) +
                           " elements is shorter than the " + std::to_string(reach) + " the inner dimensions span)");
    int64_t next;
    if (__builtin_mul_overflow(stride, n - 1, &next) || __builtin_add_overflow(next, reach, &next))
      throw InvalidProblem("tensor " + name + ": its strides overflow int64");
    reach = next;
  }
  span_[ti] = reach;
}

std::vector<int64_t> Storage::shape(Tensor t) const {
  const int64_t w = width(t);
  const int64_t h = is_kv(t) ? p_.heads_kv : p_.heads_q;
  if (t == Tensor::lse) {
    if (p_.layout == Layout::thd) return {p_.heads_q, cu_q_.back() + pad_};
    return {p_.batch, p_.heads_q, p_.seq_q};
  }
  if (is_kv(t) && p_.paged()) return {elems(t) / (p_.page_size * h * w), p_.page_size, h, w};
  const int64_t seq = is_kv(t) ? p_.seq_kv : p_.seq_q;
  switch (p_.layout) {
    case Layout::bhsd: return {p_.batch, h, seq, w};
    case Layout::bshd: return {p_.batch, seq, h, w};
    case Layout::thd: return {(is_kv(t) ? cu_kv_.back() : cu_q_.back()) + pad_, h, w};
  }
  return {};
}

int64_t Storage::row(Tensor t, int64_t b, int64_t h, int64_t i) const {
  const RowStrides& s = strides_[static_cast<int>(t)];
  if (is_kv(t) && p_.paged()) {
    const int64_t page = table_[static_cast<size_t>(b * max_pages_ + i / page_size_)];
    return page * s.outer + (i % page_size_) * s.seq + h * s.head;
  }
  if (p_.layout == Layout::thd) {
    const int64_t token = (is_kv(t) ? cu_kv_ : cu_q_)[static_cast<size_t>(b)] + i;
    return token * s.seq + h * s.head;
  }
  return b * s.outer + i * s.seq + h * s.head;
}

void Storage::scatter(Tensor t, const float* logical, float* storage) const {
  for_each_row(t, [&](int64_t l, int64_t s, int64_t w) { std::copy_n(logical + l, w, storage + s); });
}

void Storage::gather(Tensor t, const float* storage, float* logical) const {
  for_each_row(t, [&](int64_t l, int64_t s, int64_t w) { std::copy_n(storage + s, w, logical + l); });
}

std::vector<float> Storage::decode(Tensor t, const void* data, DType d) const {
  std::vector<float> out(static_cast<size_t>(logical_elems(t)));
  const int64_t bytes = dtype_bytes(d);
  const char* base = static_cast<const char*>(data);
  for_each_row(t, [&](int64_t l, int64_t s, int64_t w) { flashcheck::decode(d, base + s * bytes, w, out.data() + l); });
  return out;
}

int64_t Storage::logical_elems(Tensor t) const {
  switch (t) {
    case Tensor::q: return p_.q_elems();
    case Tensor::k: return p_.k_elems();
    case Tensor::v: return p_.v_elems();
    case Tensor::o: return p_.o_elems();
    case Tensor::lse: return p_.lse_elems();
  }
  return 0;
}

void Storage::mark_covered(Tensor t, std::vector<char>& covered) const {
  covered.assign(static_cast<size_t>(elems(t)), 0);
  for_each_row(t, [&](int64_t, int64_t s, int64_t w) { std::fill_n(covered.begin() + s, w, 1); });
}

}  // namespace flashcheck
