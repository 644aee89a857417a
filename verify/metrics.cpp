#include "verify/metrics.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <tuple>

namespace flashcheck {

uint32_t poison_bits(DType d) { return poison_bits_of(d); }

float poison_value(DType d) {
  switch (d) {
    case DType::f32: return std::bit_cast<float>(poison_bits(d));
    case DType::f16: return f16_bits_to_f32(static_cast<uint16_t>(poison_bits(d)));
    case DType::bf16: return bf16_bits_to_f32(static_cast<uint16_t>(poison_bits(d)));
    case DType::e4m3:
    case DType::e5m2: return std::numeric_limits<float>::quiet_NaN();
  }
  return 0;
}

bool is_poison(DType d, float widened) { return is_poison_widened(d, widened); }

int64_t ordered_bits(DType d, float x) { return ordered_bits_of(d, x); }

uint64_t ulp_distance(DType d, float a, float b) { return ulp_distance_of(d, a, b); }

double ulp_at(DType d, double x) {
  // mantissa bits after the point, and the smallest normal exponent, per dtype
  const int frac_bits = d == DType::f32 ? 23 : d == DType::f16 ? 10 : d == DType::bf16 ? 7 : d == DType::e4m3 ? 3 : 2;
  const int min_exp = d == DType::f16 || d == DType::e5m2 ? -14 : d == DType::e4m3 ? -6 : -126;
  int e = 0;
  std::frexp(std::fabs(x), &e);  // |x| = m·2^e, m in [0.5, 1): the leading bit is 2^(e-1)
  return std::ldexp(1.0, std::max(e - 1, min_exp) - frac_bits);
}

namespace {
// The representable value of a 16-bit dtype `steps` places away from t (which is representable).
float step16(DType d, float t, int steps) {
  const uint16_t h = d == DType::f16 ? f32_to_f16_bits(t) : f32_to_bf16_bits(t);
  int32_t ord = (h & 0x8000) ? -static_cast<int32_t>(h & 0x7fff) : static_cast<int32_t>(h);
  ord += steps;
  const uint16_t back = ord < 0 ? static_cast<uint16_t>(0x8000 | -ord) : static_cast<uint16_t>(ord);
  return d == DType::f16 ? f16_bits_to_f32(back) : bf16_bits_to_f32(back);
}
}  // namespace

float round_nearest_even(DType d, double x) {
  const float f = static_cast<float>(x);  // fp32: the conversion itself rounds to nearest even
  if (d == DType::f32 || !std::isfinite(f)) return round_to(d, f);
  // The double rounding through fp32 is off by at most one step: take the nearest of t and its
  // neighbours, on a tie the one with an even last bit.
  const float t = round_to(d, f);
  if (std::isinf(t)) return t;
  float best = t;
  for (int s : {-1, 1}) {
    const float c = step16(d, t, s);
    if (!std::isfinite(c)) continue;
    const double dc = std::fabs(static_cast<double>(c) - x), db = std::fabs(static_cast<double>(best) - x);
    if (dc < db || (dc == db && ordered_bits(d, c) % 2 == 0)) best = c;
  }
  return best;
}

namespace {
auto key(const DistinctPairs::Pair& p) {
  return std::tuple(p.hash, std::bit_cast<uint32_t>(p.kernel), std::bit_cast<uint64_t>(p.oracle));
}
}  // namespace

void DistinctPairs::insert(uint64_t h, float kernel, double oracle) {
  // A row of one repeated value (constant rows) arrives as a run of one pair: kept once here, it
  // does not fill the buffer and force compactions.
  if (!items_.empty() && items_.back().hash == h && key(items_.back()) == key({h, oracle, kernel})) return;
  items_.push_back({h, oracle, kernel});
  if (items_.size() >= 2 * kCapacity) compact();
}

void DistinctPairs::merge(const DistinctPairs& other) {
  items_.insert(items_.end(), other.items_.begin(), other.items_.end());
  dropped_ = dropped_ || other.dropped_;
  compact();
}

void DistinctPairs::compact() {
  std::sort(items_.begin(), items_.end(), [](const Pair& a, const Pair& b) { return a.hash != b.hash ? a.hash < b.hash : key(a) < key(b); });
  items_.erase(std::unique(items_.begin(), items_.end(), [](const Pair& a, const Pair& b) { return key(a) == key(b); }),
               items_.end());
  if (items_.size() >= kCapacity) {
    if (items_.size() > kCapacity) dropped_ = true;
    items_.resize(kCapacity);
    threshold_ = std::min(threshold_, items_.back().hash);
  }
}

const std::vector<DistinctPairs::Pair>& DistinctPairs::pairs() {
  compact();
  return items_;
}

bool DistinctPairs::exact() {
  compact();
  return !dropped_;
}

double DistinctPairs::distinct() {
  compact();
  if (!dropped_) return static_cast<double>(items_.size());
  // K pairs hash at or below h_K, a fraction (h_K + 1)/2^64 of the hash range: (K − 1)/that is the
  // unbiased estimate of how many distinct hashes there are.
  return static_cast<double>(kCapacity - 1) / (std::ldexp(static_cast<double>(threshold_), -64) + 0x1p-64);
}

RoundingEvidence rounding_evidence(DType d, DistinctPairs& pairs, uint64_t ulp_n) {
  RoundingEvidence ev;
  const std::vector<DistinctPairs::Pair>& kept = pairs.pairs();
  ev.distinct = pairs.distinct();
  if (kept.empty()) return ev;
  int64_t over = 0;
  double plain = 0, by_value = 0;
  for (const DistinctPairs::Pair& p : kept) {  // hash order: the same sums on any thread count
    over += ulp_distance(d, p.kernel, round_to(d, static_cast<float>(p.oracle))) > ulp_n;
    const double e = (static_cast<double>(p.kernel) - p.oracle) / ulp_at(d, p.oracle);
    plain += e;
    by_value += p.oracle < 0 ? -e : e;
  }
  const double n = static_cast<double>(kept.size());
  ev.frac_over_n = static_cast<double>(over) / n;
  ev.bias = std::fabs(plain) >= std::fabs(by_value) ? plain / n : by_value / n;
  return ev;
}

}  // namespace flashcheck
