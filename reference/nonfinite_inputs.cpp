#include "reference/nonfinite_inputs.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "reference/mask.h"
#include "reference/rng.h"
#include "reference/sequences.h"

namespace flashcheck {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr uint64_t kStream = 21;  // the planting's own stream of the seed (fill uses 1..3, side inputs 11..16)

// An index in [0, n) from draw `i` of the planting stream.
int64_t pick(const CounterRng& rng, uint64_t i, int64_t n) {
  return std::min<int64_t>(n - 1, static_cast<int64_t>(rng.uniform(i) * static_cast<double>(n)));
}

// The keys every row of sequence b sees; empty when some row sees none (a masked weight of 0 in
// that row's tile would multiply whatever is planted) or no key is seen by all.
KeyRange common_keys(const Problem& p, int64_t b) {
  KeyRange all{0, p.skv(b)};
  if (p.sq(b) == 0) return {};
  for (int64_t i = 0; i < p.sq(b); ++i) {
    const KeyRange r = visible_range(p, b, i);
    if (r.empty()) return {};
    all.lo = std::max(all.lo, r.lo);
    all.hi = std::min(all.hi, r.hi);
  }
  return all.empty() ? KeyRange{} : all;
}

// Whether every row of sequence b under KV head hk has its visible scores within `spread` of its
// max, a sink logit joining the max (scores without softcap or ALiBi: the caller excludes them;
// a kernel declaring FlashAttention 2's ALiBi LSE offsets its scores otherwise). Over the
// planting's budget of work it says no (and NaN is planted instead).
bool scores_within(const Problem& p, const Inputs& in, const Sequences& seqs, int64_t b, int64_t hk, double spread) {
  const double work = static_cast<double>(seqs.sq(b) * seqs.skv(b) * p.head_dim_qk * p.group());
  if (work > 5e7) return false;
  const double scale = p.softmax_scale();
  std::vector<double> s;
  for (int64_t h = hk * p.group(); h < (hk + 1) * p.group(); ++h)
    for (int64_t i = 0; i < seqs.sq(b); ++i) {
      const KeyRange r = visible_range(p, b, i);
      const float* q = in.q.data() + seqs.q_row(b, h, i);
      s.clear();
      for (int64_t j = r.lo; j < r.hi; ++j) {
        const float* k = in.k.data() + seqs.k_row(b, hk, j);
        double dot = 0;
        for (int64_t d = 0; d < p.head_dim_qk; ++d) dot += static_cast<double>(q[d]) * k[d];
        s.push_back(scale * dot);
      }
      if (s.empty()) continue;
      double top = *std::max_element(s.begin(), s.end());
      if (p.sinks) top = std::max(top, static_cast<double>(in.sinks[static_cast<size_t>(h)]));
      if (top - *std::min_element(s.begin(), s.end()) > spread) return false;
    }
  return true;
}

// The rows of sequence b that see some key (a value planted in another row's query reaches no
// output, and the case would test nothing); for a backward, the rows that see every key (no
// masked pair of theirs meets the value: nonfinite_inputs.h).
std::vector<int64_t> seeing_rows(const Problem& p, int64_t b, Planting use) {
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < p.sq(b); ++i) {
    const KeyRange r = visible_range(p, b, i);
    if (use == Planting::forward ? !r.empty() : (p.skv(b) > 0 && r.lo == 0 && r.hi == p.skv(b))) rows.push_back(i);
  }
  return rows;
}
// A sequence with such a row, drawn uniformly; -1 if there is none.
int64_t pick_sequence(const Problem& p, const CounterRng& rng, Planting use) {
  std::vector<int64_t> some;
  for (int64_t b = 0; b < p.batch; ++b)
    if (!seeing_rows(p, b, use).empty()) some.push_back(b);
  return some.empty() ? -1 : some[static_cast<size_t>(pick(rng, 2, static_cast<int64_t>(some.size())))];
}
// Whether every row of sequence b sees every key (no masked pair at all).
bool no_masked_pair(const Problem& p, int64_t b) {
  return static_cast<int64_t>(seeing_rows(p, b, Planting::backward).size()) == p.sq(b);
}

// The three places, each returning false where it cannot plant (v: no key every row sees).
struct Site {
  const Problem& p;
  Inputs& in;
  const CounterRng& rng;
  const Sequences seqs{p};
  int64_t b;
  bool inf;    // ±Inf wanted (else NaN)
  float sign;  // of the Inf planted
  Planting use;
  float scale_sign() const { return p.softmax_scale() < 0 ? -1.0f : 1.0f; }

  bool in_v() {
    const KeyRange common = common_keys(p, b);
    if (common.empty()) return false;
    const int64_t hk = pick(rng, 4, p.heads_kv), j = common.lo + pick(rng, 5, common.count()), c = pick(rng, 6, p.head_dim_v);
    const bool stays_inf = inf && p.alibi == Alibi::none && scores_within(p, in, seqs, b, hk, kInfSpread);
    in.v[static_cast<size_t>(seqs.v_row(b, hk, j) + c)] = stays_inf ? sign * kInf : std::nanf("");
    return true;
  }

  bool in_k() {
    const KeyRange common = common_keys(p, b);
    if (common.empty()) return false;
    const int64_t hk = pick(rng, 4, p.heads_kv), d = pick(rng, 6, p.head_dim_qk), j = common.lo + pick(rng, 5, common.count());
    in.k[static_cast<size_t>(seqs.k_row(b, hk, j) + d)] = inf ? sign * kInf : std::nanf("");
    if (!inf) return true;
    // Every row that sees key j scores +Inf against it (and is NaN): q[.., d] takes the sign that
    // makes q·k·scale = +Inf, and is never 0 (0·Inf would be a NaN score: NaN too, but +Inf is
    // the case a kernel's running max must handle).
    const float want = sign * scale_sign();
    for (int64_t h = hk * p.group(); h < (hk + 1) * p.group(); ++h)
      for (int64_t i = 0; i < seqs.sq(b); ++i) {
        if (!visible_range(p, b, i).contains(j)) continue;
        float& q = in.q[static_cast<size_t>(seqs.q_row(b, h, i) + d)];
        q = q == 0.0f ? want : std::copysign(q, want);
      }
    return true;
  }

  void in_q() {
    const std::vector<int64_t> rows = seeing_rows(p, b, use);
    const int64_t h = pick(rng, 4, p.heads_q), d = pick(rng, 6, p.head_dim_qk);
    const int64_t i = rows[static_cast<size_t>(pick(rng, 5, static_cast<int64_t>(rows.size())))];
    float value = std::nanf("");
    if (inf) {  // +Inf against the first visible key with a nonzero k[d]: the row's max is +Inf, the row NaN
      const KeyRange r = visible_range(p, b, i);
      for (int64_t j = r.lo; j < r.hi; ++j) {
        const float k = in.k[static_cast<size_t>(seqs.k_row(b, h / p.group(), j) + d)];
        if (k != 0.0f) {
          value = (k > 0 ? 1.0f : -1.0f) * scale_sign() * kInf;
          break;
        }
      }
    }
    in.q[static_cast<size_t>(seqs.q_row(b, h, i) + d)] = value;
  }
};

}  // namespace

void plant_nonfinite(const Problem& p, uint64_t seed, Inputs& in, Planting use) {
  const CounterRng rng(seed, kStream);
  // Forward: no row sees any key, nothing planted could reach an output. Backward: no row sees
  // every key, anything planted meets a masked pair (nonfinite_inputs.h): the case runs finite.
  const int64_t b = pick_sequence(p, rng, use);
  if (b < 0) return;
  // ±Inf only where it stays Inf: softcap maps it to ±c, fp8 (e4m3) has none.
  Site at{p, in, rng, Sequences(p), b, rng.uniform(1) < 0.5 && p.softcap == 0 && !is_fp8(p.dtype),
          rng.uniform(3) < 0.5 ? -1.0f : 1.0f, use};
  // A shared page holds keys of several sequences, and what one sequence's logical keys hold would
  // reach another's through it: a problem with shared pages gets its value in q. So does a
  // backward's sequence with a masked pair (k and v reach every row's D or P).
  const bool q_only = (p.paged() && p.page_order == PageOrder::shared) || (use == Planting::backward && !no_masked_pair(p, b));
  const double u = q_only ? 0.0 : rng.uniform(0);
  // k and v need a key every row of the sequence sees; without one the value goes to q.
  if (u < 1.0 / 3 || !(u < 2.0 / 3 ? at.in_k() : at.in_v())) at.in_q();
}

}  // namespace flashcheck
