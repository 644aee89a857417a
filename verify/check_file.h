// `flashcheck check`: judge a kernel's output file written by any language.
//
// Contract: tensors q [B,Hq,Sq,Dqk], k [B,Hkv,Skv,Dqk], v [B,Hkv,Skv,Dv], o [B,Hq,Sq,Dv], all of one
// dtype (BF16, F16 or F32), optional lse [B,Hq,Sq] F32; __metadata__ keys causal
// (none|top_left|bottom_right, default none), scale (default 1/sqrt(Dqk)), lse_base (e|2, default
// e), empty_row_lse (-inf|+inf, default -inf). Anything else is reported, never guessed.
#pragma once
#include <filesystem>
#include <string>

#include "reference/conventions.h"
#include "verify/expected.h"
#include "verify/report.h"

namespace flashcheck {

struct CheckFileOptions {
  int64_t max_rows = kDefaultMaxRows;  // per (b, h): above this, rows are sampled (first/last 64 + spread)
  int64_t tile_q = 128, tile_kv = 128;
  OracleChoice oracle = OracleChoice::automatic;  // --oracle: cpu, gpu, or auto (the GPU for large problems)
  bool allow_nonfinite_inputs = false;  // NaN/Inf in q/k/v are refused unless asked for
  bool error_maps = false;              // fill Report::maps (for `check --html`)
  bool timings = false;                 // fill Report::timings: where a large check spends its time
};

Report check_file(const std::filesystem::path& path, const CheckFileOptions& opt);

}  // namespace flashcheck
