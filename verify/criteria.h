// The criteria: a kernel's output (already restricted to the expected rows) against what it is
// expected to be, each criterion measured, limited by the dtype's tolerance and named in the report.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "reference/problem.h"
#include "verify/element_pass.h"
#include "verify/expected.h"
#include "verify/metrics.h"
#include "verify/report.h"
#include "verify/tolerance.h"

namespace flashcheck {

struct KernelResult {
  // Rows are those of the oracle result it is compared with: [B, Hq, oracle.num_rows, Dv], values
  // representable in the problem's dtype. lse, when the kernel has one, is in natural log (a base-2
  // LSE is converted by the caller, from the kernel's declaration, never guessed).
  std::vector<float> o;
  std::optional<std::vector<float>> lse;
};

struct CheckOptions {
  Tolerance tol;
  int64_t tile_q = 128, tile_kv = 128;  // for naming the tile of the worst element
  EmptyRowLse empty_lse = EmptyRowLse::neg_inf;
  bool error_maps = false;  // also fill Report::maps (a second pass over the output, for the HTML page)
  bool timings = false;     // also put the element pass's own steps in Report::timings (the device pass has some)
  // The kernel's O (the span verify_output is given) already in device memory as fp32, for the
  // device element pass to read instead of uploading it; ignored where its size differs.
  const DeviceArray* kernel_o_on_device = nullptr;
};

// The statistical criteria judge only with this many distinct (kernel, oracle) pairs among the
// significant elements; below it they are reported, not judged. ulp keeps the floor it had in
// elements (a correct f16 kernel had 50% beyond 1 ULP on 512 elements); rounding_bias, a mean,
// is sharp sooner: with >= 256 distinct pairs correct runs stay within |0.083| and truncating
// ones are caught more often than by the old 1,024-element floor (verify/TOLERANCE.md).
inline constexpr int64_t kMinDistinctPairsUlp = 1024;
// The cosine of an error `spread` times the one whose cosine is c, for an error orthogonal to the
// truth (cosine 2/(2 + ρ²) at ‖e‖ = ρ‖r‖): c / (c + spread²·(1 − c)). The judges' cosine limits
// follow a baseline by it as rel_l2's follow it by `spread`.
inline double spread_cosine(double c, double spread) {
  return c <= 0 ? c : c / (c + spread * spread * (1.0 - c));
}
inline constexpr const char* kCosineLoosened =
    " (loosened to the cosine of an error 2x the same-dtype baseline's, which is worse than the fixed limit here)";
inline constexpr int64_t kMinDistinctPairsBias = 256;

Report verify_output(const Problem& p, const Expected& ref, const KernelResult& kernel, const CheckOptions& opt);
// The same over the kernel's O where it already is (every row of a file: no copy of it is made).
Report verify_output(const Problem& p, const Expected& ref, std::span<const float> kernel_o,
                     const std::optional<std::vector<float>>& kernel_lse, const CheckOptions& opt);

// What the pass over the output's elements leaves for the judgement: the oracle's scale, the
// merged chunk totals, the rounding criteria's evidence (the kernel's pairs and each baseline's)
// and, for batches whose sequences differ, the per-sequence counts. The host's pass and the
// device's (element_pass_device.h) give the same summary for the same data, bit for bit.
struct ElementSummary {
  double max_ref = 0;
  ElementTotals totals;
  DistinctPairs evidence, eager_evidence, flash_evidence;
  std::vector<SequenceVerdict> sequences;  // LSE rows and the limits are added by the judgement
  std::vector<std::pair<std::string, double>> timings;  // the device pass's steps (wall seconds)
};
ElementSummary host_element_pass(const Problem& p, const Expected& ref, std::span<const float> kernel_o, uint64_t ulp_n);

}  // namespace flashcheck
