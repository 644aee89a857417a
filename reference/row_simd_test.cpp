// The oracles' vectorised row passes: every vector width this CPU runs computes the same row max
// (bit for bit: a max and a product by the scale are exact operations of each lane), flags a NaN
// wherever it falls, and exponentials within libmvec's few ulp of std::exp; the vector-tail form
// gives a key the same bits whichever lane or tail it falls on.
#include "reference/row_simd.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "reference/rng.h"
#include "testing/test_seed.h"

namespace flashcheck {
namespace {

std::vector<double> row(uint64_t seed, int64_t n, double spread) {
  const CounterRng rng(seed, 7);
  std::vector<double> s(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) s[static_cast<size_t>(j)] = spread * rng.normal(static_cast<uint64_t>(j));
  return s;
}

TEST(RowSimd, EveryWidthFindsTheSameScaledMaxAndItsNaN) {
  const std::vector<RowKernels> all = row_kernels_all();
  std::printf("widths on this CPU: %zu (widest %s)\n", all.size(), all.back().name);
  for (int64_t n : {1, 2, 3, 7, 8, 9, 17, 100, 1023}) {
    const std::vector<double> base = row(flashcheck::testing::seed_for(3100 + n), n, 5.0);
    for (int64_t nan_at : {int64_t{-1}, int64_t{0}, n - 1, n / 2}) {
      std::vector<double> want = base;
      if (nan_at >= 0) want[static_cast<size_t>(nan_at)] = std::numeric_limits<double>::quiet_NaN();
      double m = -std::numeric_limits<double>::infinity();
      for (double& x : want) {
        x *= 0.125;
        if (!std::isnan(x)) m = std::max(m, x);
      }
      for (const RowKernels& k : all) {
        std::vector<double> s = base;
        if (nan_at >= 0) s[static_cast<size_t>(nan_at)] = std::numeric_limits<double>::quiet_NaN();
        const RowMax r = k.row_max(s.data(), n, 0.125);
        EXPECT_EQ(r.m, m) << k.name << " n=" << n << " NaN at " << nan_at;
        EXPECT_EQ(r.nan, nan_at >= 0) << k.name << " n=" << n << " NaN at " << nan_at;
        for (int64_t j = 0; j < n; ++j)
          if (j != nan_at) {
            EXPECT_EQ(s[static_cast<size_t>(j)], want[static_cast<size_t>(j)]) << k.name << " j=" << j;
          }
      }
    }
  }
}

TEST(RowSimd, ExponentialsStayWithinAFewUlpOfStdExp) {
  for (const RowKernels& k : row_kernels_all())
    for (int64_t n : {1, 5, 8, 13, 64, 257}) {
      const std::vector<double> base = row(flashcheck::testing::seed_for(3200 + n), n, 20.0);
      double m = base[0];
      for (double x : base) m = std::max(m, x);
      for (int tail_vector = 0; tail_vector < 2; ++tail_vector) {
        std::vector<double> s = base;
        const double l = (tail_vector ? k.exp_tail_vector : k.exp_sum)(s.data(), n, m);
        double want_l = 0;
        for (int64_t j = 0; j < n; ++j) {
          const double want = std::exp(base[static_cast<size_t>(j)] - m);
          want_l += want;
          EXPECT_LE(std::fabs(s[static_cast<size_t>(j)] - want), 4 * std::ldexp(want, -52) + 1e-300)
              << k.name << (tail_vector ? " vector tail" : "") << " n=" << n << " j=" << j;
        }
        EXPECT_NEAR(l, want_l, 8 * n * std::ldexp(want_l, -52)) << k.name << " n=" << n;
      }
    }
}

// A key's probability must not depend on where the row is cut (the backward's two passes cut rows
// differently): with the vector tail, exp of the same value has the same bits at any position.
TEST(RowSimd, TheVectorTailGivesEveryPositionTheSameBits) {
  for (const RowKernels& k : row_kernels_all()) {
    const std::vector<double> base = row(flashcheck::testing::seed_for(3300), 64, 3.0);
    std::vector<double> whole = base;
    k.exp_tail_vector(whole.data(), 64, 1.5);
    for (int64_t off : {1, 3, 5, 7}) {
      std::vector<double> part(base.begin() + off, base.end());
      k.exp_tail_vector(part.data(), static_cast<int64_t>(part.size()), 1.5);
      for (size_t j = 0; j < part.size(); ++j)
        EXPECT_EQ(part[j], whole[j + static_cast<size_t>(off)]) << k.name << " offset " << off << " j=" << j;
    }
  }
}

}  // namespace
}  // namespace flashcheck
