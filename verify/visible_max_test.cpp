// VisibleMax against the direct loop it replaces, on every mask kind's ranges (random problems with
// windows and both alignments, empty rows included) and values with NaN, infinities and ties.
#include "verify/visible_max.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "reference/problem.h"

namespace flashcheck {
namespace {

RC_GTEST_PROP(VisibleMax, IsTheDirectMaxOverEveryRowsVisibleKeys, ()) {
  Problem p;
  p.seq_q = *rc::gen::inRange<int64_t>(1, 60);
  p.seq_kv = *rc::gen::inRange<int64_t>(1, 60);
  p.causal = *rc::gen::element(Causal::none, Causal::top_left, Causal::bottom_right);
  p.window = {*rc::gen::inRange<int64_t>(-1, 20), *rc::gen::inRange<int64_t>(-1, 20)};
  const auto picks = *rc::gen::container<std::vector<int>>(static_cast<size_t>(p.seq_kv), rc::gen::inRange(0, 12));
  std::vector<double> x;
  for (int v : picks)  // few distinct values (ties), and now and then NaN or ±Inf
    x.push_back(v == 0 ? std::numeric_limits<double>::quiet_NaN() : v == 1 ? std::numeric_limits<double>::infinity()
                : v == 2 ? -1.0 : static_cast<double>(v % 5));
  VisibleMax vm(x);
  for (int64_t i = 0; i < p.seq_q; ++i) {
    const KeyRange r = visible_range(p, i);
    double want = 0;
    for (int64_t j = r.lo; j < r.hi; ++j) want = std::max(want, x[static_cast<size_t>(j)]);
    RC_ASSERT(vm(r) == want);
  }
}

}  // namespace
}  // namespace flashcheck
