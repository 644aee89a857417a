#include "reference/inputs.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "reference/big_vector.h"
#include "reference/nonfinite_inputs.h"
#include "reference/rng.h"
#include "reference/storage.h"

namespace flashcheck {

std::string_view to_string(Dist d) {
  switch (d) {
    case Dist::normal: return "normal";
    case Dist::uniform: return "uniform";
    case Dist::large: return "large";
    case Dist::outlier_keys: return "outlier_keys";
    case Dist::constant_rows: return "constant_rows";
    case Dist::equal_scores: return "equal_scores";
    case Dist::nonfinite: return "nonfinite";
  }
  return "?";
}

Dist parse_dist(std::string_view s) {
  for (Dist d : kAllDists)
    if (to_string(d) == s) return d;
  if (s == to_string(Dist::nonfinite)) return Dist::nonfinite;
  throw std::invalid_argument("unknown distribution '" + std::string(s) + "'");
}

void round_all(std::vector<float>& x, DType d) {
  if (d == DType::f32) return;
  const int64_t n = static_cast<int64_t>(x.size());
#pragma omp parallel for schedule(static) if (n > (int64_t{1} << 20))
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = round_to(d, x[static_cast<size_t>(i)]);
}

std::vector<float> make_d_out(const Problem& p, uint64_t seed) {
  // Stream 0xD0: none of make_inputs' (fill 1..3, side inputs 11..16, the non-finite planting 21),
  // so dO is independent of q, k, v and the side inputs. `run --backward` draws it so too.
  const CounterRng rng(seed, 0xD0);
  const DType od = p.o_dtype();
  std::vector<float> g(static_cast<size_t>(p.o_elems()));
  for (size_t x = 0; x < g.size(); ++x) g[x] = round_to(od, static_cast<float>(rng.normal(x)));
  return g;
}

namespace {
// The largest finite value of the dtype: fp8 draws are clamped to it before rounding, so no input
// is NaN (e4m3 has no infinity) or infinite unless a test asks for one.
double max_finite(DType d) {
  switch (d) {
    case DType::f32: return 3.4028234663852886e38;
    case DType::f16: return 65504.0;
    case DType::bf16: return 3.3895313892515355e38;
    case DType::e4m3: return 448.0;
    case DType::e5m2: return 57344.0;
  }
  return 0;
}

// The magnitude of Dist::large: bf16/f32 values near 1e4 (scores near 1e8). f16 tops out at 65504,
// so its "large" is 1e2: products of 1e4-sized f16 values cannot be held by any f16 baseline; fp8
// is smaller still (e4m3 tops out at 448).
double large_scale(DType d) {
  switch (d) {
    case DType::f16: return 1e2;
    case DType::e4m3: return 32;
    case DType::e5m2: return 1e3;
    default: return 1e4;
  }
}

// Fills the rows of one tensor. Rows come in segments (one per (sequence, head)): the position
// inside its segment is what equal_scores keys on. Streams 1..3 keep q, k and v independent under
// one seed. `segment_of(r)` gives the first row of row r's segment; for a dense problem segments
// are seq rows long, so the values are those of problem model 1, bit for bit.
template <typename SegmentStart>
std::vector<float> fill(const Problem& p, int64_t rows, int64_t dim, uint64_t seed, uint64_t stream, Dist dist,
                        bool is_key, SegmentStart segment_of) {
  CounterRng rng(seed, stream);
  std::vector<float> out = big_vector<float>(static_cast<size_t>(rows * dim));
  const double limit = max_finite(p.dtype);
  // Counter-based: each element depends only on (seed, stream, index), so threads change nothing.
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t first = segment_of(r);  // first row of this row's segment
    double row_factor = 1.0;
    if (dist == Dist::outlier_keys && is_key) {
      // A deterministic ~1/16 of key rows, chosen by the PRNG so their positions vary with the seed.
      if (rng.uniform(static_cast<uint64_t>(r), 7) < 1.0 / 16.0) row_factor = 256.0;
    }
    for (int64_t c = 0; c < dim; ++c) {
      uint64_t idx = static_cast<uint64_t>(r * dim + c);
      double x = 0;
      switch (dist) {
        case Dist::normal:
        case Dist::nonfinite: x = rng.normal(idx); break;  // its NaN or Inf is planted after (plant_nonfinite)
        case Dist::uniform: x = 2.0 * rng.uniform(idx) - 1.0; break;
        case Dist::large: x = rng.normal(idx) * large_scale(p.dtype); break;
        case Dist::outlier_keys: x = rng.normal(idx) * row_factor; break;
        case Dist::constant_rows: x = rng.normal(static_cast<uint64_t>(r)); break;
        case Dist::equal_scores:
          // Keys: one row per segment repeated along the sequence; q and v stay random.
          x = is_key ? rng.normal(static_cast<uint64_t>(first * dim + c)) : rng.normal(idx);
          break;
      }
      if (is_fp8(p.dtype)) x = std::clamp(x, -limit, limit);
      out[static_cast<size_t>(idx)] = static_cast<float>(x);
    }
  }
  round_all(out, p.dtype);
  return out;
}

// Rows of a logical tensor (reference/sequences.h) in segments of per-sequence lengths, heads
// segments per sequence: the first row of row r's segment.
struct SegmentTable {
  std::vector<int64_t> starts;  // first row of every (sequence, head) segment, ascending
  int64_t uniform = 0;          // > 0: every segment has this length (dense problems)
  int64_t operator()(int64_t r) const {
    if (uniform > 0) return r - r % uniform;
    return *(std::upper_bound(starts.begin(), starts.end(), r) - 1);
  }
};

SegmentTable segments(const Problem& p, int64_t heads, bool keys) {
  SegmentTable t;
  const bool dense = keys ? (p.seqlens_kv.empty() && p.seqused_kv.empty()) : p.seqlens_q.empty();
  if (dense) {
    t.uniform = keys ? p.seq_kv : p.seq_q;
    return t;
  }
  int64_t r = 0;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < heads; ++h) {
      t.starts.push_back(r);
      r += keys ? p.skv(b) : p.sq(b);
    }
  if (t.starts.empty()) t.starts.push_back(0);
  return t;
}

// A paged cache's block table, from the seed (Problem::page_order): pages in sequence order,
// shuffled, or shuffled with every later sequence sharing sequence 0's full leading pages (prefix
// caching). Entries past a sequence's last page point at a spare page no sequence uses, and one
// to three spare pages exist, so the harness has unused pages to poison.
void make_block_table(const Problem& p, uint64_t seed, Inputs& in) {
  CounterRng rng(seed, 16);
  const int64_t P = p.page_size;
  std::vector<int64_t> pages(static_cast<size_t>(p.batch)), shared(static_cast<size_t>(p.batch), 0);
  int64_t max_pages = 1, fresh = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    pages[static_cast<size_t>(b)] = (p.skv(b) + P - 1) / P;
    max_pages = std::max(max_pages, pages[static_cast<size_t>(b)]);
    if (p.page_order == PageOrder::shared && b > 0)
      shared[static_cast<size_t>(b)] = std::min(p.skv(0) / P, p.skv(b) / P);  // full pages only
    fresh += pages[static_cast<size_t>(b)] - shared[static_cast<size_t>(b)];
  }
  const int64_t spare = 1 + static_cast<int64_t>(rng.uniform(0) * 3);
  in.num_pages = fresh + spare;
  // Physical ids: in order, or a permutation (Fisher–Yates on the seed's draws).
  std::vector<int32_t> ids(static_cast<size_t>(in.num_pages));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  if (p.page_order != PageOrder::identity)
    for (size_t i = ids.size(); i > 1; --i) std::swap(ids[i - 1], ids[static_cast<size_t>(rng.uniform(i) * static_cast<double>(i))]);
  const int32_t spare_page = ids[static_cast<size_t>(fresh)];
  in.block_table.assign(static_cast<size_t>(p.batch * max_pages), spare_page);
  size_t next = 0;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t j = 0; j < pages[static_cast<size_t>(b)]; ++j)
      in.block_table[static_cast<size_t>(b * max_pages + j)] =
          j < shared[static_cast<size_t>(b)] ? in.block_table[static_cast<size_t>(j)] : ids[next++];
}

// The side inputs of the variants, each from its own stream of the seed.
void make_side_inputs(const Problem& p, uint64_t seed, Inputs& in) {
  if (p.alibi != Alibi::none) {
    // Half the heads take the usual geometric slopes 2^(-8(h+1)/Hq); the rest are drawn over
    // 2^-10..2^2, so some slopes dominate the scores (distance · slope ≫ |s|) and some barely count.
    CounterRng rng(seed, 11);
    const int64_t n = p.alibi_per_batch ? p.batch * p.heads_q : p.heads_q;
    in.alibi_slopes.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t h = i % p.heads_q;
      const double e = rng.uniform(static_cast<uint64_t>(i), 1) < 0.5 ? -8.0 * static_cast<double>(h + 1) / static_cast<double>(p.heads_q)
                                                                  : -10.0 + 12.0 * rng.uniform(static_cast<uint64_t>(i), 2);
      in.alibi_slopes[static_cast<size_t>(i)] = static_cast<float>(std::exp2(e));
    }
  }
  if (p.sinks) {
    // Mostly N(0, 4); one head in eight −inf (a sink that takes nothing) and one in eight +12 (a
    // sink that takes nearly all the weight, leaving O near 0).
    CounterRng rng(seed, 12);
    in.sinks.resize(static_cast<size_t>(p.heads_q));
    for (int64_t h = 0; h < p.heads_q; ++h) {
      const double u = rng.uniform(static_cast<uint64_t>(h), 1);
      in.sinks[static_cast<size_t>(h)] = u < 0.125   ? -INFINITY
                                         : u < 0.25 ? 12.0f
                                                    : static_cast<float>(2.0 * rng.normal(static_cast<uint64_t>(h)));
    }
  }
  if (p.descale != Descale::none) {
    // Powers of two times a random mantissa, over 2^-3..2^3: dequantized values stay in range.
    const int64_t n = p.descale == Descale::tensor ? 1 : p.batch * p.heads_kv;
    uint64_t stream = 13;
    for (auto* d : {&in.descale_q, &in.descale_k, &in.descale_v}) {
      CounterRng rng(seed, stream++);
      d->resize(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i)
        (*d)[static_cast<size_t>(i)] = static_cast<float>(std::exp2(-3.0 + 6.0 * rng.uniform(static_cast<uint64_t>(i))));
    }
  }
}
}  // namespace

double descale_of(const Problem& p, const std::vector<float>& descale, int64_t b, int64_t kv_head) {
  if (descale.empty()) return 1.0;
  return p.descale == Descale::tensor ? descale[0] : descale[static_cast<size_t>(b * p.heads_kv + kv_head)];
}

void validate_side_inputs(const Problem& p, const Inputs& in) {
  auto require_size = [](const std::vector<float>& v, int64_t n, const std::string& name, const std::string& shape) {
    if (static_cast<int64_t>(v.size()) != n)
      throw InvalidProblem(name + " has " + std::to_string(v.size()) + " values; the problem needs " + shape + " = " +
                           std::to_string(n));
  };
  if (p.alibi != Alibi::none) {
    const int64_t n = p.alibi_per_batch ? p.batch * p.heads_q : p.heads_q;
    require_size(in.alibi_slopes, n, "alibi_slopes", p.alibi_per_batch ? "[B, Hq]" : "[Hq]");
    for (float s : in.alibi_slopes)
      if (!std::isfinite(s)) throw InvalidProblem("alibi_slopes holds a non-finite slope (" + std::to_string(s) + ")");
  } else if (!in.alibi_slopes.empty()) {
    throw InvalidProblem("alibi_slopes given but the problem has no ALiBi");
  }
  if (p.sinks) {
    require_size(in.sinks, p.heads_q, "sinks", "[Hq]");
    for (float s : in.sinks)
      if (std::isnan(s) || s == INFINITY) throw InvalidProblem("sinks holds NaN or +inf (" + std::to_string(s) + ")");
  } else if (!in.sinks.empty()) {
    throw InvalidProblem("sinks given but the problem has none");
  }
  const int64_t nd = p.descale == Descale::tensor ? 1 : p.batch * p.heads_kv;
  for (auto [d, name] : {std::pair{&in.descale_q, "descale_q"}, {&in.descale_k, "descale_k"}, {&in.descale_v, "descale_v"}}) {
    if (p.descale == Descale::none) {
      if (!d->empty()) throw InvalidProblem(std::string(name) + " given but the problem has no descale");
      continue;
    }
    require_size(*d, nd, name, p.descale == Descale::tensor ? "[1]" : "[B, Hkv]");
    for (float x : *d)
      if (!std::isfinite(x) || x <= 0)
        throw InvalidProblem(std::string(name) + " must be finite and positive, got " + std::to_string(x));
  }
  if (p.paged()) {
    if (in.num_pages <= 0) throw InvalidProblem("a paged cache needs at least one page (num_pages = " + std::to_string(in.num_pages) + ")");
    if (in.block_table.empty() || in.block_table.size() % static_cast<size_t>(p.batch) != 0)
      throw InvalidProblem("block_table has " + std::to_string(in.block_table.size()) + " entries, not a multiple of batch " +
                           std::to_string(p.batch));
    const int64_t mp = static_cast<int64_t>(in.block_table.size()) / p.batch;
    for (int64_t b = 0; b < p.batch; ++b) {
      const int64_t need = (p.skv(b) + p.page_size - 1) / p.page_size;
      if (need > mp)
        throw InvalidProblem("block_table rows hold " + std::to_string(mp) + " pages; sequence " + std::to_string(b) + " needs " +
                             std::to_string(need) + " for its " + std::to_string(p.skv(b)) + " keys");
      for (int64_t j = 0; j < need; ++j) {
        const int32_t e = in.block_table[static_cast<size_t>(b * mp + j)];
        if (e < 0 || e >= in.num_pages)
          throw InvalidProblem("block_table[" + std::to_string(b) + "][" + std::to_string(j) + "] = " + std::to_string(e) +
                               " is outside [0, num_pages = " + std::to_string(in.num_pages) + ")");
      }
    }
  } else if (!in.block_table.empty()) {
    throw InvalidProblem("block_table given but the problem has no paged cache");
  }
}

Inputs make_inputs(const Problem& p, uint64_t seed, Dist dist, bool backward) {
  validate(p);
  Inputs in;
  make_side_inputs(p, seed, in);
  in.q = fill(p, p.total_q() * p.heads_q, p.head_dim_qk, seed, 1, dist, false, segments(p, p.heads_q, false));
  if (p.paged()) {
    // The cache first, page by page; the logical keys are what the block table gathers from it, so
    // a page shared by two sequences gives both the same keys. Equal-scores keys repeat one row
    // across the whole cache.
    make_block_table(p, seed, in);
    const int64_t slots = in.num_pages * p.page_size;
    SegmentTable per_head;
    per_head.uniform = slots * p.heads_kv;  // one segment
    std::vector<float> kc = fill(p, slots * p.heads_kv, p.head_dim_qk, seed, 2, dist, true, per_head);
    std::vector<float> vc = fill(p, slots * p.heads_kv, p.head_dim_v, seed, 3, dist, false, per_head);
    const Storage st(p, in);
    in.k.resize(static_cast<size_t>(p.k_elems()));
    in.v.resize(static_cast<size_t>(p.v_elems()));
    st.gather(Tensor::k, kc.data(), in.k.data());
    st.gather(Tensor::v, vc.data(), in.v.data());
  } else {
    const SegmentTable kseg = segments(p, p.heads_kv, true);
    in.k = fill(p, p.total_kv() * p.heads_kv, p.head_dim_qk, seed, 2, dist, true, kseg);
    in.v = fill(p, p.total_kv() * p.heads_kv, p.head_dim_v, seed, 3, dist, false, kseg);
  }
  if (dist == Dist::nonfinite) plant_nonfinite(p, seed, in, backward ? Planting::backward : Planting::forward);
  return in;
}

}  // namespace flashcheck
