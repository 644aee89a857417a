// decode_paged_f16's combine arithmetic (merge.h) on the CPU, with partial states built as the
// split kernel builds them (raw max, log2 of the sum relative to it, O normalised; fp32) over the
// key ranges of split_plan.h: the merge agrees with an fp64 softmax over all keys; empty splits
// change no bit; a row every split left empty is O = 0, LSE = −inf, never NaN; a NaN partial (or
// an unwritten, NaN-poisoned one) makes the row NaN; close maxima of scores near 1e7 merge exactly.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "gpu/decode_paged_f16/merge.h"
#include "gpu/decode_paged_f16/split_plan.h"

namespace flashcheck::kernels {
namespace {

constexpr int kD = 4;  // output columns: enough to see every column merged alike
constexpr float kInf = std::numeric_limits<float>::infinity();

struct Partial {
  float m = -kInf, log2l = -kInf;
  float o[kD] = {};
};
struct Row {
  float o[kD];
  float lse;
};

// A split's partial over keys [b, e), as the split kernel computes it (P unrounded here).
Partial partial_of(const std::vector<float>& s, const std::vector<float>& v, int64_t b, int64_t e, float sl2) {
  Partial p;
  if (b >= e) return p;
  float m = -kInf;
  for (int64_t j = b; j < e; ++j) m = std::fmax(m, s[static_cast<size_t>(j)]);
  const float mu = m == -kInf ? 0.f : m;
  float l = 0, acc[kD] = {};
  for (int64_t j = b; j < e; ++j) {
    const float w = exp2f((s[static_cast<size_t>(j)] - mu) * sl2);
    l += w;
    for (int d = 0; d < kD; ++d) acc[d] += w * v[static_cast<size_t>(j * kD + d)];
  }
  const float inv = l == 0.f ? 0.f : 1.f / l;
  p.m = l == 0.f ? -kInf : m;
  p.log2l = l == 0.f ? -kInf : log2f(l);
  for (int d = 0; d < kD; ++d) p.o[d] = acc[d] * inv;
  return p;
}

// The combine of one row, in split order, with merge.h's arithmetic (combine_kernel.cuh's loop).
Row merge(const std::vector<Partial>& parts, float sl2) {
  float mx = -kInf;
  for (const Partial& p : parts) mx = std::fmax(mx, p.m);
  const float mu = merge_shift(mx);
  float sum = 0, acc[kD] = {};
  for (const Partial& p : parts) {
    const float w = merge_weight(p.m, p.log2l, mu, sl2);
    sum += w;
    for (int d = 0; d < kD; ++d) acc[d] += w * p.o[d];
  }
  Row r;
  const float inv = merge_inverse(sum);
  for (int d = 0; d < kD; ++d) r.o[d] = acc[d] * inv;
  r.lse = merge_lse(mu, sum, sl2);
  return r;
}

std::vector<Partial> split_partials(const std::vector<float>& s, const std::vector<float>& v, int64_t splits, int64_t tile,
                                    float sl2) {
  std::vector<Partial> parts;
  const int64_t n = static_cast<int64_t>(s.size());
  for (int64_t k = 0; k < splits; ++k) {
    const KeyRange r = split_range(n, splits, tile, k);
    parts.push_back(partial_of(s, v, r.begin, r.end, sl2));
  }
  return parts;
}

RC_GTEST_PROP(DecodeMerge, AgreesWithOnePassSoftmaxInFp64, ()) {
  const int64_t n = *rc::gen::inRange<int64_t>(1, 3000);
  const int64_t splits = *rc::gen::inRange<int64_t>(1, 64);
  const int64_t tile = *rc::gen::element<int64_t>(1, 7, 32, 64);
  const double spread = *rc::gen::element(1.0, 10.0, 1000.0);  // scores from gentle to one-hot
  const float sl2 = static_cast<float>(0.088 * 1.4426950408889634);
  const auto sraw = *rc::gen::container<std::vector<int>>(static_cast<size_t>(n), rc::gen::inRange(-1000, 1000));
  const auto vraw = *rc::gen::container<std::vector<int>>(static_cast<size_t>(n * kD), rc::gen::inRange(-1000, 1000));
  std::vector<float> s(sraw.size()), v(vraw.size());
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<float>(sraw[i] * spread / 1000.0);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(vraw[i] / 1000.0);
  const Row r = merge(split_partials(s, v, splits, tile, sl2), sl2);
  // fp64 reference over every key at once.
  double m = -INFINITY;
  for (float x : s) m = std::max(m, static_cast<double>(x));
  double l = 0, o[kD] = {};
  for (int64_t j = 0; j < n; ++j) {
    const double w = std::exp2((s[static_cast<size_t>(j)] - m) * sl2);
    l += w;
    for (int d = 0; d < kD; ++d) o[d] += w * v[static_cast<size_t>(j * kD + d)];
  }
  for (int d = 0; d < kD; ++d) RC_ASSERT(std::fabs(r.o[d] - o[d] / l) <= 1e-5 + 1e-4 * std::fabs(o[d] / l));
  const double lse = (m * sl2 + std::log2(l)) * std::log(2.0);
  RC_ASSERT(std::fabs(r.lse - lse) <= 1e-5 * (1 + std::fabs(lse)));
}

RC_GTEST_PROP(DecodeMerge, EmptySplitsChangeNoBit, ()) {
  const int64_t n = *rc::gen::inRange<int64_t>(1, 500);
  const auto sraw = *rc::gen::container<std::vector<int>>(static_cast<size_t>(n), rc::gen::inRange(-3000, 3000));
  std::vector<float> s(sraw.size()), v(static_cast<size_t>(n * kD));
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<float>(sraw[i]) / 300.f;
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 7919) % 2001) / 1000.f - 1.f;
  const float sl2 = 0.3f;
  const std::vector<Partial> parts = split_partials(s, v, *rc::gen::inRange<int64_t>(1, 8), 16, sl2);
  // The same partials with empty states inserted anywhere (as splits past the last tile are).
  std::vector<Partial> padded;
  for (const Partial& p : parts) {
    for (int k = *rc::gen::inRange(0, 3); k > 0; --k) padded.push_back(Partial{});
    padded.push_back(p);
  }
  padded.push_back(Partial{});
  const Row a = merge(parts, sl2), b = merge(padded, sl2);
  RC_ASSERT(std::memcmp(&a, &b, sizeof a) == 0);
}

TEST(DecodeMerge, EveryEmptySplitIsTheEmptyRow) {
  for (int splits : {1, 2, 40}) {
    const Row r = merge(std::vector<Partial>(static_cast<size_t>(splits)), 0.18f);
    for (float x : r.o) EXPECT_EQ(x, 0.f) << splits << " empty splits";
    EXPECT_EQ(r.lse, -kInf) << splits << " empty splits";
  }
  // Keys that exist but a row sees none of (all masked): the split kernel writes the empty state.
  const std::vector<float> s{-kInf, -kInf, -kInf}, v(3 * kD, 1.f);
  const Row r = merge(split_partials(s, v, 2, 2, 0.18f), 0.18f);
  for (float x : r.o) EXPECT_EQ(x, 0.f);
  EXPECT_EQ(r.lse, -kInf);
}

TEST(DecodeMerge, NanPartialsMakeTheRowNan) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> s{0.5f, 1.f, -2.f, 3.f, 0.f, 1.f}, v(6 * kD, 0.25f);
  // A NaN score in split 1 of 3 (NaN in q or k): that split's sum is NaN, and so is the row.
  s[3] = nan;
  Row r = merge(split_partials(s, v, 3, 2, 0.5f), 0.5f);
  for (float x : r.o) EXPECT_TRUE(std::isnan(x));
  EXPECT_TRUE(std::isnan(r.lse));
  // NaN with every other split empty (the shift is then 0, the NaN still weighs NaN).
  std::vector<Partial> parts(4);
  parts[2] = partial_of(std::vector<float>{nan, nan}, std::vector<float>(2 * kD, 1.f), 0, 2, 0.5f);
  r = merge(parts, 0.5f);
  EXPECT_TRUE(std::isnan(r.lse));
  for (float x : r.o) EXPECT_TRUE(std::isnan(x));
  // A partial the split kernel never wrote holds the workspace poison (every byte 0xFF: NaN).
  s[3] = 1.f;
  parts = split_partials(s, v, 3, 2, 0.5f);
  parts[1].m = parts[1].log2l = nan;
  std::fill(std::begin(parts[1].o), std::end(parts[1].o), nan);
  r = merge(parts, 0.5f);
  EXPECT_TRUE(std::isnan(r.lse));
  for (float x : r.o) EXPECT_TRUE(std::isnan(x));
  // NaN in one value column (NaN in v): that column alone.
  std::fill(v.begin(), v.end(), 0.25f);
  v[4 * kD + 1] = nan;
  r = merge(split_partials(s, v, 3, 2, 0.5f), 0.5f);
  EXPECT_TRUE(std::isnan(r.o[1]));
  EXPECT_FALSE(std::isnan(r.o[0]) || std::isnan(r.o[2]) || std::isnan(r.lse));
}

// Scores near 1e7 (fp32 spacing 1) whose splits' maxima differ by a few units: the raw maxima are
// subtracted exactly, so the weights are right; LSEs of 1e7·sl2 rounded to fp32 first would each
// be off by up to half a unit of log2 weight (a factor 2^0.5 on a split's weight).
TEST(DecodeMerge, CloseMaximaOfLargeScoresMergeExactly) {
  const float sl2 = 0.7213475f;  // 0.5 · log2 e
  std::vector<float> s{1.0e7f, 1.0e7f - 3.f, 1.0e7f + 1.f, 1.0e7f - 1.f}, v(4 * kD);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 5) - 2.f;
  const Row r = merge(split_partials(s, v, 4, 1, sl2), sl2);
  const double m = 1.0e7 + 1;
  double l = 0, o[kD] = {};
  for (size_t j = 0; j < s.size(); ++j) {
    const double w = std::exp2((static_cast<double>(s[j]) - m) * sl2);
    l += w;
    for (int d = 0; d < kD; ++d) o[d] += w * v[j * kD + static_cast<size_t>(d)];
  }
  for (int d = 0; d < kD; ++d) EXPECT_NEAR(r.o[d], o[d] / l, 1e-6 * (1 + std::fabs(o[d] / l))) << "column " << d;
  EXPECT_NEAR(r.lse, (m * sl2 + std::log2(l)) * std::log(2.0), 2.0);  // |LSE| ≈ 5e6: fp32 keeps ~0.5
}

}  // namespace
}  // namespace flashcheck::kernels
