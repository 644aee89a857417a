// The backward tolerance policy: one row per input dtype, for every gradient (dQ, dK, dV, and
// the sinks' gradient). The numbers are measured, not guessed: `backward_calibrate` runs correct
// backward replicas with other tiles and exp against the same-dtype baseline replica and the fp64
// oracle (verify/TOLERANCE.md, "Backward").
#pragma once
#include "reference/dtype.h"

namespace flashcheck {

struct BackwardTolerance {
  double min_cosine;     // 2⟨g,r⟩/(‖g‖²+‖r‖²) over a gradient's compared elements
  double max_rel_l2;     // ‖g − r‖ / ‖r‖
  double baseline_k;     // max|g − r| ≤ k · max|baseline − r| + atol · max|r|
  double baseline_atol;  // relative to the gradient's largest magnitude
  double row_k;          // rows_baseline_relative: per row, ‖g − r‖ ≤ row_k · ‖baseline − r‖ + atol · ‖r‖ (+ floors)
  // ulp: of the distinct (kernel, oracle) pairs of significant elements, at most this share more
  // than ulp_n ULP (of the gradient dtype) from the rounded oracle; ≥ 1 means reported only.
  uint64_t ulp_n = 1;
  double ulp_max_frac = 1.0;
};

// By the input dtype: fp8 inputs' backward computes in bf16/f16 but takes the O of an fp8 forward
// (P rounded to fp8), so it has rows of its own.
const BackwardTolerance& backward_tolerance_for(DType input_dtype);

}  // namespace flashcheck
