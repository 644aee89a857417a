// The backward oracle against the forward oracle it differentiates: central finite differences of
// L = Σ dO ∘ O(inputs), O from naive_attention, on random coordinates of q, k, v and the sinks, for
// every variant — and of a paged cache's shared slots, whose gradient is the sum over the sequences
// that read them.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <tuple>
#include <cmath>
#include <functional>
#include <random>
#include <string>

#include "reference/backward_test_util.h"
#include "reference/gradient_storage.h"
#include "reference/naive.h"
#include "reference/naive_backward.h"
#include "reference/storage.h"
#include "testing/test_seed.h"

namespace flashcheck {
namespace {

using LD = long double;

// L = Σ dO ∘ O over every output element, summed in long double. The forward runs on one thread:
// it is called four times per probe on problems of a few hundred pairs, where a parallel region's
// start and barrier (milliseconds on a loaded machine) would cost more than the work.
LD loss(const Problem& p, const Inputs& in, const std::vector<float>& dout) {
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const OracleResult r = naive_attention(p, in);
  omp_set_num_threads(threads);
  LD l = 0;
  for (size_t x = 0; x < dout.size(); ++x) l += static_cast<LD>(dout[x]) * r.o[x];
  return l;
}

// The step. Each probed coordinate is first moved to a multiple of 2^-10 (|x| < 2^12 here), so
// x ± h and x ± 2h are exact floats: the differences are truly central.
constexpr float kH = 0x1p-8f;
float snap(float x) { return std::ldexp(std::round(std::ldexp(x, 10)), -10); }

// One probed coordinate: `set(x)` writes it (and any copies of it) into the inputs.
struct Probe {
  std::string name;
  float x0;
  std::function<void(Inputs&, float)> set;
  double grad;  // the oracle's ∂L/∂x
};

// How far the fp64 forward's L may be from the exact one: its O elements are good to ~(n + D)·u
// times the largest |v| (held to the textbook within that, naive_test and variants_test), so
// 2^-40 · Σ|dO| · max|v| leaves a margin of about a hundred.
LD loss_rounding(const std::vector<float>& dout, LD vmax) {
  LD s = 0;
  for (float g : dout) s += std::fabs(static_cast<LD>(g));
  return 0x1p-40L * s * vmax;
}

// The central difference at h: (L(x + h) − L(x − h)) / 2h. Its error is h²/6 · L''' + O(h⁴) from
// truncation and at most ε/h from L's rounding ε. The truncation is estimated from the step
// itself (Richardson): FD(2h) − FD(h) = 3 · h²/6 · L''' + O(h⁴), so |FD(h) − ∂L/∂x| ≤
// (2/3)|FD(2h) − FD(h)| (twice the estimate, for the h⁴ terms) + 4ε/h (the rounding of all four
// evaluations). Returns |FD(h) − grad| − tolerance (≤ 0 passes) and the tolerance.
std::pair<LD, LD> check_probe(const Problem& p, Inputs& in, const std::vector<float>& dout, const Probe& pr, LD eps) {
  auto fd = [&](float h) {
    pr.set(in, pr.x0 + h);
    const LD up = loss(p, in, dout);
    pr.set(in, pr.x0 - h);
    const LD down = loss(p, in, dout);
    pr.set(in, pr.x0);
    return (up - down) / (2 * static_cast<LD>(h));
  };
  const LD f1 = fd(kH), f2 = fd(2 * kH);
  const LD tol = 2 * std::fabs(f2 - f1) / 3 + 4 * eps / kH;
  return {std::fabs(f1 - pr.grad) - tol, tol};
}

// Up to `count` random coordinates of one tensor, snapped; the oracle's gradient is filled later.
void add_probes(std::vector<Probe>& out, const char* name, std::vector<float> Inputs::*t, Inputs& in, size_t count,
                std::mt19937_64& g) {
  const size_t n = (in.*t).size();
  for (size_t c = 0; c < count && n > 0; ++c) {
    const size_t at = std::uniform_int_distribution<size_t>(0, n - 1)(g);
    (in.*t)[at] = snap((in.*t)[at]);
    out.push_back({std::string(name) + "[" + std::to_string(at) + "]", (in.*t)[at],
                   [t, at](Inputs& x, float v) { (x.*t)[at] = v; }, 0.0});
  }
}

TEST(BackwardFiniteDifferences, AgreeWithTheForwardOnEveryVariant) {
  std::mt19937_64 g(testing::seed_for(311));
  int probes = 0, sharp = 0;
  for (int n = 0; n < 60; ++n) {
    // f32 mostly; one problem in four keeps its dtype (fp8 among them: gradients times descale).
    Problem p = n % 4 == 3 ? random_variant_problem(g) : random_f32_variant_problem(g);
    if (p.descale == Descale::head) p.descale = Descale::tensor;  // one descale: simple to apply
    const uint64_t seed = g();
    SCOPED_TRACE(describe(p, seed));
    Inputs in = make_inputs(p, seed, n % 2 ? Dist::uniform : Dist::normal);
    const std::vector<float> dout = random_dout(p, seed);
    std::vector<Probe> pr;
    add_probes(pr, "q", &Inputs::q, in, 3, g);
    add_probes(pr, "k", &Inputs::k, in, 3, g);
    add_probes(pr, "v", &Inputs::v, in, 3, g);
    for (size_t h = 0; h < in.sinks.size(); ++h)
      if (std::isfinite(in.sinks[h])) {
        in.sinks[h] = snap(in.sinks[h]);
        pr.push_back({"sink[" + std::to_string(h) + "]", in.sinks[h], [h](Inputs& x, float v) { x.sinks[h] = v; }, 0.0});
      }
    const BackwardResult r = naive_attention_backward(p, in, dout);
    for (Probe& x : pr) {
      const size_t at = static_cast<size_t>(std::stoll(x.name.substr(x.name.find('[') + 1)));
      const char t = x.name[0];
      // fp8: the oracle's gradient is with respect to x·descale, so ∂L/∂x is it times descale.
      const double ds = t == 'q' ? descale_of(p, in.descale_q, 0, 0)
                        : t == 'k' ? descale_of(p, in.descale_k, 0, 0)
                        : t == 'v' ? descale_of(p, in.descale_v, 0, 0) : 1.0;
      x.grad = (t == 'q' ? r.dq[at] : t == 'k' ? r.dk[at] : t == 'v' ? r.dv[at] : r.dsinks[at]) * ds;
    }
    LD vmax = 0;
    for (float v : in.v) vmax = std::max<LD>(vmax, std::fabs(v));
    if (is_fp8(p.dtype)) vmax *= descale_of(p, in.descale_v, 0, 0);
    const LD eps = loss_rounding(dout, vmax);
    for (const Probe& x : pr) {
      const auto [excess, tol] = check_probe(p, in, dout, x, eps);
      EXPECT_LE(excess, 0) << x.name << ": oracle " << x.grad << ", tolerance " << static_cast<double>(tol);
      ++probes;
      sharp += tol < 0.01L * std::fabs(x.grad);
    }
    if (HasFailure()) return;
  }
  // Not vacuous: most probes are held to 1% of their gradient or better (the rest are gradients
  // near 0: masked or far-from-max keys, rows that see nothing).
  EXPECT_GE(sharp, probes / 2) << sharp << " of " << probes << " probes held within 1%";
}

// A slot of a page two sequences share holds one key for both: perturbing it moves both
// sequences' logical copies, and its finite difference is the sum of their gradients — which is
// what gradient_in_storage lays into the cache.
TEST(BackwardFiniteDifferences, ASharedPageSlotGetsTheSumOfItsReaders) {
  const Problem p = parse_problem("b=3 hq=2 hkv=1 sq=5,3,4 skv=10,9,3 d=8 page=4 pages=shared sinks=1 softcap=6 dtype=f32");
  struct Probed {
    LD excess = 0, tol = 0;
    double grad = 0, g0 = 0, g1 = 0;
    uint64_t seed = 0;
  };
  // One draw: a slot of page table[0][0] (key j of sequences 0 and 1) and the component where both
  // readers' gradients and their sum are largest, probed by a finite difference.
  auto probe = [&](uint64_t seed) {
    Inputs in = make_inputs(p, seed);
    const std::vector<float> dout = random_dout(p, seed);
    const Storage st(p, in);
    const int64_t mp = in.max_pages(p.batch);
    EXPECT_EQ(in.block_table[static_cast<size_t>(mp)], in.block_table[0]);  // sequence 1 shares page 0
    const Sequences seqs(p);
    int64_t key = 0, comp = 0;
    {
      const BackwardResult r0 = naive_attention_backward(p, in, dout);
      double best = -1;
      for (int64_t j = 0; j < p.page_size; ++j)
        for (int64_t c = 0; c < p.head_dim_qk; ++c) {
          const double a = r0.dk[static_cast<size_t>(seqs.k_row(0, 0, j) + c)], b = r0.dk[static_cast<size_t>(seqs.k_row(1, 0, j) + c)];
          const double m = std::min({std::fabs(a), std::fabs(b), std::fabs(a + b)});
          if (m > best) best = m, key = j, comp = c;
        }
    }
    const int64_t slot = st.row(Tensor::k, 0, 0, key) + comp;
    EXPECT_EQ(st.row(Tensor::k, 1, 0, key) + comp, slot);
    std::vector<float> cache(static_cast<size_t>(st.elems(Tensor::k)), 0.0f);
    st.scatter(Tensor::k, in.k.data(), cache.data());
    cache[static_cast<size_t>(slot)] = snap(cache[static_cast<size_t>(slot)]);
    st.gather(Tensor::k, cache.data(), in.k.data());
    const BackwardResult r = naive_attention_backward(p, in, dout);
    const std::vector<double> dk_cache = gradient_in_storage(st, Tensor::k, r.dk);
    const Probe pr{"k cache slot", cache[static_cast<size_t>(slot)],
                   [&](Inputs& x, float v) {
                     std::vector<float> c = cache;
                     c[static_cast<size_t>(slot)] = v;
                     st.gather(Tensor::k, c.data(), x.k.data());
                   },
                   dk_cache[static_cast<size_t>(slot)]};
    LD vmax = 0;
    for (float v : in.v) vmax = std::max<LD>(vmax, std::fabs(v));
    Probed out;
    std::tie(out.excess, out.tol) = check_probe(p, in, dout, pr, loss_rounding(dout, vmax));
    out.grad = pr.grad;
    out.g0 = r.dk[static_cast<size_t>(seqs.k_row(0, 0, key) + comp)];
    out.g1 = r.dk[static_cast<size_t>(seqs.k_row(1, 0, key) + comp)];
    out.seed = seed;
    return out;
  };
  // A draw whose readers barely attend to page 0 (the sink taking the weight) leaves every slot's
  // gradient under what a finite difference resolves (about 1 draw in 30 did): such a draw proves
  // nothing either way, so the next salt is drawn, up to 8.
  Probed r;
  for (uint64_t salt = 312; salt < 320; ++salt) {
    r = probe(testing::seed_for(salt));
    if (r.tol < 0.01L * std::fabs(r.grad)) break;
  }
  EXPECT_LE(r.excess, 0) << "cache gradient " << r.grad << ", tolerance " << static_cast<double>(r.tol) << ", seed " << r.seed;
  EXPECT_LT(r.tol, 0.01L * std::fabs(r.grad)) << "8 draws, none resolvable; last seed " << r.seed;
  // Both readers contribute, so neither sequence's own gradient alone is the slot's.
  EXPECT_EQ(r.grad, r.g0 + r.g1);
  EXPECT_GT(std::fabs(r.g0), 10 * r.tol);
  EXPECT_GT(std::fabs(r.g1), 10 * r.tol);
}

}  // namespace
}  // namespace flashcheck
