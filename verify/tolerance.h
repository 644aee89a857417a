// The tolerance policy: one row per output dtype. The numbers come from measured error
// distributions of correct implementations (`flashcheck calibrate`; the measurement is in
// verify/TOLERANCE.md), with headroom, never from guessing.
#pragma once
#include <cstdint>

#include "reference/dtype.h"

namespace flashcheck {

struct Tolerance {
  double min_cosine;      // 2⟨o,r⟩/(‖o‖²+‖r‖²) over the checked elements
  double max_rel_l2;      // ‖o − r‖ / ‖r‖
  double baseline_k;      // max|o − r| ≤ k · max|baseline − r| + atol · max|r|
  double baseline_atol;   // relative to the output's scale: one output rounding is always allowed
  double lse_atol;        // |lse − lse_ref| ≤ atol + rtol·|lse_ref| (natural log)
  double lse_rtol;
  uint64_t ulp_n;         // elements more than ulp_n ULP (in the output dtype) from the rounded oracle...
  double ulp_max_frac;    // ...may be at most this fraction of the checked elements
  double max_rounding_bias = 1.0;  // |mean signed error| in output ULPs; ≥ 1 means reported only
};

const Tolerance& tolerance_for(DType d);

}  // namespace flashcheck
