// The criteria: a kernel's output (already restricted to the expected rows) against what it is
// expected to be, each criterion measured, limited by the dtype's tolerance and named in the report.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "reference/problem.h"
#include "verify/expected.h"
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
};

Report verify_output(const Problem& p, const Expected& ref, const KernelResult& kernel, const CheckOptions& opt);

}  // namespace flashcheck
