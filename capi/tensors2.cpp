// Problem model 2's tensors at the C boundary (the helpers the backward shares: capi/views2.h):
// fc_tensor_view (pointer, dtype, shape, strides) to the storage layer's row strides
// (reference/storage.h, whose constructor refuses overlapping and negative strides), gathered into
// the logical layout every oracle reads; then fc_check2 (the one judge), fc_reference (the fp64
// oracle, written back in the caller's layout) and fc_make_inputs2 (the drawn inputs in the
// problem's own storage).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <span>
#include <vector>

#include "capi/capi_internal.h"
#include "capi/flashcheck.h"
#include "capi/views2.h"
#include "reference/naive.h"
#include "reference/sequences.h"
#include "reference/storage.h"
#include "verify/judge.h"

struct fc_inputs {
  flashcheck::Problem problem;
  std::vector<int32_t> lengths;
  fc_attention2 attention{};
  std::vector<uint8_t> q, k, v;  // encoded, in the problem's storage
  flashcheck::Inputs sides;      // the side tensors (its q, k, v empty)
  fc_tensors tensors{};
  std::vector<uint8_t> d_out;    // fc_make_backward_inputs': dO as o is stored
  fc_tensor_view d_out_view{};   // absent for fc_make_inputs2's
};

namespace flashcheck::capi {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string str(int64_t x) { return std::to_string(x); }

std::string dims(const int64_t* d, int n) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) s += (i ? ", " : "") + (d[i] < 0 ? std::string("any") : str(d[i]));
  return s + "]";
}

void check_side(const fc_tensor_view& v, const char* name, const std::vector<int64_t>& want, const std::string& form,
                std::initializer_list<int32_t> dtypes) {
  bool ok = false;
  for (int32_t d : dtypes) ok |= v.dtype == d;
  if (!ok) throw InvalidArgument(std::string(name) + " is " + dtype_name(v.dtype) + "; it must be " + dtype_name(*dtypes.begin()) +
                                 (dtypes.size() > 1 ? std::string(" or ") + dtype_name(*(dtypes.begin() + 1)) : std::string()));
  check_view(v, name, v.dtype, want, form);
  for (int i = 0; i < v.ndim; ++i)
    if (v.strides[i] < 0) throw InvalidArgument(std::string(name) + ": negative strides are not supported");
}

std::vector<float> side_floats(const fc_tensor_view& v, const char* name, const std::vector<int64_t>& want, const std::string& form) {
  check_side(v, name, want, form, {FC_F32});
  std::vector<float> out(static_cast<size_t>(std::max<int64_t>(0, [&] {
    int64_t n = 1;
    for (int64_t d : want) n *= d;
    return n;
  }())));
  for_each_element(v, [&](int64_t i, int64_t off) { std::memcpy(&out[static_cast<size_t>(i)], static_cast<const char*>(v.data) + off * 4, 4); });
  return out;
}

// The side tensors into `in` (checked against the problem: the names are the caller's).
void read_sides(const Problem& p, const fc_tensors& t, int64_t num_pages, Inputs& in) {
  if (present(t.alibi_slopes)) {
    if (p.alibi_per_batch) in.alibi_slopes = side_floats(t.alibi_slopes, "alibi_slopes", {p.batch, p.heads_q}, "[B, Hq] (alibi_per_batch)");
    else in.alibi_slopes = side_floats(t.alibi_slopes, "alibi_slopes", {p.heads_q}, "[Hq]");
  }
  if (p.alibi != Alibi::none && !present(t.alibi_slopes))
    throw InvalidArgument("the problem has ALiBi but alibi_slopes is absent");
  if (present(t.sinks)) in.sinks = side_floats(t.sinks, "sinks", {p.heads_q}, "[Hq]");
  if (p.sinks && !present(t.sinks)) throw InvalidArgument("the problem has sinks but the sinks tensor is absent");
  const std::pair<const fc_tensor_view*, std::vector<float>*> descales[] = {
      {&t.descale_q, &in.descale_q}, {&t.descale_k, &in.descale_k}, {&t.descale_v, &in.descale_v}};
  const char* names[] = {"descale_q", "descale_k", "descale_v"};
  for (int i = 0; i < 3; ++i) {
    const fc_tensor_view& v = *descales[i].first;
    if (!present(v)) {
      if (p.descale != Descale::none) throw InvalidArgument(std::string("the problem has descale factors but ") + names[i] + " is absent");
      continue;
    }
    *descales[i].second = p.descale == Descale::head ? side_floats(v, names[i], {p.batch, p.heads_kv}, "[B, Hkv] (per head)")
                                                     : side_floats(v, names[i], {1}, "[1] (per tensor)");
  }
  if (present(t.block_table)) {
    if (!p.paged()) throw InvalidArgument("block_table is given but page_size is 0 (no paged cache)");
    check_side(t.block_table, "block_table", {p.batch, -1}, "[B, max_pages]", {FC_I32, FC_I64});
    const int64_t mp = t.block_table.shape[1];
    in.num_pages = num_pages;
    in.block_table.assign(static_cast<size_t>(p.batch * mp), -1);
    const bool wide = t.block_table.dtype == FC_I64;
    for_each_element(t.block_table, [&](int64_t i, int64_t off) {
      const char* at = static_cast<const char*>(t.block_table.data) + off * (wide ? 8 : 4);
      int64_t e = 0;
      if (wide) std::memcpy(&e, at, 8);
      else {
        int32_t e32;
        std::memcpy(&e32, at, 4);
        e = e32;
      }
      // Entries past a sequence's last page are never read (vLLM leaves garbage there); the ones
      // that are read are checked below and by validate_side_inputs, with the caller's value.
      const int64_t b = i / mp, j = i % mp;
      const int64_t need = (p.skv(b) + p.page_size - 1) / p.page_size;
      if (j < need && (e < 0 || e >= num_pages))
        throw InvalidArgument("block_table[" + str(b) + "][" + str(j) + "] = " + str(e) + " is outside [0, num_pages = " +
                              str(num_pages) + ")");
      in.block_table[static_cast<size_t>(i)] = j < need ? static_cast<int32_t>(e) : -1;
    });
  } else if (p.paged()) {
    throw InvalidArgument("a paged cache (page_size " + str(p.page_size) + ") needs block_table");
  }
  validate_side_inputs(p, in);
}

// The logical rows of tensor t (reference/sequences.h), each row's storage offset in elements.
// Every row of t: f(logical offset, storage offset) (Storage::for_each_row; p is st's problem).
template <class F>
void for_each_row(const Problem&, const Storage& st, Tensor t, F&& f) {
  st.for_each_row(t, [&](int64_t logical, int64_t stored, int64_t) { f(logical, stored); });
}

// Strides no extent can make overlap (each dimension at least 1 long): for the tensors a storage
// is not used for. The problem's own contiguous strides would not do: a THD batch without tokens
// has a head stride of 0, which the storage layer rightly calls overlapping.
RowStrides unused_strides(const Problem& p, const Inputs& in, int64_t pad, Tensor t) {
  const bool kv = t == Tensor::k || t == Tensor::v;
  const int64_t w = t == Tensor::lse ? 1 : t == Tensor::q || t == Tensor::k ? p.head_dim_qk : p.head_dim_v;
  const int64_t heads = std::max<int64_t>(kv ? p.heads_kv : p.heads_q, 1);
  const Sequences seqs(p);
  int64_t seq = kv ? p.seq_kv : p.seq_q;
  if (kv && p.paged()) seq = p.page_size;
  else if (p.layout == Layout::thd) seq = (kv ? std::max(seqs.total_kv(), in.num_pages * p.page_size) : seqs.total_q()) + pad;
  seq = std::max<int64_t>(seq, 1);
  for (int64_t b = 0; b < p.batch; ++b) seq = std::max(seq, p.skv_stored(b));
  return {w * heads * seq, w * heads, w};
}

// fp64 rows into an FC_F64 view; THD padding rows (tokens past the last sequence) become NaN.
void scatter_f64(const Problem& p, const Storage& st, Tensor t, std::span<const double> logical, const fc_tensor_view& v,
                 int64_t tokens) {
  auto* base = static_cast<double*>(v.data);
  const int64_t w = st.width(t);
  for_each_row(p, st, t, [&](int64_t l, int64_t s) { std::memcpy(base + s, logical.data() + l, static_cast<size_t>(w) * 8); });
  if (p.layout != Layout::thd) return;
  const RowStrides& rs = st.strides(t);
  for (int64_t token = Sequences(p).total_q(); token < tokens; ++token)
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t c = 0; c < w; ++c) base[token * rs.seq + h * rs.head + c] = kNaN;
}

}  // namespace

const char* dtype_name(int32_t dtype) {
  static const char* const names[] = {"FC_F32", "FC_F16", "FC_BF16", "FC_E4M3", "FC_E5M2", "FC_I32", "FC_I64", "FC_F64"};
  return dtype >= 0 && dtype < 8 ? names[dtype] : "an unknown dtype";
}

// Absent: data NULL and no dimensions. A view of zero elements may have data NULL (torch's does).
bool present(const fc_tensor_view& v) { return v.data != nullptr || v.ndim != 0; }

// The view's dtype, number of dimensions and the dims the problem fixes (-1: free), or an error
// naming the tensor and the shape it needs (`form`: the layout's names for the dims).
void check_view(const fc_tensor_view& v, const char* name, int32_t dtype, const std::vector<int64_t>& want, const std::string& form) {
  if (v.dtype != dtype)
    throw InvalidArgument(std::string(name) + " is " + dtype_name(v.dtype) + "; the problem needs " + dtype_name(dtype));
  const int n = static_cast<int>(want.size());
  bool fits = v.ndim == n;
  for (int i = 0; fits && i < n; ++i) fits = want[static_cast<size_t>(i)] < 0 || v.shape[i] == want[static_cast<size_t>(i)];
  if (!fits) {
    const int shown = v.ndim >= 1 && v.ndim <= 4 ? v.ndim : 0;
    throw InvalidArgument(std::string(name) + " has shape " + dims(v.shape, shown) + "; the problem needs " + form + " = " +
                          dims(want.data(), n));
  }
  int64_t elems = 1;
  for (int i = 0; i < n; ++i) {
    if (v.shape[i] < 0) throw InvalidArgument(std::string(name) + " has a negative dimension");
    elems *= v.shape[i];
  }
  if (!v.data && elems > 0) throw InvalidArgument(std::string(name) + "'s data is NULL for " + str(elems) + " elements");
}

Placed place(const Problem& p, Tensor t, const fc_tensor_view& v, const char* name, int32_t dtype) {
  const bool kv = t == Tensor::k || t == Tensor::v;
  const int64_t w = t == Tensor::q || t == Tensor::k ? p.head_dim_qk : p.head_dim_v;
  const int64_t h = kv ? p.heads_kv : p.heads_q;
  const int64_t s = kv ? p.seq_kv : p.seq_q;
  const char* dn = t == Tensor::q || t == Tensor::k ? "Dqk" : "Dv";
  const std::string hn = kv ? "Hkv" : "Hq", sn = kv ? "Skv" : "Sq", tn = kv ? "Tk" : "Tq";
  const int64_t* st = v.strides;
  Placed out;
  if (t == Tensor::lse) {
    if (p.layout == Layout::thd) {
      check_view(v, name, dtype, {p.heads_q, -1}, "[Hq, Tq]");
      out.strides = {0, st[1], st[0]};
      out.rows = v.shape[1];
    } else {
      check_view(v, name, dtype, {p.batch, p.heads_q, p.seq_q}, "[B, Hq, Sq]");
      out.strides = {st[0], st[2], st[1]};
    }
    return out;
  }
  if (kv && p.paged()) {
    check_view(v, name, dtype, {-1, p.page_size, h, w}, std::string("[num_pages, page_size, Hkv, ") + dn + "] (a paged cache)");
    out.strides = {st[0], st[1], st[2]};
    out.rows = v.shape[0];
  } else {
    switch (p.layout) {
      case Layout::bhsd:
        check_view(v, name, dtype, {p.batch, h, s, w}, "[B, " + hn + ", " + sn + ", " + dn + "] (bhsd)");
        out.strides = {st[0], st[2], st[1]};
        break;
      case Layout::bshd:
        check_view(v, name, dtype, {p.batch, s, h, w}, "[B, " + sn + ", " + hn + ", " + dn + "] (bshd)");
        out.strides = {st[0], st[1], st[2]};
        break;
      case Layout::thd:
        check_view(v, name, dtype, {-1, h, w}, "[" + tn + ", " + hn + ", " + dn + "] (thd)");
        out.strides = {0, st[0], st[1]};
        out.rows = v.shape[0];
        break;
    }
  }
  const int last = v.ndim - 1;
  if (v.shape[last] > 1 && st[last] != 1)
    throw InvalidArgument(std::string(name) + "'s last dimension has stride " + str(st[last]) +
                          "; it must be contiguous (stride 1)");
  return out;
}

// The view's logical rows widened to fp32 (exact for every input dtype).
std::vector<float> gather(const Problem&, const Storage& st, Tensor t, const fc_tensor_view& v, DType d) {
  return st.decode(t, v.data, d);
}

void refuse_nonfinite(const Problem& p, Tensor t, const std::vector<float>& x, const char* name) {
  size_t e = 0;
  while (e < x.size() && std::isfinite(x[e])) ++e;
  if (e == x.size()) return;
  const Sequences seqs(p);
  const bool kv = t == Tensor::k || t == Tensor::v;
  const int64_t heads = kv ? p.heads_kv : p.heads_q;
  const int64_t w = t == Tensor::v || t == Tensor::o ? p.head_dim_v : p.head_dim_qk;
  int64_t b = 0;
  while (b + 1 < p.batch && static_cast<int64_t>(e) >= (kv ? seqs.kv0(b + 1) : seqs.q0(b + 1)) * heads * w) ++b;
  const int64_t n = kv ? seqs.skv(b) : seqs.sq(b);
  const int64_t r = static_cast<int64_t>(e) - (kv ? seqs.kv0(b) : seqs.q0(b)) * heads * w;
  throw CannotTest("input '" + (name ? std::string(name) : std::string(to_string(t))) + "' holds " + (std::isnan(x[e]) ? "NaN" : "Inf") +
                   " at [" + str(b) + "," + str(r / (n * w)) + "," + str(r / w % n) + "," + str(r % w) +
                   "]; set allow_nonfinite_inputs to check NaN/Inf propagation instead");
}

// The storage of q, o and lse (or of k and v), with the caller's views' strides for the tensors
// given. The constructor refuses strides that overlap or are negative, naming the tensor.
std::unique_ptr<Storage> storage_with(const Problem& p, const Inputs& in, int64_t pad,
                                      const std::vector<std::pair<Tensor, RowStrides>>& given) {
  RowStrides s[5];
  for (int i = 0; i < 5; ++i) s[i] = unused_strides(p, in, pad, static_cast<Tensor>(i));
  for (const auto& [t, rs] : given) s[static_cast<int>(t)] = rs;
  return std::make_unique<Storage>(p, in, pad, s);
}

// q, k, v (and `o`, `lse` when present, in dtypes o_dtype / lse_dtype), with the side tensors read
// into `in` first (a paged storage needs the block table).
Placement place_all(const Problem& p, const fc_tensors& t, const fc_tensor_view* o, int32_t o_dtype, const fc_tensor_view* lse,
                    int32_t lse_dtype, Inputs& in) {
  for (const auto& [v, name] : {std::pair{&t.q, "q"}, {&t.k, "k"}, {&t.v, "v"}})
    if (!present(*v)) throw InvalidArgument(std::string(name) + " is absent");
  // Before the shapes: a paged k would otherwise be reported as a dense k of the wrong shape.
  if (present(t.block_table) && !p.paged()) throw InvalidArgument("block_table is given but page_size is 0 (no paged cache)");
  const int32_t in_dtype = from_dtype(p.dtype);
  const Placed q = place(p, Tensor::q, t.q, "q", in_dtype);
  const Placed k = place(p, Tensor::k, t.k, "k", in_dtype);
  const Placed v = place(p, Tensor::v, t.v, "v", in_dtype);
  const Sequences seqs(p);
  int64_t pad_q = 0, pad_kv = 0;
  if (p.layout == Layout::thd) {
    if (q.rows < seqs.total_q())
      throw InvalidArgument("cu_seqlens_q ends at " + str(seqs.total_q()) + ", past the " + str(q.rows) + " rows of q");
    pad_q = q.rows - seqs.total_q();
  }
  if (p.paged()) {
    if (v.rows != k.rows) throw InvalidArgument("v holds " + str(v.rows) + " pages, k " + str(k.rows));
    if (k.rows < 1) throw InvalidArgument("k (a paged cache) holds no page");
  } else if (p.layout == Layout::thd) {
    int64_t stored = 0;
    for (int64_t b = 0; b < p.batch; ++b) stored += p.skv_stored(b);
    if (k.rows < stored) throw InvalidArgument("cu_seqlens_k ends at " + str(stored) + ", past the " + str(k.rows) + " rows of k");
    if (v.rows != k.rows) throw InvalidArgument("v has " + str(v.rows) + " rows, k " + str(k.rows));
    pad_kv = k.rows - stored;
  }
  read_sides(p, t, k.rows, in);
  std::vector<std::pair<Tensor, RowStrides>> qs{{Tensor::q, q.strides}};
  for (const auto& [view, which, dtype, name] :
       {std::tuple{o, Tensor::o, o_dtype, "o"}, std::tuple{lse, Tensor::lse, lse_dtype, "lse"}}) {
    if (!view || !present(*view)) continue;
    const Placed pl = place(p, which, *view, name, dtype);
    if (p.layout == Layout::thd && pl.rows != q.rows)
      throw InvalidArgument(std::string(name) + " has " + str(pl.rows) + " rows (tokens), q " + str(q.rows) + ": they must match");
    qs.emplace_back(which, pl.strides);
  }
  Placement out;
  out.tokens_q = q.rows;
  out.pad_q = pad_q, out.pad_kv = pad_kv, out.rows_kv = k.rows;
  out.qside = storage_with(p, in, pad_q, qs);
  out.kvside = storage_with(p, in, pad_kv, {{Tensor::k, k.strides}, {Tensor::v, v.strides}});
  return out;
}

void gather_inputs(const Problem& p, const fc_tensors& t, const Placement& pl, Inputs& in) {
  in.q = gather(p, *pl.qside, Tensor::q, t.q, p.dtype);
  in.k = gather(p, *pl.kvside, Tensor::k, t.k, p.dtype);
  in.v = gather(p, *pl.kvside, Tensor::v, t.v, p.dtype);
}

void check_options(const fc_check_options& opt) {
  if (opt.lse_base != FC_LSE_LOG_E && opt.lse_base != FC_LSE_LOG_2)
    throw InvalidArgument("lse_base must be FC_LSE_LOG_E or FC_LSE_LOG_2 (leave lse absent for a kernel without one)");
  if (opt.max_rows < 1 || opt.tile_q < 1 || opt.tile_kv < 1) throw InvalidArgument("max_rows, tile_q and tile_kv must be positive");
}

Report judge_views(const Problem& p, const fc_tensors& t, const Placement& pl, const Inputs& in, const fc_check_options& opt) {
  const std::vector<float> o32 = gather(p, *pl.qside, Tensor::o, t.o, p.o_dtype());
  std::vector<float> lse32;
  KernelOutput ko{o32, std::nullopt, std::nullopt};
  if (present(t.lse)) {
    lse32 = gather(p, *pl.qside, Tensor::lse, t.lse, DType::f32);
    ko.lse = lse32;
  }
  Declared declared{opt.lse_base == FC_LSE_LOG_2 ? LseBase::two : LseBase::e, to_empty(opt.empty_row_lse), opt.tile_q, opt.tile_kv};
  declared.alibi_lse = to_alibi_lse(opt.alibi_lse);
  return judge(p, in, ko, declared, JudgeOptions{opt.max_rows, opt.error_maps != 0});
}

fc_tensor_view contiguous_view(void* data, int32_t dtype, std::vector<int64_t> shape) {
  fc_tensor_view v{};
  v.data = data;
  v.dtype = dtype;
  v.ndim = static_cast<int32_t>(shape.size());
  int64_t stride = 1;
  for (int i = v.ndim - 1; i >= 0; --i) {
    v.shape[i] = shape[static_cast<size_t>(i)];
    v.strides[i] = stride;
    stride *= std::max<int64_t>(v.shape[i], 1);
  }
  return v;
}


void encode_stored(const Storage& st, Tensor t, DType d, const std::vector<float>& logical, std::vector<uint8_t>& bytes) {
  std::vector<float> s(static_cast<size_t>(st.elems(t)), std::numeric_limits<float>::quiet_NaN());
  st.scatter(t, logical.data(), s.data());
  bytes.resize(s.size() * static_cast<size_t>(dtype_bytes(d)));
  encode(d, s.data(), static_cast<int64_t>(s.size()), bytes.data());
}

// The side tensors a problem needs as views of `in`'s vectors (shared by fc_make_inputs2 and the
// fuzz callback's arguments).
void side_views(const Problem& p, const Inputs& in, fc_tensors& t) {
  auto f32 = [](const std::vector<float>& x, std::vector<int64_t> shape) {
    return contiguous_view(const_cast<float*>(x.data()), FC_F32, shape);
  };
  if (!in.alibi_slopes.empty())
    t.alibi_slopes = p.alibi_per_batch ? f32(in.alibi_slopes, {p.batch, p.heads_q}) : f32(in.alibi_slopes, {p.heads_q});
  if (!in.sinks.empty()) t.sinks = f32(in.sinks, {p.heads_q});
  const std::vector<int64_t> ds = p.descale == Descale::head ? std::vector<int64_t>{p.batch, p.heads_kv} : std::vector<int64_t>{1};
  if (!in.descale_q.empty()) t.descale_q = f32(in.descale_q, ds);
  if (!in.descale_k.empty()) t.descale_k = f32(in.descale_k, ds);
  if (!in.descale_v.empty()) t.descale_v = f32(in.descale_v, ds);
  if (!in.block_table.empty())
    t.block_table = contiguous_view(const_cast<int32_t*>(in.block_table.data()), FC_I32, {p.batch, in.max_pages(p.batch)});
}

// Views of the kernel's buffers as the runner hands them (gpu/kernel.h's KernelArgs: row strides,
// spans and side pointers), shaped as flashcheck.h describes them for the problem's layout.
fc_tensors views_of(const Problem& p, const KernelArgs& a) {
  fc_tensors t;
  fc_tensors_init(&t);
  const Sequences seqs(p);
  auto view = [&](Tensor which, const TensorRef& r, int32_t dtype) {
    fc_tensor_view v{};
    if (!r.data) return v;
    v.data = r.data;
    v.dtype = dtype;
    const bool kv = which == Tensor::k || which == Tensor::v;
    const int64_t w = which == Tensor::lse ? 1 : which == Tensor::q || which == Tensor::k ? p.head_dim_qk : p.head_dim_v;
    const int64_t h = kv ? p.heads_kv : p.heads_q;
    // Rows of a packed tensor: what its span holds past the heads of its last row.
    const int64_t tokens = r.stride_seq > 0 ? (r.numel - ((h - 1) * r.stride_head + w)) / r.stride_seq + 1
                                            : (kv ? seqs.total_kv() : seqs.total_q());
    auto set = [&](std::initializer_list<std::pair<int64_t, int64_t>> d) {
      v.ndim = 0;
      for (auto [n, s] : d) {
        v.shape[v.ndim] = n;
        v.strides[v.ndim++] = s;
      }
    };
    if (which == Tensor::lse) {
      if (p.layout == Layout::thd) set({{p.heads_q, r.stride_head}, {tokens, r.stride_seq}});
      else set({{p.batch, r.stride_outer}, {p.heads_q, r.stride_head}, {p.seq_q, r.stride_seq}});
    } else if (kv && p.paged()) {
      set({{a.num_pages, r.stride_outer}, {p.page_size, r.stride_seq}, {h, r.stride_head}, {w, 1}});
    } else {
      const int64_t s = kv ? p.seq_kv : p.seq_q;
      switch (p.layout) {
        case Layout::bhsd: set({{p.batch, r.stride_outer}, {h, r.stride_head}, {s, r.stride_seq}, {w, 1}}); break;
        case Layout::bshd: set({{p.batch, r.stride_outer}, {s, r.stride_seq}, {h, r.stride_head}, {w, 1}}); break;
        case Layout::thd: set({{tokens, r.stride_seq}, {h, r.stride_head}, {w, 1}}); break;
      }
    }
    return v;
  };
  const int32_t d = from_dtype(p.dtype);
  t.q = view(Tensor::q, a.q, d);
  t.k = view(Tensor::k, a.k, d);
  t.v = view(Tensor::v, a.v, d);
  t.o = view(Tensor::o, a.o, from_dtype(p.o_dtype()));
  t.lse = view(Tensor::lse, a.lse, FC_F32);
  auto side = [](const void* data, int32_t dtype, std::initializer_list<int64_t> shape) {
    return data ? contiguous_view(const_cast<void*>(data), dtype, shape) : fc_tensor_view{};
  };
  if (p.alibi_per_batch) t.alibi_slopes = side(a.alibi_slopes, FC_F32, {p.batch, p.heads_q});
  else t.alibi_slopes = side(a.alibi_slopes, FC_F32, {p.heads_q});
  t.sinks = side(a.sinks, FC_F32, {p.heads_q});
  const bool head = p.descale == Descale::head;
  for (auto [ptr, out] : {std::pair{a.descale_q, &t.descale_q}, {a.descale_k, &t.descale_k}, {a.descale_v, &t.descale_v}})
    *out = head ? side(ptr, FC_F32, {p.batch, p.heads_kv}) : side(ptr, FC_F32, {1});
  t.block_table = side(a.block_table, FC_I32, {p.batch, a.max_pages_per_seq});
  return t;
}

// fc_make_inputs2 and fc_make_backward_inputs: the case's inputs (placed for a backward with
// `backward`, and its dO beside them) in the problem's own storage.
fc_status make_inputs_handle(const fc_attention2* pa, int32_t dist, uint64_t seed, bool backward, fc_inputs** out) {
  return guarded([&] {
    need(out, "out");
    *out = nullptr;
    auto h = std::make_unique<fc_inputs>();
    h->problem = problem_from_c(pa);
    const Problem& p = h->problem;
    Inputs in = make_inputs(p, seed, to_dist(dist), backward);
    const Storage st(p, in);
    auto stored = [&](Tensor t, DType d, const std::vector<float>& logical, std::vector<uint8_t>& bytes) {
      encode_stored(st, t, d, logical, bytes);
      return contiguous_view(bytes.data(), from_dtype(d), st.shape(t));
    };
    fc_tensors_init(&h->tensors);
    h->tensors.q = stored(Tensor::q, p.dtype, in.q, h->q);
    h->tensors.k = stored(Tensor::k, p.dtype, in.k, h->k);
    h->tensors.v = stored(Tensor::v, p.dtype, in.v, h->v);
    if (backward) h->d_out_view = stored(Tensor::o, p.o_dtype(), make_d_out(p, seed), h->d_out);
    in.q.clear(), in.k.clear(), in.v.clear();
    h->sides = std::move(in);
    side_views(p, h->sides, h->tensors);
    h->attention = problem_to_c(p, false, h->lengths);
    *out = h.release();
  });
}

}  // namespace flashcheck::capi

using namespace flashcheck;
using namespace flashcheck::capi;

extern "C" {

void fc_tensors_init(fc_tensors* t) {
  if (!t) return;
  *t = fc_tensors{};
  t->struct_size = sizeof(fc_tensors);
}

fc_status fc_check2(const fc_attention2* pa, const fc_tensors* tin, const fc_check_options* opt_in, fc_report** out) {
  return guarded([&] {
    need(out, "out");
    *out = nullptr;
    const fc_check_options opt = read_check_options(opt_in);
    const Problem p = problem_from_c(pa);
    need(tin, "tensors");
    check_struct_size(tin->struct_size, sizeof(fc_tensors), "fc_tensors");
    const fc_tensors& t = *tin;
    if (!present(t.o)) throw InvalidArgument("o is absent");
    check_options(opt);
    Inputs in;
    const Placement pl = place_all(p, t, &t.o, from_dtype(p.o_dtype()), &t.lse, FC_F32, in);
    gather_inputs(p, t, pl, in);
    if (!opt.allow_nonfinite_inputs) {
      refuse_nonfinite(p, Tensor::q, in.q);
      refuse_nonfinite(p, Tensor::k, in.k);
      refuse_nonfinite(p, Tensor::v, in.v);
    }
    auto r = std::make_unique<fc_report>();
    r->report = judge_views(p, t, pl, in, opt);
    *out = r.release();
  });
}

fc_status fc_reference(const fc_attention2* pa, const fc_tensors* tin, const fc_tensor_view* o, const fc_tensor_view* lse) {
  return guarded([&] {
    const Problem p = problem_from_c(pa);
    need(tin, "tensors");
    check_struct_size(tin->struct_size, sizeof(fc_tensors), "fc_tensors");
    need(o, "o");
    if (!present(*o)) throw InvalidArgument("o (the output view) is absent");
    const fc_tensor_view* lse_out = lse && present(*lse) ? lse : nullptr;
    Inputs in;
    const Placement pl = place_all(p, *tin, o, FC_F64, lse_out, FC_F64, in);
    gather_inputs(p, *tin, pl, in);
    const OracleResult r = naive_attention(p, in, RowSet::all(p));
    scatter_f64(p, *pl.qside, Tensor::o, r.o, *o, pl.tokens_q);
    if (lse_out) scatter_f64(p, *pl.qside, Tensor::lse, r.lse, *lse_out, pl.tokens_q);
  });
}

fc_status fc_make_inputs2(const fc_attention2* pa, int32_t dist, uint64_t seed, fc_inputs** out) {
  return make_inputs_handle(pa, dist, seed, false, out);
}

fc_status fc_make_backward_inputs(const fc_attention2* pa, int32_t dist, uint64_t seed, fc_inputs** out) {
  return make_inputs_handle(pa, dist, seed, true, out);
}

fc_status fc_inputs_d_out(const fc_inputs* in, fc_tensor_view* out) {
  return guarded([&] {
    need(in, "inputs");
    need(out, "out");
    if (!present(in->d_out_view))
      throw InvalidArgument("these inputs hold no dO: fc_make_backward_inputs draws it, fc_make_inputs2 does not");
    *out = in->d_out_view;
  });
}

fc_status fc_inputs_get(const fc_inputs* in, fc_attention2* problem, fc_tensors* t) {
  return guarded([&] {
    need(in, "inputs");
    if (problem) write_struct(problem, in->attention, sizeof(fc_attention2), "fc_attention2");
    if (t) write_struct(t, in->tensors, sizeof(fc_tensors), "fc_tensors");
  });
}

void fc_inputs_free(fc_inputs* in) { delete in; }

}  // extern "C"
