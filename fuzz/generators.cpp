#include "fuzz/generators.h"

#include <algorithm>

namespace flashcheck {

rc::Gen<int64_t> gen_seq_len(int64_t max_seq) {
  // Tails that break tiled kernels (1, one past a tile, primes) are drawn as often as uniform lengths.
  std::vector<int64_t> tails;
  for (int64_t t : {1, 2, 3, 15, 16, 17, 31, 33, 63, 64, 65, 97, 113, 127, 128, 129, 255, 257, 1023, 1025})
    if (t <= max_seq) tails.push_back(t);
  return rc::gen::oneOf(rc::gen::elementOf(tails), rc::gen::inRange<int64_t>(1, max_seq + 1));
}

rc::Gen<Problem> gen_problem(const ProblemSpace& s) {
  return rc::gen::exec([s] {
    Problem p;
    p.dtype = *rc::gen::elementOf(s.dtypes);
    p.causal = *rc::gen::elementOf(s.causals);
    p.seq_q = *gen_seq_len(s.max_seq);
    // Half the time seq_kv differs from seq_q, both ways.
    p.seq_kv = *rc::gen::oneOf(rc::gen::just(p.seq_q), gen_seq_len(s.max_seq));
    p.head_dim_qk = *rc::gen::elementOf(s.head_dims);
    p.head_dim_v = p.head_dim_qk;
    if (s.allow_dv_ne_dqk && *rc::gen::inRange(0, 4) == 0) {
      std::vector<int64_t> smaller;
      for (int64_t d : s.head_dims)
        if (d <= p.head_dim_qk) smaller.push_back(d);
      p.head_dim_v = *rc::gen::elementOf(smaller);
    }
    p.heads_kv = *rc::gen::inRange<int64_t>(1, s.max_heads_kv + 1);
    p.heads_q = p.heads_kv * *rc::gen::inRange<int64_t>(1, s.max_group + 1);
    p.batch = *rc::gen::inRange<int64_t>(1, s.max_batch + 1);
    if (s.allow_custom_scale && *rc::gen::inRange(0, 8) == 0)
      p.scale = *rc::gen::elementOf(std::vector<double>{1.0, 0.5, 0.0625, 2.0});
    // Fit the work budget by giving up batch, then heads (GQA ratio kept when possible).
    auto work = [&] {
      return static_cast<double>(p.batch * p.heads_q) * static_cast<double>(p.seq_q) *
             static_cast<double>(p.seq_kv) * static_cast<double>(p.head_dim_qk + p.head_dim_v);
    };
    while (work() > s.max_work && p.batch > 1) p.batch = 1;
    while (work() > s.max_work && p.heads_kv > 1) p.heads_q /= p.heads_kv, p.heads_kv = 1;
    while (work() > s.max_work && p.heads_q > 1) p.heads_q = 1;
    return p;
  });
}

rc::Gen<Dist> gen_dist() {
  // N(0,1) half the time; the hostile distributions share the other half.
  return rc::gen::oneOf(rc::gen::just(Dist::normal),
                        rc::gen::elementOf(std::vector<Dist>(std::begin(kAllDists), std::end(kAllDists))));
}

rc::Gen<Case> gen_case(const ProblemSpace& s) {
  return rc::gen::build<Case>(rc::gen::set(&Case::problem, gen_problem(s)), rc::gen::set(&Case::dist, gen_dist()),
                              rc::gen::set(&Case::seed, rc::gen::arbitrary<uint64_t>()));
}

void showValue(const Problem& p, std::ostream& os) { os << to_string(p); }
void showValue(Dist d, std::ostream& os) { os << to_string(d); }
void showValue(const Case& c, std::ostream& os) {
  os << "--problem \"" << to_string(c.problem) << "\" --dist " << to_string(c.dist) << " --input-seed " << c.seed;
}

}  // namespace flashcheck
