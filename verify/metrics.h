// Element-wise metrics between a kernel's output and the oracle, in the units kernels are judged by.
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "reference/dtype.h"
#include "verify/element_pass.h"

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
// ULP distance of two values representable in `d`. Both NaN: 0. One NaN: kNanUlp (element_pass.h).
uint64_t ulp_distance(DType d, float a, float b);

// The spacing of the dtype's representable values at |x| (its ULP there), subnormals included.
double ulp_at(DType d, double x);
// x rounded once, to nearest with ties to even, to the dtype (widened exactly to fp32). Not
// round_to(d, float(x)): rounding to fp32 first can land on a 16-bit tie x itself is not on.
float round_nearest_even(DType d, double x);

// 2⟨x,y⟩ / (‖x‖² + ‖y‖²) in fp64 (TileLang's form): 1 only when x == y, and 0 against all zeros,
// so an all-zero output cannot pass. Both all-zero: 1.
struct CosineAccumulator {
  double xy = 0, xx = 0, yy = 0;
  void add(double x, double y) { xy += x * y; xx += x * x; yy += y * y; }
  double value() const { return (xx + yy) == 0 ? 1.0 : 2.0 * xy / (xx + yy); }
};

// The distinct (kernel value, oracle value) pairs among many, each counted once however often it
// occurs: identical rows, GQA heads sharing a KV head and query rows, constant rows repeat one
// pair hundreds of times, and a repeated pair is one piece of evidence, not hundreds.
// A bottom-K sketch: it keeps the kCapacity pairs of least hash. While there are at most that many
// distinct pairs it holds them all (exact); past that, a uniform sample of them, whose size and
// K-th hash estimate how many there are. The kept set depends only on the set of pairs added, so
// sketches filled per thread and merged in any order give the same result, bit for bit.
class DistinctPairs {
 public:
  struct Pair {
    uint64_t hash;
    double oracle;
    float kernel;
  };
  static constexpr size_t kCapacity = size_t{1} << 14;

  // Inline: called once per significant output element, and past the first pairs nearly every
  // call ends at the threshold test.
  void add(float kernel, double oracle) {
    const uint64_t h = hash(kernel, oracle);
    if (h > threshold_) {  // at least kCapacity kept pairs hash lower: never among them
      dropped_ = true;
      return;
    }
    insert(h, kernel, oracle);
  }
  void merge(const DistinctPairs& other);
  // The kept pairs, ordered by hash (then by their bits).
  const std::vector<Pair>& pairs();
  // True while every distinct pair added is kept.
  bool exact();
  // How many distinct pairs were added: exact while exact(), else the sketch's estimate.
  double distinct();

 private:
  static uint64_t hash(float kernel, double oracle) { return pair_hash(kernel, oracle); }  // element_pass.h
  void insert(uint64_t h, float kernel, double oracle);
  void compact();
  std::vector<Pair> items_;
  uint64_t threshold_ = std::numeric_limits<uint64_t>::max();  // a pair hashing above it cannot be kept
  bool dropped_ = false;                                        // some distinct pair was left out
};

// The rounding criteria's figures over the distinct pairs (a sample of them past kCapacity), each
// pair counted once. `distinct` is the evidence they rest on.
struct RoundingEvidence {
  double distinct = 0;      // distinct (kernel, oracle) pairs: exact while the sketch is, else estimated
  double frac_over_n = 0;   // share of them more than ulp_n ULP from the rounded oracle
  // Mean signed error in output ULPs of the exact value, plain and signed by the value (truncation
  // toward zero shows in the second, toward −∞ in the first): the larger in magnitude.
  double bias = 0;
};
RoundingEvidence rounding_evidence(DType d, DistinctPairs& pairs, uint64_t ulp_n);

}  // namespace flashcheck
