// The backward's tensors of a `check` file (verify/check_file_format.h): do, dq, dk, dv and dsinks
// read into the logical layout through the same storages as the forward's o, q, k and v, and written
// back the same way (tests, goldens). Every refusal names the tensor at fault.
#include <algorithm>
#include <string>

#include "reference/gradient_storage.h"
#include "reference/replica_backward.h"
#include "verify/check_file_detail.h"
#include "verify/check_file_format.h"
#include "verify/metrics.h"

namespace flashcheck {

using namespace check_file_detail;

namespace {

constexpr const char* kGradientNames[] = {"do", "dq", "dk", "dv"};

// A paged cache whose sequences share a slot holds one gradient for all of them, while the criteria
// judge each sequence's keys apart: such a file is not judged rather than judged wrongly.
void refuse_shared_slots(const Problem& p, const Storage& st_kv) {
  if (!p.paged()) return;
  std::vector<int64_t> first;
  st_kv.for_each_row(Tensor::k, [&](int64_t, int64_t s, int64_t) { first.push_back(s); });
  std::sort(first.begin(), first.end());
  if (std::adjacent_find(first.begin(), first.end()) != first.end())
    throw CannotTest("tensors 'dk' and 'dv': two sequences of the paged cache read the same slot (block_table shares a "
                     "page), so its gradient is the sum of theirs, which the per-sequence gradient criteria cannot judge "
                     "yet; write a block table whose sequences share no page");
}

}  // namespace

std::optional<CheckFileGradients> read_check_gradients(SafetensorsFile& f, const Problem& p, const Storage& st_q,
                                                       const Storage& st_kv, bool allow_nonfinite_inputs) {
  std::vector<std::string> have, lack;
  for (const char* name : kGradientNames) (find(f, name) ? have : lack).push_back(name);
  const StTensor* dsinks = find(f, "dsinks");
  if (have.empty()) {
    if (dsinks) throw CannotTest("tensor 'dsinks' without 'do', 'dq', 'dk' and 'dv': a file's gradients are all four, dsinks optional");
    return std::nullopt;
  }
  if (!lack.empty()) {
    auto list = [](const std::vector<std::string>& v) {
      std::string r;
      for (const auto& n : v) r += (r.empty() ? "'" : ", '") + n + "'";
      return r;
    };
    throw CannotTest("tensor '" + lack.front() + "' is missing: a file with gradients holds all of 'do', 'dq', 'dk' and 'dv' "
                     "(this one has " + list(have) + ", not " + list(lack) + ")");
  }
  const StDType od = to_st(p.o_dtype()), gd = to_st(gradient_dtype(p));
  StTensor& d_out = f.tensors.at("do");
  if (d_out.dtype != od)
    throw CannotTest("tensor 'do' is " + to_string(d_out.dtype) + " but o is " + to_string(od) +
                     ": dO, the gradient of the loss with respect to o, is in o's dtype");
  for (const char* name : {"dq", "dk", "dv"}) {
    const StTensor& t = f.tensors.at(name);
    if (t.dtype != gd)
      throw CannotTest(std::string("tensor '") + name + "' is " + to_string(t.dtype) + "; the gradients of " +
                       to_string(to_st(p.dtype)) + " inputs are " + to_string(gd) +
                       (is_fp8(p.dtype) ? " (o's dtype: fp8 inputs' gradients are in the output's)" : " (the inputs' dtype)"));
  }
  const std::string kv_where = p.paged() ? "a paged cache, as k" : "as k";
  expect_shape("do", d_out, st_q.shape(Tensor::o), "o's shape");
  expect_shape("dq", f.tensors.at("dq"), st_q.shape(Tensor::q), "q's shape");
  expect_shape("dk", f.tensors.at("dk"), st_kv.shape(Tensor::k), kv_where);
  expect_shape("dv", f.tensors.at("dv"), st_kv.shape(Tensor::v), p.paged() ? "a paged cache, as v" : "as v");
  if (dsinks) {
    if (!p.sinks) throw CannotTest("tensor 'dsinks' is given but the file has no 'sinks': there is no sink to differentiate");
    if (dsinks->dtype != StDType::F32)
      throw CannotTest("tensor 'dsinks' has dtype " + to_string(dsinks->dtype) + "; expected F32, as the sinks");
    expect_shape("dsinks", *dsinks, {p.heads_q}, "[Hq], one per query head");
  }
  refuse_shared_slots(p, st_kv);

  // Widened and gathered into the logical layout; the raw bytes go as soon as they are widened.
  auto logical = [&](const Storage& st, Tensor t, const char* name, int64_t elems) {
    StTensor& raw = f.tensors.at(name);
    const std::vector<float> wide = raw.to_f32(name);
    raw.data = {};
    raw.data.shrink_to_fit();
    std::vector<float> out(static_cast<size_t>(elems));
    st.gather(t, wide.data(), out.data());
    return out;
  };
  const std::vector<int64_t> do_shape = d_out.shape;
  CheckFileGradients g;
  g.d_out = logical(st_q, Tensor::o, "do", p.o_elems());
  if (!allow_nonfinite_inputs) refuse_nonfinite(p, st_q, Tensor::o, g.d_out, do_shape, "do");
  g.kernel.dq = logical(st_q, Tensor::q, "dq", p.q_elems());
  g.kernel.dk = logical(st_kv, Tensor::k, "dk", p.k_elems());
  g.kernel.dv = logical(st_kv, Tensor::v, "dv", p.v_elems());
  if (dsinks) g.kernel.dsinks = dsinks->to_f32("dsinks");
  return g;
}

namespace {

// Both add_check_gradients: logical gradients in fp64, laid where a kernel writes them.
void add_gradients(SafetensorsFile& f, const Problem& p, const Inputs& in, std::span<const float> d_out,
                   std::span<const double> dq, std::span<const double> dk, std::span<const double> dv,
                   const std::vector<double>* dsinks, const CheckFileWriteOptions& opt) {
  const Storage sq(p, in, opt.pad_q), skv(p, in, opt.pad_kv);
  const DType gd = gradient_dtype(p);
  const std::string& pre = opt.gradient_prefix;
  // A gradient where the kernel writes it: zeros where nothing reads, sums (in fp64) where
  // sequences share a slot; rounded once to f32, then to the gradient dtype.
  auto add = [&](const Storage& st, Tensor t, std::span<const double> logical, const std::string& name) {
    const std::vector<double> placed = gradient_in_storage(st, t, logical);
    const std::vector<float> wide(placed.begin(), placed.end());
    f.tensors[pre + name] = make_tensor(gd, st.shape(t), wide);
    if (opt.gradients_f32) f.tensors[pre + name + "_f32"] = make_f32_tensor(st.shape(t), wide);
  };
  std::vector<float> d_out_stored(static_cast<size_t>(sq.elems(Tensor::o)), 0.0f);
  sq.scatter(Tensor::o, d_out.data(), d_out_stored.data());
  f.tensors[pre + "do"] = make_tensor(p.o_dtype(), sq.shape(Tensor::o), d_out_stored);
  add(sq, Tensor::q, dq, "dq");
  add(skv, Tensor::k, dk, "dk");
  add(skv, Tensor::v, dv, "dv");
  if (dsinks) f.tensors[pre + "dsinks"] = make_f32_tensor({p.heads_q}, std::vector<float>(dsinks->begin(), dsinks->end()));
}

std::vector<double> widened(const std::vector<float>& x) { return {x.begin(), x.end()}; }

}  // namespace

void add_check_gradients(SafetensorsFile& f, const Problem& p, const Inputs& in, std::span<const float> d_out,
                         const KernelGradients& g, const CheckFileWriteOptions& opt) {
  std::optional<std::vector<double>> dsinks;
  if (g.dsinks) dsinks = widened(*g.dsinks);
  add_gradients(f, p, in, d_out, widened(g.dq), widened(g.dk), widened(g.dv), dsinks ? &*dsinks : nullptr, opt);
}

void add_check_gradients(SafetensorsFile& f, const Problem& p, const Inputs& in, std::span<const float> d_out,
                         const BackwardResult& g, const CheckFileWriteOptions& opt) {
  auto span_of = [](const auto& v) { return std::span<const double>(v.data(), v.size()); };
  add_gradients(f, p, in, d_out, span_of(g.dq), span_of(g.dk), span_of(g.dv), p.sinks ? &g.dsinks : nullptr, opt);
}

}  // namespace flashcheck
