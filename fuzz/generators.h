// RapidCheck generators for attention problems and their inputs. The property tests and the
// `flashcheck run` campaigns draw from these same generators.
#pragma once
#include <rapidcheck.h>

#include <cstdint>
#include <ostream>
#include <vector>

#include "reference/inputs.h"
#include "reference/problem.h"

namespace flashcheck {

// What a campaign or property may draw. Defaults keep one case cheap enough for a 2-core CI.
struct ProblemSpace {
  int64_t max_seq = 300;
  std::vector<int64_t> head_dims{16, 32, 40, 64, 80, 96, 128, 192, 256};
  std::vector<DType> dtypes{DType::f32, DType::f16, DType::bf16};
  std::vector<Causal> causals{Causal::none, Causal::top_left, Causal::bottom_right};
  int64_t max_batch = 2;
  int64_t max_heads_kv = 2;
  int64_t max_group = 4;        // heads_q / heads_kv
  bool allow_dv_ne_dqk = true;  // e.g. 192/128
  bool allow_custom_scale = true;
  // Cap on B·Hq·Sq·Skv·(Dqk+Dv): long sequences trade batch and heads for length, never the tail.
  double max_work = 3e7;
};

// A problem, the distribution of its inputs and the seed that draws them: everything needed to
// rebuild a failing case exactly.
struct Case {
  Problem problem;
  Dist dist = Dist::normal;
  uint64_t seed = 0;
};

rc::Gen<int64_t> gen_seq_len(int64_t max_seq);
rc::Gen<Problem> gen_problem(const ProblemSpace& space = {});
rc::Gen<Dist> gen_dist();
rc::Gen<Case> gen_case(const ProblemSpace& space = {});

// Counterexamples print as the problem line the CLI accepts, not as a blob.
void showValue(const Problem& p, std::ostream& os);
void showValue(Dist d, std::ostream& os);
void showValue(const Case& c, std::ostream& os);

}  // namespace flashcheck
