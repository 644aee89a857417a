// The gradient criteria as the spec states them, over every problem the campaign generators make
// with every variant allowed (fuzz/generators.h; counterexamples print as problem lines).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cmath>

#include "fuzz/generators.h"
#include "verify/backward_criteria.h"
#include "verify/backward_report.h"
#include "verify/metrics.h"

namespace flashcheck {
namespace {

ProblemSpace every_variant() {
  ProblemSpace s;
  s.max_seq = 64;
  s.max_work = 1e5;
  s.max_varlen_batch = 4;
  s.dtypes = {DType::f32, DType::f16, DType::bf16, DType::e4m3, DType::e5m2};
  s.windows = s.softcap = s.sinks = s.seqused = s.paged = s.alibi_per_batch = true;
  s.alibi = {Alibi::symmetric, Alibi::signed_};
  s.layouts = {Layout::bhsd, Layout::bshd, Layout::thd};
  s.out_dtypes = {DType::bf16, DType::f16};
  s.descales = {Descale::none, Descale::tensor, Descale::head};
  return s;
}

struct Judged {
  Case c;
  Inputs in;
  std::vector<float> dout;
  BackwardExpected ex;
};

Judged draw() {
  Judged j;
  j.c = *gen_case(every_variant());
  const Problem& p = j.c.problem;
  j.in = make_inputs(p, j.c.seed, j.c.dist);
  j.dout = make_d_out(p, j.c.seed);
  j.ex = make_backward_expected(p, j.in, j.dout);
  return j;
}

// The oracle's value of gradient `which` (0 dq, 1 dk, 2 dv, 3 dsinks) at element e.
double truth(const BackwardExpected& ex, size_t which, size_t e) {
  switch (which) {
    case 0: return ex.oracle.dq[e];
    case 1: return ex.oracle.dk[e];
    case 2: return ex.oracle.dv[e];
    default: return ex.oracle.dsinks[e];
  }
}

// The oracle's gradients times `factor` (1: themselves) rounded once to nearest (ties to even): dQ,
// dK, dV in the gradient dtype, the sinks' gradient in fp32. `which` picks the one scaled.
KernelGradients rounded_oracle(const Problem& p, const BackwardExpected& ex, size_t which = 0, double factor = 1) {
  KernelGradients k;
  k.dq.resize(ex.oracle.dq.size()), k.dk.resize(ex.oracle.dk.size()), k.dv.resize(ex.oracle.dv.size());
  if (p.sinks) k.dsinks.emplace(ex.oracle.dsinks.size());
  std::vector<float>* grads[] = {&k.dq, &k.dk, &k.dv, k.dsinks ? &*k.dsinks : nullptr};
  for (size_t g = 0; g < 4; ++g) {
    if (!grads[g]) continue;
    const DType dt = g == 3 ? DType::f32 : gradient_dtype(p);
    for (size_t e = 0; e < grads[g]->size(); ++e) (*grads[g])[e] = round_nearest_even(dt, truth(ex, g, e) * (g == which ? factor : 1.0));
  }
  return k;
}

// A gradient too large for its dtype has no finite rounding: the truth itself cannot be written.
bool representable(const KernelGradients& k, const BackwardExpected& ex) {
  const std::vector<float>* grads[] = {&k.dq, &k.dk, &k.dv, k.dsinks ? &*k.dsinks : nullptr};
  for (size_t g = 0; g < 4; ++g)
    for (size_t e = 0; grads[g] && e < grads[g]->size(); ++e)
      if (std::isfinite(truth(ex, g, e)) && !std::isfinite((*grads[g])[e])) return false;
  return true;
}

RC_GTEST_PROP(BackwardCriteria, TheOraclesGradientsRoundedToNearestPassEveryCriterion, ()) {
  const Judged j = draw();
  const KernelGradients k = rounded_oracle(j.c.problem, j.ex);
  RC_PRE(representable(k, j.ex));
  const BackwardReport r = verify_backward(j.c.problem, j.ex, k);
  if (!r.pass()) RC_FAIL(to_text(r));
}

// ε four times the rel_l2 limit the judge applies to that gradient on that problem (the dtype's,
// or 2x the baseline's own where that is looser): rel_l2 is ε before rounding, so the scaled
// gradient fails, and the other gradients still pass. Gradients that cancel to noise (rel_l2 reported
// only) and gradients whose change rounding would hide are not drawn.
RC_GTEST_PROP(BackwardCriteria, AGradientScaledByOnePlusEpsilonWellAboveTheToleranceFails, ()) {
  const Judged j = draw();
  const Problem& p = j.c.problem;
  const KernelGradients exact = rounded_oracle(p, j.ex);
  RC_PRE(representable(exact, j.ex));
  const BackwardReport good = verify_backward(p, j.ex, exact);
  // The gradients a scaling can show in: some element compared, and the change large enough to
  // survive rounding (a gradient whose truth lies below the dtype's normal range, as dQ near 1e-199
  // under a one-hot softmax, rounds to the same values scaled or not).
  // Where rel_l2 is judged: a gradient that cancels to noise has no relative tolerance to be
  // above (backward_criteria.cpp), only the absolute baseline rule.
  auto rel_l2_limit = [](const GradientVerdict& v) {
    for (const Criterion& c : v.criteria)
      if (c.name == "rel_l2" && c.role == Criterion::Role::judged) return c.limit;
    return 0.0;
  };
  std::vector<size_t> visible;
  for (size_t x = 0; x < good.gradients.size(); ++x) {
    const GradientVerdict& v = good.gradients[x];
    const DType dt = v.name == "dsinks" ? DType::f32 : gradient_dtype(p);
    if (rel_l2_limit(v) > 0 && v.max_ref > 0 && 4 * rel_l2_limit(v) * v.max_ref >= 4 * ulp_at(dt, v.max_ref)) visible.push_back(x);
  }
  RC_PRE(!visible.empty());
  const size_t which = *rc::gen::elementOf(visible);
  const GradientVerdict& g = good.gradients[which];
  const double eps = 4 * rel_l2_limit(g);
  const KernelGradients k = rounded_oracle(p, j.ex, which, 1 + eps);
  RC_PRE(representable(k, j.ex));
  const BackwardReport r = verify_backward(p, j.ex, k);
  RC_TAG(g.name);
  for (const GradientVerdict& v : r.gradients) {
    if (v.name == g.name) {
      if (v.pass()) RC_FAIL(g.name + " scaled by 1 + " + std::to_string(eps) + " passed:\n" + to_text(r));
    } else if (!v.pass()) {
      RC_FAIL(v.name + " failed though only " + g.name + " was scaled:\n" + to_text(r));
    }
  }
}

}  // namespace
}  // namespace flashcheck
