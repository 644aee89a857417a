// Problem model 2's struct (fc_attention2) to and from the problem (reference/problem.h), its one
// line, and the report's problem. Lengths arrive as FlashAttention's int32 arrays (cu_seqlens_q,
// cu_seqlens_k, seqused_k, cache_seqlens): they are checked here, under those names, before the
// problem's own validate() sees the per-sequence lists they become.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "capi/capi_internal.h"
#include "capi/flashcheck.h"

namespace flashcheck::capi {

namespace {

std::string str(int64_t x) { return std::to_string(x); }

// cu_seqlens: B + 1 entries from 0, non-decreasing; the per-sequence lengths are their differences.
std::vector<int64_t> lengths_from_cu(const int32_t* cu, int64_t batch, const char* name) {
  if (cu[0] != 0) throw InvalidArgument(std::string(name) + "[0] is " + str(cu[0]) + "; " + name + " must start at 0");
  std::vector<int64_t> out(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    if (cu[b + 1] < cu[b])
      throw InvalidArgument(std::string(name) + " decreases at index " + str(b + 1) + " (" + str(cu[b + 1]) + " after " + str(cu[b]) +
                            "); it must be non-decreasing");
    out[static_cast<size_t>(b)] = int64_t{cu[b + 1]} - cu[b];
  }
  return out;
}

// B per-sequence counts, none negative.
std::vector<int64_t> counts(const int32_t* x, int64_t batch, const char* name) {
  std::vector<int64_t> out(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    if (x[b] < 0) throw InvalidArgument(std::string(name) + "[" + str(b) + "] is negative (" + str(x[b]) + ")");
    out[static_cast<size_t>(b)] = x[b];
  }
  return out;
}

template <class E>
E enum_field(int32_t v, int32_t count, const char* what, const char* names) {
  if (v < 0 || v >= count) throw InvalidArgument(std::string(what) + " " + str(v) + " is not one of " + names);
  return static_cast<E>(v);
}

int32_t narrow32(int64_t x, const char* what) {
  if (x > std::numeric_limits<int32_t>::max())
    throw InvalidArgument(std::string(what) + " " + str(x) + " does not fit int32 (FlashAttention's length arrays)");
  return static_cast<int32_t>(x);
}

// Points `a`'s length pointers, set into `from`, at the same entries of `to`.
void rebase(fc_attention2& a, const int32_t* from, int32_t* to) {
  for (const int32_t** ptr : {&a.cu_seqlens_q, &a.cu_seqlens_k, &a.seqused_k, &a.cache_seqlens})
    if (*ptr) *ptr = to + (*ptr - from);
}

}  // namespace

Problem problem_from_c(const fc_attention2* pa) {
  need(pa, "problem");
  check_struct_size(pa->struct_size, sizeof(fc_attention2), "fc_attention2");
  const fc_attention2& a = *pa;
  Problem p;
  p.batch = a.batch;
  p.heads_q = a.heads_q;
  p.heads_kv = a.heads_kv;
  p.seq_q = a.seq_q;
  p.seq_kv = a.seq_kv;
  p.head_dim_qk = a.head_dim_qk;
  p.head_dim_v = a.head_dim_v;
  p.dtype = to_dtype(a.dtype);
  // Set only where it says something: a plain problem's output dtype is its dtype, and a line
  // prints odtype= only when the problem sets one.
  if (a.out_dtype != -1 && (is_fp8(p.dtype) || a.out_dtype != a.dtype)) p.out_dtype = to_dtype(a.out_dtype);
  p.causal = to_causal(a.causal);
  p.layout = enum_field<Layout>(a.layout, 3, "layout", "FC_BHSD, FC_BSHD, FC_THD");
  if (!std::isnan(a.scale)) p.scale = a.scale;
  p.window = {a.window_left, a.window_right};
  p.softcap = a.softcap;
  p.alibi = enum_field<Alibi>(a.alibi, 3, "alibi", "FC_BIAS_NONE, FC_BIAS_ALIBI_SYMMETRIC, FC_BIAS_ALIBI_SIGNED");
  p.alibi_per_batch = a.alibi_per_batch != 0;
  p.sinks = a.sinks != 0;
  p.descale = enum_field<Descale>(a.descale, 3, "descale", "FC_NO_DESCALE, FC_DESCALE_PER_TENSOR, FC_DESCALE_PER_HEAD");
  p.page_size = a.page_size;
  p.page_order = enum_field<PageOrder>(a.page_order, 3, "page_order", "FC_PAGES_IN_ORDER, FC_PAGES_SHUFFLED, FC_PAGES_SHARED");

  // The length arrays are read for batch (+ 1) entries: the batch must be sane before any is read.
  if (p.batch < 1) throw InvalidProblem("batch must be positive, got " + str(p.batch));
  if (p.page_size < 0) throw InvalidProblem("page_size must be positive (or 0: no paged cache), got " + str(p.page_size));
  const bool thd = p.layout == Layout::thd, paged = p.page_size > 0;
  if (a.cu_seqlens_q) {
    if (!thd) throw InvalidArgument("cu_seqlens_q is given but the layout is not FC_THD (packed sequences)");
    p.seqlens_q = lengths_from_cu(a.cu_seqlens_q, p.batch, "cu_seqlens_q");
  } else if (thd) {
    throw InvalidArgument("layout FC_THD needs cu_seqlens_q");
  }
  if (a.cu_seqlens_k) {
    if (!thd) throw InvalidArgument("cu_seqlens_k is given but the layout is not FC_THD (packed sequences)");
    if (paged) throw InvalidArgument("cu_seqlens_k is given with a paged cache, whose lengths are cache_seqlens");
    p.seqlens_kv = lengths_from_cu(a.cu_seqlens_k, p.batch, "cu_seqlens_k");
  } else if (thd && !paged) {
    throw InvalidArgument("layout FC_THD needs cu_seqlens_k (or a paged cache with cache_seqlens)");
  }
  if (a.cache_seqlens) {
    if (!paged) throw InvalidArgument("cache_seqlens is given but page_size is 0 (no paged cache)");
    p.seqlens_kv = counts(a.cache_seqlens, p.batch, "cache_seqlens");
  } else if (paged) {
    throw InvalidArgument("a paged cache (page_size " + str(p.page_size) + ") needs cache_seqlens");
  }
  if (a.seqused_k) {
    p.seqused_kv = counts(a.seqused_k, p.batch, "seqused_k");
    if (!paged)
      for (int64_t b = 0; b < p.batch; ++b)
        if (p.seqused_kv[static_cast<size_t>(b)] > p.skv_stored(b))
          throw InvalidArgument("seqused_k[" + str(b) + "] = " + str(p.seqused_kv[static_cast<size_t>(b)]) + " exceeds the " +
                                str(p.skv_stored(b)) + " keys stored for sequence " + str(b));
  }
  normalize(p);
  validate(p);
  return p;
}

fc_attention2 problem_to_c(const Problem& p, bool resolve_scale, std::vector<int32_t>& lengths) {
  fc_attention2 a;
  fc_attention2_init(&a);
  a.batch = p.batch;
  a.heads_q = p.heads_q;
  a.heads_kv = p.heads_kv;
  a.seq_q = p.seq_q;
  a.seq_kv = p.seq_kv;
  a.head_dim_qk = p.head_dim_qk;
  a.head_dim_v = p.head_dim_v;
  a.dtype = from_dtype(p.dtype);
  a.out_dtype = p.out_dtype ? from_dtype(*p.out_dtype) : -1;
  a.causal = from_causal(p.causal);
  a.layout = static_cast<int32_t>(p.layout);
  a.scale = resolve_scale ? p.softmax_scale() : p.scale.value_or(std::numeric_limits<double>::quiet_NaN());
  a.window_left = p.window.left;
  a.window_right = p.window.right;
  a.softcap = p.softcap;
  a.alibi = static_cast<int32_t>(p.alibi);
  a.alibi_per_batch = p.alibi_per_batch;
  a.sinks = p.sinks;
  a.descale = static_cast<int32_t>(p.descale);
  a.page_size = p.page_size;
  a.page_order = static_cast<int32_t>(p.page_order);
  // The arrays one after another in `lengths`; pointers are taken once it stops growing.
  lengths.clear();
  auto prefix = [&](const std::vector<int64_t>& v) {
    const size_t at = lengths.size();
    int64_t sum = 0;
    lengths.push_back(0);
    for (int64_t x : v) lengths.push_back(narrow32(sum += x, "a cumulative length"));
    return at;
  };
  auto plain = [&](const std::vector<int64_t>& v) {
    const size_t at = lengths.size();
    for (int64_t x : v) lengths.push_back(narrow32(x, "a length"));
    return at;
  };
  constexpr size_t none = static_cast<size_t>(-1);
  size_t cu_q = none, cu_k = none, used = none, cache = none;
  if (p.layout == Layout::thd) cu_q = prefix(p.seqlens_q);
  if (p.layout == Layout::thd && !p.paged()) cu_k = prefix(p.seqlens_kv);
  if (p.paged()) cache = plain(p.seqlens_kv);
  if (!p.seqused_kv.empty()) used = plain(p.seqused_kv);
  auto at = [&](size_t i) -> const int32_t* { return i == none ? nullptr : lengths.data() + i; };
  a.cu_seqlens_q = at(cu_q);
  a.cu_seqlens_k = at(cu_k);
  a.seqused_k = at(used);
  a.cache_seqlens = at(cache);
  return a;
}

}  // namespace flashcheck::capi

using namespace flashcheck;
using namespace flashcheck::capi;

extern "C" {

void fc_attention2_init(fc_attention2* p) {
  if (!p) return;  // nothing in here allocates or throws
  *p = fc_attention2{};
  p->struct_size = sizeof(fc_attention2);
  p->batch = p->heads_q = p->heads_kv = p->seq_q = p->seq_kv = 1;
  p->head_dim_qk = p->head_dim_v = 64;
  p->dtype = FC_BF16;
  p->out_dtype = -1;
  p->causal = FC_MASK_NONE;
  p->layout = FC_BHSD;
  p->scale = std::numeric_limits<double>::quiet_NaN();
  p->window_left = p->window_right = -1;
  p->alibi = FC_BIAS_NONE;
  p->descale = FC_NO_DESCALE;
  p->page_order = FC_PAGES_IN_ORDER;
}

size_t fc_attention2_to_string(const fc_attention2* p, char* buf, size_t cap) {
  std::string s;
  if (guarded([&] { s = to_string(problem_from_c(p)); }) != FC_OK) s.clear();
  if (buf && cap) {
    const size_t n = std::min(s.size(), cap - 1);
    std::memcpy(buf, s.data(), n);
    buf[n] = '\0';
  }
  return s.size();
}

fc_status fc_attention2_parse(const char* line, fc_attention2* out, int32_t* lengths, size_t cap, size_t* needed) {
  return guarded([&] {
    need(line, "line");
    need(out, "out");
    if (needed) *needed = 0;
    const Problem p = parse_problem(line);
    std::vector<int32_t> lens;
    fc_attention2 a = problem_to_c(p, false, lens);
    if (needed) *needed = lens.size();
    if (lens.size() > cap || (!lengths && !lens.empty()))
      throw InvalidArgument("the problem's lengths need " + std::to_string(lens.size()) + " entries; the lengths buffer holds " +
                            std::to_string(lengths ? cap : 0) + " (retry with a larger one)");
    if (!lens.empty()) std::memcpy(lengths, lens.data(), lens.size() * sizeof(int32_t));
    rebase(a, lens.data(), lengths);
    write_struct(out, a, sizeof(fc_attention2), "fc_attention2");
  });
}

fc_status fc_report_problem2(const fc_report* r, fc_attention2* out) {
  return guarded([&] {
    need(r, "report");
    need(out, "out");
    auto* m = const_cast<fc_report*>(r);  // the lengths' storage, like the cached renderings
    const fc_attention2 a = problem_to_c(r->report.problem, false, m->lengths);
    write_struct(out, a, sizeof(fc_attention2), "fc_attention2");
  });
}

}  // extern "C"
