#include "reference/inputs.h"

#include <stdexcept>

#include "reference/big_vector.h"
#include "reference/rng.h"

namespace flashcheck {

std::string_view to_string(Dist d) {
  switch (d) {
    case Dist::normal: return "normal";
    case Dist::uniform: return "uniform";
    case Dist::large: return "large";
    case Dist::outlier_keys: return "outlier_keys";
    case Dist::constant_rows: return "constant_rows";
    case Dist::equal_scores: return "equal_scores";
  }
  return "?";
}

Dist parse_dist(std::string_view s) {
  for (Dist d : kAllDists)
    if (to_string(d) == s) return d;
  throw std::invalid_argument("unknown distribution '" + std::string(s) + "'");
}

void round_all(std::vector<float>& x, DType d) {
  if (d == DType::f32) return;
  const int64_t n = static_cast<int64_t>(x.size());
#pragma omp parallel for schedule(static) if (n > (int64_t{1} << 20))
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = round_to(d, x[static_cast<size_t>(i)]);
}

namespace {
// Fills a [rows, dim] tensor. Streams 1..3 keep q, k and v independent under one seed.
std::vector<float> fill(const Problem& p, int64_t rows, int64_t dim, int64_t seq, uint64_t seed, uint64_t stream,
                        Dist dist, bool is_key) {
  CounterRng rng(seed, stream);
  std::vector<float> out = big_vector<float>(static_cast<size_t>(rows * dim));
  // Counter-based: each element depends only on (seed, stream, index), so threads change nothing.
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    int64_t pos = r % seq;  // position inside its sequence
    double row_factor = 1.0;
    if (dist == Dist::outlier_keys && is_key) {
      // A deterministic ~1/16 of key rows, chosen by the PRNG so their positions vary with the seed.
      if (rng.uniform(static_cast<uint64_t>(r), 7) < 1.0 / 16.0) row_factor = 256.0;
    }
    for (int64_t c = 0; c < dim; ++c) {
      uint64_t idx = static_cast<uint64_t>(r * dim + c);
      double x = 0;
      switch (dist) {
        case Dist::normal: x = rng.normal(idx); break;
        case Dist::uniform: x = 2.0 * rng.uniform(idx) - 1.0; break;
        case Dist::large:
          // bf16/f32 values near 1e4 (scores near 1e8). f16 tops out at 65504, so its "large" is 1e2:
          // products of 1e4-sized f16 values cannot be held by any f16 baseline.
          x = rng.normal(idx) * (p.dtype == DType::f16 ? 1e2 : 1e4);
          break;
        case Dist::outlier_keys: x = rng.normal(idx) * row_factor; break;
        case Dist::constant_rows: x = rng.normal(static_cast<uint64_t>(r)); break;
        case Dist::equal_scores:
          // Keys: one row per (b, h) repeated along the sequence; q and v stay random.
          x = is_key ? rng.normal(static_cast<uint64_t>((r - pos) * dim + c)) : rng.normal(idx);
          break;
      }
      out[static_cast<size_t>(idx)] = static_cast<float>(x);
    }
  }
  round_all(out, p.dtype);
  return out;
}
}  // namespace

Inputs make_inputs(const Problem& p, uint64_t seed, Dist dist) {
  validate(p);
  Inputs in;
  in.q = fill(p, p.batch * p.heads_q * p.seq_q, p.head_dim_qk, p.seq_q, seed, 1, dist, false);
  in.k = fill(p, p.batch * p.heads_kv * p.seq_kv, p.head_dim_qk, p.seq_kv, seed, 2, dist, true);
  in.v = fill(p, p.batch * p.heads_kv * p.seq_kv, p.head_dim_v, p.seq_kv, seed, 3, dist, false);
  return in;
}

}  // namespace flashcheck
