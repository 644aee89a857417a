// The fp64 oracles' vectorised row passes (forward reference/naive.cpp, backward
// reference/backward_rows.cpp): the scaled row max and the shifted exponentials with their sum,
// one set per vector width, the widest the CPU runs picked once per process.
#pragma once
#include <cstdint>
#include <vector>

namespace flashcheck {

// row_max's result: the max of the scaled row, and whether any score is NaN (a NaN never wins the
// max; it is reported apart).
struct RowMax {
  double m;
  bool nan;
};

struct RowKernels {
  const char* name;  // "sse2", "avx2", "avx512"
  // s = rd(s · scale) in place, then the row's max: the pass that finds the max reads every score
  // anyway, so the scale costs no pass of its own.
  RowMax (*row_max)(double* s, int64_t n, double scale);
  // s[j] = exp(s[j] − m) for j < n, returning their sum; the last n mod W values by std::exp.
  double (*exp_sum)(double* s, int64_t n, double m);
  // The same, the last n mod W values through the vector function too (padded in a lane buffer):
  // a probability then has the same bits wherever its key falls, lane or tail, as the backward's
  // two passes over differently cut rows need.
  double (*exp_tail_vector)(double* s, int64_t n, double m);
};

// The widest the CPU runs; FLASHCHECK_ORACLE_ISA=sse2|avx2 caps it, so every variant can be tested
// on one machine. Chosen once per process: results never depend on which thread or call asks.
const RowKernels& row_kernels();
// Every set this CPU runs, narrowest first (for tests: each must agree with the others).
std::vector<RowKernels> row_kernels_all();

}  // namespace flashcheck
