// Element-wise metrics between a kernel's output and the oracle, in the units kernels are judged by.
#pragma once
#include <cstdint>
#include <limits>

#include "reference/dtype.h"

namespace flashcheck {

// Poison: the bit pattern outputs are filled with before a kernel runs. A quiet NaN with a payload
// no GPU or libm produces (canonical NaNs are 0x7fffffff / 0x7fc00000), so an element still holding
// it was never written. Given per dtype; compare after widening to fp32 (widening is exact).
uint32_t poison_bits(DType d);         // raw bits in the dtype (16-bit types in the low half)
float poison_value(DType d);           // the poison widened to fp32
bool is_poison(DType d, float widened);

// Signed-magnitude -> two's-complement order of the dtype's bit patterns: adjacent representable
// values differ by 1, and +0 and -0 both map to 0 (so their distance is 0).
int64_t ordered_bits(DType d, float x);
// ULP distance of two values representable in `d`. Both NaN: 0. One NaN: kNanUlp.
inline constexpr uint64_t kNanUlp = std::numeric_limits<uint64_t>::max();
uint64_t ulp_distance(DType d, float a, float b);
// The spacing of the dtype's representable values at |x| (its ULP there), subnormals included.
double ulp_at(DType d, double x);

// 2⟨x,y⟩ / (‖x‖² + ‖y‖²) in fp64 (TileLang's form): 1 only when x == y, and 0 against all zeros,
// so an all-zero output cannot pass. Both all-zero: 1.
struct CosineAccumulator {
  double xy = 0, xx = 0, yy = 0;
  void add(double x, double y) { xy += x * y; xx += x * x; yy += y * y; }
  double value() const { return (xx + yy) == 0 ? 1.0 : 2.0 * xy / (xx + yy); }
};

}  // namespace flashcheck
