// The backward pass at the C boundary (API 5): fc_reference_backward (the fp64 backward oracle,
// written back in the caller's layout) and fc_check_backward (verify/backward_criteria.h's
// verify_backward on a kernel's gradients, the forward's judge on its o and lse beside it). The
// problem and every view go through problem model 2's own placement (capi/views2.h): dO is placed
// as o, dq as q, dk and dv as k and v, so every layout and variant the forward takes is the
// backward's too, with the same names in the same messages.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "capi/capi_internal.h"
#include "capi/flashcheck.h"
#include "capi/views2.h"
#include "reference/gradient_storage.h"
#include "reference/naive_backward.h"
#include "reference/replica_backward.h"
#include "verify/backward_criteria.h"
#include "verify/backward_expected.h"
#include "verify/backward_report.h"
#include "verify/report_html.h"
#include "verify/untrusted_text.h"

struct fc_backward_report {
  flashcheck::BackwardReport backward;
  std::unique_ptr<fc_report> forward;  // null when o was absent
  std::vector<std::string> failed;
  std::string text, json, html;
  std::vector<int32_t> lengths;  // fc_backward_report_problem2's
};

namespace flashcheck::capi {

namespace {

std::string str(int64_t x) { return std::to_string(x); }

int64_t element_bytes(int32_t dtype) {
  switch (dtype) {
    case FC_E4M3:
    case FC_E5M2: return 1;
    case FC_F16:
    case FC_BF16: return 2;
    case FC_F32:
    case FC_I32: return 4;
    default: return 8;  // FC_I64, FC_F64 (an unknown dtype is refused by its placement first)
  }
}

int64_t element_count(const fc_tensor_view& v) {
  int64_t n = 1;
  for (int i = 0; i < v.ndim; ++i) n *= v.shape[i];
  return n;
}

// The byte intervals a view's elements occupy, sorted: one per row where the last dimension is
// contiguous (every q/k/v/o-shaped view is), else one per element.
std::vector<std::pair<uintptr_t, uintptr_t>> byte_intervals(const fc_tensor_view& v) {
  const auto base = reinterpret_cast<uintptr_t>(v.data);
  const int64_t item = element_bytes(v.dtype);
  fc_tensor_view rows = v;
  int64_t run = 1;
  if (v.ndim >= 2 && (v.shape[v.ndim - 1] <= 1 || v.strides[v.ndim - 1] == 1)) {
    run = v.shape[v.ndim - 1];
    rows.ndim = v.ndim - 1;
  }
  std::vector<std::pair<uintptr_t, uintptr_t>> out;
  out.reserve(static_cast<size_t>(element_count(rows)));
  for_each_element(rows, [&](int64_t, int64_t off) {
    const uintptr_t lo = base + static_cast<uintptr_t>(off * item);
    out.emplace_back(lo, lo + static_cast<uintptr_t>(run * item));
  });
  std::sort(out.begin(), out.end());
  return out;
}

// Whether two views share a byte. Their address ranges first (disjoint buffers: no work); where
// those overlap, element by element, so views that interleave in one buffer without sharing an
// element (FlashAttention's packed qkv and dqkv) are told apart from real aliasing.
bool share_memory(const fc_tensor_view& a, const fc_tensor_view& b) {
  if (!a.data || !b.data || element_count(a) == 0 || element_count(b) == 0) return false;
  auto range = [](const fc_tensor_view& v) {
    int64_t lo = 0, hi = 0;
    for (int i = 0; i < v.ndim; ++i) {
      const int64_t reach = (v.shape[i] - 1) * v.strides[i];
      (reach < 0 ? lo : hi) += reach;
    }
    const auto base = reinterpret_cast<intptr_t>(v.data);
    const int64_t item = element_bytes(v.dtype);
    return std::pair{base + lo * item, base + (hi + 1) * item};
  };
  const auto [alo, ahi] = range(a);
  const auto [blo, bhi] = range(b);
  if (ahi <= blo || bhi <= alo) return false;
  const auto x = byte_intervals(a), y = byte_intervals(b);
  size_t i = 0, j = 0;
  while (i < x.size() && j < y.size()) {
    if (x[i].second <= y[j].first) ++i;
    else if (y[j].second <= x[i].first) ++j;
    else return true;
  }
  return false;
}

// A gradient (an output of the kernel or of fc_reference_backward) must not share memory with an
// input or with another gradient: a kernel that wrote dQ into q has destroyed what it is judged on,
// and an oracle writing into its own inputs would read half-overwritten values.
void refuse_aliasing(const fc_tensors& t, const fc_gradients& g) {
  const std::pair<const fc_tensor_view*, const char*> inputs[] = {
      {&t.q, "q"},           {&t.k, "k"},         {&t.v, "v"},         {&t.o, "o"},
      {&t.lse, "lse"},       {&g.d_out, "d_out"}, {&t.alibi_slopes, "alibi_slopes"}, {&t.sinks, "sinks"},
      {&t.descale_q, "descale_q"}, {&t.descale_k, "descale_k"}, {&t.descale_v, "descale_v"}, {&t.block_table, "block_table"}};
  const std::pair<const fc_tensor_view*, const char*> grads[] = {{&g.dq, "dq"}, {&g.dk, "dk"}, {&g.dv, "dv"}, {&g.dsinks, "dsinks"}};
  for (size_t a = 0; a < std::size(grads); ++a) {
    const auto& [gv, gn] = grads[a];
    if (!present(*gv)) continue;
    for (const auto& [iv, in] : inputs)
      if (present(*iv) && share_memory(*gv, *iv))
        throw InvalidArgument(std::string(gn) + " shares memory with " + in +
                              ": a gradient buffer must not alias an input (the gradients are written where the inputs are read)");
    for (size_t b = a + 1; b < std::size(grads); ++b)
      if (present(*grads[b].first) && share_memory(*gv, *grads[b].first))
        throw InvalidArgument(std::string(gn) + " shares memory with " + grads[b].second + ": each gradient needs its own elements");
  }
}

// The gradients' views placed as their forward tensors, in the storages of their own strides.
struct GradientPlacement {
  std::unique_ptr<Storage> qside;   // dq (as q) and d_out (as o)
  std::unique_ptr<Storage> kvside;  // dk, dv (as k, v)
};

GradientPlacement place_gradients(const Problem& p, const Inputs& in, const Placement& pl, const fc_gradients& g, int32_t grad_dtype,
                                  bool need_grads) {
  if (!present(g.d_out)) throw InvalidArgument("d_out (dO, the output's gradient) is absent");
  const std::pair<const fc_tensor_view*, const char*> named[] = {{&g.dq, "dq"}, {&g.dk, "dk"}, {&g.dv, "dv"}};
  if (need_grads)
    for (const auto& [v, name] : named)
      if (!present(*v)) throw InvalidArgument(std::string(name) + " is absent");
  std::vector<std::pair<Tensor, RowStrides>> qs, kvs;
  auto add = [&](const fc_tensor_view& v, Tensor as, const char* name, int32_t dtype, bool kv) {
    if (!present(v)) return;
    const Placed at = place(p, as, v, name, dtype);
    if (kv) {
      if ((p.paged() || p.layout == Layout::thd) && at.rows != pl.rows_kv)
        throw InvalidArgument(std::string(name) + " has " + str(at.rows) + (p.paged() ? " pages" : " rows (tokens)") + ", " +
                              (as == Tensor::k ? "k " : "v ") + str(pl.rows_kv) + ": they must match");
      kvs.emplace_back(as, at.strides);
    } else {
      if (p.layout == Layout::thd && at.rows != pl.tokens_q)
        throw InvalidArgument(std::string(name) + " has " + str(at.rows) + " rows (tokens), q " + str(pl.tokens_q) + ": they must match");
      qs.emplace_back(as, at.strides);
    }
  };
  add(g.d_out, Tensor::o, "d_out", from_dtype(p.o_dtype()), false);
  add(g.dq, Tensor::q, "dq", grad_dtype, false);
  add(g.dk, Tensor::k, "dk", grad_dtype, true);
  add(g.dv, Tensor::v, "dv", grad_dtype, true);
  if (present(g.dsinks)) {
    if (!p.sinks) throw InvalidArgument("dsinks is given but the problem has no sinks");
    check_view(g.dsinks, "dsinks", grad_dtype == FC_F64 ? FC_F64 : FC_F32, {p.heads_q}, "[Hq]");
    if (g.dsinks.strides[0] < 0) throw InvalidArgument("dsinks: negative strides are not supported");
  }
  GradientPlacement out;
  out.qside = storage_with(p, in, pl.pad_q, qs);
  out.kvside = storage_with(p, in, pl.pad_kv, kvs);
  return out;
}

// fp64 gradients into an FC_F64 view: every element of it written, those no logical row maps to
// (padding, unused pages and slots) with 0, and a slot several sequences read with their sum
// (reference/gradient_storage.h).
void write_gradient(const Storage& st, Tensor t, std::span<const double> logical, const fc_tensor_view& v) {
  const std::vector<double> stored = gradient_in_storage(st, t, logical);
  auto* base = static_cast<double*>(v.data);
  for_each_element(v, [&](int64_t, int64_t off) { base[off] = static_cast<size_t>(off) < stored.size() ? stored[static_cast<size_t>(off)] : 0.0; });
}

// A paged cache whose sequences share a slot holds one gradient for all of them; the criteria judge
// each sequence's keys apart, so such a cache is not judged rather than judged wrongly.
void refuse_shared_slots(const Problem& p, const Storage& st) {
  if (!p.paged()) return;
  std::vector<int64_t> first;
  st.for_each_row(Tensor::k, [&](int64_t, int64_t s, int64_t) { first.push_back(s); });
  std::sort(first.begin(), first.end());
  const auto twice = std::adjacent_find(first.begin(), first.end());
  if (twice != first.end())
    throw CannotTest("two sequences read the same slot of the paged cache (k element offset " + str(*twice) +
                     "): its dK/dV is the sum of theirs, which fc_check_backward cannot judge per sequence yet; use a block "
                     "table whose sequences share no page");
}

std::vector<float> gather_dsinks(const fc_tensor_view& v, int64_t heads) {
  std::vector<float> out(static_cast<size_t>(heads));
  for (int64_t h = 0; h < heads; ++h)
    std::memcpy(&out[static_cast<size_t>(h)], static_cast<const char*>(v.data) + h * v.strides[0] * 4, 4);
  return out;
}

void read_gradients_struct(const fc_gradients* g) {
  need(g, "gradients");
  check_struct_size(g->struct_size, sizeof(fc_gradients), "fc_gradients");
}

const GradientVerdict* verdict(const fc_backward_report* r, int32_t i) {
  if (!r || i < 0 || i >= static_cast<int32_t>(r->backward.gradients.size())) return nullptr;
  return &r->backward.gradients[static_cast<size_t>(i)];
}

}  // namespace

}  // namespace flashcheck::capi

using namespace flashcheck;
using namespace flashcheck::capi;

extern "C" {

void fc_gradients_init(fc_gradients* g) {
  if (!g) return;
  *g = fc_gradients{};
  g->struct_size = sizeof(fc_gradients);
}

fc_status fc_reference_backward(const fc_attention2* pa, const fc_tensors* tin, const fc_gradients* gin) {
  return guarded([&] {
    const Problem p = problem_from_c(pa);
    need(tin, "tensors");
    check_struct_size(tin->struct_size, sizeof(fc_tensors), "fc_tensors");
    read_gradients_struct(gin);
    const fc_tensors& t = *tin;
    const fc_gradients& g = *gin;
    Inputs in;
    const Placement pl = place_all(p, t, nullptr, FC_F64, nullptr, FC_F64, in);
    const GradientPlacement gp = place_gradients(p, in, pl, g, FC_F64, false);
    refuse_aliasing(t, g);
    gather_inputs(p, t, pl, in);
    const std::vector<float> d_out = gather(p, *gp.qside, Tensor::o, g.d_out, p.o_dtype());
    const BackwardResult r = naive_attention_backward(p, in, d_out);
    if (present(g.dq)) write_gradient(*gp.qside, Tensor::q, r.dq, g.dq);
    if (present(g.dk)) write_gradient(*gp.kvside, Tensor::k, r.dk, g.dk);
    if (present(g.dv)) write_gradient(*gp.kvside, Tensor::v, r.dv, g.dv);
    if (present(g.dsinks))
      for (int64_t h = 0; h < p.heads_q; ++h) static_cast<double*>(g.dsinks.data)[h * g.dsinks.strides[0]] = r.dsinks[static_cast<size_t>(h)];
  });
}

fc_status fc_check_backward(const fc_attention2* pa, const fc_tensors* tin, const fc_gradients* gin, const fc_check_options* opt_in,
                            fc_backward_report** out) {
  return guarded([&] {
    need(out, "out");
    *out = nullptr;
    const fc_check_options opt = read_check_options(opt_in);
    check_options(opt);
    const Problem p = problem_from_c(pa);
    need(tin, "tensors");
    check_struct_size(tin->struct_size, sizeof(fc_tensors), "fc_tensors");
    read_gradients_struct(gin);
    const fc_tensors& t = *tin;
    const fc_gradients& g = *gin;
    Inputs in;
    const Placement pl = place_all(p, t, &t.o, from_dtype(p.o_dtype()), &t.lse, FC_F32, in);
    const DType gd = gradient_dtype(p);
    const GradientPlacement gp = place_gradients(p, in, pl, g, from_dtype(gd), true);
    refuse_aliasing(t, g);
    refuse_shared_slots(p, *pl.kvside);
    gather_inputs(p, t, pl, in);
    const std::vector<float> d_out = gather(p, *gp.qside, Tensor::o, g.d_out, p.o_dtype());
    if (!opt.allow_nonfinite_inputs) {
      refuse_nonfinite(p, Tensor::q, in.q);
      refuse_nonfinite(p, Tensor::k, in.k);
      refuse_nonfinite(p, Tensor::v, in.v);
      refuse_nonfinite(p, Tensor::o, d_out, "d_out");
    }
    auto r = std::make_unique<fc_backward_report>();
    if (present(t.o)) {
      r->forward = std::make_unique<fc_report>();
      r->forward->report = judge_views(p, t, pl, in, opt);
    }
    KernelGradients k{gather(p, *gp.qside, Tensor::q, g.dq, gd), gather(p, *gp.kvside, Tensor::k, g.dk, gd),
                      gather(p, *gp.kvside, Tensor::v, g.dv, gd), std::nullopt};
    if (present(g.dsinks)) k.dsinks = gather_dsinks(g.dsinks, p.heads_q);
    BackwardOptions bo;
    bo.error_maps = opt.error_maps != 0;
    bo.tile_q = opt.tile_q, bo.tile_kv = opt.tile_kv;
    r->backward = verify_backward(p, make_backward_expected(p, in, d_out), k, bo);
    r->failed = r->backward.failed();
    if (r->forward)
      for (const Criterion& c : r->forward->report.criteria)
        if (!c.pass) r->failed.push_back("forward: " + c.name);
    *out = r.release();
  });
}

int32_t fc_backward_report_pass(const fc_backward_report* r) {
  return r && r->backward.pass() && (!r->forward || r->forward->report.pass()) ? 1 : 0;
}

int32_t fc_backward_report_failed_count(const fc_backward_report* r) { return r ? static_cast<int32_t>(r->failed.size()) : 0; }

const char* fc_backward_report_failed_name(const fc_backward_report* r, int32_t i) {
  if (!r || i < 0 || i >= static_cast<int32_t>(r->failed.size())) return nullptr;
  return r->failed[static_cast<size_t>(i)].c_str();
}

int32_t fc_backward_report_gradient_count(const fc_backward_report* r) {
  return r ? static_cast<int32_t>(r->backward.gradients.size()) : 0;
}

const char* fc_backward_report_gradient_name(const fc_backward_report* r, int32_t i) {
  const GradientVerdict* v = verdict(r, i);
  return v ? v->name.c_str() : nullptr;
}

int32_t fc_backward_report_gradient_pass(const fc_backward_report* r, int32_t i) {
  const GradientVerdict* v = verdict(r, i);
  return v && v->pass() ? 1 : 0;
}

int32_t fc_backward_report_gradient_worst(const fc_backward_report* r, int32_t i, fc_location* out) {
  const GradientVerdict* v = verdict(r, i);
  if (!v || !out || !v->worst) return 0;
  const GradientLocation& w = *v->worst;
  *out = fc_location{w.b, w.h, w.row, w.col, -1, -1, w.kernel, w.oracle};
  return 1;
}

const fc_report* fc_backward_report_forward(const fc_backward_report* r) { return r ? r->forward.get() : nullptr; }

const char* fc_backward_report_text(const fc_backward_report* r) {
  if (!r) return "";
  return caught<const char*>("(flashcheck: the report could not be rendered; see fc_last_error)\n", [&] {
    auto* m = const_cast<fc_backward_report*>(r);  // the cached rendering is not part of the report's value
    m->text = to_text(r->backward);
    return m->text.c_str();
  });
}

const char* fc_backward_report_json(const fc_backward_report* r) {
  if (!r) return "";
  return caught<const char*>("{\"error\": \"the report could not be rendered; see fc_last_error\"}", [&] {
    auto* m = const_cast<fc_backward_report*>(r);
    nlohmann::json j;
    j["pass"] = fc_backward_report_pass(r) == 1;
    j["backward"] = to_json(r->backward);
    j["forward"] = r->forward ? to_json(r->forward->report) : nlohmann::json(nullptr);
    m->json = json_text(j);
    return m->json.c_str();
  });
}

const char* fc_backward_report_html(const fc_backward_report* r) {
  if (!r) return "";
  return caught<const char*>("", [&] {
    auto* m = const_cast<fc_backward_report*>(r);
    BackwardReport b = r->backward;  // what a caller set (the reproduction) shown as printable text
    b.repro = printable_line(b.repro);
    for (std::string& n : b.notes) n = printable_line(n);
    m->html = r->forward ? to_html(printable_report(r->forward->report), &b) : to_html(b);
    return m->html.c_str();
  });
}

fc_status fc_backward_report_set_repro(fc_backward_report* r, const char* command) {
  return guarded([&] {
    need(r, "report");
    need(command, "command");
    r->backward.repro = command;
    if (r->forward) r->forward->report.repro = command;
  });
}

fc_status fc_backward_report_problem2(const fc_backward_report* r, fc_attention2* out) {
  return guarded([&] {
    need(r, "report");
    need(out, "out");
    auto* m = const_cast<fc_backward_report*>(r);  // the lengths' storage, like the cached renderings
    const fc_attention2 a = problem_to_c(r->backward.problem, false, m->lengths);
    write_struct(out, a, sizeof(fc_attention2), "fc_attention2");
  });
}

void fc_backward_report_free(fc_backward_report* r) { delete r; }

}  // extern "C"
